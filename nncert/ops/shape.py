"""Shape and data-movement operations: RESHAPE, CONCATENATION, PAD, PAD_V2, SQUEEZE,
EXPAND_DIMS, TRANSPOSE, STRIDED_SLICE, SLICE, TILE, GATHER.

These operations copy values without arithmetic (only CONCATENATION may requantise),
so every record uses the "strict" criterion. Tensor parameters that decide the output shape
(shape, paddings, perm, begin/end/strides, size, multiples) are sampled as constants; the
indices of GATHER are data and may be runtime inputs.

Records may carry ``min_version``: a function of the bound OpContext giving the
HAL version an instance needs beyond its type variant, for rules NNAPI ties to quantisation
parameters or values rather than to operand types (CONCATENATION with differing
TENSOR_QUANT8_ASYMM parameters, PAD of TENSOR_QUANT8_ASYMM with a non-zero padding).
"""

from __future__ import annotations

import math

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
    normalize_axis,
    same_as,
    variants,
)

_UP_TO_4 = (1, 2, 3, 4)
#: "Supported tensor rank: from 1": NNAPI sets no upper bound; 8 stands in for none, so the
#: validator accepts e.g. EXPAND_DIMS of a rank-4 tensor. Samplers stay within rank 5.
_FROM_1 = tuple(range(1, 9))
_Q8 = T.TENSOR_QUANT8_ASYMM
_Q8S = T.TENSOR_QUANT8_ASYMM_SIGNED
_F16 = T.TENSOR_FLOAT16
_F32 = T.TENSOR_FLOAT32
_I32 = T.TENSOR_INT32


def _output(ranks: tuple[int, ...] | None = None) -> tuple[Arg, ...]:
    return (Arg("output", ranks=ranks, quant=same_as("input")),)


def _vs(table: dict[Version, tuple[T, ...]]) -> tuple:
    return tuple(v for version, types in table.items() for v in variants(version, *types))


#: Types of the V1_1 copy operations (PAD, SQUEEZE, TRANSPOSE, STRIDED_SLICE).
_V11_TYPES = _vs({Version.V1_1: (_F32, _Q8), Version.V1_2: (_F16,), Version.V1_3: (_Q8S,)})
#: Types of the V1_2 operations that also take TENSOR_INT32 (EXPAND_DIMS, SLICE, TILE, GATHER).
_V12_TYPES = _vs({Version.V1_2: (_F16, _F32, _I32, _Q8), Version.V1_3: (_Q8S,)})


# ---------------------------------------------------------------------------------------
# Shared helpers


def _check_rank(ctx: OpContext, name: str = "input", hi: int | None = 4) -> tuple[int, ...]:
    dims = ctx.dims(name)
    if len(dims) < 1 or (hi is not None and len(dims) > hi):
        limit = f"1..{hi}" if hi is not None else "at least 1"
        raise ShapeError(f"{name} has rank {len(dims)}, {ctx.record.name} takes rank {limit}")
    return dims


def _int_vector(ctx: OpContext, name: str, length: int | None) -> list[int]:
    """The value of a 1-D TENSOR_INT32 parameter, its length checked against ``length``."""
    dims = ctx.dims(name)
    if len(dims) != 1:
        raise ShapeError(f"{name} must be a 1-D tensor, has shape {list(dims)}")
    if length is not None and dims[0] != length:
        raise ShapeError(f"{name} must have {length} entries (the input rank), has {dims[0]}")
    return [int(v) for v in np.asarray(ctx.value(name)).reshape(-1)]


def _draw_quant(s: SampleContext, t: T) -> tuple[float, int]:
    """A random (scale, zero point) for a quantised operand, as the case builder would draw."""
    lo, hi = t.quant_range
    return float(np.float32(s.draw.float(0.01, 0.05))), s.draw.int(lo, hi)


def _shuffled(s: SampleContext, items) -> list:
    """A random permutation of ``items`` (Fisher-Yates on the sampler's draws)."""
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = s.draw.int(0, i)
        out[i], out[j] = out[j], out[i]
    return out


def _shrink_to(dims: list[int], limit: int) -> list[int]:
    """Lower the largest entries of ``dims`` (not below 1) until their product is <= limit."""
    while math.prod(dims) > limit and max(dims) > 1:
        i = dims.index(max(dims))
        dims[i] -= 1
    return dims


def _copy_record(op: Op, sig: Signature, vs: tuple, kernel, shape, sample, doc: str,
                 **kw) -> OpRecord:
    return OpRecord(op, (sig,), vs, kernel, shape, sample, criterion="strict", doc=doc, **kw)


# ---------------------------------------------------------------------------------------
# RESHAPE


def _reshape_target(ctx: OpContext) -> tuple[int, ...]:
    dims = _check_rank(ctx)
    target = _int_vector(ctx, "shape", None)
    if not 1 <= len(target) <= 4:
        raise ShapeError(f"shape has {len(target)} entries, the output rank must be 1..4")
    if target.count(-1) > 1:
        raise ShapeError("shape may hold at most one -1 entry")
    if any(v < -1 for v in target):
        raise ShapeError(f"shape entries must be -1 or non-negative, got {target}")
    total = math.prod(dims)
    known = math.prod(v for v in target if v != -1)
    if -1 in target:
        if known == 0 or total % known:
            raise ShapeError(f"shape {target} cannot hold the input's {total} elements")
        target = [total // known if v == -1 else v for v in target]
    if math.prod(target) != total:
        raise ShapeError(f"shape {target} has {math.prod(target)} elements, the input {total}")
    return tuple(target)


def _reshape_sample(s: SampleContext) -> None:
    dims = s.dims(s.draw.int(1, 4), 1, 6)
    total = math.prod(dims)
    factors, n, p = [], total, 2
    while n > 1:  # prime factors of the element count, dealt out to the output dimensions
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    rank = s.rank()
    target = [1] * rank
    for f in factors:
        target[s.draw.int(0, rank - 1)] *= f
    if s.draw.bool(0.4):
        target[s.draw.int(0, rank - 1)] = -1
    s.tensor("input", dims)
    s.tensor("shape", (rank,), value=np.array(target, np.int32), const=True)


RESHAPE = _copy_record(
    Op.RESHAPE,
    Signature((Arg("input", ranks=_UP_TO_4), Arg("shape", _I32, ranks=(1,))), _output()),
    _vs({Version.V1_0: (_F32, _Q8), Version.V1_2: (_F16,), Version.V1_3: (_Q8S,), Version.FL6: (_I32,)}),
    lambda ctx: [np.reshape(ctx.value("input"), _reshape_target(ctx))],
    lambda ctx: [_reshape_target(ctx)],
    _reshape_sample, edges=(edges.int32_wide("any"),),
    doc="the input's values in row-major order under a new shape (one entry may be -1)",
)


# ---------------------------------------------------------------------------------------
# CONCATENATION


def _concat_axis(ctx: OpContext) -> tuple[int, list[tuple[int, ...]]]:
    operands = ctx.operands("input")
    if any(not op.fully_specified for op in operands):
        raise Unknown("input")
    shapes = [op.dimensions for op in operands]
    rank = len(shapes[0])
    if not 1 <= rank <= 4:
        raise ShapeError(f"input has rank {rank}, CONCATENATION takes rank 1..4")
    axis = int(ctx.value("axis"))
    if not 0 <= axis < rank:  # NNAPI documents no negative axis here (unlike GATHER)
        raise ShapeError(f"axis {axis} is outside 0..{rank - 1}")
    for i, sh in enumerate(shapes[1:], start=1):
        if len(sh) != rank or any(a != b for j, (a, b) in enumerate(zip(sh, shapes[0], strict=True))
                                  if j != axis):
            raise ShapeError(f"input {i} has shape {list(sh)}, incompatible with input 0 "
                             f"{list(shapes[0])} outside axis {axis}")
    return axis, shapes


def _concat_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    axis, shapes = _concat_axis(ctx)
    out = list(shapes[0])
    out[axis] = sum(sh[axis] for sh in shapes)
    return [tuple(out)]


def _concat_kernel(ctx: OpContext) -> list[np.ndarray]:
    axis, _ = _concat_axis(ctx)
    return [np.concatenate(ctx.values("input"), axis=axis)]


def _concat_sample(s: SampleContext) -> None:
    rank = s.rank()
    base = list(s.dims(rank, 1, 4))
    axis = s.draw.int(0, rank - 1)
    count = s.draw.choice((1, 2, 2, 3, 3, 4))
    shapes = []
    for _ in range(count):
        dims = list(base)
        dims[axis] = s.draw.int(1, 4)
        shapes.append(dims)
    t = s.type("input")
    if t.is_quant and s.draw.bool():
        # Shared parameters, with the stored values reaching both ends of the type's range:
        # the case builder's free output quantisation then equals the inputs' exactly, the
        # HAL 1.0 form of a quantised concatenation.
        scale, zp = _draw_quant(s, t)
        lo, hi = t.quant_range
        values = [s.draw.integers(d, lo, hi) for d in shapes]
        values[0].reshape(-1)[0] = lo
        values[-1].reshape(-1)[-1] = hi
        for d, v in zip(shapes, values, strict=True):
            s.tensor("input", d, value=v, scale=scale, zero_point=zp)
    else:
        for d in shapes:
            s.tensor("input", d)
    s.scalar("axis", axis)


def _concat_min_version(ctx: OpContext) -> Version:
    """Before HAL 1.2, TENSOR_QUANT8_ASYMM inputs and output must share scale and zero point."""
    if ctx.variant.primary is _Q8:
        out = ctx.outputs[0]
        if any((op.scale, op.zero_point) != (out.scale, out.zero_point) for op in ctx.operands("input")):
            return Version.V1_2
    return ctx.match.version


#: Length of the long CONCATENATION's output axis: past 2**16 (a 16-bit offset wraps).
CONCAT_LONG_AXIS = 66_000


def _concat_long_axis(s: SampleContext) -> None:
    """Three inputs joined along an axis of about CONCAT_LONG_AXIS: the first past 65536 long,
    so that the others start past a 16-bit offset; rank 1, or rank 2 with a second axis of 2."""
    first = s.draw.int(CONCAT_LONG_AXIS - 200, CONCAT_LONG_AXIS)
    lengths = (first, s.draw.int(50, 200), s.draw.int(50, 200))
    rank, axis = s.draw.choice(((1, 0), (2, 0), (2, 1)))
    for n in lengths:
        dims = [2] * rank
        dims[axis] = n
        s.tensor("input", dims)
    s.scalar("axis", axis)


# CONCATENATION's own edge: generated axes have a few elements, so a driver holding the
# output offset of each input in 16 bits passed every case.
_CONCAT_LONG = edges.Edge(
    "long_axis", "long", f"three inputs along an axis of about {CONCAT_LONG_AXIS}, the second and third "
    "starting past offset 65536", sample=_concat_long_axis, heavy=True)


CONCATENATION = _copy_record(
    Op.CONCATENATION,
    # The output's quantisation is free: equal to the inputs' before HAL 1.2 (min_version).
    Signature((Arg("input", ranks=_UP_TO_4, variadic=True), Arg("axis", T.INT32)),
              (Arg("output", ranks=_UP_TO_4),)),
    _vs({Version.V1_0: (_F32, _Q8), Version.V1_2: (_F16,), Version.V1_3: (_Q8S,)}),
    _concat_kernel, _concat_shape, _concat_sample, edges=(_CONCAT_LONG,),
    doc="the input tensors joined along axis (quantised inputs requantised to the output's parameters)",
    min_version=_concat_min_version,
)


# ---------------------------------------------------------------------------------------
# PAD and PAD_V2


def _paddings(ctx: OpContext) -> tuple[tuple[int, ...], np.ndarray]:
    dims = _check_rank(ctx)
    pdims = ctx.dims("paddings")
    if tuple(pdims) != (len(dims), 2):
        raise ShapeError(f"paddings must have shape [{len(dims)}, 2] (input rank, 2), has {list(pdims)}")
    pads = np.asarray(ctx.value("paddings"), dtype=np.int64).reshape(len(dims), 2)
    if np.any(pads < 0):
        raise ShapeError(f"paddings must be non-negative, got {pads.tolist()}")
    return dims, pads


def _pad_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims, pads = _paddings(ctx)
    return [tuple(int(d + p.sum()) for d, p in zip(dims, pads, strict=True))]


def _pad_real_value(ctx: OpContext) -> float:
    """The pad value in the real domain: logical zero for PAD; PAD_V2's scalar, which for a
    quantised input is a stored integer with the input's scale and zero point."""
    if not ctx.has("pad_value"):
        return 0.0
    v = ctx.value("pad_value")
    if ctx.variant.primary.is_quant:
        op = ctx.operand("input")
        return (int(v) - op.zero_point) * op.scale
    return float(v)


def _pad_kernel(ctx: OpContext) -> list[np.ndarray]:
    _, pads = _paddings(ctx)
    return [np.pad(ctx.value("input"), pads, mode="constant", constant_values=_pad_real_value(ctx))]


def _pad_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = s.dims(rank, 1, 4)
    pads = s.draw.integers((rank, 2), 0, 2) * (s.draw.integers((rank, 2), 0, 3) > 0)
    if s.draw.bool(0.1):
        pads[:] = 0
    s.tensor("input", dims)
    s.tensor("paddings", (rank, 2), value=pads.astype(np.int32), const=True)
    if "pad_value" in {a.name for a in s.signature.inputs}:
        t = s.variant.primary
        if t.is_quant:
            lo, hi = t.quant_range
            s.scalar("pad_value", s.draw.int(lo, hi))
        else:
            s.scalar("pad_value", round(s.draw.float(-3.0, 3.0), 2))


def _pad_value_type(b: dict[str, T]) -> T:
    t = b["T"]
    return {_F16: T.FLOAT16, _F32: T.FLOAT32}.get(t, T.INT32)


_pad_value_type.__name__ = "pad_value_type(T)"


def _pad_min_version(ctx: OpContext) -> Version:
    """Before HAL 1.2 the pad value of TENSOR_QUANT8_ASYMM is undefined: only an instance
    that pads nothing has a defined result there."""
    if ctx.variant.primary is _Q8 and np.any(np.asarray(ctx.value("paddings")) != 0):
        return max(ctx.match.version, Version.V1_2)
    return ctx.match.version


def _wide_padding(s: SampleContext) -> None:
    """An input of 1..2 per dimension, one dimension padded by 256..300 before and 0..2
    after, the others by 0..1."""
    item, pads = s.inputs["input"], s.inputs["paddings"]
    rank = len(item.dims)
    item.dims = tuple(s.draw.int(1, 2) for _ in range(rank))
    p = s.draw.integers((rank, 2), 0, 1)
    axis = s.draw.int(0, rank - 1)
    p[axis] = (s.draw.int(256, 300), s.draw.int(0, 2))
    pads.value = p.astype(np.int32)


_WIDE_PADDING = edges.past_255("one dimension padded by 256..300 elements before its data",
                               adjust=_wide_padding)

PAD = _copy_record(
    Op.PAD,
    Signature((Arg("input", ranks=_UP_TO_4), Arg("paddings", _I32, ranks=(2,))), _output()),
    _V11_TYPES, _pad_kernel, _pad_shape, _pad_sample,
    doc="the input surrounded by paddings[i] elements of logical zero before/after each dimension i",
    min_version=_pad_min_version, edges=(_WIDE_PADDING,),
)

PAD_V2 = _copy_record(
    Op.PAD_V2,
    Signature((Arg("input", ranks=_UP_TO_4), Arg("paddings", _I32, ranks=(2,)),
               Arg("pad_value", _pad_value_type)), _output()),
    _vs({Version.V1_2: (_F16, _F32, _Q8), Version.V1_3: (_Q8S,)}),
    _pad_kernel, _pad_shape, _pad_sample, edges=(_WIDE_PADDING,),
    doc="the input surrounded by paddings[i] copies of pad_value before/after each dimension i",
)


# ---------------------------------------------------------------------------------------
# SQUEEZE


def _squeeze_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = _check_rank(ctx)
    rank = len(dims)
    if ctx.has("squeeze_dims"):
        axes = set()
        for a in _int_vector(ctx, "squeeze_dims", None):
            if not -rank <= a < rank:
                raise ShapeError(f"squeeze_dims entry {a} is out of range for rank {rank}")
            if dims[a % rank] != 1:
                raise ShapeError(f"squeeze_dims names dimension {a % rank} of size {dims[a % rank]}, not 1")
            axes.add(a % rank)
    else:
        axes = {i for i, d in enumerate(dims) if d == 1}
    out = tuple(d for i, d in enumerate(dims) if i not in axes)
    return [out or (1,)]


def _squeeze_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = [1 if s.draw.bool() else s.draw.int(2, 4) for _ in range(rank)]
    s.tensor("input", dims)
    chosen = [i for i, d in enumerate(dims) if d == 1 and s.draw.bool(0.7)]
    # "Optional" here means NO_VALUE, as in Android's CTS: the operand is always passed.
    if chosen and s.draw.bool(0.7):
        order = _shuffled(s, chosen)
        s.tensor("squeeze_dims", (len(order),), value=np.array(order, np.int32), const=True)
    else:
        s.omit("squeeze_dims")


SQUEEZE = _copy_record(
    Op.SQUEEZE,
    Signature((Arg("input", ranks=_UP_TO_4),
               Arg("squeeze_dims", _I32, ranks=(1,), optional=True)), _output()),
    _V11_TYPES,
    lambda ctx: [np.reshape(ctx.value("input"), _squeeze_shape(ctx)[0])],
    _squeeze_shape, _squeeze_sample,
    doc="the input without the listed size-1 dimensions (all of them when none are listed)",
)


# ---------------------------------------------------------------------------------------
# EXPAND_DIMS


def _expand_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = _check_rank(ctx, hi=None)
    axis = normalize_axis(int(ctx.value("axis")), len(dims) + 1)
    return [(*dims[:axis], 1, *dims[axis:])]


def _expand_sample(s: SampleContext) -> None:
    rank = s.rank()
    s.tensor("input", s.dims(rank, 1, 4))
    s.scalar("axis", s.draw.int(-(rank + 1), rank))


EXPAND_DIMS = _copy_record(
    Op.EXPAND_DIMS,
    Signature((Arg("input", ranks=_FROM_1), Arg("axis", T.INT32)), _output(_FROM_1)),
    _V12_TYPES,
    lambda ctx: [np.reshape(ctx.value("input"), _expand_shape(ctx)[0])],
    _expand_shape, _expand_sample, edges=(edges.int32_wide("any"),),
    doc="the input with a dimension of size 1 inserted at axis",
)


# ---------------------------------------------------------------------------------------
# TRANSPOSE


def _perm(ctx: OpContext) -> list[int]:
    rank = len(_check_rank(ctx))
    if not ctx.has("perm"):
        return list(range(rank - 1, -1, -1))
    perm = _int_vector(ctx, "perm", rank)
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"perm {perm} is not a permutation of 0..{rank - 1}")
    return perm


def _transpose_sample(s: SampleContext) -> None:
    if s.draw.bool(0.25):
        # An omitted perm reverses the dimensions; Android's reference implementation only
        # accepts that for rank 2, so cases stay there.
        s.tensor("input", s.dims(2, 1, 5))
        s.omit("perm")
        return
    rank = s.rank()
    s.tensor("input", s.dims(rank, 1, 5))
    s.tensor("perm", (rank,), value=np.array(_shuffled(s, range(rank)), np.int32), const=True)


TRANSPOSE = _copy_record(
    Op.TRANSPOSE,
    Signature((Arg("input", ranks=_UP_TO_4), Arg("perm", _I32, ranks=(1,), optional=True)),
              _output()),
    _V11_TYPES,
    lambda ctx: [np.transpose(ctx.value("input"), _perm(ctx))],
    lambda ctx: [tuple(ctx.dims("input")[p] for p in _perm(ctx))],
    _transpose_sample,
    doc="the input with dimensions permuted: output dimension i is input dimension perm[i] "
        "(reversed order by default)",
)


# ---------------------------------------------------------------------------------------
# STRIDED_SLICE


def _clamp_index(index: int, dim: int, positive: bool) -> int:
    """Where a begin/end index lands: negative indices count from the end; out-of-range
    indices clamp to the ends of the range a positive (0..dim) or negative (-1..dim-1)
    stride walks."""
    if positive:
        return dim if index >= dim else max(index, -dim) % dim
    return -1 if index < -dim else min(index, dim - 1) % dim


def _strided_plan(ctx: OpContext) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """Per-dimension index lists and the output shape."""
    dims = _check_rank(ctx)
    rank = len(dims)
    begin = _int_vector(ctx, "begin", rank)
    end = _int_vector(ctx, "end", rank)
    strides = _int_vector(ctx, "strides", rank)
    begin_mask, end_mask, shrink = (int(ctx.value(n)) for n in ("begin_mask", "end_mask",
                                                                 "shrink_axis_mask"))
    picks, out = [], []
    for i, d in enumerate(dims):
        st = strides[i]
        if st == 0:
            raise ShapeError(f"strides[{i}] is 0; strides must be non-zero")
        pos = st > 0
        b = (0 if pos else d - 1) if begin_mask >> i & 1 else _clamp_index(begin[i], d, pos)
        e = (d if pos else -1) if end_mask >> i & 1 else _clamp_index(end[i], d, pos)
        idx = np.arange(b, e, st)
        if shrink >> i & 1:
            if st < 0:  # Android's rule: a shrunk axis is indexed with a positive stride
                raise ShapeError(f"shrink_axis_mask bit {i} is set but strides[{i}] is {st}; "
                                 f"a shrunk dimension needs a positive stride")
            if idx.size != 1:
                raise ShapeError(f"shrink_axis_mask bit {i} is set but dimension {i} slices "
                                 f"{idx.size} elements, not 1")
        else:
            out.append(idx.size)
        picks.append(idx)
    return picks, tuple(out) or (1,)


def _strided_kernel(ctx: OpContext) -> list[np.ndarray]:
    picks, shape = _strided_plan(ctx)
    x = ctx.value("input")
    for axis, idx in enumerate(picks):
        x = np.take(x, idx, axis=axis)
    return [x.reshape(shape)]


def _strided_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = s.dims(rank, 1, 5)
    begin, end, strides = [], [], []
    begin_mask = end_mask = shrink = 0
    for i, d in enumerate(dims):
        if s.draw.bool(0.2):  # shrink: a slice of exactly one element, positive stride
            b = s.draw.int(0, d - 1)
            st = s.draw.int(1, 2)
            begin.append(b - d if s.draw.bool(0.3) else b)
            end.append(b + 1 if b + 1 < d or s.draw.bool() else b + 1 + s.draw.int(0, 2))
            strides.append(st)
            shrink |= 1 << i
            continue
        st = s.draw.choice((1, 1, 2, 3, -1, -2))
        strides.append(st)
        if st > 0:
            b = s.draw.int(0, d - 1)
            e = s.draw.int(b + 1, d)
            bv = b - d if s.draw.bool(0.3) else b
            ev = e - d if e < d and s.draw.bool(0.3) else (e + s.draw.int(0, 3) if e == d else e)
        else:
            b = s.draw.int(0, d - 1)
            e = s.draw.int(-1, b - 1)
            bv = b - d if s.draw.bool(0.3) else (b + s.draw.int(0, 2) if b == d - 1 else b)
            ev = e if e >= 0 and s.draw.bool(0.7) else (e - d if e >= 0 else -d - 1 - s.draw.int(0, 2))
        if s.draw.bool(0.2):  # the mask overrides the (then arbitrary) begin value
            begin_mask |= 1 << i
            bv = s.draw.int(-d, d)
        if s.draw.bool(0.2):
            end_mask |= 1 << i
            ev = s.draw.int(-d, d)
        begin.append(bv)
        end.append(ev)
    s.tensor("input", dims)
    for name, vals in (("begin", begin), ("end", end), ("strides", strides)):
        s.tensor(name, (rank,), value=np.array(vals, np.int32), const=True)
    s.scalar("begin_mask", begin_mask)
    s.scalar("end_mask", end_mask)
    s.scalar("shrink_axis_mask", shrink)


def _int32_bounds(s: SampleContext) -> None:
    """The drawn slice, then each axis's end (and sometimes its begin) replaced, where it is
    not shrunk, by the int32 extreme on its side (INT32_MAX for a positive stride's end,
    INT32_MIN for a negative one's; the mask bit cleared): "to the end" as TensorFlow exports
    it. A driver holding begin and end in 16 bits reads INT32_MAX as -1."""
    _strided_sample(s)
    imax, imin = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    begin, end = (np.array(s.inputs[n].value, np.int64) for n in ("begin", "end"))
    strides = np.asarray(s.inputs["strides"].value)
    masks = {n: int(s.inputs[n].value) for n in ("begin_mask", "end_mask", "shrink_axis_mask")}
    if masks["shrink_axis_mask"] & 1:  # at least axis 0 reaches the edge
        masks["shrink_axis_mask"] &= ~1
        begin[0], end[0] = 0, 1
    for i, st in enumerate(strides):
        if masks["shrink_axis_mask"] >> i & 1:
            continue
        end[i] = imax if st > 0 else imin
        masks["end_mask"] &= ~(1 << i)
        if s.draw.bool(0.5):
            begin[i] = imin if st > 0 else imax
            masks["begin_mask"] &= ~(1 << i)
    for n, v in (("begin", begin), ("end", end)):
        s.tensor(n, (len(v),), value=v.astype(np.int32), const=True)
    for n, v in masks.items():
        s.scalar(n, v)


STRIDED_SLICE = _copy_record(
    Op.STRIDED_SLICE,
    Signature((Arg("input", ranks=_UP_TO_4), Arg("begin", _I32, ranks=(1,)),
               Arg("end", _I32, ranks=(1,)), Arg("strides", _I32, ranks=(1,), domain="nonzero"),
               Arg("begin_mask", T.INT32), Arg("end_mask", T.INT32),
               Arg("shrink_axis_mask", T.INT32)), _output()),
    _V11_TYPES, _strided_kernel, lambda ctx: [_strided_plan(ctx)[1]], _strided_sample,
    edges=(edges.Edge("int32_bounds", "slice", "ends (and some begins) at INT32_MAX / INT32_MIN, "
                      "masks off: the whole axis from its start or up to its end", sample=_int32_bounds),),
    doc="elements begin[i], begin[i]+strides[i], ... before end[i] along each dimension i "
        "(masks select full ranges or drop size-1 dimensions)",
)


# ---------------------------------------------------------------------------------------
# SLICE


def _slice_bounds(ctx: OpContext) -> list[tuple[int, int]]:
    dims = _check_rank(ctx, hi=None)
    begin = _int_vector(ctx, "begin", len(dims))
    size = _int_vector(ctx, "size", len(dims))
    out = []
    for i, (d, b, n) in enumerate(zip(dims, begin, size, strict=True)):
        if not 0 <= b <= d:
            raise ShapeError(f"begin[{i}] = {b} is outside 0..{d}")
        if n == -1:
            n = d - b
        if n < 0 or b + n > d:
            raise ShapeError(f"size[{i}] = {size[i]} with begin {b} exceeds dimension {i} of size {d}")
        out.append((b, n))
    return out


def _slice_kernel(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.value("input")
    return [x[tuple(slice(b, b + n) for b, n in _slice_bounds(ctx))]]


def _slice_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = s.dims(rank, 1, 5)
    begin = [s.draw.int(0, d - 1) for d in dims]
    size = [-1 if s.draw.bool(0.2) else s.draw.int(1, d - b) for d, b in zip(dims, begin, strict=True)]
    s.tensor("input", dims)
    s.tensor("begin", (rank,), value=np.array(begin, np.int32), const=True)
    s.tensor("size", (rank,), value=np.array(size, np.int32), const=True)


def _wide_begin(s: SampleContext) -> None:
    """One dimension of 260..300 sliced from 256 or later, the others (1..2) whole."""
    item = s.inputs["input"]
    rank = len(item.dims)
    axis = s.draw.int(0, rank - 1)
    dims = [s.draw.int(1, 2) for _ in range(rank)]
    dims[axis] = s.draw.int(260, 300)
    begin, size = [0] * rank, [-1] * rank
    begin[axis] = s.draw.int(256, dims[axis] - 1)
    size[axis] = -1 if s.draw.bool() else s.draw.int(1, dims[axis] - begin[axis])
    item.dims = tuple(dims)
    s.inputs["begin"].value = np.array(begin, np.int32)
    s.inputs["size"].value = np.array(size, np.int32)


SLICE = _copy_record(
    Op.SLICE,
    Signature((Arg("input", ranks=_FROM_1), Arg("begin", _I32, ranks=(1,)),
               Arg("size", _I32, ranks=(1,))), _output(_FROM_1)),
    _V12_TYPES, _slice_kernel, lambda ctx: [tuple(n for _, n in _slice_bounds(ctx))], _slice_sample,
    edges=(edges.int32_wide("any"),
           edges.past_255("one dimension of 260..300 sliced from index 256 or later", adjust=_wide_begin)),
    doc="the block of size[i] elements from begin[i] along each dimension i (-1: to the end)",
)


# ---------------------------------------------------------------------------------------
# TILE


def _multiples(ctx: OpContext) -> tuple[tuple[int, ...], list[int]]:
    dims = _check_rank(ctx, hi=None)
    mult = _int_vector(ctx, "multiples", len(dims))
    if any(m < 0 for m in mult):
        raise ShapeError(f"multiples must be non-negative, got {mult}")
    return dims, mult


def _tile_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = list(s.dims(rank, 1, 4))
    mult = [s.draw.int(1, 3) for _ in range(rank)]
    _shrink_to(mult, max(1, 512 // math.prod(dims)))
    _shrink_to(dims, max(1, 512 // math.prod(mult)))
    s.tensor("input", dims)
    s.tensor("multiples", (rank,), value=np.array(mult, np.int32), const=True)


def _wide_multiples(s: SampleContext) -> None:
    """An input of 1..2 per dimension (rank 1..3), one multiple of 257..300, the others 1..2."""
    rank = s.draw.int(1, 3)
    dims = [s.draw.int(1, 2) for _ in range(rank)]
    mult = [s.draw.int(1, 2) for _ in range(rank)]
    mult[s.draw.int(0, rank - 1)] = s.draw.int(257, 300)
    s.tensor("input", dims)
    s.tensor("multiples", (rank,), value=np.array(mult, np.int32), const=True)


TILE = _copy_record(
    Op.TILE,
    Signature((Arg("input", ranks=_FROM_1), Arg("multiples", _I32, ranks=(1,))), _output(_FROM_1)),
    _V12_TYPES,
    lambda ctx: [np.tile(ctx.value("input"), _multiples(ctx)[1])],
    lambda ctx: [tuple(d * m for d, m in zip(*_multiples(ctx), strict=True))],
    _tile_sample,
    edges=(edges.int32_wide("any"), edges.past_255("one multiple of 257..300", sample=_wide_multiples)),
    doc="the input repeated multiples[i] times along each dimension i",
)


# ---------------------------------------------------------------------------------------
# GATHER


def _gather_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    dims = _check_rank(ctx, hi=None)
    axis = normalize_axis(int(ctx.value("axis")), len(dims))
    return [(*dims[:axis], *ctx.dims("indices"), *dims[axis + 1:])]


def _gather_check(ctx: OpContext) -> None:
    dims = ctx.dims("input")
    axis = normalize_axis(int(ctx.value("axis")), len(dims))
    idx = np.asarray(ctx.value("indices"))
    if idx.size and (idx.min() < 0 or idx.max() >= dims[axis]):
        raise ShapeError(f"indices must lie in 0..{dims[axis] - 1} (input dimension {axis}), "
                         f"got {int(idx.min())}..{int(idx.max())}")


def _gather_kernel(ctx: OpContext) -> list[np.ndarray]:
    _gather_check(ctx)
    axis = normalize_axis(int(ctx.value("axis")), len(ctx.dims("input")))
    return [np.take(ctx.value("input"), np.asarray(ctx.value("indices"), np.int64), axis=axis)]


def _gather_sample(s: SampleContext) -> None:
    rank = s.rank()
    dims = s.dims(rank, 1, 5)
    axis = s.draw.int(0, rank - 1)
    k = s.draw.int(1, 4 - rank + 1)
    idims = s.dims(k, 1, 3)
    s.tensor("input", dims)
    s.scalar("axis", axis - rank if s.draw.bool(0.3) else axis)
    s.tensor("indices", idims, value=s.draw.integers(idims, 0, dims[axis] - 1).astype(np.int32),
             const=s.draw.bool(0.3))


#: Length of the long GATHER's axis: past 2**16, so that an index held in 16 bits wraps.
GATHER_LONG_AXIS = 70_000


def _gather_long_axis(s: SampleContext) -> None:
    """Two rows of GATHER_LONG_AXIS along axis 1 (or -1), six indices: three past 65536, one
    below it, the first and the last."""
    n = GATHER_LONG_AXIS
    s.tensor("input", (2, n))
    s.scalar("axis", s.draw.choice((1, -1)))
    idx = [*s.draw.integers((3,), 1 << 16, n - 1), s.draw.int(1, (1 << 16) - 1), 0, n - 1]
    s.tensor("indices", (6,), value=np.asarray(idx, np.int32), const=s.draw.bool(0.3))


# GATHER's own edge: generated axes have 1..5 elements, so a driver holding indices (or the
# offsets they become) in 16 bits passed every case.
_GATHER_LONG = edges.Edge(
    "long_axis", "long", f"an axis of {GATHER_LONG_AXIS}, indices past 65536", sample=_gather_long_axis,
    heavy=True)


GATHER = _copy_record(
    Op.GATHER,
    Signature((Arg("input", ranks=_FROM_1), Arg("axis", T.INT32), Arg("indices", _I32, ranks=_FROM_1)),
              _output(_FROM_1)),
    _V12_TYPES, _gather_kernel, _gather_shape, _gather_sample,
    check=_gather_check, edges=(_GATHER_LONG, edges.int32_wide("any")), picks=("indices", "input", "axis"),
    doc="input slices along axis picked by indices; output shape "
        "input[:axis] + indices + input[axis+1:]",
)


RECORDS: list[OpRecord] = [RESHAPE, CONCATENATION, PAD, PAD_V2, SQUEEZE, EXPAND_DIMS, TRANSPOSE,
                           STRIDED_SLICE, SLICE, TILE, GATHER]
