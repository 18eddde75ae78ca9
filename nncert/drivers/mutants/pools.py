"""Mutants that get request and constant memory wrong (EXE-2, MEM-1..3): each reads or
writes the right pool at the wrong place. conformance/test_pools.py must catch them."""

from __future__ import annotations

import dataclasses
import os

from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.memory import Memory, MmapFdMemory
from nncert.hal.model import Model, OutputShape, Request, Timing, dtype_of
from nncert.hal.types import MeasureTiming, OperandLifeTime, OperationType

#: The row stride of PaddedRows's output DMA, in bytes.
ROW_ALIGN = 16


class PaddedRows(MutantDriver):
    """Writes every output of rank 2 or more with its rows at a 16-byte stride (an NPU's DMA
    alignment), cut at the end of the output's buffer: right wherever a row is a multiple of
    16 bytes long, shifted everywhere else (EXE-2)."""

    name = "padded_rows"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            shapes, timing = super().execute_synchronously(request, measure, deadline, loop_timeout)
            sg = self.model.main
            for idx, arg, shape in zip(sg.output_indexes, request.outputs, shapes, strict=True):
                dims = tuple(shape.dimensions)
                pool = request.pools[arg.location.pool_index]
                if len(dims) < 2 or not isinstance(pool, Memory):
                    continue
                row = dims[-1] * dtype_of(sg.operands[idx].type).itemsize
                stride = -(-row // ROW_ALIGN) * ROW_ALIGN
                if stride == row or not row:
                    continue
                loc = arg.location
                view = pool.view()[loc.offset:loc.offset + loc.length]
                packed = bytes(view[:row * (len(view) // row)])
                padded = bytearray(len(view))
                for r in range(len(packed) // row):
                    at = r * stride
                    if at >= len(padded):
                        break
                    chunk = packed[r * row:(r + 1) * row][:len(padded) - at]
                    padded[at:at + len(chunk)] = chunk
                view[:] = padded
            return shapes, timing

    prepared_class = Prepared


class ConstantsAtPoolStart(MutantDriver):
    """Reads every CONSTANT_REFERENCE operand from the start of its pool, ignoring the
    location's offset: the first constant of a pool is right, the others hold its bytes
    (MEM-1)."""

    name = "constants_at_pool_start"

    class Prepared(MutantPreparedModel):
        def __init__(self, model: Model, driver: MutantDriver) -> None:
            super().__init__(model, driver)
            for sg in (model.main, *model.referenced):
                for operand in sg.operands:
                    if operand.lifetime is OperandLifeTime.CONSTANT_REFERENCE:
                        operand.location = dataclasses.replace(operand.location, offset=0)

    prepared_class = Prepared


class InputsAtPoolStart(MutantDriver):
    """Reads every request input from the start of its pool, ignoring the argument's offset:
    a request whose inputs share one pool gives each the first input's bytes (MEM-2)."""

    name = "inputs_at_pool_start"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            inputs = [dataclasses.replace(a, location=dataclasses.replace(a.location, offset=0))
                      if isinstance(request.pools[a.location.pool_index], Memory) and not a.has_no_value
                      else a for a in request.inputs]
            return super().execute_synchronously(Request(inputs, request.outputs, request.pools), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


def _in_operand_order(arguments: list, indexes: list[int]) -> list:
    """``arguments`` as a driver binds them that gives the k-th argument to the model input (or
    output) of the k-th smallest operand index, whatever order the model lists them in."""
    order = sorted(range(len(indexes)), key=lambda p: indexes[p])
    rank = {p: r for r, p in enumerate(order)}
    return [arguments[rank[p]] for p in range(len(indexes))]


class InputsInOperandOrder(MutantDriver):
    """Binds the request's inputs to the model's inputs in the order of their operand indexes,
    not the order the model lists them in: right for every model built input by input, wrong
    for one that lists a later operand first (MEM-2)."""

    name = "inputs_in_operand_order"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            inputs = _in_operand_order(request.inputs, self.model.main.input_indexes)
            return super().execute_synchronously(Request(inputs, request.outputs, request.pools), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


class UnusedInputPruned(MutantDriver):
    """Its converter prunes a model input that no operation reads, and binds the request's
    inputs to what is left by position: the argument meant for the pruned input goes to the
    next input of its type, and so on (the pruned one takes the last argument). Right for every
    model whose inputs are all read (MEM-2)."""

    name = "unused_input_pruned"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            sg = self.model.main
            read = {i for op in sg.operations for i in op.inputs}
            for p, idx in enumerate(sg.input_indexes[:-1]):
                if idx not in read and sg.operands[sg.input_indexes[p + 1]].type is sg.operands[idx].type:
                    inputs = [*request.inputs[:p], *request.inputs[p + 1:], request.inputs[p]]
                    request = Request(inputs, request.outputs, request.pools)
                    break
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class OutputsInOperandOrder(MutantDriver):
    """Writes the model's outputs into the request's output arguments in the order of their
    operand indexes, not the order the model lists them in (MEM-2)."""

    name = "outputs_in_operand_order"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            outputs = _in_operand_order(request.outputs, self.model.main.output_indexes)
            return super().execute_synchronously(Request(request.inputs, outputs, request.pools), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


class UnaryInPlace(MutantDriver):
    """Runs a model of one element-wise unary operation (LOGISTIC, TANH, RELU...) in place on
    the request's input memory, zero-copy, and then copies the result to the output: the
    caller's input buffer comes back holding the result (MEM-2). The outputs are right."""

    name = "unary_in_place"
    UNARY = frozenset({OperationType.ABS, OperationType.EXP, OperationType.FLOOR, OperationType.LOGISTIC,
                       OperationType.NEG, OperationType.RELU, OperationType.RELU1, OperationType.RELU6,
                       OperationType.SQRT, OperationType.TANH})

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            result = super().execute_synchronously(request, measure, deadline, loop_timeout)
            ops = self.model.main.operations
            if len(ops) == 1 and ops[0].type in UnaryInPlace.UNARY and request.inputs and request.outputs:
                src, dst = request.inputs[0].location, request.outputs[0].location
                into, frm = request.pools[src.pool_index], request.pools[dst.pool_index]
                if src.length == dst.length and isinstance(into, Memory) and isinstance(frm, Memory):
                    result_bytes = frm.view()[dst.offset:dst.offset + dst.length]
                    into.view()[src.offset:src.offset + src.length] = result_bytes
            return result

    prepared_class = Prepared


def _from_file_start(pool: object) -> object:
    """An mmap_fd pool mapped from the start of its file, as a driver that drops the offset of
    the memory it received does; any other pool as it is."""
    if isinstance(pool, MmapFdMemory) and pool.size:
        return MmapFdMemory(os.dup(pool.fd), pool.size, 0)
    return pool


class MmapFdAtFileStart(MutantDriver):
    """Maps an mmap_fd pool (a file mapped at an offset) from the start of its file: every
    byte of such a pool, constant, input or output, is read and written 3 bytes early (MEM-3).
    ashmem and hardware_buffer_blob pools are right."""

    name = "mmap_fd_at_file_start"

    class Prepared(MutantPreparedModel):
        def __init__(self, model: Model, driver: MutantDriver) -> None:
            super().__init__(model, driver)
            model.pools = [_from_file_start(p) for p in model.pools]

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            pools = [_from_file_start(p) for p in request.pools]
            try:
                return super().execute_synchronously(Request(request.inputs, request.outputs, pools),
                                                     measure, deadline, loop_timeout)
            finally:
                for mine, theirs in zip(pools, request.pools, strict=True):
                    if mine is not theirs:
                        mine.close()

    prepared_class = Prepared


__all__ = ["ConstantsAtPoolStart", "InputsAtPoolStart", "MmapFdAtFileStart", "PaddedRows"]


class RepeatedPoolCopied(MutantDriver):
    """Maps each distinct memory of a request once: a pool that lists a memory already listed
    gets a private copy, so inputs read through it are right but outputs written through it
    never reach the caller (MEM-2)."""

    name = "repeated_pool_copied"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: int | None = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            seen: set[int] = set()
            pools = []
            for pool in request.pools:
                if isinstance(pool, Memory) and id(pool) in seen:
                    pool = Memory.from_bytes(bytes(pool.view()))
                elif isinstance(pool, Memory):
                    seen.add(id(pool))
                pools.append(pool)
            return super().execute_synchronously(Request(request.inputs, request.outputs, pools), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(PaddedRows, "EXE-2", suite="test_pools.py", args=("-k", "row_major")),
    MutantInfo(ConstantsAtPoolStart, "MEM-1", suite="test_pools.py", args=("-k", "constants")),
    MutantInfo(InputsAtPoolStart, "MEM-2", suite="test_pools.py", args=("-k", "row_major")),
    MutantInfo(InputsInOperandOrder, "MEM-2", suite="test_pools.py", args=("-k", "listed_order")),
    MutantInfo(OutputsInOperandOrder, "MEM-2", suite="test_pools.py", args=("-k", "listed_order")),
    MutantInfo(UnusedInputPruned, "MEM-2", suite="test_pools.py", args=("-k", "no_operation_reads and sync")),
    MutantInfo(UnaryInPlace, "MEM-2", suite="test_operations.py",
               args=("-k", "TANH-float32-s0 and not relaxed and not dynamic")),
    MutantInfo(MmapFdAtFileStart, "MEM-3", suite="test_pools.py", args=("-k", "mmap_fd and not burst")),
    MutantInfo(RepeatedPoolCopied, "MEM-2", suite="test_pools.py", args=("-k", "listed_twice")),
)
