"""The HAL model as plain data (ints, floats, lists): one codec for every place a model
leaves the process or the driver — the driver service's wire format and compilation caches.

Decoding never trusts its input: what does not have the expected shape raises
``CodecError`` (a ValueError), never anything worse. Every field is type-checked (a JSON
float or ``true`` is not an integer, a string is not a scale) and every integer fits 64
bits; the structure is parsed by ``nncert.datafiles`` (bounded nesting, UTF-8). Whether the
decoded model is valid is ``validate_model``'s question, not this module's: an invalid
value of the right type (a negative dimension, a NaN scale) reaches the driver unchanged so
that it can reject it (VAL-1).
"""

from __future__ import annotations

import enum
import json
from typing import Any, TypeVar

from nncert.datafiles import INT_MAX, INT_MIN, integer, number, parse_json
from nncert.hal.memory import Memory
from nncert.hal.model import DataLocation, Model, Operand, Operation, Subgraph, SymmPerChannelQuantParams
from nncert.hal.types import OperandLifeTime, OperandType, OperationType


class CodecError(ValueError):
    """Data that is not an encoded model."""


E = TypeVar("E", bound=enum.IntEnum)

_MEMBERS: dict[type, dict[int, enum.IntEnum]] = {}


def enum_code(cls: type[E], value: Any) -> E | int:
    """The enum member for ``value``, or the raw int when it names none: invalid codes reach
    the driver unchanged so that validation can reject them (VAL-1)."""
    if type(value) is not int:
        raise CodecError(f"{cls.__name__} code {value!r} is not an integer")
    members = _MEMBERS.get(cls)
    if members is None:
        members = _MEMBERS[cls] = {int(m): m for m in cls}
    return members.get(value, value)  # type: ignore[return-value]


def ints(values: Any) -> tuple[int, ...]:
    if not isinstance(values, list) or not all(type(x) is int and INT_MIN <= x <= INT_MAX for x in values):
        raise CodecError(f"{values!r:.80} is not a list of 64-bit integers")
    return tuple(values)


def encode_operand(o: Operand) -> list:
    loc = o.location
    cq = o.channel_quant
    return [int(o.type), list(o.dimensions), o.scale, o.zero_point, int(o.lifetime),
            [loc.pool_index, loc.offset, loc.length, loc.padding],
            None if cq is None else [list(cq.scales), cq.channel_dim]]


def decode_operand(v: Any) -> Operand:
    try:
        type_, dims, scale, zp, lifetime, loc, cq = v
        location = ints(loc)
        if len(location) != 4:
            raise CodecError("a location is [pool, offset, length, padding]")
        channel = None
        if cq is not None:
            scales, channel_dim = cq
            if not isinstance(scales, list):
                raise CodecError("per-channel scales must be a list")
            channel = SymmPerChannelQuantParams(tuple(_number(s, "a per-channel scale") for s in scales),
                                                _integer(channel_dim, "channel_dim"))
        return Operand(enum_code(OperandType, type_), ints(dims), _number(scale, "the scale"),
                       _integer(zp, "the zero point"), enum_code(OperandLifeTime, lifetime),
                       DataLocation(*location), channel)
    except (TypeError, ValueError) as e:  # not 7 fields, not a pair (CodecError is a ValueError)
        raise CodecError(f"malformed operand {v!r:.80}: {e}") from None


def _number(value: Any, what: str) -> float:
    return number(value, what, CodecError, finite=False)  # NaN: validation's to refuse (VAL-1)


def _integer(value: Any, what: str) -> int:
    return integer(value, what, CodecError)


def encode_subgraph(sg: Subgraph) -> dict:
    return {"operands": [encode_operand(o) for o in sg.operands],
            "operations": [[int(op.type), list(op.inputs), list(op.outputs)] for op in sg.operations],
            "inputs": list(sg.input_indexes), "outputs": list(sg.output_indexes)}


def decode_subgraph(d: Any) -> Subgraph:
    try:
        if not isinstance(d["operands"], list) or not isinstance(d["operations"], list):
            raise CodecError("malformed subgraph: operands and operations must be lists")
        return Subgraph([decode_operand(o) for o in d["operands"]],
                        [Operation(enum_code(OperationType, t), list(ints(ins)), list(ints(outs)))
                         for t, ins, outs in d["operations"]],
                        list(ints(d["inputs"])), list(ints(d["outputs"])))
    except CodecError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise CodecError(f"malformed subgraph: {type(e).__name__}: {e}") from None


def pack_model(model: Model) -> tuple[bytes, bytes]:
    """A self-contained copy of ``model``: its structure (JSON, the constants' sizes
    included) and its constant data (operand values, then every pool's contents)."""
    pools = [bytes(p.view()) for p in model.pools]
    structure = {"main": encode_subgraph(model.main),
                 "referenced": [encode_subgraph(s) for s in model.referenced],
                 "relax": bool(model.relax_computation_float32_to_float16),
                 "values": len(model.operand_values), "pools": [len(p) for p in pools]}
    data = b"".join([bytes(model.operand_values), *pools])
    return json.dumps(structure, separators=(",", ":")).encode(), data


def unpack_model(structure: bytes, data: bytes) -> Model:
    """The model ``pack_model`` gave; the pools are fresh shared memory. Data beyond what the
    structure names is ignored; less is a CodecError."""
    d = parse_json(structure, "model structure", CodecError, allow_nonfinite=True)
    try:
        if not (isinstance(d, dict) and isinstance(d["pools"], list) and isinstance(d["referenced"], list)):
            raise CodecError("malformed model structure: not an encoded model")
        # A pool has at least one byte: shared memory of none cannot be made (nor is it valid).
        sizes = [integer(d["values"], "the operand values' size", CodecError, 0),
                 *(integer(n, "a pool's size", CodecError, 1) for n in d["pools"])]
        main = decode_subgraph(d["main"])
        referenced = [decode_subgraph(s) for s in d["referenced"]]
        relax = d["relax"]
    except CodecError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise CodecError(f"malformed model structure: {type(e).__name__}: {e}") from None
    if type(relax) is not bool:
        raise CodecError("malformed model structure: relax must be true or false")
    if sum(sizes) > len(data):
        raise CodecError(f"the structure names {sum(sizes)} bytes of constants, the data has {len(data)}")
    chunks, at = [], 0
    for n in sizes:
        chunks.append(data[at:at + n])
        at += n
    pools = [Memory.from_bytes(c) for c in chunks[1:]]
    return Model(main, referenced, chunks[0], pools, relax)


__all__ = ["CodecError", "decode_subgraph", "encode_subgraph", "enum_code", "pack_model", "unpack_model"]
