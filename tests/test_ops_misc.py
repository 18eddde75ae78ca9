"""Known answers for the reduce, quant and spatial records (values worked out by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.model import Operand, SymmPerChannelQuantParams, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import get
from nncert.ops.base import ShapeError, to_real
from nncert.ops.evaluate import evaluate, output_shapes

F32, F16, I32, B8 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_BOOL8
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
QUANT8 = [(Q8, 0), (Q8S, -128)]  # (type, offset added to unsigned raw values and zero points)


def tensor(type_, values, scale=0.0, zero_point=0):
    arr = np.asarray(values, dtype=dtype_of(type_))
    return Operand(type_, arr.shape, scale, zero_point), arr


def i32(value):
    return Operand(T.INT32), np.asarray(value, dtype=np.int32)


def f32(value):
    return Operand(T.FLOAT32), np.asarray(value, dtype=np.float32)


def flag(value):
    return Operand(T.BOOL), np.asarray(value, dtype=np.bool_)


def axes(*values):
    return tensor(I32, list(values))


def _values(record, ops, raw):
    return [to_real(v, o) if record.dequantize else (v.item() if o.type.is_scalar else v)
            for o, v in zip(ops, raw, strict=True)]


def run(op, inputs, out_type, out_dims, scale=0.0, zero_point=0):
    """Evaluate one operation; ``inputs`` are (Operand, raw value) pairs. The shape rule must
    agree with ``out_dims`` (in the operation's layout)."""
    out = Operand(out_type, tuple(out_dims), scale, zero_point)
    ops, raw = (list(x) for x in zip(*inputs, strict=True))
    record = get(op)
    assert output_shapes(record, ops, _values(record, ops, raw), [out]) == [tuple(out_dims)]
    got = evaluate(record, ops, raw, [out])[0]
    assert got.dtype == dtype_of(out_type) and got.shape == tuple(out_dims)
    return got


def shape_error(op, inputs, out_type, out_dims=(1,)):
    ops, raw = (list(x) for x in zip(*inputs, strict=True))
    record = get(op)
    with pytest.raises(ShapeError) as e:
        output_shapes(record, ops, _values(record, ops, raw), [Operand(out_type, tuple(out_dims))])
    return str(e.value)


# ---------------------------------------------------------------------------------------
# MEAN and REDUCE_*

_X23 = [[1, 2, 3], [4, 5, 6]]


@pytest.mark.parametrize("type_", [F32, F16])
def test_mean_float(type_):
    x = tensor(type_, _X23)
    np.testing.assert_array_equal(run(Op.MEAN, [x, axes(1), i32(0)], type_, (2,)), [2, 5])
    np.testing.assert_array_equal(run(Op.MEAN, [x, axes(-2), i32(1)], type_, (1, 3)), [[2.5, 3.5, 4.5]])
    # every axis reduced without keep_dims: shape [1]
    np.testing.assert_array_equal(run(Op.MEAN, [x, axes(0, 1), i32(0)], type_, (1,)), [3.5])
    # keep_dims is "positive", not just 1
    np.testing.assert_array_equal(run(Op.MEAN, [x, axes(1), i32(2)], type_, (2, 1)), [[2], [5]])


@pytest.mark.parametrize("type_, off", QUANT8)
def test_mean_quant_same_scale(type_, off):
    # scale 0.5, zp 10: raw [[12, 14], [16, 20]] are reals [[1, 2], [3, 5]]
    x = tensor(type_, np.array([[12, 14], [16, 20]]) + off, 0.5, 10 + off)
    got = run(Op.MEAN, [x, axes(0), i32(1)], type_, (1, 2), 0.5, 10 + off)
    np.testing.assert_array_equal(got, np.array([[14, 17]]) + off)  # means 2, 3.5


@pytest.mark.parametrize("type_", [F32, F16])
def test_reduce_sum_prod(type_):
    x = tensor(type_, np.arange(8).reshape(2, 2, 2))
    got = run(Op.REDUCE_SUM, [x, axes(0, 2), flag(False)], type_, (2,))
    np.testing.assert_array_equal(got, [0 + 1 + 4 + 5, 2 + 3 + 6 + 7])
    p = tensor(type_, [[1, 2], [3, -0.5]])
    np.testing.assert_array_equal(run(Op.REDUCE_PROD, [p, axes(1), flag(True)], type_, (2, 1)),
                                  [[2], [-1.5]])
    np.testing.assert_array_equal(run(Op.REDUCE_PROD, [p, axes(0, -1), flag(False)], type_, (1,)), [-3])


@pytest.mark.parametrize("type_, off", QUANT8)
def test_reduce_max_min_quant(type_, off):
    x = tensor(type_, np.array([[3, 9], [7, 1]]) + off, 0.5, 2 + off)
    got = run(Op.REDUCE_MAX, [x, axes(1), flag(True)], type_, (2, 1), 0.5, 2 + off)
    np.testing.assert_array_equal(got, np.array([[9], [7]]) + off)
    # a repeated axis (1 and -1) reduces once
    got = run(Op.REDUCE_MIN, [x, axes(1, -1), flag(False)], type_, (2,), 0.5, 2 + off)
    np.testing.assert_array_equal(got, np.array([3, 1]) + off)


def test_reduce_max_min_float():
    x = tensor(F32, [[-1, 4], [2, -3]])
    np.testing.assert_array_equal(run(Op.REDUCE_MAX, [x, axes(0), flag(False)], F32, (2,)), [2, 4])
    np.testing.assert_array_equal(run(Op.REDUCE_MIN, [x, axes(0, 1), flag(True)], F32, (1, 1)), [[-3]])


def test_reduce_any_all():
    x = tensor(B8, [[True, False], [False, False]])
    np.testing.assert_array_equal(run(Op.REDUCE_ANY, [x, axes(0), flag(False)], B8, (2,)), [True, False])
    np.testing.assert_array_equal(run(Op.REDUCE_ALL, [x, axes(0), flag(False)], B8, (2,)), [False, False])
    np.testing.assert_array_equal(run(Op.REDUCE_ANY, [x, axes(0, 1), flag(False)], B8, (1,)), [True])
    y = tensor(B8, [[True, True], [True, False]])
    np.testing.assert_array_equal(run(Op.REDUCE_ALL, [y, axes(-1), flag(True)], B8, (2, 1)),
                                  [[True], [False]])


def test_reduce_rejects_out_of_range_axis():
    x = tensor(F32, _X23)
    assert "axes" in shape_error(Op.REDUCE_SUM, [x, axes(2), flag(False)], F32)
    assert "axes" in shape_error(Op.MEAN, [x, axes(-3), i32(0)], F32)


# ---------------------------------------------------------------------------------------
# ARGMAX / ARGMIN


@pytest.mark.parametrize("type_", [F32, F16, I32])
def test_argmax_argmin(type_):
    x = tensor(type_, [[1, 5, 3], [7, 2, 9]])
    np.testing.assert_array_equal(run(Op.ARGMAX, [x, i32(1)], I32, (2,)), [1, 2])
    np.testing.assert_array_equal(run(Op.ARGMAX, [x, i32(0)], I32, (3,)), [1, 0, 1])
    np.testing.assert_array_equal(run(Op.ARGMIN, [x, i32(-1)], I32, (2,)), [0, 1])
    np.testing.assert_array_equal(run(Op.ARGMIN, [tensor(type_, [3, 1, 2]), i32(0)], I32, (1,)), [1])


@pytest.mark.parametrize("type_, off", QUANT8)
def test_argmax_quant(type_, off):
    x = tensor(type_, np.array([[10, 200, 50], [90, 30, 60]]) + off, 0.1, 100 + off)
    np.testing.assert_array_equal(run(Op.ARGMAX, [x, i32(1)], I32, (2,)), [1, 0])
    np.testing.assert_array_equal(run(Op.ARGMIN, [x, i32(1)], I32, (2,)), [0, 1])


def test_argmax_rejects_axis():
    assert "axis" in shape_error(Op.ARGMAX, [tensor(F32, [1, 2]), i32(1)], I32)


# ---------------------------------------------------------------------------------------
# QUANTIZE / DEQUANTIZE / CAST


@pytest.mark.parametrize("in_type", [F32, F16])
@pytest.mark.parametrize("type_, off", QUANT8)
def test_quantize_rounds_half_away_and_saturates(in_type, type_, off):
    x = tensor(in_type, [-1, 0.25, 0.75, -0.25, 200, -100])
    got = run(Op.QUANTIZE, [x], type_, (6,), 0.5, 10 + off)
    # x / 0.5 = -2, 0.5, 1.5, -0.5, 400, -200 -> -2, 1, 2, -1 (+ 10), then saturation
    lo, hi = type_.quant_range
    np.testing.assert_array_equal(got, [8 + off, 11 + off, 12 + off, 9 + off, hi, lo])


@pytest.mark.parametrize("out_type", [F32, F16])
def test_dequantize(out_type):
    got = run(Op.DEQUANTIZE, [tensor(Q8, [8, 10, 13], 0.5, 10)], out_type, (3,))
    np.testing.assert_array_equal(got, [-1, 0, 1.5])
    got = run(Op.DEQUANTIZE, [tensor(Q8S, [-7, -5, 0], 0.5, -5)], out_type, (3,))
    np.testing.assert_array_equal(got, [-1, 0, 2.5])
    got = run(Op.DEQUANTIZE, [tensor(T.TENSOR_QUANT8_SYMM, [-4, 0, 6], 0.25, 0)], out_type, (3,))
    np.testing.assert_array_equal(got, [-1, 0, 1.5])


def test_dequantize_per_channel():
    raw = np.array([[2, 2, 2], [-2, 0, 3]], np.int8)
    op = Operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, raw.shape,
                 channel_quant=SymmPerChannelQuantParams((0.5, 1.0, 2.0), 1))
    got = run(Op.DEQUANTIZE, [(op, raw)], F32, (2, 3))
    np.testing.assert_array_equal(got, [[1, 2, 4], [-1, 0, 6]])


@pytest.mark.parametrize("in_type", [F32, F16])
def test_cast_float_truncates_and_saturates_uint8(in_type):
    x = tensor(in_type, [1.75, -1.75, 0.25, 100.5, -3.5, 255.75, 300])
    np.testing.assert_array_equal(run(Op.CAST, [x], I32, (7,)), [1, -1, 0, 100, -3, 255, 300])
    np.testing.assert_array_equal(run(Op.CAST, [x], Q8, (7,), 1.0, 0), [1, 0, 0, 100, 0, 255, 255])


def test_cast_int_and_raw_quant():
    x = tensor(I32, [-5, 7, 256, 1000])
    np.testing.assert_array_equal(run(Op.CAST, [x], Q8, (4,), 0.5, 3), [0, 7, 255, 255])
    np.testing.assert_array_equal(run(Op.CAST, [x], F16, (4,)), [-5, 7, 256, 1000])
    # scale and zero point are ignored: raw uint8 values come out as numbers
    q = tensor(Q8, [0, 100, 255], 0.5, 100)
    np.testing.assert_array_equal(run(Op.CAST, [q], F32, (3,)), [0, 100, 255])
    np.testing.assert_array_equal(run(Op.CAST, [q], I32, (3,)), [0, 100, 255])
    np.testing.assert_array_equal(run(Op.CAST, [q], Q8, (3,), 2.0, 7), [0, 100, 255])


@pytest.mark.parametrize("type_, raw", [
    (Q8S, [-128, 0, 127]), (T.TENSOR_QUANT16_SYMM, [-32768, 5, 32767]),
    (T.TENSOR_QUANT16_ASYMM, [0, 7, 65535]), (T.TENSOR_QUANT8_SYMM, [-127, 1, 127]),
    (B8, [True, False, True]),
])
def test_cast_identity_copies_raw(type_, raw):
    zp = 3 if type_ in (Q8S, T.TENSOR_QUANT16_ASYMM) else 0
    x = tensor(type_, raw, 0.25 if type_.is_quant else 0.0, zp)
    got = run(Op.CAST, [x], type_, (3,), 1.0 if type_.is_quant else 0.0, 0)
    np.testing.assert_array_equal(got, raw)


# ---------------------------------------------------------------------------------------
# RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR

_IMG = np.array([[1, 2], [3, 4]], np.float64).reshape(1, 2, 2, 1)
_BILINEAR_3X3 = [[1, 5 / 3, 2], [7 / 3, 3, 10 / 3], [3, 11 / 3, 4]]


@pytest.mark.parametrize("type_", [F32, F16])
def test_resize_bilinear_by_shape_and_scale(type_):
    x = tensor(type_, _IMG)
    tol = 1e-6 if type_ is F32 else 2e-3
    got = run(Op.RESIZE_BILINEAR, [x, i32(3), i32(3)], type_, (1, 3, 3, 1))
    np.testing.assert_allclose(got[0, :, :, 0], _BILINEAR_3X3, rtol=tol)
    scale = (Operand(T.FLOAT16), np.asarray(1.5, np.float16)) if type_ is F16 else f32(1.5)
    got = run(Op.RESIZE_BILINEAR, [x, scale, scale], type_, (1, 3, 3, 1))
    np.testing.assert_allclose(got[0, :, :, 0], _BILINEAR_3X3, rtol=tol)


def test_resize_bilinear_align_corners_and_half_pixel():
    x = tensor(F32, _IMG)
    got = run(Op.RESIZE_BILINEAR, [x, i32(3), i32(3), flag(False), flag(True)], F32, (1, 3, 3, 1))
    np.testing.assert_allclose(got[0, :, :, 0], [[1, 1.5, 2], [2, 2.5, 3], [3, 3.5, 4]])
    row = tensor(F32, np.array([1, 2]).reshape(1, 1, 2, 1))
    got = run(Op.RESIZE_BILINEAR, [row, i32(4), i32(1), flag(False), flag(False), flag(True)], F32,
              (1, 1, 4, 1))
    np.testing.assert_allclose(got.ravel(), [1, 1.25, 1.75, 2])  # positions -0.25, 0.25, 0.75, 1.25
    got = run(Op.RESIZE_BILINEAR, [row, i32(4), i32(1)], F32, (1, 1, 4, 1))
    np.testing.assert_allclose(got.ravel(), [1, 1.5, 2, 2])  # positions 0, 0.5, 1, 1.5


def test_resize_bilinear_rejects_both_flags():
    x = tensor(F32, _IMG)
    msg = shape_error(Op.RESIZE_BILINEAR, [x, i32(3), i32(3), flag(False), flag(True), flag(True)], F32)
    assert "half_pixel_centers" in msg


@pytest.mark.parametrize("type_, off", QUANT8)
def test_resize_bilinear_quant(type_, off):
    x = tensor(type_, (_IMG * 4).astype(int) + off, 0.25, off)
    got = run(Op.RESIZE_BILINEAR, [x, i32(3), i32(3)], type_, (1, 3, 3, 1), 0.25, off)
    np.testing.assert_array_equal(got[0, :, :, 0], np.array([[4, 7, 8], [9, 12, 13], [12, 15, 16]]) + off)


def test_resize_bilinear_nchw():
    # two channels, the second ten times the first; NCHW in and out; width 3, height 1
    x = np.stack([_IMG[0, :, :, 0], 10 * _IMG[0, :, :, 0]])[None]  # [1, 2, 2, 2] NCHW
    got = run(Op.RESIZE_BILINEAR, [tensor(F32, x), i32(3), i32(1), flag(True)], F32, (1, 2, 1, 3))
    np.testing.assert_allclose(got[0], [[[1, 5 / 3, 2]], [[10, 50 / 3, 20]]], rtol=1e-6)


@pytest.mark.parametrize("type_", [F32, F16])
def test_resize_nearest(type_):
    x = tensor(type_, _IMG)
    got = run(Op.RESIZE_NEAREST_NEIGHBOR, [x, i32(3), i32(3), flag(False)], type_, (1, 3, 3, 1))
    np.testing.assert_array_equal(got[0, :, :, 0], [[1, 1, 2], [1, 1, 2], [3, 3, 4]])
    # align_corners: positions 0, 0.5, 1 -> indices 0, 1 (half away from zero), 1
    got = run(Op.RESIZE_NEAREST_NEIGHBOR, [x, i32(3), i32(3), flag(False), flag(True)], type_, (1, 3, 3, 1))
    np.testing.assert_array_equal(got[0, :, :, 0], [[1, 2, 2], [3, 4, 4], [3, 4, 4]])
    # half-pixel centres: columns at 1/3, 1, 5/3 -> 0, 1, 1; the single row at 0.5 * 2 = 1 -> 1
    got = run(Op.RESIZE_NEAREST_NEIGHBOR, [x, i32(3), i32(1), flag(False), flag(False), flag(True)],
              type_, (1, 1, 3, 1))
    np.testing.assert_array_equal(got[0, 0, :, 0], [3, 4, 4])


@pytest.mark.parametrize("type_, off", QUANT8)
def test_resize_nearest_quant_nchw_by_scale(type_, off):
    x = tensor(type_, np.array([[[[10, 20], [30, 40]]]]) + off, 0.5, 5 + off)  # NCHW [1, 1, 2, 2]
    got = run(Op.RESIZE_NEAREST_NEIGHBOR, [x, f32(2.0), f32(1.0), flag(True)], type_, (1, 1, 2, 4),
              0.5, 5 + off)
    np.testing.assert_array_equal(got[0, 0], np.array([[10, 10, 20, 20], [30, 30, 40, 40]]) + off)


def test_resize_nearest_layout_is_required():
    rec = get(Op.RESIZE_NEAREST_NEIGHBOR)
    assert all(not s.arg("layout").optional for s in rec.signatures)
    assert get(Op.RESIZE_BILINEAR).signatures[0].arg("layout").optional


# ---------------------------------------------------------------------------------------
# DEPTH_TO_SPACE / SPACE_TO_DEPTH

_D = np.arange(1, 17).reshape(1, 2, 2, 4)  # TF's example: depth 4, block 2
_S = np.array([[1, 2, 5, 6], [3, 4, 7, 8], [9, 10, 13, 14], [11, 12, 15, 16]]).reshape(1, 4, 4, 1)


@pytest.mark.parametrize("type_", [F32, F16])
def test_depth_to_space_and_back(type_):
    got = run(Op.DEPTH_TO_SPACE, [tensor(type_, _D), i32(2)], type_, (1, 4, 4, 1))
    np.testing.assert_array_equal(got, _S)
    got = run(Op.SPACE_TO_DEPTH, [tensor(type_, _S), i32(2)], type_, (1, 2, 2, 4))
    np.testing.assert_array_equal(got, _D)


def test_depth_to_space_two_output_channels():
    x = tensor(F32, np.arange(1, 9).reshape(1, 1, 1, 8))
    got = run(Op.DEPTH_TO_SPACE, [x, i32(2)], F32, (1, 2, 2, 2))
    np.testing.assert_array_equal(got[0], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]])


@pytest.mark.parametrize("type_, off", QUANT8)
def test_depth_space_quant_nchw(type_, off):
    x = tensor(type_, np.array([1, 2, 3, 4]).reshape(1, 4, 1, 1) + off, 0.5, 3 + off)  # NCHW
    got = run(Op.DEPTH_TO_SPACE, [x, i32(2), flag(True)], type_, (1, 1, 2, 2), 0.5, 3 + off)
    np.testing.assert_array_equal(got[0, 0], np.array([[1, 2], [3, 4]]) + off)
    back = run(Op.SPACE_TO_DEPTH, [(Operand(type_, got.shape, 0.5, 3 + off), got), i32(2), flag(True)],
               type_, (1, 4, 1, 1), 0.5, 3 + off)
    np.testing.assert_array_equal(back, x[1])


def test_depth_space_reject_indivisible():
    assert "divisible" in shape_error(Op.DEPTH_TO_SPACE, [tensor(F32, np.zeros((1, 1, 1, 6))), i32(2)], F32)
    assert "divisible" in shape_error(Op.SPACE_TO_DEPTH, [tensor(F32, np.zeros((1, 3, 2, 1))), i32(2)], F32)


# ---------------------------------------------------------------------------------------
# BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND

_BATCHED = np.array([[1, 3, 9, 11], [2, 4, 10, 12], [5, 7, 13, 15], [6, 8, 14, 16]]).reshape(4, 2, 2, 1)
_SPACE = np.arange(1, 17).reshape(1, 4, 4, 1)


@pytest.mark.parametrize("type_", [F32, F16])
def test_batch_to_space_and_back(type_):
    block = tensor(I32, [2, 2])
    got = run(Op.BATCH_TO_SPACE_ND, [tensor(type_, _BATCHED), block], type_, (1, 4, 4, 1))
    np.testing.assert_array_equal(got, _SPACE)
    got = run(Op.SPACE_TO_BATCH_ND, [tensor(type_, _SPACE), block, tensor(I32, [[0, 0], [0, 0]])],
              type_, (4, 2, 2, 1))
    np.testing.assert_array_equal(got, _BATCHED)


def test_batch_to_space_unequal_blocks():
    # block [1, 2]: batch 2k + j feeds column 2w + j of batch k
    x = tensor(F32, np.array([1, 2, 3, 4]).reshape(4, 1, 1, 1))
    got = run(Op.BATCH_TO_SPACE_ND, [x, tensor(I32, [1, 2])], F32, (2, 1, 2, 1))
    np.testing.assert_array_equal(got.reshape(2, 2), [[1, 3], [2, 4]])


@pytest.mark.parametrize("type_, off", QUANT8)
def test_space_to_batch_pads_with_zero_point(type_, off):
    x = tensor(type_, np.array([[9, 11], [13, 15]]).reshape(1, 2, 2, 1) + off, 0.5, 7 + off)
    pads = tensor(I32, [[0, 0], [2, 0]])  # two columns in front of the width
    got = run(Op.SPACE_TO_BATCH_ND, [x, tensor(I32, [2, 2]), pads], type_, (4, 1, 2, 1), 0.5, 7 + off)
    np.testing.assert_array_equal(got.reshape(4, 2), np.array([[7, 9], [7, 11], [7, 13], [7, 15]]) + off)


def test_space_to_batch_nchw():
    x = np.arange(1, 5).reshape(1, 1, 2, 2).astype(np.float32)  # NCHW, one channel
    got = run(Op.SPACE_TO_BATCH_ND, [tensor(F32, x), tensor(I32, [2, 2]), tensor(I32, [[0, 0], [0, 0]]),
                                     flag(True)], F32, (4, 1, 1, 1))
    np.testing.assert_array_equal(got.ravel(), [1, 2, 3, 4])
    back = run(Op.BATCH_TO_SPACE_ND, [tensor(F32, got), tensor(I32, [2, 2]), flag(True)], F32, (1, 1, 2, 2))
    np.testing.assert_array_equal(back, x)


def test_batch_space_reject_invalid():
    assert "divisible" in shape_error(Op.BATCH_TO_SPACE_ND, [tensor(F32, np.zeros((3, 1, 1, 1))),
                                                             tensor(I32, [2, 1])], F32)
    assert "divisible" in shape_error(Op.SPACE_TO_BATCH_ND, [tensor(F32, np.zeros((1, 3, 2, 1))),
                                                             tensor(I32, [2, 2]),
                                                             tensor(I32, [[0, 0], [0, 0]])], F32)
    assert "non-negative" in shape_error(Op.SPACE_TO_BATCH_ND, [tensor(F32, np.zeros((1, 2, 2, 1))),
                                                                tensor(I32, [2, 2]),
                                                                tensor(I32, [[1, -1], [0, 0]])], F32)


# ---------------------------------------------------------------------------------------
# Declarations


def _version_of(op, **types):
    for v in get(op).variants:
        if all(v.types.get(k) is t for k, t in types.items()):
            return v.version
    return None


@pytest.mark.parametrize("op, types, version", [
    (Op.MEAN, {"T": F32}, Version.V1_1), (Op.MEAN, {"T": Q8}, Version.V1_1),
    (Op.MEAN, {"T": F16}, Version.V1_2), (Op.MEAN, {"T": Q8S}, Version.V1_3),
    (Op.REDUCE_SUM, {"T": Q8}, None), (Op.REDUCE_PROD, {"T": F16}, Version.V1_2),
    (Op.REDUCE_MAX, {"T": Q8S}, Version.V1_3), (Op.REDUCE_ANY, {"T": B8}, Version.V1_2),
    (Op.ARGMAX, {"T": I32}, Version.V1_2), (Op.ARGMIN, {"T": Q8S}, Version.V1_3),
    (Op.QUANTIZE, {"T": F16, "U": Q8}, Version.V1_2), (Op.QUANTIZE, {"T": F32, "U": Q8S}, Version.V1_3),
    (Op.DEQUANTIZE, {"T": Q8, "U": F32}, Version.V1_0), (Op.DEQUANTIZE, {"T": Q8, "U": F16}, Version.V1_2),
    (Op.DEQUANTIZE, {"T": T.TENSOR_QUANT8_SYMM_PER_CHANNEL, "U": F32}, Version.V1_2),
    (Op.DEQUANTIZE, {"T": Q8S, "U": F16}, Version.V1_3),
    (Op.CAST, {"T": Q8, "U": F16}, Version.V1_2), (Op.CAST, {"T": I32, "U": I32}, Version.V1_2),
    (Op.CAST, {"T": B8, "U": B8}, Version.V1_3), (Op.CAST, {"T": Q8S, "U": Q8}, None),
    (Op.RESIZE_BILINEAR, {"T": F32}, Version.V1_0), (Op.RESIZE_BILINEAR, {"T": Q8}, Version.V1_2),
    (Op.RESIZE_NEAREST_NEIGHBOR, {"T": Q8}, Version.V1_2),
    (Op.DEPTH_TO_SPACE, {"T": Q8}, Version.V1_0), (Op.SPACE_TO_BATCH_ND, {"T": F32}, Version.V1_1),
    (Op.BATCH_TO_SPACE_ND, {"T": F16}, Version.V1_2), (Op.SPACE_TO_DEPTH, {"T": Q8S}, Version.V1_3),
])
def test_variant_versions(op, types, version):
    assert _version_of(op, **types) is version


def test_newer_inputs_raise_the_version():
    from nncert.ops.base import match
    rec = get(Op.RESIZE_BILINEAR)
    m = match(rec, [F32, T.INT32, T.INT32], [F32])
    assert m.version is Version.V1_0
    assert match(rec, [F32, T.INT32, T.INT32, T.BOOL], [F32]).version is Version.V1_2
    assert match(rec, [F32, T.INT32, T.INT32, T.BOOL, T.BOOL], [F32]).version is Version.V1_3
    assert match(rec, [F32, T.FLOAT32, T.FLOAT32], [F32]).version is Version.V1_2
