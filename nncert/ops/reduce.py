"""Reductions: MEAN, REDUCE_SUM/PROD/MAX/MIN/ANY/ALL, ARGMAX and ARGMIN.

The reduce family shares one signature shape (input, 1-D axes tensor, keep_dims flag), one
shape rule, one kernel builder and one sampler. MEAN's keep_dims is an INT32 (positive means
keep), the REDUCE_* operations take a BOOL. ARGMAX/ARGMIN take a single INT32 axis and
return TENSOR_INT32 indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    FREE,
    Arg,
    OpContext,
    OpRecord,
    Quant,
    SampleContext,
    ShapeError,
    Signature,
    normalize_axis,
    same_as,
    variants,
)

V = Version
_Q8 = T.TENSOR_QUANT8_ASYMM
_Q8S = T.TENSOR_QUANT8_ASYMM_SIGNED

# ---------------------------------------------------------------------------------------
# The reduce family (axes tensor + keep_dims)


def _reduce_signature(keep_type: T, quant: Quant, domain: str | None) -> Signature:
    return Signature(
        inputs=(Arg("input", ranks=(1, 2, 3, 4), domain=domain),
                Arg("axes", T.TENSOR_INT32, ranks=(1,), const=True),
                Arg("keep_dims", keep_type)),
        outputs=(Arg("output", quant=quant),),
    )


def _reduced_axes(ctx: OpContext) -> tuple[tuple[int, ...], list[int], bool]:
    """(input dims, sorted distinct reduced axes, keep_dims) of one instance."""
    dims = ctx.dims("input")
    axes = np.asarray(ctx.value("axes")).reshape(-1)
    if axes.size == 0:
        raise ShapeError("axes must name at least one dimension")
    norm = sorted({normalize_axis(int(a), len(dims), "axes value") for a in axes})
    # MEAN's INT32 flag keeps the dimensions when positive; the BOOL flag when true.
    return dims, norm, bool(ctx.value("keep_dims") > 0)


def _reduce_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims, axes, keep = _reduced_axes(ctx)
    if keep:
        return [tuple(1 if i in axes else d for i, d in enumerate(dims))]
    out = tuple(d for i, d in enumerate(dims) if i not in axes)
    return [out or (1,)]


def _reduce_kernel(fn: Callable[..., np.ndarray]) -> Callable[[OpContext], list[np.ndarray]]:
    def kernel(ctx: OpContext) -> list[np.ndarray]:
        _, axes, keep = _reduced_axes(ctx)
        out = np.asarray(fn(ctx.value("input"), axis=tuple(axes), keepdims=keep))
        return [out.reshape(1) if out.ndim == 0 else out]

    return kernel


def _reduce_sampler(max_count: int | None) -> Callable[[SampleContext], None]:
    """Random rank, a random non-empty set of distinct axes (some negative), random
    keep_dims. ``max_count`` caps the number of elements folded into one output so that an
    fp32/fp16 accumulation stays within ACC-1 of the float64 golden."""

    def sample(s: SampleContext) -> None:
        rank = s.rank()
        dims = list(s.dims(rank))
        k = s.draw.int(1, rank)
        order = list(range(rank))
        for i in range(rank - 1, 0, -1):  # Fisher-Yates with the case's draw
            j = s.draw.int(0, i)
            order[i], order[j] = order[j], order[i]
        axes = order[:k]
        while max_count and math.prod(dims[a] for a in axes) > max_count:
            big = max(axes, key=lambda a: dims[a])
            dims[big] = max(1, dims[big] // 2)
        values = [a - rank if s.draw.bool(0.3) else a for a in axes]
        s.tensor("input", dims)
        s.tensor("axes", (len(values),), value=np.asarray(values, np.int32), const=True)
        keep = s.draw.bool()
        keep_type = s.type("keep_dims")
        s.scalar("keep_dims", keep if keep_type is T.BOOL else int(keep))

    return sample


#: Length of the long reductions' axis: past 2**16, so that a count or index held in 16
#: bits wraps, and a driver that reduces the first 65536 elements only is seen.
LONG = 70_000


def _long_rows(s: SampleContext) -> np.ndarray:
    """Two rows of LONG values, each with a unique maximum and minimum past index 65536:
    multiples of 1/8 for floats (sums exact in float32), the type's range otherwise; for
    TENSOR_BOOL8, row 0 all false but one, row 1 all true but one."""
    t = s.type("input")
    dims = (2, LONG)
    top, bottom = (s.draw.int(1 << 16, LONG - 1) for _ in range(2))
    if bottom == top:
        bottom = top - 1
    if t is T.TENSOR_BOOL8:
        x = np.zeros(dims, bool)
        x[1] = True
        x[0, top], x[1, bottom] = True, False
        return x
    if t.is_quant or t is T.TENSOR_INT32:
        lo, hi = t.quant_range if t.is_quant else (-50, 50)
        x = s.draw.integers(dims, lo + 1, hi - 1)
        x[:, top], x[:, bottom] = hi, lo
        return x
    x = edges.grid(s, dims, -16, 16)
    x[:, top], x[:, bottom] = 3.0, -3.0
    return x


def _long_reduce_sample(s: SampleContext) -> None:
    s.tensor("input", (2, LONG), value=_long_rows(s))
    s.tensor("axes", (1,), value=np.asarray([s.draw.choice((1, -1))], np.int32), const=True)
    keep = s.draw.bool()
    s.scalar("keep_dims", keep if s.type("keep_dims") is T.BOOL else int(keep))


def _duplicate_axis(s: SampleContext) -> None:
    """One of the drawn axes named a second time, in the other form (1 and 1 - rank)."""
    item = s.inputs["axes"]
    axes = [int(a) for a in np.asarray(item.value).reshape(-1)]
    rank = len(s.inputs["input"].dims)
    a = axes[s.draw.int(0, len(axes) - 1)]
    axes.append(a - rank if a >= 0 else a + rank)
    item.value = np.asarray(axes, np.int32)
    item.dims = (len(axes),)


# The reductions' own edge: NNAPI asks only that each axis be in [-rank, rank), and Android
# (as TFLite) reduces each named dimension once; the sampler draws distinct axes, so a driver
# that counts an axis named twice (MEAN dividing by its size twice) passed every case.
_DUPLICATE_AXIS = edges.Edge(
    "duplicate_axis", "own", "an axis named twice in axes, once as a negative index: it is "
    "reduced once", adjust=_duplicate_axis)


def _reduce(op: Op, fn: Callable[..., np.ndarray], versions: dict[V, tuple[T, ...]], *,
            keep_type: T = T.BOOL, quant: Quant = FREE, domain: str | None = None,
            max_count: int | None = None, criterion: str = "relaxed", long: bool = True,
            duplicates: bool = False, extra: tuple = (), doc: str = "") -> OpRecord:
    vs = tuple(v for version, types in versions.items() for v in variants(version, *types))
    own = (edges.axis_of_1("axes"),) + ((_DUPLICATE_AXIS,) if duplicates else ()) + extra
    if long:
        own += (edges.long_reduction(_long_reduce_sample, f"{LONG} elements per output, extremes "
                                                          f"past index 65536"),)
    return OpRecord(op, (_reduce_signature(keep_type, quant, domain),), vs, _reduce_kernel(fn),
                    _reduce_shape, _reduce_sampler(max_count), criterion=criterion, edges=own, doc=doc)


# ---------------------------------------------------------------------------------------
# ARGMAX / ARGMIN (single INT32 axis, TENSOR_INT32 indices)

_ARG = Signature(
    inputs=(Arg("input", ranks=(1, 2, 3, 4)), Arg("axis", T.INT32)),
    outputs=(Arg("output", T.TENSOR_INT32),),
)


def _arg_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = ctx.dims("input")
    axis = normalize_axis(int(ctx.value("axis")), len(dims), "axis")
    return [tuple(d for i, d in enumerate(dims) if i != axis) or (1,)]


def _arg_kernel(fn: Callable[..., np.ndarray]) -> Callable[[OpContext], list[np.ndarray]]:
    # Ties resolve to the first (lowest) index, as numpy and the NNAPI CPU path do; the
    # sampler avoids ties so that generated cases do not depend on it.
    def kernel(ctx: OpContext) -> list[np.ndarray]:
        x = ctx.value("input")
        axis = normalize_axis(int(ctx.value("axis")), x.ndim, "axis")
        out = np.asarray(fn(x, axis=axis), dtype=np.int32)
        return [out.reshape(1) if out.ndim == 0 else out]

    return kernel


def _distinct_along(s: SampleContext, dims: tuple[int, ...], axis: int) -> np.ndarray:
    """Values with no two equal entries along ``axis`` (so the arg-index is unambiguous):
    the entries of each line get distinct ranks, and rank r draws from its own band."""
    n = dims[axis]
    ranks = np.argsort(np.argsort(s.draw.array(dims, 0.0, 1.0), axis=axis), axis=axis)
    t = s.type("input")
    if t.is_quant or t is T.TENSOR_INT32:
        lo, hi = t.quant_range if t.is_quant else (-50, 50)
        width = (hi - lo + 1) // n
        return lo + ranks * width + s.draw.integers(dims, 0, width - 1)
    # floats: band r is [r, r + 0.8) scaled into [-2, 2): gaps stay >= 0.8/n after fp16 rounding
    return (ranks + s.draw.array(dims, 0.0, 0.8)) * (4.0 / n) - 2.0


def _arg_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = s.dims(rank)
    axis = s.draw.int(-rank, rank - 1)
    s.tensor("input", dims, value=_distinct_along(s, dims, axis % rank))
    s.scalar("axis", axis)


def _long_arg_sample(s: SampleContext) -> None:
    s.tensor("input", (2, LONG), value=_long_rows(s))
    s.scalar("axis", s.draw.choice((1, -1)))


def _arg(op: Op, fn: Callable[..., np.ndarray], sign: str, doc: str) -> OpRecord:
    vs = (*variants(V.V1_2, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, _Q8),
          *variants(V.V1_3, _Q8S))
    own = (edges.axis_of_1("axis"),
           edges.long_reduction(_long_arg_sample, f"an axis of {LONG}, the extreme past index 65536"),
           edges.int32_wide("near"), edges.float_wide(sign, (T.TENSOR_FLOAT32,)))
    return OpRecord(op, (_ARG,), vs, _arg_kernel(fn), _arg_shape, _arg_sample,
                    criterion="strict", edges=own, doc=doc)


# ---------------------------------------------------------------------------------------

_FLOATS_Q8 = {V.V1_2: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, _Q8), V.V1_3: (_Q8S,)}
_FLOATS = {V.V1_2: (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)}
_BOOL = {V.V1_2: (T.TENSOR_BOOL8,)}

RECORDS = [
    _reduce(Op.MEAN, np.mean,
            {V.V1_1: (T.TENSOR_FLOAT32, _Q8), V.V1_2: (T.TENSOR_FLOAT16,), V.V1_3: (_Q8S,)},
            keep_type=T.INT32, quant=same_as("input"), max_count=16, duplicates=True,
            extra=(edges.float16_wide(20000.0, 60000.0, False, "float16 inputs of 20000..60000: the "
                                      "sum passes float16's largest, the mean does not"),),
            doc="mean of input over the listed axes (keep_dims > 0 keeps them as size 1)"),
    _reduce(Op.REDUCE_SUM, np.sum, _FLOATS, max_count=8, duplicates=True,
            doc="sum of input over the listed axes"),
    # No long product: thousands of factors in (-1, 1) underflow to zero.
    _reduce(Op.REDUCE_PROD, np.prod, _FLOATS, domain="unit", max_count=8, long=False,
            doc="product of input over the listed axes"),
    _reduce(Op.REDUCE_MAX, np.max, _FLOATS_Q8, quant=same_as("input"), extra=(edges.float_wide("negative"),),
            doc="maximum of input over the listed axes"),
    _reduce(Op.REDUCE_MIN, np.min, _FLOATS_Q8, quant=same_as("input"), extra=(edges.float_wide("positive"),),
            doc="minimum of input over the listed axes"),
    _reduce(Op.REDUCE_ANY, np.any, _BOOL, criterion="strict",
            doc="logical or of input over the listed axes"),
    _reduce(Op.REDUCE_ALL, np.all, _BOOL, criterion="strict",
            doc="logical and of input over the listed axes"),
    _arg(Op.ARGMAX, np.argmax, "negative", "index of the largest element of input along axis (TENSOR_INT32)"),
    _arg(Op.ARGMIN, np.argmin, "positive",
         "index of the smallest element of input along axis (TENSOR_INT32)"),
]
