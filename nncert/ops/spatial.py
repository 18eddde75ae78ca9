"""Spatial rearrangement: RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, DEPTH_TO_SPACE,
SPACE_TO_DEPTH, BATCH_TO_SPACE_ND and SPACE_TO_BATCH_ND.

All take a 4-D "input" with an NCHW flag ("layout"); kernels and shape rules see NHWC.
Quantised outputs keep the input's scale and zero point, so every kernel here moves or
interpolates real values (padding is the real 0, i.e. the zero point).
"""

from __future__ import annotations

import math
from fractions import Fraction

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
    round_half_away,
    same_as,
    scalar_of,
    variants,
)

V = Version
_Q8, _Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
_OUT = (Arg("output", quant=same_as("input")),)
_INPUT = Arg("input", ranks=(4,))


def _layout(since: V | None, optional: bool = True) -> Arg:
    return Arg("layout", T.BOOL, optional=optional, default=False, since=since)


def _versions(first: V, *, q8: V | None = None) -> tuple:
    """float32 at ``first``, quant8 at ``q8`` (default ``first``), float16 at 1.2 and
    quant8 signed at 1.3: the pattern all six operations share."""
    return (*variants(first, T.TENSOR_FLOAT32), *variants(q8 or first, _Q8),
            *variants(V.V1_2, T.TENSOR_FLOAT16), *variants(V.V1_3, _Q8S))


def _record(op: Op, sigs: tuple[Signature, ...], vs: tuple, kernel, shape, sample, criterion: str,
            doc: str, own: tuple = ()) -> OpRecord:
    return OpRecord(op, sigs, vs, kernel, shape, sample, criterion=criterion, layout="layout", doc=doc,
                    edges=own)


# ---------------------------------------------------------------------------------------
# RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR
#
# Two signatures: output size given as INT32 width, height ("shape") or as float scale
# factors, new size = floor(size * scale) ("scale", since 1.2). NOTE the order: width first.


def _resize_signatures(layout_since: V | None, layout_optional: bool) -> tuple[Signature, ...]:
    flags = (Arg("align_corners", T.BOOL, optional=True, default=False, since=V.V1_3),
             Arg("half_pixel_centers", T.BOOL, optional=True, default=False, since=V.V1_3))
    by_shape = Signature(
        inputs=(_INPUT, Arg("width", T.INT32), Arg("height", T.INT32),
                _layout(layout_since, layout_optional), *flags),
        outputs=_OUT, name="shape")
    by_scale = Signature(
        inputs=(_INPUT, Arg("width_scale", scalar_of("T"), since=V.V1_2),
                Arg("height_scale", scalar_of("T"), since=V.V1_2),
                _layout(layout_since, layout_optional), *flags),
        outputs=_OUT, name="scale")
    return by_shape, by_scale


def _scaled_size(size: int, scale: float) -> int:
    # The reference computes floor(float(size) * scale) in float32.
    return int(np.floor(np.float32(size) * np.float32(scale)))


def _resize_params(ctx: OpContext) -> tuple[int, int, bool, bool]:
    """(new height, new width, align_corners, half_pixel_centers), validated."""
    _, h, w, _ = ctx.dims("input")
    align = bool(ctx.value("align_corners"))
    half = bool(ctx.value("half_pixel_centers"))
    if align and half:
        raise ShapeError("half_pixel_centers requires align_corners to be false")
    if ctx.signature.name == "scale":
        ws, hs = float(ctx.value("width_scale")), float(ctx.value("height_scale"))
        if not (ws > 0 and hs > 0):
            raise ShapeError(f"width_scale {ws:g} and height_scale {hs:g} must be positive")
        ow, oh = _scaled_size(w, ws), _scaled_size(h, hs)
    else:
        ow, oh = int(ctx.value("width")), int(ctx.value("height"))
    if ow < 1 or oh < 1:
        raise ShapeError(f"output height {oh} and width {ow} must be at least 1")
    return oh, ow, align, half


def _resize_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, _, _, c = ctx.dims("input")
    oh, ow, _, _ = _resize_params(ctx)
    return [(n, oh, ow, c)]


def _ratio(in_size: int, out_size: int, align: bool) -> tuple[int, int]:
    """The input-per-output step as a fraction (numerator, denominator)."""
    if align and out_size > 1:
        return in_size - 1, out_size - 1
    return in_size, out_size


def _bilinear_axis(in_size: int, out_size: int, align: bool, half: bool):
    """Source rows (lower, upper) and the weight of the upper one, for one axis.

    pos = x * step, or (x + 0.5) * step - 0.5 with half-pixel centres; lower =
    max(floor(pos), 0), upper = min(ceil(pos), in - 1), weight = pos - lower. At the borders
    both rows are the same one, so the weights (which may leave [0, 1] there) still sum to 1.
    """
    num, den = _ratio(in_size, out_size, align)
    x = np.arange(out_size, dtype=np.float64)
    pos = (x + 0.5) * num / den - 0.5 if half else x * num / den
    lower = np.maximum(np.floor(pos), 0).astype(np.intp)
    upper = np.minimum(np.ceil(pos), in_size - 1).astype(np.intp)
    return lower, upper, pos - lower


def _bilinear(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.value("input")
    oh, ow, align, half = _resize_params(ctx)
    y0, y1, fy = _bilinear_axis(x.shape[1], oh, align, half)
    x0, x1, fx = _bilinear_axis(x.shape[2], ow, align, half)
    fy, fx = fy[None, :, None, None], fx[None, None, :, None]
    top = x[:, y0][:, :, x0] * (1 - fx) + x[:, y0][:, :, x1] * fx
    bottom = x[:, y1][:, :, x0] * (1 - fx) + x[:, y1][:, :, x1] * fx
    return [top * (1 - fy) + bottom * fy]


def _nearest_axis(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    """Source index per output index, in float32 like the reference: v = (x + offset) *
    step; index = round(v) (half away) with align_corners, else floor(v); clamped to
    [0, in - 1]."""
    num, den = _ratio(in_size, out_size, align)
    step = np.float32(num) / np.float32(den)
    v = (np.arange(out_size, dtype=np.float32) + np.float32(0.5 if half else 0.0)) * step
    idx = round_half_away(v) if align else np.floor(v)
    return np.clip(idx, 0, in_size - 1).astype(np.intp)


def _nearest_axis_exact(in_size: int, out_size: int, align: bool, half: bool) -> list[int]:
    """The same indices in exact rational arithmetic."""
    num, den = _ratio(in_size, out_size, align)
    out = []
    for x in range(out_size):
        v = (x + (Fraction(1, 2) if half else 0)) * Fraction(num, den)
        i = math.floor(v + Fraction(1, 2)) if align else math.floor(v)
        out.append(min(max(i, 0), in_size - 1))
    return out


def _nearest(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.value("input")
    oh, ow, align, half = _resize_params(ctx)
    rows = _nearest_axis(x.shape[1], oh, align, half)
    cols = _nearest_axis(x.shape[2], ow, align, half)
    return [x[:, rows][:, :, cols]]


def _nearest_unambiguous(in_size: int, out_size: int, align: bool, half: bool) -> bool:
    return list(_nearest_axis(in_size, out_size, align, half)) == \
        _nearest_axis_exact(in_size, out_size, align, half)


_RESIZE_MODES = ("none",) * 5 + ("explicit", "align", "align", "half", "half")


def _resize_sampler(nearest: bool):
    """Small images; new sizes 1..8 (up- and down-sampling); align_corners or
    half_pixel_centers sometimes. For nearest neighbour, sizes whose float32 source index
    differs from the exact one are redrawn, so the golden does not hinge on rounding."""

    def sample(s: SampleContext) -> None:
        n, h, w, c = (s.draw.int(1, 2), s.draw.int(1, 5), s.draw.int(1, 5), s.draw.int(1, 3))
        mode = s.draw.choice(_RESIZE_MODES)
        align, half = mode == "align", mode == "half"
        by_scale = s.signature.name == "scale"
        for _ in range(20):
            oh, ow = s.draw.int(1, 8), s.draw.int(1, 8)
            if by_scale:
                # a scale well inside [new, new + 1) / size survives fp16 storage
                dt = np.float16 if s.type("width_scale") is T.FLOAT16 else np.float32
                ws, hs = dt((ow + 0.3) / w), dt((oh + 0.3) / h)
                ow, oh = _scaled_size(w, ws), _scaled_size(h, hs)
            if not nearest or (_nearest_unambiguous(h, oh, align, half) and
                               _nearest_unambiguous(w, ow, align, half)):
                break
        else:  # the identity resize is always exact
            oh, ow = h, w
            if by_scale:
                ws = hs = 1.0
        s.tensor("input", (n, h, w, c))
        if by_scale:
            s.scalar("width_scale", float(ws))
            s.scalar("height_scale", float(hs))
        else:
            s.scalar("width", ow)
            s.scalar("height", oh)
        if nearest:
            s.scalar("layout", False)  # required here; the case builder sets it for NCHW
        if mode != "none":
            s.scalar("align_corners", align)
            s.scalar("half_pixel_centers", half)

    return sample


def _wide_output(nearest: bool):
    """One or two rows of 520..1100 pixels resized to 4 times the width (2080..4400 columns),
    the height kept, without align_corners (half_pixel_centers or not): every source
    coordinate (x * 1/4, or (x + 0.5) / 4 - 0.5) is exact in float32, but not in float16
    past 2048 columns."""

    def sample(s: SampleContext) -> None:
        h, w = s.draw.int(1, 2), s.draw.int(520, 1100)
        half = s.draw.bool()
        s.tensor("input", (1, h, w, 1))
        if s.signature.name == "scale":
            s.scalar("width_scale", 4.0)
            s.scalar("height_scale", 1.0)
        else:
            s.scalar("width", 4 * w)
            s.scalar("height", h)
        if nearest:
            s.scalar("layout", False)
        s.scalar("align_corners", False)
        s.scalar("half_pixel_centers", half)

    return edges.Edge("wide_output", "resize", "rows resized to 2080..4400 columns (4x, no align_corners): "
                      "source coordinates exact in float32 that float16 cannot hold", sample=sample)


# ---------------------------------------------------------------------------------------
# DEPTH_TO_SPACE / SPACE_TO_DEPTH


def _block_signature() -> Signature:
    return Signature(inputs=(_INPUT, Arg("block_size", T.INT32), _layout(V.V1_2)), outputs=_OUT)


def _block_size(ctx: OpContext) -> int:
    b = int(ctx.value("block_size"))
    if b < 1:
        raise ShapeError(f"block_size {b} must be at least 1")
    return b


def _d2s_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    b = _block_size(ctx)
    if c % (b * b):
        raise ShapeError(f"input depth {c} must be divisible by block_size^2 = {b * b}")
    return [(n, h * b, w * b, c // (b * b))]


def _s2d_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    b = _block_size(ctx)
    if h % b or w % b:
        raise ShapeError(f"input height {h} and width {w} must be divisible by block_size {b}")
    return [(n, h // b, w // b, c * b * b)]


def _d2s(ctx: OpContext) -> list[np.ndarray]:
    # output[n, h*b + i, w*b + j, c] = input[n, h, w, (i*b + j) * depth_out + c]
    x = ctx.value("input")
    n, h, w, c = x.shape
    b = _block_size(ctx)
    co = c // (b * b)
    return [x.reshape(n, h, w, b, b, co).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, co)]


def _s2d(ctx: OpContext) -> list[np.ndarray]:
    # the inverse: output[n, h, w, (i*b + j) * depth_in + c] = input[n, h*b + i, w*b + j, c]
    x = ctx.value("input")
    n, h, w, c = x.shape
    b = _block_size(ctx)
    return [x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
            .reshape(n, h // b, w // b, b * b * c)]


def _d2s_sample(s: SampleContext) -> None:
    b = s.draw.int(1, 3)
    s.tensor("input", (s.draw.int(1, 2), s.draw.int(1, 3), s.draw.int(1, 3), s.draw.int(1, 3) * b * b))
    s.scalar("block_size", b)


def _s2d_sample(s: SampleContext) -> None:
    b = s.draw.int(1, 3)
    s.tensor("input", (s.draw.int(1, 2), s.draw.int(1, 3) * b, s.draw.int(1, 3) * b, s.draw.int(1, 3)))
    s.scalar("block_size", b)


# ---------------------------------------------------------------------------------------
# BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND (block shape over the 2 spatial dimensions)

_B2S = Signature(
    inputs=(_INPUT, Arg("block_shape", T.TENSOR_INT32, ranks=(1,), const=True), _layout(V.V1_2)),
    outputs=_OUT)
_S2B = Signature(
    inputs=(_INPUT, Arg("block_shape", T.TENSOR_INT32, ranks=(1,), const=True),
            Arg("paddings", T.TENSOR_INT32, ranks=(2,), const=True), _layout(V.V1_2)),
    outputs=_OUT)


def _block_shape(ctx: OpContext) -> tuple[int, int]:
    block = np.asarray(ctx.value("block_shape"))
    if block.shape != (2,):
        raise ShapeError(f"block_shape must have shape [2] (one per spatial dim), has {list(block.shape)}")
    if (block < 1).any():
        raise ShapeError(f"block_shape values {block.tolist()} must be at least 1")
    return int(block[0]), int(block[1])


def _paddings(ctx: OpContext) -> np.ndarray:
    pad = np.asarray(ctx.value("paddings"))
    if pad.shape != (2, 2):
        raise ShapeError(f"paddings must have shape [2, 2], has {list(pad.shape)}")
    if (pad < 0).any():
        raise ShapeError(f"paddings {pad.tolist()} must be non-negative")
    return pad.astype(np.int64)


def _b2s_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    bh, bw = _block_shape(ctx)
    if n % (bh * bw):
        raise ShapeError(f"input batch {n} must be divisible by the block_shape product {bh * bw}")
    return [(n // (bh * bw), h * bh, w * bw, c)]


def _s2b_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    bh, bw = _block_shape(ctx)
    pad = _paddings(ctx)
    ph, pw = h + pad[0].sum(), w + pad[1].sum()
    if ph % bh or pw % bw:
        raise ShapeError(f"padded height {ph} and width {pw} must be divisible by block_shape {[bh, bw]}")
    return [(n * bh * bw, int(ph // bh), int(pw // bw), c)]


def _b2s(ctx: OpContext) -> list[np.ndarray]:
    # output[n, h*bh + i, w*bw + j, c] = input[(i*bw + j) * batch_out + n, h, w, c]
    x = ctx.value("input")
    bh, bw = _block_shape(ctx)
    n, h, w, c = x.shape
    no = n // (bh * bw)
    return [x.reshape(bh, bw, no, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(no, h * bh, w * bw, c)]


def _s2b(ctx: OpContext) -> list[np.ndarray]:
    # the inverse, after zero padding: output[(i*bw + j) * batch + n, h, w, c] =
    # padded[n, h*bh + i, w*bw + j, c]
    x = np.pad(ctx.value("input"), [(0, 0), *_paddings(ctx).tolist(), (0, 0)])
    bh, bw = _block_shape(ctx)
    n, h, w, c = x.shape
    return [x.reshape(n, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
            .reshape(bh * bw * n, h // bh, w // bw, c)]


def _b2s_sample(s: SampleContext) -> None:
    bh, bw = s.draw.int(1, 3), s.draw.int(1, 3)
    s.tensor("input", (s.draw.int(1, 2) * bh * bw, s.draw.int(1, 3), s.draw.int(1, 3), s.draw.int(1, 3)))
    s.tensor("block_shape", (2,), value=np.array([bh, bw], np.int32), const=True)


def _s2b_sample(s: SampleContext) -> None:
    block, dims, pads = [], [], []
    for _ in range(2):
        b = s.draw.int(1, 3)
        padded = s.draw.int(1, 3) * b
        total = s.draw.int(0, min(b, padded - 1))  # keep at least one real row
        before = s.draw.int(0, total)
        block.append(b)
        dims.append(padded - total)
        pads.append((before, total - before))
    s.tensor("input", (s.draw.int(1, 2), *dims, s.draw.int(1, 3)))
    s.tensor("block_shape", (2,), value=np.array(block, np.int32), const=True)
    s.tensor("paddings", (2, 2), value=np.array(pads, np.int32), const=True)


# ---------------------------------------------------------------------------------------

RECORDS = [
    _record(Op.RESIZE_BILINEAR, _resize_signatures(V.V1_2, True), _versions(V.V1_0, q8=V.V1_2),
            _bilinear, _resize_shape, _resize_sampler(nearest=False), "relaxed",
            "bilinear resize of the height and width of input to the new size",
            (_wide_output(False),)),
    _record(Op.RESIZE_NEAREST_NEIGHBOR, _resize_signatures(None, False), _versions(V.V1_2),
            _nearest, _resize_shape, _resize_sampler(nearest=True), "strict",
            "nearest-neighbour resize of the height and width of input to the new size",
            (_wide_output(True),)),
    _record(Op.DEPTH_TO_SPACE, (_block_signature(),), _versions(V.V1_0), _d2s, _d2s_shape,
            _d2s_sample, "strict", "moves depth blocks of block_size^2 into block_size x block_size "
            "spatial blocks"),
    _record(Op.SPACE_TO_DEPTH, (_block_signature(),), _versions(V.V1_0), _s2d, _s2d_shape,
            _s2d_sample, "strict", "moves block_size x block_size spatial blocks into depth"),
    _record(Op.BATCH_TO_SPACE_ND, (_B2S,), _versions(V.V1_1), _b2s, _b2s_shape, _b2s_sample,
            "strict", "interleaves batch blocks of block_shape back into height and width"),
    _record(Op.SPACE_TO_BATCH_ND, (_S2B,), _versions(V.V1_1), _s2b, _s2b_shape, _s2b_sample,
            "strict", "zero-pads height and width, then moves block_shape blocks into the batch"),
]
