"""2-D pooling: AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.

Window geometry (explicit and implicit padding) is shared with the convolutions through
``nncert.ops.window``. Padded positions do not count: the average and the L2 mean divide
by the number of taps that fall inside the input, and max ignores them.
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
    same_as,
    variants,
)
from nncert.ops.window import (
    EXPLICIT,
    IMPLICIT,
    PADDING_VALID,
    Window,
    gather,
    read_window,
    sample_window,
    trimmed,
    valid_counts,
)

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def _sigs(out: Arg) -> tuple[Signature, Signature]:
    inp = Arg("input", ranks=(4,))
    pads = tuple(Arg(n, T.INT32) for n in ("pad_left", "pad_right", "pad_top", "pad_bottom"))
    rest = (Arg("stride_w", T.INT32), Arg("stride_h", T.INT32), Arg("filter_w", T.INT32),
            Arg("filter_h", T.INT32), Arg("act", T.INT32),
            Arg("layout", T.BOOL, optional=True, default=False, since=Version.V1_2))
    return (Signature((inp, *pads, *rest), (out,), EXPLICIT),
            Signature((inp, Arg("padding", T.INT32), *rest), (out,), IMPLICIT))


def _window(ctx: OpContext, h: int, w: int) -> Window:
    return read_window(ctx, int(ctx.value("filter_h")), int(ctx.value("filter_w")), h, w)


def _pool_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, h, w, c = ctx.dims("input")
    oh, ow = _window(ctx, h, w).out_size(h, w)
    return [(n, oh, ow, c)]


def _windows(ctx: OpContext, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """Gathered windows [N, OH, OW, FH, FW, C] and in-input tap counts [OH, OW]."""
    x = ctx.value("input")
    win = trimmed(_window(ctx, x.shape[1], x.shape[2]), x.shape[1], x.shape[2])
    counts = valid_counts(win, x.shape[1], x.shape[2])
    if counts.size and counts.min() == 0:
        raise ShapeError("a pooling window lies wholly in the padding (padding >= filter size)")
    return gather(x, win, fill), counts


def _average(ctx: OpContext) -> list[np.ndarray]:
    p, counts = _windows(ctx, 0.0)
    return [p.sum(axis=(3, 4)) / counts[None, :, :, None]]


def _max(ctx: OpContext) -> list[np.ndarray]:
    p, _ = _windows(ctx, -np.inf)
    return [p.max(axis=(3, 4))]


def _l2(ctx: OpContext) -> list[np.ndarray]:
    p, counts = _windows(ctx, 0.0)
    return [np.sqrt((p * p).sum(axis=(3, 4)) / counts[None, :, :, None])]


def _pool_sample(s: SampleContext) -> None:
    fh, fw = s.draw.int(1, 4), s.draw.int(1, 4)
    h, w = sample_window(s, fh, fw, pool=True)
    s.scalar("filter_w", fw)
    s.scalar("filter_h", fh)
    s.tensor("input", (s.draw.int(1, 2), h, w, s.draw.int(1, 4)))


def _global_window(s: SampleContext) -> None:
    """One window of 12x12..16x16 over the whole input (global pooling): 144 to 256 stored
    values in the top sixth of the type's range."""
    fh, fw = s.draw.int(12, 16), s.draw.int(12, 16)
    if s.signature.name == IMPLICIT:
        s.scalar("padding", PADDING_VALID)
    else:
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            s.scalar(name, 0)
    for name, value in (("stride_w", 1), ("stride_h", 1), ("filter_w", fw), ("filter_h", fh)):
        s.scalar(name, value)
    dims = (1, fh, fw, s.draw.int(1, 3))
    lo, hi = s.type("input").quant_range
    s.tensor("input", dims, value=s.draw.integers(dims, hi - (hi - lo) // 6, hi))


def _past_255_sample(s: SampleContext) -> None:
    """A batch of 257..300 2x2 images, one 2x2 window each."""
    if s.signature.name == IMPLICIT:
        s.scalar("padding", PADDING_VALID)
    else:
        for name in ("pad_left", "pad_right", "pad_top", "pad_bottom"):
            s.scalar(name, 0)
    for name, value in (("stride_w", 1), ("stride_h", 1), ("filter_w", 2), ("filter_h", 2)):
        s.scalar(name, value)
    s.tensor("input", (s.draw.int(257, 300), 2, 2, s.draw.int(1, 2)))


#: Every pooling's: the samplers draw batches of 1..2, so a driver counting batches in 8 bits
#: passed every case.
_PAST_255 = edges.past_255("a batch of 257..300 2x2 images, one window each", sample=_past_255_sample)


# AVERAGE_POOL_2D's own edge (quantised): generated windows have at most 16 taps, so their sums
# of stored values (4080 at most) fit a 16-bit register; a global window's (up to 65,280) do not.
_GLOBAL_WINDOW = edges.Edge(
    "global_window", "window", "a quantised window of 144..256 taps over the whole input, values "
    "near the type's top: a uint8 window's sum of stored values passes 32767",
    applies=lambda record, sig, var_: var_.primary.is_quant, sample=_global_window)


def _pool(op: Op, kernel, types: dict[Version, tuple[T, ...]], out: Arg, doc: str,
          own: tuple = ()) -> OpRecord:
    vs = tuple(v for version, ts in types.items() for v in variants(version, *ts))
    return OpRecord(op, _sigs(out), vs, kernel, _pool_shape, _pool_sample, criterion="relaxed",
                    layout="layout", activation="act", edges=(*edges.WINDOW, _PAST_255, *own), doc=doc)


_QUANT_POOL = {Version.V1_0: (F32, Q8), Version.V1_2: (F16,), Version.V1_3: (Q8S,)}
RECORDS = [
    _pool(Op.AVERAGE_POOL_2D, _average, _QUANT_POOL, Arg("output", ranks=(4,), quant=same_as("input")),
          "mean of each window, over the taps inside the input",
          (_GLOBAL_WINDOW, edges.float16_wide(20000.0, 60000.0, False, "float16 inputs of 20000..60000: "
                                              "a window's sum passes float16's largest, its mean does not"))),
    _pool(Op.MAX_POOL_2D, _max, _QUANT_POOL, Arg("output", ranks=(4,), quant=same_as("input")),
          "maximum of each window, over the taps inside the input", (edges.float_wide("negative"),)),
    _pool(Op.L2_POOL_2D, _l2, {Version.V1_0: (F32,), Version.V1_2: (F16,)}, Arg("output", ranks=(4,)),
          "square root of the mean square of each window, over the taps inside the input",
          (edges.Without("saturate_relu", "never negative: a fused RELU has nothing to clamp"),
           edges.float16_wide(300.0, 3000.0, True, "float16 inputs of magnitude 300..3000: their "
                              "squares pass float16's largest, the root mean square does not"))),
]
