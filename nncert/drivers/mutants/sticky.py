"""Mutants that carry something from one call on a prepared model into the next: an argument
the caller gave an earlier execution (its deadline, its loop timeout), or state left behind by
an execution that failed. Each runs every execution right when it is the first, so a suite
that gives each prepared model one execution, or one form of execution, cannot see them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Burst, Deadline, FencedExecutionInfo, PreparedModel, SyncFence
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model, OperandLifeTime, OutputShape, Request, Timing
from nncert.hal.types import ErrorStatus, ExecutionPreference, MeasureTiming, Priority
from nncert.ops.interpreter import run_model

#: Where a constant operand's value lives: in the model's values or in one of its pools (MEM-1).
CONSTANT_LIFETIMES = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)


class DeadlineKept(MutantDriver):
    """A prepared model keeps the last deadline it was given and applies it to later
    executions that give none: once that time has passed, each of them misses it."""

    name = "deadline_kept"

    class Prepared(MutantPreparedModel):
        last_deadline: Deadline = None

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if deadline is not None:
                self.last_deadline = deadline
            return super().execute_synchronously(request, measure, self.last_deadline, loop_timeout)

    prepared_class = Prepared


class LoopTimeoutKept(MutantDriver):
    """A prepared model keeps the last loop timeout it was given and applies it to later
    executions that give none (in place of the default): after a run with a loop timeout of 0,
    every later loop stops at once."""

    name = "loop_timeout_kept"

    class Prepared(MutantPreparedModel):
        last_loop_timeout: int | None = None

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if loop_timeout is not None:
                self.last_loop_timeout = loop_timeout
            return super().execute_synchronously(request, measure, deadline, self.last_loop_timeout)

    prepared_class = Prepared


class InsufficientResultsKept(MutantDriver):
    """The results of an execution that failed with OUTPUT_INSUFFICIENT_SIZE are kept for the
    client's retry: the next execution of the prepared model writes them instead of computing
    its own inputs (right while the retry repeats the inputs, as a client's usually does)."""

    name = "insufficient_results_kept"

    class Prepared(MutantPreparedModel):
        kept: list[np.ndarray] | None = None
        computed: list[np.ndarray] | None = None

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            if self.kept is not None:
                outputs, self.kept = self.kept, None
                return outputs
            self.computed = super().compute(inputs)
            return self.computed

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            try:
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            except HalError as e:
                if e.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                    self.kept = self.computed
                raise

    prepared_class = Prepared


class BurstResetByOtherPaths(MutantDriver):
    """An execution of the prepared model off its bursts (sync, async, fenced) resets the
    device context the bursts hold: the next run of each burst after it fails with
    GENERAL_FAILURE (once; the burst then rebuilds its context)."""

    name = "burst_reset_by_other_paths"

    class ResettableBurst(Burst):
        def __init__(self, prepared: BurstResetByOtherPaths.Prepared) -> None:
            super().__init__(prepared)
            self.context = prepared.context

        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            prepared = self.prepared
            if self.context != prepared.context:
                self.context = prepared.context
                raise HalError(ErrorStatus.GENERAL_FAILURE, "the burst's device context was reset")
            prepared.in_burst = True
            try:
                return super().execute(request, slots, measure, deadline, loop_timeout)
            finally:
                prepared.in_burst = False

    class Prepared(MutantPreparedModel):
        context = 0  # counts the executions off the bursts
        in_burst = False

        def configure_execution_burst(self) -> Burst:
            return BurstResetByOtherPaths.ResettableBurst(self)

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if not self.in_burst:
                self.context += 1
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class _KeepingBurst(Burst):
    """A burst that keeps the deadline and loop timeout last given to it (``keeps`` names which)
    for its later executions that give none."""

    keeps: tuple[str, ...] = ()

    def __init__(self, prepared: PreparedModel) -> None:
        super().__init__(prepared)
        self.kept: dict[str, int] = {}

    def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                deadline: Deadline = None,
                loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        given = {"deadline": deadline, "loop_timeout": loop_timeout}
        for name in self.keeps:
            if given[name] is None:
                given[name] = self.kept.get(name)
            else:
                self.kept[name] = given[name]
        return super().execute(request, slots, measure, given["deadline"], given["loop_timeout"])


class _KeepingBurstPrepared(MutantPreparedModel):
    keeps: tuple[str, ...] = ()

    def configure_execution_burst(self) -> Burst:
        burst = _KeepingBurst(self)
        burst.keeps = self.keeps
        return burst


class BurstDeadlineKept(MutantDriver):
    """A burst keeps the last deadline given to it for its later executions that give none
    (each burst's first execution, and every other path, is right)."""

    name = "burst_deadline_kept"

    class Prepared(_KeepingBurstPrepared):
        keeps = ("deadline",)

    prepared_class = Prepared


class BurstLoopTimeoutKept(MutantDriver):
    """A burst keeps the last loop timeout given to it for its later executions that give none."""

    name = "burst_loop_timeout_kept"

    class Prepared(_KeepingBurstPrepared):
        keeps = ("loop_timeout",)

    prepared_class = Prepared


class BurstReplaysInsufficient(MutantDriver):
    """After OUTPUT_INSUFFICIENT_SIZE on a burst, the burst's result queue replays that failure
    (status and shapes) as the answer to its next execution, the client's retry."""

    name = "burst_replays_insufficient"

    class ReplayingBurst(Burst):
        replay: HalError | None = None

        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None,
                    loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if self.replay is not None:
                failure, self.replay = self.replay, None
                raise failure
            try:
                return super().execute(request, slots, measure, deadline, loop_timeout)
            except HalError as e:
                if e.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                    self.replay = e
                raise

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstReplaysInsufficient.ReplayingBurst(self)

    prepared_class = Prepared


class FenceQueueStalledAfterMiss(MutantDriver):
    """After a fenced execution misses its deadline waiting for a fence, the prepared model's
    fence queue stays stalled: its next fenced execution with fences to wait for reports
    MISSED_DEADLINE_TRANSIENT too (once)."""

    name = "fence_queue_stalled_after_miss"

    class Prepared(MutantPreparedModel):
        stalled = False

        def _fenced_run(self, request: Request, wait_for: Sequence[SyncFence], measure: MeasureTiming,
                        deadline: Deadline, loop_timeout: int | None, start: int) -> FencedExecutionInfo:
            if self.stalled and wait_for:
                self.stalled = False
                return FencedExecutionInfo(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                                           message="the fence queue is stalled")
            info = super()._fenced_run(request, wait_for, measure, deadline, loop_timeout, start)
            if info.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT):
                self.stalled = True
            return info

    prepared_class = Prepared


class PreparationDeadlineKept(MutantDriver):
    """A model prepared under a deadline keeps that deadline as the default of its executions:
    once it has passed, every execution that gives no deadline of its own misses it."""

    name = "preparation_deadline_kept"

    class Prepared(MutantPreparedModel):
        preparation_deadline: Deadline = None

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if deadline is None:
                deadline = self.preparation_deadline
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        prepared = super().prepare_model(model, preference, priority, deadline, model_cache, data_cache,
                                         token)
        prepared.preparation_deadline = deadline
        return prepared


_MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)


class BehindAfterMiss(MutantDriver):
    """After an execution misses its deadline, the prepared model's queue stays behind: its
    next execution, whatever its deadline, fails with MISSED_DEADLINE_TRANSIENT too (once)."""

    name = "behind_after_miss"

    class Prepared(MutantPreparedModel):
        behind = False

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if self.behind:
                self.behind = False
                raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "the queue is still behind")
            try:
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            except HalError as e:
                if e.status in _MISSED and deadline is not None:
                    self.behind = True
                raise

    prepared_class = Prepared


class ConstantsLostByFailedFirstRun(MutantDriver):
    """Uploads a prepared model's constants to the device at its first execution, and marks
    them uploaded before it validates the request: when that first execution fails, the upload
    never happens, and every later execution reads zeros for the tensor constants (EXE-3: a
    failed execution must leave the prepared model as it was)."""

    name = "constants_lost_by_failed_first_run"

    class Prepared(MutantPreparedModel):
        started = False

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            first, self.started = not self.started, True
            try:
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            except HalError:
                if first:
                    self._zero_constants()
                raise

        def _zero_constants(self) -> None:
            """What the device holds for the constants it never received: zeros (a constant
            cache for run_model, keyed by subgraph and operand index)."""
            sg = self.model.main
            self.lost: dict = {}
            for idx, operand in enumerate(sg.operands):
                if operand.lifetime in CONSTANT_LIFETIMES and not operand.type.is_scalar:
                    zeros = np.zeros_like(self.model.constant_value(operand))
                    zeros.flags.writeable = False
                    self.lost[(id(sg), idx)] = zeros

        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            if getattr(self, "lost", None) is None:
                return super().compute(inputs)
            return run_model(self.model, inputs, constants=dict(self.lost))

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(DeadlineKept, "EXE-10", suite="test_qos.py", args=("-k", "binds_only")),
    MutantInfo(BurstDeadlineKept, "EXE-10", suite="test_qos.py", args=("-k", "binds_only")),
    MutantInfo(BurstLoopTimeoutKept, "EXE-9", suite="test_control_flow.py", args=("-k", "binds_only")),
    MutantInfo(BurstReplaysInsufficient, "EXE-5", suite="test_pools.py", args=("-k", "retry_after")),
    MutantInfo(FenceQueueStalledAfterMiss, "EXE-10", suite="test_execution.py",
               args=("-k", "misses_its_deadline_waiting")),
    MutantInfo(PreparationDeadlineKept, "EXE-10", suite="test_qos.py", args=("-k", "preparation_deadline")),
    MutantInfo(BehindAfterMiss, "EXE-10", suite="test_qos.py", args=("-k", "leaves_the_model")),
    MutantInfo(BurstResetByOtherPaths, "BURST-1", suite="test_pools.py", args=("-k", "between_other")),
    MutantInfo(InsufficientResultsKept, "EXE-5", suite="test_pools.py", args=("-k", "retry_after")),
    MutantInfo(LoopTimeoutKept, "EXE-9", suite="test_control_flow.py", args=("-k", "binds_only")),
    MutantInfo(ConstantsLostByFailedFirstRun, "EXE-3", suite="test_validation.py",
               args=("-k", "failed_first_execution")),
)
