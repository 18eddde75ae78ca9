"""One prepared model, many requests (EXE-3, EXE-4, EXE-9, DRV-4).

A prepared model may keep what it learnt at preparation and at its first execution (its
constants, compiled variants per input shape, a staging buffer), but nothing of one request may
show in the answer to another. IF, WHILE and outputs of unknown shape are where a driver is
tempted to remember too much: the branch taken, the trip count, the output shape of an earlier
request. So each test prepares one model and runs a sequence of different requests on it, each
answer checked on its own: IF conditions alternating, WHILE trip counts varying (none
included), inputs of unknown dimensions in interleaved shapes, the execution paths taken in
turn. The same sequences then run from several threads at once, and many at once on the
asynchronous path (DRV-4: several executions may run in parallel on one prepared model).
Every value comes from a seed named by the test id.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from nncert.drivers.base import Burst, hang_timeout
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.model import Model, Request
from nncert.hal.types import ErrorStatus, OperandType, OperationType
from nncert.testing.control_flow_models import (
    counting_feeds,
    counting_while_golden,
    counting_while_model,
    doubling_while_golden,
    doubling_while_model,
    dynamic_if_golden,
    dynamic_if_model,
    if_golden,
    if_model,
)
from nncert.testing.harness import PATHS, add_model, check_outputs, execute, prepare_or_skip

T = OperandType


@dataclass(frozen=True)
class Job:
    """One request of a sequence: its inputs and expected outputs."""

    feeds: list[np.ndarray]
    expected: list[np.ndarray]


@dataclass(frozen=True)
class Workload:
    """A model and the i-th request of a sequence on it. ``buffers``: the output buffers every
    request gets, room for the largest output of any (so that a stale output shape is not
    hidden by a buffer of the right size); ``reqs``: the requirements the workload is about,
    the first one broken by a wrong output value."""

    build: Callable[[], Model]
    job: Callable[[np.random.Generator, int], Job]
    buffers: tuple[tuple[int, ...], ...] | None
    reqs: tuple[str, ...]


def _floats(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.uniform(-2, 2, shape).astype(np.float32)


#: IF conditions in turn: each follows each, and either comes first (the offset).
CONDITIONS = (True, False, False, True, True, False, True, False)
#: WHILE trip counts in turn, none included.
TRIPS = (3, 0, 7, 1, 0, 5, 2, 9)
#: Turns of the doubling WHILE (4 - n of them: its output is 2 ** turns times its input).
DOUBLING_N = (2, 4, 0, 3, 1, 4)
#: (rows of x, rows of y, columns) of the concatenation: each input's shape changes alone, and
#: (6, 3, 1) has the sizes of (2, 1, 3) in other shapes.
CONCAT_SHAPES = ((2, 1, 3), (2, 4, 3), (5, 1, 3), (6, 3, 1), (2, 1, 3), (1, 1, 2), (2, 4, 3), (5, 4, 2))


def _pick(seq: tuple, i: int):
    return seq[i % len(seq)]


def _if_job(rng: np.random.Generator, i: int) -> Job:
    c = _pick(CONDITIONS, i)
    a, b = _floats(rng, (2, 3)), _floats(rng, (2, 3))
    return Job([np.array([c]), a, b], [if_golden(c, a, b)])


def _dynamic_if_job(rng: np.random.Generator, i: int) -> Job:
    c = _pick(CONDITIONS, i)
    x = _floats(rng, (3,))
    return Job([np.array([c]), x], [dynamic_if_golden(c, x)])


def _counting_job(nested_if: bool) -> Callable[[np.random.Generator, int], Job]:
    def job(rng: np.random.Generator, i: int) -> Job:
        trips = _pick(TRIPS, i)
        total, start = (int(v) for v in rng.integers(-50, 50, 2))
        bound = start + trips if trips else start - int(rng.integers(0, 3))  # no turn: bound <= start
        return Job(counting_feeds(total, start, bound),
                   [counting_while_golden(total, start, bound, nested_if=nested_if)])
    return job


def _doubling_job(rng: np.random.Generator, i: int) -> Job:
    n = _pick(DOUBLING_N, i)
    x = _floats(rng, (int(rng.integers(1, 4)),))
    return Job([x, np.array([n], np.int32)], doubling_while_golden(x, n))


def concat_model() -> Model:
    """Two float32 inputs of unknown dimensions (r1, c) and (r2, c): CONCATENATION(x, y) on
    axis 0, of shape (r1 + r2, c), and x + x, of unknown rank. Each output's shape depends on
    the inputs' actual shapes, the first one on both inputs'."""
    b = ModelBuilder()
    x, y = b.operand(T.TENSOR_FLOAT32, (0, 0)), b.operand(T.TENSOR_FLOAT32, (0, 0))
    joined, doubled = b.operand(T.TENSOR_FLOAT32, (0, 0)), b.operand(T.TENSOR_FLOAT32, ())
    b.operation(OperationType.CONCATENATION, [x, y, b.constant(T.INT32, 0)], [joined])
    b.operation(OperationType.ADD, [x, x, b.constant(T.INT32, 0)], [doubled])
    return b.build([x, y], [joined, doubled])


def _concat_job(rng: np.random.Generator, i: int) -> Job:
    r1, r2, c = _pick(CONCAT_SHAPES, i)
    x, y = _floats(rng, (r1, c)), _floats(rng, (r2, c))
    return Job([x, y], [np.concatenate([x, y]), x + x])


#: Fused activations in turn (NONE, RELU1, RELU, RELU6), given at run time as a scalar input.
ACTIVATIONS = (0, 2, 1, 0, 3, 2, 1, 3)
ACTIVATION_BOUNDS = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}


def scalar_input_model() -> Model:
    """ADD(x, y, activation) with the activation a model input (an INT32 scalar): a value each
    request gives, not a parameter of the model."""
    b = ModelBuilder()
    x, y, out = (b.operand(T.TENSOR_FLOAT32, (2, 3)) for _ in range(3))
    act = b.operand(T.INT32)
    b.operation(OperationType.ADD, [x, y, act], [out])
    return b.build([x, y, act], [out])


def _scalar_input_job(rng: np.random.Generator, i: int) -> Job:
    act = _pick(ACTIVATIONS, i)
    x, y = (rng.uniform(-5, 5, (2, 3)).astype(np.float32) for _ in range(2))
    return Job([x, y, np.array(act, np.int32)], [np.clip(x + y, *ACTIVATION_BOUNDS[act]).astype(np.float32)])


def _add_job(rng: np.random.Generator, i: int) -> Job:
    x, y = _floats(rng, (2, 3)), _floats(rng, (2, 3))
    return Job([x, y], [x + y])


WORKLOADS = {
    "add": Workload(lambda: add_model((2, 3)), _add_job, None, ("EXE-3",)),
    "if_branches": Workload(if_model, _if_job, None, ("EXE-9",)),
    "if_output_shape": Workload(dynamic_if_model, _dynamic_if_job, ((6,),), ("EXE-9", "EXE-4")),
    "while_counter": Workload(counting_while_model, _counting_job(False), None, ("EXE-9",)),
    "while_nested_if": Workload(lambda: counting_while_model(nested_if=True), _counting_job(True), None,
                                ("EXE-9",)),
    "while_output_shape": Workload(doubling_while_model, _doubling_job, ((48,), (1,)), ("EXE-9", "EXE-4")),
    "concat_shapes": Workload(concat_model, _concat_job, ((9, 3), (5, 3)), ("EXE-4", "DRV-3", "EXE-6")),
    "scalar_input": Workload(scalar_input_model, _scalar_input_job, None, ("EXE-3",)),
}


def _kinds(*names: str) -> list:
    return [pytest.param(n, id=n, marks=pytest.mark.req(*WORKLOADS[n].reqs)) for n in names]


def _rng(request: pytest.FixtureRequest, stream: int = 0) -> np.random.Generator:
    """Data of one test: seeded by its id (and a stream number, one per thread)."""
    return np.random.default_rng([zlib.crc32(request.node.name.encode()), stream])


def _request(model: Model, work: Workload, job: Job) -> Request:
    hal_request = build_request(model, job.feeds, work.buffers)
    for arg in hal_request.outputs:
        arg.dimensions = ()  # the buffer's size only: the driver finds the shapes (EXE-4)
    return hal_request


def _run(prepared, model: Model, work: Workload, job: Job, path: str, req: str, what: str,
         hal_request: Request | None = None, burst: Burst | None = None) -> None:
    """Run ``job`` on ``path`` (in ``hal_request`` if given, which must hold its inputs; on
    ``burst`` if given, its slots numbered as the pools) and check its reported output shapes
    and its outputs."""
    if hal_request is None:
        hal_request = _request(model, work, job)
    if burst is not None:
        shapes, _ = burst.execute(hal_request, list(range(len(hal_request.pools))))
    else:
        shapes, _ = execute(prepared, hal_request, path)
    want = [e.shape for e in job.expected]
    dynamic = any(not model.main.operands[i].fully_specified for i in model.main.output_indexes)
    if dynamic and path != "fenced":  # a fenced execution reports no shapes
        got = [tuple(s.dimensions) for s in shapes]
        if got != want:
            pytest.fail(f"EXE-4: {what}: output shapes reported {got}, expected {want}")
    try:
        check_outputs(job.expected, read_outputs(model, hal_request, want), model)
    except pytest.fail.Exception as e:
        pytest.fail(f"{req}: {what}: {e}")


def _prepared(driver, kind: str):
    model = WORKLOADS[kind].build()
    return model, prepare_or_skip(driver, model)


#: Requests of each sequence (four turns of the execution paths, eight IF conditions, eight
#: trip counts).
SEQUENCE = 8


@pytest.mark.req("EXE-3")
@pytest.mark.parametrize("first", [0, 1], ids=["first0", "first1"])
@pytest.mark.parametrize("kind", _kinds(*[k for k in WORKLOADS if k != "add"]))
def test_one_prepared_model_many_requests(driver, request, kind, first):
    """One prepared model, a sequence of different requests, the paths in turn; ``first``
    shifts the sequence so that each kind of request (either branch, no turn or some) is once
    the first the model sees."""
    model, prepared = _prepared(driver, kind)
    work = WORKLOADS[kind]
    rng = _rng(request)
    for i in range(first, first + SEQUENCE):
        path = PATHS[i % len(PATHS)]
        _run(prepared, model, work, work.job(rng, i), path, work.reqs[0], f"request {i - first} ({path})")


@pytest.mark.req("EXE-3", "MEM-2")
@pytest.mark.parametrize("path", ["sync", "async", "fenced", "one-burst"])
@pytest.mark.parametrize("kind", _kinds("if_branches", "while_counter", "if_output_shape"))
def test_one_request_memory_rewritten_between_executions(driver, request, kind, path):
    """One request, its memories reused for a sequence of executions with new input values
    written into them in place (as an app reuses its buffers): each execution reads what the
    pools hold now, not what they held when the driver first saw them, and reports the output
    shapes of its own run. "one-burst": every execution on one burst, whose slots name the same
    memories throughout (its warm path: what it keeps per slot must not outlive the run)."""
    model, prepared = _prepared(driver, kind)
    work = WORKLOADS[kind]
    rng = _rng(request)
    burst = prepared.configure_execution_burst() if path == "one-burst" else None
    jobs = [work.job(rng, i) for i in range(SEQUENCE // 2)]
    reused = _request(model, work, jobs[0])
    for i, job in enumerate(jobs):
        fresh = _request(model, work, job)
        for arg in reused.inputs:  # the same layout: the inputs' shapes are fixed
            reused.pools[arg.location.pool_index].view()[:] = fresh.pools[arg.location.pool_index].view()
        _run(prepared, model, work, job, path, work.reqs[0], f"request {i} in the first one's memory",
             reused, burst)


def _mul_model() -> Model:
    """x * y of two float32 (2, 3) inputs: the ADD workload's inputs and output, another graph."""
    b = ModelBuilder()
    x, y, out = (b.operand(T.TENSOR_FLOAT32, (2, 3)) for _ in range(3))
    b.operation(OperationType.MUL, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


def _mul_job(rng: np.random.Generator, i: int) -> Job:
    x, y = _floats(rng, (2, 3)), _floats(rng, (2, 3))
    return Job([x, y], [x * y])


#: A second model for the ADD workload's threads: the same inputs and output, another graph.
MUL = Workload(_mul_model, _mul_job, None, ("DRV-4",))


def _from_threads(driver, request, kind: str, threads: int, rounds: int,
                  other: Workload | None = None, paths: Sequence[str] = PATHS) -> None:
    """``threads`` threads run ``rounds`` requests each on one prepared model (with ``other``:
    every other thread on a prepared model of ``other``), all starting each round together,
    each on another of ``paths`` and with other data; every answer is checked."""
    model, prepared = _prepared(driver, kind)
    setups = [(model, prepared, WORKLOADS[kind])]
    if other is not None:
        other_model = other.build()
        setups.append((other_model, prepare_or_skip(driver, other_model), other))
    start = threading.Barrier(threads)
    failures: list[str] = []

    def worker(t: int) -> None:
        rng = _rng(request, t)
        model, prepared, work = setups[t % len(setups)]
        try:
            for i in range(rounds):
                job = work.job(rng, i + t)  # the threads' requests differ in every round
                path = paths[(i + t) % len(paths)]
                start.wait(hang_timeout())
                _run(prepared, model, work, job, path, "DRV-4", f"thread {t}, request {i} ({path})")
        except threading.BrokenBarrierError:
            pass  # another thread failed first
        except BaseException as e:  # pytest.fail included
            failures.append(str(e).splitlines()[0])
            start.abort()

    pool = [threading.Thread(target=worker, args=(t,), name=f"nncert-reuse-{t}") for t in range(threads)]
    for t in pool:
        t.start()
    ends = time.monotonic() + hang_timeout() * rounds
    for t in pool:
        t.join(max(0.0, ends - time.monotonic()))
    if any(t.is_alive() for t in pool):
        pytest.fail(f"DRV-4: executions from {threads} threads on {len(setups)} prepared model(s) did not "
                    f"end within {hang_timeout() * rounds:g} s")
    if failures:
        pytest.fail(f"DRV-4: {len(failures)} of {threads} threads got a wrong answer: {failures[0]}")


@pytest.mark.req("DRV-4", "EXE-3")
@pytest.mark.parametrize("kind", _kinds("add", "if_branches", "while_counter", "concat_shapes"))
def test_one_prepared_model_from_several_threads(driver, request, kind):
    """Four threads, four requests each, on one prepared model (DRV-4)."""
    _from_threads(driver, request, kind, threads=4, rounds=4)


@pytest.mark.req("DRV-4", "EXE-3")
@pytest.mark.parametrize("path", PATHS)
def test_one_prepared_model_on_one_path_from_several_threads(driver, request, path):
    """Four threads, three requests each, on one prepared model and all on one path: so two
    bursts, two fenced executions, two asynchronous ones run at once, not only one of each
    (a driver whose bursts, or fenced workers, share one staging area per prepared model mixes
    their inputs)."""
    _from_threads(driver, request, "add", threads=4, rounds=3, paths=(path,))


@pytest.mark.req("DRV-4")
def test_two_prepared_models_from_several_threads(driver, request):
    """Four threads, four requests each, two of them on a prepared ADD model and two on a
    prepared MUL model of the same inputs and output, all starting each round together: each
    execution runs its own prepared model whatever runs beside it (a driver with one device
    slot for the graph in use swaps it under a running execution of the other model)."""
    _from_threads(driver, request, "add", threads=4, rounds=4, other=MUL)


@pytest.mark.slow
@pytest.mark.req("DRV-4", "EXE-3")
@pytest.mark.parametrize("kind", _kinds(*WORKLOADS))
def test_one_prepared_model_from_many_threads(driver, request, kind):
    """The sweep: eight threads, sixteen requests each, every workload."""
    _from_threads(driver, request, kind, threads=8, rounds=16)


def _in_flight(driver, request, kind: str, count: int) -> None:
    """``count`` asynchronous executions on one prepared model, all started before any is
    awaited: each callback is notified once, with its own request's status and shapes, and
    each request's outputs are its own."""
    model, prepared = _prepared(driver, kind)
    work = WORKLOADS[kind]
    rng = _rng(request)
    jobs = [work.job(rng, i) for i in range(count)]
    requests = [_request(model, work, job) for job in jobs]
    callbacks = [prepared.execute(r) for r in requests]
    ends = time.monotonic() + hang_timeout()
    silent, outputs = [], []
    for i, (job, r, cb) in enumerate(zip(jobs, requests, callbacks, strict=True)):
        if not cb.notified(max(0.0, ends - time.monotonic())):
            silent.append(i)
        # Read at once: once notified, the outputs must be there already (EXE-1).
        outputs.append(read_outputs(model, r, [e.shape for e in job.expected]))
    if silent:
        pytest.fail(f"EXE-1: {len(silent)} of {count} callbacks never notified (executions {silent[:8]})")
    dynamic = any(not model.main.operands[i].fully_specified for i in model.main.output_indexes)
    for i, (job, cb, actual) in enumerate(zip(jobs, callbacks, outputs, strict=True)):
        result = cb.wait()
        assert result.status is ErrorStatus.NONE, \
            f"EXE-1: execution {i} of {count} in flight failed: {result.status.name} {result.message}"
        want = [e.shape for e in job.expected]
        if dynamic:
            got = [tuple(s.dimensions) for s in result.output_shapes]
            assert got == want, f"EXE-4: execution {i}'s callback reported output shapes {got}, " \
                                f"expected its own {want}"
        try:
            check_outputs(job.expected, actual, model)
        except pytest.fail.Exception as e:
            pytest.fail(f"DRV-4: execution {i} of {count} in flight: {e}")
    twice = [i for i, cb in enumerate(callbacks) if getattr(cb, "notifications", 1) != 1]
    assert not twice, f"EXE-1: callbacks of executions {twice[:8]} were notified more than once"


@pytest.mark.req("EXE-1", "DRV-4")
@pytest.mark.parametrize("kind", _kinds("concat_shapes", "while_counter"))
def test_many_asynchronous_executions_in_flight(driver, request, kind):
    """24 asynchronous executions in flight at once on one prepared model."""
    _in_flight(driver, request, kind, 24)


@pytest.mark.slow
@pytest.mark.req("EXE-1", "DRV-4")
@pytest.mark.parametrize("kind", _kinds(*WORKLOADS))
def test_very_many_asynchronous_executions_in_flight(driver, request, kind):
    """The sweep: 48 in flight, every workload (a hosted driver's client opens a connection
    per call in flight, and the service serves 64 at most)."""
    _in_flight(driver, request, kind, 48)
