"""Mutants that go wrong off the happy path of execution: several wait-for fences, fenced
timing, and state kept inside a prepared model that is run many times, or from several threads
at once (EXE-1, EXE-4, EXE-8, EXE-9, DRV-4). Each runs a single request right, so a suite that
prepares a model, runs it once and checks the answer cannot see them."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Burst, Deadline, FencedExecutionCallback, FencedExecutionInfo, SyncFence
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.memory import Memory
from nncert.hal.model import Model, Operation, OutputShape, Request, Timing
from nncert.hal.types import ErrorStatus, MeasureTiming, OperationType
from nncert.ops.control_flow import referenced_subgraph
from nncert.ops.interpreter import run_model


class FirstFenceOnly(MutantDriver):
    """A fenced execution hands only the first of its wait-for fences to the device queue:
    it starts as soon as that one is signalled, whatever the others say."""

    name = "first_fence_only"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request, wait_for=(), measure=MeasureTiming.NO, deadline=None,
                           loop_timeout=None, timeout_after_fence=None):
            return super().execute_fenced(request, list(wait_for)[:1], measure, deadline, loop_timeout,
                                          timeout_after_fence)

    prepared_class = Prepared


class FastPathTiming(MutantDriver):
    """A fenced execution with nothing to wait for takes a fast path that always measures:
    it reports launched and fenced timings although the caller did not ask for them."""

    name = "fast_path_timing"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request, wait_for=(), measure=MeasureTiming.NO, deadline=None,
                           loop_timeout=None, timeout_after_fence=None):
            if not wait_for:
                measure = MeasureTiming.YES
            return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                          timeout_after_fence)

    prepared_class = Prepared


class IfBranchCache(MutantDriver):
    """A prepared model specialises an IF whose condition is a model input to the branch its
    first execution took (a tracing compiler that folds the condition it saw): later
    executions run that branch whatever their condition."""

    name = "if_branch_cache"

    class Prepared(MutantPreparedModel):
        condition: np.ndarray | None = None

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            main = self.model.main
            ifs = [op for op in main.operations if op.type is OperationType.IF
                   and op.inputs[0] in main.input_indexes]
            if ifs:
                pos = main.input_indexes.index(ifs[0].inputs[0])
                if self.condition is None:
                    self.condition = np.array(inputs[pos], copy=True)
                else:
                    inputs = [self.condition if p == pos else x for p, x in enumerate(inputs)]
            return super().compute(inputs)

    prepared_class = Prepared


class ScalarInputsFrozen(MutantDriver):
    """Takes the scalar inputs of a model (an activation code, an axis, given at run time) for
    parameters: its compiler reads them at the first execution of the prepared model and folds
    them in, so later executions run with the first one's values whatever they give (EXE-3).
    Tensor inputs are read afresh every time."""

    name = "scalar_inputs_frozen"

    class Prepared(MutantPreparedModel):
        folded: dict[int, np.ndarray | None] | None = None

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            main = self.model.main
            scalars = [p for p, idx in enumerate(main.input_indexes) if main.operands[idx].type.is_scalar]
            if scalars:
                if self.folded is None:
                    self.folded = {p: inputs[p] for p in scalars}
                inputs = [self.folded.get(p, x) for p, x in enumerate(inputs)]
            return super().compute(inputs)

    prepared_class = Prepared


class IfConditionIsOne(MutantDriver):
    """Tests an IF condition's byte for 1 where any byte but 0 is true (TENSOR_BOOL8): a
    condition the request gives as 2 selects the else branch (EXE-9). Conditions of 0 and 1,
    the ones a bool writes, are right."""

    name = "if_condition_is_one"

    class Prepared(MutantPreparedModel):
        odd: tuple[int, ...] = ()

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            main = self.model.main
            conditions = {op.inputs[0] for op in main.operations if op.type is OperationType.IF}
            odd = []
            for p, (arg, idx) in enumerate(zip(request.inputs, main.input_indexes, strict=False)):
                pool = None if arg.has_no_value else request.pools[arg.location.pool_index]
                if idx in conditions and isinstance(pool, Memory) and pool.view()[arg.location.offset] > 1:
                    odd.append(p)
            self.odd = tuple(odd)
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            return super().compute([np.zeros_like(x) if p in self.odd else x for p, x in enumerate(inputs)])

    prepared_class = Prepared


class WhileTripCache(MutantDriver):
    """A prepared model unrolls its WHILE loop to the trip count of its first successful
    execution: later executions run the body that many times whatever the condition says."""

    name = "while_trip_cache"

    class Prepared(MutantPreparedModel):
        trips: int | None = None

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            loop = next((op for op in self.model.main.operations if op.type is OperationType.WHILE), None)
            if loop is None:
                return super().compute(inputs)
            decide = _producer(referenced_subgraph(self.model, self.model.main, loop.inputs[0]))
            evaluated = 0

            def unrolled(n, op, operands, values, outputs, results):
                nonlocal evaluated
                if op is decide:
                    if self.trips is not None:
                        results = [np.full_like(results[0], evaluated < self.trips)]
                    evaluated += 1
                return results

            outputs = run_model(self.model, inputs, unrolled)
            if self.trips is None:
                self.trips = evaluated - 1
            return outputs

    prepared_class = Prepared


def _producer(subgraph) -> Operation:
    """The operation of ``subgraph`` that writes its first output (a WHILE condition's)."""
    return next(op for op in subgraph.operations if subgraph.output_indexes[0] in op.outputs)


class ShapeCacheByFirstInput(MutantDriver):
    """Output shapes are kept per compiled variant, and the variants of a model with unknown
    output dimensions are keyed by the actual shape of its first input only: a request that
    changes another input's shape (or only a value the shapes depend on) is told the shapes
    of an earlier one. The output values are right."""

    name = "shape_cache_by_first_input"

    class Prepared(MutantPreparedModel):
        def __init__(self, model, driver) -> None:
            super().__init__(model, driver)
            self.shapes: dict[tuple[int, ...], list[OutputShape]] = {}
            self.key: tuple[int, ...] = ()

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            self.key = tuple(np.shape(inputs[0])) if inputs else ()
            return super().compute(inputs)

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            shapes, timing = super().execute_synchronously(request, measure, deadline, loop_timeout)
            main = self.model.main
            if all(main.operands[i].fully_specified for i in main.output_indexes):
                return shapes, timing
            cached = self.shapes.setdefault(self.key, shapes)
            return [OutputShape(s.dimensions, s.is_sufficient) for s in cached], timing

    prepared_class = Prepared


#: How long the shared staging buffer is held between writing and reading it: long enough
#: that two executions started together always overlap there.
STAGING_S = 0.01


class SharedStaging(MutantDriver):
    """A prepared model stages every execution's inputs in one buffer of its own, allocated
    at preparation, with no lock: two executions running at once on the same prepared model
    read each other's inputs (the staging copy takes STAGING_S)."""

    name = "shared_staging"

    class Prepared(MutantPreparedModel):
        def __init__(self, model, driver) -> None:
            super().__init__(model, driver)
            self.staging: list[np.ndarray | None] = []

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            self.staging[:] = [None if x is None else np.array(x, copy=True) for x in inputs]
            time.sleep(STAGING_S)  # the copy to the device
            return super().compute(list(self.staging))

    prepared_class = Prepared


class _StagedOnOnePath(MutantPreparedModel):
    """SharedStaging's fault, on the executions that come through ``path`` only (a thread
    running one marks itself in ``running``): executions on the other paths stage nothing."""

    path = ""
    running = threading.local()

    def __init__(self, model, driver) -> None:
        super().__init__(model, driver)
        self.staging: list[np.ndarray | None] = []

    def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        if getattr(self.running, "path", "") != self.path:
            return super().compute(inputs)
        self.staging[:] = [None if x is None else np.array(x, copy=True) for x in inputs]
        time.sleep(STAGING_S)
        return super().compute(list(self.staging))


class _MarkingBurst(Burst):
    def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                deadline: Deadline = None,
                loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        _StagedOnOnePath.running.path = "burst"
        try:
            return super().execute(request, slots, measure, deadline, loop_timeout)
        finally:
            _StagedOnOnePath.running.path = ""


class BurstSharedStaging(MutantDriver):
    """The bursts of a prepared model share one staging buffer of the prepared model, unlocked:
    two bursts running at once read each other's inputs. One burst at a time, or one beside
    executions on the other paths, is right (DRV-4)."""

    name = "burst_shared_staging"

    class Prepared(_StagedOnOnePath):
        path = "burst"

        def configure_execution_burst(self) -> Burst:
            return _MarkingBurst(self)

    prepared_class = Prepared


class FencedSharedStaging(MutantDriver):
    """The fenced executions of a prepared model share one staging buffer of the prepared
    model, unlocked: two fenced executions released at once read each other's inputs (DRV-4)."""

    name = "fenced_shared_staging"

    class Prepared(_StagedOnOnePath):
        path = "fenced"

        def _fenced_run(self, request: Request, wait_for: Sequence[SyncFence], measure: MeasureTiming,
                        deadline: Deadline, loop_timeout: int | None, start: int) -> FencedExecutionInfo:
            self.running.path = "fenced"
            try:
                return super()._fenced_run(request, wait_for, measure, deadline, loop_timeout, start)
            finally:
                self.running.path = ""

    prepared_class = Prepared


class OneGraphSlot(MutantDriver):
    """The device holds the graph and weights of one prepared model at a time: an execution
    loads its own into the slot (a ``LOAD_S`` transfer), then runs whatever the slot holds, and
    nothing serialises executions of different prepared models: run side by side, one runs
    the other's graph (DRV-4). One prepared model, from any number of threads, is right."""

    name = "one_graph_slot"
    LOAD_S = 0.002

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self.loaded: Model | None = None

    class Prepared(MutantPreparedModel):
        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            driver = self.driver
            driver.loaded = self.model  # type: ignore[attr-defined]
            time.sleep(OneGraphSlot.LOAD_S)
            return driver.run(driver.loaded, inputs)  # type: ignore[attr-defined]

    prepared_class = Prepared


class FenceListedTwiceRefused(MutantDriver):
    """Merges its wait-for fences into one before queueing the job, pair by pair, and the merge
    of a fence with itself fails: a wait-for list that names one fence twice is refused with
    INVALID_ARGUMENT, where it must run once that fence is signalled (EXE-1)."""

    name = "fence_listed_twice_refused"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                           measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                           loop_timeout: int | None = None, timeout_after_fence: int | None = None
                           ) -> tuple[SyncFence | None, FencedExecutionCallback]:
            if len({id(f) for f in wait_for}) != len(wait_for):
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "cannot merge a sync fence with itself")
            return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                          timeout_after_fence)

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(FirstFenceOnly, "EXE-1", suite="test_execution.py", args=("-k", "fence")),
    MutantInfo(FastPathTiming, "EXE-8", suite="test_execution.py", args=("-k", "fenced")),
    MutantInfo(FenceListedTwiceRefused, "EXE-1", suite="test_execution.py", args=("-k", "listed_twice")),
    MutantInfo(IfBranchCache, "EXE-9", suite="test_prepared_reuse.py",
               args=("-k", "if_branches or if_output_shape")),
    MutantInfo(WhileTripCache, "EXE-9", suite="test_prepared_reuse.py", args=("-k", "while")),
    MutantInfo(IfConditionIsOne, "EXE-9", suite="test_control_flow.py", args=("-k", "nonzero_byte and sync")),
    MutantInfo(ScalarInputsFrozen, "EXE-3", suite="test_prepared_reuse.py", args=("-k", "scalar_input")),
    MutantInfo(ShapeCacheByFirstInput, "EXE-4", suite="test_prepared_reuse.py", args=("-k", "shape")),
    MutantInfo(SharedStaging, "DRV-4", suite="test_prepared_reuse.py", args=("-k", "threads or in_flight")),
    MutantInfo(BurstSharedStaging, "DRV-4", suite="test_prepared_reuse.py",
               args=("-k", "one_path and burst")),
    MutantInfo(FencedSharedStaging, "DRV-4", suite="test_prepared_reuse.py",
               args=("-k", "one_path and fenced")),
    MutantInfo(OneGraphSlot, "DRV-4", suite="test_prepared_reuse.py", args=("-k", "two_prepared_models")),
)
