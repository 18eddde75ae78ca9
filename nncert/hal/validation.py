"""validate_model / validate_request: the validity rules of VAL-1.

A model or request that breaks any rule here must be refused by a driver with
INVALID_ARGUMENT (never a crash, a hang or success). Every refusal is a
``ValidationError(rule, where, detail)``; ``rule`` is one of the stable ids below and
``where`` names the culprit ("operand 3", "operation 1 (CONV_2D)", "request input 0";
in a referenced subgraph prefixed with "subgraph K ").

Model rules, in the order they are checked:

============================  ================================================================
rule                          what it checks
============================  ================================================================
pool                          model pools are Memory objects of non-zero size (request pools:
                              Memory, or a positive int token of a driver-managed buffer)
subgraph-cycle                referenced subgraphs do not reference each other in a cycle
subgraph-empty                a (main or referenced) subgraph has operands and operations
operand-type                  the type is an OperandType other than the deprecated OEM types
operand-lifetime              the lifetime is an OperandLifeTime; type SUBGRAPH <=> lifetime
                              SUBGRAPH
operand-rank                  scalars (and SUBGRAPH) have rank 0; constant tensors a known rank
operand-dimensions            dimensions are integers >= 0; constant tensors have no unknown (0)
                              dimension
operand-scale                 float/bool/scalar-int/per-channel/SUBGRAPH: 0; TENSOR_INT32: >= 0
                              (a bias may carry a scale); other quantised types: > 0
operand-zero-point            an integer within the type's range ([0, 255] QUANT8_ASYMM,
                              [-128, 127] QUANT8_ASYMM_SIGNED, [0, 65535] QUANT16_ASYMM); 0 for
                              every symmetric and non-quantised type
operand-channel-quant         TENSOR_QUANT8_SYMM_PER_CHANNEL carries channel_quant with
                              0 <= channel_dim < rank, a known channel size and one positive
                              scale per channel; no other type carries channel_quant
constant-location             CONSTANT_COPY: pool 0, inside operand_values; CONSTANT_REFERENCE:
                              a valid pool, inside it; both: length == byte size, padding 0
operand-location              other lifetimes have an all-zero location
subgraph-reference            a SUBGRAPH operand names an existing referenced subgraph
                              (pool 0, length 0, offset = subgraph index)
version                       the model needs no HAL version newer than ``version``: operand
                              types, unknown ranks (1.2), unknown model-output dimensions (1.2),
                              each operation instance (catalogue ``instance_version``: the
                              matched variant, newer optional inputs, ``min_version`` rules),
                              relaxComputationFloat32toFloat16 (1.1), referenced subgraphs (1.3)
operation-type                the type is an OperationType (not OEM_OPERATION)
operation-operand-index       every input/output index names an operand of the subgraph
operation-output-lifetime     an operation writes only TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT
                              operands (so NO_VALUE, constants and inputs are never written)
operation-layout              the layout input of a record with one is BOOL
operation-signature           the catalogue has a signature and type variant for the number and
                              types of inputs and outputs (NO_VALUE only for optional inputs)
operation-rank                a tensor's known rank is one of the Arg's declared ranks
                              (Arg.ranks; None: not checked here, the shape rule decides)
operation-activation          a constant fused activation is NONE, RELU, RELU1 or RELU6, and
                              NONE when the output is TENSOR_INT32
operation-quant               Arg.quant: ``same`` (scale and zero point equal to the reference
                              operand's), ``fixed`` (the mandated scale/zero point; signed types
                              zero point - 128), ``bias`` (TENSOR_INT32 bias scale equal to
                              input scale * filter scale within 1e-6 relative, as AOSP)
operation-parameters          the record's shape rule and ``check`` accept the known shapes and
                              constant values (a record that raises anything but ShapeError is
                              reported here too, with "record error" in the detail)
operation-output-shape        declared output dimensions agree with the shape rule where both
                              are known
control-flow                  IF / WHILE (when the catalogue has no record for them): operand
                              counts, condition operand, subgraph operands and compatibility of
                              inner and outer operands, as the HAL documents
model-inputs / model-outputs  index lists: valid indexes, no duplicates, and exactly the
                              operands of lifetime SUBGRAPH_INPUT / SUBGRAPH_OUTPUT
duplicate-writer              an operand is written by more than one operation output
unwritten-operand             a TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT operand has no writer
cycle                         the operations' data dependencies form a cycle
execution-order               operations are not in execution order (a reader before the
                              writer), without a cycle
============================  ================================================================

An OperationType that the catalogue does not (yet) describe is not invalid: only the
generic rules (indexes, output lifetimes, graph, its own HAL version) apply to it.

Request rules (``validate_request``): ``request-arguments`` (as many inputs and outputs as
the model), ``pool``, ``request-location`` (pool index, offset + length + padding within the
pool, positive length for a pool of known size, an all-zero location for an omitted
argument), ``request-dimensions`` (rank and known dimensions agree with the model; inputs end
up fully specified; no dimensions on a scalar or an omitted argument), ``request-length``
(an input's length equals its byte size; an output's may be smaller, which is
OUTPUT_INSUFFICIENT_SIZE at run time, but not larger), ``request-omitted`` (an input given
no value is one that every operation reading it takes as an optional input:
``input_may_be_omitted``). An argument's offset need not be aligned: NNAPI only has a
preferred alignment, so a driver must take any offset inside the pool.
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Sequence
from itertools import compress, repeat
from typing import Any

import numpy as np

from nncert.hal.errors import ValidationError
from nncert.hal.memory import Memory
from nncert.hal.model import (
    DataLocation,
    Model,
    Operand,
    Operation,
    Request,
    RequestArgument,
    Subgraph,
    SymmPerChannelQuantParams,
)
from nncert.hal.types import (
    LATEST,
    ExecutionPreference,
    MeasureTiming,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
    Version,
)
from nncert.ops import control_flow, get
from nncert.ops.base import Match, OpRecord, ShapeError, Signature, Unknown, match, to_real
from nncert.ops.evaluate import bind, bound_output_shapes, instance_version

T = OperandType
L = OperandLifeTime

# ---------------------------------------------------------------------------------------
# Static tables (keyed by the int value, so that raw ints from mutated models look up too)


class _TypeInfo:
    __slots__ = ("dtype", "enum", "fmt", "itemsize", "scalar", "scale", "version", "zp")

    def __init__(self, enum: OperandType, itemsize: int, scale: str, zp: tuple[int, int],
                 fmt: str = "", dtype: Any = None) -> None:
        self.enum = enum
        self.itemsize = itemsize
        self.scalar = enum.is_scalar or enum is T.SUBGRAPH
        self.scale = scale  # "zero", "nonneg", "pos"
        self.zp = zp
        self.version = enum.version
        self.fmt = fmt  # struct format of a scalar's value
        self.dtype = np.dtype(dtype) if dtype is not None else None


_TYPES: dict[int, _TypeInfo] = {
    int(i.enum): i for i in (
        _TypeInfo(T.FLOAT32, 4, "zero", (0, 0), "<f", np.float32),
        _TypeInfo(T.INT32, 4, "zero", (0, 0), "<i", np.int32),
        _TypeInfo(T.UINT32, 4, "zero", (0, 0), "<I", np.uint32),
        _TypeInfo(T.BOOL, 1, "zero", (0, 0), "<?", np.bool_),
        _TypeInfo(T.FLOAT16, 2, "zero", (0, 0), "<e", np.float16),
        _TypeInfo(T.SUBGRAPH, 0, "zero", (0, 0)),
        _TypeInfo(T.TENSOR_FLOAT32, 4, "zero", (0, 0), dtype=np.float32),
        _TypeInfo(T.TENSOR_FLOAT16, 2, "zero", (0, 0), dtype=np.float16),
        _TypeInfo(T.TENSOR_BOOL8, 1, "zero", (0, 0), dtype=np.bool_),
        _TypeInfo(T.TENSOR_INT32, 4, "nonneg", (0, 0), dtype=np.int32),
        _TypeInfo(T.TENSOR_QUANT8_ASYMM, 1, "pos", (0, 255), dtype=np.uint8),
        _TypeInfo(T.TENSOR_QUANT8_ASYMM_SIGNED, 1, "pos", (-128, 127), dtype=np.int8),
        _TypeInfo(T.TENSOR_QUANT8_SYMM, 1, "pos", (0, 0), dtype=np.int8),
        _TypeInfo(T.TENSOR_QUANT16_ASYMM, 2, "pos", (0, 65535), dtype=np.uint16),
        _TypeInfo(T.TENSOR_QUANT16_SYMM, 2, "pos", (0, 0), dtype=np.int16),
        _TypeInfo(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 1, "zero", (0, 0), dtype=np.int8),
    )
}
_PER_CHANNEL = int(T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
_SUBGRAPH_TYPE = int(T.SUBGRAPH)
_TENSOR_INT32 = int(T.TENSOR_INT32)
_BOOL = int(T.BOOL)

_TEMP, _IN, _OUT = int(L.TEMPORARY_VARIABLE), int(L.SUBGRAPH_INPUT), int(L.SUBGRAPH_OUTPUT)
_COPY, _REF, _NOVAL, _SUBG = (int(L.CONSTANT_COPY), int(L.CONSTANT_REFERENCE), int(L.NO_VALUE),
                              int(L.SUBGRAPH))
_LIFETIMES = frozenset(int(x) for x in L)
_WRITABLE = (_TEMP, _OUT)
_CONSTANT = (_COPY, _REF)

_OPERATION_TYPES = frozenset(int(x) for x in OperationType if x is not OperationType.OEM_OPERATION)


class _Plain:
    """The rules an operand of one (type, lifetime) must meet, for ``_operand_ok``: the
    common case (not SUBGRAPH, not per-channel) in a form checked with few branches."""

    __slots__ = ("const", "copy", "itemsize", "max_rank", "needs", "noval", "scalar", "smax", "smin",
                 "zps")

    def __init__(self, info: _TypeInfo, lt: OperandLifeTime) -> None:
        self.scalar = info.scalar
        self.max_rank = 0 if info.scalar else 1 << 62
        self.const = lt in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)
        self.copy = lt is L.CONSTANT_COPY
        self.noval = lt is L.NO_VALUE
        self.itemsize = info.itemsize
        self.needs = (info.version, max(info.version, Version.V1_2))  # [dynamic shape]
        # Scale rules as a closed interval of floats: 5e-324 is the least float > 0.
        self.smin = 5e-324 if info.scale == "pos" else 0.0
        self.smax = 0.0 if info.scale == "zero" else math.inf
        self.zps = range(info.zp[0], info.zp[1] + 1)


#: (type class, lifetime class, type, lifetime) -> _Plain: enum members only (an int from a
#: mutated model goes the long way), SUBGRAPH and per-channel operands left out.
_PLAIN: dict[tuple, _Plain] = {
    (OperandType, OperandLifeTime, info.enum, lt): _Plain(info, lt)
    for info in _TYPES.values() if info.enum not in (T.SUBGRAPH, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
    for lt in L if lt is not L.SUBGRAPH
}
#: The classes of an operand's fields that ``_operand_ok`` takes: dimensions, scale, zero
#: point, channel_quant, location and the location's four fields.
_PLAIN_CLASSES = (tuple, float, int, type(None), DataLocation, int, int, int, int)
_INTS = frozenset((int,))
_ENUM_TYPES = frozenset((OperandType,))
_WRITABLE_SET = frozenset(_WRITABLE)
_LIFETIME_OF = operator.attrgetter("lifetime")
_TYPE_OF = operator.attrgetter("type")

#: Off only in tests, which check that the fast paths below never change a verdict.
FAST_PATHS = True

#: Relative tolerance of bias scale == input scale * filter scale (AOSP's CPU path: 1e-6 of
#: the smaller of the two).
BIAS_SCALE_RTOL = 1e-6


def _is_int(x: Any) -> bool:
    return x.__class__ is int or (isinstance(x, (int, np.integer)) and not isinstance(x, bool))


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _f32(x: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def _type_name(t: Any) -> str:
    return t.name if isinstance(t, OperandType) else (OperandType(t).name if t in _TYPES else repr(t))


def _op_name(t: Any) -> str:
    try:
        return OperationType(t).name
    except (ValueError, TypeError):
        return repr(t)


# ---------------------------------------------------------------------------------------
# Execution preference and priority


def validate_execution_preference(preference: Any) -> None:
    if not (_is_int(preference) and int(preference) in _PREFERENCES):
        raise ValidationError("execution-preference", "preference",
                              f"{preference!r} is not an ExecutionPreference")


def validate_priority(priority: Any) -> None:
    if not (_is_int(priority) and int(priority) in _PRIORITIES):
        raise ValidationError("priority", "priority", f"{priority!r} is not a Priority")


def validate_measure(measure: Any) -> None:
    """An execution's MeasureTiming argument: NO (0) or YES (1), checked before the run."""
    if not (_is_int(measure) and int(measure) in _MEASURES):
        raise ValidationError("measure-timing", "measure", f"{measure!r} is not a MeasureTiming")


_PREFERENCES = frozenset(int(x) for x in ExecutionPreference)
_PRIORITIES = frozenset(int(x) for x in Priority)
_MEASURES = frozenset(int(x) for x in MeasureTiming)


# ---------------------------------------------------------------------------------------
# The model


class _Ctx:
    """Per-call state shared by the subgraph validators."""

    __slots__ = ("done", "model", "pool_sizes", "values_size", "version")

    def __init__(self, model: Model, version: Version) -> None:
        self.model = model
        self.version = version
        self.values_size = len(model.operand_values)
        self.pool_sizes: list[int] = []
        self.done: set[int] = set()


def validate_model(model: Model, version: Version = LATEST) -> None:
    """Raise ValidationError naming the first rule ``model`` breaks (VAL-1), or return None.

    ``version``: the HAL version the model is given to; anything newer is rule "version".
    """
    if not isinstance(model.operand_values, (bytes, bytearray)):
        raise ValidationError("pool", "operand_values", f"operand_values must be bytes, not "
                              f"{type(model.operand_values).__name__}")
    ctx = _Ctx(model, version)
    for i, pool in enumerate(model.pools):
        if not isinstance(pool, Memory):
            raise ValidationError("pool", f"pool {i}", f"model pools must be memory, not {pool!r}")
        if not pool.size > 0:
            raise ValidationError("pool", f"pool {i}", f"pool of size {pool.size}")
        ctx.pool_sizes.append(pool.size)
    if model.relax_computation_float32_to_float16 and version < Version.V1_1:
        raise ValidationError("version", "model", "relaxComputationFloat32toFloat16 needs HAL 1.1, "
                              f"validating for {version.label}")
    if model.referenced:
        if version < Version.V1_3:
            raise ValidationError("version", "model", "referenced subgraphs need HAL 1.3, "
                                  f"validating for {version.label}")
        _check_subgraph_cycles(model.referenced)
        for k, sg in enumerate(model.referenced):
            _validate_subgraph(ctx, sg, k)
    _validate_subgraph(ctx, model.main, None)


def _check_subgraph_cycles(referenced: list[Subgraph]) -> None:
    n = len(referenced)
    state = [0] * n  # 0 unvisited, 1 on path, 2 done

    def refs(k: int) -> list[int]:
        offsets = (getattr(o.location, "offset", None) for o in referenced[k].operands
                   if o.lifetime == _SUBG)
        return [x for x in offsets if _is_int(x) and 0 <= x < n]

    for start in range(n):
        if state[start]:
            continue
        stack = [(start, iter(refs(start)))]
        state[start] = 1
        while stack:
            k, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[k] = 2
                stack.pop()
            elif state[nxt] == 1:
                path = [s for s, _ in stack]
                cyc = path[path.index(nxt):]
                raise ValidationError("subgraph-cycle", f"subgraph {nxt}",
                                      "subgraphs reference each other in a cycle: "
                                      + " -> ".join(str(c) for c in [*cyc, nxt]))
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(refs(nxt))))


def _validate_subgraph(ctx: _Ctx, sg: Subgraph, index: int | None) -> None:
    if index is not None:
        if index in ctx.done:
            return
        ctx.done.add(index)
    prefix = "" if index is None else f"subgraph {index} "
    if not sg.operands or not sg.operations:
        raise ValidationError("subgraph-empty", prefix.strip() or "main subgraph",
                              f"{len(sg.operands)} operands, {len(sg.operations)} operations")
    outputs = _model_outputs(sg) if index is None else ()
    operands = sg.operands
    n_operands = len(operands)
    # The operands that _operand_ok cannot vouch for, checked rule by rule in index order.
    is_output = map(outputs.__contains__, range(n_operands))
    ok = list(map(_operand_ok, repeat(ctx, n_operands), operands, is_output)) if FAST_PATHS \
        else [False] * n_operands
    if not all(ok):
        for i, o in enumerate(operands):
            if not ok[i]:
                _validate_operand(ctx, o, i, prefix, i in outputs)
    lifetimes = list(map(_LIFETIME_OF, operands)) if FAST_PATHS else None
    for n, op in enumerate(sg.operations):
        _validate_operation(ctx, sg, op, n, n_operands, prefix, lifetimes)
    if lifetimes is None or not _io_list_ok(sg.input_indexes, lifetimes, _IN):
        _validate_io_list(sg.input_indexes, operands, _IN, "model-inputs", "model input", prefix)
    if lifetimes is None or not _io_list_ok(sg.output_indexes, lifetimes, _OUT):
        _validate_io_list(sg.output_indexes, operands, _OUT, "model-outputs", "model output", prefix)
    if lifetimes is None or not _graph_ok(sg.operations, lifetimes):
        _validate_graph(sg, prefix)


def _model_outputs(sg: Subgraph) -> set | tuple:
    """The int indexes among the main subgraph's outputs (whose unknown dimensions need HAL 1.2)."""
    idx = sg.output_indexes
    if not isinstance(idx, (list, tuple)):
        return ()
    if FAST_PATHS and _INTS.issuperset(map(type, idx)):
        return set(idx)
    return {x for x in idx if _is_int(x)}


# --- operands


def _operand_ok(ctx: _Ctx, o: Operand, is_model_output: bool) -> bool:
    """True when ``o`` meets every operand rule and its HAL version is ``ctx.version`` or
    older, for the common operand (enum type and lifetime, a tuple of ints, a float scale,
    an int zero point, no per-channel parameters or subgraph): the fuzzer's models are mostly
    such operands, and checking them here takes a few branches instead of one per rule (each
    branch is a coverage callback when the validator is instrumented). False: not certain,
    ``_validate_operand`` checks each rule in order and names the first broken."""
    try:
        f = _PLAIN[o.type.__class__, o.lifetime.__class__, o.type, o.lifetime]
        dims, scale, zp, loc = o.dimensions, o.scale, o.zero_point, o.location
        p, off, length, pad = loc.pool_index, loc.offset, loc.length, loc.padding
        if (dims.__class__, scale.__class__, zp.__class__, o.channel_quant.__class__, loc.__class__,
                p.__class__, off.__class__, length.__class__, pad.__class__) != _PLAIN_CLASSES:
            return False
        # Then & of bools (no short cut, so no branch).
        known = f.scalar | (bool(dims) & (0 not in dims))
        ok = _INTS.issuperset(map(type, dims)) & (len(dims) <= f.max_rank) & (min(dims, default=0) >= 0) \
            & (f.smin <= scale) & (scale <= f.smax) & (zp in f.zps) & (known | (not f.const))
        if f.const:
            end = off + length
            ok &= (not pad) & ((off | length) >= 0) & (length == f.itemsize * math.prod(dims)) & (
                (not p) & (end <= ctx.values_size) if f.copy else (p >= 0) & (end <= ctx.pool_sizes[p]))
        else:
            ok &= not (p | off | length | pad)
        # An unknown rank (a value but no dimensions), or a dynamic model output: HAL 1.2.
        dynamic = (not known) & (is_model_output | ((not dims) & (not f.noval)))
        return ok & (f.needs[dynamic] <= ctx.version)
    except Exception:  # anything unusual: the rules in order say what is wrong
        return False


def _validate_operand(ctx: _Ctx, o: Operand, i: int, prefix: str, is_model_output: bool) -> None:
    t = o.type
    try:
        info = _TYPES.get(t) if t.__class__ is OperandType or _is_int(t) else None
    except TypeError:  # unhashable
        info = None
    if info is None:
        raise ValidationError("operand-type", f"{prefix}operand {i}",
                              f"{t!r} is not a valid operand type" +
                              (" (OEM types are not supported)" if t in (T.OEM, T.TENSOR_OEM_BYTE) else ""))
    lt = o.lifetime
    if not (lt.__class__ is OperandLifeTime or (_is_int(lt) and lt in _LIFETIMES)):
        raise ValidationError("operand-lifetime", f"{prefix}operand {i}", f"{lt!r} is not a valid lifetime")
    if (t == _SUBGRAPH_TYPE) != (lt == _SUBG):
        raise ValidationError("operand-lifetime", f"{prefix}operand {i}",
                              f"an operand of type {_type_name(t)} cannot have lifetime {L(lt).name}")
    dims = o.dimensions
    if not (dims.__class__ is tuple or isinstance(dims, (tuple, list))):
        raise ValidationError("operand-dimensions", f"{prefix}operand {i}",
                              f"dimensions must be a sequence of integers, not {dims!r}")
    need = info.version
    if info.scalar:
        if len(dims):
            raise ValidationError("operand-rank", f"{prefix}operand {i}",
                                  f"{_type_name(t)} is a scalar but has dimensions {list(dims)}")
        known = True
    else:
        known = len(dims) > 0
        for d in dims:
            if not (d.__class__ is int or _is_int(d)) or d < 0:
                raise ValidationError("operand-dimensions", f"{prefix}operand {i}",
                                      f"dimension {d!r} of {list(dims)} is not an integer >= 0")
            if d == 0:
                known = False
        if lt == _COPY or lt == _REF:
            if not dims:
                raise ValidationError("operand-rank", f"{prefix}operand {i}",
                                      f"constant tensor of unknown rank ({L(lt).name})")
            if not known:
                raise ValidationError("operand-dimensions", f"{prefix}operand {i}",
                                      f"constant tensor with an unknown dimension: {list(dims)}")
        if not dims and lt != _NOVAL:
            need = max(need, Version.V1_2)  # unknown rank: HAL 1.2
        if is_model_output and not known:
            need = max(need, Version.V1_2)  # dynamic output shape: HAL 1.2
    # scale
    scale = o.scale
    if not (scale.__class__ is float or _is_real(scale)):
        raise ValidationError("operand-scale", f"{prefix}operand {i}", f"scale {scale!r} is not a number")
    rule = info.scale
    if rule == "zero":
        if scale != 0:
            raise ValidationError("operand-scale", f"{prefix}operand {i}",
                                  f"{_type_name(t)} must have scale 0, has {scale!r}")
    elif rule == "pos":
        if not scale > 0:
            raise ValidationError("operand-scale", f"{prefix}operand {i}",
                                  f"{_type_name(t)} must have a positive scale, has {scale!r}")
    elif not scale >= 0:
        raise ValidationError("operand-scale", f"{prefix}operand {i}",
                              f"{_type_name(t)} must have a scale >= 0, has {scale!r}")
    zp = o.zero_point
    lo, hi = info.zp
    if not ((zp.__class__ is int or _is_int(zp)) and lo <= zp <= hi):
        raise ValidationError("operand-zero-point", f"{prefix}operand {i}",
                              f"{_type_name(t)} must have a zero point in [{lo}, {hi}], has {zp!r}")
    cq = o.channel_quant
    if t == _PER_CHANNEL:
        _validate_channel_quant(o, f"{prefix}operand {i}")
    elif cq is not None:
        raise ValidationError("operand-channel-quant", f"{prefix}operand {i}",
                              f"{_type_name(t)} cannot carry per-channel quantisation parameters")
    # location
    loc = o.location
    if loc.__class__ is not DataLocation:
        raise ValidationError("constant-location" if lt == _COPY or lt == _REF else "operand-location",
                              f"{prefix}operand {i}", f"location {loc!r} is not a DataLocation")
    if lt == _COPY or lt == _REF:
        where = f"{prefix}operand {i}"
        p, off, length = loc.pool_index, loc.offset, loc.length
        if not ((p.__class__ is int or _is_int(p)) and (off.__class__ is int or _is_int(off))
                and (length.__class__ is int or _is_int(length))) or off < 0 or length < 0 or loc.padding:
            raise ValidationError("constant-location", where, f"bad location {loc}")
        if lt == _COPY:
            if p != 0:
                raise ValidationError("constant-location", where, f"CONSTANT_COPY with pool index {p}")
            if off + length > ctx.values_size:
                raise ValidationError("constant-location", where,
                                      f"[{off}, {off + length}) lies outside operand_values "
                                      f"({ctx.values_size} bytes)")
        else:
            if not 0 <= p < len(ctx.pool_sizes):
                raise ValidationError("constant-location", where,
                                      f"pool index {p} but the model has {len(ctx.pool_sizes)} pools")
            if off + length > ctx.pool_sizes[p]:
                raise ValidationError("constant-location", where,
                                      f"[{off}, {off + length}) lies outside pool {p} "
                                      f"({ctx.pool_sizes[p]} bytes)")
        size = info.itemsize * math.prod(dims)
        if length != size:
            raise ValidationError("constant-location", where,
                                  f"location length {length}, but a {_type_name(t)}{list(dims)} "
                                  f"is {size} bytes")
    elif lt == _SUBG:
        n = len(ctx.model.referenced)
        if loc.pool_index != 0 or loc.length != 0 or loc.padding != 0 or not _is_int(loc.offset) \
                or not 0 <= loc.offset < n:
            raise ValidationError("subgraph-reference", f"{prefix}operand {i}",
                                  f"location {loc} does not name one of the {n} referenced subgraphs")
        # Validate what it references first (no cycles: checked before any subgraph).
        _validate_subgraph(ctx, ctx.model.referenced[loc.offset], loc.offset)
    elif loc.pool_index != 0 or loc.offset != 0 or loc.length != 0 or loc.padding != 0:
        raise ValidationError("operand-location", f"{prefix}operand {i}",
                              f"a {L(lt).name} operand must have an all-zero location, has {loc}")
    if need > ctx.version:
        raise ValidationError("version", f"{prefix}operand {i}",
                              f"{_type_name(t)}{list(dims)} needs HAL {need.label}, validating for "
                              f"{ctx.version.label}")


def _validate_channel_quant(o: Operand, where: str) -> None:
    cq = o.channel_quant
    if cq is None:
        raise ValidationError("operand-channel-quant", where,
                              "TENSOR_QUANT8_SYMM_PER_CHANNEL needs channel_quant parameters")
    if not isinstance(cq, SymmPerChannelQuantParams) or not isinstance(cq.scales, (tuple, list)):
        raise ValidationError("operand-channel-quant", where, f"{cq!r} is not SymmPerChannelQuantParams")
    rank = len(o.dimensions)
    cd = cq.channel_dim
    if not (_is_int(cd) and 0 <= cd < rank):
        raise ValidationError("operand-channel-quant", where,
                              f"channel_dim {cd!r} is not a dimension of a rank-{rank} tensor")
    n = o.dimensions[cd]
    if n == 0:
        raise ValidationError("operand-channel-quant", where, f"channel dimension {cd} is unknown (0)")
    scales = cq.scales
    if len(scales) != n:
        raise ValidationError("operand-channel-quant", where,
                              f"{len(scales)} scales for {n} channels")
    for k, s in enumerate(scales):
        if not (_is_real(s) and s > 0):
            raise ValidationError("operand-channel-quant", where, f"scales[{k}] = {s!r} is not positive")


# --- model input / output lists


def _validate_io_list(indexes: Sequence[int], operands: list[Operand], lifetime: int, rule: str,
                      what: str, prefix: str) -> None:
    n = len(operands)
    seen: set[int] = set()
    if not isinstance(indexes, (list, tuple)):
        raise ValidationError(rule, f"{prefix}{what}s", f"not a list of operand indexes: {indexes!r}")
    for pos, idx in enumerate(indexes):
        if not ((idx.__class__ is int or _is_int(idx)) and 0 <= idx < n):
            raise ValidationError(rule, f"{prefix}{what} {pos}",
                                  f"index {idx!r} is not an operand (the subgraph has {n})")
        if operands[idx].lifetime != lifetime:
            raise ValidationError(rule, f"{prefix}operand {idx}",
                                  f"listed as {what} {pos} but has lifetime "
                                  f"{_lifetime_name(operands[idx].lifetime)}")
        if idx in seen:
            raise ValidationError(rule, f"{prefix}operand {idx}", f"listed twice among the {what}s")
        seen.add(idx)
    count = 0
    for o in operands:
        if o.lifetime == lifetime:
            count += 1
    if count != len(seen):
        for i, o in enumerate(operands):
            if o.lifetime == lifetime and i not in seen:
                raise ValidationError(rule, f"{prefix}operand {i}",
                                      f"has lifetime {L(lifetime).name} but is not listed as a {what}")


def _io_list_ok(indexes: Any, lifetimes: list, lifetime: int) -> bool:
    """What _validate_io_list checks, in few branches, for a subgraph whose operands are valid
    (``lifetimes``: theirs): distinct operand indexes, exactly the operands of ``lifetime``."""
    if not _indexes_ok(indexes, len(lifetimes)):
        return False
    listed = list(map(lifetimes.__getitem__, indexes)).count(lifetime)
    return (len(set(indexes)) == len(indexes)) & (listed == len(indexes) == lifetimes.count(lifetime))


def _lifetime_name(lt: Any) -> str:
    try:
        return L(lt).name
    except (ValueError, TypeError):
        return repr(lt)


# --- operations


def _validate_operation(ctx: _Ctx, sg: Subgraph, op: Operation, n: int, n_operands: int,
                        prefix: str, lifetimes: list | None) -> None:
    t = op.type
    if not ((t.__class__ is OperationType or _is_int(t)) and t in _OPERATION_TYPES):
        raise ValidationError("operation-type", f"{prefix}operation {n}",
                              f"{t!r} is not a valid operation type")
    operands = sg.operands
    record = get(t)
    if lifetimes is not None and _indexes_ok(op.inputs, n_operands) and _indexes_ok(op.outputs, n_operands) \
            and _WRITABLE_SET.issuperset(map(lifetimes.__getitem__, op.outputs)):
        if record is None:
            need = OperationType(t).version
            if t == OperationType.IF or t == OperationType.WHILE:
                _validate_control_flow(ctx, sg, op, n, prefix)
        else:
            need = _validate_with_record(ctx, record, op, operands, n, prefix, lifetimes)
        if need > ctx.version:
            raise ValidationError("version", f"{prefix}operation {n} ({_op_name(t)})",
                                  f"needs HAL {need.label}, validating for {ctx.version.label}")
        return
    where = None
    for kind, lst in (("input", op.inputs), ("output", op.outputs)):
        if not isinstance(lst, (list, tuple)):
            raise ValidationError("operation-operand-index", f"{prefix}operation {n} ({_op_name(t)})",
                                  f"{kind}s must be a list of operand indexes, not {lst!r}")
        for j, idx in enumerate(lst):
            if not ((idx.__class__ is int or _is_int(idx)) and 0 <= idx < n_operands):
                where = f"{prefix}operation {n} ({_op_name(t)})"
                raise ValidationError("operation-operand-index", where,
                                      f"{kind} {j} is operand {idx!r}, the subgraph has {n_operands}")
    for j, idx in enumerate(op.outputs):
        lt = operands[idx].lifetime
        if lt != _TEMP and lt != _OUT:
            where = f"{prefix}operation {n} ({_op_name(t)})"
            raise ValidationError("operation-output-lifetime", where,
                                  f"output {j} writes operand {idx} of lifetime {_lifetime_name(lt)}")
    if record is None:
        need = OperationType(t).version
        if t == OperationType.IF or t == OperationType.WHILE:
            _validate_control_flow(ctx, sg, op, n, prefix)
    else:
        need = _validate_with_record(ctx, record, op, operands, n, prefix, None)
    if need > ctx.version:
        raise ValidationError("version", f"{prefix}operation {n} ({_op_name(t)})",
                              f"needs HAL {need.label}, validating for {ctx.version.label}")


def _indexes_ok(lst: Any, n_operands: int) -> bool:
    """A list or tuple of exact ints in [0, n_operands) (few branches: see ``_operand_ok``)."""
    return (lst.__class__ is list or lst.__class__ is tuple) and _INTS.issuperset(map(type, lst)) \
        and min(lst, default=0) >= 0 and max(lst, default=0) < n_operands


def _norm(o: Operand) -> Operand:
    """The operand with enum-typed fields (mutated models may hold raw ints)."""
    if o.type.__class__ is OperandType:
        return o
    return Operand(OperandType(o.type), tuple(o.dimensions), o.scale, o.zero_point, o.lifetime,
                   o.location, o.channel_quant)


def _validate_with_record(ctx: _Ctx, record: OpRecord, op: Operation, operands: list[Operand],
                          n: int, prefix: str, lifetimes: list | None) -> Version:
    ins: list[Operand | None] = list(map(operands.__getitem__, op.inputs))
    outs = list(map(operands.__getitem__, op.outputs))
    in_types = list(map(_TYPE_OF, ins))
    out_types = list(map(_TYPE_OF, outs))
    # The common case (no omitted input, enum types) in a few branches; else operand by operand.
    if lifetimes is None or _NOVAL in map(lifetimes.__getitem__, op.inputs) \
            or not _ENUM_TYPES.issuperset(map(type, in_types)) \
            or not _ENUM_TYPES.issuperset(map(type, out_types)):
        ins = []
        for idx in op.inputs:
            o = operands[idx]
            ins.append(None if o.lifetime == _NOVAL else _norm(o))
        outs = [_norm(operands[idx]) for idx in op.outputs]
        in_types = [None if o is None else o.type for o in ins]
        out_types = [o.type for o in outs]
    where = f"{prefix}operation {n} ({record.name})"
    try:
        m = _match(record, in_types, out_types)
    except ShapeError as e:
        bad_layout = _layout_problem(record, in_types, out_types)
        if bad_layout:
            raise ValidationError("operation-layout", where, bad_layout) from None
        raise ValidationError("operation-signature", where, str(e)) from None
    pos = m.positions
    in_ranked, out_ranked, quant_args = _plan(m.signature)
    # ranks
    for name, allowed in in_ranked:
        for p in pos.get(name, ()):
            o = ins[p]
            if o is not None and len(o.dimensions) not in allowed and o.dimensions and not o.type.is_scalar:
                raise ValidationError(
                    "operation-rank", where,
                    f"input {p} ({name}) has rank {len(o.dimensions)}, allowed: {list(allowed)}")
    for name, allowed in out_ranked:
        for j in pos[f"out:{name}"]:
            o = outs[j]
            if len(o.dimensions) not in allowed and o.dimensions and not o.type.is_scalar:
                raise ValidationError(
                    "operation-rank", where,
                    f"output {j} ({name}) has rank {len(o.dimensions)}, allowed: {list(allowed)}")
    model = ctx.model
    # fused activation
    if record.activation:
        for p in pos.get(record.activation, ()):
            o = ins[p]
            if o is not None and o.lifetime in _CONSTANT:
                act = _scalar_value(model, o)
                if act not in (0, 1, 2, 3):
                    raise ValidationError("operation-activation", where,
                                          f"input {p} (fused activation) is {act!r}, not 0..3")
                if act and outs and outs[0].type is T.TENSOR_INT32:
                    raise ValidationError("operation-activation", where,
                                          f"input {p} (fused activation) must be NONE for a "
                                          f"TENSOR_INT32 output, is {act}")
    # quantisation rules
    for a in quant_args:
        _check_quant(record, a, m, ins, outs, where)
    # shape rule and checks
    return _check_rules(model, record, m, ins, outs, where)


_PLANS: dict[int, tuple] = {}


def _plan(sig: Signature) -> tuple[tuple, tuple, tuple]:
    """(input args with declared ranks, outputs with declared ranks, args with quant rules)."""
    hit = _PLANS.get(id(sig))
    if hit is None or hit[0] is not sig:
        hit = _PLANS[id(sig)] = (
            sig,
            tuple((a.name, a.ranks) for a in sig.inputs if a.ranks is not None),
            tuple((a.name, a.ranks) for a in sig.outputs if a.ranks is not None),
            tuple(a for a in sig.inputs + sig.outputs if a.quant.kind != "free"))
    return hit[1], hit[2], hit[3]


_MATCHES: dict[tuple, tuple[OpRecord, Match | str]] = {}
_MATCHES_MAX = 8192


def _match(record: OpRecord, in_types: list, out_types: list) -> Match:
    """``match``, memoised on the operand types (the fuzzer validates many similar models)."""
    key = (id(record), tuple(in_types), tuple(out_types))
    hit = _MATCHES.get(key)
    if hit is None or hit[0] is not record:
        try:
            result: Match | str = match(record, in_types, out_types)
        except ShapeError as e:
            result = str(e)
        if len(_MATCHES) >= _MATCHES_MAX:
            _MATCHES.clear()
        hit = _MATCHES[key] = (record, result)
    if isinstance(hit[1], str):
        raise ShapeError(hit[1])
    return hit[1]


def _layout_problem(record: OpRecord, in_types: list, out_types: list) -> str:
    """The layout input's type, when it is the one thing that keeps a signature from matching."""
    if not record.layout:
        return ""
    for sig in record.signatures:
        names = [a.name for a in sig.inputs]
        if record.layout not in names:
            continue
        p = names.index(record.layout)
        if p < len(in_types) and in_types[p] is not None and in_types[p] != _BOOL:
            fixed = list(in_types)
            fixed[p] = T.BOOL
            try:
                match(record, fixed, out_types)
            except ShapeError:
                continue
            return f"input {p} (layout) must be BOOL, is {_type_name(in_types[p])}"
    return ""


def _first(m: Match, name: str, ins: list, outs: list) -> Operand | None:
    for p in m.positions.get(name, ()):
        if ins[p] is not None:
            return ins[p]
    for p in m.positions.get(f"out:{name}", ()):
        return outs[p]
    return None


def _check_quant(record: OpRecord, a: Any, m: Match, ins: list, outs: list, where: str) -> None:
    q = a.quant
    targets: list[tuple[str, Operand]] = []
    for p in m.positions.get(a.name, ()):
        if ins[p] is not None:
            targets.append((f"input {p} ({a.name})", ins[p]))
    for p in m.positions.get(f"out:{a.name}", ()):
        targets.append((f"output {p} ({a.name})", outs[p]))
    for label, o in targets:
        t = o.type
        if q.kind == "same":
            ref = _first(m, q.ref, ins, outs)
            if ref is None or not t.is_quant or not ref.type.is_quant or o.channel_quant is not None \
                    or ref.channel_quant is not None:
                continue
            if _f32(o.scale) != _f32(ref.scale) or o.zero_point != ref.zero_point:
                raise ValidationError("operation-quant", where,
                                      f"{label} must have the scale and zero point of {q.ref} "
                                      f"({ref.scale:g}, {ref.zero_point}), has ({o.scale:g}, "
                                      f"{o.zero_point})")
        elif q.kind == "fixed":
            if not t.is_quant or o.channel_quant is not None:
                continue
            zp = q.zero_point - (128 if t is T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
            if _f32(o.scale) != _f32(q.scale) or o.zero_point != zp:
                raise ValidationError("operation-quant", where,
                                      f"{label} must have scale {q.scale:g} and zero point {zp}, has "
                                      f"({o.scale:g}, {o.zero_point})")
        elif q.kind == "bias":
            if t is not T.TENSOR_INT32:
                continue
            names = q.ref.split(",")
            refs = [_first(m, nm, ins, outs) for nm in names]
            if len(refs) != 2 or refs[0] is None or refs[1] is None:
                continue
            x, w = refs
            if not x.type.is_quant or not w.type.is_quant or w.channel_quant is not None:
                continue  # per-channel filter: the bias's scale per channel is implied
            prod = float(x.scale) * float(w.scale)
            if not abs(prod - o.scale) <= BIAS_SCALE_RTOL * min(prod, o.scale):
                raise ValidationError("operation-quant", where,
                                      f"{label} must have scale {names[0]}.scale * {names[1]}.scale "
                                      f"= {prod:g}, has {o.scale:g}")


def _check_rules(model: Model, record: OpRecord, m: Match, ins: list, outs: list,
                 where: str) -> Version:
    """Shape rule, record.check and declared output shapes; returns the HAL version the
    instance needs (``instance_version``: the record's ``min_version`` rule may raise the
    variant's). Constant tensor values are read only when the rules turn out to need them
    (first pass: scalars only). When ``min_version`` needs a value that is not constant, the
    variant's version stands."""
    values: list[Any] = []
    withheld = False
    deq = record.dequantize
    for o in ins:
        if o is None or o.lifetime not in _CONSTANT:
            values.append(None)
        elif o.type.is_scalar:
            values.append(_scalar_value(model, o))
        else:
            values.append(None)
            withheld = True
    shapes = None
    need = m.version
    min_version = getattr(record, "min_version", None)
    for attempt in (0, 1):
        if attempt:
            if not withheld:
                break
            values = [v if v is not None or o is None or o.lifetime not in _CONSTANT
                      else _tensor_value(model, o, deq) for o, v in zip(ins, values, strict=True)]
        try:
            ctx = bind(record, ins, values, outs, m)
            shapes = bound_output_shapes(ctx)
            checked = True
            if record.check or min_version:
                if record.check:
                    try:
                        record.check(ctx)
                    except Unknown:
                        checked = False
                if min_version:
                    try:
                        need = instance_version(ctx)
                    except Unknown:
                        checked = False
        except ShapeError as e:
            raise ValidationError("operation-parameters", where, str(e)) from None
        except Unknown:  # bind() reading a non-constant layout flag
            shapes, checked = None, False
        except Exception as e:  # a record that cannot evaluate these operands
            raise ValidationError("operation-parameters", where,
                                  f"record error: {type(e).__name__}: {e}") from None
        if shapes is not None and checked:
            break
    if shapes is None:
        return need
    if len(shapes) != len(outs):
        raise ValidationError("operation-parameters", where,
                              f"record error: shape rule gave {len(shapes)} shapes for {len(outs)} outputs")
    for j, (want, o) in enumerate(zip(shapes, outs, strict=True)):
        dims = o.dimensions
        if not dims or dims == want:
            continue
        if len(dims) != len(want) or any(d and w and d != w for d, w in zip(dims, want, strict=True)):
            raise ValidationError("operation-output-shape", where,
                                  f"output {j} is declared {list(dims)}, the operation gives {list(want)}")
    return need


def _raw(model: Model, o: Operand) -> tuple[Any, int]:
    """(buffer, offset) of a constant's bytes."""
    loc = o.location
    if o.lifetime == _COPY:
        return model.operand_values, loc.offset
    return bytes(model.pools[loc.pool_index].view()[loc.offset:loc.offset + loc.length]), 0


def _scalar_value(model: Model, o: Operand) -> Any:
    info = _TYPES[o.type]
    buf, off = _raw(model, o)
    return struct.unpack_from(info.fmt, buf, off)[0]


def _tensor_value(model: Model, o: Operand, dequantize: bool) -> np.ndarray:
    info = _TYPES[o.type]
    buf, off = _raw(model, o)
    arr = np.frombuffer(buf, dtype=info.dtype, count=math.prod(o.dimensions), offset=off)
    arr = arr.reshape(o.dimensions)
    return to_real(arr, o) if dequantize else arr


# --- IF / WHILE (only when the catalogue has no record for them)


def _validate_control_flow(ctx: _Ctx, sg: Subgraph, op: Operation, n: int, prefix: str) -> None:
    where = f"{prefix}operation {n} ({_op_name(op.type)})"
    ops = sg.operands
    referenced = ctx.model.referenced

    def fail(detail: str) -> None:
        expected = control_flow.get(op.type).signature
        raise ValidationError("control-flow", where, f"{detail} (expected {expected})")

    def subgraph_of(idx: int, what: str) -> Subgraph:
        o = ops[idx]
        if o.type != _SUBGRAPH_TYPE or o.lifetime != _SUBG:
            fail(f"{what} (operand {idx}) is not a SUBGRAPH operand")
        return referenced[o.location.offset]

    def compatible(a: Operand, b: Operand, what: str) -> None:
        if a.type != b.type:
            fail(f"{what}: type {_type_name(a.type)} != {_type_name(b.type)}")
        if a.dimensions and b.dimensions:
            if len(a.dimensions) != len(b.dimensions) or any(
                    x and y and x != y for x, y in zip(a.dimensions, b.dimensions, strict=True)):
                fail(f"{what}: dimensions {list(a.dimensions)} and {list(b.dimensions)} differ")
        if a.scale != b.scale or a.zero_point != b.zero_point or a.channel_quant != b.channel_quant:
            fail(f"{what}: quantisation parameters differ")

    def condition(o: Operand, what: str) -> None:
        if o.lifetime == _NOVAL:  # Android's CpuExecutor cannot read it: no default branch
            fail(f"{what} has no value (NO_VALUE); an IF needs its condition")
        if o.type != T.TENSOR_BOOL8 or tuple(o.dimensions) != (1,):
            fail(f"{what} must be a TENSOR_BOOL8 of shape [1], is {_type_name(o.type)}{list(o.dimensions)}")

    ins, outs = op.inputs, op.outputs
    if len(ins) < 3 or len(outs) < 1:
        fail(f"needs at least 3 inputs and 1 output, has {len(ins)} and {len(outs)}")
    if op.type == OperationType.IF:
        condition(ops[ins[0]], "the condition (input 0)")
        for k, what in ((1, "then"), (2, "else")):
            branch = subgraph_of(ins[k], f"the {what} branch")
            if len(ins) != 3 + len(branch.input_indexes) or len(outs) != len(branch.output_indexes):
                fail(f"{len(ins)} inputs / {len(outs)} outputs do not fit the {what} branch "
                     f"({len(branch.input_indexes)} inputs, {len(branch.output_indexes)} outputs)")
            for i, idx in enumerate(branch.input_indexes):
                compatible(branch.operands[idx], ops[ins[3 + i]], f"{what} branch input {i}")
            for i, idx in enumerate(branch.output_indexes):
                compatible(branch.operands[idx], ops[outs[i]], f"{what} branch output {i}")
        return
    cond = subgraph_of(ins[0], "the condition model")
    body = subgraph_of(ins[1], "the body model")
    n_in = len(ins) - 2
    if len(cond.input_indexes) != n_in or len(cond.output_indexes) != 1:
        fail(f"the condition model must take {n_in} inputs and give 1 output")
    for i, idx in enumerate(cond.input_indexes):
        compatible(cond.operands[idx], ops[ins[2 + i]], f"condition input {i}")
    condition(cond.operands[cond.output_indexes[0]], "the condition model's output")
    if len(body.input_indexes) != n_in or not len(outs) <= len(body.output_indexes) <= n_in:
        fail(f"the body model must take {n_in} inputs and give between {len(outs)} and {n_in} outputs")
    for i, idx in enumerate(body.input_indexes):
        compatible(body.operands[idx], ops[ins[2 + i]], f"body input {i}")
    for i in range(len(outs)):
        compatible(body.operands[body.output_indexes[i]], ops[outs[i]], f"body output {i}")
    for i in range(len(body.output_indexes)):
        compatible(body.operands[body.input_indexes[i]], body.operands[body.output_indexes[i]],
                   f"body input/output {i}")


# --- data flow


#: Lifetimes of operands that hold a value before any operation runs.
_READY = frozenset(int(x) for x in L) - {_TEMP, _OUT}


def _graph_ok(operations: list[Operation], lifetimes: list) -> bool:
    """Whether the operations (their operand indexes valid) write each operand of lifetime
    TEMPORARY_VARIABLE or SUBGRAPH_OUTPUT exactly once, after no reader: _validate_graph's
    check in a few branches an operation, for a subgraph whose operands are valid."""
    known = set(compress(range(len(lifetimes)), map(_READY.__contains__, lifetimes)))
    for op in operations:
        outs = op.outputs
        if not known.issuperset(op.inputs) or not known.isdisjoint(outs) or len(set(outs)) != len(outs):
            return False
        known.update(outs)
    return len(known) == len(lifetimes)


def _validate_graph(sg: Subgraph, prefix: str) -> None:
    operands = sg.operands
    known = [o.lifetime != _TEMP and o.lifetime != _OUT for o in operands]
    ok = True
    for op in sg.operations:
        for k in op.inputs:
            if not known[k]:
                ok = False
                break
        if not ok:
            break
        for k in op.outputs:
            if known[k]:
                ok = False
                break
            known[k] = True
        if not ok:
            break
    if ok and all(known):
        return
    _diagnose_graph(sg, prefix)


def _diagnose_graph(sg: Subgraph, prefix: str) -> None:
    operands, ops = sg.operands, sg.operations
    writers: dict[int, list[int]] = {}
    for n, op in enumerate(ops):
        for k in op.outputs:
            writers.setdefault(k, []).append(n)
    for k in sorted(writers):
        if len(writers[k]) > 1:
            raise ValidationError("duplicate-writer", f"{prefix}operand {k}",
                                  "written by operations " + ", ".join(map(str, writers[k])))
    for i, o in enumerate(operands):
        if (o.lifetime == _TEMP or o.lifetime == _OUT) and i not in writers:
            readers = [n for n, op in enumerate(ops) if i in op.inputs]
            raise ValidationError("unwritten-operand", f"{prefix}operand {i}",
                                  f"{_lifetime_name(o.lifetime)} operand has no writer"
                                  + (f" (read by operations {readers})" if readers else ""))
    # Kahn's algorithm over operation -> operation dependencies.
    deps = [set() for _ in ops]
    users: list[list[int]] = [[] for _ in ops]
    for n, op in enumerate(ops):
        for k in op.inputs:
            w = writers.get(k)
            if w is not None:
                deps[n].add(w[0])
    for n, d in enumerate(deps):
        for w in d:
            users[w].append(n)
    pending = [len(d) for d in deps]
    ready = [n for n, c in enumerate(pending) if c == 0]
    done = 0
    while ready:
        w = ready.pop()
        done += 1
        for n in users[w]:
            pending[n] -= 1
            if pending[n] == 0:
                ready.append(n)
    if done < len(ops):
        stuck = {n for n, c in enumerate(pending) if c > 0}
        cycle = _find_cycle(deps, stuck)
        first = min(cycle)
        raise ValidationError("cycle", f"{prefix}operation {first} ({_op_name(ops[first].type)})",
                              "operations depend on each other in a cycle: "
                              + " -> ".join(str(c) for c in cycle))
    known = [o.lifetime != _TEMP and o.lifetime != _OUT for o in operands]
    for n, op in enumerate(ops):
        for j, k in enumerate(op.inputs):
            if not known[k]:
                raise ValidationError("execution-order", f"{prefix}operation {n} ({_op_name(op.type)})",
                                      f"input {j} (operand {k}) is read before operation "
                                      f"{writers[k][0]} writes it")
        for k in op.outputs:
            known[k] = True
    raise AssertionError("graph diagnosis found nothing")  # pragma: no cover


def _find_cycle(deps: list[set[int]], stuck: set[int]) -> list[int]:
    """One cycle among the operations left over by the topological sort (in data-flow order)."""
    start = min(stuck)
    seen: dict[int, int] = {}
    path: list[int] = []
    n = start
    while n not in seen:
        seen[n] = len(path)
        path.append(n)
        n = min(d for d in deps[n] if d in stuck)
    cyc = path[seen[n]:]
    cyc.reverse()  # deps point from reader to writer; report writer -> reader
    first = cyc.index(min(cyc))
    cyc = cyc[first:] + cyc[:first]
    return [*cyc, cyc[0]]


# ---------------------------------------------------------------------------------------
# Requests


def validate_request(request: Request, model: Model) -> None:
    """Raise ValidationError naming the first rule ``request`` breaks for ``model`` (assumed
    valid), or return None."""
    sg = model.main
    for what, args, idxs in (("input", request.inputs, sg.input_indexes),
                             ("output", request.outputs, sg.output_indexes)):
        if len(args) != len(idxs):
            raise ValidationError("request-arguments", f"request {what}s",
                                  f"the request has {len(args)} {what}s, the model {len(idxs)}")
    sizes: list[int | None] = []
    for i, pool in enumerate(request.pools):
        if isinstance(pool, Memory):
            if not pool.size > 0:
                raise ValidationError("pool", f"request pool {i}", f"pool of size {pool.size}")
            sizes.append(pool.size)
        elif _is_int(pool):
            if pool <= 0:
                raise ValidationError("pool", f"request pool {i}", f"invalid buffer token {pool}")
            sizes.append(None)  # a driver-managed buffer: its size is the driver's to check
        else:
            raise ValidationError("pool", f"request pool {i}", f"{pool!r} is not a memory pool or token")
    for what, args, idxs in (("input", request.inputs, sg.input_indexes),
                             ("output", request.outputs, sg.output_indexes)):
        is_output = what == "output"
        for i, (arg, idx) in enumerate(zip(args, idxs, strict=True)):
            _validate_argument(arg, sg.operands[idx], sizes, is_output, f"request {what} {i}")
            if arg.has_no_value and not is_output and not input_may_be_omitted(model, i):
                raise ValidationError("request-omitted", f"request input {i}",
                                      "an input that an operation requires has no value (only optional "
                                      "operation inputs may be omitted)")


def input_may_be_omitted(model: Model, position: int) -> bool:
    """Whether model input ``position`` may be given no value in a request (``has_no_value``).

    NNAPI lets a caller omit only what an operation treats as optional, so the input may be
    omitted when every operation of the main subgraph that reads it still matches a catalogue
    signature with it omitted (an input no operation reads may be omitted too). An IF's
    condition may not be omitted; the other inputs of IF and WHILE, which the catalogue does
    not describe, are left to the run: the interpreter rejects an omission they cannot take
    with INVALID_ARGUMENT, as the CpuExecutor does (BAD_DATA)."""
    sg = model.main
    idx = sg.input_indexes[position]
    operands = sg.operands
    for op in sg.operations:
        if idx not in op.inputs:
            continue
        if op.type == OperationType.IF and op.inputs and op.inputs[0] == idx:
            return False  # the condition: an IF without one has no branch to run
        record = get(op.type)
        if record is None:
            continue
        in_types = [None if k == idx or operands[k].lifetime == OperandLifeTime.NO_VALUE else operands[k].type
                    for k in op.inputs]
        try:
            match(record, in_types, [operands[k].type for k in op.outputs])
        except ShapeError:
            return False
    return True


def _validate_argument(arg: RequestArgument, operand: Operand, sizes: list[int | None],
                       is_output: bool, where: str) -> None:
    loc = arg.location
    if loc.__class__ is not DataLocation:
        raise ValidationError("request-location", where, f"location {loc!r} is not a DataLocation")
    if not isinstance(arg.dimensions, (tuple, list)):
        raise ValidationError("request-dimensions", where,
                              f"dimensions must be a sequence of integers, not {arg.dimensions!r}")
    if arg.has_no_value:
        if loc.pool_index != 0 or loc.offset != 0 or loc.length != 0 or loc.padding != 0:
            raise ValidationError("request-location", where,
                                  f"an omitted argument must have an all-zero location, has {loc}")
        if len(arg.dimensions):
            raise ValidationError("request-dimensions", where,
                                  f"an omitted argument cannot have dimensions {list(arg.dimensions)}")
        return
    p, off, length, pad = loc.pool_index, loc.offset, loc.length, loc.padding
    if not (_is_int(p) and _is_int(off) and _is_int(length) and _is_int(pad)
            and p >= 0 and off >= 0 and length >= 0 and pad >= 0):
        raise ValidationError("request-location", where, f"bad location {loc}")
    if p >= len(sizes):
        raise ValidationError("request-location", where,
                              f"pool index {p}, the request has {len(sizes)} pools")
    size = sizes[p]
    if size is not None:
        if off + length + pad > size:
            raise ValidationError("request-location", where,
                                  f"[{off}, {off + length + pad}) lies outside pool {p} ({size} bytes)")
        if length == 0:
            raise ValidationError("request-location", where, "zero length in a pool of known size")
    t = operand.type
    info = _TYPES[t]
    mdims = tuple(operand.dimensions)
    rdims = tuple(arg.dimensions)
    for d in rdims:
        if not _is_int(d) or d < 0:
            raise ValidationError("request-dimensions", where, f"dimension {d!r} is not an integer >= 0")
    if info.scalar:
        if rdims:
            raise ValidationError("request-dimensions", where,
                                  f"a {_type_name(t)} scalar cannot have dimensions {list(rdims)}")
        merged: tuple[int, ...] = ()
        known = True
    else:
        if rdims:
            if mdims and len(rdims) != len(mdims):
                raise ValidationError("request-dimensions", where,
                                      f"rank {len(rdims)} {list(rdims)}, the model's is {len(mdims)} "
                                      f"{list(mdims)}")
            for j, d in enumerate(rdims):
                if mdims and mdims[j] and d != mdims[j]:
                    raise ValidationError("request-dimensions", where,
                                          f"dimension {j} is {d}, the model's is {mdims[j]}")
            merged = rdims
        else:
            merged = mdims
        known = bool(merged) and all(merged)
        # A driver-managed buffer (size None) knows its input's shape itself (MEM-6).
        if not known and not is_output and size is not None:
            raise ValidationError("request-dimensions", where,
                                  f"input not fully specified: model {list(mdims)}, request "
                                  f"{list(rdims)}")
    # A token pool (size None) may leave the length 0: the driver knows its buffer's size.
    if known and (size is not None or length):
        expected = info.itemsize * math.prod(merged)
        if length != expected and (not is_output or length > expected):
            raise ValidationError("request-length", where,
                                  f"length {length}, a {_type_name(t)}{list(merged)} is {expected} bytes"
                                  + (" (an output buffer may be smaller, not larger)" if is_output else ""))
