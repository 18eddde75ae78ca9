"""Mutants that trust the caller's request (VAL-1, VAL-2): test_validation.py's request tests
(every argument mutation on every path, guard bytes around every argument) and the request
mutations on a burst (test_burst_validation.py) must catch them.

Each is the reference driver with one fault a vendor's driver really has: the extent of an
argument computed from the operand instead of the length given, the model's shapes used
whatever the request says, validation on the synchronous path only, outputs copied with wide
vector stores, and omitted inputs read as zeros.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np

from nncert.drivers.base import Burst, Deadline, ExecutionResult, check_deadline, timing_for
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError, ValidationError
from nncert.hal.memory import Memory
from nncert.hal.model import Model, OutputShape, Request, RequestArgument, Timing, dtype_of
from nncert.hal.request_io import read_inputs, write_outputs
from nncert.hal.types import ErrorStatus, MeasureTiming
from nncert.hal.validation import validate_request
from nncert.ops.interpreter import ExecutionBudget, execution_budget


def _with_arguments(request: Request, change) -> Request:
    """A copy of ``request`` (sharing its pools) with ``change(kind, i, arg)`` applied to
    copies of its arguments."""
    def copy(kind: str, args: list[RequestArgument]) -> list[RequestArgument]:
        out = []
        for i, a in enumerate(args):
            a = RequestArgument(a.has_no_value, dataclasses.replace(a.location), tuple(a.dimensions))
            if not a.has_no_value:
                change(kind, i, a)
            out.append(a)
        return out

    return Request(copy("input", request.inputs), copy("output", request.outputs), list(request.pools))


def _operand(model: Model, kind: str, i: int):
    sg = model.main
    return sg.operands[(sg.input_indexes if kind == "input" else sg.output_indexes)[i]]


class IgnoresLengths(MutantDriver):
    """Computes each argument's extent from the operand's type and shape and never looks at
    the length the caller gave: a length that disagrees with the operand passes (the offset is
    still checked against the pool), inputs are read and outputs written by the operand's size,
    and an output buffer is found too small only after the whole output was copied into it,
    over whatever follows it in the pool."""

    name = "ignores_lengths"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if not all(isinstance(p, Memory) for p in request.pools):
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            start = time.monotonic_ns()
            model = self.model

            def operand_length(kind: str, i: int, a: RequestArgument) -> None:
                o = _operand(model, kind, i)
                dims = tuple(a.dimensions) or tuple(o.dimensions)
                if o.type.is_scalar or (dims and all(dims)):
                    a.location.length = dtype_of(o.type).itemsize * int(np.prod(dims, dtype=np.int64))

            trusted = _with_arguments(request, operand_length)
            validate_request(trusted, model)
            check_deadline(deadline, "execution")
            inputs = read_inputs(model, trusted)
            device_start = time.monotonic_ns()
            with execution_budget(ExecutionBudget.for_request(deadline, loop_timeout)):
                outputs = self.compute(inputs)
            device_ns = time.monotonic_ns() - device_start
            shapes = []
            for arg, value in zip(request.outputs, outputs, strict=True):
                data = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
                view = request.pools[arg.location.pool_index].view()
                start_at = arg.location.offset
                n = max(0, min(data.size, len(view) - start_at))  # a C driver would not stop here
                view[start_at:start_at + n] = data[:n].tobytes()
                shapes.append(OutputShape(value.shape, value.nbytes <= arg.location.length))
            if not all(s.is_sufficient for s in shapes):
                raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "output buffers too small", shapes)
            return shapes, timing_for(measure, start, device_ns)

    prepared_class = Prepared


class IgnoresRequestDimensions(MutantDriver):
    """Runs the shapes it was prepared for: where the model fully specifies an input or output,
    the dimensions a request gives for it are never looked at, so dimensions that conflict with
    the model's, or have another rank, pass (open dimensions are still taken from the request)."""

    name = "ignores_request_dimensions"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            model = self.model

            def model_dimensions(kind: str, i: int, a: RequestArgument) -> None:
                if _operand(model, kind, i).fully_specified:
                    a.dimensions = ()

            return super().execute_synchronously(_with_arguments(request, model_dimensions), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


class UnknownDimensionsAsOne(MutantDriver):
    """Takes every unknown dimension of an input the request gives no dimensions for as 1 (a
    converter's batch-of-one default) instead of refusing the request: an input of dimensions
    (0, 3) given none runs as (1, 3) when its buffer holds one row (EXE-6)."""

    name = "unknown_dimensions_as_one"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            model = self.model

            def default_ones(kind: str, i: int, a: RequestArgument) -> None:
                operand = _operand(model, kind, i)
                if kind == "input" and not a.dimensions and operand.dimensions \
                        and not operand.fully_specified:
                    a.dimensions = tuple(d or 1 for d in operand.dimensions)

            return super().execute_synchronously(_with_arguments(request, default_ones), measure,
                                                 deadline, loop_timeout)

    prepared_class = Prepared


class RemembersValidPools(MutantDriver):
    """Remembers the memories of every request it validated and ran: a later request over the
    same pools is trusted without validation, so once a valid request has run, an invalid one
    over its memories (arguments pointing anywhere, missing, of other sizes) runs as far as it
    can (VAL-1). Every path builds on the synchronous one, so every path has the fault."""

    name = "remembers_valid_pools"

    class Prepared(MutantPreparedModel):
        def __init__(self, model: Model, driver: MutantDriver) -> None:
            super().__init__(model, driver)
            self.trusted: list[tuple[object, ...]] = []  # the pools themselves, compared by identity

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            pools = tuple(request.pools)
            if not any(len(t) == len(pools) and all(a is b for a, b in zip(t, pools, strict=True))
                       for t in self.trusted):
                result = super().execute_synchronously(request, measure, deadline, loop_timeout)
                self.trusted.append(pools)
                return result
            try:
                outputs = self.compute(read_inputs(self.model, request))
                return write_outputs(self.model, request, outputs), Timing()
            except HalError:
                raise
            except Exception as e:
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"{type(e).__name__}: {e}") from None

    prepared_class = Prepared


class ValidatesSyncOnly(MutantDriver):
    """Validates requests on the synchronous path only: the asynchronous, fenced and burst
    paths, written for speed, check only that the request has as many inputs and outputs as
    the model, and trust where its arguments point."""

    name = "validates_sync_only"

    class Prepared(MutantPreparedModel):
        _fast = threading.local()

        def check_request(self, request: Request) -> None:
            if not getattr(self._fast, "on", False):
                super().check_request(request)
                return
            sg = self.model.main
            if len(request.inputs) != len(sg.input_indexes) or len(request.outputs) != len(sg.output_indexes):
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "wrong number of request arguments")

        def _run(self, request: Request, measure: MeasureTiming, deadline: Deadline,
                 loop_timeout: int | None) -> ExecutionResult:
            # The base class's asynchronous and fenced paths both end here.
            self._fast.on = True
            try:
                return super()._run(request, measure, deadline, loop_timeout)
            finally:
                self._fast.on = False

        def configure_execution_burst(self) -> Burst:
            return ValidatesSyncOnly.FastBurst(self)

    class FastBurst(Burst):
        def execute(self, request, slots, measure=MeasureTiming.NO, deadline=None, loop_timeout=None):
            fast = self.prepared._fast
            fast.on = True
            try:
                return super().execute(request, slots, measure, deadline, loop_timeout)
            finally:
                fast.on = False

    prepared_class = Prepared


class WritesPastOutputs(MutantDriver):
    """Copies outputs with 16-byte vector stores: the last store of each output also writes
    the rest of its 16 bytes (zeros) past the end of the output's buffer. Outputs are copied
    in order, so a spill into the next output is overwritten by it; the last one's is not."""

    name = "writes_past_outputs"
    STORE = 16

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            shapes, timing = super().execute_synchronously(request, measure, deadline, loop_timeout)
            sg = self.model.main
            copies = []  # (view, offset, the output's bytes): the values, before any store spills
            for arg, shape, idx in zip(request.outputs, shapes, sg.output_indexes, strict=True):
                pool = request.pools[arg.location.pool_index]
                if isinstance(pool, Memory):
                    itemsize = dtype_of(sg.operands[idx].type).itemsize
                    size = itemsize * int(np.prod(shape.dimensions, dtype=np.int64))
                    start = arg.location.offset
                    copies.append((pool.view(), start, bytes(pool.view()[start:start + size])))
            for view, start, data in copies:
                stored = -(-len(data) // WritesPastOutputs.STORE) * WritesPastOutputs.STORE
                n = max(0, min(stored, len(view) - start))
                view[start:start + n] = (data + bytes(stored - len(data)))[:n]
            return shapes, timing

    prepared_class = Prepared


class ZeroFillsOmitted(MutantDriver):
    """Takes any input given no value as zeros of the operand's shape, where the operation
    requires it (only optional operation inputs may be omitted)."""

    name = "zero_fills_omitted"

    class Prepared(MutantPreparedModel):
        def check_request(self, request: Request) -> None:
            try:
                super().check_request(request)
            except ValidationError as e:
                if e.rule != "request-omitted":
                    raise

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            sg = self.model.main
            operands = [sg.operands[idx] for idx in sg.input_indexes]
            filled = [np.zeros(o.dimensions, dtype_of(o.type)) if x is None else x
                      for x, o in zip(inputs, operands, strict=True)]
            return super().compute(filled)

    prepared_class = Prepared


#: The CI slice of each: every request mutation, and guard bytes, on a burst (the cheapest
#: suite to collect); test_validation.py's request tests catch each on its paths as well.
_SLICE = ("-k", "mutated_request")

class ClampsLookupIndices(MutantDriver):
    """Clamps the GATHER and EMBEDDING_LOOKUP indices a request gives into the table's rows, as
    a gather that reads the nearest row does: right for every index in range, and one out of
    range runs where it must fail (VAL-1)."""

    name = "clamps_lookup_indices"

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        from nncert.drivers.compiled import index_guards

        clamped = list(inputs)
        for _, _, position, (kind, value), axis in index_guards(model):
            indices = clamped[position]
            rows = value if kind == "rows" else clamped[value].shape[axis]
            if indices is not None:
                clamped[position] = np.clip(indices, 0, rows - 1).astype(indices.dtype)
        return super().run(model, clamped)


class IgnoresExtraArguments(MutantDriver):
    """Binds the model's inputs and outputs to the first arguments of the request and never
    counts them: a request with an argument too many runs (on the arguments it has room for)
    where it must fail with INVALID_ARGUMENT (VAL-1). One too few is refused."""

    name = "ignores_extra_arguments"

    class Prepared(MutantPreparedModel):
        def _trimmed(self, request: Request) -> Request:
            sg = self.model.main
            return Request(request.inputs[:len(sg.input_indexes)], request.outputs[:len(sg.output_indexes)],
                           request.pools)

        def check_request(self, request: Request) -> None:
            super().check_request(self._trimmed(request))

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            return super().execute_synchronously(self._trimmed(request), measure, deadline, loop_timeout)

    prepared_class = Prepared


class TrailingInputsOptional(MutantDriver):
    """A request with fewer inputs than the model is taken as one that omits the missing
    trailing inputs, where each of them may be omitted (the optional tensors an operation
    lists last): it runs where it must fail with INVALID_ARGUMENT, as any request with too few
    arguments (VAL-1)."""

    name = "trailing_inputs_optional"

    class Prepared(MutantPreparedModel):
        def _completed(self, request: Request) -> Request:
            from nncert.hal.validation import input_may_be_omitted

            given, wanted = len(request.inputs), len(self.model.main.input_indexes)
            if given < wanted and all(input_may_be_omitted(self.model, p) for p in range(given, wanted)):
                missing = [RequestArgument(has_no_value=True) for _ in range(wanted - given)]
                return Request([*request.inputs, *missing], request.outputs, request.pools)
            return request

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            return super().execute_synchronously(self._completed(request), measure, deadline, loop_timeout)

    prepared_class = Prepared


class PaddingRefused(MutantDriver):
    """Predates HAL 1.3's padding field and refuses, with INVALID_ARGUMENT, every request that
    gives an argument padding (offset + length + padding within its pool is valid): requests
    without padding are right (VAL-1, MEM-2)."""

    name = "padding_refused"

    class Prepared(MutantPreparedModel):
        def check_request(self, request: Request) -> None:
            padded = [a for a in (*request.inputs, *request.outputs) if a.location.padding]
            if padded:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"argument padding {padded[0].location.padding} "
                                                             f"is not supported")
            super().check_request(request)

    prepared_class = Prepared


class BurstRefusesOmitted(MutantDriver):
    """A burst's request message has no way to say "no value": a burst request that omits an
    optional input (has_no_value) is refused with INVALID_ARGUMENT, where the other paths run
    it (EXE-3: every path runs the same request)."""

    name = "burst_refuses_omitted"

    class OmissionlessBurst(Burst):
        def execute(self, request: Request, slots, measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            omitted = [i for i, a in enumerate(request.inputs) if a.has_no_value]
            if omitted:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"burst request input {omitted[0]} has no value")
            return super().execute(request, slots, measure, deadline, loop_timeout)

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstRefusesOmitted.OmissionlessBurst(self)

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(IgnoresLengths, "VAL-2", suite="test_burst_validation.py", args=_SLICE),
    MutantInfo(PaddingRefused, "VAL-1", suite="test_pools.py", args=("-k", "with_padding and sync")),
    MutantInfo(BurstRefusesOmitted, "EXE-3", suite="test_execution.py", args=("-k", "omitted_input_on")),
    MutantInfo(IgnoresRequestDimensions, "VAL-1", suite="test_burst_validation.py", args=_SLICE),
    MutantInfo(ValidatesSyncOnly, "VAL-1", suite="test_burst_validation.py", args=_SLICE),
    MutantInfo(WritesPastOutputs, "VAL-2", suite="test_burst_validation.py", args=_SLICE),
    MutantInfo(ZeroFillsOmitted, "VAL-1", suite="test_burst_validation.py", args=_SLICE),
    MutantInfo(UnknownDimensionsAsOne, "EXE-6", suite="test_execution.py", args=("-k", "without_shape")),
    MutantInfo(ClampsLookupIndices, "VAL-1", suite="test_execution.py", args=("-k", "lookup_index")),
    MutantInfo(RemembersValidPools, "VAL-1", suite="test_validation.py",
               args=("-k", "mutated_request and two_outputs")),
    MutantInfo(TrailingInputsOptional, "VAL-1", suite="test_operations.py", args=("-k", "omitted_inputs")),
    MutantInfo(IgnoresExtraArguments, "VAL-1", suite="test_burst_validation.py", args=_SLICE),
)
