"""Known answers for the shape and data-movement records (values worked out by hand).

None of these operations has a layout input, so there is no NCHW path to test here; the
quantised paths are covered by CONCATENATION (requantisation), PAD (logical zero),
PAD_V2 (stored-integer pad value) and the plain copies.
"""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import ValidationError
from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.hal.validation import validate_model
from nncert.ops import get
from nncert.ops.base import ShapeError, match, to_real
from nncert.ops.evaluate import bind, evaluate, instance_version, output_shapes
from nncert.ops.interpreter import run_model
from nncert.testing.cases import sample_case

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def tensor(type_, values, scale=0.0, zero_point=0):
    arr = np.asarray(values, dtype=dtype_of(type_))
    return Operand(type_, arr.shape, scale, zero_point), arr


def ints(values):
    return tensor(I32, values)


def scalar(type_, value):
    return Operand(type_), np.asarray(value, dtype=dtype_of(type_))


def omitted():
    return None, None


def _bound(op, inputs, out_type, scale, zero_point):
    ops = [o for o, _ in inputs]
    raw = [r for _, r in inputs]
    real = [None if o is None else to_real(r, o) for o, r in zip(ops, raw, strict=True)]
    record = get(op)
    probe = Operand(out_type, (), scale, zero_point)
    shapes = output_shapes(record, ops, real, [probe])
    out = Operand(out_type, shapes[0], scale, zero_point)
    if record.check:
        record.check(bind(record, ops, real, [out]))
    return record, ops, raw, real, out


def run(op, inputs, out_type, scale=0.0, zero_point=0):
    """Evaluate one operation after its shape rule and checks; ``inputs`` are (Operand, raw)
    pairs, (None, None) for an omitted optional input. Returns the raw output array."""
    record, ops, raw, _, out = _bound(op, inputs, out_type, scale, zero_point)
    got = evaluate(record, ops, raw, [out])[0]
    assert got.shape == out.dimensions and got.dtype == dtype_of(out_type)
    return got


def invalid(op, inputs, out_type=F32, scale=0.0, zero_point=0):
    with pytest.raises(ShapeError):
        _bound(op, inputs, out_type, scale, zero_point)


def version_of(op, inputs, out_type, scale=0.0, zero_point=0):
    record, ops, _, real, out = _bound(op, inputs, out_type, scale, zero_point)
    m = match(record, [None if o is None else o.type for o in ops], [out_type])
    return instance_version(bind(record, ops, real, [out], m))


# ---------------------------------------------------------------------------------------
# RESHAPE


def test_reshape_infers_the_minus_one_entry():
    x = np.arange(6.0).reshape(2, 3)
    got = run(Op.RESHAPE, [tensor(F32, x), ints([3, -1])], F32)
    np.testing.assert_array_equal(got, [[0, 1], [2, 3], [4, 5]])
    got = run(Op.RESHAPE, [tensor(F16, x), ints([-1])], F16)
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 4, 5])


@pytest.mark.parametrize("type_", [Q8, Q8S, I32])
def test_reshape_copies_stored_values(type_):
    q = [[3, 250], [7, 0]] if type_ is Q8 else [[3, 120], [-7, -128]]
    scale = 0.25 if type_ is not I32 else 0.0
    got = run(Op.RESHAPE, [tensor(type_, q, scale, 5 if type_ is Q8 else 0), ints([1, 4, 1])],
              type_, scale, 5 if type_ is Q8 else 0)
    np.testing.assert_array_equal(got.reshape(-1), np.asarray(q).reshape(-1))
    assert got.shape == (1, 4, 1)


@pytest.mark.parametrize("shape", [[4, 2], [-1, -1], [5, -1], [0, -1], [-2, 3], [1, 1, 1, 1, 6]])
def test_reshape_rejects_bad_shapes(shape):
    invalid(Op.RESHAPE, [tensor(F32, np.zeros((2, 3))), ints(shape)])


# ---------------------------------------------------------------------------------------
# CONCATENATION


def test_concatenation_float_along_axis_1():
    a = tensor(F32, [[1.0, 2.0], [3.0, 4.0]])
    b = tensor(F32, [[5.0], [6.0]])
    got = run(Op.CONCATENATION, [a, b, scalar(T.INT32, 1)], F32)
    np.testing.assert_array_equal(got, [[1, 2, 5], [3, 4, 6]])
    got = run(Op.CONCATENATION, [a, a, a, scalar(T.INT32, 0)], F32)
    np.testing.assert_array_equal(got, [[1, 2], [3, 4]] * 3)


def test_concatenation_requantises_inputs_to_the_output():
    a = tensor(Q8, [2, 4], 0.5, 0)  # real 1, 2
    b = tensor(Q8, [13, 9], 1.0, 10)  # real 3, -1
    got = run(Op.CONCATENATION, [a, b, scalar(T.INT32, 0)], Q8, 0.5, 0)
    np.testing.assert_array_equal(got, [2, 4, 6, 0])  # -1 saturates to 0
    s = tensor(Q8S, [-126, -124], 0.5, -128)
    t = tensor(Q8S, [-115, -119], 1.0, -118)
    got = run(Op.CONCATENATION, [s, t, scalar(T.INT32, 0)], Q8S, 0.5, -128)
    np.testing.assert_array_equal(got, [-126, -124, -122, -128])


def test_concatenation_quant8_with_differing_parameters_needs_hal_1_2():
    a = tensor(Q8, [2, 4], 0.5, 0)
    same = tensor(Q8, [9], 0.5, 0)
    other = tensor(Q8, [9], 1.0, 0)
    assert version_of(Op.CONCATENATION, [a, same, scalar(T.INT32, 0)], Q8, 0.5, 0) == Version.V1_0
    assert version_of(Op.CONCATENATION, [a, other, scalar(T.INT32, 0)], Q8, 0.5, 0) == Version.V1_2
    assert version_of(Op.CONCATENATION, [a, same, scalar(T.INT32, 0)], Q8, 0.25, 0) == Version.V1_2


def test_concatenation_rejects_mismatched_shapes_and_axes():
    a = tensor(F32, np.zeros((2, 2)))
    invalid(Op.CONCATENATION, [a, tensor(F32, np.zeros((3, 1))), scalar(T.INT32, 1)])
    invalid(Op.CONCATENATION, [a, tensor(F32, np.zeros(2)), scalar(T.INT32, 0)])
    invalid(Op.CONCATENATION, [a, a, scalar(T.INT32, 2)])
    invalid(Op.CONCATENATION, [a, a, scalar(T.INT32, -1)])


# ---------------------------------------------------------------------------------------
# PAD, PAD_V2


def test_pad_float_with_zeros():
    got = run(Op.PAD, [tensor(F32, [[1.0, 2.0]]), ints([[1, 0], [0, 2]])], F32)
    np.testing.assert_array_equal(got, [[0, 0, 0, 0], [1, 2, 0, 0]])


@pytest.mark.parametrize("type_, zp", [(Q8, 3), (Q8S, -5)])
def test_pad_quantised_pads_with_the_zero_point(type_, zp):
    got = run(Op.PAD, [tensor(type_, [7, 9], 0.1, zp), ints([[2, 1]])], type_, 0.1, zp)
    np.testing.assert_array_equal(got, [zp, zp, 7, 9, zp])


def test_pad_quant8_padding_needs_hal_1_2():
    x = tensor(Q8, [[7, 9]], 0.1, 3)
    assert version_of(Op.PAD, [x, ints([[0, 0], [0, 1]])], Q8, 0.1, 3) == Version.V1_2
    assert version_of(Op.PAD, [x, ints([[0, 0], [0, 0]])], Q8, 0.1, 3) == Version.V1_1
    f = tensor(F32, [[7.0, 9.0]])
    assert version_of(Op.PAD, [f, ints([[0, 0], [0, 1]])], F32) == Version.V1_1


def test_an_output_too_large_fails_before_the_kernel_allocates_it():
    """Found by the execute fuzz target: paddings given as a model input, overwritten with
    0x31af0855 (2.9 G elements), made the reference allocate until the OOM killer came. An
    output over MAX_OUTPUT_ELEMENTS is now GENERAL_FAILURE, before the kernel runs."""
    from nncert.hal.errors import HalError
    from nncert.hal.types import ErrorStatus
    from nncert.ops.base import MAX_OUTPUT_ELEMENTS

    b = ModelBuilder()
    x, pads = b.operand(T.TENSOR_FLOAT32, (1, 2)), b.operand(T.TENSOR_INT32, (2, 2))
    out = b.operand(T.TENSOR_FLOAT32, (0, 0))
    b.operation(Op.PAD, [x, pads], [out])
    model = b.build([x, pads], [out])
    x_value = np.ones((1, 2), np.float32)
    assert run_model(model, [x_value, np.array([[0, 0], [0, 3]], np.int32)])[0].shape == (1, 5)
    with pytest.raises(HalError) as e:
        run_model(model, [x_value, np.array([[0, 0], [0, MAX_OUTPUT_ELEMENTS]], np.int32)])
    assert e.value.status is ErrorStatus.GENERAL_FAILURE and "16,777,218 elements" in e.value.message


def test_pad_v2_float_value():
    got = run(Op.PAD_V2, [tensor(F32, [1.0, 2.0]), ints([[1, 2]]), scalar(T.FLOAT32, 9.5)], F32)
    np.testing.assert_array_equal(got, [9.5, 1, 2, 9.5, 9.5])
    got = run(Op.PAD_V2, [tensor(F16, [[1.0]]), ints([[0, 1], [1, 0]]), scalar(T.FLOAT16, -0.5)], F16)
    np.testing.assert_array_equal(got, [[-0.5, 1.0], [-0.5, -0.5]])


@pytest.mark.parametrize("type_, zp, pad", [(Q8, 3, 200), (Q8S, -5, -100)])
def test_pad_v2_quantised_value_is_a_stored_integer(type_, zp, pad):
    x = tensor(type_, [[7, 9]], 0.1, zp)
    got = run(Op.PAD_V2, [x, ints([[1, 0], [0, 1]]), scalar(T.INT32, pad)], type_, 0.1, zp)
    np.testing.assert_array_equal(got, [[pad, pad, pad], [7, 9, pad]])


def test_pad_v2_pad_value_type_follows_the_tensor_type():
    sig = get(Op.PAD_V2).signatures[0]
    want = {F32: T.FLOAT32, F16: T.FLOAT16, Q8: T.INT32, Q8S: T.INT32}
    for v in get(Op.PAD_V2).variants:
        assert sig.arg("pad_value").resolve(v.types) is want[v.primary]


@pytest.mark.parametrize("paddings", [[[1, -1]], [[1, 1], [0, 0]], [1, 1]])
def test_pad_rejects_bad_paddings(paddings):
    invalid(Op.PAD, [tensor(F32, [1.0, 2.0]), ints(paddings)])


# ---------------------------------------------------------------------------------------
# SQUEEZE, EXPAND_DIMS


def test_squeeze():
    x = tensor(F32, np.arange(6.0).reshape(1, 2, 1, 3))
    assert run(Op.SQUEEZE, [x, omitted()], F32).shape == (2, 3)
    assert run(Op.SQUEEZE, [x], F32).shape == (2, 3)
    assert run(Op.SQUEEZE, [x, ints([2])], F32).shape == (1, 2, 3)
    assert run(Op.SQUEEZE, [x, ints([-4])], F32).shape == (2, 1, 3)
    got = run(Op.SQUEEZE, [x, ints([0, 2])], F32)
    np.testing.assert_array_equal(got, [[0, 1, 2], [3, 4, 5]])
    ones = tensor(Q8, [[[5]]], 0.5, 1)
    np.testing.assert_array_equal(run(Op.SQUEEZE, [ones, omitted()], Q8, 0.5, 1), [5])  # shape [1]
    invalid(Op.SQUEEZE, [x, ints([1])])  # size 2
    invalid(Op.SQUEEZE, [x, ints([4])])


def test_expand_dims():
    x = tensor(I32, [[1, 2, 3], [4, 5, 6]])
    assert run(Op.EXPAND_DIMS, [x, scalar(T.INT32, 0)], I32).shape == (1, 2, 3)
    assert run(Op.EXPAND_DIMS, [x, scalar(T.INT32, 1)], I32).shape == (2, 1, 3)
    got = run(Op.EXPAND_DIMS, [x, scalar(T.INT32, -1)], I32)
    np.testing.assert_array_equal(got, [[[1], [2], [3]], [[4], [5], [6]]])
    assert run(Op.EXPAND_DIMS, [x, scalar(T.INT32, -3)], I32).shape == (1, 2, 3)
    invalid(Op.EXPAND_DIMS, [x, scalar(T.INT32, 3)], I32)
    invalid(Op.EXPAND_DIMS, [x, scalar(T.INT32, -4)], I32)


# ---------------------------------------------------------------------------------------
# TRANSPOSE


def test_transpose_default_is_the_matrix_transpose():
    got = run(Op.TRANSPOSE, [tensor(F32, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), omitted()], F32)
    np.testing.assert_array_equal(got, [[1, 4], [2, 5], [3, 6]])


def test_transpose_with_perm():
    x = tensor(Q8S, np.arange(6).reshape(1, 2, 3), 0.5, 0)
    got = run(Op.TRANSPOSE, [x, ints([2, 0, 1])], Q8S, 0.5, 0)
    # output[c, 0, h] = input[0, h, c]
    np.testing.assert_array_equal(got, [[[0, 3]], [[1, 4]], [[2, 5]]])
    invalid(Op.TRANSPOSE, [x, ints([0, 0, 1])], Q8S, 0.5, 0)
    invalid(Op.TRANSPOSE, [x, ints([1, 0])], Q8S, 0.5, 0)


# ---------------------------------------------------------------------------------------
# STRIDED_SLICE


def strided(x, begin, end, strides, begin_mask=0, end_mask=0, shrink=0, type_=F32):
    return run(Op.STRIDED_SLICE, [tensor(type_, x), ints(begin), ints(end), ints(strides),
                                  scalar(T.INT32, begin_mask), scalar(T.INT32, end_mask),
                                  scalar(T.INT32, shrink)], type_)


def test_strided_slice_1d():
    x = [1.0, 2.0, 3.0, 4.0]
    np.testing.assert_array_equal(strided(x, [-3], [3], [1]), [2, 3])
    np.testing.assert_array_equal(strided(x, [0], [9], [2]), [1, 3])  # end clamps to 4
    np.testing.assert_array_equal(strided(x, [-1], [-5], [-1]), [4, 3, 2, 1])  # end before 0
    np.testing.assert_array_equal(strided(x, [2], [0], [-1]), [3, 2])
    np.testing.assert_array_equal(strided(x, [3], [3], [1], begin_mask=1), [1, 2, 3])
    np.testing.assert_array_equal(strided(x, [3], [2], [-2], end_mask=1), [4, 2])
    np.testing.assert_array_equal(strided(x, [9], [0], [-1]), [4, 3, 2])  # begin clamps to 3
    np.testing.assert_array_equal(strided(x, [1], [9], [-1]), np.zeros(0))


def test_strided_slice_2d_masks_and_shrink():
    x = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    got = strided(x, [1, 0], [2, 3], [1, 1], shrink=1)
    assert got.shape == (3,)
    np.testing.assert_array_equal(got, [4, 5, 6])
    got = strided(x, [1, 0], [2, 0], [1, -1], begin_mask=2, end_mask=2)  # dim 1: all, reversed
    np.testing.assert_array_equal(got, [[6, 5, 4]])
    got = strided(x, [1, -1], [2, 0], [1, -1], begin_mask=1)  # dim 0 from 0; dim 1 from 2 to 1
    np.testing.assert_array_equal(got, [[3, 2], [6, 5]])
    got = strided(x, [0, 2], [1, 3], [1, 1], shrink=3)
    assert got.shape == (1,) and got[0] == 3  # every dimension shrunk: shape [1]
    got = strided(np.arange(12.0).reshape(3, 4), [0, 1], [3, 4], [2, 2], type_=F16)
    np.testing.assert_array_equal(got, [[1, 3], [9, 11]])


def test_strided_slice_rejects_zero_strides_and_wide_shrinks():
    x = tensor(F32, [[1.0, 2.0, 3.0]])
    m = [scalar(T.INT32, 0), scalar(T.INT32, 0)]
    invalid(Op.STRIDED_SLICE, [x, ints([0, 0]), ints([1, 3]), ints([1, 0]), *m, scalar(T.INT32, 0)])
    invalid(Op.STRIDED_SLICE, [x, ints([0, 0]), ints([1, 3]), ints([1, 1]), *m, scalar(T.INT32, 2)])
    invalid(Op.STRIDED_SLICE, [x, ints([0]), ints([1]), ints([1]), *m, scalar(T.INT32, 0)])


def test_strided_slice_quantised_copies():
    x = tensor(Q8, [10, 20, 30, 40, 50], 0.3, 17)
    got = run(Op.STRIDED_SLICE, [x, ints([4]), ints([0]), ints([-2]), scalar(T.INT32, 0),
                                 scalar(T.INT32, 0), scalar(T.INT32, 0)], Q8, 0.3, 17)
    np.testing.assert_array_equal(got, [50, 30])


# ---------------------------------------------------------------------------------------
# SLICE, TILE, GATHER


def test_slice():
    x = tensor(F32, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    got = run(Op.SLICE, [x, ints([0, 1]), ints([-1, 2])], F32)
    np.testing.assert_array_equal(got, [[2, 3], [5, 6]])
    q = tensor(Q8S, [[1, 2, 3], [4, 5, 6]], 0.1, -3)
    np.testing.assert_array_equal(run(Op.SLICE, [q, ints([1, 0]), ints([1, 1])], Q8S, 0.1, -3), [[4]])
    invalid(Op.SLICE, [x, ints([0, 2]), ints([1, 2])])
    invalid(Op.SLICE, [x, ints([-1, 0]), ints([1, 1])])
    invalid(Op.SLICE, [x, ints([0, 0]), ints([1, -2])])
    invalid(Op.SLICE, [x, ints([0]), ints([1])])


def test_tile():
    np.testing.assert_array_equal(run(Op.TILE, [tensor(I32, [1, 2, 3]), ints([2])], I32),
                                  [1, 2, 3, 1, 2, 3])
    got = run(Op.TILE, [tensor(F16, [[1.0, 2.0], [3.0, 4.0]]), ints([2, 1])], F16)
    np.testing.assert_array_equal(got, [[1, 2], [3, 4], [1, 2], [3, 4]])
    got = run(Op.TILE, [tensor(Q8, [[7, 8]], 0.2, 4), ints([1, 2])], Q8, 0.2, 4)
    np.testing.assert_array_equal(got, [[7, 8, 7, 8]])
    invalid(Op.TILE, [tensor(I32, [1, 2]), ints([1, 1])], I32)


def test_gather():
    x = tensor(F32, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    got = run(Op.GATHER, [x, scalar(T.INT32, 0), ints([2, 0])], F32)
    np.testing.assert_array_equal(got, [[5, 6], [1, 2]])
    got = run(Op.GATHER, [x, scalar(T.INT32, -1), ints([[1], [0]])], F32)
    # output[a, i, j] = input[a, indices[i, j]]
    np.testing.assert_array_equal(got, [[[2], [1]], [[4], [3]], [[6], [5]]])
    q = tensor(Q8, [9, 8, 7], 0.5, 2)
    np.testing.assert_array_equal(run(Op.GATHER, [q, scalar(T.INT32, 0), ints([[2, 2], [1, 0]])],
                                      Q8, 0.5, 2), [[7, 7], [8, 9]])
    invalid(Op.GATHER, [x, scalar(T.INT32, 0), ints([3])])
    invalid(Op.GATHER, [x, scalar(T.INT32, 2), ints([0])])


def test_gather_indices_out_of_bounds_fail_at_validation_or_execution():
    b = ModelBuilder()
    x = b.constant(F32, np.array([1.0, 2.0, 3.0], np.float32))
    axis = b.constant(T.INT32, 0)
    idx = b.operand(I32, (2,))
    out = b.operand(F32, (2,))
    b.operation(Op.GATHER, [x, axis, idx], [out])
    model = b.build([idx], [out])
    validate_model(model)  # indices are a runtime input: unknown here
    np.testing.assert_array_equal(run_model(model, [np.array([2, 0], np.int32)])[0], [3, 1])
    with pytest.raises(Exception, match="indices"):
        run_model(model, [np.array([3, 0], np.int32)])
    b = ModelBuilder()
    x = b.constant(F32, np.array([1.0, 2.0, 3.0], np.float32))
    axis = b.constant(T.INT32, 0)
    idx = b.constant(I32, np.array([-1], np.int32))
    out = b.operand(F32, (1,))
    b.operation(Op.GATHER, [x, axis, idx], [out])
    with pytest.raises(ValidationError):
        validate_model(b.build([], [out]))


# ---------------------------------------------------------------------------------------
# Declarations


@pytest.mark.parametrize("op, table", [
    (Op.RESHAPE, {F32: Version.V1_0, Q8: Version.V1_0, F16: Version.V1_2, Q8S: Version.V1_3,
                  I32: Version.FL6}),
    (Op.CONCATENATION, {F32: Version.V1_0, Q8: Version.V1_0, F16: Version.V1_2, Q8S: Version.V1_3}),
    (Op.PAD, {F32: Version.V1_1, Q8: Version.V1_1, F16: Version.V1_2, Q8S: Version.V1_3}),
    (Op.PAD_V2, {F32: Version.V1_2, Q8: Version.V1_2, F16: Version.V1_2, Q8S: Version.V1_3}),
    (Op.STRIDED_SLICE, {F32: Version.V1_1, Q8: Version.V1_1, F16: Version.V1_2, Q8S: Version.V1_3}),
    (Op.GATHER, {F32: Version.V1_2, Q8: Version.V1_2, F16: Version.V1_2, I32: Version.V1_2,
                 Q8S: Version.V1_3}),
])
def test_declared_variants(op, table):
    assert {v.primary: v.version for v in get(op).variants} == table


def test_sampled_cases_keep_shape_parameters_constant():
    for op, names in ((Op.RESHAPE, {"shape"}), (Op.PAD, {"paddings"}),
                      (Op.STRIDED_SLICE, {"begin", "end", "strides"}), (Op.TILE, {"multiples"})):
        rec = get(op)
        for seed in range(5):
            case = sample_case(rec, rec.signatures[0], rec.variants[0], seed=seed)
            assert all(ci.const for ci in case.inputs if ci.arg.name in names)


def _quant_model(op, in_q, out_q, extra):
    """A one-operation model: a constant [2] quantised input, ``extra`` constant parameters."""
    b = ModelBuilder()
    x = b.constant(Q8, np.array([1, 2], np.uint8), *in_q)
    params = [b.constant(t, v) for t, v in extra]
    out = b.operand(Q8, (), *out_q)
    b.operation(op, [x, *params], [out])
    return b.build([], [out])


def test_validator_quant_rules():
    # CONCATENATION (since HAL 1.2) may change the quantisation; PAD may not.
    validate_model(_quant_model(Op.CONCATENATION, (0.5, 3), (0.25, 7), [(T.INT32, 0)]))
    validate_model(_quant_model(Op.PAD, (0.5, 3), (0.5, 3), [(I32, np.array([[1, 1]], np.int32))]))
    with pytest.raises(ValidationError, match="operation-quant"):
        validate_model(_quant_model(Op.PAD, (0.5, 3), (0.25, 3), [(I32, np.array([[1, 1]], np.int32))]))


def test_sampled_hal_1_0_quant8_concatenations_share_parameters():
    rec = get(Op.CONCATENATION)
    var = next(v for v in rec.variants if v.primary is Q8)
    versions = set()
    for seed in range(30):
        case = sample_case(rec, rec.signatures[0], var, seed=seed)
        params = {(ci.operand.scale, ci.operand.zero_point) for ci in case.inputs if ci.arg.name == "input"}
        params.add((case.outputs[0].scale, case.outputs[0].zero_point))
        assert (case.version == Version.V1_0) == (len(params) == 1)
        versions.add(case.version)
    assert versions == {Version.V1_0, Version.V1_2}
