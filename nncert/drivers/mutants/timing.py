"""Mutants that get time wrong: deadlines (EXE-10), the WHILE loop timeout (EXE-9) and the
timings they report (EXE-7)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Burst, Deadline, FencedExecutionCallback, PreparedModel, SyncFence
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model, OutputShape, Request, Timing
from nncert.hal.types import (
    LOOP_TIMEOUT_MAXIMUM_NS,
    NO_TIMING,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperationType,
    Priority,
)
from nncert.ops.interpreter import current_budget, execution_budget, loop_timeout_of


class IgnoresDeadlines(MutantDriver):
    """Never looks at a deadline: preparation and every execution path run to the end
    however late it is (the loop timeout still holds)."""

    name = "ignores_deadlines"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            return super().execute_synchronously(request, measure, None, loop_timeout)

    prepared_class = Prepared

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        return super().prepare_model(model, preference, priority, None, model_cache, data_cache, token)


class EndlessWhile(MutantDriver):
    """Ignores the loop timeout: a WHILE whose condition stays true never ends (the
    execution's deadline still holds). Run it hosted: ``service:mutant:endless_while``."""

    name = "endless_while"

    class Prepared(MutantPreparedModel):
        def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
            with execution_budget(dataclasses.replace(current_budget(), loop_timeout=None)):
                return super().compute(inputs)

    prepared_class = Prepared


class FastFenceNoDeadline(MutantDriver):
    """A fenced execution with no fence to wait for takes a fast path that runs the request
    inside the call and never looks at its deadline; with fences to wait for, and on every
    other path, the deadline holds (EXE-10)."""

    name = "fast_fence_no_deadline"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                           measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                           loop_timeout: int | None = None, timeout_after_fence: int | None = None
                           ) -> tuple[SyncFence | None, FencedExecutionCallback]:
            if not wait_for:
                deadline = None
            return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                          timeout_after_fence)

    prepared_class = Prepared


class FastFenceDefaultLoopTimeout(MutantDriver):
    """A fenced execution with no fence to wait for runs inside the call under the default
    loop timeout (2 s), not the one it was given: a WHILE past a 1 ms loop timeout runs on for
    2 s (EXE-9). Every other path honours the loop timeout."""

    name = "fast_fence_default_loop_timeout"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request: Request, wait_for: Sequence[SyncFence] = (),
                           measure: MeasureTiming = MeasureTiming.NO, deadline: Deadline = None,
                           loop_timeout: int | None = None, timeout_after_fence: int | None = None
                           ) -> tuple[SyncFence | None, FencedExecutionCallback]:
            if not wait_for:
                loop_timeout = None
            return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout,
                                          timeout_after_fence)

    prepared_class = Prepared


class LoopTimerFromPreparation(MutantDriver):
    """Arms the WHILE loop timer when it prepares the model, not when an execution starts:
    each execution's loops get what is left of the loop timeout since the preparation, so once
    the prepared model is older than its loop timeout every loop fails at once (EXE-9)."""

    name = "loop_timer_from_preparation"

    class Prepared(MutantPreparedModel):
        def __init__(self, model: Model, driver: MutantDriver) -> None:
            super().__init__(model, driver)
            self.armed_ns = time.monotonic_ns()

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            left = self.armed_ns + loop_timeout_of(loop_timeout) - time.monotonic_ns()
            return super().execute_synchronously(request, measure, deadline, max(0, left))

    prepared_class = Prepared


class WarmBurstNoDeadline(MutantDriver):
    """A burst whose slots are all cached already takes a fast path that never looks at the
    deadline; its first run over new memories, and every other path, honour it (EXE-10)."""

    name = "warm_burst_no_deadline"

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return WarmBurstNoDeadline.FastBurst(self)

    class FastBurst(Burst):
        def execute(self, request: Request, slots: Sequence[int], measure: MeasureTiming = MeasureTiming.NO,
                    deadline: Deadline = None, loop_timeout: int | None = None
                    ) -> tuple[list[OutputShape], Timing]:
            if all(s in self.slots for s in slots):
                deadline = None
            return super().execute(request, slots, measure, deadline, loop_timeout)

    prepared_class = Prepared


def _wall_clock_check(deadline: Deadline, what: str) -> None:
    if deadline is not None and time.time_ns() >= deadline:
        raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"deadline passed before {what}")


class WallClockDeadlines(MutantDriver):
    """Compares deadlines, which are time points of the monotonic clock, with the wall clock
    (CLOCK_REALTIME): every finite deadline looks decades past, so every preparation and
    execution given one is refused with MISSED_DEADLINE_TRANSIENT; an unlimited one, or none,
    works (EXE-10)."""

    name = "wall_clock_deadlines"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            _wall_clock_check(deadline, "execution")
            return super().execute_synchronously(request, measure, None, loop_timeout)

    prepared_class = Prepared

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        _wall_clock_check(deadline, "preparation")
        return super().prepare_model(model, preference, priority, None, model_cache, data_cache, token)


class KeepsLastTiming(MutantDriver):
    """Keeps the last timing it measured in the prepared model (its profiling counters are
    read, never reset) and reports it for every later execution, asked for or not (EXE-7)."""

    name = "keeps_last_timing"

    class Prepared(MutantPreparedModel):
        last: Timing | None = None

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            shapes, timing = super().execute_synchronously(request, measure, deadline, loop_timeout)
            if timing.time_in_driver != NO_TIMING:
                self.last = timing
            elif self.last is not None:
                timing = self.last
            return shapes, timing

    prepared_class = Prepared


class SplitModelTiming(MutantDriver):
    """A model of more than one operation runs as several device jobs: the device time it
    reports adds up the jobs with their queueing, the driver time only their computation, so
    time on device exceeds time in driver (EXE-7). One-operation models are timed right."""

    name = "split_model_timing"

    def mutate_result(self, model: Model, result: tuple[list[OutputShape], Timing]
                      ) -> tuple[list[OutputShape], Timing]:
        shapes, timing = result
        if timing.time_in_driver == NO_TIMING or len(model.main.operations) < 2:
            return result
        return shapes, Timing(timing.time_in_driver + 1, max(0, timing.time_on_device - 1))


class ZeroLoopTimeoutUnset(MutantDriver):
    """Takes a loop timeout of 0 for "not given" (a C++ driver testing the duration for
    truthiness): the default 2 s applies, and a WHILE that must fail at once runs on (EXE-9)."""

    name = "zero_loop_timeout_unset"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            return super().execute_synchronously(request, measure, deadline, loop_timeout or None)

    prepared_class = Prepared


class ZeroDeadlineUnset(MutantDriver):
    """Takes a deadline of 0, the monotonic clock's epoch and so long past, for "no deadline"
    (it tests the time point for truthiness): executions and preparations given it run to the
    end where they must miss it (EXE-10). Every other deadline is honoured."""

    name = "zero_deadline_unset"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            return super().execute_synchronously(request, measure, deadline or None, loop_timeout)

    prepared_class = Prepared

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        return super().prepare_model(model, preference, priority, deadline or None, model_cache, data_cache,
                                     token)


class MaximumLoopTimeoutRefused(MutantDriver):
    """Bounds the loop timeout with >= where > is meant: LOOP_TIMEOUT_MAXIMUM_NS itself, a valid
    loop timeout, is refused with INVALID_ARGUMENT (EXE-9)."""

    name = "maximum_loop_timeout_refused"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if loop_timeout is not None and loop_timeout >= LOOP_TIMEOUT_MAXIMUM_NS:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"loop timeout {loop_timeout} ns is too long")
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class LoopTimeoutWithoutLoopRefused(MutantDriver):
    """Has no loop timer to arm for a model without WHILE and refuses, with INVALID_ARGUMENT,
    an execution of such a model that is given a loop timeout, where the loop timeout merely
    has nothing to bound (EXE-9). Models with a WHILE run as the reference's."""

    name = "loop_timeout_without_loop_refused"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            loops = any(op.type is OperationType.WHILE for sg in (self.model.main, *self.model.referenced)
                        for op in sg.operations)
            if loop_timeout is not None and not loops:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "a loop timeout for a model without a loop")
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class NegativeLoopTimeoutUnset(MutantDriver):
    """Takes a negative loop timeout for "not given" (the AIDL sentinel -1 stretched to every
    negative value) and runs with the default, where it must refuse it (VAL-1, EXE-9)."""

    name = "negative_loop_timeout_unset"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline: Deadline = None,
                                  loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
            if isinstance(loop_timeout, int) and loop_timeout < 0:
                loop_timeout = None
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(IgnoresDeadlines, "EXE-10", suite="test_qos.py"),
    MutantInfo(ZeroDeadlineUnset, "EXE-10", suite="test_qos.py", args=("-k", "past_deadline and sync")),
    MutantInfo(EndlessWhile, "EXE-9", "HANG", suite="test_control_flow.py"),
    MutantInfo(FastFenceNoDeadline, "EXE-10", suite="test_qos.py", args=("-k", "deadline")),
    MutantInfo(WallClockDeadlines, "EXE-10", suite="test_qos.py", args=("-k", "generous")),
    MutantInfo(WarmBurstNoDeadline, "EXE-10", suite="test_qos.py", args=("-k", "burst-warm")),
    MutantInfo(LoopTimerFromPreparation, "EXE-9", suite="test_control_flow.py", args=("-k", "from_each")),
    MutantInfo(FastFenceDefaultLoopTimeout, "EXE-9", suite="test_control_flow.py",
               args=("-k", "stops_at_the_loop_timeout and fenced-no-wait")),
    MutantInfo(ZeroLoopTimeoutUnset, "EXE-9", suite="test_control_flow.py",
               args=("-k", "zero_loop and burst")),
    MutantInfo(MaximumLoopTimeoutRefused, "EXE-9", suite="test_control_flow.py", args=("-k", "maximum_loop")),
    MutantInfo(NegativeLoopTimeoutUnset, "VAL-1", suite="test_control_flow.py",
               args=("-k", "negative_loop_timeout")),
    MutantInfo(LoopTimeoutWithoutLoopRefused, "EXE-9", suite="test_control_flow.py",
               args=("-k", "without_loops and sync")),
    MutantInfo(KeepsLastTiming, "EXE-7", suite="test_execution.py", args=("-k", "timing_follows")),
    MutantInfo(SplitModelTiming, "EXE-7", suite="test_execution.py", args=("-k", "timing_follows")),
)
