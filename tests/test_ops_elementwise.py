"""Known answers for the element-wise and logical records (values worked out by hand)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import get
from nncert.ops.base import ShapeError, match
from nncert.ops.evaluate import bind, evaluate, output_shapes

F32, F16, I32, B8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def tensor(type_, values, scale=0.0, zero_point=0):
    arr = np.asarray(values, dtype=dtype_of(type_))
    return Operand(type_, arr.shape, scale, zero_point), arr


def scalar(value):
    return Operand(T.INT32), np.asarray(value, dtype=np.int32)


def run(op, inputs, out_type, out_dims, scale=0.0, zero_point=0):
    """Evaluate one operation; ``inputs`` are (Operand, raw value) pairs."""
    out = Operand(out_type, tuple(out_dims), scale, zero_point)
    ops, raw = zip(*inputs, strict=True)
    record = get(op)
    shapes = output_shapes(record, list(ops), [None] * len(ops), [out])
    assert shapes == [tuple(out_dims)]
    return evaluate(record, list(ops), list(raw), [out])[0]


# ---------------------------------------------------------------------------------------
# MAXIMUM / MINIMUM


def test_maximum_float_broadcast():
    got = run(Op.MAXIMUM, [tensor(F32, [[1, -2], [3, 0.5]]), tensor(F32, [0, 1])], F32, (2, 2))
    np.testing.assert_array_equal(got, np.array([[1, 1], [3, 1]], np.float32))


def test_minimum_int32_broadcast():
    got = run(Op.MINIMUM, [tensor(I32, [5, -3, 0]), tensor(I32, [2])], I32, (3,))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [2, -3, 0])


@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_maximum_minimum_quant_compare_real_values(type_, off):
    # input0 (scale 0.5, zp 128): reals 1, -1, 0; input1 (scale 0.25, zp 100): 0.5, 2, -1
    a = tensor(type_, np.array([130, 126, 128]) + off, 0.5, 128 + off)
    b = tensor(type_, np.array([102, 108, 96]) + off, 0.25, 100 + off)
    # output scale 0.1, zp 50: real r -> 50 + 10 r
    got = run(Op.MAXIMUM, [a, b], type_, (3,), 0.1, 50 + off)
    np.testing.assert_array_equal(got, np.array([60, 70, 50]) + off)  # max: 1, 2, 0
    got = run(Op.MINIMUM, [a, b], type_, (3,), 0.1, 50 + off)
    np.testing.assert_array_equal(got, np.array([55, 40, 40]) + off)  # min: 0.5, -1, -1


def test_maximum_has_no_activation_input():
    rec = get(Op.MAXIMUM)
    assert rec.activation is None and len(rec.signatures[0].inputs) == 2


# ---------------------------------------------------------------------------------------
# Unary maths


@pytest.mark.parametrize("type_", [F32, F16])
def test_abs_neg_float(type_):
    x = tensor(type_, [-1.5, 0.0, 2.0])
    np.testing.assert_array_equal(run(Op.ABS, [x], type_, (3,)), [1.5, 0.0, 2.0])
    np.testing.assert_array_equal(run(Op.NEG, [x], type_, (3,)), [1.5, 0.0, -2.0])


def test_abs_neg_int32():
    x = tensor(I32, [[-7, 3], [0, -1]])
    got = run(Op.ABS, [x], I32, (2, 2))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[7, 3], [0, 1]])
    np.testing.assert_array_equal(run(Op.NEG, [x], I32, (2, 2)), [[7, -3], [0, 1]])


@pytest.mark.parametrize("type_", [F32, F16])
def test_floor(type_):
    x = tensor(type_, [-1.5, -1.0, 0.25, 2.0, -0.125, 0.999])
    got = run(Op.FLOOR, [x], type_, (6,))
    assert got.dtype == dtype_of(type_)
    np.testing.assert_array_equal(got, [-2, -1, 0, 2, -1, 0])


@pytest.mark.parametrize("op, x, want", [
    (Op.EXP, [0.0, 1.0, -1.0], [1.0, math.e, 1 / math.e]),
    (Op.LOG, [1.0, math.e ** 2, 0.5], [0.0, 2.0, -math.log(2)]),
    (Op.SQRT, [4.0, 0.25, 2.0], [2.0, 0.5, math.sqrt(2)]),
    (Op.RSQRT, [4.0, 0.25, 1.0], [0.5, 2.0, 1.0]),
    (Op.SIN, [0.0, math.pi / 2, -math.pi / 6], [0.0, 1.0, -0.5]),
])
def test_transcendental_float32(op, x, want):
    got = run(op, [tensor(F32, x)], F32, (3,))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_rsqrt_quant(type_, off):
    # input scale 0.25: reals 4, 1, 0.25 -> 0.5, 1, 2; output scale 0.125: 4, 8, 16 (+ zp)
    x = tensor(type_, np.array([16, 4, 1]) + off, 0.25, off)
    got = run(Op.RSQRT, [x], type_, (3,), 0.125, 0 + off)
    np.testing.assert_array_equal(got, np.array([4, 8, 16]) + off)


# ---------------------------------------------------------------------------------------
# Comparisons and logic


_CMP = {Op.EQUAL: [False, True, False], Op.NOT_EQUAL: [True, False, True],
        Op.LESS: [True, False, False], Op.LESS_EQUAL: [True, True, False],
        Op.GREATER: [False, False, True], Op.GREATER_EQUAL: [False, True, True]}


@pytest.mark.parametrize("op", list(_CMP))
@pytest.mark.parametrize("type_", [F32, F16, I32])
def test_comparisons_broadcast(op, type_):
    got = run(op, [tensor(type_, [1, 2, 3]), tensor(type_, [2])], B8, (3,))
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, _CMP[op])


@pytest.mark.parametrize("op", list(_CMP))
@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_comparisons_quant_different_scales(op, type_, off):
    # input0: scale 1, zp 128 -> reals 1, 2, 3
    a = tensor(type_, np.array([129, 130, 131]) + off, 1.0, 128 + off)
    # input1: scale 0.5, zp 10 -> raw 14 is real 2 (a raw comparison would say otherwise)
    b = tensor(type_, np.array([14]) + off, 0.5, 10 + off)
    np.testing.assert_array_equal(run(op, [a, b], B8, (3,)), _CMP[op])


def test_comparison_bool8():
    a, b = tensor(B8, [True, True, False, False]), tensor(B8, [True, False, True, False])
    np.testing.assert_array_equal(run(Op.GREATER, [a, b], B8, (4,)), [False, True, False, False])
    np.testing.assert_array_equal(run(Op.EQUAL, [a, b], B8, (4,)), [True, False, False, True])


def test_logical_ops():
    a, b = tensor(B8, [[True, False], [True, True]]), tensor(B8, [True, False])
    np.testing.assert_array_equal(run(Op.LOGICAL_AND, [a, b], B8, (2, 2)),
                                  [[True, False], [True, False]])
    np.testing.assert_array_equal(run(Op.LOGICAL_OR, [a, b], B8, (2, 2)),
                                  [[True, False], [True, True]])
    np.testing.assert_array_equal(run(Op.LOGICAL_NOT, [b], B8, (2,)), [False, True])


def test_select_float_and_int():
    c = tensor(B8, [True, False, True])
    got = run(Op.SELECT, [c, tensor(F32, [1, 2, 3]), tensor(F32, [10, 20, 30])], F32, (3,))
    np.testing.assert_array_equal(got, [1, 20, 3])
    got = run(Op.SELECT, [c, tensor(I32, [1, 2, 3]), tensor(I32, [10, 20, 30])], I32, (3,))
    np.testing.assert_array_equal(got, [1, 20, 3])


@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_select_quant_requantises(type_, off):
    c = tensor(B8, [True, False, True])
    x = tensor(type_, np.array([2, 4, 6]) + off, 0.5, off)  # 1, 2, 3
    y = tensor(type_, np.array([20, 30, 40]) + off, 1.0, 10 + off)  # 10, 20, 30
    got = run(Op.SELECT, [c, x, y], type_, (3,), 0.5, 5 + off)  # 1, 20, 3 -> 7, 45, 11
    np.testing.assert_array_equal(got, np.array([7, 45, 11]) + off)


# ---------------------------------------------------------------------------------------
# Validity rules and declarations


def test_select_rejects_broadcasting():
    rec = get(Op.SELECT)
    ins = [Operand(B8, (2, 3)), Operand(F32, (2, 3)), Operand(F32, (1, 3))]
    with pytest.raises(ShapeError, match="input2"):
        output_shapes(rec, ins, [None] * 3, [Operand(F32, (2, 3))])


def test_int32_add_rejects_activation():
    rec = get(Op.ADD)
    ins = [Operand(I32, (2,)), Operand(I32, (2,)), Operand(T.INT32)]
    outs = [Operand(I32, (2,))]
    ctx = bind(rec, ins, [None, None, 1], outs, match(rec, [o.type for o in ins], [I32]))
    with pytest.raises(ShapeError, match="act"):
        rec.check(ctx)


def test_div_int32_floors():
    got = run(Op.DIV, [tensor(I32, [7, -7, 6]), tensor(I32, [2, 2, -4]), scalar(0)], I32, (3,))
    np.testing.assert_array_equal(got, [3, -4, -2])


@pytest.mark.parametrize("op, type_, version", [
    (Op.ABS, I32, Version.V1_3), (Op.ABS, F32, Version.V1_2), (Op.NEG, I32, Version.V1_2),
    (Op.FLOOR, F32, Version.V1_0), (Op.FLOOR, F16, Version.V1_2),
    (Op.RSQRT, Q8, Version.FL7), (Op.RSQRT, Q8S, Version.FL7), (Op.RSQRT, F16, Version.V1_2),
    (Op.MAXIMUM, Q8S, Version.V1_3), (Op.MINIMUM, I32, Version.V1_2),
    (Op.EQUAL, B8, Version.V1_2), (Op.LESS, Q8S, Version.V1_3),
    (Op.SELECT, Q8, Version.V1_2), (Op.SELECT, Q8S, Version.V1_3),
])
def test_variant_versions(op, type_, version):
    assert {v.primary: v.version for v in get(op).variants}[type_] is version


@pytest.mark.parametrize("op", [Op.SQRT, Op.LOG, Op.EXP, Op.SIN])
def test_float_only(op):
    assert {v.primary for v in get(op).variants} == {F32, F16}
