"""Build models and requests without juggling indexes and byte offsets by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

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
    dtype_of,
)
from nncert.hal.types import (
    MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES,
    OperandLifeTime,
    OperandType,
    OperationType,
)

_ALIGN = 8


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class ModelBuilder:
    """Accumulates operands and operations; ``build`` lays out constants (MEM-1).

    Constants of at most 128 bytes go to operandValues (CONSTANT_COPY), larger ones to a
    shared-memory pool (CONSTANT_REFERENCE) of ``pool_kind``.
    """

    def __init__(self, pool_kind: str = "ashmem") -> None:
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []
        self._values: dict[int, bytes] = {}
        self._no_value: set[int] = set()
        self._subgraphs: dict[int, tuple[ModelBuilder | Subgraph, tuple[int, ...], tuple[int, ...]]] = {}
        self.pool_kind = pool_kind

    def operand(self, type_: OperandType, dims: Sequence[int] = (), scale: float = 0.0,
                zero_point: int = 0, channel_quant: SymmPerChannelQuantParams | None = None) -> int:
        self.operands.append(Operand(OperandType(type_), tuple(int(d) for d in dims), float(scale),
                                     int(zero_point), channel_quant=channel_quant))
        return len(self.operands) - 1

    def constant(self, type_: OperandType, value: np.ndarray | float | int | bool,
                 scale: float = 0.0, zero_point: int = 0,
                 channel_quant: SymmPerChannelQuantParams | None = None) -> int:
        arr = np.asarray(value, dtype=dtype_of(type_))
        dims = () if type_.is_scalar else arr.shape
        idx = self.operand(type_, dims, scale, zero_point, channel_quant)
        self._values[idx] = np.ascontiguousarray(arr).tobytes()
        return idx

    def no_value(self, type_: OperandType) -> int:
        """An omitted optional input (lifetime NO_VALUE). Its type is validated like any
        operand's, so a quantised type (an omitted QUANTIZED_LSTM peephole) has scale 1."""
        quant = type_.is_quant and type_ not in (OperandType.TENSOR_INT32,
                                                 OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        idx = self.operand(type_, scale=1.0 if quant else 0.0)
        self._no_value.add(idx)
        return idx

    def set_constant(self, idx: int, value: np.ndarray | float | int | bool) -> None:
        self._values[idx] = np.ascontiguousarray(
            np.asarray(value, dtype=dtype_of(self.operands[idx].type))).tobytes()

    def operation(self, type_: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.operations.append(Operation(OperationType(type_), list(inputs), list(outputs)))

    def subgraph(self, sub: ModelBuilder | Subgraph, inputs: Sequence[int] = (),
                 outputs: Sequence[int] = ()) -> int:
        """A SUBGRAPH operand naming ``sub`` as a referenced subgraph (IF / WHILE arguments,
        EXE-9). A builder's ``inputs`` and ``outputs`` are its operands that the subgraph takes
        and gives; its constants are laid out with this model's. A ``Subgraph`` is taken as it
        is (its constants must already point into this model). Each builder is referenced
        once however many operands name it; nesting is allowed."""
        idx = self.operand(OperandType.SUBGRAPH)
        self._subgraphs[idx] = (sub, tuple(inputs), tuple(outputs))
        return idx

    def build(self, inputs: Sequence[int], outputs: Sequence[int], relax: bool = False) -> Model:
        # The main subgraph, then every referenced one in first-reference order.
        entries: list[tuple[ModelBuilder | Subgraph, tuple[int, ...], tuple[int, ...]]] = \
            [(self, tuple(inputs), tuple(outputs))]
        where: dict[tuple[int, tuple[int, ...], tuple[int, ...]], int] = {}
        refs: list[dict[int, int]] = []  # per entry: SUBGRAPH operand -> referenced index
        k = 0
        while k < len(entries):
            sub = entries[k][0]
            mine: dict[int, int] = {}
            for idx, (child, ins, outs) in getattr(sub, "_subgraphs", {}).items():
                key = (id(child), ins, outs)
                if key not in where:
                    where[key] = len(entries) - 1
                    entries.append((child, ins, outs))
                mine[idx] = where[key]
            refs.append(mine)
            k += 1
        copy_values = bytearray()
        big: list[tuple[Operand, bytes]] = []
        graphs: list[Subgraph] = []
        for (sub, ins, outs), mine in zip(entries, refs, strict=True):
            if isinstance(sub, Subgraph):
                graphs.append(sub)
                continue
            operands = [Operand(o.type, o.dimensions, o.scale, o.zero_point, o.lifetime,
                                DataLocation(), o.channel_quant) for o in sub.operands]
            for idx, data in sub._values.items():
                if len(data) <= MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES:
                    operands[idx].lifetime = OperandLifeTime.CONSTANT_COPY
                    operands[idx].location = DataLocation(0, len(copy_values), len(data))
                    copy_values += data
                else:
                    big.append((operands[idx], data))
            for idx in sub._no_value:
                operands[idx].lifetime = OperandLifeTime.NO_VALUE
            for idx, ref in mine.items():
                operands[idx].lifetime = OperandLifeTime.SUBGRAPH
                operands[idx].location = DataLocation(0, ref, 0)
            for idx in ins:
                operands[idx].lifetime = OperandLifeTime.SUBGRAPH_INPUT
            for idx in outs:
                operands[idx].lifetime = OperandLifeTime.SUBGRAPH_OUTPUT
            graphs.append(Subgraph(operands, [Operation(o.type, list(o.inputs), list(o.outputs))
                                              for o in sub.operations], list(ins), list(outs)))
        pools: list[Memory] = []
        if big:
            total = sum(_align(len(d)) for _, d in big)
            pool = Memory.create(total, self.pool_kind)
            view, offset = pool.view(), 0
            for operand, data in big:
                view[offset:offset + len(data)] = data
                operand.lifetime = OperandLifeTime.CONSTANT_REFERENCE
                operand.location = DataLocation(0, offset, len(data))
                offset += _align(len(data))
            pools.append(pool)
        return Model(graphs[0], graphs[1:], bytes(copy_values), pools, relax)


def guard_bytes(start: int, stop: int) -> bytes:
    """The guard pattern's bytes ``start`` to ``stop`` of a pool: a byte that depends on its
    position, so that a stray write of zeros, of a copy of nearby bytes or of a shifted
    output all show."""
    return ((np.arange(start, stop, dtype=np.uint32) * 29 + 0xA5) & 0xFF).astype(np.uint8).tobytes()


def build_request(model: Model, inputs: Sequence[np.ndarray],
                  output_dims: Sequence[Sequence[int] | None] | None = None,
                  pool_kind: str = "ashmem", output_shrink: dict[int, int] | None = None,
                  omitted_inputs: Sequence[int] = (), guard: int = 0) -> Request:
    """A request whose inputs hold ``inputs`` and whose outputs have room for ``output_dims``.

    Inputs live in one pool and outputs in another, each argument 8-byte aligned (EXE-2:
    the data itself is row-major with no padding). ``output_dims[i]`` gives the shape an
    output buffer is sized for (default: the model's shape, which must then be fully
    known); those dimensions are also given in the request argument when the model's
    are not fully specified. ``output_shrink`` takes bytes off an output buffer's length
    (to provoke OUTPUT_INSUFFICIENT_SIZE, EXE-5).

    ``guard`` > 0 lays the arguments out with ``guard`` bytes of the guard pattern
    (``guard_bytes``) before and after each one instead, and fills the output buffers with
    it too: a driver that writes outside its outputs, or writes a request it rejected,
    changes bytes that the caller can compare (VAL-2). A guard that is not a multiple of 8
    leaves the arguments unaligned, which NNAPI allows.
    """
    sg = model.main
    in_args, in_data = [], []
    for pos, (idx, value) in enumerate(zip(sg.input_indexes, inputs, strict=True)):
        if pos in omitted_inputs:
            in_args.append(RequestArgument(has_no_value=True))
            in_data.append(b"")
            continue
        operand = sg.operands[idx]
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype_of(operand.type)))
        dims = () if operand.fully_specified else tuple(arr.shape)
        in_args.append(RequestArgument(False, DataLocation(0, 0, arr.nbytes), dims))
        in_data.append(arr.tobytes())
    out_args, out_sizes = [], []
    for pos, idx in enumerate(sg.output_indexes):
        operand = sg.operands[idx]
        want = output_dims[pos] if output_dims and output_dims[pos] is not None else operand.dimensions
        size = int(np.prod(want)) * dtype_of(operand.type).itemsize if want or operand.type.is_scalar \
            else 0
        size = max(0, size - (output_shrink or {}).get(pos, 0))
        dims = () if operand.fully_specified else tuple(want or ())
        out_args.append(RequestArgument(False, DataLocation(1, 0, size), dims))
        out_sizes.append(size)
    pools = [_pack(in_args, in_data, pool_kind, guard),
             _pack(out_args, [None] * len(out_args) if guard else [bytes(s) for s in out_sizes],
                   pool_kind, guard, out_sizes)]
    return Request(in_args, out_args, pools)


def _pack(args: list[RequestArgument], data: list[bytes | None], kind: str, guard: int = 0,
          sizes: list[int] | None = None) -> Memory:
    """A pool holding ``data`` (None: the guard pattern) for ``args``, setting their offsets."""
    sizes = sizes or [len(d or b"") for d in data]
    offset = guard
    for arg, size in zip(args, sizes, strict=True):
        if not arg.has_no_value:
            arg.location.offset = offset
            offset += size + guard if guard else _align(size)
    pool = Memory.create(max(offset, 1), kind)
    view = pool.view()
    if guard:
        view[:] = guard_bytes(0, pool.size)
    for arg, d in zip(args, data, strict=True):
        if not arg.has_no_value and d is not None:
            view[arg.location.offset:arg.location.offset + len(d)] = d
    return pool


def read_outputs(model: Model, request: Request, shapes: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """The output arrays of an executed request, given the output shapes it reported."""
    result = []
    for idx, arg, dims in zip(model.main.output_indexes, request.outputs, shapes, strict=True):
        operand = model.main.operands[idx]
        dtype = dtype_of(operand.type)
        n = math.prod(dims)
        view = request.pools[arg.location.pool_index].view()
        result.append(np.frombuffer(view, dtype, n, arg.location.offset).reshape(tuple(dims)).copy())
    return result
