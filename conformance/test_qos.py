"""Quality of service (EXE-10): priorities, and deadlines for preparing and for running.

The first part is the VTS QualityOfServiceTests: every priority; preparation and execution
with a deadline of "now", "unlimited" and "short" (5 ms). Each call returns NONE or, where
the deadline may be missed ("now", "short"), MISSED_DEADLINE_*; an unlimited one must
succeed; a prepared model exists if and only if the status is NONE; and nothing hangs. To
these nncert adds a "generous" deadline, 10 s away, that must be met as an unlimited one is
(a driver reading deadlines against another clock misses every finite one). The
second part is nncert's own, stricter: the model prepared with each priority and each
execution preference computes as exactly as any other (a hint buys speed or power, never
precision: ACC-1); a deadline that has already passed must be missed, and a long execution
must stop soon after its deadline, on every path, the fenced call with nothing to wait for
(which may run inside the call) among them.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from nncert.hal.builder import build_request, read_outputs
from nncert.hal.model import Model
from nncert.hal.types import ErrorStatus, ExecutionPreference, Priority
from nncert.testing.control_flow_models import counting_feeds, counting_while_model
from nncert.testing.harness import (
    FAST_PATHS,
    PATHS,
    add_model,
    check_outputs,
    decline,
    declined,
    execute,
    prepare_or_skip,
    status_of,
)

MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
SHORT_NS = 5_000_000  # the VTS's kShortDuration
UNLIMITED = 2**63 - 1  # steady_clock::time_point::max(), in nanoseconds
#: A deadline no execution or preparation of the small ADD model can miss.
GENEROUS_NS = 10_000_000_000
BOUNDS = ("now", "unlimited", "short", "generous")
DIMS = (2, 3)
#: The paths of the stricter deadline checks: the harness's, and those a driver may take a
#: shortcut on (a warm burst, a fenced call with nothing to wait for).
DEADLINE_PATHS = (*PATHS, *FAST_PATHS)


def _deadline(bound: str) -> int:
    now = time.monotonic_ns()
    return {"now": now, "unlimited": UNLIMITED, "short": now + SHORT_NS, "generous": now + GENEROUS_NS}[bound]


def _feeds() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-2, 2, DIMS).astype(np.float32) for _ in range(2)]


def _prepare(driver, model: Model, **kwargs):
    """(status, prepared model or None) of one prepare_model call."""
    prepared = []
    status = status_of(lambda: prepared.append(driver.prepare_model(model, **kwargs)))
    return status, (prepared or [None])[0]


def _allowed(bound: str) -> tuple[ErrorStatus, ...]:
    return (ErrorStatus.NONE,) if bound in ("unlimited", "generous") else (ErrorStatus.NONE, *MISSED)


def _prepared_runs_exactly(driver, what: str, **hints) -> None:
    """Prepare the ADD model with ``hints`` (a priority or a preference); it must succeed and
    its results meet float32's tolerance (ACC-1: relaxed computation is not allowed)."""
    model = add_model(DIMS)
    if declined(driver, model):
        decline(declined(driver, model))
    status, prepared = _prepare(driver, model, **hints)
    assert status is ErrorStatus.NONE, f"EXE-10: prepare_model with {what} gave {status.name}"
    assert prepared is not None
    feeds = _feeds()
    request = build_request(model, feeds)
    execute(prepared, request, "sync")
    try:
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [DIMS]), model)
    except pytest.fail.Exception as e:
        pytest.fail(f"ACC-1: the model prepared with {what}: {e}")


@pytest.mark.req("EXE-10", "ACC-1")
@pytest.mark.parametrize("priority", list(Priority), ids=[p.name for p in Priority])
def test_prepare_with_every_priority(driver, priority):
    _prepared_runs_exactly(driver, f"priority {priority.name}", priority=priority)


@pytest.mark.req("EXE-10", "ACC-1")
@pytest.mark.parametrize("preference", list(ExecutionPreference), ids=[p.name for p in ExecutionPreference])
def test_prepare_with_every_preference(driver, preference):
    _prepared_runs_exactly(driver, f"preference {preference.name}", preference=preference)


@pytest.mark.req("EXE-10")
@pytest.mark.parametrize("bound", BOUNDS)
def test_prepare_with_a_deadline(driver, bound):
    model = add_model(DIMS)
    if declined(driver, model):
        decline(declined(driver, model))
    status, prepared = _prepare(driver, model, deadline=_deadline(bound))
    assert status in _allowed(bound), \
        f"EXE-10: prepare_model with a deadline of {bound!r} gave {status.name}"
    assert (status is ErrorStatus.NONE) == (prepared is not None), \
        "EXE-10: a prepared model must exist if and only if preparation succeeded"


@pytest.mark.req("EXE-10")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bound", BOUNDS)
def test_execute_with_a_deadline(driver, path, bound):
    model = add_model(DIMS)
    prepared = prepare_or_skip(driver, model)
    feeds = _feeds()
    request = build_request(model, feeds)
    status = status_of(lambda: execute(prepared, request, path, deadline=_deadline(bound)))
    assert status in _allowed(bound), \
        f"EXE-10: a {path} execution with a deadline of {bound!r} gave {status.name}"
    if status is ErrorStatus.NONE:
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [DIMS]), model)


# --- stricter than the VTS


@pytest.mark.req("EXE-10")
def test_prepare_with_a_past_deadline_is_missed(driver):
    """A deadline that passed before the call cannot be met by any amount of work: EXE-10
    says a missed deadline gives MISSED_DEADLINE_*, so a driver that returns NONE here did
    not look at the deadline at all. (The VTS accepts NONE for "now" because the clock may
    not have moved between taking the time and the driver's check; one second ago leaves no
    such race.)"""
    model = add_model(DIMS)
    if declined(driver, model):
        decline(declined(driver, model))
    for deadline, what in ((time.monotonic_ns() - 1_000_000_000, "1 s in the past"), (0, "of 0 (the epoch)")):
        status, prepared = _prepare(driver, model, deadline=deadline)
        assert status in MISSED, f"EXE-10: prepare_model with a deadline {what} gave {status.name}"
        assert prepared is None


@pytest.mark.req("EXE-10")
@pytest.mark.parametrize("path", DEADLINE_PATHS)
def test_execute_with_a_past_deadline_is_missed(driver, path):
    """As for preparation: a deadline already past when the execution starts must be missed
    (EXE-10), on every path; 0, the clock's epoch, among them (not "no deadline": that is
    None, where the AIDL HAL says -1)."""
    model = add_model(DIMS)
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, _feeds())
    for deadline, what in ((time.monotonic_ns() - 1_000_000_000, "1 s in the past"), (0, "of 0 (the epoch)")):
        status = status_of(lambda d=deadline: execute(prepared, request, path, deadline=d))
        assert status in MISSED, f"EXE-10: a {path} execution with a deadline {what} gave {status.name}"


#: The long execution: a WHILE counting to 2**31 - 1, stopped by a 2 s loop timeout if
#: nothing stops it first.
LONG_LOOP_TIMEOUT_NS = 2_000_000_000
DEADLINE_NS = 50_000_000
#: "Well before it would have finished": at most half of it, however slow the machine or IPC.
STOPPED_WITHIN_S = 1.0


@pytest.mark.req("EXE-10", "EXE-9")
@pytest.mark.parametrize("path", DEADLINE_PATHS)
def test_long_execution_stops_at_its_deadline(driver, path):
    """A loop that would run for 2 s (until its loop timeout), given a deadline of 50 ms,
    must come back with MISSED_DEADLINE_* long before: the deadline
    bounds the execution, not only its start."""
    model = counting_while_model()
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, counting_feeds(0, 0, 2**31 - 1))
    started = time.monotonic()
    status = status_of(lambda: execute(prepared, request, path, deadline=time.monotonic_ns() + DEADLINE_NS,
                                       loop_timeout=LONG_LOOP_TIMEOUT_NS))
    elapsed = time.monotonic() - started
    assert status in MISSED, f"EXE-10: gave {status.name}, expected MISSED_DEADLINE_*"
    assert elapsed < STOPPED_WITHIN_S, \
        f"EXE-10: a {path} execution with a 50 ms deadline returned after {elapsed:.2f} s"


#: The deadline of the first run of each path in test_a_deadline_binds_only_its_own_execution.
PASSING_DEADLINE_NS = 300_000_000


@pytest.mark.req("EXE-10")
def test_a_deadline_binds_only_its_own_execution(driver):
    """A deadline belongs to the execution it was given to: once one prepared model has run
    with a deadline on every path and that deadline has passed, its runs without a deadline
    must still succeed, on every path and on one burst run both times (a driver, or a burst,
    that keeps the last deadline it saw misses every later execution). Whether the runs with
    the deadline met it is not judged here."""
    model = add_model(DIMS)
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()  # "one-burst": the same burst both times
    feeds = _feeds()

    def run(path, request, deadline=None):
        if path == "one-burst":  # new memories, so new slots: 0, 1 the first time, 2, 3 then
            first = 0 if deadline is not None else len(request.pools)
            return burst.execute(request, list(range(first, first + len(request.pools))), deadline=deadline)
        return execute(prepared, request, path, deadline=deadline)

    paths = (*DEADLINE_PATHS, "one-burst")
    deadline = time.monotonic_ns() + PASSING_DEADLINE_NS
    for path in paths:
        status_of(lambda path=path: run(path, build_request(model, feeds), deadline))
    time.sleep(max(0.0, (deadline - time.monotonic_ns()) / 1e9) + 0.01)
    for path in paths:
        request = build_request(model, feeds)
        status = status_of(lambda path=path, request=request: run(path, request))
        assert status is ErrorStatus.NONE, \
            f"EXE-10: a {path} execution without a deadline, after runs with a deadline that has " \
            f"since passed, gave {status.name}"
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [DIMS]), model)


@pytest.mark.req("EXE-10")
def test_a_preparation_deadline_does_not_bind_executions(driver):
    """The deadline of prepare_model bounds the preparation, not the prepared model's
    executions: once it has passed, the model runs without a deadline on every path (a
    driver that keeps it as the default execution deadline misses every later execution).
    Should the preparation itself miss a 300 ms deadline on a loaded machine, it is tried
    again with a longer one."""
    model = add_model(DIMS)
    if declined(driver, model):
        decline(declined(driver, model))
    for budget_ns in (PASSING_DEADLINE_NS, 10 * PASSING_DEADLINE_NS):
        deadline = time.monotonic_ns() + budget_ns
        status, prepared = _prepare(driver, model, deadline=deadline)
        if status is ErrorStatus.NONE:
            break
    assert status is ErrorStatus.NONE, f"EXE-10: prepare_model with a deadline 3 s away gave {status.name}"
    time.sleep(max(0.0, (deadline - time.monotonic_ns()) / 1e9) + 0.01)
    feeds = _feeds()
    for path in DEADLINE_PATHS:
        request = build_request(model, feeds)
        status = status_of(lambda path=path, request=request: execute(prepared, request, path))
        assert status is ErrorStatus.NONE, \
            f"EXE-10: a {path} execution without a deadline, of a model prepared under a deadline " \
            f"that has since passed, gave {status.name}"
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [DIMS]), model)


@pytest.mark.req("EXE-10")
def test_a_missed_deadline_leaves_the_model_usable(driver):
    """A miss is the missed execution's outcome alone: on every path, and on one burst, an
    execution with a deadline already past is followed at once by one without a deadline on
    the same path, which must succeed (a driver whose queue, or burst, stays "behind" after a
    miss fails it). Whether the first was missed is test_execute_with_a_past_deadline_is_missed's
    to judge."""
    model = add_model(DIMS)
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    slots = iter(range(1000))
    feeds = _feeds()

    def run(path, request, deadline=None):
        if path == "one-burst":  # new memories, so new slots each time
            return burst.execute(request, [next(slots) for _ in request.pools], deadline=deadline)
        return execute(prepared, request, path, deadline=deadline)

    for path in (*DEADLINE_PATHS, "one-burst"):
        past = time.monotonic_ns() - 1_000_000_000
        status_of(lambda path=path, past=past: run(path, build_request(model, feeds), past))
        request = build_request(model, feeds)
        status = status_of(lambda path=path, request=request: run(path, request))
        assert status is ErrorStatus.NONE, \
            f"EXE-10: a {path} execution without a deadline, right after one with a deadline 1 s in " \
            f"the past, gave {status.name}"
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [DIMS]), model)
