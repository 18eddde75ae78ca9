"""Known answers for the convolution, fully connected and pooling records (values worked
out by hand), plus layout agreement and the validity rules of their checks."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.model import Operand, SymmPerChannelQuantParams, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import get
from nncert.ops.base import ShapeError, match, to_real
from nncert.ops.evaluate import bind, evaluate, instance_version, output_shapes
from nncert.ops.window import (
    Window,
    gather,
    implicit_padding,
    transpose_implicit_padding,
    trimmed,
    valid_counts,
)
from nncert.testing.cases import enumerate_cases, sample_case

F32, F16, I32 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32
Q8, Q8S, PC = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL
SAME, VALID = 1, 2


def tensor(type_, values, scale=0.0, zero_point=0, channel_quant=None):
    arr = np.asarray(values, dtype=dtype_of(type_))
    return Operand(type_, arr.shape, scale, zero_point, channel_quant=channel_quant), arr


def i32(value):
    return Operand(T.INT32), np.asarray(value, dtype=np.int32)


def flag(value):
    return Operand(T.BOOL), np.asarray(value, dtype=bool)


def _check(record, ops, raw, outs):
    m = match(record, [o.type for o in ops], [o.type for o in outs])
    values = [to_real(v, o) for o, v in zip(ops, raw, strict=True)]
    ctx = bind(record, ops, values, outs, m)
    if record.check:
        record.check(ctx)
    m.version = instance_version(ctx)
    return m, values


def run(op, inputs, out_type, out_dims, scale=0.0, zero_point=0):
    """Evaluate one operation; ``inputs`` are (Operand, raw value) pairs. Also checks the
    shape rule agrees with ``out_dims`` and the record's check accepts the instance."""
    out = Operand(out_type, tuple(out_dims), scale, zero_point)
    ops, raw = (list(x) for x in zip(*inputs, strict=True))
    record = get(op)
    m, values = _check(record, ops, raw, [out])
    assert output_shapes(record, ops, values, [out], m) == [tuple(out_dims)]
    return evaluate(record, ops, raw, [out])[0]


def explicit(left, right, top, bottom, stride_w, stride_h):
    return [i32(v) for v in (left, right, top, bottom, stride_w, stride_h)]


def implicit(scheme, stride_w, stride_h):
    return [i32(v) for v in (scheme, stride_w, stride_h)]


X3 = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)  # 1 2 3 / 4 5 6 / 7 8 9
X4 = np.arange(1, 17, dtype=np.float32).reshape(1, 4, 4, 1)  # 1..16, row-major


# ---------------------------------------------------------------------------------------
# Padding arithmetic


def test_same_padding_puts_the_smaller_half_first():
    assert implicit_padding(4, 2, 3, SAME) == (0, 1)  # out 2: (2-1)*2 + 3 - 4 = 1
    assert implicit_padding(3, 2, 3, SAME) == (1, 1)
    assert implicit_padding(5, 1, 3, SAME, dilation=2) == (2, 2)  # effective filter 5
    assert implicit_padding(5, 3, 3, VALID) == (0, 0)
    with pytest.raises(ShapeError):
        implicit_padding(5, 1, 3, 7)


def test_transpose_same_padding_tail_may_be_negative():
    assert transpose_implicit_padding(4, 2, 3, SAME) == (0, 1)
    assert transpose_implicit_padding(6, 3, 1, SAME) == (0, -2)  # (2-1)*3 + 1 - 6


# ---------------------------------------------------------------------------------------
# CONV_2D


@pytest.mark.parametrize("form", ["explicit", "implicit"])
def test_conv_3x3_input_2x2_filter(form):
    # filter 1 2 / 3 4: out[0,0] = 1*1 + 2*2 + 4*3 + 5*4 = 37, and so on; bias 1.
    w = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    pad = explicit(0, 0, 0, 0, 1, 1) if form == "explicit" else implicit(VALID, 1, 1)
    got = run(Op.CONV_2D, [tensor(F32, X3), tensor(F32, w), tensor(F32, [1.0]), *pad, i32(0)],
              F32, (1, 2, 2, 1))
    np.testing.assert_array_equal(got.reshape(2, 2), [[38, 48], [68, 78]])


def test_conv_two_output_channels_and_relu6():
    # input channels (1, 2) at each of two positions; filters [1, 1] and [-1, 3].
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 1, 2, 2)
    w = np.array([[1, 1], [-1, 3]], np.float32).reshape(2, 1, 1, 2)
    got = run(Op.CONV_2D, [tensor(F32, x), tensor(F32, w), tensor(F32, [0, -1]),
                           *explicit(0, 0, 0, 0, 1, 1), i32(3)], F32, (1, 1, 2, 2))
    # pos0: [1+2, -1+6-1] = [3, 4]; pos1: [3+4, -3+12-1] = [7, 8]; RELU6 clamps to 6.
    np.testing.assert_array_equal(got.reshape(2, 2), [[3, 4], [6, 6]])


def test_conv_same_padding_stride_2():
    # 4x4 input, 3x3 ones filter, SAME, stride 2: output 2x2, padding 0 before and 1 after.
    w = np.ones((1, 3, 3, 1), np.float32)
    got = run(Op.CONV_2D, [tensor(F32, X4), tensor(F32, w), tensor(F32, [0.0]),
                           *implicit(SAME, 2, 2), i32(0)], F32, (1, 2, 2, 1))
    # rows/cols 0..2, then 2..3 (the 4th is padding): 54, 45 / 72, 54.
    np.testing.assert_array_equal(got.reshape(2, 2), [[54, 45], [72, 54]])


def test_conv_same_padding_stride_2_explicit_equivalent_and_asymmetric():
    w = np.ones((1, 3, 3, 1), np.float32)
    # the same padding given explicitly (left 0 right 1 top 0 bottom 1) ...
    got = run(Op.CONV_2D, [tensor(F32, X4), tensor(F32, w), tensor(F32, [0.0]),
                           *explicit(0, 1, 0, 1, 2, 2), i32(0)], F32, (1, 2, 2, 1))
    np.testing.assert_array_equal(got.reshape(2, 2), [[54, 45], [72, 54]])
    # ... and left 1 top 0: the first window of each row starts one column earlier.
    got = run(Op.CONV_2D, [tensor(F32, X4), tensor(F32, w), tensor(F32, [0.0]),
                           *explicit(1, 0, 0, 0, 2, 2), i32(0)], F32, (1, 1, 2, 1))
    # columns 0..1 (the first is padding) and 1..3 over rows 0..2
    np.testing.assert_array_equal(got.reshape(2), [3 + 11 + 19, 9 + 21 + 33])


def test_conv_dilation():
    # 2x2 ones filter, dilation 2: taps x[0,0] x[0,2] x[2,0] x[2,2] = 1 + 3 + 7 + 9.
    w = np.ones((1, 2, 2, 1), np.float32)
    got = run(Op.CONV_2D, [tensor(F32, X3), tensor(F32, w), tensor(F32, [0.0]),
                           *explicit(0, 0, 0, 0, 1, 1), i32(0), flag(False), i32(2), i32(2)],
              F32, (1, 1, 1, 1))
    assert got.item() == 20


def test_conv_nchw_hand():
    # NCHW input [1, 2, 2, 2]: channel 0 = 1 2 / 3 4, channel 1 = 10 20 / 30 40; a 1x1 filter
    # [1, 0.5] gives channel 0 + channel 1 / 2, returned as NCHW [1, 1, 2, 2].
    x = np.array([[[1, 2], [3, 4]], [[10, 20], [30, 40]]], np.float32).reshape(1, 2, 2, 2)
    w = np.array([1, 0.5], np.float32).reshape(1, 1, 1, 2)
    got = run(Op.CONV_2D, [tensor(F32, x), tensor(F32, w), tensor(F32, [0.0]),
                           *implicit(VALID, 1, 1), i32(0), flag(True)], F32, (1, 1, 2, 2))
    np.testing.assert_array_equal(got, np.array([[6, 12], [18, 24]], np.float32).reshape(1, 1, 2, 2))


def test_conv_float16():
    w = np.array([1, 2, 3, 4], np.float16).reshape(1, 2, 2, 1)
    got = run(Op.CONV_2D, [tensor(F16, X3), tensor(F16, w), tensor(F16, [0.5]),
                           *implicit(VALID, 1, 1), i32(0)], F16, (1, 2, 2, 1))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.reshape(2, 2), [[37.5, 47.5], [67.5, 77.5]])


@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_conv_quant_one_scale(type_, off):
    # input scale 0.5 zp 128: reals 1 2 / 3 4 (1x2x2x1); filter scale 0.25 zp 130: reals 1 -1 / 0 2
    x = tensor(type_, np.array([130, 132, 134, 136]).reshape(1, 2, 2, 1) + off, 0.5, 128 + off)
    w = tensor(type_, np.array([134, 126, 130, 138]).reshape(1, 2, 2, 1) + off, 0.25, 130 + off)
    b = tensor(I32, [6], 0.125)  # real 0.75
    # 1 - 2 + 0 + 8 + 0.75 = 7.75; output scale 0.25 zp 10 -> 10 + 31 = 41
    got = run(Op.CONV_2D, [x, w, b, *implicit(VALID, 1, 1), i32(0)], type_, (1, 1, 1, 1),
              0.25, 10 + off)
    assert got.item() == 41 + off


@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_conv_per_channel_filter(type_, off):
    # input scale 0.5 zp 128: positions [1, -1] and [2, 0].
    x = tensor(type_, np.array([130, 126, 132, 128]).reshape(1, 1, 2, 2) + off, 0.5, 128 + off)
    # filter per channel (dim 0), scales 0.5 and 0.25: raw [2, 4] -> [1, 2]; [-4, 8] -> [-1, 2]
    w = tensor(PC, np.array([[2, 4], [-4, 8]]).reshape(2, 1, 1, 2),
               channel_quant=SymmPerChannelQuantParams((0.5, 0.25), 0))
    # bias scale 0: raw 4 -> 4 * 0.5 * 0.5 = 1; raw -8 -> -8 * 0.5 * 0.25 = -1
    b = tensor(I32, [4, -8])
    got = run(Op.CONV_2D, [x, w, b, *explicit(0, 0, 0, 0, 1, 1), i32(0)], type_, (1, 1, 2, 2),
              0.25, 100 + off)
    # reals: pos0 [1-2+1, -1-2-1] = [0, -4]; pos1 [2+1, -2-1] = [3, -3]; q = 100 + 4 r
    np.testing.assert_array_equal(got.reshape(2, 2), np.array([[100, 84], [112, 88]]) + off)


def test_conv_per_channel_needs_channel_dim_0():
    x = tensor(Q8, np.full((1, 1, 1, 2), 128), 0.5, 128)
    w = tensor(PC, np.ones((2, 1, 1, 2)), channel_quant=SymmPerChannelQuantParams((0.5, 0.25), 3))
    with pytest.raises(ShapeError, match="dimension 0"):
        run(Op.CONV_2D, [x, w, tensor(I32, [0, 0]), *implicit(VALID, 1, 1), i32(0)], Q8,
            (1, 1, 1, 2), 0.5, 0)


def test_conv_bias_scale_must_be_product():
    x = tensor(Q8, np.full((1, 1, 1, 1), 130), 0.5, 128)
    w = tensor(Q8, np.full((1, 1, 1, 1), 130), 0.25, 128)
    with pytest.raises(ShapeError, match="bias scale"):
        run(Op.CONV_2D, [x, w, tensor(I32, [0], 0.1), *implicit(VALID, 1, 1), i32(0)], Q8,
            (1, 1, 1, 1), 1.0, 0)


def test_conv_pre_1_2_output_scale_rule_raises_version():
    record = get(Op.CONV_2D)
    x = tensor(Q8, np.full((1, 1, 1, 1), 130), 0.5, 128)
    w = tensor(Q8, np.full((1, 1, 1, 1), 130), 0.25, 128)
    b = tensor(I32, [0], 0.125)
    ops, raw = zip(*[x, w, b, *implicit(VALID, 1, 1), i32(0)], strict=True)
    for out_scale, version in ((0.2, Version.V1_0), (0.125, Version.V1_2), (0.1, Version.V1_2)):
        m, _ = _check(record, list(ops), list(raw), [Operand(Q8, (1, 1, 1, 1), out_scale, 0)])
        assert m.version == version, out_scale


def test_conv_dilation_factors_come_in_pairs():
    w = np.ones((1, 1, 1, 1), np.float32)
    with pytest.raises(ShapeError, match="together"):
        run(Op.CONV_2D, [tensor(F32, X3), tensor(F32, w), tensor(F32, [0.0]),
                         *implicit(VALID, 1, 1), i32(0), flag(False), i32(2)], F32, (1, 3, 3, 1))


def test_conv_shape_errors():
    w = np.ones((1, 2, 2, 2), np.float32)  # depth 2 against an input of depth 1
    with pytest.raises(ShapeError, match="depth"):
        run(Op.CONV_2D, [tensor(F32, X3), tensor(F32, w), tensor(F32, [0.0]),
                         *implicit(VALID, 1, 1), i32(0)], F32, (1, 2, 2, 1))
    w = np.ones((1, 4, 4, 1), np.float32)  # larger than the 3x3 input, VALID
    with pytest.raises(ShapeError, match="smaller than"):
        run(Op.CONV_2D, [tensor(F32, X3), tensor(F32, w), tensor(F32, [0.0]),
                         *implicit(VALID, 1, 1), i32(0)], F32, (1, 1, 1, 1))


# ---------------------------------------------------------------------------------------
# DEPTHWISE / GROUPED / TRANSPOSE


def test_depthwise_multiplier_2():
    # channel 0 = 1 2 / 3 4, channel 1 = 5 6 / 7 8 (NHWC); output channel k*2+q uses filter
    # column k*2+q over input channel k.
    x = np.array([[[1, 5], [2, 6]], [[3, 7], [4, 8]]], np.float32).reshape(1, 2, 2, 2)
    w = np.array([[[1, 0, 0, 1], [0, 1, 0, 0]], [[0, 0, 1, 0], [1, 1, 1, 1]]],
                 np.float32).reshape(1, 2, 2, 4)
    got = run(Op.DEPTHWISE_CONV_2D, [tensor(F32, x), tensor(F32, w), tensor(F32, [0, 0, 0, 1]),
                                     *implicit(VALID, 1, 1), i32(2), i32(0)], F32, (1, 1, 1, 4))
    np.testing.assert_array_equal(got.ravel(), [1 + 4, 2 + 4, 7 + 8, 5 + 8 + 1])


def test_depthwise_per_channel_along_dim_3():
    x = tensor(Q8, np.array([132, 124]).reshape(1, 1, 1, 2), 0.25, 128)  # reals 1, -1
    w = tensor(PC, np.array([3, 5]).reshape(1, 1, 1, 2),
               channel_quant=SymmPerChannelQuantParams((1.0, 0.5), 3))  # reals 3, 2.5
    b = tensor(I32, [4, 0])  # 4 * 0.25 * 1.0 = 1
    got = run(Op.DEPTHWISE_CONV_2D, [x, w, b, *explicit(0, 0, 0, 0, 1, 1), i32(1), i32(0)],
              Q8, (1, 1, 1, 2), 0.5, 128)
    np.testing.assert_array_equal(got.ravel(), [128 + 8, 128 - 5])  # reals 4, -2.5


def test_grouped_conv_two_groups():
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 1, 4)
    w = np.array([[1, 1], [1, -1], [1, 0], [0, 2]], np.float32).reshape(4, 1, 1, 2)
    got = run(Op.GROUPED_CONV_2D, [tensor(F32, x), tensor(F32, w), tensor(F32, [0, 0, 0, 0.5]),
                                   *implicit(SAME, 1, 1), i32(2), i32(0), flag(False)],
              F32, (1, 1, 1, 4))
    # group 0 sees [1, 2]: 3, -1; group 1 sees [3, 4]: 3, 8 (+0.5)
    np.testing.assert_array_equal(got.ravel(), [3, -1, 3, 8.5])


def test_transpose_conv_explicit_stride_1():
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    w = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    got = run(Op.TRANSPOSE_CONV_2D, [tensor(F32, x), tensor(F32, w), tensor(F32, [0.0]),
                                     *explicit(0, 0, 0, 0, 1, 1), i32(0), flag(False)],
              F32, (1, 3, 3, 1))
    np.testing.assert_array_equal(got.reshape(3, 3), [[1, 4, 4], [6, 20, 16], [9, 24, 16]])


def test_transpose_conv_explicit_padding_crops():
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    w = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    got = run(Op.TRANSPOSE_CONV_2D, [tensor(F32, x), tensor(F32, w), tensor(F32, [0.0]),
                                     *explicit(1, 0, 0, 1, 1, 1), i32(0), flag(False)],
              F32, (1, 2, 2, 1))
    np.testing.assert_array_equal(got.reshape(2, 2), [[4, 4], [20, 16]])


@pytest.mark.parametrize("nchw", [False, True])
def test_transpose_conv_implicit_same_stride_2(nchw):
    # Each input value adds a 3x3 block of itself at (2h, 2w); the requested 4x4 output
    # keeps rows/cols 0..3 (padding 0 before, 1 after).
    x = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 2, 2, 1)
    w = np.ones((1, 3, 3, 1), np.float32)
    shape = [1, 1, 4, 4] if nchw else [1, 4, 4, 1]
    xin = x.transpose(0, 3, 1, 2) if nchw else x
    got = run(Op.TRANSPOSE_CONV_2D, [tensor(F32, xin), tensor(F32, w), tensor(F32, [0.0]),
                                     tensor(I32, shape), *implicit(SAME, 2, 2), i32(0),
                                     flag(nchw)], F32, shape)
    want = [[1, 1, 3, 2], [1, 1, 3, 2], [4, 4, 10, 6], [3, 3, 7, 4]]
    np.testing.assert_array_equal(got.reshape(4, 4), want)


def test_transpose_conv_quant():
    x = tensor(Q8, np.array([130, 132]).reshape(1, 1, 2, 1), 0.5, 128)  # reals 1, 2
    w = tensor(Q8, np.array([132, 124]).reshape(1, 1, 2, 1), 0.25, 128)  # reals 1, -1
    b = tensor(I32, [0], 0.125)
    got = run(Op.TRANSPOSE_CONV_2D, [x, w, b, *explicit(0, 0, 0, 0, 2, 1), i32(0), flag(False)],
              Q8, (1, 1, 4, 1), 0.5, 128)
    np.testing.assert_array_equal(got.ravel(), [130, 126, 132, 124])  # 1 -1 2 -2


# ---------------------------------------------------------------------------------------
# FULLY_CONNECTED


@pytest.mark.parametrize("shape", [(2, 3), (1, 2, 3), (2, 3, 1, 1)])
def test_fully_connected_float_relu(shape):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32).reshape(shape)
    w = np.array([[1, 0, -1], [2, 1, 0]], np.float32)
    got = run(Op.FULLY_CONNECTED, [tensor(F32, x), tensor(F32, w), tensor(F32, [0.5, -1]), i32(1)],
              F32, (2, 2))
    np.testing.assert_array_equal(got, [[0, 3], [0, 12]])  # [-1.5, 3], [-1.5, 12] before RELU


def test_fully_connected_quant_and_pre_1_2_rule():
    x = tensor(Q8, [[14, 8]], 0.5, 10)  # reals 2, -1
    w = tensor(Q8, [[7, 11]], 0.25, 3)  # reals 1, 2
    b = tensor(I32, [4], 0.125)  # 0.5
    got = run(Op.FULLY_CONNECTED, [x, w, b, i32(0)], Q8, (1, 1), 0.1, 0)
    assert got.item() == 5  # 2 - 2 + 0.5 = 0.5
    record = get(Op.FULLY_CONNECTED)
    ops, raw = zip(x, w, b, i32(0), strict=True)
    m, _ = _check(record, list(ops), list(raw), [Operand(Q8, (1, 1), 0.1, 0)])
    assert m.version == Version.V1_2  # 0.1 <= 0.5 * 0.25
    m, _ = _check(record, list(ops), list(raw), [Operand(Q8, (1, 1), 0.2, 0)])
    assert m.version == Version.V1_0


def test_fully_connected_rejects_indivisible_input():
    with pytest.raises(ShapeError, match="input_size"):
        run(Op.FULLY_CONNECTED, [tensor(F32, np.ones((2, 5))), tensor(F32, np.ones((1, 3))),
                                 tensor(F32, [0.0]), i32(0)], F32, (3, 1))


# ---------------------------------------------------------------------------------------
# Pooling


@pytest.mark.parametrize("op, want", [(Op.AVERAGE_POOL_2D, [[6, 7.5], [12, 13.5]]),
                                      (Op.MAX_POOL_2D, [[11, 12], [15, 16]])])
def test_pool_same_padding_stride_2_ignores_padding(op, want):
    # windows: rows/cols 0..2 then 2..3 (SAME pads 0 before, 1 after): 9, 6, 6, 4 taps.
    got = run(op, [tensor(F32, X4), *implicit(SAME, 2, 2), i32(3), i32(3), i32(0)], F32, (1, 2, 2, 1))
    np.testing.assert_array_equal(got.reshape(2, 2), want)


@pytest.mark.parametrize("op, want", [(Op.AVERAGE_POOL_2D, [1, 2.5, 5.5, 7]),
                                      (Op.MAX_POOL_2D, [1, 3, 7, 9])])
def test_pool_explicit_padding(op, want):
    # 3x3 input, 2x2 window, stride 2, pad left 1 top 1: windows {1}, {2,3}, {4,7}, {5,6,8,9}
    got = run(op, [tensor(F32, X3), *explicit(1, 0, 1, 0, 2, 2), i32(2), i32(2), i32(0)],
              F32, (1, 2, 2, 1))
    np.testing.assert_array_equal(got.ravel(), want)


def test_l2_pool():
    x = np.array([[3, 4], [0, 0]], np.float32).reshape(1, 2, 2, 1)
    got = run(Op.L2_POOL_2D, [tensor(F32, x), *implicit(VALID, 1, 1), i32(2), i32(2), i32(0)],
              F32, (1, 1, 1, 1))
    assert got.item() == 2.5  # sqrt((9 + 16) / 4)


@pytest.mark.parametrize("type_, off", [(Q8, 0), (Q8S, -128)])
def test_pool_quant_keeps_input_quantisation(type_, off):
    # scale 0.5 zp 100: reals 1 2 / 3 4; average 2.5 -> 105, max 4 -> 108.
    x = tensor(type_, np.array([102, 104, 106, 108]).reshape(1, 2, 2, 1) + off, 0.5, 100 + off)
    args = [x, *implicit(VALID, 1, 1), i32(2), i32(2), i32(0)]
    assert run(Op.AVERAGE_POOL_2D, args, type_, (1, 1, 1, 1), 0.5, 100 + off).item() == 105 + off
    assert run(Op.MAX_POOL_2D, args, type_, (1, 1, 1, 1), 0.5, 100 + off).item() == 108 + off


def test_pool_nchw_hand():
    # NCHW [1, 2, 2, 2]: channel 0 = 1 2 / 3 4, channel 1 = 5 6 / 7 8; a 2x2 max per channel.
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2)
    got = run(Op.MAX_POOL_2D, [tensor(F32, x), *implicit(VALID, 1, 1), i32(2), i32(2), i32(0),
                               flag(True)], F32, (1, 2, 1, 1))
    np.testing.assert_array_equal(got.ravel(), [4, 8])


@pytest.mark.parametrize("op, want", [(Op.AVERAGE_POOL_2D, 2.5), (Op.MAX_POOL_2D, 4.0),
                                      (Op.L2_POOL_2D, np.sqrt(7.5))])
def test_pool_filter_far_wider_than_the_input_costs_the_input(op, want):
    """NNAPI bounds a pooling filter only by int32: SAME padding of a 2^24-wide filter pads by
    2^23 on each side, which the reference must not gather nor enumerate (the fuzzer's
    MAX_POOL_2D of filter width 1074465081 took it past 20 GB; here it would be 400 MB). Both
    windows hold the whole of row 0: 1 2 3 4."""
    import tracemalloc

    args = [tensor(F32, X4[:, :3]), *implicit(SAME, 2, 4), i32(1 << 24), i32(1), i32(0)]
    tracemalloc.start()
    try:
        got = run(op, args, F32, (1, 1, 2, 1))  # SAME, stride 4 over 3 rows: row 0 alone
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got.ravel(), [want, want], rtol=1e-6)
    assert peak < 16 << 20, f"{peak / 2 ** 20:.0f} MiB for a 3x4 input"


def test_trimmed_windows_pool_exactly_as_the_whole_ones():
    """``trimmed`` drops only taps that lie in the padding for every output: on random
    geometries (padding up to 3 filters wide) the maxima and sums are identical."""
    rng = np.random.default_rng(0)
    tried = 0
    while tried < 300:
        h, w = (int(v) for v in rng.integers(1, 9, 2))
        f, s = (tuple(int(v) for v in rng.integers(1, n, 2)) for n in (25, 5))
        pads = ([implicit_padding(n, st, fi, SAME) for n, st, fi in zip((h, w), s, f, strict=True)]
                if rng.random() < 0.5 else [tuple(int(v) for v in rng.integers(0, 20, 2)) for _ in "hw"])
        win = Window(f, s, (1, 1), *pads)
        try:
            win.out_size(h, w)
        except ShapeError:
            continue
        if valid_counts(win, h, w).min() == 0:  # a window wholly in the padding: refused anyway
            continue
        tried += 1
        small = trimmed(win, h, w)
        assert small.out_size(h, w) == win.out_size(h, w)
        np.testing.assert_array_equal(valid_counts(small, h, w), valid_counts(win, h, w))
        x = rng.normal(size=(1, h, w, 2))
        np.testing.assert_array_equal(gather(x, small, -np.inf).max(axis=(3, 4)),
                                      gather(x, win, -np.inf).max(axis=(3, 4)))
        np.testing.assert_array_equal(gather(x, small).sum(axis=(3, 4)), gather(x, win).sum(axis=(3, 4)))


def test_pool_window_wholly_in_padding_fails():
    with pytest.raises(ShapeError, match="padding"):
        run(Op.MAX_POOL_2D, [tensor(F32, X3), *explicit(2, 0, 0, 0, 1, 1), i32(2), i32(1), i32(0)],
            F32, (1, 3, 4, 1))


# ---------------------------------------------------------------------------------------
# Layout agreement over sampled cases: NCHW and NHWC cases of a seed hold the same data.

_FAMILY = {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D,
           Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D}
_PAIRS = [k for k in enumerate_cases(seeds=(0, 1, 2)) if k[0].type in _FAMILY and k[3] is False
          and k[4] == 0]


@pytest.mark.parametrize("key", _PAIRS, ids=lambda k: f"{k[0].name}-{k[1].name}-{k[2].label}-s{k[5]}")
def test_nchw_agrees_with_nhwc(key):
    record, sig, var_, _, _, seed = key
    nhwc = sample_case(record, sig, var_, False, 0, seed)
    nchw = sample_case(record, sig, var_, True, 0, seed)
    assert nchw.outputs[0].scale == nhwc.outputs[0].scale
    np.testing.assert_array_equal(nchw.expected[0], nhwc.expected[0].transpose(0, 3, 1, 2))
