"""Execution paths, timing, output shapes, memory pools and driver lifecycle (EXE, MEM, DRV)."""

from __future__ import annotations

import gc
import threading
import time
import zlib

import numpy as np
import pytest

from nncert.drivers.base import SyncFence
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.memory import KINDS
from nncert.hal.model import Timing
from nncert.hal.types import NO_TIMING, ErrorStatus, MeasureTiming, OperandType, OperationType
from nncert.ops import records
from nncert.testing.cases import case_id, enumerate_cases, sample_case
from nncert.testing.harness import (
    PATHS,
    check_outputs,
    execute,
    expect_invalid,
    fenced_info,
    prepare_or_skip,
    run_case,
    run_fenced,
    status_of,
    wait_fence,
)

T = OperandType


def _one_case_per_operation() -> list:
    """Seed-0 case of each operation's first variant, default layout, no activation."""
    out = []
    for r in records():
        sig, var_ = r.signatures[0], r.variants[0]
        out.append(pytest.param((r, sig, var_, False if r.layout else None, 0 if r.activation else None, 0),
                                id=f"{r.name}-{var_.label}"))
    return out


CASES = _one_case_per_operation()
#: Every per-operation case (the whole of test_operations' base matrix).
EVERY_CASE = [pytest.param(k, id=case_id(*k)) for k in enumerate_cases()]


def _prepared_case(driver, key, variation="base"):
    case = sample_case(*key)
    model, feeds = case.model(variation)
    return case, model, feeds, prepare_or_skip(driver, model)


def _raw_outputs(model, request, case):
    return read_outputs(model, request, [e.shape for e in case.expected])


@pytest.mark.req("EXE-1", "EXE-3", "BURST-1", "BURST-3")
@pytest.mark.parametrize("key", EVERY_CASE)
def test_every_path_gives_the_same_results(driver, key):
    case, model, feeds, prepared = _prepared_case(driver, key)
    results = {}
    for path in PATHS:
        request = build_request(model, feeds)
        execute(prepared, request, path)
        results[path] = _raw_outputs(model, request, case)
    check_outputs(case.expected, results["sync"], model)
    for path in PATHS[1:]:
        for i, (a, b) in enumerate(zip(results["sync"], results[path], strict=True)):
            if not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
                pytest.fail(f"EXE-3: output {i} of the {path} path differs from the sync path")


@pytest.mark.req("EXE-3", "BURST-3")
def test_relaxed_model_gives_the_same_results_on_every_path(driver):
    """A model that allows float32 to be computed as float16: the driver may take that
    freedom, but the same request must give the same bits whichever path runs it."""
    model = _add_chain((4, 8), (4, 8))
    model.relax_computation_float32_to_float16 = True
    prepared = prepare_or_skip(driver, model)
    rng = np.random.default_rng(11)
    x, y = (rng.uniform(-3, 3, (4, 8)).astype(np.float32) for _ in range(2))
    results = {}
    for path in PATHS:
        request = build_request(model, [x, y])
        execute(prepared, request, path)
        results[path] = read_outputs(model, request, [(4, 8)])[0]
    check_outputs([_add_chain_golden(x, y)], [results["sync"]], model)
    for path in PATHS[1:]:
        if not np.array_equal(results["sync"], results[path], equal_nan=True):
            pytest.fail(f"EXE-3: the {path} path computes a relaxed model differently from the sync path")


@pytest.mark.req("EXE-3", "EXE-1")
@pytest.mark.parametrize("path", PATHS)
def test_consecutive_requests_each_get_their_own_results(driver, path):
    """Several different requests in a row on one prepared model, each checked on its own."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    rng = np.random.default_rng(1)
    for _ in range(4):
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(model, [x, y])
        execute(prepared, request, path)
        check_outputs([_add_chain_golden(x, y)], read_outputs(model, request, [(2, 3)]), model)


def _check_timing(timing: Timing, measured: bool, where: str, within_us: float | None = None) -> None:
    """EXE-7; ``within_us``: how long the whole call took, which no reported time can exceed."""
    if not measured:
        if timing != Timing():
            pytest.fail(f"EXE-7: {where}: timing {timing} reported when not measured (expected UINT64_MAX)")
        return
    dev, drv = timing.time_on_device, timing.time_in_driver
    if dev != NO_TIMING and drv != NO_TIMING and dev > drv:
        pytest.fail(f"EXE-7: {where}: timeOnDevice {dev} us > timeInDriver {drv} us")
    if within_us is not None:
        for what, t in (("timeOnDevice", dev), ("timeInDriver", drv)):
            if t != NO_TIMING and t > within_us + ROUNDING_US:
                pytest.fail(f"EXE-7: {where}: {what} {t} us is longer than the {within_us:.0f} us the whole "
                            f"call took (microseconds expected)")


@pytest.mark.req("BURST-1", "BURST-2", "BURST-3", "EXE-3")
def test_burst_slots_are_cached_and_released(driver):
    """One burst, several requests: a slot's memory is re-read on every run (new contents in
    the same pool), new slots take new pools, a slot stays known however many runs leave it
    out (until released), and a released slot id can name another pool."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst()
    rng = np.random.default_rng(7)
    feeds = [[rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2)] for _ in range(4)]

    def run(request, slots, x, y, what):
        shapes, _ = burst.execute(request, slots)
        assert [tuple(s.dimensions) for s in shapes] in ([(2, 3)], []), f"{what}: output shapes {shapes}"
        got = read_outputs(model, request, [(2, 3)])
        try:
            check_outputs([_add_chain_golden(x, y)], got, model)
        except pytest.fail.Exception as e:
            pytest.fail(f"BURST-2: {what}: {e}")

    first = build_request(model, feeds[0])
    run(first, [0, 1], *feeds[0], "first run")
    # Same memories, new input contents: the cached mapping must show the new bytes.
    second = build_request(model, feeds[1])
    first.pools[0].view()[:] = second.pools[0].view()
    run(first, [0, 1], *feeds[1], "second run on the same slots")
    third = build_request(model, feeds[2])
    run(third, [2, 3], *feeds[2], "run on new slots")
    for turn in range(3):  # slots 0 and 1 left out of several runs: still cached (BURST-2)
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        fresh = build_request(model, [x, y])
        third.pools[0].view()[:] = fresh.pools[0].view()
        run(third, [2, 3], x, y, f"run {turn + 2} on the new slots")
    try:
        burst.release_memory_resource(0)
        burst.release_memory_resource(1)
    except HalError as e:
        pytest.fail(f"BURST-2: releasing slots 0 and 1, last used four runs earlier, failed: {e}")
    run(build_request(model, feeds[3]), [0, 1], *feeds[3], "released slots given new memories")


@pytest.mark.req("EXE-7")
@pytest.mark.parametrize("path", [*PATHS, "burst-warm"])
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
@pytest.mark.parametrize("key", CASES[:12])
def test_timing(driver, key, path, measure):
    _case, model, feeds, prepared = _prepared_case(driver, key)
    for _ in range(3):
        request = build_request(model, feeds)
        began = time.monotonic()
        _, timing = execute(prepared, request, path, measure)
        took_us = (time.monotonic() - began) * 1e6
        _check_timing(timing, measure is MeasureTiming.YES, f"{path} execution", took_us)


@pytest.mark.req("EXE-7")
@pytest.mark.parametrize("path", [*PATHS, "burst-warm", "fenced-no-wait", "one-burst"])
def test_timing_follows_each_request(driver, path):
    """Timing asked, not asked, asked, not asked, on one prepared model of two operations (on
    the one-burst path, all four on one burst): each execution reports what it was asked for,
    nothing kept from the one before, and time in driver never below time on device however
    the model is split up."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    burst = prepared.configure_execution_burst() if path == "one-burst" else None
    rng = np.random.default_rng(5)
    for n, measure in enumerate([MeasureTiming.YES, MeasureTiming.NO] * 2):
        x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
        request = build_request(model, [x, y])
        began = time.monotonic()
        if burst is not None:
            _, timing = burst.execute(request, [2 * n, 2 * n + 1], measure)
        else:
            _, timing = execute(prepared, request, path, measure)
        took_us = (time.monotonic() - began) * 1e6
        asked = measure is MeasureTiming.YES
        _check_timing(timing, asked, f"{path} execution {n + 1} (timing {'asked' if asked else 'not asked'}, "
                                     f"a two-operation model)", took_us)


@pytest.mark.req("EXE-7", "EXE-5")
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
def test_failed_execution_reports_no_timing(driver, measure):
    _case, model, feeds, prepared = _prepared_case(driver, CASES[0].values[0])
    request = build_request(model, feeds, output_shrink={0: 1})
    result = prepared.execute(request, measure).wait(60)
    assert result.status is not ErrorStatus.NONE, "a too-small output buffer must fail"
    if result.timing != Timing():
        pytest.fail(f"EXE-7: failed execution reported timing {result.timing}")


# --- fenced executions: many wait-for fences, signalled late and out of order (EXE-1, EXE-8)

#: How long a fenced execution is watched while one of its wait-for fences is still unsignalled:
#: it cannot have run, so its fence signalled or its outputs written in this time is a failure.
#: A driver that does not wait shows it within milliseconds; a reference run never can.
HOLD_S = 0.25
#: Room for the rounding of microseconds (the driver's) against seconds (ours).
ROUNDING_US = 2
SENTINEL = 0xA5


def _fill_outputs(request) -> None:
    """Mark every output buffer, to tell whether the execution has written it yet."""
    for arg in request.outputs:
        loc = arg.location
        view = request.pools[loc.pool_index].view()
        view[loc.offset:loc.offset + loc.length] = bytes([SENTINEL]) * loc.length


def _outputs_untouched(request) -> bool:
    return all(bytes(request.pools[a.location.pool_index].view()[a.location.offset:a.location.offset
                                                                 + a.location.length])
               == bytes([SENTINEL]) * a.location.length for a in request.outputs)


def _signal_from_threads(fences, gap_s: float = 0.002) -> float:
    """Signal ``fences`` in that order, each from a thread of its own, ``gap_s`` apart; returns
    the time just before the last signal."""
    times: list[float] = []

    def signal(fence) -> None:
        times.append(time.monotonic())
        fence.signal()

    timers = [threading.Timer(k * gap_s, signal, (f,)) for k, f in enumerate(fences)]
    for t in timers:
        t.start()
    for t in timers:
        t.join()
    return max(times)


def _check_fenced_timing(info, measured: bool, called: float, returned: float, last_signal: float,
                         done: float) -> None:
    """EXE-7 and EXE-8 for a fenced execution called at ``called`` that returned at
    ``returned``, whose last wait-for fence was signalled at ``last_signal`` (``called`` when
    it had none to wait for) and whose own fence was seen signalled at ``done``. The driver's
    intervals lie within these, so the bounds are exact."""
    launched, fenced = info.timing_launched, info.timing_fenced
    if not measured:
        if launched != Timing() or fenced != Timing():
            pytest.fail(f"EXE-8: fenced execution reported timingLaunched {launched} and timingFenced "
                        f"{fenced} although not measured (expected UINT64_MAX)")
        return
    _check_timing(launched, True, "fenced timingLaunched")
    _check_timing(fenced, True, "fenced timingFenced")
    lau, fen = launched.time_in_driver, fenced.time_in_driver
    if lau != NO_TIMING:
        waited = (last_signal - returned) * 1e6
        assert lau + ROUNDING_US >= waited, \
            f"EXE-8: timingLaunched {lau} us leaves out the {waited:.0f} us wait for the fences"
        whole = (done - called) * 1e6
        assert lau <= whole + ROUNDING_US, \
            f"EXE-8: timingLaunched {lau} us is longer than the {whole:.0f} us from the call to its fence"
    if fen != NO_TIMING:
        after = (done - last_signal) * 1e6
        assert fen <= after + ROUNDING_US, \
            f"EXE-8: timingFenced {fen} us is longer than the {after:.0f} us from the last wait-for fence " \
            f"to the returned fence"
        if lau != NO_TIMING:
            assert fen <= lau, f"EXE-8: timingFenced {fen} us exceeds timingLaunched {lau} us"


def _seeded(request) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.mark.req("EXE-1", "EXE-8", "EXE-7")
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
@pytest.mark.parametrize(("count", "held"), [(1, 0), (4, 0), (6, 3), (8, 7)],
                         ids=["1-fence", "4-fences-first-last", "6-fences-middle-last", "8-fences-last-last"])
def test_fenced_execution_waits_for_every_fence(driver, request, count, held, measure):
    """``count`` wait-for fences, signalled after the call from other threads in a shuffled
    order, fence ``held`` last: until that one is signalled the execution must not run (its
    fence unsignalled, its outputs unwritten); then it gives the right outputs, and its
    timings span the wait (EXE-8)."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    rng = _seeded(request)
    x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    hal_request = build_request(model, [x, y])
    _fill_outputs(hal_request)
    fences = [SyncFence() for _ in range(count)]
    others = [fences[int(i)] for i in rng.permutation(count) if i != held]
    called = time.monotonic()
    returned, callback = prepared.execute_fenced(hal_request, fences, measure)
    returned_at = time.monotonic()
    assert returned is not None, \
        f"EXE-1: execute_fenced returned no fence (done already) although its {count} wait-for fences " \
        f"were unsignalled"
    if others:
        _signal_from_threads(others)
    if returned.wait(HOLD_S):
        pytest.fail(f"EXE-1: the fenced execution finished while wait-for fence {held} of {count} was "
                    f"still unsignalled")
    if not _outputs_untouched(hal_request):
        pytest.fail(f"EXE-1: the fenced execution wrote its outputs while wait-for fence {held} of "
                    f"{count} was still unsignalled")
    last = _signal_from_threads([fences[held]])
    wait_fence(returned)
    done = time.monotonic()
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE, \
        f"EXE-1: fenced execution failed: {info.status.name} {info.message}"
    try:
        check_outputs([_add_chain_golden(x, y)], read_outputs(model, hal_request, [(2, 3)]), model)
    except pytest.fail.Exception as e:
        pytest.fail(f"EXE-1: once its fence is signalled: {e}")
    _check_fenced_timing(info, measure is MeasureTiming.YES, called, returned_at, last, done)


@pytest.mark.req("EXE-1")
def test_fenced_execution_with_a_fence_listed_twice(driver, request):
    """A wait-for list may name one fence more than once (the runtime passes on what the app
    gave, and a fence merged with itself is still one fence): [f, g, f], signalled g then f,
    runs once f is signalled, and gives the right outputs."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    rng = _seeded(request)
    x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    hal_request = build_request(model, [x, y])
    f, g = SyncFence(), SyncFence()
    try:
        returned, callback = prepared.execute_fenced(hal_request, [f, g, f])
    except HalError as e:
        pytest.fail(f"EXE-1: a fenced execution waiting for [f, g, f] was refused: {e}")
    assert returned is not None, "EXE-1: execute_fenced returned no fence although its wait-for fences " \
                                 "were unsignalled"
    _signal_from_threads([g, f])
    wait_fence(returned)
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE, \
        f"EXE-1: a fenced execution waiting for [f, g, f] failed: {info.status.name} {info.message}"
    check_outputs([_add_chain_golden(x, y)], read_outputs(model, hal_request, [(2, 3)]), model)


@pytest.mark.req("EXE-8", "EXE-7", "EXE-1")
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
@pytest.mark.parametrize("wait", ["no-fence", "signalled", "late"])
@pytest.mark.parametrize("key", CASES[:4])
def test_fenced_timing(driver, key, wait, measure):
    """Both fenced timings on every form of the call: nothing to wait for (the driver may
    finish inside the call), a fence already signalled, a fence signalled late. Not measured:
    UINT64_MAX; measured: device <= driver time, timingFenced <= timingLaunched, and each
    within the time it covers."""
    case, model, feeds, prepared = _prepared_case(driver, key)
    hal_request = build_request(model, feeds)
    fences = {"no-fence": [], "signalled": [SyncFence.signalled()], "late": [SyncFence()]}[wait]
    called = time.monotonic()
    returned, callback = prepared.execute_fenced(hal_request, fences, measure)
    returned_at = time.monotonic()
    last = called
    if wait == "late":
        last = _signal_from_threads(fences)
    wait_fence(returned)
    done = time.monotonic()
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE, \
        f"EXE-1: fenced execution failed: {info.status.name} {info.message}"
    check_outputs(case.expected, _raw_outputs(model, hal_request, case), model)
    _check_fenced_timing(info, measure is MeasureTiming.YES, called, returned_at, last, done)


MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
#: The deadline of an execution waiting for a fence that is never signalled, and how soon
#: after it the execution must have given up (allowing for a busy machine and IPC).
FENCE_DEADLINE_S = 0.1
GIVEN_UP_WITHIN_S = 1.0


@pytest.mark.req("EXE-10", "EXE-1", "EXE-7")
def test_fenced_execution_misses_its_deadline_waiting_for_a_fence(driver):
    """Three wait-for fences, the middle one never signalled before the deadline: the
    execution gives up with MISSED_DEADLINE_* (never a hang), signals its fence, reports no
    timing (a failed run, EXE-7), has not written its outputs, and does not run later when the
    fence is signalled after all; the prepared model's next fenced execution then runs."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    hal_request = build_request(model, [np.ones((2, 3), np.float32)] * 2)
    _fill_outputs(hal_request)
    never = SyncFence()
    started = time.monotonic()
    info = run_fenced(prepared, hal_request, [SyncFence.signalled(), never, SyncFence.signalled()],
                      MeasureTiming.YES, deadline=time.monotonic_ns() + int(FENCE_DEADLINE_S * 1e9))
    elapsed = time.monotonic() - started
    assert info.status in MISSED, \
        f"EXE-10: a fenced execution whose wait-for fence is never signalled gave {info.status.name} " \
        f"past its deadline, expected MISSED_DEADLINE_*"
    assert elapsed < FENCE_DEADLINE_S + GIVEN_UP_WITHIN_S, \
        f"EXE-10: the fenced execution gave up {elapsed:.2f} s after the call, its deadline was " \
        f"{FENCE_DEADLINE_S} s"
    assert info.timing_launched == Timing() and info.timing_fenced == Timing(), \
        f"EXE-7: a failed fenced execution reported timings {info.timing_launched}, {info.timing_fenced}"
    assert _outputs_untouched(hal_request), "EXE-1: a fenced execution that missed its deadline wrote outputs"
    never.signal()
    time.sleep(HOLD_S)
    assert _outputs_untouched(hal_request), \
        "EXE-1: a fenced execution ran once its fence was signalled, after it had failed"
    # The miss belongs to that execution: the prepared model's next fenced one runs.
    x, y = np.full((2, 3), 0.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    again = build_request(model, [x, y])
    info = run_fenced(prepared, again, [SyncFence.signalled()])
    assert info.status is ErrorStatus.NONE, \
        f"EXE-10: the next fenced execution of a prepared model whose last one missed its deadline " \
        f"gave {info.status.name}"
    check_outputs([_add_chain_golden(x, y)], read_outputs(model, again, [(2, 3)]), model)


@pytest.mark.req("EXE-1", "EXE-10")
def test_fenced_execution_with_a_timeout_after_its_fences(driver):
    """``timeout_after_fence`` is a duration (ns) counted from the last wait-for fence: a
    generous one (10 s) does not fail a short execution whose fence is signalled late."""
    model = _add_chain((2, 3), (2, 3))
    prepared = prepare_or_skip(driver, model)
    x, y = np.full((2, 3), 0.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    hal_request = build_request(model, [x, y])
    fence = SyncFence()
    returned, callback = prepared.execute_fenced(hal_request, [fence], MeasureTiming.NO,
                                                 timeout_after_fence=10_000_000_000)
    _signal_from_threads([fence])
    info = fenced_info(returned, callback)
    assert info.status is ErrorStatus.NONE, \
        f"EXE-1: a fenced execution with a 10 s timeout after its fence gave {info.status.name}"
    check_outputs([_add_chain_golden(x, y)], read_outputs(model, hal_request, [(2, 3)]), model)


@pytest.mark.req("EXE-5")
@pytest.mark.parametrize("path", ["sync", "async", "burst"])
@pytest.mark.parametrize("variation", ["base", "dynamic_output"])
@pytest.mark.parametrize("key", CASES[:12])
def test_output_insufficient_size(driver, key, path, variation):
    case, model, feeds, prepared = _prepared_case(driver, key, variation)
    if case.expected[0].nbytes <= 1:
        pytest.skip("output 0 is a single byte")
    expected_dims = [tuple(e.shape) for e in case.expected]
    request = build_request(model, feeds, expected_dims, output_shrink={0: 1})
    with pytest.raises(HalError) as info:
        execute(prepared, request, path)
    err = info.value
    assert err.status is ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"EXE-5: got {err.status.name}"
    assert len(err.output_shapes) == len(case.expected), "EXE-5: one shape per output"
    assert not err.output_shapes[0].is_sufficient, "EXE-5: output 0 must be marked insufficient"
    for i, (shape, want) in enumerate(zip(err.output_shapes, expected_dims, strict=True)):
        if i:
            assert shape.is_sufficient, f"EXE-5: output {i} wrongly marked insufficient"
        got = tuple(shape.dimensions)
        assert len(got) == len(want) and all(g in (0, w) for g, w in zip(got, want, strict=True)), \
            f"EXE-5: output {i} shape {list(got)}, expected {list(want)} (0 where unknown)"


@pytest.mark.req("EXE-5", "EXE-1", "EXE-7")
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
def test_fenced_execution_rejects_insufficient_outputs(driver, measure):
    """Failed, with or without fences to wait for: no timing either (EXE-7)."""
    _case, model, feeds, prepared = _prepared_case(driver, CASES[0].values[0])
    for wait_for in ([], [SyncFence.signalled()]):
        request = build_request(model, feeds, output_shrink={0: 1})
        info = run_fenced(prepared, request, wait_for, measure)
        assert info.status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE), \
            f"EXE-5: a fenced execution with a too-small output gave {info.status.name}"
        assert info.timing_launched == Timing() and info.timing_fenced == Timing(), \
            f"EXE-7: a failed fenced execution reported timings {info.timing_launched}, {info.timing_fenced}"


@pytest.mark.req("MEM-1", "MEM-2", "MEM-3", "EXE-2")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", [c for c in CASES if c.id.split("-")[0] in
                                 ("CONV_2D", "FULLY_CONNECTED", "ADD", "CONCATENATION", "GATHER")])
def test_memory_pool_kinds(driver, key, kind):
    run_case(driver, sample_case(*key), pool_kind=kind)


@pytest.mark.req("DRV-4")
def test_interleaved_prepared_models(driver):
    keys = [c.values[0] for c in CASES[:2]]
    prepared = [_prepared_case(driver, k) for k in keys]
    for _ in range(2):
        for case, model, feeds, p in prepared:
            request = build_request(model, feeds)
            execute(p, request, "sync")
            check_outputs(case.expected, _raw_outputs(model, request, case), model)
    del prepared


@pytest.mark.req("EXE-3", "VAL-1")
@pytest.mark.parametrize("path", PATHS)
def test_omitted_input_on_every_path(driver, path):
    """TRANSPOSE(x, perm) with perm a model input the request omits (has_no_value: an optional
    input, which TRANSPOSE takes as the reversed dimensions): every path runs it and gives
    x transposed (an omission is part of the request on the async, fenced and burst paths too)."""
    b = ModelBuilder()
    x, perm, out = b.operand(T.TENSOR_FLOAT32, (2, 3)), b.operand(T.TENSOR_INT32, (2,)), \
        b.operand(T.TENSOR_FLOAT32, (3, 2))
    b.operation(OperationType.TRANSPOSE, [x, perm], [out])
    model = b.build([x, perm], [out])
    prepared = prepare_or_skip(driver, model)
    value = np.random.default_rng(14).uniform(-2, 2, (2, 3)).astype(np.float32)
    request = build_request(model, [value, np.array([1, 0], np.int32)], omitted_inputs=[1])
    try:
        execute(prepared, request, path)
    except HalError as e:
        pytest.fail(f"EXE-3: a {path} execution with TRANSPOSE's optional perm omitted failed: {e}")
    check_outputs([value.T], read_outputs(model, request, [(3, 2)]), model)


@pytest.mark.req("DRV-4", "DRV-5")
@pytest.mark.parametrize("released", ["first", "second"])
def test_prepared_models_of_one_model_outlive_each_other(driver, released):
    """Two prepared models of the same model are two prepared models: releasing either (all
    references dropped, collected) leaves the other running right on every path (a driver
    that shares one compiled object between them must count its users)."""
    case, model, feeds, first = _prepared_case(driver, CASES[0].values[0])
    pair = [first, prepare_or_skip(driver, model)]
    kept = pair[1] if released == "first" else pair[0]
    del first, pair
    gc.collect()
    for path in PATHS:
        request = build_request(model, feeds)
        try:
            execute(kept, request, path)
        except HalError as e:
            pytest.fail(f"DRV-5: once the {released} of two prepared models of one model was released, "
                        f"a {path} execution of the other failed: {e}")
        check_outputs(case.expected, _raw_outputs(model, request, case), model)


def _add_chain(dims_model, dims_internal):
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, dims_model)
    y = b.operand(T.TENSOR_FLOAT32, dims_model)
    act = b.constant(T.INT32, 0)
    mid = b.operand(T.TENSOR_FLOAT32, dims_internal)
    out = b.operand(T.TENSOR_FLOAT32, dims_internal)
    b.operation(OperationType.ADD, [x, y, act], [mid])
    b.operation(OperationType.ADD, [mid, y, act], [out])
    return b.build([x, y], [out])


def _add_chain_golden(x, y):
    return ((x.astype(np.float32) + y).astype(np.float32) + y).astype(np.float32)


@pytest.mark.req("DRV-3", "EXE-4", "EXE-6")
def test_unknown_dimensions_at_compile_time(driver):
    """Inputs and internal operands of unknown dimensions: shapes come with the request."""
    model = _add_chain((0, 3), (0, 0))
    prepared = prepare_or_skip(driver, model)
    rng = np.random.default_rng(0)
    for rows in (1, 4):
        x = rng.uniform(-2, 2, (rows, 3)).astype(np.float32)
        y = rng.uniform(-2, 2, (rows, 3)).astype(np.float32)
        request = build_request(model, [x, y], [(rows, 3)])
        shapes, _ = execute(prepared, request, "sync")
        assert [tuple(s.dimensions) for s in shapes] == [(rows, 3)], "EXE-4: wrong output shape"
        check_outputs([_add_chain_golden(x, y)], read_outputs(model, request, [(rows, 3)]), model)


@pytest.mark.req("EXE-4", "EXE-1", "EXE-3")
@pytest.mark.parametrize("path", [p for p in PATHS if p != "fenced"])
@pytest.mark.parametrize("rank", ["known", "unknown"])
def test_dynamic_output_shapes_on_every_path(driver, path, rank):
    """An output of unknown dimensions (0, 0), or of unknown rank, gets its actual shape back
    on every path that reports shapes (a fenced execution reports none), rank included."""
    model = _add_chain((2, 3), (0, 0) if rank == "known" else ())
    prepared = prepare_or_skip(driver, model)
    rng = np.random.default_rng(3)
    x, y = (rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2))
    request = build_request(model, [x, y], [(2, 3)])
    shapes, _ = execute(prepared, request, path)
    got = [tuple(s.dimensions) for s in shapes]
    declared = list(model.main.operands[model.main.output_indexes[0]].dimensions)
    assert got == [(2, 3)], \
        f"EXE-4: the {path} path reported output shapes {got} for a (2, 3) output declared {declared}"
    check_outputs([_add_chain_golden(x, y)], read_outputs(model, request, [(2, 3)]), model)


@pytest.mark.req("EXE-6", "VAL-1")
@pytest.mark.parametrize("rows", [1, 2])
def test_input_without_shape_at_execution_is_invalid(driver, rows):
    """An input of unknown dimensions given none by the request: invalid, even when its buffer
    holds exactly one row (a driver that takes an unknown dimension for 1 runs that one)."""
    model = _add_chain((0, 3), (0, 0))
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, [np.zeros((rows, 3), np.float32)] * 2, [(rows, 3)])
    request.inputs[0].dimensions = ()
    expect_invalid(lambda: execute(prepared, request, "sync"),
                   f"an execution whose input of dimensions (0, 3) is given none ({rows} row(s) in its "
                   f"buffer)",
                   "EXE-6")


def _lookup_model(op: str):
    """GATHER (axis 0) or EMBEDDING_LOOKUP of 2 indices, a request input, into a [4, 3] table."""
    b = ModelBuilder()
    indices = b.operand(T.TENSOR_INT32, (2,))
    table = b.operand(T.TENSOR_FLOAT32, (4, 3))
    out = b.operand(T.TENSOR_FLOAT32, (2, 3))
    if op == "GATHER":
        b.operation(OperationType.GATHER, [table, b.constant(T.INT32, 0), indices], [out])
    else:
        b.operation(OperationType.EMBEDDING_LOOKUP, [indices, table], [out])
    return b.build([indices, table], [out])


@pytest.mark.req("VAL-1")
@pytest.mark.parametrize("index", [4, -1, 2**31 - 1])
@pytest.mark.parametrize("op", ["GATHER", "EMBEDDING_LOOKUP"])
def test_a_lookup_index_out_of_range_fails(driver, op, index):
    """A lookup index the request gives outside the table's 4 rows fails the execution, on
    every path (the reference refuses it with INVALID_ARGUMENT), rather than read past the
    table, take -1 for the last row or give zeros; in range, the rows come out."""
    model = _lookup_model(op)
    prepared = prepare_or_skip(driver, model)
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    request = build_request(model, [np.array([3, 0], np.int32), table], [(2, 3)])
    execute(prepared, request, "sync")
    check_outputs([table[[3, 0]]], read_outputs(model, request, [(2, 3)]), model)
    for path in PATHS:
        request = build_request(model, [np.array([1, index], np.int32), table], [(2, 3)])
        status = status_of(lambda r=request, p=path: execute(prepared, r, p))
        assert status is not ErrorStatus.NONE, \
            f"VAL-1: {op} of index {index} in a table of 4 rows succeeded on the {path} path"
