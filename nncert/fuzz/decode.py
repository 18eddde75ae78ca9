"""Structure-aware decoding of fuzz inputs: bytes -> a nearly valid model, request, cache
contents or burst message.

An input is read by ``ByteReader`` (the FuzzedDataProvider idea in pure Python: a reader
that never fails, giving zeros once the bytes run out). Its first four bytes pick a
catalogue case and a CTS variation (``CASES``: every operation x signature x type variant x
layout x activation of ``nncert.testing.cases``, seed 0, then the catalogue's edge cases:
saturating activations, extreme quantisation, broadcast corners, ...); the next byte says
how many mutations (0-3) follow, each a kind byte and its arguments. So most inputs decode to a
valid model with a few VTS-like changes (VAL-1), and a seed (``encode_case``) is just the
case key with no mutation. Decoding is total: any bytes give a model, never an exception.

The four key bytes are the CRC-32 of the case's id, so that a corpus survives additions to
the catalogue; bytes that name no case pick ``CASES[value % len(CASES)]``.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nncert.hal.builder import build_request
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
    ExecutionPreference,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
)
from nncert.ops.base import ShapeError
from nncert.testing.cases import (
    VARIATION_TESTS,
    VARIATIONS,
    OpCase,
    case_id,
    enumerate_cases,
    enumerate_edge_cases,
    is_heavy,
    sample_case,
)
from nncert.testing.harness import PATHS

#: The most bytes a constant-value mutation writes (the operand's length may have been
#: mutated to anything; beyond this the constant is cut short, which the validator refuses).
MAX_CONSTANT_BYTES = 1 << 20

#: Mutations per input at most (the count byte is taken modulo MAX_MUTATIONS + 1).
MAX_MUTATIONS = 3

_INTERESTING_INTS = (0, 1, -1, 2, 3, 4, 7, 8, 127, 128, 255, 256, -128, -129, 32767, 65535, 65536,
                     2**31 - 1, -(2**31), 2**32 - 1, 2**32, 2**63 - 1, -(2**63), 2**64)
_INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-6, 1e-45, 1e38, 3.5e38, math.inf, -math.inf,
                       math.nan, 2.0**-24, 0.0078125)
_OPERAND_TYPES = tuple(OperandType)
_OPERATION_TYPES = tuple(OperationType)
_LIFETIMES = tuple(OperandLifeTime)


class ByteReader:
    """Consumes fuzz bytes; every method answers something once the bytes run out (zeros)."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def remaining(self) -> int:
        return max(0, len(self.data) - self.pos)

    def take(self, n: int) -> bytes:
        n = max(0, n)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def uint(self, n: int) -> int:
        """An unsigned little-endian integer of ``n`` bytes (missing bytes are zeros)."""
        return int.from_bytes(self.take(n), "little")

    def u8(self) -> int:
        if self.pos < len(self.data):
            self.pos += 1
            return self.data[self.pos - 1]
        return 0

    def pick(self, n: int) -> int:
        """An index in [0, n) (0 when n <= 0)."""
        if n <= 0:
            return 0
        return (self.u8() if n <= 256 else self.uint(2) if n <= 65536 else self.uint(4)) % n

    def small(self, hi: int = 8) -> int:
        return self.u8() % (hi + 1)

    def integer(self) -> int:
        """An edge value most of the time, a raw signed 32-bit value otherwise."""
        k = self.u8()
        if k < 200:
            return _INTERESTING_INTS[k % len(_INTERESTING_INTS)]
        return int.from_bytes(self.take(4).ljust(4, b"\0"), "little", signed=True)

    def real(self) -> float:
        k = self.u8()
        if k < 200:
            return _INTERESTING_FLOATS[k % len(_INTERESTING_FLOATS)]
        return struct.unpack("<f", self.take(4).ljust(4, b"\0"))[0]


# -- the catalogue cases -------------------------------------------------------------------------

@dataclass(frozen=True)
class CaseKey:
    params: tuple  # (record, signature, variant, nchw, activation, seed) for sample_case
    variation: str

    @property
    def id(self) -> str:
        return f"{case_id(*self.params)}/{self.variation}"

    @property
    def operation(self) -> str:
        return self.params[0].name

    @property
    def conformance_test(self) -> str:
        """The pytest node id of the conformance test that runs this case and variation (an
        edge case: on the synchronous path)."""
        if len(self.params) > 6 and self.params[6] is not None:
            return f"conformance/test_operations.py::test_operation_edge[{case_id(*self.params)}-sync]"
        return f"conformance/test_operations.py::{VARIATION_TESTS[self.variation]}[{case_id(*self.params)}]"



@dataclass
class SeedCase:
    """A catalogue case as a valid model, with a request's input values and output shapes."""

    key: CaseKey
    model: Model
    feeds: list[np.ndarray]
    output_shapes: list[tuple[int, ...]]


@functools.cache
def cases() -> tuple[CaseKey, ...]:
    """Every case key: the catalogue's seed-0 cases x the CTS variations, then its edge cases
    (base variation; not the heavy ones, whose models are too large to mutate quickly).
    New keys go at the end, so that an index keeps naming the same case."""
    plain = tuple(CaseKey(p, v) for p in enumerate_cases(seeds=(0,)) for v in VARIATIONS)
    return plain + tuple(CaseKey(p, "base") for p in enumerate_edge_cases() if not is_heavy(p))


@functools.cache
def _by_crc() -> dict[int, int]:
    return {zlib.crc32(k.id.encode()): i for i, k in enumerate(cases())}


def case_index(reader: ByteReader) -> int:
    raw = reader.uint(4)
    found = _by_crc().get(raw)
    return found if found is not None else raw % len(cases())


@functools.cache
def seed_case(index: int) -> SeedCase:
    """Case ``index`` of ``cases()`` built as a model; a variation the case does not support
    gives its base case (so that every index decodes): the base's key too, whose conformance
    test is the one that runs that model (no test runs an unsupported variation, and a
    finding named after one would never match the driver's expectations)."""
    key = cases()[index]
    base = _base_index(index)
    case = _sampled(base)
    if case is None:  # a catalogue bug: the first case rather than no model
        if not index:
            sample_case(*key.params)  # raises the ShapeError
        return seed_case(0)
    if index != base and not case.supports(key.variation):
        return seed_case(base)  # (the same model sample_case would build again)
    model, feeds = case.model(key.variation)
    return SeedCase(key, model, feeds, [tuple(e.shape) for e in case.variation_expected(key.variation)])


def supported(index: int) -> bool:
    """Whether case ``index``'s variation is really that variation (a seed worth keeping)."""
    key = cases()[index]
    if key.variation == "base":
        return True
    case = _sampled(_base_index(index))
    return case is not None and case.supports(key.variation)


@functools.cache
def _bases() -> dict[str, int]:
    return {case_id(*k.params): i for i, k in enumerate(cases()) if k.variation == "base"}


def _base_index(index: int) -> int:
    """The index of the base variation of case ``index``'s catalogue case."""
    key = cases()[index]
    return index if key.variation == "base" else _bases()[case_id(*key.params)]


@functools.cache
def _sampled(base: int) -> OpCase | None:
    """The catalogue case of ``cases()[base]``, drawn once for all its variations (the
    fuzz loop meets every case index, and drawing one runs the reference kernels); None
    when its sampler fails (a catalogue bug)."""
    try:
        return sample_case(*cases()[base].params)
    except ShapeError:
        return None


def encode_case(index: int) -> bytes:
    """The seed of case ``index``: its key and no mutation (decodes to the valid model)."""
    return struct.pack("<I", zlib.crc32(cases()[index].id.encode())) + b"\0"


# -- models ------------------------------------------------------------------------------------

@dataclass
class DecodedModel:
    case: SeedCase
    model: Model
    preference: int = ExecutionPreference.FAST_SINGLE_ANSWER
    priority: int = Priority.MEDIUM
    mutations: list[str] = field(default_factory=list)

    def describe(self) -> str:
        sg = self.model.main
        lines = [f"case {self.case.key.id}; mutations: {'; '.join(self.mutations) or 'none'}",
                 f"preference {self.preference}, priority {self.priority}, "
                 f"relaxed {self.model.relax_computation_float32_to_float16}",
                 f"inputs {sg.input_indexes} outputs {sg.output_indexes}"]
        for i, o in enumerate(sg.operands):
            lines.append(f"  operand {i}: {_type_label(o.type)}{list(o.dimensions)} scale={o.scale!r} "
                         f"zp={o.zero_point} {_lifetime_label(o.lifetime)} loc={_loc(o.location)}"
                         + (f" channel_quant={o.channel_quant}" if o.channel_quant else ""))
        for n, op in enumerate(sg.operations):
            label = op.type.name if isinstance(op.type, OperationType) else str(op.type)
            lines.append(f"  operation {n}: {label} {op.inputs} -> {op.outputs}")
        return "\n".join(lines)


def _type_label(t: object) -> str:
    return t.name if isinstance(t, OperandType) else f"type({t})"


def _lifetime_label(t: object) -> str:
    return t.name if isinstance(t, OperandLifeTime) else f"lifetime({t})"


def _loc(loc: DataLocation) -> str:
    return f"({loc.pool_index}, {loc.offset}, {loc.length}, {loc.padding})"


def decode_model(data: bytes, private: bool = True) -> DecodedModel:
    """A case's model with up to MAX_MUTATIONS mutations, as ``data`` says.

    The mutations copy on write: the decoded model's lists are its own, but an operand or
    operation no mutation touched is the catalogue's seed model's object. ``private``
    (the default) returns a deep copy besides, for code that may change the model (a
    driver); ``private=False`` saves that copy for a reader such as the validator (the
    validate_model target), which must then leave the model as it is.
    """
    reader = ByteReader(data)
    case = seed_case(case_index(reader))
    seed = case.model
    sg = seed.main
    # By hand rather than dataclasses.replace: this runs once an input (2 us of the fuzz loop).
    model = Model(Subgraph(list(sg.operands), list(sg.operations), list(sg.input_indexes),
                           list(sg.output_indexes)),
                  seed.referenced, seed.operand_values, seed.pools, seed.relax_computation_float32_to_float16)
    decoded = DecodedModel(case, model)
    for _ in range(reader.u8() % (MAX_MUTATIONS + 1)):
        kind = reader.pick(len(_MODEL_MUTATIONS))
        decoded.mutations.append(_MODEL_MUTATIONS[kind](decoded, reader))
    if private:
        decoded.model = decoded.model.copy()
    return decoded


def model_key(decoded: DecodedModel) -> tuple:
    """A key equal for two decoded models exactly when their contents are, for the validate
    target's memo of models already validated (most inputs of a campaign decode to a model seen
    before: libFuzzer changes bytes the decoder never reads, or mutates a field to what it
    was). Cheap because decoding copies on write: an operand, operation or constant area no
    mutation touched is the seed model's own object, named by its identity (seed models live
    as long as the process, ``seed_case``); anything touched is named by its values, with
    their classes (an int is not the enum member of the same value) and floats by their bits
    (-0.0 is not 0.0). The seed's pools and referenced subgraphs are never changed."""
    seed = decoded.case.model
    own = _seed_objects(seed)
    sg, model = decoded.model.main, decoded.model
    values = model.operand_values
    operands, operations = tuple(map(id, sg.operands)), tuple(map(id, sg.operations))
    if not own.issuperset(operands):  # the common case, all the seed's, costs no loop
        operands = tuple(i if i in own else _operand_key(o)
                         for i, o in zip(operands, sg.operands, strict=True))
    if not own.issuperset(operations):
        operations = tuple(i if i in own else (op.type.__class__, op.type, _ints_key(op.inputs),
                                               _ints_key(op.outputs))
                           for i, op in zip(operations, sg.operations, strict=True))
    return (id(seed), model.relax_computation_float32_to_float16,
            id(values) if values is seed.operand_values else values, operands, operations,
            _ints_key(sg.input_indexes), _ints_key(sg.output_indexes))


_SEED_OBJECTS: dict[int, frozenset[int]] = {}


def _seed_objects(seed: Model) -> frozenset[int]:
    """The identities of a seed model's operands and operations (seed models never die)."""
    found = _SEED_OBJECTS.get(id(seed))
    if found is None:
        found = _SEED_OBJECTS[id(seed)] = frozenset(map(id, [*seed.main.operands, *seed.main.operations]))
    return found


def _ints_key(values: list | tuple) -> tuple:
    return tuple(values), tuple(map(type, values))


_DOUBLE = struct.Struct("<d")


def _number_key(x: object) -> object:
    return _DOUBLE.pack(x) if x.__class__ is float else (x.__class__, x)  # every bit, a NaN's payload too


def _operand_key(o: Operand) -> tuple:
    loc, cq = o.location, o.channel_quant
    return (o.type.__class__, o.type, _ints_key(o.dimensions), _number_key(o.scale),
            _number_key(o.zero_point), o.lifetime.__class__, o.lifetime, loc.__class__,
            _ints_key((loc.pool_index, loc.offset, loc.length, loc.padding)),
            None if cq is None else (cq.__class__, tuple(map(_number_key, cq.scales)),
                                     _number_key(cq.channel_dim)))


def _own_operand(sg: Subgraph, i: int) -> Operand:
    """Operand ``i`` of ``sg``, replaced by a copy the decoded model may change."""
    o = sg.operands[i]
    loc = o.location  # field by field: copy.copy takes 3 us an object
    o = sg.operands[i] = Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime,
                                 DataLocation(loc.pool_index, loc.offset, loc.length, loc.padding),
                                 o.channel_quant)
    return o


def _operand(reader: ByteReader, model: Model) -> tuple[int, Operand | None]:
    """An operand picked by ``reader``, the model's own to change."""
    ops = model.main.operands
    i = reader.pick(len(ops))
    return i, (_own_operand(model.main, i) if ops else None)


def _any_type(reader: ByteReader) -> OperandType | int:
    k = reader.u8()
    return _OPERAND_TYPES[k % len(_OPERAND_TYPES)] if k < 224 else reader.integer()


def _operand_type(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "operand type: no operand"
    o.type = _any_type(r)
    return f"operand {i} type={_type_label(o.type)}"


def _operand_dimensions(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "operand dimensions: no operand"
    if r.u8() & 1 and o.dimensions:
        j = r.pick(len(o.dimensions))
        dims = list(o.dimensions)
        dims[j] = r.small(6) if r.u8() & 1 else r.integer()
        o.dimensions = tuple(dims)
    else:
        o.dimensions = tuple(r.small(6) for _ in range(r.small(5)))
    return f"operand {i} dimensions={list(o.dimensions)}"


def _operand_scale(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "operand scale: no operand"
    o.scale = r.real()
    return f"operand {i} scale={o.scale!r}"


def _operand_zero_point(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "operand zero point: no operand"
    o.zero_point = r.integer()
    return f"operand {i} zero_point={o.zero_point}"


def _operand_lifetime(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "operand lifetime: no operand"
    k = r.u8()
    o.lifetime = _LIFETIMES[k % len(_LIFETIMES)] if k < 240 else r.integer()
    return f"operand {i} lifetime={_lifetime_label(o.lifetime)}"


def _operand_location(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "operand location: no operand"
    name = ("pool_index", "offset", "length", "padding")[r.pick(4)]
    old = getattr(o.location, name)
    setattr(o.location, name, old + r.small(16) - 8 if r.u8() & 1 else r.integer())
    return f"operand {i} location.{name}={getattr(o.location, name)}"


def _channel_quant(d: DecodedModel, r: ByteReader) -> str:
    i, o = _operand(r, d.model)
    if o is None:
        return "channel quant: no operand"
    if r.u8() & 1:
        o.channel_quant = None
    else:
        o.channel_quant = SymmPerChannelQuantParams(tuple(r.real() for _ in range(r.small(4))), r.integer())
    return f"operand {i} channel_quant={o.channel_quant}"


def _constant_value(d: DecodedModel, r: ByteReader) -> str:
    """New bytes for a constant; a pool constant becomes a CONSTANT_COPY of them (the shared
    pools are never written)."""
    sg = d.model.main
    consts = [k for k, o in enumerate(sg.operands)
              if o.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)]
    if not consts:
        return "constant value: no constant"
    k = consts[r.pick(len(consts))]
    o = _own_operand(sg, k)
    n = min(max(0, o.location.length), MAX_CONSTANT_BYTES)  # a mutated length: not 700 MB of copies
    if n <= 8 and r.u8() & 1:  # a scalar parameter: an edge value (axis, activation, stride...)
        raw = (r.integer() & (2**64 - 1)).to_bytes(8, "little")[:n]
        if o.type in (OperandType.FLOAT32, OperandType.FLOAT16) and n in (2, 4):
            raw = struct.pack("<e" if n == 2 else "<f", _clip_float(r.real(), n))
    else:
        raw = (r.take(min(n, 64)) * (n // max(1, min(n, 64)) + 1))[:n].ljust(n, b"\0")
    values = bytearray(d.model.operand_values)
    o.lifetime = OperandLifeTime.CONSTANT_COPY
    o.location = DataLocation(0, len(values), len(raw))
    values += raw
    d.model.operand_values = bytes(values)
    return f"operand {k} value={raw[:16].hex()}{'...' if len(raw) > 16 else ''}"


def _clip_float(x: float, n: int) -> float:
    limit = 65504.0 if n == 2 else 3.4e38
    return x if math.isnan(x) or math.isinf(x) or abs(x) <= limit else math.copysign(limit, x)


def _operation(r: ByteReader, model: Model) -> tuple[int, Operation | None]:
    """An operation picked by ``r``, the model's own to change (a copy of the seed's)."""
    ops = model.main.operations
    n = r.pick(len(ops))
    if not ops:
        return n, None
    op = ops[n] = Operation(ops[n].type, list(ops[n].inputs), list(ops[n].outputs))
    return n, op


def _operation_type(d: DecodedModel, r: ByteReader) -> str:
    n, op = _operation(r, d.model)
    if op is None:
        return "operation type: no operation"
    k = r.u8()
    op.type = _OPERATION_TYPES[k % len(_OPERATION_TYPES)] if k < 224 else r.integer()
    return f"operation {n} type={op.type.name if isinstance(op.type, OperationType) else op.type}"


def _operation_operands(d: DecodedModel, r: ByteReader) -> str:
    n, op = _operation(r, d.model)
    if op is None:
        return "operation operands: no operation"
    which = "inputs" if r.u8() & 1 else "outputs"
    lst: list[int] = getattr(op, which)
    n_operands = len(d.model.main.operands)
    action = r.pick(4)
    if action == 0 and lst:
        j = r.pick(len(lst))
        lst[j] = r.pick(n_operands + 1) if r.u8() & 1 else r.integer()
        return f"operation {n} {which}[{j}]={lst[j]}"
    if action == 1 and lst:
        j = r.pick(len(lst))
        del lst[j]
        return f"operation {n} {which}: removed {j}"
    if action == 2:
        lst.append(r.pick(n_operands + 1))
        return f"operation {n} {which}: appended {lst[-1]}"
    if len(lst) > 1:
        a, b = r.pick(len(lst)), r.pick(len(lst))
        lst[a], lst[b] = lst[b], lst[a]
        return f"operation {n} {which}: swapped {a} and {b}"
    return f"operation {n} {which}: unchanged"


def _io_lists(d: DecodedModel, r: ByteReader) -> str:
    sg = d.model.main
    which = "input_indexes" if r.u8() & 1 else "output_indexes"
    lst: list[int] = getattr(sg, which)
    action = r.pick(3)
    if action == 0 and lst:
        j = r.pick(len(lst))
        del lst[j]
        return f"model {which}: removed {j}"
    if action == 1:
        lst.append(r.pick(len(sg.operands) + 1))
        return f"model {which}: appended {lst[-1]}"
    if lst:
        j = r.pick(len(lst))
        lst[j] = r.pick(len(sg.operands) + 1) if r.u8() & 1 else r.integer()
        return f"model {which}[{j}]={lst[j]}"
    return f"model {which}: unchanged"


def _add_operand(d: DecodedModel, r: ByteReader) -> str:
    sg = d.model.main
    _, o = _operand(r, d.model)
    if o is None or r.u8() & 1:
        new = Operand(_any_type(r), tuple(r.small(4) for _ in range(r.small(4))))
    else:
        new = Operand(o.type, o.dimensions, o.scale, o.zero_point)
    k = len(sg.operands)
    sg.operands.append(new)
    if r.u8() & 1:
        new.lifetime = OperandLifeTime.SUBGRAPH_INPUT
        sg.input_indexes.append(k)
    return f"added operand {k} {_type_label(new.type)}{list(new.dimensions)} {_lifetime_label(new.lifetime)}"


def _remove_operand(d: DecodedModel, r: ByteReader) -> str:
    sg = d.model.main
    if not sg.operands:
        return "remove operand: no operand"
    index = r.pick(len(sg.operands))
    del sg.operands[index]

    def fix(lst: list[int]) -> list[int]:
        return [k - 1 if isinstance(k, int) and k > index else k for k in lst if k != index]

    sg.operations = [Operation(op.type, fix(op.inputs), fix(op.outputs)) for op in sg.operations]
    sg.input_indexes, sg.output_indexes = fix(sg.input_indexes), fix(sg.output_indexes)
    return f"removed operand {index}"


def _add_operation(d: DecodedModel, r: ByteReader) -> str:
    sg = d.model.main
    n, op = _operation(r, d.model)
    if op is not None and r.u8() & 1:  # a duplicate writer of the same outputs
        sg.operations.append(Operation(op.type, list(op.inputs), list(op.outputs)))
        return f"duplicated operation {n}"
    k = r.u8()
    t = _OPERATION_TYPES[k % len(_OPERATION_TYPES)]
    n_operands = len(sg.operands)
    ins = [r.pick(n_operands + 1) for _ in range(r.small(4))]
    outs = [r.pick(n_operands + 1) for _ in range(1 + r.small(1))]
    sg.operations.insert(r.pick(len(sg.operations) + 1), Operation(t, ins, outs))
    return f"added operation {t.name} {ins} -> {outs}"


def _remove_operation(d: DecodedModel, r: ByteReader) -> str:
    ops = d.model.main.operations
    if not ops:
        return "remove operation: no operation"
    n = r.pick(len(ops))
    del ops[n]
    return f"removed operation {n}"


def _move_operation(d: DecodedModel, r: ByteReader) -> str:
    ops = d.model.main.operations
    if len(ops) < 2:
        return "move operation: fewer than two"
    a, b = r.pick(len(ops)), r.pick(len(ops))
    ops.insert(b, ops.pop(a))
    return f"moved operation {a} to {b}"


def _model_flags(d: DecodedModel, r: ByteReader) -> str:
    k = r.pick(3)
    if k == 0:
        d.model.relax_computation_float32_to_float16 = not d.model.relax_computation_float32_to_float16
        return f"relaxed={d.model.relax_computation_float32_to_float16}"
    if k == 1:
        d.preference = r.integer() if r.u8() & 1 else r.pick(3)
        return f"preference={d.preference}"
    d.priority = r.integer() if r.u8() & 1 else r.pick(3)
    return f"priority={d.priority}"


_MODEL_MUTATIONS: tuple[Callable[[DecodedModel, ByteReader], str], ...] = (
    _operand_type, _operand_dimensions, _operand_scale, _operand_zero_point, _operand_lifetime,
    _operand_location, _channel_quant, _constant_value, _constant_value, _operation_type,
    _operation_operands, _operation_operands, _io_lists, _add_operand, _remove_operand,
    _add_operation, _remove_operation, _move_operation, _model_flags,
)


# -- requests ------------------------------------------------------------------------------------

@dataclass
class DecodedRequest:
    case: SeedCase
    request: Request
    mutations: list[str] = field(default_factory=list)
    path: str = "sync"  # the execution path (EXE-1) the execute target takes

    def describe(self) -> str:
        lines = [f"case {self.case.key.id}; request mutations: {'; '.join(self.mutations) or 'none'}; "
                 f"path {self.path}"]
        for what, args in (("input", self.request.inputs), ("output", self.request.outputs)):
            for i, a in enumerate(args):
                lines.append(f"  {what} {i}: no_value={a.has_no_value} loc={_loc(a.location)} "
                             f"dims={list(a.dimensions)}")
        for i, p in enumerate(self.request.pools):
            lines.append(f"  pool {i}: {p!r}")
        return "\n".join(lines)


def decode_request(data: bytes) -> DecodedRequest:
    """A valid request for a case's (valid) model, with up to MAX_MUTATIONS mutations of its
    arguments, pools and input bytes, and the execution path from the byte after them
    (none left: the synchronous path, so that the seeds take it)."""
    reader = ByteReader(data)
    case = seed_case(case_index(reader))
    model = case.model
    request = build_request(model, case.feeds, output_dims=case.output_shapes or None)
    decoded = DecodedRequest(case, request)
    for _ in range(reader.u8() % (MAX_MUTATIONS + 1)):
        kind = reader.pick(len(_REQUEST_MUTATIONS))
        decoded.mutations.append(_REQUEST_MUTATIONS[kind](request, reader))
    decoded.path = PATHS[reader.u8() % len(PATHS)]
    return decoded


def _argument(request: Request, r: ByteReader) -> tuple[str, int, RequestArgument | None]:
    which = "input" if r.u8() & 1 else "output"
    args = request.inputs if which == "input" else request.outputs
    j = r.pick(len(args))
    return which, j, (args[j] if args else None)


def _argument_location(request: Request, r: ByteReader) -> str:
    which, j, arg = _argument(request, r)
    if arg is None:
        return f"{which} location: no argument"
    name = ("pool_index", "offset", "length", "padding")[r.pick(4)]
    old = getattr(arg.location, name)
    setattr(arg.location, name, old + r.small(16) - 8 if r.u8() & 1 else r.integer())
    return f"{which} {j} location.{name}={getattr(arg.location, name)}"


def _argument_dimensions(request: Request, r: ByteReader) -> str:
    which, j, arg = _argument(request, r)
    if arg is None:
        return f"{which} dimensions: no argument"
    arg.dimensions = tuple(r.small(6) if r.u8() & 1 else r.integer() for _ in range(r.small(5)))
    return f"{which} {j} dimensions={list(arg.dimensions)}"


def _argument_no_value(request: Request, r: ByteReader) -> str:
    which, j, arg = _argument(request, r)
    if arg is None:
        return f"{which} has_no_value: no argument"
    arg.has_no_value = not arg.has_no_value
    if r.u8() & 1:
        arg.location = DataLocation()
        arg.dimensions = ()
    return f"{which} {j} has_no_value={arg.has_no_value} loc={_loc(arg.location)}"


def _argument_list(request: Request, r: ByteReader) -> str:
    which = "inputs" if r.u8() & 1 else "outputs"
    args: list[RequestArgument] = getattr(request, which)
    if args and r.u8() & 1:
        j = r.pick(len(args))
        del args[j]
        return f"{which}: removed {j}"
    args.append(RequestArgument(False, DataLocation(r.pick(3), r.small(64), r.small(64)), ()))
    return f"{which}: appended {args[-1].location}"


def _pool(request: Request, r: ByteReader) -> str:
    pools = request.pools
    action = r.pick(4)
    i = r.pick(len(pools))
    if action == 0 and pools:
        del pools[i]
        return f"removed pool {i}"
    if action == 1 and pools:
        pools[i] = r.integer()
        return f"pool {i} is token {pools[i]}"
    size = r.uint(2) % 4096
    new = Memory.create(size) if size else _zero_pool()
    if action == 2 and pools:
        old = pools[i]
        if isinstance(old, Memory) and size:
            n = min(size, old.size)
            new.view()[:n] = old.view()[:n]
        pools[i] = new
        return f"pool {i} resized to {size}"
    pools.append(new)
    return f"appended pool of {size} bytes"


def _zero_pool() -> Memory:
    return Memory(-1, 0)


def _input_bytes(request: Request, r: ByteReader) -> str:
    pools = [p for p in request.pools if isinstance(p, Memory) and p.size]
    if not pools:
        return "input bytes: no pool"
    pool = pools[r.pick(len(pools))]
    at = r.pick(pool.size)
    data = r.take(r.small(32))[:pool.size - at]
    pool.view()[at:at + len(data)] = data
    return f"wrote {data.hex()} at {at} of a pool"


_REQUEST_MUTATIONS: tuple[Callable[[Request, ByteReader], str], ...] = (
    _argument_location, _argument_location, _argument_dimensions, _argument_no_value, _argument_list,
    _pool, _input_bytes, _input_bytes,
)


# -- compilation caches --------------------------------------------------------------------------

@dataclass
class DecodedCache:
    """Cache contents and a token derived from a saved cache (CACHE-4..6)."""

    model_cache: bytes
    data_cache: bytes
    token: bytes
    mutations: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (f"cache mutations: {'; '.join(self.mutations) or 'none'}; "
                f"model cache {len(self.model_cache)} bytes, data cache {len(self.data_cache)} bytes, "
                f"token {self.token.hex()}")


def decode_cache(model_cache: bytes, data_cache: bytes, token: bytes, reader: ByteReader,
                 other_tokens: tuple[bytes, ...] = ()) -> DecodedCache:
    """Saved cache contents and token with up to MAX_MUTATIONS byte-level mutations read from
    ``reader``. A model cache edit prefers the digits of its JSON structure, so that much of
    what is changed still parses (and only the hash check can refuse it)."""
    d = DecodedCache(model_cache, data_cache, token)
    for _ in range(reader.u8() % (MAX_MUTATIONS + 1)):
        part = reader.pick(3)
        if part == 2:
            if other_tokens and reader.u8() & 1:
                d.token = other_tokens[reader.pick(len(other_tokens))]
                d.mutations.append("token of another case")
            else:
                d.token = _edit(d.token, reader)
                d.mutations.append(f"token edited to {len(d.token)} bytes")
            continue
        name = "model_cache" if part == 0 else "data_cache"
        before = getattr(d, name)
        if part == 0 and reader.u8() & 1:
            after, what = _edit_digit(before, reader)
        else:
            after = _edit(before, reader)
            what = f"{len(before)} -> {len(after)} bytes"
        setattr(d, name, after)
        d.mutations.append(f"{name.replace('_', ' ')}: {what}")
    return d


def _edit(data: bytes, r: ByteReader) -> bytes:
    action = r.pick(5)
    at = r.pick(len(data) + 1)
    if action == 0 and data:  # flip bits of one byte
        at = min(at, len(data) - 1)
        return data[:at] + bytes([data[at] ^ (r.u8() or 1)]) + data[at + 1:]
    if action == 1:
        return data[:at] + r.take(r.small(16)) + data[at:]
    if action == 2:
        return data[:at] + data[at + 1 + r.small(16):]
    if action == 3:
        return data[:at]
    return data + (r.take(r.small(16)) or b"\0")


def _edit_digit(data: bytes, r: ByteReader) -> tuple[bytes, str]:
    digits = [i for i, c in enumerate(data) if 48 <= c <= 57]
    if not digits:
        return data + b"\0", "appended a byte"
    at = digits[r.pick(len(digits))]
    new = 48 + r.u8() % 10
    if new == data[at]:
        new = 48 + (new - 47) % 10
    return data[:at] + bytes([new]) + data[at + 1:], f"digit at {at} -> {chr(new)}"


# -- burst messages ------------------------------------------------------------------------------

#: A valid burst request message for a model of two inputs and one output of 24 bytes each,
#: slots 0 and 1 (the layout of nncert.drivers.service.RemoteBurst's messages).
VALID_BURST_MESSAGE = {"slots": [0, 1], "inputs": [[False, [0, 0, 24], []], [False, [0, 24, 24], []]],
                       "outputs": [[False, [1, 0, 24], []]], "measure": 0, "deadline": None,
                       "loop_timeout": None}


@dataclass
class DecodedBurst:
    """What to do to a burst: ``kind`` is "message" (raw ``frame`` bytes on the request
    queue), "execute" (an API execution naming ``slots``) or "release" (release ``slots[0]``)."""

    kind: str
    frame: bytes = b""
    slots: list[int] = field(default_factory=list)
    note: str = ""

    def describe(self) -> str:
        if self.kind == "message":
            return f"burst message ({self.note}): {self.frame[:200]!r}"
        return f"burst {self.kind} with slots {self.slots} ({self.note})"


def decode_burst(data: bytes, queue_capacity: int) -> DecodedBurst:
    """A burst action: mostly request messages (a JSON mutation of a valid message, or raw
    bytes), framed as the queue frames them (a little-endian u32 length, then the payload);
    sometimes an execution or a release naming fuzzed slot ids."""
    r = ByteReader(data)
    action = r.pick(8)
    if action == 0:
        return DecodedBurst("execute", slots=[r.integer() for _ in range(r.small(3))], note="API execution")
    if action == 1:
        return DecodedBurst("release", slots=[r.integer()], note="API release")
    if action == 2:
        payload = r.take(r.remaining())
        return DecodedBurst("message", _frame(payload, queue_capacity), note="raw bytes")
    if action == 3:  # a header claiming more than the whole queue holds
        return DecodedBurst("message", struct.pack("<I", queue_capacity + r.uint(2)) + r.take(r.small(16)),
                            note="oversized header")
    message = json.loads(json.dumps(VALID_BURST_MESSAGE))
    notes = []
    for _ in range(1 + r.u8() % MAX_MUTATIONS):
        notes.append(_mutate_json(message, r))
    payload = json.dumps(message, separators=(",", ":")).encode()
    if r.u8() % 8 == 0:  # cut it short
        payload = payload[:r.pick(len(payload) + 1)]
        notes.append("truncated")
    return DecodedBurst("message", _frame(payload, queue_capacity), note="; ".join(notes))


def _frame(payload: bytes, capacity: int) -> bytes:
    payload = payload[:max(0, capacity - 4)]
    return struct.pack("<I", len(payload)) + payload


_JSON_VALUES: tuple = (None, True, False, 0, -1, 1, 2**63, -(2**63), 2**64, 1.5, "x", "", [], {}, [0], [[]])


def _mutate_json(message: dict, r: ByteReader) -> str:
    """Replace one value somewhere in the message (walking down lists and dicts), or drop a
    field."""
    keys = list(message)
    key = keys[r.pick(len(keys))]
    if r.u8() % 6 == 0:
        del message[key]
        return f"dropped {key}"
    holder, index, path = message, key, key
    while isinstance(holder[index], list | dict) and holder[index] and r.u8() & 1:
        child = holder[index]
        index = r.pick(len(child)) if isinstance(child, list) else list(child)[r.pick(len(child))]
        holder, path = child, f"{path}.{index}"
    k = r.u8()
    # A fresh copy: the same list put into itself would make the message circular.
    holder[index] = copy.deepcopy(_JSON_VALUES[k % len(_JSON_VALUES)]) if k < 200 else r.integer()
    return f"{path}={holder[index]!r}"


__all__ = [
    "MAX_MUTATIONS",
    "VALID_BURST_MESSAGE",
    "ByteReader",
    "CaseKey",
    "DecodedBurst",
    "DecodedCache",
    "DecodedModel",
    "DecodedRequest",
    "SeedCase",
    "case_index",
    "cases",
    "decode_burst",
    "decode_cache",
    "decode_model",
    "decode_request",
    "encode_case",
    "seed_case",
    "supported",
]
