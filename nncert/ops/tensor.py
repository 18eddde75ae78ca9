"""Tensor construction and rearrangement: FILL, RANK (HAL 1.3), BATCH_MATMUL, PACK (feature
level 6), MIRROR_PAD, REVERSE (feature level 7).

Semantics as NNAPI's OperationTypes.h documents them; validity rules where the
documentation is silent follow the rules Android's validation applies (noted per rule):

- FILL: a tensor of the shape the 1-D ``dims`` tensor holds, every element ``value`` (a
  FLOAT16 / FLOAT32 / INT32 scalar matching the output type). When ``dims`` is not a
  constant the output shape is known only at run time (the shape rule raises Unknown).
- RANK: the number of dimensions of any tensor, as an INT32 *scalar* output.
- BATCH_MATMUL: ``input0 @ input1`` per batch, either slice adjointed (transposed: the
  types are real) first; inputs of equal rank 2..4 and equal batch dimensions (Android
  does not broadcast them). Android's validation takes exactly four inputs; adj_x / adj_y
  may be NO_VALUE (default false). A quantised output has its own scale and zero point.
- PACK: N >= 1 tensors of identical shape stacked along a new ``axis`` in [0, rank]
  (no negative axis); quantised inputs and output share one scale and zero point.
- MIRROR_PAD: REFLECT (0, the border element not repeated, paddings < dimension) or
  SYMMETRIC (1, repeated, paddings <= dimension) padding.
- REVERSE: the input with one dimension (``axis``, a TENSOR_INT32 of shape [1], in
  [0, rank)) reversed.

All but BATCH_MATMUL copy values, so they use the "strict" criterion; BATCH_MATMUL sums
products and is judged as a convolution ("conv").
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
    Unknown,
    same_as,
    variants,
)

_F16, _F32, _I32 = T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32
_Q8, _Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
#: "Supported tensor rank: from 1": 8 stands in for no upper bound (as in shape.py).
_FROM_1 = tuple(range(1, 9))
#: The types of the copy operations PACK, MIRROR_PAD and REVERSE.
_COPY_TYPES = (_F16, _F32, _Q8, _Q8S, _I32)


def _vector(ctx: OpContext, name: str) -> list[int]:
    """The value of a 1-D TENSOR_INT32 input (Unknown when it is not known yet)."""
    dims = ctx.dims(name)
    if len(dims) != 1:
        raise ShapeError(f"{name} must be a 1-D tensor, has shape {list(dims)}")
    return [int(v) for v in np.asarray(ctx.value(name)).reshape(-1)]


def _same_quant(ctx: OpContext, name: str) -> None:
    """Quantised operands of ``name`` and the output share one scale and zero point."""
    ops = ctx.operands(name)
    out = ctx.outputs[0]
    if not out.type.is_quant:
        return
    for i, o in enumerate(ops):
        if (np.float32(o.scale), o.zero_point) != (np.float32(out.scale), out.zero_point):
            raise ShapeError(f"{name} {i} has scale {o.scale:g} and zero point {o.zero_point}; "
                             f"every input must have the output's ({out.scale:g}, {out.zero_point})")


# ---------------------------------------------------------------------------------------
# FILL


def _fill_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    shape = _vector(ctx, "dims")
    if not shape:
        raise ShapeError("dims is empty; the output rank must be at least 1")
    if any(d < 1 for d in shape):
        raise ShapeError(f"dims entries must be positive (NNAPI has no empty tensors), got {shape}")
    return [tuple(shape)]


def _fill_kernel(ctx: OpContext) -> list[np.ndarray]:
    shape = _fill_shape(ctx)[0]
    v = ctx.value("value")
    if ctx.variant.primary is _I32:
        return [np.full(shape, int(v), np.int32)]
    return [np.full(shape, float(v), np.float64)]


def _fill_value_type(b: dict[str, T]) -> T:
    return {_F16: T.FLOAT16, _F32: T.FLOAT32}.get(b["T"], T.INT32)


_fill_value_type.__name__ = "scalar_of(T)"


#: The largest finite value of each output type (its negation is the lowest, but for INT32).
_TYPE_MAX = {_F16: 65504.0, _F32: float(np.finfo(np.float32).max), _I32: 2**31 - 1}


def _fill_sample(s: SampleContext, one: bool = False, extreme: str = "") -> None:
    """``one``: every dimension 1; ``extreme``: the value at the type's "max" or "lowest"."""
    rank = s.rank()
    dims = (1,) * rank if one else s.dims(rank, 1, 4)
    # dims is data: a model input in some variations, the output shape then known at run time.
    s.tensor("dims", (rank,), value=np.array(dims, np.int32), const=s.draw.bool(0.7))
    t = s.variant.primary
    if extreme:
        top = _TYPE_MAX[t]
        s.scalar("value", top if extreme == "max" else -top - (t is _I32))
    elif t is _I32:
        s.scalar("value", s.draw.int(-1000, 1000))
    else:
        s.scalar("value", round(s.draw.float(-4.0, 4.0), 3))


FILL = OpRecord(
    Op.FILL,
    (Signature((Arg("dims", _I32, ranks=(1,)), Arg("value", _fill_value_type)),
               (Arg("output", ranks=_FROM_1),)),),
    tuple(variants(Version.V1_3, _F16, _F32, _I32)),
    _fill_kernel, _fill_shape, _fill_sample, criterion="strict",
    edges=(edges.Edge("one_element", "fill", "every dimension 1 (rank 1..4): a single element, "
                      "not a scalar", sample=lambda s: _fill_sample(s, one=True)),
           edges.Edge("value_max", "fill", "value the type's largest finite value (FLT_MAX, "
                      "65504, INT32_MAX): no saturation, rounding or overflow on the way",
                      sample=lambda s: _fill_sample(s, extreme="max")),
           edges.Edge("value_lowest", "fill", "value the type's lowest (-FLT_MAX, -65504, "
                      "INT32_MIN, which has no positive counterpart)",
                      sample=lambda s: _fill_sample(s, extreme="lowest"))),
    graphs="its output shape is the value of its dims tensor (data-dependent when dims is "
           "computed), and it consumes no other tensor",
    doc="a tensor of shape dims with every element equal to value",
)


# ---------------------------------------------------------------------------------------
# RANK

_RANK_TYPES = (_F16, _F32, _I32, _Q8, T.TENSOR_QUANT16_SYMM, T.TENSOR_BOOL8,
               T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT8_SYMM, _Q8S)


def _rank_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    if ctx.rank("input") < 1:
        raise ShapeError("input must have rank 1 or more")
    return [()]


def _rank_sample(s: SampleContext, rank: int = 0, ones: bool = False) -> None:
    """``rank``: that rank (else 1..4); ``ones``: every dimension 1."""
    rank = rank or s.draw.int(1, 4)  # 4 at most: inputs_as_internal feeds them through ADD
    dims = (1,) * rank if ones else s.dims(rank, 1, 3 if rank <= 4 else 2)
    if s.variant.primary is T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        s.tensor("input", dims, channel_dim=s.draw.int(0, rank - 1))
    else:
        s.tensor("input", dims)


RANK = OpRecord(
    Op.RANK,
    (Signature((Arg("input", ranks=_FROM_1),), (Arg("output", T.INT32),)),),
    tuple(variants(Version.V1_3, *_RANK_TYPES)),
    lambda ctx: [np.int32(len(ctx.dims("input")))], _rank_shape, _rank_sample,
    criterion="strict", dequantize=False,
    # Unit dimensions are where a driver that squeezes shapes (or takes [1] for a scalar)
    # answers a smaller rank; rank 6 is beyond the 4 most kernels stop at ("from 1": no bound).
    edges=(edges.Edge("rank_1_one_element", "rank", "input of shape [1]: rank 1, not a scalar",
                      sample=lambda s: _rank_sample(s, 1, ones=True)),
           edges.Edge("rank_4_ones", "rank", "input of shape [1, 1, 1, 1]: rank 4",
                      sample=lambda s: _rank_sample(s, 4, ones=True)),
           edges.Edge("rank_6", "rank", "a rank-6 input (sides 1..2): NNAPI bounds no rank",
                      sample=lambda s: _rank_sample(s, 6))),
    graphs="its output is an INT32 scalar, which no operation of a random graph consumes",
    doc="the number of dimensions of input, as an INT32 scalar",
)


# ---------------------------------------------------------------------------------------
# BATCH_MATMUL


def _bmm_plan(ctx: OpContext) -> tuple[bool, bool, tuple[int, ...]]:
    if "adj_y" not in ctx.match.positions:
        # Android's validation: exactly four inputs (adj_x / adj_y may be NO_VALUE).
        raise ShapeError("BATCH_MATMUL takes 4 inputs; adj_x and adj_y may be omitted "
                         "(NO_VALUE) but not left out")
    a, b = ctx.dims("input0"), ctx.dims("input1")
    if len(a) != len(b):
        raise ShapeError(f"input0 has rank {len(a)}, input1 rank {len(b)}; they must be equal")
    if not 2 <= len(a) <= 4:
        raise ShapeError(f"inputs have rank {len(a)}, BATCH_MATMUL takes rank 2..4")
    if a[:-2] != b[:-2]:
        raise ShapeError(f"batch dimensions {list(a[:-2])} and {list(b[:-2])} differ")
    adj_x, adj_y = bool(ctx.value("adj_x")), bool(ctx.value("adj_y"))
    rx, cx = (a[-1], a[-2]) if adj_x else (a[-2], a[-1])
    ry, cy = (b[-1], b[-2]) if adj_y else (b[-2], b[-1])
    if cx != ry:
        raise ShapeError(f"input0 slices are [{rx}, {cx}] and input1 slices [{ry}, {cy}] "
                         f"(after adj_x={adj_x}, adj_y={adj_y}): {cx} != {ry}")
    return adj_x, adj_y, (*a[:-2], rx, cy)


def _bmm_kernel(ctx: OpContext) -> list[np.ndarray]:
    adj_x, adj_y, _ = _bmm_plan(ctx)
    x, y = ctx.value("input0"), ctx.value("input1")
    if ctx.variant.primary is _I32:  # exact in int64; results outside int32 are unspecified
        x, y = x.astype(np.int64), y.astype(np.int64)
    if adj_x:
        x = np.swapaxes(x, -1, -2)
    if adj_y:
        y = np.swapaxes(y, -1, -2)
    out = np.matmul(x, y)
    return [out.astype(np.int32) if ctx.variant.primary is _I32 else out]


#: The inner (summed) dimension of the long_reduction edge.
LONG_INNER = 512


def _bmm_sample(s: SampleContext, edge: str = "") -> None:
    """``edge``: "adj_both" (both slices transposed), "inner_1" (an outer product),
    "batch_rank_4" (rank 4, batch dimensions 2..3), "long" (LONG_INNER products summed)."""
    if edge == "past_255":  # a batch of 257..300 small slices
        n, r, k, c = s.draw.int(257, 300), s.draw.int(1, 2), s.draw.int(1, 2), s.draw.int(1, 2)
        s.tensor("input0", (n, r, k))
        s.tensor("input1", (n, k, c))
        s.scalar("adj_x", False)
        s.scalar("adj_y", False)
        return
    rank = 4 if edge == "batch_rank_4" else s.draw.int(2, 3 if edge == "long" else 4)
    lo = 2 if edge in ("batch_rank_4", "long") else 1
    batch = list(s.dims(rank - 2, lo, 3 if edge != "long" else 2)) if rank > 2 else []
    r, k, c = (s.draw.int(1, 5 if edge != "long" else 3) for _ in range(3))
    k = {"inner_1": 1, "long": LONG_INNER}.get(edge, k)
    adj_x, adj_y = (True, True) if edge == "adj_both" else (s.draw.bool(), s.draw.bool())
    d0, d1 = (*batch, *((k, r) if adj_x else (r, k))), (*batch, *((c, k) if adj_y else (k, c)))
    if edge == "long" and s.variant.primary is _I32:
        s.tensor("input0", d0, value=s.draw.integers(d0, -7, 7).astype(np.int32))
        s.tensor("input1", d1, value=s.draw.integers(d1, -7, 7).astype(np.int32))
    elif edge == "long" and not s.type("input0").is_quant:
        # Multiples of 1/8 in (-1, 1): every partial sum exact in float32, in any order.
        s.tensor("input0", d0, value=edges.grid(s, d0, -7, 7))
        s.tensor("input1", d1, value=edges.grid(s, d1, -7, 7))
    else:
        s.tensor("input0", d0)
        s.tensor("input1", d1)
    for name, v in (("adj_x", adj_x), ("adj_y", adj_y)):
        if not v and not edge and s.draw.bool(0.2):
            s.omit(name)  # NO_VALUE: the default, false
        else:
            s.scalar(name, v)


def _bmm_edge(name: str, doc: str, edge: str) -> edges.Edge:
    return edges.Edge(name, "matmul", doc, sample=lambda s: _bmm_sample(s, edge))


BATCH_MATMUL = OpRecord(
    Op.BATCH_MATMUL,
    (Signature((Arg("input0", ranks=(2, 3, 4)), Arg("input1", ranks=(2, 3, 4)),
                Arg("adj_x", T.BOOL, optional=True, default=False),
                Arg("adj_y", T.BOOL, optional=True, default=False)),
               (Arg("output", ranks=(2, 3, 4)),)),),
    tuple(variants(Version.FL6, _F16, _F32, _Q8S, _I32)),
    _bmm_kernel, lambda ctx: [_bmm_plan(ctx)[2]], _bmm_sample, criterion="conv",
    edges=(_bmm_edge("adj_both", "adj_x and adj_y both true: both slices transposed", "adj_both"),
           _bmm_edge("inner_1", "inner dimension 1: each slice an outer product", "inner_1"),
           _bmm_edge("batch_rank_4", "rank 4 with two batch dimensions of 2..3", "batch_rank_4"),
           # Not heavy: at most 2 x 3 x 512 x 2 elements per input.
           edges.Edge("long_inner", "long", f"inner dimension {LONG_INNER}: dot products of "
                      f"{LONG_INNER} terms (float data on a 1/8 grid, exact in float32)",
                      sample=lambda s: _bmm_sample(s, "long")),
           edges.past_255("a batch of 257..300 slices of at most 2x2",
                          sample=lambda s: _bmm_sample(s, "past_255"))),
    doc="per batch, input0 (transposed if adj_x) times input1 (transposed if adj_y)",
)


# ---------------------------------------------------------------------------------------
# PACK


def _pack_plan(ctx: OpContext) -> tuple[int, tuple[int, ...], int]:
    operands = ctx.operands("input")
    if any(not o.fully_specified for o in operands):
        raise Unknown("input")
    shape = operands[0].dimensions
    for i, o in enumerate(operands[1:], start=1):
        if o.dimensions != shape:
            raise ShapeError(f"input {i} has shape {list(o.dimensions)}, input 0 {list(shape)}; "
                             f"PACK takes inputs of one shape")
    axis = int(ctx.value("axis"))
    if not 0 <= axis <= len(shape):  # "The valid range is [0, R+1)": no negative axis
        raise ShapeError(f"axis {axis} is outside 0..{len(shape)} (the input rank)")
    return axis, shape, len(operands)


def _pack_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    axis, shape, n = _pack_plan(ctx)
    return [(*shape[:axis], n, *shape[axis:])]


def _pack_kernel(ctx: OpContext) -> list[np.ndarray]:
    axis, _, _ = _pack_plan(ctx)
    return [np.stack(ctx.values("input"), axis=axis)]


def _pack_sample(s: SampleContext, edge: str = "") -> None:
    """``edge``: "axis_after_last" (axis = rank), "single_input" (N = 1)."""
    rank = s.draw.int(1, 4)
    dims = s.dims(rank, 1, 4)
    n = 1 if edge == "single_input" else s.draw.choice((1, 2, 2, 3, 4) if not edge else (2, 3, 4))
    s.scalar("axis", rank if edge == "axis_after_last" else s.draw.int(0, rank))
    t = s.type("input")
    if t.is_quant:  # one scale and zero point for all (Android's rule)
        lo, hi = t.quant_range
        scale, zp = float(np.float32(s.draw.float(0.01, 0.05))), s.draw.int(lo, hi)
        for _ in range(n):
            s.tensor("input", dims, scale=scale, zero_point=zp)
    else:
        for _ in range(n):
            s.tensor("input", dims)


PACK = OpRecord(
    Op.PACK,
    (Signature((Arg("axis", T.INT32), Arg("input", ranks=_FROM_1, variadic=True)),
               (Arg("output", ranks=tuple(range(2, 9)), quant=same_as("input")),)),),
    tuple(variants(Version.FL6, *_COPY_TYPES)),
    # Stored values are stacked as they are (inputs and output share one quantisation):
    # the shared quantisation edges, which draw each input's scale apart, do not apply.
    _pack_kernel, _pack_shape, _pack_sample, criterion="strict", dequantize=False,
    check=lambda ctx: _same_quant(ctx, "input"),
    edges=(edges.Edge("axis_after_last", "pack", "axis = rank: the new dimension after the last "
                      "(interleaving the inputs element by element)",
                      sample=lambda s: _pack_sample(s, "axis_after_last")),
           edges.Edge("single_input", "pack", "one input: a reshape that inserts a 1 at axis",
                      sample=lambda s: _pack_sample(s, "single_input")),
           edges.int32_wide("any")),
    doc="the N input tensors (one shape) stacked along a new dimension axis",
)


# ---------------------------------------------------------------------------------------
# MIRROR_PAD

REFLECT, SYMMETRIC = 0, 1


def _mirror_plan(ctx: OpContext) -> tuple[tuple[int, ...], np.ndarray, int]:
    dims = ctx.dims("input")
    pdims = ctx.dims("paddings")
    if tuple(pdims) != (len(dims), 2):
        raise ShapeError(f"paddings must have shape [{len(dims)}, 2] (input rank, 2), has {list(pdims)}")
    mode = int(ctx.value("mode"))
    if mode not in (REFLECT, SYMMETRIC):
        raise ShapeError(f"mode is {mode}; 0 (REFLECT) and 1 (SYMMETRIC) are defined")
    pads = np.asarray(ctx.value("paddings"), dtype=np.int64).reshape(len(dims), 2)
    if np.any(pads < 0):
        raise ShapeError(f"paddings must be non-negative, got {pads.tolist()}")
    for i, d in enumerate(dims):
        if mode == REFLECT and pads[i].max() >= d:
            raise ShapeError(f"REFLECT paddings must be below the dimension: paddings[{i}] = "
                             f"{pads[i].tolist()}, dimension {i} has size {d}")
        if mode == SYMMETRIC and pads[i].max() > d:
            raise ShapeError(f"SYMMETRIC paddings must not exceed the dimension: paddings[{i}] = "
                             f"{pads[i].tolist()}, dimension {i} has size {d}")
    return dims, pads, mode


def _mirror_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims, pads, _ = _mirror_plan(ctx)
    return [tuple(int(d + p.sum()) for d, p in zip(dims, pads, strict=True))]


def _mirror_kernel(ctx: OpContext) -> list[np.ndarray]:
    _, pads, mode = _mirror_plan(ctx)
    return [np.pad(ctx.value("input"), pads, mode="reflect" if mode == REFLECT else "symmetric")]


def _mirror_sample(s: SampleContext, edge: str = "") -> None:
    """``edge``: "reflect_widest" / "symmetric_widest" (every padding the largest valid:
    dimension - 1 / dimension), "zero_some_axes" (some axes unpadded, the others padded),
    "symmetric_axis_of_1" (a length-1 axis padded under SYMMETRIC, its one value repeated)."""
    rank = s.draw.int(2 if edge in ("zero_some_axes", "symmetric_axis_of_1") else 1, 4)
    dims = list(s.dims(rank, 2 if edge == "reflect_widest" else 1, 3 if edge.endswith("widest") else 4))
    mode = {"reflect_widest": REFLECT, "symmetric_widest": SYMMETRIC,
            "symmetric_axis_of_1": SYMMETRIC}.get(edge, s.draw.int(0, 1))
    limit = [d - 1 if mode == REFLECT else d for d in dims]
    pads = np.array([[s.draw.int(0, min(lim, 3)) for _ in range(2)] for lim in limit], np.int32)
    if edge.endswith("widest"):
        pads[:] = np.array(limit)[:, None]
    elif edge == "zero_some_axes":
        zero = s.draw.integers((rank,), 0, 1).astype(bool)
        zero[s.draw.int(0, rank - 1)], padded = True, s.draw.int(0, rank - 2)
        padded += padded >= int(np.argmax(zero))  # an axis other than one kept unpadded
        zero[padded] = False
        if limit[padded] == 0:  # REFLECT on a length-1 axis cannot pad: lengthen it
            dims[padded], limit[padded] = 3, 2
        pads[padded] = [s.draw.int(1, min(limit[padded], 3)), s.draw.int(0, min(limit[padded], 3))]
        pads[zero] = 0
    elif edge == "symmetric_axis_of_1":
        axis = s.draw.int(0, rank - 1)
        dims[axis] = 1
        pads[axis] = [1, 1]
    s.tensor("input", dims)
    s.tensor("paddings", (rank, 2), value=pads.reshape(rank, 2), const=True)
    s.scalar("mode", mode)


MIRROR_PAD = OpRecord(
    Op.MIRROR_PAD,
    (Signature((Arg("input", ranks=_FROM_1), Arg("paddings", _I32, ranks=(2,)), Arg("mode", T.INT32)),
               (Arg("output", ranks=_FROM_1, quant=same_as("input")),)),),
    tuple(variants(Version.FL7, *_COPY_TYPES)),
    _mirror_kernel, _mirror_shape, _mirror_sample, criterion="strict",
    edges=(*(edges.Edge(name, "padding", doc, sample=lambda s, name=name: _mirror_sample(s, name))
             for name, doc in (
                    ("reflect_widest", "REFLECT with every padding dimension - 1 (the largest "
                                       "valid): the mirror reaches the far border element"),
                    ("symmetric_widest", "SYMMETRIC with every padding the dimension: a whole "
                                         "reversed copy on each side"),
                    ("zero_some_axes", "some axes unpadded (0, 0), at least one padded"),
                    ("symmetric_axis_of_1", "SYMMETRIC padding 1 on each side of a length-1 axis: "
                                            "its one value three times"))), edges.int32_wide("any")),
    doc="the input padded with its own mirror image: REFLECT (0) leaves out the border "
        "element, SYMMETRIC (1) repeats it",
)


# ---------------------------------------------------------------------------------------
# REVERSE


def _reverse_axis(ctx: OpContext) -> int:
    rank = len(ctx.dims("input"))
    if ctx.dims("axis") != (1,):
        raise ShapeError(f"axis must be a tensor of shape [1], has {list(ctx.dims('axis'))}")
    axis = _vector(ctx, "axis")[0]
    if not 0 <= axis < rank:  # "in the range [0, n)": no negative axis
        raise ShapeError(f"axis {axis} is outside 0..{rank - 1}")
    return axis


def _reverse_sample(s: SampleContext, edge: str = "") -> None:
    """``edge``: "first_axis" / "last_axis" (that axis of a rank 2..4 input, of length 2..5),
    "axis_of_1" (any axis of a rank 2..4 input, of length 1, the others 2..4)."""
    rank = s.draw.int(2 if edge else 1, 4)  # 4 at most: inputs_as_internal feeds them through ADD
    dims = list(s.dims(rank, 2 if edge == "axis_of_1" else 1, 4))
    axis = {"first_axis": 0, "last_axis": rank - 1}.get(edge, s.draw.int(0, rank - 1))
    if edge:
        dims[axis] = 1 if edge == "axis_of_1" else s.draw.int(2, 5)
    s.tensor("input", dims)
    s.tensor("axis", (1,), value=np.array([axis], np.int32), const=True)


REVERSE = OpRecord(
    Op.REVERSE,
    (Signature((Arg("input", ranks=_FROM_1), Arg("axis", _I32, ranks=(1,))),
               (Arg("output", ranks=_FROM_1, quant=same_as("input")),)),),
    tuple(variants(Version.FL7, *_COPY_TYPES)),
    lambda ctx: [np.flip(ctx.value("input"), _reverse_axis(ctx))],
    lambda ctx: [(_reverse_axis(ctx), ctx.dims("input"))[1]], _reverse_sample, criterion="strict",
    edges=(edges.Edge("first_axis", "reverse", "axis 0 of a rank 2..4 input: whole slices moved",
                      sample=lambda s: _reverse_sample(s, "first_axis")),
           edges.Edge("last_axis", "reverse", "the last axis of a rank 2..4 input: elements "
                      "reversed within each innermost row", sample=lambda s: _reverse_sample(s, "last_axis")),
           edges.Edge("axis_of_1", "length_1", "the reversed axis of length 1 (the identity), "
                      "the others 2..4", sample=lambda s: _reverse_sample(s, "axis_of_1")),
           edges.int32_wide("any")),
    doc="the input with dimension axis reversed",
)

RECORDS: list[OpRecord] = [FILL, RANK, BATCH_MATMUL, PACK, MIRROR_PAD, REVERSE]
