"""Execution paths, timing, output shapes, memory pools and driver lifecycle (EXE, MEM, DRV)."""

from __future__ import annotations

import threading
import time

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
from nncert.testing.harness import PATHS, check_outputs, execute, prepare_or_skip, run_case, wait_fence

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


def _check_timing(timing: Timing, measured: bool, where: str) -> None:
    if not measured:
        if timing != Timing():
            pytest.fail(f"EXE-7: {where}: timing {timing} reported when not measured (expected UINT64_MAX)")
        return
    dev, drv = timing.time_on_device, timing.time_in_driver
    if dev != NO_TIMING and drv != NO_TIMING and dev > drv:
        pytest.fail(f"EXE-7: {where}: timeOnDevice {dev} us > timeInDriver {drv} us")


@pytest.mark.req("BURST-1", "BURST-2", "BURST-3", "EXE-3")
def test_burst_slots_are_cached_and_released(driver):
    """One burst, several requests: a slot's memory is re-read on every run (new contents in
    the same pool), new slots take new pools, and a released slot id can name another pool."""
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
    run(build_request(model, feeds[2]), [2, 3], *feeds[2], "run on new slots")
    burst.release_memory_resource(0)
    burst.release_memory_resource(1)
    run(build_request(model, feeds[3]), [0, 1], *feeds[3], "released slots given new memories")


@pytest.mark.req("EXE-7")
@pytest.mark.parametrize("path", ["sync", "async", "burst"])
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
@pytest.mark.parametrize("key", CASES[:12])
def test_timing(driver, key, path, measure):
    _case, model, feeds, prepared = _prepared_case(driver, key)
    for _ in range(3):
        request = build_request(model, feeds)
        _, timing = execute(prepared, request, path, measure)
        _check_timing(timing, measure is MeasureTiming.YES, f"{path} execution")


@pytest.mark.req("EXE-7", "EXE-5")
@pytest.mark.parametrize("measure", [MeasureTiming.NO, MeasureTiming.YES], ids=["off", "on"])
def test_failed_execution_reports_no_timing(driver, measure):
    _case, model, feeds, prepared = _prepared_case(driver, CASES[0].values[0])
    request = build_request(model, feeds, output_shrink={0: 1})
    result = prepared.execute(request, measure).wait(60)
    assert result.status is not ErrorStatus.NONE, "a too-small output buffer must fail"
    if result.timing != Timing():
        pytest.fail(f"EXE-7: failed execution reported timing {result.timing}")


@pytest.mark.req("EXE-8", "EXE-1", "EXE-7")
def test_fenced_execution_waits_for_its_fences_and_times_them(driver):
    case, model, feeds, prepared = _prepared_case(driver, CASES[0].values[0])
    fence = SyncFence()
    request = build_request(model, feeds)
    signalled_at: list[float] = []

    def signal() -> None:
        signalled_at.append(time.monotonic())
        fence.signal()

    threading.Timer(0.05, signal).start()
    returned, callback = prepared.execute_fenced(request, [fence], MeasureTiming.YES)
    returned_at = time.monotonic()
    wait_fence(returned)
    done_at = time.monotonic()
    assert signalled_at and done_at >= signalled_at[0], "EXE-1: the execution did not wait for its fence"
    # The driver was called before returned_at and could not finish before the signal.
    waited = max(0.0, signalled_at[0] - returned_at)
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE, f"fenced execution failed: {info.message}"
    check_outputs(case.expected, _raw_outputs(model, request, case), model)
    launched, fenced = info.timing_launched, info.timing_fenced
    _check_timing(launched, True, "fenced timingLaunched")
    _check_timing(fenced, True, "fenced timingFenced")
    if launched.time_in_driver != NO_TIMING:
        assert launched.time_in_driver >= waited * 0.99e6, \
            f"EXE-8: timingLaunched {launched.time_in_driver} us excludes the {waited * 1e6:.0f} us wait"
        if fenced.time_in_driver != NO_TIMING:
            assert fenced.time_in_driver <= launched.time_in_driver, \
                "EXE-8: timingFenced must not exceed timingLaunched"


@pytest.mark.req("EXE-8", "EXE-7")
def test_fenced_execution_without_measurement_reports_no_timing(driver):
    _case, model, feeds, prepared = _prepared_case(driver, CASES[0].values[0])
    fence, callback = prepared.execute_fenced(build_request(model, feeds), [SyncFence.signalled()],
                                              MeasureTiming.NO)
    wait_fence(fence)
    info = callback.get_execution_info()
    assert info.status is ErrorStatus.NONE, f"fenced execution failed: {info.message}"
    assert info.timing_launched == Timing() and info.timing_fenced == Timing(), \
        "EXE-8: fenced timings reported although not measured"


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


@pytest.mark.req("EXE-5", "EXE-1")
def test_fenced_execution_rejects_insufficient_outputs(driver):
    _case, model, feeds, prepared = _prepared_case(driver, CASES[0].values[0])
    for wait_for in ([], [SyncFence.signalled()]):
        request = build_request(model, feeds, output_shrink={0: 1})
        try:
            fence, callback = prepared.execute_fenced(request, wait_for, MeasureTiming.NO)
        except HalError as e:
            status = e.status
        else:
            wait_fence(fence)
            status = callback.get_execution_info().status
        assert status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE), \
            f"EXE-5: a fenced execution with a too-small output gave {status.name}"


@pytest.mark.req("MEM-1", "MEM-2", "MEM-3", "EXE-2")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", [c for c in CASES if c.id.split("-")[0] in
                                 ("CONV_2D", "FULLY_CONNECTED", "ADD", "CONCATENATION", "GATHER")])
def test_memory_pool_kinds(driver, key, kind):
    run_case(driver, sample_case(*key), pool_kind=kind)


@pytest.mark.req("DRV-1")
def test_device_queries_are_stable(driver):
    first = (driver.capabilities(), driver.version_string(), driver.type(),
             driver.supported_extensions(), driver.number_of_cache_files_needed())
    for _ in range(3):
        again = (driver.capabilities(), driver.version_string(), driver.type(),
                 driver.supported_extensions(), driver.number_of_cache_files_needed())
        assert again == first, "DRV-1: a device query changed between calls"


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


@pytest.mark.req("EXE-6", "VAL-1")
def test_input_without_shape_at_execution_is_invalid(driver):
    model = _add_chain((0, 3), (0, 0))
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, [np.zeros((2, 3), np.float32)] * 2, [(2, 3)])
    request.inputs[0].dimensions = ()
    with pytest.raises(HalError) as info:
        execute(prepared, request, "sync")
    assert info.value.status is ErrorStatus.INVALID_ARGUMENT
