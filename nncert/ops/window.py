"""Sliding-window geometry shared by the convolution and pooling records.

An NNAPI window operation gives its padding either explicitly (four INT32 scalars: left,
right, top, bottom) or as an implicit scheme (SAME or VALID), plus strides and, for the
convolutions since 1.2, dilation factors. This module reads those inputs by name, computes
output sizes and padding the way NNAPI defines them, gathers the input windows for a
vectorised kernel (im2col), and samples valid window parameters for the records' samplers.
Everything is NHWC, as records see it.

Input names used by the records: ``pad_left pad_right pad_top pad_bottom`` (explicit),
``padding`` (implicit scheme), ``stride_w stride_h``, ``dilation_w dilation_h``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from nncert.ops.base import OpContext, SampleContext, ShapeError

#: Implicit padding schemes (NNAPI PaddingScheme). NONE adds no padding, like VALID.
PADDING_NONE, PADDING_SAME, PADDING_VALID = 0, 1, 2

EXPLICIT = "explicit"
IMPLICIT = "implicit"


def effective_size(filter_size: int, dilation: int = 1) -> int:
    """Extent of a dilated filter: (f - 1) * d + 1."""
    return (filter_size - 1) * dilation + 1


def implicit_padding(in_size: int, stride: int, filter_size: int, scheme: int,
                     dilation: int = 1) -> tuple[int, int]:
    """(head, tail) padding of one spatial dimension for an implicit padding scheme.

    SAME: the output has ceil(in / stride) elements and the padding needed for that is split
    with the smaller half first; VALID and NONE: no padding.
    """
    if scheme not in (PADDING_NONE, PADDING_SAME, PADDING_VALID):
        raise ShapeError(f"padding scheme {scheme} is not 0 (NONE), 1 (SAME) or 2 (VALID)")
    if scheme != PADDING_SAME:
        return 0, 0
    out = -(-in_size // stride)
    total = max(0, (out - 1) * stride + effective_size(filter_size, dilation) - in_size)
    return total // 2, total - total // 2


def transpose_implicit_padding(out_size: int, stride: int, filter_size: int,
                               scheme: int) -> tuple[int, int]:
    """(head, tail) padding of TRANSPOSE_CONV_2D's implicit form, from the requested output
    size. SAME pads like a convolution over the output, except that the tail is always
    total - head, so it is negative when the strides overshoot the requested size."""
    if scheme not in (PADDING_NONE, PADDING_SAME, PADDING_VALID):
        raise ShapeError(f"padding scheme {scheme} is not 0 (NONE), 1 (SAME) or 2 (VALID)")
    if scheme != PADDING_SAME:
        return 0, 0
    n = -(-out_size // stride)
    total = (n - 1) * stride + filter_size - out_size
    head = total // 2 if total > 0 else 0
    return head, total - head


@dataclass(frozen=True)
class Window:
    """One 2-D window: sizes as (height, width); padding as (head, tail) per dimension."""

    filter: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad_h: tuple[int, int]
    pad_w: tuple[int, int]

    @property
    def effective(self) -> tuple[int, int]:
        return (effective_size(self.filter[0], self.dilation[0]),
                effective_size(self.filter[1], self.dilation[1]))

    def out_size(self, in_h: int, in_w: int) -> tuple[int, int]:
        """Output height and width; ShapeError when the window does not fit once."""
        out = []
        for what, n, eff, stride, (head, tail) in (
                ("height", in_h, self.effective[0], self.stride[0], self.pad_h),
                ("width", in_w, self.effective[1], self.stride[1], self.pad_w)):
            span = n + head + tail - eff
            if span < 0:
                raise ShapeError(f"input {what} {n} with padding {head}+{tail} is smaller than the "
                                 f"(dilated) filter {what} {eff}")
            out.append(span // stride + 1)
        return out[0], out[1]


def read_window(ctx: OpContext, filter_h: int, filter_w: int, in_h: int, in_w: int) -> Window:
    """The window an operation instance describes (explicit or implicit padding), validated:
    strides and dilations >= 1, padding >= 0, filter sizes >= 1."""
    names = {a.name for a in ctx.signature.inputs}
    if filter_h < 1 or filter_w < 1:
        raise ShapeError(f"filter height and width must be >= 1, are {filter_h} and {filter_w}")
    stride = (int(ctx.value("stride_h")), int(ctx.value("stride_w")))
    if min(stride) < 1:
        raise ShapeError(f"stride_h and stride_w must be >= 1, are {stride[0]} and {stride[1]}")
    dilation = (1, 1)
    if "dilation_w" in names:
        dilation = (int(ctx.value("dilation_h")), int(ctx.value("dilation_w")))
        if min(dilation) < 1:
            raise ShapeError(f"dilation_h and dilation_w must be >= 1, are {dilation[0]} and "
                             f"{dilation[1]}")
    if "padding" in names:
        scheme = int(ctx.value("padding"))
        pad_h = implicit_padding(in_h, stride[0], filter_h, scheme, dilation[0])
        pad_w = implicit_padding(in_w, stride[1], filter_w, scheme, dilation[1])
    else:
        pad_w = (int(ctx.value("pad_left")), int(ctx.value("pad_right")))
        pad_h = (int(ctx.value("pad_top")), int(ctx.value("pad_bottom")))
        if min(pad_w + pad_h) < 0:
            raise ShapeError(f"padding must be >= 0, is left {pad_w[0]} right {pad_w[1]} "
                             f"top {pad_h[0]} bottom {pad_h[1]}")
    return Window((filter_h, filter_w), stride, dilation, pad_h, pad_w)


def _taps(win: Window, in_h: int, in_w: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices, in padded coordinates, of every filter tap of every output
    position: [out_h, filter_h] and [out_w, filter_w]."""
    out_h, out_w = win.out_size(in_h, in_w)
    rows = np.arange(out_h)[:, None] * win.stride[0] + np.arange(win.filter[0])[None, :] * win.dilation[0]
    cols = np.arange(out_w)[:, None] * win.stride[1] + np.arange(win.filter[1])[None, :] * win.dilation[1]
    return rows, cols


def gather(x: np.ndarray, win: Window, fill: float = 0.0) -> np.ndarray:
    """The input windows of every output position: [N, H, W, C] -> [N, OH, OW, FH, FW, C],
    padded positions holding ``fill``. A read-only strided view of the padded input (float64),
    not a copy: reduce it or reshape it (which copies once)."""
    n, h, w, c = x.shape
    out_h, out_w = win.out_size(h, w)
    (top, bottom), (left, right) = win.pad_h, win.pad_w
    shape = (n, h + top + bottom, w + left + right, c)
    padded = np.zeros(shape) if fill == 0 else np.full(shape, fill, dtype=np.float64)
    padded[:, top:top + h, left:left + w, :] = x
    (sh, sw), (dh, dw) = win.stride, win.dilation
    view = sliding_window_view(padded, win.effective, axis=(1, 2))  # n, h', w', c, eff_h, eff_w
    view = view[:, :sh * (out_h - 1) + 1:sh, :sw * (out_w - 1) + 1:sw, :, ::dh, ::dw]
    return view.transpose(0, 1, 2, 4, 5, 3)


def trimmed(win: Window, in_h: int, in_w: int) -> Window:
    """The same windows without the filter taps that lie in the padding for every output
    position (the outputs and the in-input taps are unchanged), so that a pooling filter far
    wider than its input (NNAPI bounds it only by int32; a fuzzer sets it to 2^30) costs the
    input's size, not the filter's. Undilated windows only: as pooling has them."""
    if win.dilation != (1, 1):
        return win
    out = win.out_size(in_h, in_w)
    dims = []
    for n, f, s, (head, tail), o in zip((in_h, in_w), win.filter, win.stride, (win.pad_h, win.pad_w), out,
                                        strict=True):
        # leading taps before the input for the last output (so for all): k + (o - 1) s < head
        lead = max(0, min(f - 1, head - (o - 1) * s))
        f, head = f - lead, head - lead
        # trailing taps past the input for the first output (so for all): k >= head + n; the
        # tail shrinks as much, which keeps the output size (span = head + n + tail - f)
        cut = max(0, f - (head + n))
        dims.append((f - cut, (head, tail - cut)))
    return Window((dims[0][0], dims[1][0]), win.stride, win.dilation, dims[0][1], dims[1][1])


def valid_counts(win: Window, in_h: int, in_w: int) -> np.ndarray:
    """How many taps of each output position's window fall inside the input: [OH, OW]."""
    win = trimmed(win, in_h, in_w)  # the same counts, not a tap of the padding enumerated
    rows, cols = _taps(win, in_h, in_w)
    top, left = win.pad_h[0], win.pad_w[0]
    in_rows = ((rows >= top) & (rows < top + in_h)).sum(axis=1)
    in_cols = ((cols >= left) & (cols < left + in_w)).sum(axis=1)
    return in_rows[:, None] * in_cols[None, :]


# ---------------------------------------------------------------------------------------
# Sampling


def sample_window(s: SampleContext, filter_h: int, filter_w: int, *, dilation: bool = False,
                  max_pad: int = 2, pool: bool = False) -> tuple[int, int]:
    """Draw strides, padding (explicit or implicit, by signature) and maybe dilation for a
    filter of the given size, set them as scalars, and return an input (height, width) for
    which the window fits. ``pool``: keep every window overlapping the input (padding
    smaller than the filter), as pooling needs. An edge case's ``window`` hook answers
    instead (``nncert.ops.edges``)."""
    if s.edge is not None and s.edge.window is not None:
        return s.edge.window(s, filter_h, filter_w, dilation, pool)
    stride = [s.draw.choice((1, 1, 2, 3)) for _ in range(2)]
    dil = [1, 1]
    if dilation and s.draw.bool(0.3):
        dil = [s.draw.int(1, 2) for _ in range(2)]
    sizes = []
    if s.signature.name == IMPLICIT:
        scheme = s.draw.choice((PADDING_SAME, PADDING_VALID))
        s.scalar("padding", scheme)
        for f, d in ((filter_h, dil[0]), (filter_w, dil[1])):
            lo = effective_size(f, d) if scheme == PADDING_VALID else 1
            sizes.append(s.draw.int(lo, lo + 4))
    else:
        pads = {}
        for (head, tail), f, d in ((("pad_top", "pad_bottom"), filter_h, dil[0]),
                                   (("pad_left", "pad_right"), filter_w, dil[1])):
            limit = min(max_pad, f - 1) if pool else max_pad
            pads[head], pads[tail] = s.draw.int(0, limit), s.draw.int(0, limit)
            lo = max(1, effective_size(f, d) - pads[head] - pads[tail])
            sizes.append(s.draw.int(lo, lo + 4))
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            s.scalar(name, pads[name])
    s.scalar("stride_w", stride[1])
    s.scalar("stride_h", stride[0])
    if dil != [1, 1] or (dilation and s.draw.bool(0.1)):
        s.scalar("dilation_w", dil[1])
        s.scalar("dilation_h", dil[0])
    return sizes[0], sizes[1]
