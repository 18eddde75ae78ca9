"""Known answers for the activation and normalisation records (values worked out by hand).

None of these operations has a layout input, so there is no NCHW path to test here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import get
from nncert.ops.base import ShapeError, match, to_real
from nncert.ops.evaluate import bind, evaluate, output_shapes
from nncert.testing.cases import sample_case

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
QUANT = [(Q8, 0), (Q8S, -128)]  # the signed type: the same case shifted by -128


def tensor(type_, values, scale=0.0, zero_point=0):
    arr = np.asarray(values, dtype=dtype_of(type_))
    return Operand(type_, arr.shape, scale, zero_point), arr


def scalar(type_, value):
    return Operand(type_), np.asarray(value, dtype=dtype_of(type_))


def check(op, inputs, out_type, scale=0.0, zero_point=0, out_dims=None):
    """The shape rule and validity checks of one operation, as the validator applies them;
    ``inputs`` are (Operand, raw value) pairs; the output has the first input's shape
    unless given. Returns the operands for ``run``."""
    ops, raw = (list(x) for x in zip(*inputs, strict=True))
    out_dims = tuple(ops[0].dimensions if out_dims is None else out_dims)
    out = Operand(out_type, out_dims, scale, zero_point)
    record = get(op)
    assert output_shapes(record, ops, [None] * len(ops), [out]) == [out_dims]
    if record.check:
        record.check(bind(record, ops, [to_real(r, o) for o, r in zip(ops, raw, strict=True)], [out]))
    return ops, raw, out


def run(op, inputs, out_type, scale=0.0, zero_point=0, out_dims=None):
    """Evaluate one operation after ``check``."""
    ops, raw, out = check(op, inputs, out_type, scale, zero_point, out_dims)
    return evaluate(get(op), ops, raw, [out])[0]


def close(got, want, type_=F32):
    assert got.dtype == dtype_of(type_)
    tol = 5 * 2.0**-10 if type_ is F16 else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------
# RELU family


X = [-7.0, -2.0, -0.5, 0.0, 0.5, 3.0, 7.0]


@pytest.mark.parametrize("type_", [F32, F16])
@pytest.mark.parametrize("op, want", [
    (Op.RELU, [0, 0, 0, 0, 0.5, 3, 7]),
    (Op.RELU1, [-1, -1, -0.5, 0, 0.5, 1, 1]),
    (Op.RELU6, [0, 0, 0, 0, 0.5, 3, 6]),
])
def test_relu_family_float(op, want, type_):
    got = run(op, [tensor(type_, X)], type_)
    assert got.dtype == dtype_of(type_)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("type_, off", QUANT)
def test_relu_family_quant_keeps_input_params(type_, off):
    # scale 0.5, zp 120: raw 100 110 118 120 121 130 140 are reals -10 -5 -1 0 0.5 5 10
    x = tensor(type_, np.array([100, 110, 118, 120, 121, 130, 140]) + off, 0.5, 120 + off)
    for op, want in ((Op.RELU, [120, 120, 120, 120, 121, 130, 140]),
                     (Op.RELU1, [118, 118, 118, 120, 121, 122, 122]),
                     (Op.RELU6, [120, 120, 120, 120, 121, 130, 132])):
        assert get(op).signatures[0].outputs[0].quant.kind == "same"
        np.testing.assert_array_equal(run(op, [x], type_, 0.5, 120 + off), np.array(want) + off)


def test_relu_rank_above_four_is_invalid():
    x = Operand(F32, (1, 1, 1, 1, 2))
    with pytest.raises(ShapeError, match="rank 5"):
        output_shapes(get(Op.RELU), [x], [None], [Operand(F32, (1, 1, 1, 1, 2))])


# ---------------------------------------------------------------------------------------
# LOGISTIC, TANH


@pytest.mark.parametrize("type_", [F32, F16])
def test_logistic_float(type_):
    # sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4
    got = run(Op.LOGISTIC, [tensor(type_, [0.0, math.log(3), -math.log(3), 40.0, -40.0])], type_)
    close(got, [0.5, 0.75, 0.25, 1.0, 0.0], type_)


@pytest.mark.parametrize("type_, off", QUANT)
def test_logistic_quant_fixed_output(type_, off):
    # input scale 1/16, zp 128; output 1/256 with zp 0 (unsigned) / -128 (signed)
    x = tensor(type_, np.array([128, 255, 0, 144]) + off, 1 / 16, 128 + off)
    got = run(Op.LOGISTIC, [x], type_, 1 / 256, 0 + off)
    # reals 0, 7.94, -8, 1 -> 0.5*256 = 128, 255.9 -> 255 (saturated), 0.086 -> 0, 187.2 -> 187
    np.testing.assert_array_equal(got, np.array([128, 255, 0, 187]) + off)


@pytest.mark.parametrize("type_, off", QUANT)
@pytest.mark.parametrize("op, scale, zero_point", [
    (Op.LOGISTIC, 1 / 256, 0), (Op.SOFTMAX, 1 / 256, 0), (Op.TANH, 1 / 128, 128),
    (Op.L2_NORMALIZATION, 1 / 128, 128), (Op.RELU, None, None), (Op.RELU6, None, None),
])
def test_mandated_output_quant(op, scale, zero_point, type_, off):
    rec = get(op)
    case = sample_case(rec, rec.signatures[0], next(v for v in rec.variants if v.primary is type_))
    got = (case.outputs[0].scale, case.outputs[0].zero_point)
    if scale is None:  # equal to the input's
        assert got == (case.inputs[0].operand.scale, case.inputs[0].operand.zero_point)
    else:
        assert got == (scale, zero_point + off)


@pytest.mark.parametrize("type_, off", QUANT)
def test_tanh_quant_fixed_output(type_, off):
    # input scale 0.25, zp 128: reals 0, -32, 31.75, 0.5; output 1/128 with zp 128 / 0
    x = tensor(type_, np.array([128, 0, 255, 130]) + off, 0.25, 128 + off)
    got = run(Op.TANH, [x], type_, 1 / 128, 128 + off)
    # tanh(0.5) * 128 = 59.18 -> 59
    np.testing.assert_array_equal(got, np.array([128, 0, 255, 187]) + off)
    var = next(v for v in get(Op.TANH).variants if v.primary is type_)
    assert var.version == (Version.V1_2 if type_ is Q8 else Version.V1_3)


def test_tanh_float():
    # tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6
    close(run(Op.TANH, [tensor(F32, [0.0, math.log(2), -math.log(2)])], F32), [0, 0.6, -0.6])


# ---------------------------------------------------------------------------------------
# HARD_SWISH, ELU


@pytest.mark.parametrize("type_", [F32, F16])
def test_hard_swish_float(type_):
    got = run(Op.HARD_SWISH, [tensor(type_, [-4, -3, -1.5, 0, 1.5, 3, 4])], type_)
    close(got, [0, 0, -0.375, 0, 1.125, 3, 4], type_)


@pytest.mark.parametrize("type_, off", QUANT)
def test_hard_swish_quant(type_, off):
    # input scale 0.5, zp 128: reals -4 -1.5 1.5 4; output scale 0.125, zp 64
    x = tensor(type_, np.array([120, 125, 131, 136]) + off, 0.5, 128 + off)
    got = run(Op.HARD_SWISH, [x], type_, 0.125, 64 + off)
    # 0, -0.375, 1.125, 4 -> 64, 61, 73, 96
    np.testing.assert_array_equal(got, np.array([64, 61, 73, 96]) + off)


@pytest.mark.parametrize("type_, scalar_type", [(F32, T.FLOAT32), (F16, T.FLOAT16)])
def test_elu(type_, scalar_type):
    # alpha 2: elu(-ln 2) = 2 * (1/2 - 1) = -1
    got = run(Op.ELU, [tensor(type_, [-math.log(2), 0.0, 1.5]), scalar(scalar_type, 2.0)], type_)
    close(got, [-1.0, 0.0, 1.5], type_)
    # the alpha scalar must have the input's element type
    with pytest.raises(ShapeError):
        match(get(Op.ELU), [type_, T.FLOAT16 if scalar_type is T.FLOAT32 else T.FLOAT32], [type_])


# ---------------------------------------------------------------------------------------
# PRELU


def test_prelu_float_broadcasts_alpha():
    x = tensor(F32, [[[-2.0, 3.0], [-1.0, -4.0]]])  # shape (1, 2, 2)
    alpha = tensor(F32, [0.5, -1.0])  # per channel
    got = run(Op.PRELU, [x, alpha], F32)
    np.testing.assert_array_equal(got, [[[-1.0, 3.0], [-0.5, 4.0]]])


def test_prelu_alpha_may_be_larger():
    got = run(Op.PRELU, [tensor(F32, [-2.0]), tensor(F32, [[0.5], [2.0]])], F32, out_dims=(2, 1))
    np.testing.assert_array_equal(got, [[-1.0], [-4.0]])


@pytest.mark.parametrize("type_, off", QUANT)
def test_prelu_quant(type_, off):
    # input scale 0.5, zp 128: reals -4, 2; alpha scale 0.25, zp 0, raw 1: 0.25
    x = tensor(type_, np.array([120, 132]) + off, 0.5, 128 + off)
    alpha = tensor(type_, [1 + off], 0.25, 0 + off)
    got = run(Op.PRELU, [x, alpha], type_, 0.25, 100 + off)
    # -1 and 2 -> 96 and 108
    np.testing.assert_array_equal(got, np.array([96, 108]) + off)


# ---------------------------------------------------------------------------------------
# SOFTMAX, LOG_SOFTMAX


def test_softmax_float_last_axis():
    e = np.exp([1.0, 2.0, 3.0])
    got = run(Op.SOFTMAX, [tensor(F32, [[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]), scalar(T.FLOAT32, 1.0)], F32)
    close(got, [e / e.sum(), [1 / 3] * 3])


@pytest.mark.parametrize("axis", [0, -2])
def test_softmax_axis_and_beta(axis):
    # beta = ln 3 on [0, 1] down axis 0: exp weights 1 and 3 -> 1/4, 3/4
    x = tensor(F16, [[0.0, 0.0], [1.0, 1.0]])
    got = run(Op.SOFTMAX, [x, scalar(T.FLOAT16, math.log(3)), scalar(T.INT32, axis)], F16)
    close(got, [[0.25, 0.25], [0.75, 0.75]], F16)


@pytest.mark.parametrize("type_, off", QUANT)
def test_softmax_quant(type_, off):
    # input scale 0.5, zp 100: rows [0, 1] and [2, 2]; beta ln 3
    x = tensor(type_, np.array([[100, 102], [104, 104]]) + off, 0.5, 100 + off)
    got = run(Op.SOFTMAX, [x, scalar(T.FLOAT32, math.log(3))], type_, 1 / 256, 0 + off)
    # [1/4, 3/4] -> 64, 192; [1/2, 1/2] -> 128
    np.testing.assert_array_equal(got, np.array([[64, 192], [128, 128]]) + off)


def test_softmax_rules():
    rec = get(Op.SOFTMAX)
    x = tensor(F32, [[1.0, 2.0]])
    with pytest.raises(ShapeError, match="beta must be positive"):
        run(Op.SOFTMAX, [x, scalar(T.FLOAT32, 0.0)], F32)
    with pytest.raises(ShapeError, match="axis 2 is out of range"):  # the validator's check
        check(Op.SOFTMAX, [x, scalar(T.FLOAT32, 1.0), scalar(T.INT32, 2)], F32)
    # the axis input needs HAL 1.2, even for a 1.0 type
    assert match(rec, [F32, T.FLOAT32], [F32]).version == Version.V1_0
    assert match(rec, [F32, T.FLOAT32, T.INT32], [F32]).version == Version.V1_2
    assert match(rec, [F16, T.FLOAT16], [F16]).version == Version.V1_2
    with pytest.raises(ShapeError):  # FLOAT32 beta with a TENSOR_FLOAT16 input
        match(rec, [F16, T.FLOAT32], [F16])


@pytest.mark.parametrize("op, ranks", [(Op.SOFTMAX, (2, 4)), (Op.L2_NORMALIZATION, (4,)),
                                       (Op.LOCAL_RESPONSE_NORMALIZATION, (4,))])
def test_other_ranks_need_hal_1_2(op, ranks):
    rec = get(op)
    var = next(v for v in rec.variants if v.primary is F32)
    seen = set()
    for seed in range(40):
        case = sample_case(rec, rec.signatures[0], var, seed=seed)
        rank, has_axis = case.inputs[0].operand.rank, len(case.inputs) > len(rec.signatures[0].inputs) - 1
        want = Version.V1_0 if rank in ranks and not has_axis else Version.V1_2
        assert case.version == want
        seen.add(want)
    assert seen == {Version.V1_0, Version.V1_2}


def test_log_softmax():
    # beta 2 on [0, ln 3 / 2]: log(1/4), log(3/4); axis 0 of a column
    x = tensor(F32, [[0.0], [math.log(3) / 2]])
    got = run(Op.LOG_SOFTMAX, [x, scalar(T.FLOAT32, 2.0), scalar(T.INT32, 0)], F32)
    close(got, [[math.log(0.25)], [math.log(0.75)]])
    got = run(Op.LOG_SOFTMAX, [tensor(F16, [1.0, 1.0, 1.0, 1.0]), scalar(T.FLOAT16, 1.0),
                               scalar(T.INT32, -1)], F16)
    close(got, [-math.log(4)] * 4, F16)


# ---------------------------------------------------------------------------------------
# L2_NORMALIZATION


def test_l2_normalization_float():
    got = run(Op.L2_NORMALIZATION, [tensor(F32, [[3.0, 4.0], [0.0, -2.0]])], F32)
    close(got, [[0.6, 0.8], [0.0, -1.0]])
    got = run(Op.L2_NORMALIZATION, [tensor(F32, [[3.0, 0.0], [4.0, 0.0]]), scalar(T.INT32, 0)], F32)
    close(got, [[0.6, 0.0], [0.8, 0.0]])  # an all-zero slice gives zeros (HAL 1.3)


@pytest.mark.parametrize("type_, off", QUANT)
def test_l2_normalization_quant(type_, off):
    # input scale 1, zp 128: [3, 4] and [0, 0]; output 1/128 with zp 128 (unsigned) / 0 (signed)
    x = tensor(type_, np.array([[131, 132], [128, 128]]) + off, 1.0, 128 + off)
    got = run(Op.L2_NORMALIZATION, [x], type_, 1 / 128, 128 + off)
    # 0.6 * 128 = 76.8 -> 77, 0.8 * 128 = 102.4 -> 102
    np.testing.assert_array_equal(got, np.array([[205, 230], [128, 128]]) + off)


def test_l2_normalization_sampler_exercises_zero_slices():
    # Since HAL 1.3 an all-zero slice along the axis is defined (zeros); the signed variant
    # (the only 1.3 one) samples such slices, always along the case's axis.
    rec = get(Op.L2_NORMALIZATION)
    var = next(v for v in rec.variants if v.primary is Q8S)
    found = 0
    for seed in range(40):
        case = sample_case(rec, rec.signatures[0], var, seed=seed)
        x = case.inputs[0]
        axis = int(case.inputs[1].value) if len(case.inputs) > 1 else -1
        at_zero = x.value == x.operand.zero_point
        zero_slice = np.broadcast_to(np.all(at_zero, axis=axis, keepdims=True), x.value.shape)
        np.testing.assert_array_equal(at_zero, zero_slice)  # zeros only as whole slices
        found += bool(zero_slice.any())
        assert np.all(case.expected[0][zero_slice] == 0)
    assert found >= 5


# ---------------------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION


def lrn_inputs(type_, x, radius, bias, alpha, beta, *axis):
    s = T.FLOAT16 if type_ is F16 else T.FLOAT32
    extra = [scalar(T.INT32, a) for a in axis]
    return [tensor(type_, x), scalar(T.INT32, radius), scalar(s, bias), scalar(s, alpha),
            scalar(s, beta), *extra]


@pytest.mark.parametrize("type_", [F32, F16])
def test_lrn_last_axis(type_):
    # radius 1: square sums 1+4, 1+4+9, 4+9+16, 9+16; bias 1, alpha 1, beta 1
    got = run(Op.LOCAL_RESPONSE_NORMALIZATION, lrn_inputs(type_, [[[[1.0, 2.0, 3.0, 4.0]]]], 1, 1, 1, 1),
              type_)
    close(got, [[[[1 / 6, 2 / 15, 3 / 30, 4 / 26]]]], type_)


def test_lrn_axis_radius_and_beta():
    # axis 0 of a (3, 1) column, bias 2, alpha 0.5, beta 0.5. Radius 5 (beyond the slice)
    # covers it all: x / sqrt(2 + 0.5 * 9); radius 0: x / sqrt(2 + 0.5 * x^2)
    x = [[1.0], [2.0], [-2.0]]
    got = run(Op.LOCAL_RESPONSE_NORMALIZATION, lrn_inputs(F32, x, 5, 2.0, 0.5, 0.5, 0), F32)
    close(got, np.array(x) / math.sqrt(6.5))
    got = run(Op.LOCAL_RESPONSE_NORMALIZATION, lrn_inputs(F32, x, 0, 2.0, 0.5, 0.5, -2), F32)
    close(got, [[1 / math.sqrt(2.5)], [2 / 2.0], [-2 / 2.0]])


def test_lrn_axis_needs_hal_1_2_and_range():
    rec = get(Op.LOCAL_RESPONSE_NORMALIZATION)
    base = [F32, T.INT32, T.FLOAT32, T.FLOAT32, T.FLOAT32]
    assert match(rec, base, [F32]).version == Version.V1_0
    assert match(rec, [*base, T.INT32], [F32]).version == Version.V1_2
    with pytest.raises(ShapeError, match="axis -3 is out of range"):
        check(Op.LOCAL_RESPONSE_NORMALIZATION, lrn_inputs(F32, [[1.0]], 1, 1, 1, 1, -3), F32)
