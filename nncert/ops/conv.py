"""Convolutions and fully connected layers: CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D,
TRANSPOSE_CONV_2D, FULLY_CONNECTED.

Kernels work in the real domain (NHWC, float64): windows are gathered with
``window.gather`` and contracted with one matrix product or einsum. A quantised bias
(TENSOR_INT32) arrives raw and is scaled here by input_scale * filter_scale, per output
channel for a per-channel (TENSOR_QUANT8_SYMM_PER_CHANNEL) filter.
"""

from __future__ import annotations

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    Variant,
    bias_of,
    bias_type,
    var,
    variant,
    variants,
)
from nncert.ops.window import (
    EXPLICIT,
    IMPLICIT,
    PADDING_SAME,
    PADDING_VALID,
    gather,
    read_window,
    sample_window,
    transpose_implicit_padding,
)

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
Q8, Q8S, PC = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL

#: Largest accumulation depth (terms summed per output) the samplers draw: an fp32 driver's
#: rounding error then stays within ACC-1 of the float64 golden.
MAX_DEPTH = 64

# ---------------------------------------------------------------------------------------
# Signatures

_INPUT = Arg("input", ranks=(4,), domain="unit")
_FILTER = Arg("filter", var("W"), ranks=(4,), domain="unit")
_BIAS = Arg("bias", bias_type("T"), ranks=(1,), quant=bias_of("input", "filter"))
_PADS = tuple(Arg(n, T.INT32) for n in ("pad_left", "pad_right", "pad_top", "pad_bottom"))
_STRIDES = (Arg("stride_w", T.INT32), Arg("stride_h", T.INT32))
_SCHEME = Arg("padding", T.INT32)
_ACT = Arg("act", T.INT32)
_LAYOUT_OPT = Arg("layout", T.BOOL, optional=True, default=False, since=Version.V1_2)
_LAYOUT = Arg("layout", T.BOOL, default=False)
_DILATION = (Arg("dilation_w", T.INT32, optional=True, default=1, since=Version.V1_2),
             Arg("dilation_h", T.INT32, optional=True, default=1, since=Version.V1_2))
_OUTPUT = (Arg("output", ranks=(4,)),)


def _window_sigs(middle: tuple[Arg, ...], tail: tuple[Arg, ...],
                 implicit_extra: tuple[Arg, ...] = ()) -> tuple[Signature, Signature]:
    """Explicit- and implicit-padding forms: input, filter, bias, padding, strides,
    ``middle`` (e.g. the depth multiplier), activation, ``tail`` (layout, dilation)."""
    head = (_INPUT, _FILTER, _BIAS)
    return (Signature(head + _PADS + _STRIDES + middle + (_ACT,) + tail, _OUTPUT, EXPLICIT),
            Signature(head + implicit_extra + (_SCHEME,) + _STRIDES + middle + (_ACT,) + tail,
                      _OUTPUT, IMPLICIT))


def _conv_variants(first: Version) -> tuple[Variant, ...]:
    """The type configurations of the filtered convolutions: float32 and quant8 from
    ``first`` (CONV_2D, DEPTHWISE: 1.0; GROUPED, TRANSPOSE: 1.2), float16 and per-channel
    quant8 filters from 1.2, signed quant8 (with either filter kind) from 1.3."""
    return (*variants(first, F32, Q8),
            *variants(Version.V1_2, F16),
            variant(Version.V1_2, T=Q8, W=PC),
            *variants(Version.V1_3, Q8S),
            variant(Version.V1_3, T=Q8S, W=PC))


# ---------------------------------------------------------------------------------------
# Shared pieces of kernels, shape rules and checks


def _real_bias(ctx: OpContext, filter_name: str = "filter") -> np.ndarray:
    """The bias in real values: a TENSOR_INT32 bias is raw, with implied scale
    input_scale * filter_scale (per output channel for a per-channel filter)."""
    bias = ctx.value("bias")
    if ctx.operand("bias").type is not T.TENSOR_INT32:
        return bias
    f = ctx.operand(filter_name)
    scale = np.asarray(f.channel_quant.scales, np.float64) if f.channel_quant is not None else f.scale
    return bias.astype(np.float64) * ctx.operand("input").scale * scale


def _f32_product(a: float, b: float) -> float:
    return float(np.float32(a) * np.float32(b))


def _quant_check(ctx: OpContext, filter_name: str = "filter", channel_dim: int = 0) -> None:
    """Quantisation rules shared by the filtered operations.

    - a per-channel filter is quantised along ``channel_dim`` with one scale per channel;
    - a one-scale quantised filter needs bias_scale == input_scale * filter_scale (NNAPI
      allows a relative difference of 1e-6);
    """
    f = ctx.operand(filter_name)
    if f.channel_quant is not None:
        cq = f.channel_quant
        if cq.channel_dim != channel_dim:
            raise ShapeError(f"{filter_name}: per-channel quantisation must be along dimension "
                             f"{channel_dim}, is along {cq.channel_dim}")
        if f.dimensions and len(cq.scales) != f.dimensions[channel_dim]:
            raise ShapeError(f"{filter_name}: {len(cq.scales)} per-channel scales for "
                             f"{f.dimensions[channel_dim]} channels")
        if any(not sc > 0 for sc in cq.scales):
            raise ShapeError(f"{filter_name}: per-channel scales must be positive")
        return
    if not f.type.is_quant:
        return
    want = _f32_product(ctx.operand("input").scale, f.scale)
    got = ctx.operand("bias").scale
    if abs(want - got) > 1e-6 * min(want, got):
        raise ShapeError(f"bias scale {got:g} must equal input scale x {filter_name} scale ({want:g})")


def _old_output_scale_rule(filter_name: str = "filter"):
    """Before 1.2 a TENSOR_QUANT8_ASYMM output needed output_scale > input_scale x filter_scale;
    an instance that breaks it is valid from 1.2 on (a ``min_version`` rule, not an error)."""

    def min_version(ctx: OpContext) -> Version:
        f, out = ctx.operand(filter_name), ctx.outputs[0]
        if out.type is Q8 and f.channel_quant is None and f.type.is_quant and \
                not out.scale > _f32_product(ctx.operand("input").scale, f.scale):
            return Version.V1_2
        return Version.V1_0

    return min_version


def _dilation_check(ctx: OpContext) -> None:
    names = {a.name for a in ctx.signature.inputs}
    if "dilation_w" in names and ctx.has("dilation_w") != ctx.has("dilation_h"):
        raise ShapeError("dilation_w and dilation_h must be given together")


def _bias_dims(ctx: OpContext, depth_out: int) -> None:
    bias = ctx.dims("bias")
    if bias != (depth_out,):
        raise ShapeError(f"bias has shape {list(bias)}, expected [{depth_out}] (the output depth)")


# ---------------------------------------------------------------------------------------
# Sampling helpers


def _filter_size(s: SampleContext, depth: int, hi: int = 3) -> tuple[int, int]:
    """A filter height and width with height * width * depth <= MAX_DEPTH."""
    while True:
        fh, fw = s.draw.int(1, hi), s.draw.int(1, hi)
        if fh * fw * depth <= MAX_DEPTH:
            return fh, fw


def _sample_filter_bias(s: SampleContext, filter_dims: tuple[int, ...], channel_dim: int,
                        depth_out: int, name: str = "filter") -> None:
    """Set the filter and bias: per-channel quantisation along ``channel_dim`` where the
    variant has it; a one-scale quantised filter gets a small scale, so that the pre-1.2
    rule output_scale > input_scale * filter_scale holds for any output (input scales are at
    most 0.05, output scales at least 1e-3), except in about one case in six, which then
    needs 1.2; a TENSOR_INT32 bias gets raw values of a useful size."""
    ftype = s.type(name)
    const = s.draw.bool(0.8)
    if ftype is PC:
        s.tensor(name, filter_dims, const=const, channel_dim=channel_dim)
    elif ftype.is_quant:
        scale = s.draw.float(0.005, 0.019) if s.draw.bool(0.85) else s.draw.float(0.02, 0.05)
        lo, hi = ftype.quant_range
        s.tensor(name, filter_dims, const=const, scale=scale, zero_point=s.draw.int(lo, hi))
    else:
        s.tensor(name, filter_dims, const=const)
    if s.type("bias") is T.TENSOR_INT32:
        s.tensor("bias", (depth_out,), value=s.draw.integers((depth_out,), -5000, 5000), const=const)
    else:
        s.tensor("bias", (depth_out,), const=const)


def _exact_floats(s: SampleContext, *names: str) -> None:
    """Float tensors ``names`` as multiples of 1/8 (|x| < 1 for the unit domain, the bias
    within [-2, 2]): long dot products of them are exact in float32."""
    if s.type("input").is_quant:
        return
    for name in names:
        item = s.inputs[name]
        bound = 16 if name == "bias" else 7
        item.value = edges.grid(s, item.dims, -bound, bound)


# ---------------------------------------------------------------------------------------
# CONV_2D


def _conv_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    fdims = ctx.dims("filter")
    if fdims[3] != c:
        raise ShapeError(f"filter depth {fdims[3]} must equal the input depth {c}")
    _bias_dims(ctx, fdims[0])
    oh, ow = read_window(ctx, fdims[1], fdims[2], h, w).out_size(h, w)
    return [(n, oh, ow, fdims[0])]


def _conv_kernel(ctx: OpContext) -> list[np.ndarray]:
    x, f = ctx.value("input"), ctx.value("filter")
    win = read_window(ctx, f.shape[1], f.shape[2], x.shape[1], x.shape[2])
    if f.shape[1:3] == (1, 1) and not any(win.pad_h + win.pad_w):  # pointwise: no window to gather
        p = np.asarray(x, np.float64)[:, ::win.stride[0], ::win.stride[1], :]
    else:
        p = gather(x, win)
    n, oh, ow = p.shape[:3]
    out = p.reshape(n * oh * ow, -1) @ f.reshape(f.shape[0], -1).T
    return [out.reshape(n, oh, ow, f.shape[0]) + _real_bias(ctx)]


def _conv_check(ctx: OpContext) -> None:
    _dilation_check(ctx)
    _quant_check(ctx, channel_dim=0)


def _conv_sample(s: SampleContext) -> None:
    n, c, o = s.draw.int(1, 2), s.draw.int(1, 4), s.draw.int(1, 4)
    fh, fw = _filter_size(s, c)
    h, w = sample_window(s, fh, fw, dilation=True)
    s.tensor("input", (n, h, w, c))
    _sample_filter_bias(s, (o, fh, fw, c), 0, o)


#: Input depth of the long CONV_2D: a 3x3 window sums 4608 products.
LONG_DEPTH = 512


def _long_conv_sample(s: SampleContext) -> None:
    if s.signature.name == IMPLICIT:
        s.scalar("padding", PADDING_VALID)
    else:
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            s.scalar(name, 0)
    s.scalar("stride_w", 1)
    s.scalar("stride_h", 1)
    s.tensor("input", (1, 4, 4, LONG_DEPTH))
    _sample_filter_bias(s, (4, 3, 3, LONG_DEPTH), 0, 4)
    _exact_floats(s, "input", "filter", "bias")


#: The batch and the output channels of the count_past_255 cases: past 256, so that a batch
#: counter or a table of per-channel scales held in 8 bits wraps (the samplers draw 1..4).
PAST_255 = (257, 300)


def _unit_window(s: SampleContext) -> None:
    """1x1 windows at stride 1 without padding: a 1x1 input gives a 1x1 output."""
    if s.signature.name == IMPLICIT:
        s.scalar("padding", s.draw.choice((PADDING_SAME, PADDING_VALID)))
    else:
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            s.scalar(name, 0)
    s.scalar("stride_w", 1)
    s.scalar("stride_h", 1)


def _past_255_sample(kind: str):
    """A batch of 257..300 1x1 images through 257..300 output channels (1x1 filters, depth 1
    or 2): a driver counting batches in 8 bits, or holding 256 per-channel scales, gets the
    channels (or the batches) past 255 wrong. ``kind``: the record's sampler it stands for."""

    def sample(s: SampleContext) -> None:
        n, c = s.draw.int(*PAST_255), s.draw.int(1, 2)
        o = c * s.draw.int(-(-PAST_255[0] // c), PAST_255[1] // c)  # a multiple of c past 256
        s.tensor("input", (n, 1, 1, c))
        if kind == "transpose":
            s.scalar("stride_w", 1)
            s.scalar("stride_h", 1)
            if s.signature.name == IMPLICIT:
                s.scalar("padding", PADDING_VALID)
                s.tensor("output_shape", (4,), value=np.array([n, 1, 1, o], np.int32), const=True)
            else:
                for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
                    s.scalar(name, 0)
            s.scalar("layout", False)
            _sample_filter_bias(s, (o, 1, 1, c), 0, o)
            return
        _unit_window(s)
        if kind == "depthwise":
            s.scalar("multiplier", o // c)
            _sample_filter_bias(s, (1, 1, 1, o), 3, o)
            return
        if kind == "grouped":
            s.scalar("groups", c)
            s.scalar("layout", False)
            _sample_filter_bias(s, (o, 1, 1, 1), 0, o)
            return
        _sample_filter_bias(s, (o, 1, 1, c), 0, o)

    return sample


def _past_255(kind: str) -> edges.Edge:
    return edges.past_255(f"a batch of {PAST_255[0]}..{PAST_255[1]} 1x1 images into as many output "
                          "channels (per-channel filters: one scale each)", sample=_past_255_sample(kind))


# ---------------------------------------------------------------------------------------
# DEPTHWISE_CONV_2D


def _depthwise_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    fdims = ctx.dims("filter")
    mult = int(ctx.value("multiplier"))
    if fdims[0] != 1:
        raise ShapeError(f"filter dimension 0 must be 1, is {fdims[0]}")
    if mult < 1:
        raise ShapeError(f"multiplier must be >= 1, is {mult}")
    if fdims[3] != c * mult:
        raise ShapeError(f"filter depth {fdims[3]} must equal input depth {c} x multiplier {mult}")
    _bias_dims(ctx, fdims[3])
    oh, ow = read_window(ctx, fdims[1], fdims[2], h, w).out_size(h, w)
    return [(n, oh, ow, fdims[3])]


def _depthwise_kernel(ctx: OpContext) -> list[np.ndarray]:
    x, f = ctx.value("input"), ctx.value("filter")
    c = x.shape[3]
    win = read_window(ctx, f.shape[1], f.shape[2], x.shape[1], x.shape[2])
    p = gather(x, win)  # n oh ow fh fw c (a view)
    w4 = f.reshape(f.shape[1], f.shape[2], c, -1)  # output channel k * multiplier + q
    out = np.einsum("nhwijc,ijcm->nhwcm", p, w4)
    return [out.reshape(*out.shape[:3], -1) + _real_bias(ctx)]


def _depthwise_check(ctx: OpContext) -> None:
    _dilation_check(ctx)
    _quant_check(ctx, channel_dim=3)


def _depthwise_sample(s: SampleContext) -> None:
    n, c, mult = s.draw.int(1, 2), s.draw.int(1, 4), s.draw.int(1, 3)
    fh, fw = _filter_size(s, 1, hi=4)
    h, w = sample_window(s, fh, fw, dilation=True)
    s.scalar("multiplier", mult)
    s.tensor("input", (n, h, w, c))
    _sample_filter_bias(s, (1, fh, fw, c * mult), 3, c * mult)


# ---------------------------------------------------------------------------------------
# GROUPED_CONV_2D


def _grouped_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    fdims = ctx.dims("filter")
    groups = int(ctx.value("groups"))
    if groups < 1:
        raise ShapeError(f"groups must be >= 1, is {groups}")
    if fdims[3] * groups != c:
        raise ShapeError(f"input depth {c} must equal groups {groups} x filter depth {fdims[3]}")
    if fdims[0] % groups:
        raise ShapeError(f"output depth {fdims[0]} (filter dimension 0) must be divisible by "
                         f"groups {groups}")
    _bias_dims(ctx, fdims[0])
    oh, ow = read_window(ctx, fdims[1], fdims[2], h, w).out_size(h, w)
    return [(n, oh, ow, fdims[0])]


def _grouped_kernel(ctx: OpContext) -> list[np.ndarray]:
    x, f = ctx.value("input"), ctx.value("filter")
    g = int(ctx.value("groups"))
    o, fh, fw, cg = f.shape
    win = read_window(ctx, fh, fw, x.shape[1], x.shape[2])
    p = gather(x, win)
    p = p.reshape(*p.shape[:5], g, cg)
    w5 = f.reshape(g, o // g, fh, fw, cg)
    out = np.einsum("nhwijgc,gmijc->nhwgm", p, w5)
    return [out.reshape(*out.shape[:3], o) + _real_bias(ctx)]


def _grouped_check(ctx: OpContext) -> None:
    _quant_check(ctx, channel_dim=0)


def _grouped_sample(s: SampleContext) -> None:
    n, g, cg, mo = s.draw.int(1, 2), s.draw.int(1, 3), s.draw.int(1, 3), s.draw.int(1, 2)
    fh, fw = _filter_size(s, cg)
    h, w = sample_window(s, fh, fw)
    s.scalar("groups", g)
    s.scalar("layout", False)  # a required input here; the case builder sets NCHW
    s.tensor("input", (n, h, w, g * cg))
    _sample_filter_bias(s, (g * mo, fh, fw, cg), 0, g * mo)


# ---------------------------------------------------------------------------------------
# TRANSPOSE_CONV_2D


def _transpose_window(ctx: OpContext, fh: int, fw: int):
    """(strides, (top, bottom), (left, right)) of a transpose convolution. The padding tail
    may be negative (NNAPI allows it, to pick among the output sizes a stride admits)."""
    stride = (int(ctx.value("stride_h")), int(ctx.value("stride_w")))
    if min(stride) < 1:
        raise ShapeError(f"stride_h and stride_w must be >= 1, are {stride[0]} and {stride[1]}")
    if ctx.signature.name == IMPLICIT:
        shape = ctx.value("output_shape")
        if np.shape(shape) != (4,):
            raise ShapeError(f"output_shape must hold 4 values, has shape {list(np.shape(shape))}")
        # The shape vector is in the operation's layout (NNAPI reads it so).
        out_h, out_w = (int(shape[2]), int(shape[3])) if ctx.nchw else (int(shape[1]), int(shape[2]))
        scheme = int(ctx.value("padding"))
        pad_h = transpose_implicit_padding(out_h, stride[0], fh, scheme)
        pad_w = transpose_implicit_padding(out_w, stride[1], fw, scheme)
    else:
        pad_w = (int(ctx.value("pad_left")), int(ctx.value("pad_right")))
        pad_h = (int(ctx.value("pad_top")), int(ctx.value("pad_bottom")))
        if pad_w[0] < 0 or pad_h[0] < 0:
            raise ShapeError(f"pad_left and pad_top must be >= 0, are {pad_w[0]} and {pad_h[0]}")
    return stride, pad_h, pad_w


def _transpose_out(n_in: int, f: int, stride: int, pads: tuple[int, int], what: str) -> int:
    out = stride * (n_in - 1) + f - pads[0] - pads[1]
    if out < 1:
        raise ShapeError(f"output {what} {out} (stride x (input - 1) + filter - padding) must be >= 1")
    return out


def _transpose_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    o, fh, fw, fc = ctx.dims("filter")
    if fc != c:
        raise ShapeError(f"filter depth {fc} must equal the input depth {c}")
    if fh < 1 or fw < 1:
        raise ShapeError(f"filter height and width must be >= 1, are {fh} and {fw}")
    _bias_dims(ctx, o)
    stride, pad_h, pad_w = _transpose_window(ctx, fh, fw)
    return [(n, _transpose_out(h, fh, stride[0], pad_h, "height"),
             _transpose_out(w, fw, stride[1], pad_w, "width"), o)]


def _transpose_kernel(ctx: OpContext) -> list[np.ndarray]:
    x, f = ctx.value("input"), ctx.value("filter")
    n, h, w, _ = x.shape
    o, fh, fw, _ = f.shape
    (sh, sw), pad_h, pad_w = _transpose_window(ctx, fh, fw)
    out_h = _transpose_out(h, fh, sh, pad_h, "height")
    out_w = _transpose_out(w, fw, sw, pad_w, "width")
    # Scatter every input position's contribution into the unpadded ("full") output.
    full_h, full_w = sh * (h - 1) + fh, sw * (w - 1) + fw
    full = np.zeros((n, max(full_h, pad_h[0] + out_h), max(full_w, pad_w[0] + out_w), o))
    for i in range(fh):
        for j in range(fw):
            full[:, i:i + sh * (h - 1) + 1:sh, j:j + sw * (w - 1) + 1:sw, :] += x @ f[:, i, j, :].T
    out = full[:, pad_h[0]:pad_h[0] + out_h, pad_w[0]:pad_w[0] + out_w, :]
    return [out + _real_bias(ctx)]


def _transpose_check(ctx: OpContext) -> None:
    _quant_check(ctx, channel_dim=0)


def _transpose_sample(s: SampleContext) -> None:
    c, o = s.draw.int(1, 4), s.draw.int(1, 4)
    fh, fw = _filter_size(s, c)
    h, w = s.draw.int(1, 4), s.draw.int(1, 4)
    stride = (s.draw.choice((1, 2, 2, 3)), s.draw.choice((1, 2, 2, 3)))
    # The output grows with the stride: keep it to a few hundred elements.
    full = (stride[0] * (h - 1) + fh) * (stride[1] * (w - 1) + fw)
    o = max(1, min(o, 300 // full))
    n = s.draw.int(1, 2) if 2 * full * o <= 300 else 1
    s.scalar("stride_h", stride[0])
    s.scalar("stride_w", stride[1])
    if s.signature.name == IMPLICIT:
        scheme = s.draw.choice((PADDING_SAME, PADDING_VALID))
        s.scalar("padding", scheme)
        out = []
        for n_in, f, st in ((h, fh, stride[0]), (w, fw, stride[1])):
            # SAME gives exactly the requested size when ceil(size / stride) == input size;
            # VALID ignores it, so request the size it computes.
            out.append(s.draw.int(st * (n_in - 1) + 1, st * n_in) if scheme == PADDING_SAME
                       else st * (n_in - 1) + f)
        s.tensor("output_shape", (4,), value=np.array([n, out[0], out[1], o], np.int32), const=True)
    else:
        for (head, tail), n_in, f, st in ((("pad_top", "pad_bottom"), h, fh, stride[0]),
                                          (("pad_left", "pad_right"), w, fw, stride[1])):
            full = st * (n_in - 1) + f
            a = s.draw.int(0, min(2, full - 1))
            b = s.draw.int(0, min(2, full - 1 - a))
            s.scalar(head, a)
            s.scalar(tail, b)
    s.scalar("layout", False)  # a required input here; the case builder sets NCHW
    s.tensor("input", (n, h, w, c))
    _sample_filter_bias(s, (o, fh, fw, c), 0, o)


# ---------------------------------------------------------------------------------------
# FULLY_CONNECTED


def _fc_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.dims("input")
    units, size = ctx.dims("weights")
    if len(dims) < 2:
        raise ShapeError(f"input must have rank >= 2, has {len(dims)}")
    total = int(np.prod(dims))
    if total % size:
        raise ShapeError(f"input of {total} elements does not split into rows of input_size {size}")
    bias = ctx.dims("bias")
    if bias != (units,):
        raise ShapeError(f"bias has shape {list(bias)}, expected [{units}] (num_units)")
    return [(total // size, units)]


def _fc_kernel(ctx: OpContext) -> list[np.ndarray]:
    x, wts = ctx.value("input"), ctx.value("weights")
    return [x.reshape(-1, wts.shape[1]) @ wts.T + _real_bias(ctx, "weights")]


def _fc_check(ctx: OpContext) -> None:
    _quant_check(ctx, "weights")


def _fc_sample(s: SampleContext) -> None:
    batch, units, size = s.draw.int(1, 4), s.draw.int(1, 6), s.draw.int(1, 48)
    rank = s.draw.int(2, 4)
    if rank == 2:
        dims: tuple[int, ...] = (batch, size)
    else:
        # Either extra batch dimensions or input_size split over the last dimensions.
        split = [d for d in range(1, size + 1) if size % d == 0]
        a = s.draw.choice(split)
        dims = (batch, a, size // a) if s.draw.bool() else (1, batch, size)
        if rank == 4:
            dims = (1, *dims)
    s.tensor("input", dims)
    _sample_filter_bias(s, (units, size), 0, units, name="weights")


#: input_size of the long FULLY_CONNECTED.
LONG_FC = 4096


def _long_fc_sample(s: SampleContext) -> None:
    s.tensor("input", (2, LONG_FC))
    _sample_filter_bias(s, (4, LONG_FC), 0, 4, name="weights")
    _exact_floats(s, "input", "weights", "bias")


def _fc_past_255(s: SampleContext) -> None:
    n, units, size = s.draw.int(*PAST_255), s.draw.int(*PAST_255), s.draw.int(1, 4)
    s.tensor("input", (n, size))
    _sample_filter_bias(s, (units, size), 0, units, name="weights")


_FC = Signature((Arg("input", ranks=(2, 3, 4), domain="unit"),
                 Arg("weights", ranks=(2,), domain="unit"),
                 Arg("bias", bias_type("T"), ranks=(1,), quant=bias_of("input", "weights")),
                 _ACT),
                (Arg("output", ranks=(2,)),))


# ---------------------------------------------------------------------------------------

RECORDS = [
    OpRecord(Op.CONV_2D, _window_sigs((), (_LAYOUT_OPT, *_DILATION)), _conv_variants(Version.V1_0),
             _conv_kernel, _conv_shape, _conv_sample, criterion="conv", layout="layout",
             activation="act", check=_conv_check, min_version=_old_output_scale_rule(),
             edges=(*edges.WINDOW, edges.MULTIPLIER_ABOVE_ONE, edges.BIAS_WIDE, edges.long_reduction(
                 _long_conv_sample, f"3x3 windows of depth {LONG_DEPTH}: dot products of 4608 terms"),
                 _past_255("conv")),
             doc="2-D convolution: output[b,i,j,o] = sum over the window and input channels of "
                 "input x filter[o], plus bias[o]"),
    OpRecord(Op.DEPTHWISE_CONV_2D,
             _window_sigs((Arg("multiplier", T.INT32),), (_LAYOUT_OPT, *_DILATION)),
             _conv_variants(Version.V1_0), _depthwise_kernel, _depthwise_shape, _depthwise_sample,
             criterion="conv", layout="layout", activation="act", check=_depthwise_check,
             edges=(*edges.WINDOW, edges.MULTIPLIER_ABOVE_ONE, edges.BIAS_WIDE, _past_255("depthwise")),
             min_version=_old_output_scale_rule(),
             doc="depthwise 2-D convolution: each input channel k is convolved with its own "
                 "multiplier filters into output channels k * multiplier + q, plus bias"),
    OpRecord(Op.GROUPED_CONV_2D, _window_sigs((Arg("groups", T.INT32),), (_LAYOUT,)),
             _conv_variants(Version.V1_2), _grouped_kernel, _grouped_shape, _grouped_sample,
             criterion="conv", layout="layout", activation="act", check=_grouped_check,
             edges=(*edges.WINDOW, edges.MULTIPLIER_ABOVE_ONE, edges.BIAS_WIDE, _past_255("grouped")),
             doc="grouped 2-D convolution: input and output channels split into groups, each "
                 "group convolved separately, results concatenated, plus bias"),
    OpRecord(Op.TRANSPOSE_CONV_2D,
             _window_sigs((), (_LAYOUT,), (Arg("output_shape", T.TENSOR_INT32, ranks=(1,),
                                                  const=True),)),
             _conv_variants(Version.V1_2), _transpose_kernel, _transpose_shape, _transpose_sample,
             criterion="conv", layout="layout", activation="act", check=_transpose_check,
             layout_vectors=("output_shape",),
             edges=(edges.MULTIPLIER_ABOVE_ONE, edges.BIAS_WIDE, _past_255("transpose")),
             doc="transpose (gradient) of CONV_2D: each input position adds input x filter into "
                 "a stride-spaced output window, cropped by the padding, plus bias"),
    OpRecord(Op.FULLY_CONNECTED, (_FC,),
             (*variants(Version.V1_0, F32, Q8), *variants(Version.V1_2, F16), *variants(Version.V1_3, Q8S)),
             _fc_kernel, _fc_shape, _fc_sample, criterion="conv", activation="act",
             check=_fc_check, min_version=_old_output_scale_rule("weights"),
             edges=(edges.MULTIPLIER_ABOVE_ONE, edges.BIAS_WIDE,
                    edges.long_reduction(_long_fc_sample, f"input_size {LONG_FC}: dot products of "
                                                          f"{LONG_FC} terms"),
                    edges.past_255(f"a batch of {PAST_255[0]}..{PAST_255[1]} rows into as many units",
                                   sample=_fc_past_255)),
             doc="fully connected layer: input flattened to [batch, input_size] times weights' "
                 "transpose, plus bias"),
]
