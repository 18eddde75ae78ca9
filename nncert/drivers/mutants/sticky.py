"""Mutants that carry something from one call on a prepared model into the next: an argument
the caller gave an earlier execution (its deadline, its loop timeout), or state left behind by
an execution that failed. Each runs every execution right when it is the first, so a suite
that gives each prepared model one execution, or one form of execution, cannot see them."""

from __future__ import annotations

from nncert.drivers.base import Deadline
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.model import OutputShape, Request, Timing
from nncert.hal.types import MeasureTiming


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


MUTANT_INFO = (
    MutantInfo(DeadlineKept, "EXE-10", suite="test_qos.py", args=("-k", "binds_only")),
)
