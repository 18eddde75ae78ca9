"""Driver lifecycle (DRV-1, DRV-5, DRV-6): device queries that give the same answer whatever
the driver has done, resources that come back to their level once prepared models and bursts
are released, and a first execution that is not much slower than the later ones.

The checks that are about what a driver does at its first preparation or execution run on a
new instance of the driver under test (a new service for a hosted one): the session's driver
has done that work long before."""

from __future__ import annotations

import dataclasses
import gc
import os
import secrets
import statistics
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.drivers.base import Driver, PreparedModel, process_resources
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import BufferDesc, BufferRole, Model
from nncert.hal.types import DeviceType, OperandType, OperationType
from nncert.ops import get
from nncert.testing.cases import sample_case
from nncert.testing.harness import (
    PATHS,
    add_model,
    check_outputs,
    declined,
    execute,
    prepare_claimed,
)

T = OperandType


def _new_driver(config: pytest.Config) -> Driver:
    """A new instance of the driver under test (a new service for a hosted one)."""
    from nncert.pytest_plugin import _driver_options

    return load_driver(config.getoption("driver"), _driver_options(config))


@pytest.fixture
def fresh_driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    """A new instance of the driver under test, closed after the test."""
    fresh = _new_driver(request.config)
    try:
        yield fresh
    finally:
        fresh.close()


# -- DRV-1: the device queries ----------------------------------------------------------------

def _queries(driver: Driver) -> dict[str, object]:
    """The answer of every device query of DRV-1, by query."""
    return {"capabilities": driver.capabilities(), "version string": driver.version_string(),
            "type": driver.type(), "supported extensions": list(driver.supported_extensions()),
            "number of cache files": tuple(driver.number_of_cache_files_needed()),
            "feature level": driver.feature_level}


def _difference(name: str, a: object, b: object) -> list[str]:
    """Where ``a`` and ``b`` differ, field by field (a Capabilities holds dozens of figures)."""
    if a == b:
        return []
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        return [d for f in dataclasses.fields(a)
                for d in _difference(f"{name}.{f.name}", getattr(a, f.name), getattr(b, f.name))]
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in dict.fromkeys([*a, *b])
                for d in _difference(f"{name}[{getattr(k, 'name', k)}]", a.get(k), b.get(k))]
    return [f"{name}: {a!r} -> {b!r}"]


def _same_queries(first: dict[str, object], now: dict[str, object], when: str) -> None:
    changed = [d for k in first for d in _difference(k, first[k], now[k])]
    if changed:
        more = f" (and {len(changed) - 5} more)" if len(changed) > 5 else ""
        pytest.fail(f"DRV-1: {when}, a device query gives another answer: {'; '.join(changed[:5])}{more}")


@pytest.mark.req("DRV-1")
def test_capabilities_are_valid(driver):
    """NNAPI's capability validation: every performance figure (per operand type, relaxed
    float32 scalar and tensor, IF, WHILE) has an execution time and a power usage above 0
    (NaN is not), and the per-type table is keyed by operand types."""
    caps = driver.capabilities()
    figures = {"relaxed float32 scalar": caps.relaxed_float32_to_float16_performance_scalar,
               "relaxed float32 tensor": caps.relaxed_float32_to_float16_performance_tensor,
               "IF": caps.if_performance, "WHILE": caps.while_performance,
               **{f"operand type {getattr(t, 'name', t)}": p for t, p in caps.operand_performance.items()}}
    bad = [f"{name}: exec_time {p.exec_time!r}, power_usage {p.power_usage!r}" for name, p in figures.items()
           if not (p.exec_time > 0 and p.power_usage > 0)]
    bad += [f"{t!r} is no operand type" for t in caps.operand_performance if not isinstance(t, OperandType)]
    if bad:
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        pytest.fail(f"DRV-1: capabilities() reports invalid performance: {'; '.join(bad[:5])}{more}")


#: The most model or data cache files a driver may ask for (the HAL's MAX_NUMBER_OF_CACHE_FILES).
MAX_CACHE_FILES = 32


@pytest.mark.req("DRV-1", "CACHE-2")
def test_device_type_version_and_cache_file_counts_are_valid(driver):
    """The VTS's basic checks of getType, getVersionString and getNumberOfCacheFilesNeeded:
    the type is one of OTHER, CPU, GPU and ACCELERATOR (UNKNOWN, 0, is the runtime's own
    placeholder, never a driver's answer), the version string is not empty, and each count of
    cache files is an integer from 0 to MAX_CACHE_FILES."""
    version = driver.version_string()
    assert isinstance(version, str) and version, \
        f"DRV-1: version_string() gave {version!r}, not a non-empty string"
    kind = driver.type()
    assert isinstance(kind, DeviceType) and kind in DeviceType, \
        f"DRV-1: type() gave {kind!r}, not one of {', '.join(t.name for t in DeviceType)}"
    counts = tuple(driver.number_of_cache_files_needed())
    assert len(counts) == 2 and all(isinstance(n, int) and 0 <= n <= MAX_CACHE_FILES for n in counts), \
        f"CACHE-2: number_of_cache_files_needed() gave {counts!r}, not two counts from 0 to {MAX_CACHE_FILES}"


@pytest.mark.req("DRV-1")
def test_device_queries_are_stable(driver):
    first = _queries(driver)
    for _ in range(3):
        _same_queries(first, _queries(driver), "asked again at once")


def _cache_files(driver: Driver, directory) -> tuple[list[int], list[int]]:
    """Fresh cache files, opened read-write as the runtime opens them (CACHE-2)."""
    n_model, n_data = driver.number_of_cache_files_needed()
    tag = secrets.token_hex(4)
    fds = [os.open(directory / f"cache-{tag}-{i}", os.O_RDWR | os.O_CREAT, 0o600)
           for i in range(n_model + n_data)]
    return fds[:n_model], fds[n_model:]


@pytest.mark.req("DRV-1")
def test_device_queries_are_stable_across_work(driver, fresh_driver, tmp_path):
    """A new instance is asked every query before any work, then again after each step of a
    model's life: supported_operations, the first preparation, an execution on every path, a
    burst kept alive, a preparation that writes the compilation cache and one from it (where
    the driver caches), a buffer's allocation (where it has memory domains), and the release of
    every prepared model and buffer. Every answer must stay the first one, and equal the session's
    driver's after all its work."""
    model = add_model()
    first = _queries(fresh_driver)
    reason = declined(fresh_driver, model)
    _same_queries(first, _queries(fresh_driver), "after supported_operations")
    if reason:
        pytest.skip(reason)
    prepared = [prepare_claimed(fresh_driver, model)]
    _same_queries(first, _queries(fresh_driver), "after the first preparation")
    feeds = _add_feeds()
    for path in PATHS:
        request = build_request(model, feeds)
        execute(prepared[0], request, path)
        check_outputs([feeds[0] + feeds[1]], read_outputs(model, request, [(2, 3)]), model)
        _same_queries(first, _queries(fresh_driver), f"after a {path} execution")
    for what, call in _failing_calls(fresh_driver, model, prepared[0]):
        try:
            call()  # type: ignore[operator]
        except HalError:
            pass  # that it fails is test_failed_calls_free_their_resources's business
        _same_queries(first, _queries(fresh_driver), f"after a failed call ({what})")
    burst = prepared[0].configure_execution_burst()  # the device in its burst state (BURST-1)
    request = build_request(model, feeds)
    burst.execute(request, list(range(len(request.pools))))
    _same_queries(first, _queries(fresh_driver), "while a burst is alive")
    del burst
    if tuple(fresh_driver.number_of_cache_files_needed()) != (0, 0):
        token = secrets.token_bytes(32)
        model_fds, data_fds = _cache_files(fresh_driver, tmp_path)
        try:
            prepared.append(fresh_driver.prepare_model(model, model_cache=model_fds, data_cache=data_fds,
                                                       token=token))
            _same_queries(first, _queries(fresh_driver), "after a preparation that wrote the cache")
            for fd in model_fds + data_fds:
                os.lseek(fd, 0, os.SEEK_SET)
            try:
                prepared.append(fresh_driver.prepare_model_from_cache(None, model_fds, data_fds, token))
            except HalError:
                pass  # whether the cache is taken is test_caching's business, not DRV-1's
            _same_queries(first, _queries(fresh_driver), "after a preparation from the cache")
            for fd in model_fds + data_fds:
                os.lseek(fd, 0, os.SEEK_SET)
            try:  # a token the driver never saved: a preparation from cache that must fail
                fresh_driver.prepare_model_from_cache(None, model_fds, data_fds, secrets.token_bytes(32))
            except HalError:
                pass
            _same_queries(first, _queries(fresh_driver), "after a failed preparation from the cache")
        finally:
            for fd in model_fds + data_fds:
                os.close(fd)
        execute(prepared[-1], build_request(model, feeds), "sync")
    try:
        buffer = fresh_driver.allocate(BufferDesc((2, 3)), prepared[:1], [BufferRole(0, 0)], [])
    except HalError:
        pass  # memory domains are optional (MEM-4)
    else:
        _same_queries(first, _queries(fresh_driver), "after a buffer was allocated")
        del buffer
    del prepared
    gc.collect()
    _same_queries(first, _queries(fresh_driver), "after the prepared models were released")
    _same_queries(first, _queries(driver), "on the session's driver, after all its work (against a new "
                                           "instance's answers)")


def _add_feeds() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.uniform(-2, 2, (2, 3)).astype(np.float32) for _ in range(2)]


# -- DRV-5: releasing frees -------------------------------------------------------------------

#: Prepared models the DRV-5 check makes and releases (``_life``).
RELEASED = 50
#: The weights each model holds: 2 MiB of float32.
WEIGHTS_SHAPE = (512, 1024)
#: How far a figure may stay above its level once everything is released: a runtime may open
#: a few descriptors and threads once for good (a connection, a worker pool), and an allocator
#: keeps some freed memory (up to ~40 MiB seen with ONNX Runtime); one descriptor or thread per
#: model or burst, or the models' 100 MiB of constants, is far beyond. Objects of the driver
#: still alive: none.
SLACK = {"descriptors": 8, "threads": 4, "memory_kib": 64 * 1024, "live": 0}
#: Seconds the figures are given to come back (threads and service workers end on their own).
SETTLE_S = 5.0


def _slack(name: str) -> int:
    for key, slack in SLACK.items():
        if key in name:
            return slack
    return 0


def _held(driver: Driver) -> dict[str, int]:
    gc.collect()
    return process_resources() | driver.held_resources()


def _excess(before: dict[str, int], driver: Driver) -> dict[str, tuple[int, int]]:
    """The figures above their level plus slack, as (before, now); waits up to SETTLE_S."""
    give_up = time.monotonic() + SETTLE_S
    while True:
        now = _held(driver)
        over = {k: (v, now[k]) for k, v in before.items() if k in now and now[k] > v + _slack(k)}
        if not over or time.monotonic() > give_up:
            return over
        time.sleep(0.05)


def _constant_model() -> Model:
    """A FULLY_CONNECTED layer whose weights are a 2 MiB constant (in a shared-memory pool),
    so that what a prepared model holds shows, and small requests."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (1, WEIGHTS_SHAPE[1]))
    weights = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, WEIGHTS_SHAPE).astype(np.float32))
    bias = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, WEIGHTS_SHAPE[0]).astype(np.float32))
    out = b.operand(T.TENSOR_FLOAT32, (1, WEIGHTS_SHAPE[0]))
    b.operation(OperationType.FULLY_CONNECTED, [x, weights, bias, b.constant(T.INT32, 0)], [out])
    return b.build([x], [out])


def _life(driver: Driver, model: Model, feeds: list[np.ndarray], n: int, refs: list[weakref.ref] | None,
          buffers: bool, cache_dir: Path | None) -> None:
    """The ``n``-th prepared model's life: prepared (every other one writing the compilation
    cache, where the driver caches, and every other of those then prepared again from that
    cache), a burst configured, an execution on path ``n`` (in turn; the burst path on that
    burst), a buffer allocated where the driver has memory domains; then all dropped."""
    if cache_dir is not None and n % 2:
        model_fds, data_fds = _cache_files(driver, cache_dir)
        token = secrets.token_bytes(32)
        try:
            prepared = driver.prepare_model(model, model_cache=model_fds, data_cache=data_fds, token=token)
            if n % 4 == 3:
                del prepared
                prepared = driver.prepare_model_from_cache(None, model_fds, data_fds, token)
        finally:
            for fd in model_fds + data_fds:
                os.close(fd)
    else:
        prepared = prepare_claimed(driver, model)
    burst = prepared.configure_execution_burst()
    request = build_request(model, feeds)
    path = PATHS[n % len(PATHS)]
    if path == "burst":
        burst.execute(request, list(range(len(request.pools))))
    else:
        execute(prepared, request, path)
    held: list[object] = [prepared, burst]
    if buffers:
        held.append(driver.allocate(_desc(), [prepared], [BufferRole(0, 0)], [])[0])
    if refs is not None:
        for obj in held:
            try:
                refs.append(weakref.ref(obj))
            except TypeError:  # a class without weak references: the figures still count it
                pass


def _desc() -> BufferDesc:
    return BufferDesc((1, WEIGHTS_SHAPE[1]))


def _has_memory_domains(driver: Driver, model: Model) -> bool:
    prepared = prepare_claimed(driver, model)
    try:
        driver.allocate(_desc(), [prepared], [BufferRole(0, 0)], [])
    except HalError:
        return False
    return True


@pytest.mark.req("DRV-5")
def test_released_models_free_their_resources(driver, tmp_path):
    """RELEASED prepared models, each with a burst, an execution and a buffer, half of them
    written to the compilation cache (and half of those prepared from it again), are made and
    released; then none of them may be alive
    (weak references die once the last reference is dropped), and the process's descriptors,
    threads and memory, and for a hosted driver its service's, together with the hosted
    driver's live prepared models, bursts and buffers (the service's ``stats``), must come
    back to their level (SLACK)."""
    model = _constant_model()
    reason = declined(driver, model)
    if reason:
        pytest.skip(reason)
    feeds = [np.random.default_rng(4).uniform(-1, 1, (1, WEIGHTS_SHAPE[1])).astype(np.float32)]
    buffers = _has_memory_domains(driver, model)
    cache_dir = tmp_path if tuple(driver.number_of_cache_files_needed()) != (0, 0) else None
    for n in range(2):  # what a runtime sets up once for good
        _life(driver, model, feeds, n, None, buffers, cache_dir)
    before = _held(driver)
    refs: list[weakref.ref] = []
    for n in range(RELEASED):
        _life(driver, model, feeds, n, refs, buffers, cache_dir)
    over = _excess(before, driver)
    alive = sorted({type(r()).__name__ for r in refs if r() is not None})
    kept = sum(r() is not None for r in refs)
    assert not alive, f"DRV-5: {kept} released objects are still alive ({', '.join(alive)}): " \
                      f"the driver keeps references to what it handed back"
    assert not over, "DRV-5: after releasing {} prepared models with their bursts and buffers, {}".format(
        RELEASED, "; ".join(f"{k} went from {a} to {b} (slack {_slack(k)})" for k, (a, b) in over.items()))


#: Rounds of the DRV-5 check of failed calls: each fails two preparations and one execution per
#: path. A descriptor or thread left behind by a failure shows as FAILED_ROUNDS of them or more,
#: beyond SLACK.
FAILED_ROUNDS = 25


def _failing_calls(driver: Driver, model: Model, prepared: PreparedModel) -> list[tuple[str, object]]:
    """(what, call) of calls that must fail: preparing an invalid model (an operation reads an
    operand that does not exist) and a valid one with a deadline a second past; executing a
    request whose output buffer is a byte short, on every path."""
    invalid = model.copy()
    invalid.main.operations[0].inputs[0] = len(invalid.main.operands) + 5
    feeds = _add_feeds()
    calls: list[tuple[str, object]] = [
        ("prepare_model of an invalid model", lambda: driver.prepare_model(invalid)),
        ("prepare_model with a past deadline",
         lambda: driver.prepare_model(model, deadline=time.monotonic_ns() - 1_000_000_000)),
    ]
    for path in PATHS:
        calls.append((f"{path} execution with a too-small output",
                      lambda p=path: execute(prepared, build_request(model, feeds, output_shrink={0: 1}), p)))
    return calls


@pytest.mark.req("DRV-5")
def test_failed_calls_free_their_resources(driver):
    """Calls that fail leave nothing behind either: FAILED_ROUNDS rounds of failed preparations
    (an invalid model, a missed deadline) and failed executions on every path (a too-small
    output), each failing as it must; then the process's descriptors, threads and memory, and
    a hosted driver's, must come back to their level (SLACK), as after released models."""
    model = add_model()
    reason = declined(driver, model)
    if reason:
        pytest.skip(reason)
    prepared = prepare_claimed(driver, model)
    calls = _failing_calls(driver, model, prepared)

    def fail_all() -> None:
        for what, call in calls:
            try:
                call()  # type: ignore[operator]
            except HalError:
                continue
            pytest.fail(f"DRV-5: {what} succeeded; it must fail")

    fail_all()  # what a runtime sets up once for good
    before = _held(driver)
    for _ in range(FAILED_ROUNDS):
        fail_all()
    over = _excess(before, driver)
    assert not over, "DRV-5: after {} rounds of failed preparations and executions, {}".format(
        FAILED_ROUNDS, "; ".join(f"{k} went from {a} to {b} (slack {_slack(k)})"
                                 for k, (a, b) in over.items()))


# -- DRV-6: the first execution ---------------------------------------------------------------

#: DRV-6's bound: the first execution of a freshly prepared model may take FIRST_FACTOR times
#: the median of the later ones, or that median plus FIRST_GRACE_S, whichever is more. Loose
#: enough for a runtime that allocates its arena or maps its pools on the first run (the
#: reference, LiteRT and ONNX Runtime stay far below it); initialisation that belongs in
#: compilation (a kernel JIT, weight packing, device start) exceeds it.
FIRST_FACTOR = 10
FIRST_GRACE_S = 0.05
#: Executions after the first whose median is the yardstick.
LATER_RUNS = 7
#: Tries, each on a new driver instance and new prepared models: a slow first execution fails
#: only when it is slow in every try (a pause of the machine does not repeat; a driver's lazy
#: initialisation does).
TRIES = 3


def _first_run_models() -> list[tuple[str, Model, list[np.ndarray]]]:
    """A few models of different kinds: a float ADD, a float CONV_2D and a quantised
    FULLY_CONNECTED (the catalogue's seed-0 cases)."""
    out = [("ADD float32", add_model(), _add_feeds())]
    for op, label in ((OperationType.CONV_2D, "float32"), (OperationType.FULLY_CONNECTED, "quant8_asymm")):
        record = get(op)
        variant = next(v for v in record.variants if v.label == label)
        model, feeds = sample_case(record, record.signatures[0], variant).model()
        out.append((f"{op.name} {label}", model, feeds))
    return out


def _slow_first_runs(driver: Driver, models: list[tuple[str, Model, list[np.ndarray]]]) -> list[str]:
    """Each claimed model prepared anew and run 1 + LATER_RUNS times on each path in turn: the
    models and paths whose first execution exceeds the bound, with their times (a worker pool
    or queue started at the first asynchronous or fenced execution shows on that path)."""
    slow = []
    for name, model, feeds in models:
        prepared: PreparedModel = prepare_claimed(driver, model)
        for path in PATHS:
            requests = [build_request(model, feeds) for _ in range(1 + LATER_RUNS)]
            times = []
            for request in requests:
                start = time.perf_counter()
                execute(prepared, request, path)
                times.append(time.perf_counter() - start)
            first, median = times[0], statistics.median(times[1:])
            bound = max(FIRST_FACTOR * median, median + FIRST_GRACE_S)
            if first > bound:
                slow.append(f"{name}, {path}: first {first * 1e3:.1f} ms > {bound * 1e3:.1f} ms "
                            f"(later median {median * 1e3:.2f} ms)")
    return slow


@pytest.mark.req("DRV-6")
def test_first_execution_is_not_much_slower(request):
    """The first execution of a freshly prepared model, on a new instance of the driver, takes
    at most max(10 x median, median + 50 ms) (FIRST_FACTOR, FIRST_GRACE_S), the median being
    that of the next 7 executions, for each of a few models (ADD, CONV_2D, quantised
    FULLY_CONNECTED) and each execution path (the synchronous first). The measurement is made
    up to 3 times (TRIES), each on a new driver instance, and fails only when some first
    execution is too slow in every try: a pause of the machine passes, initialisation left to
    the first execution (per model, per path or per driver) does not."""
    models = _first_run_models()
    slow: list[str] = []
    for _ in range(TRIES):
        fresh = _new_driver(request.config)
        try:
            claimed = [m for m in models if not declined(fresh, m[1])]
            if not claimed:
                pytest.skip(f"{fresh.name} declines every model of the check")
            slow = _slow_first_runs(fresh, claimed)
        finally:
            fresh.close()
        if not slow:
            return
    pytest.fail(f"DRV-6: the first execution is much slower than the later ones, in each of {TRIES} tries "
                f"on a new driver: {'; '.join(slow)}")


