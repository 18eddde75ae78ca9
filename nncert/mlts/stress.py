"""MLTS-2 stress and crash tests: the driver worked hard for a while, in the eight ways of the
MLTS crash-test app, each case isolated and classified SUCCESS, FAILURE, HANG or CRASH, or
DECLINED when the driver declines the mode's models (``supported_operations``): a driver for
other models is not failed for it.

Modes (``MODES``), each scaled by a duration in seconds:

- ``inference``: one prepared model run again and again;
- ``model_loading``: models prepared, run once and released, again and again (DRV-5);
- ``parallel_threads``: threads running one shared prepared model, then one each (DRV-4);
- ``parallel_processes``: client processes running inference at once;
- ``client_termination``: clients SIGKILLed at random moments mid-run; then a new client must work;
- ``multiprocess_load_kill``: clients preparing models, random ones killed; then a new client must work;
- ``random_models``: random catalogue cases, each against its golden (declined operations skipped);
- ``performance_degradation``: inference latency (its fastest fifth; medians reported) beside a
  process compiling in a loop vs. beside one that only computes, the same number of busy
  processes (at most 1.5x).

Every result is checked against the golden (``run_model``) with the ACC-1..3 tolerances. Each case
runs in a forked child (``run_isolated``) whose deadline is its duration plus a margin, so a
driver that crashes or hangs ends its case, never the suite. Client processes are forked from
that child and load their own driver, or attach to the driver's service when it is hosted
(``attach_spec``), so that one driver process must survive all its clients. A client that
dies on its own is a CRASH, one still running at its deadline a HANG (raised as ``DriverFault``).
Finished cases go to a journal, one JSON line each, on disk as soon as the case ends.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import math
import os
import random
import signal
import statistics
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nncert import files
from nncert.drivers import load_driver
from nncert.drivers.base import Driver, PreparedModel
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.model import Model, Request
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.ops.interpreter import run_model
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.criteria import output_mismatches
from nncert.testing.harness import CaseError, check_case
from nncert.testing.harness import declined as why_declined
from nncert.testing.outcome import Kind, classify_exception, run_isolated, signal_name


class StressError(Exception):
    """The driver misbehaved under stress (a wrong result, a failed call): the case is a FAILURE."""


@dataclass(frozen=True)
class StressConfig:
    """How long and how hard every case of a run works."""

    duration: float = 1.0  # seconds of work per case
    threads: int = 4  # parallel_threads
    processes: int = 3  # clients at once in the multi-process modes
    seed: int = 0
    margin: float = 20.0  # seconds past the duration before a case is a HANG (as the MLTS app)
    max_slowdown: float = 1.5  # performance_degradation: beside a compilation / a computation

    def __post_init__(self) -> None:
        if not self.duration >= 0:
            raise ValueError(f"duration must be >= 0 seconds, not {self.duration}")
        if not self.margin > 0:
            raise ValueError(f"margin must be > 0 seconds, not {self.margin}")
        if not self.max_slowdown > 0:
            raise ValueError(f"max_slowdown must be > 0, not {self.max_slowdown}")
        for name in ("threads", "processes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")

    @property
    def timeout(self) -> float:
        """The case's deadline, counted from its start."""
        return self.duration + self.margin


# ---------------------------------------------------------------------------------------
# The stress model and checked inference


@dataclass
class StressModel:
    """A model, a few input sets and their golden outputs, built once and shared by every
    runner (and, through fork, by every client process)."""

    model: Model
    feeds: list[list[np.ndarray]]
    golden: list[list[np.ndarray]]


def stress_model(layers: int = 2, channels: int = 16, size: int = 32, seed: int = 0,
                 input_sets: int = 4) -> StressModel:
    """A float32 CNN: ``layers`` x (CONV_2D 3x3 SAME, RELU), AVERAGE_POOL_2D 2x2,
    FULLY_CONNECTED to 10 classes, SOFTMAX. The defaults take a millisecond or two per
    inference on the reference driver; filters and weights are larger than 128 bytes, so they
    live in a memory pool (MEM-1)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()

    def i32(value: int) -> int:
        return b.constant(T.INT32, value)

    def f32(*shape: int, scale: float) -> int:
        return b.constant(T.TENSOR_FLOAT32, rng.uniform(-scale, scale, shape).astype(np.float32))

    x = b.operand(T.TENSOR_FLOAT32, (1, size, size, 3))
    current, depth = x, 3
    for _ in range(layers):
        conv = b.operand(T.TENSOR_FLOAT32, (1, size, size, channels))
        b.operation(Op.CONV_2D, [current, f32(channels, 3, 3, depth, scale=0.5), f32(channels, scale=0.1),
                                 i32(1), i32(1), i32(1), i32(0)], [conv])  # SAME, strides 1, no act
        current, depth = b.operand(T.TENSOR_FLOAT32, (1, size, size, channels)), channels
        b.operation(Op.RELU, [conv], [current])
    half = size // 2
    pooled = b.operand(T.TENSOR_FLOAT32, (1, half, half, channels))
    b.operation(Op.AVERAGE_POOL_2D, [current, i32(2), i32(2), i32(2), i32(2), i32(2), i32(0)], [pooled])
    logits = b.operand(T.TENSOR_FLOAT32, (1, 10))
    b.operation(Op.FULLY_CONNECTED, [pooled, f32(10, half * half * channels, scale=0.1), f32(10, scale=0.1),
                                     i32(0)], [logits])
    probabilities = b.operand(T.TENSOR_FLOAT32, (1, 10))
    b.operation(Op.SOFTMAX, [logits, b.constant(T.FLOAT32, 1.0)], [probabilities])
    model = b.build([x], [probabilities])
    feeds = [[rng.uniform(-1, 1, (1, size, size, 3)).astype(np.float32)] for _ in range(input_sets)]
    return StressModel(model, feeds, [run_model(model, f) for f in feeds])


def _loading_models(seed: int) -> list[StressModel]:
    """The models model_loading alternates between: different sizes, so no two loads in a row
    are the same model."""
    return [stress_model(layers=1 + i, channels=8 * (1 + i), seed=seed + i, input_sets=1) for i in range(3)]


def _prepare(driver: Driver, model: Model) -> PreparedModel:
    try:
        return driver.prepare_model(model)
    except HalError as e:
        raise StressError(f"prepare_model failed: {e}") from e


def _poison_outputs(request: Request) -> None:
    """Fill the output buffers with NaN, so that a driver that leaves them untouched fails."""
    for arg in request.outputs:
        loc = arg.location
        request.pools[loc.pool_index].view()[loc.offset:loc.offset + loc.length] = b"\xff" * loc.length


class Runner:
    """One prepared model with requests of its own (one per input set; threads never share a
    request): runs the input sets in turn and checks every result against the golden."""

    def __init__(self, prepared: PreparedModel, sm: StressModel) -> None:
        self.prepared = prepared
        self.sm = sm
        self.requests = [build_request(sm.model, feeds) for feeds in sm.feeds]
        self.runs = 0

    def run(self) -> float:
        """One checked inference; returns its latency (the execution call alone) in seconds."""
        which = self.runs % len(self.requests)
        request, golden = self.requests[which], self.sm.golden[which]
        _poison_outputs(request)
        start = time.perf_counter()
        try:
            self.prepared.execute_synchronously(request)
        except HalError as e:
            raise StressError(f"inference {self.runs + 1} failed: {e}") from e
        latency = time.perf_counter() - start
        wrong = output_mismatches(self.sm.model, golden, read_outputs(self.sm.model, request,
                                                                      [g.shape for g in golden]))
        if wrong:
            raise StressError(f"inference {self.runs + 1}: {wrong[0]}")
        self.runs += 1
        return latency


def _repeat(step: Callable[[], Any], until: float, at_least: int = 1) -> list[Any]:
    """What ``step`` returned, called until ``until`` (time.monotonic()), at least ``at_least`` times."""
    results = []
    while len(results) < at_least or time.monotonic() < until:
        results.append(step())
    return results


# ---------------------------------------------------------------------------------------
# Inside the case process


@dataclass
class Case:
    """What a mode works with, in the case's own (forked) process."""

    config: StressConfig
    parent: Driver  # the caller's driver instance, as the fork inherited it
    client_spec: str  # how another process loads this driver (the service's attach_spec if hosted)
    attached: bool  # the driver is hosted: this process must attach rather than share a connection
    rng: random.Random
    start: float = field(default_factory=time.monotonic)

    @property
    def end(self) -> float:
        """When the work stops: no iteration starts after it."""
        return self.start + self.config.duration

    @property
    def grace(self) -> float:
        """How long a thread or client process may run past the moment it should stop before
        it is a HANG: most of the margin, the rest is left for the case to report which one."""
        return 0.75 * self.config.margin

    @property
    def deadline(self) -> float:
        """By when every thread and client process of the case must have finished."""
        return self.end + self.grace

    @contextmanager
    def open_driver(self) -> Iterator[Driver]:
        """The driver this process runs on: the inherited instance, or for a hosted driver a
        connection of its own to the same service (the parent's connection is not ours)."""
        if not self.attached:
            yield self.parent
            return
        driver = load_driver(self.client_spec)
        try:
            yield driver
        finally:
            driver.close()


class _Worker(threading.Thread):
    """A thread that keeps what its function returned or raised, for ``_join``."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:
            self.error = e


def _join(workers: Sequence[_Worker], deadline: float) -> list[Any]:
    """The workers' results. The first error is raised here; a worker still running at
    ``deadline`` is stuck in a driver call: a HANG."""
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    stuck = [w.name for w in workers if w.is_alive()]
    if stuck:
        faulthandler.dump_traceback(all_threads=True)  # where they are stuck, into the stderr tail
        raise DriverFault("HANG", f"{', '.join(stuck)} still in a driver call at the deadline")
    for w in workers:
        if w.error is not None:
            raise w.error
    return [w.result for w in workers]


def _in_threads(n: int, fn: Callable[[], Any], deadline: float) -> list[Any]:
    workers = [_Worker(fn, f"thread {i}") for i in range(n)]
    for w in workers:
        w.start()
    return _join(workers, deadline)


# ---------------------------------------------------------------------------------------
# Client processes

#: A client's work: (its driver, when to stop, a callback to say it is running) -> counters.
ClientWork = Callable[[Driver, float, Callable[[], None]], dict[str, int]]


def _client_main(conn: Connection, spec: str, work: ClientWork, stop_at: float) -> None:
    """A client process: load the driver, work, and report on ``conn`` how it went."""
    try:
        driver = load_driver(spec)
        try:
            message: tuple = ("done", work(driver, stop_at, lambda: conn.send(("ready",))))
        finally:
            driver.close()
    except Exception as e:
        traceback.print_exc()  # into the case's stderr tail
        outcome = classify_exception(e)
        message = ("outcome", str(outcome.kind), outcome.reason)
    conn.send(message)


def _infer_until(sm: StressModel, driver: Driver, stop_at: float,
                 ready: Callable[[], None]) -> dict[str, int]:
    """Client work: prepare once, then checked inferences until ``stop_at`` (at least one)."""
    runner = Runner(_prepare(driver, sm.model), sm)
    ready()
    _repeat(runner.run, stop_at)
    return {"inferences": runner.runs}


def _load_once(driver: Driver, sm: StressModel) -> None:
    """Prepare, run once and check, release: dropping the last reference frees it (DRV-5)."""
    Runner(_prepare(driver, sm.model), sm).run()


def _load_until(models: Sequence[StressModel], driver: Driver, stop_at: float,
                ready: Callable[[], None]) -> dict[str, int]:
    """Client work: load the models in turn until ``stop_at`` (at least one)."""
    ready()
    turn = itertools.cycle(models)
    return {"loads": len(_repeat(lambda: _load_once(driver, next(turn)), stop_at))}


@dataclass
class _Client:
    number: int
    process: BaseProcess
    conn: Connection
    stop_at: float
    deadline: float  # still running then: a HANG
    doomed: bool  # to be SIGKILLed at a random moment once it runs
    kill_at: float | None = None
    killed: bool = False
    messages: list[tuple] = field(default_factory=list)


class _Clients:
    """Client processes forked from the case process (not from any thread of it), watched
    until they end: a kill when due, a verdict on every client that ended on its own."""

    def __init__(self, case: Case, work: ClientWork, kind: str = "client") -> None:
        self.case = case
        self.work = work
        self.kind = kind  # how reasons name these clients
        self.context = get_context("fork")
        self.live: list[_Client] = []
        self.started = 0
        self.kills = 0
        self.totals: Counter[str] = Counter()

    def __enter__(self) -> _Clients:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.live:
            client.process.kill()
            client.process.join()

    def start(self, stop_at: float, doomed: bool = False) -> None:
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=_client_main, name=f"nncert-client-{self.started}",
                                       args=(writer, self.case.client_spec, self.work, stop_at), daemon=True)
        process.start()
        writer.close()  # the client holds the only writer: its death is EOF, never a blocked read
        self.live.append(_Client(self.started, process, reader, stop_at, stop_at + self.case.grace, doomed))
        self.started += 1

    def step(self, until: float) -> None:
        """Wait for the next event (at the latest ``until``, a kill or a client's deadline) and
        handle it. A client still running at its deadline is a HANG."""
        now = time.monotonic()
        events = [until, *(c.deadline for c in self.live),
                  *(c.kill_at for c in self.live if c.kill_at is not None and not c.killed)]
        ready = set(wait([c.conn for c in self.live] + [c.process.sentinel for c in self.live],
                         max(0.0, min(events) - now)))
        now = time.monotonic()
        for client in list(self.live):
            if client.conn in ready:
                self._receive(client)
            if client.kill_at is not None and now >= client.kill_at and not client.killed:
                client.process.kill()
                client.killed = True
                self.kills += 1
            if client.process.sentinel in ready:
                self._ended(client)
            elif now >= client.deadline:
                os.kill(client.process.pid, signal.SIGABRT)  # the inherited faulthandler shows where
                client.process.join(1.0)
                raise DriverFault("HANG", f"{self.kind} {client.number} still running "
                                          f"{now - client.stop_at:.1f} s after it should have stopped")

    def drain(self) -> None:
        """Wait until every client has ended."""
        while self.live:
            self.step(math.inf)

    def _receive(self, client: _Client) -> None:
        try:
            message = client.conn.recv()
        except (EOFError, OSError):  # it ended (perhaps mid-message when killed)
            return
        client.messages.append(message)
        if message[0] == "ready" and client.doomed:
            now = time.monotonic()
            client.kill_at = now + self.case.rng.uniform(0.0, max(0.0, client.stop_at - now))

    def _ended(self, client: _Client) -> None:
        client.process.join()
        while client.conn.poll():
            try:
                client.messages.append(client.conn.recv())
            except (EOFError, OSError):
                break
        client.conn.close()
        self.live.remove(client)
        final = client.messages[-1] if client.messages else ("none",)
        if final[0] == "outcome":  # judged even if the kill came after it: the client saw it
            _, kind, reason = final
            if kind == Kind.FAILURE:
                raise StressError(f"{self.kind} {client.number}: {reason}")
            raise DriverFault(kind, f"{self.kind} {client.number}: {reason}")
        if client.killed:
            return
        code = client.process.exitcode
        if final[0] != "done" or code != 0:
            how = (f"was killed by {signal_name(-code)}" if code is not None and code < 0
                   else f"exited with status {code} without a result")
            raise DriverFault("CRASH", f"{self.kind} {client.number} {how}")
        self.totals.update(final[1])


def _churn(case: Case, work: ClientWork, kill_fraction: float, life: float | None) -> dict[str, int]:
    """``processes`` clients at once until the end of the case, a new one started whenever one
    ends (the first ones whatever the time: a slow setup must not leave a case without work).
    Each lives ``life`` seconds at most (None: to the end); ``kill_fraction`` of them are
    SIGKILLed at a random moment once they run."""
    processes = case.config.processes
    with _Clients(case, work) as clients:
        while True:
            now = time.monotonic()
            while len(clients.live) < processes and (now < case.end or clients.started < processes):
                lives = case.end - now if life is None else case.rng.uniform(life / 4, life)
                clients.start(min(now + lives, case.end), case.rng.random() < kill_fraction)
            if now >= case.end:
                break
            clients.step(case.end)
        clients.drain()
        return {"clients": clients.started, "kills": clients.kills, **clients.totals}


def _fresh_client(case: Case, sm: StressModel) -> None:
    """After the churn a new client must prepare and run correctly: the driver stays healthy
    for the next client."""
    with _Clients(case, partial(_infer_until, sm), "new client") as clients:
        clients.start(stop_at=time.monotonic())  # one inference
        clients.drain()


def _kill_life(case: Case) -> float:
    """How long a client of the killing modes lives at most: several generations per case."""
    return min(case.config.duration / 2, 5.0)


# ---------------------------------------------------------------------------------------
# The modes


#: What a mode does in the case process: counters, ``iterations`` among them.
ModeWork = Callable[[Case], dict[str, Any]]
#: The verdict on a measuring mode's counters: None, or why the case is a FAILURE.
Judge = Callable[[dict[str, Any], StressConfig], str | None]


def _the_stress_model(config: StressConfig) -> list[StressModel]:
    return [stress_model(seed=config.seed)]


def _larger_model(seed: int) -> StressModel:
    """What performance_degradation compiles in a loop beside inference."""
    return stress_model(layers=8, seed=seed + 1, input_sets=1)


@dataclass(frozen=True)
class Mode:
    """A stress mode: its work (whose ``iterations`` count ``unit``s), the models it prepares
    (the driver must claim them, or the case is DECLINED), and for a mode that measures, the
    verdict on its figures."""

    name: str
    work: ModeWork
    unit: str
    judge: Judge | None = None
    models: Callable[[StressConfig], list[StressModel]] = _the_stress_model

    @property
    def doc(self) -> str:
        """The first paragraph of the mode's docstring, in one line."""
        return " ".join((self.work.__doc__ or "").split("\n\n")[0].split())


MODES: dict[str, Mode] = {}


def _mode(name: str, unit: str, judge: Judge | None = None,
          models: Callable[[StressConfig], list[StressModel]] = _the_stress_model
          ) -> Callable[[ModeWork], ModeWork]:
    def register(work: ModeWork) -> ModeWork:
        MODES[name] = Mode(name, work, unit, judge, models)
        return work
    return register


@_mode("inference", unit="inference")
def _inference(case: Case) -> dict[str, Any]:
    """One prepared model run again and again, every result checked."""
    sm = stress_model(seed=case.config.seed)
    with case.open_driver() as driver:
        runner = Runner(_prepare(driver, sm.model), sm)
        _repeat(runner.run, case.end)
    return {"iterations": runner.runs}


@_mode("model_loading", unit="load", models=lambda config: _loading_models(config.seed))
def _model_loading(case: Case) -> dict[str, Any]:
    """Models prepared, run once (checked) and released, again and again, alternating three."""
    models = _loading_models(case.config.seed)
    with case.open_driver() as driver:
        counters = _load_until(models, driver, case.end, lambda: None)
    return {"iterations": counters["loads"]}


@_mode("parallel_threads", unit="inference")
def _parallel_threads(case: Case) -> dict[str, Any]:
    """Threads running inference at once: on one shared prepared model for half the time, then
    each on a prepared model of its own (DRV-4)."""
    sm = stress_model(seed=case.config.seed)
    halfway = case.start + case.config.duration / 2
    with case.open_driver() as driver:
        shared = _prepare(driver, sm.model)

        def on_shared() -> int:
            return len(_repeat(Runner(shared, sm).run, halfway))

        def on_own() -> int:
            return len(_repeat(Runner(_prepare(driver, sm.model), sm).run, case.end))

        on_shared_runs = sum(_in_threads(case.config.threads, on_shared, case.deadline))
        on_own_runs = sum(_in_threads(case.config.threads, on_own, case.deadline))
    return {"iterations": on_shared_runs + on_own_runs, "threads": case.config.threads,
            "shared_model_inferences": on_shared_runs, "own_model_inferences": on_own_runs}


@_mode("parallel_processes", unit="inference")
def _parallel_processes(case: Case) -> dict[str, Any]:
    """Client processes running inference at once, each with its own driver connection."""
    counters = _churn(case, partial(_infer_until, stress_model(seed=case.config.seed)), 0.0, None)
    return {"iterations": counters.get("inferences", 0), "processes": counters["clients"]}


@_mode("client_termination", unit="client")
def _client_termination(case: Case) -> dict[str, Any]:
    """Clients SIGKILLed at random moments mid-inference, again and again; then a new client
    must prepare and run correctly."""
    sm = stress_model(seed=case.config.seed)
    counters = _churn(case, partial(_infer_until, sm), 1.0, _kill_life(case))
    _fresh_client(case, sm)
    return {"iterations": counters["clients"], "kills": counters["kills"]}


@_mode("multiprocess_load_kill", unit="client", models=lambda config: _loading_models(config.seed))
def _multiprocess_load_kill(case: Case) -> dict[str, Any]:
    """Clients preparing models while random ones (half) are SIGKILLed; then a new client must
    prepare and run correctly."""
    models = _loading_models(case.config.seed)
    counters = _churn(case, partial(_load_until, models), 0.5, _kill_life(case))
    _fresh_client(case, models[0])
    return {"iterations": counters["clients"], "kills": counters["kills"], "loads": counters.get("loads", 0)}


@_mode("random_models", unit="model", models=lambda config: [])  # it skips what is declined, per case
def _random_models(case: Case) -> dict[str, Any]:
    """Random catalogue cases (seeded), each prepared, run and checked against its golden;
    operations the driver declines are skipped and counted, never failed."""
    keys = list(enumerate_cases(seeds=(0,)))
    checked, declined, too_new = 0, 0, 0
    with case.open_driver() as driver:
        while checked + declined + too_new == 0 or time.monotonic() < case.end:
            record, sig, var_, nchw, act, _ = case.rng.choice(keys)
            op_case = sample_case(record, sig, var_, nchw, act, case.rng.randrange(1 << 16))
            if op_case.variation_version("base") > driver.feature_level:
                too_new += 1
                continue
            try:
                reason = check_case(driver, op_case)
            except CaseError as e:
                raise StressError(f"{op_case.id}: {e}") from e
            if reason:
                declined += 1
                continue
            checked += 1
    counters: dict[str, Any] = {"iterations": checked, "declined": declined, "too_new": too_new}
    if not checked and declined:  # nothing was stressed: the driver claims none of what it got
        counters[DECLINED_BECAUSE] = f"the driver declined every one of the {declined} random cases"
    return counters


def _judge_slowdown(counters: dict[str, Any], config: StressConfig) -> str | None:
    if counters["slowdown"] <= config.max_slowdown:
        return None
    return (f"the fastest fifth of inferences took {counters['low_loaded_ms']:.3f} ms beside a compilation "
            f"vs {counters['low_alone_ms']:.3f} ms beside a computation (medians "
            f"{counters['median_loaded_ms']:.3f} vs {counters['median_alone_ms']:.3f} ms): "
            f"{counters['slowdown']:.2f}x > {config.max_slowdown:g}x")


#: performance_degradation judges this quantile of the latencies (the fastest fifth): on a host
#: short of cores, waiting for a core lengthens some inferences of either window at random (the
#: tail, and with it the median, moved 0.4x-2.9x between runs of an unchanged driver beside a
#: busy test session), while a driver that slows down beside a compilation (a lock, shared
#: threads, memory) lengthens them all, the fastest included.
SLOWDOWN_QUANTILE = 20

#: performance_degradation alternates this many windows beside a computation and beside a
#: compilation, so that both see the same host: a load that comes and goes cannot favour one.
SLOWDOWN_ROUNDS = 5


def _compile_until(sm: StressModel, driver: Driver, stop_at: float,
                   ready: Callable[[], None]) -> dict[str, int]:
    """Client work: compile the model again and again until ``stop_at`` (at least once)."""
    ready()
    return {"compilations": len(_repeat(lambda: _prepare(driver, sm.model), stop_at))}


def _compute_until(driver: Driver, stop_at: float, ready: Callable[[], None]) -> dict[str, int]:
    """Client work of the control windows: keep one core busy without the driver."""
    ready()
    rounds = 0
    while time.monotonic() < stop_at:
        sum(i * i for i in range(10_000))
        rounds += 1
    return {"computations": rounds}


def _latencies_beside(clients: _Clients, runner: Runner, window: float) -> list[float]:
    """Inference latencies while one client of ``clients`` works for ``window`` seconds (its
    start-up is not part of the window); returns once the client has ended."""
    clients.start(stop_at=time.monotonic() + window)
    client = clients.live[-1]
    while client in clients.live and not any(m[0] == "ready" for m in client.messages):
        clients.step(client.stop_at)
    latencies = _repeat(runner.run, client.stop_at, at_least=2)
    clients.drain()
    return latencies


@_mode("performance_degradation", unit="inference", judge=_judge_slowdown,
       models=lambda config: [*_the_stress_model(config), _larger_model(config.seed)])
def _performance_degradation(case: Case) -> dict[str, Any]:
    """Inference latency (the fastest fifth, SLOWDOWN_QUANTILE) beside another process compiling
    a larger model in a loop vs. beside a process that only computes: the slowdown must stay
    within max_slowdown (1.5x).
    The control window keeps as many processes runnable as the measured one, so that a host
    short of cores (a CI runner, a test session beside other work) slows both alike and the
    ratio is the compilation's own effect: the driver's locks, threads and memory, not the
    scheduler's. The compilations run in a client process, as another app's would: a hosted
    driver gets them in its own service, beside the inferences; an in-process driver shares
    only the machine (a compilation in a thread of this process would measure Python's global
    interpreter lock, not the driver)."""
    sm = stress_model(seed=case.config.seed)
    larger = _larger_model(case.config.seed)
    window = case.config.duration / (2 * SLOWDOWN_ROUNDS)
    control: list[float] = []  # beside a computation
    loaded: list[float] = []
    compiling = _Clients(case, partial(_compile_until, larger), "compiling client")
    computing = _Clients(case, _compute_until, "computing client")
    with case.open_driver() as driver, compiling, computing:
        runner = Runner(_prepare(driver, sm.model), sm)
        _repeat(runner.run, 0.0, at_least=3)  # warm-up: a slow first run is DRV-6's business
        for _ in range(SLOWDOWN_ROUNDS):
            control += _latencies_beside(computing, runner, window)
            loaded += _latencies_beside(compiling, runner, window)
            if time.monotonic() >= case.end:  # slow compilations: fewer rounds, not a HANG
                break
    low_control, low_loaded = (float(np.percentile(x, SLOWDOWN_QUANTILE)) for x in (control, loaded))
    # (*_alone_ms: the control window's, under the name earlier journals and reports use)
    return {"iterations": len(control) + len(loaded),
            "median_alone_ms": statistics.median(control) * 1e3,
            "median_loaded_ms": statistics.median(loaded) * 1e3,
            "low_alone_ms": low_control * 1e3, "low_loaded_ms": low_loaded * 1e3,
            "slowdown": low_loaded / low_control,
            "compilations": compiling.totals["compilations"]}


# ---------------------------------------------------------------------------------------
# Running cases, the journal and the summary


#: How a case ends when the driver declines what the mode needs: not a failure (a driver
#: need not claim every model), and not a success (nothing was stressed). The reason says what.
DECLINED = "DECLINED"
#: The kinds that do not fail a run.
NOT_FAILED = (str(Kind.SUCCESS), DECLINED)
#: The counter by which a case process reports that the driver declined, and why.
DECLINED_BECAUSE = "declined_because"


def _case_main(mode: str, config: StressConfig, parent: Driver, client_spec: str,
               attached: bool) -> dict[str, Any]:
    case = Case(config, parent, client_spec, attached, random.Random(f"{config.seed}:{mode}"))
    models = MODES[mode].models(config)
    if models:
        with case.open_driver() as driver:
            for sm in models:
                reason = why_declined(driver, sm.model)
                if reason:
                    return {DECLINED_BECAUSE: reason}
    counters = MODES[mode].work(case)
    counters["work_s"] = time.monotonic() - case.start
    return counters


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class CaseRecord:
    """How one stress case ended, with its figures: one line of the journal."""

    mode: str
    driver: str
    kind: str  # SUCCESS, FAILURE, HANG, CRASH (Kind), or DECLINED
    reason: str
    duration_s: float
    requested_s: float
    seed: int
    started: str
    ended: str
    unit: str
    counters: dict[str, Any]
    exit_code: int | None = None
    signal: int | None = None
    stderr_tail: str = ""
    driver_restarted: bool = False  # it had died before the case and was started afresh
    driver_alive: bool = True  # after the case (a hosted driver may have died in it)

    @property
    def ok(self) -> bool:
        return self.kind == Kind.SUCCESS

    def to_json(self) -> dict[str, Any]:
        """The journal line: the counters flattened in, plus the rate of iterations per second
        of work."""
        record = {k: v for k, v in self.__dict__.items() if k != "counters"}
        counters = dict(self.counters)
        work = counters.pop("work_s", None)
        if "iterations" in counters and work:
            record["rate_per_s"] = round(counters["iterations"] / work, 2)
        record.update({k: round(v, 4) if isinstance(v, float) else v for k, v in counters.items()})
        return record


#: How many times a measuring mode is run before its verdict stands: a measurement the host
#: spoiled (another load came and went) is taken again; a driver that degrades fails each time.
MEASUREMENT_ATTEMPTS = 2


def run_case(mode: str, driver: Driver, spec: str, config: StressConfig) -> CaseRecord:
    """Run one stress case in a child process and classify how it ended (MLTS-2; DECLINED when
    the driver declines the mode's models, checked in the child before any work). ``driver``
    is the caller's instance of the driver ``spec`` names; one that died in an earlier case is
    restarted first, so that every case starts from a driver that runs."""
    if mode not in MODES:
        raise ValueError(f"unknown stress mode {mode!r} (known: {', '.join(MODES)})")
    entry = MODES[mode]
    restarted = not driver.alive()
    if restarted:
        driver.restart()
    attach_spec = getattr(driver, "attach_spec", None)
    started, start = _now(), time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        outcome = run_isolated(_case_main, mode, config, driver, attach_spec or spec,
                               attach_spec is not None, timeout=config.timeout)
        kind, reason = outcome.kind, outcome.reason
        counters = outcome.value if kind is Kind.SUCCESS else {}
        if DECLINED_BECAUSE in counters:
            kind, reason = DECLINED, counters.pop(DECLINED_BECAUSE)
        verdict = entry.judge(counters, config) if kind is Kind.SUCCESS and entry.judge is not None else None
        if verdict:
            kind, reason = Kind.FAILURE, verdict
        if not verdict or attempts == MEASUREMENT_ATTEMPTS:
            break
    if attempts > 1:
        counters["attempts"] = attempts
    alive = driver.alive()
    if kind is Kind.FAILURE and not alive:
        # A hosted driver that died shows in its other clients as failed calls or refused
        # connections: the death is the outcome, whichever client reported first.
        kind, reason = Kind.CRASH, f"the driver died during the case: {reason}"
    return CaseRecord(mode, spec, str(kind), reason, round(time.monotonic() - start, 3), config.duration,
                      config.seed, started, _now(), entry.unit, counters, outcome.exit_code,
                      outcome.signal, "" if kind in NOT_FAILED else outcome.stderr_tail, restarted, alive)


class Journal:
    """The run's results as JSON lines, each flushed and fsynced as soon as its case ends, so a
    run killed half-way keeps every finished case."""

    NAME = "journal.jsonl"

    def __init__(self, out_dir: Path) -> None:
        """A fresh journal in ``out_dir`` (created; refused if it is a symlink or another user's,
        nncert.files); OSError if it cannot be written."""
        self.out_dir = files.own_dir(out_dir)
        self.path = out_dir / self.NAME
        files.write_atomic(self.path, "")

    def append(self, record: dict[str, Any]) -> None:
        with open(files.open_append(self.path), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def summarise(self) -> pd.DataFrame:
        """One row per case, the main columns first; written to summary.csv and summary.json."""
        frame = pd.DataFrame.from_records(self.records())
        first = [c for c in SUMMARY_COLUMNS if c in frame.columns]
        frame = frame[first + [c for c in frame.columns if c not in first]]
        files.write_atomic(self.out_dir / "summary.csv", frame.to_csv(index=False))
        files.write_atomic(self.out_dir / "summary.json", frame.to_json(orient="records", indent=1))
        return frame


#: The columns a summary starts with (and the ones printed).
SUMMARY_COLUMNS = ["mode", "kind", "iterations", "unit", "rate_per_s", "duration_s", "reason"]


def progress_line(index: int, total: int, record: CaseRecord) -> str:
    data = record.to_json()
    line = f"[{index}/{total}] {record.mode:<24} {record.kind:<8} {record.duration_s:7.2f} s"
    if "iterations" in data:
        line += f"  {data['iterations']} {record.unit}(s), {data.get('rate_per_s', 0):g}/s"
    if "slowdown" in data:
        line += f", slowdown {data['slowdown']:.2f}x"
    return f"{line}  {record.reason}" if record.reason else line


def run_suite(driver: Driver, spec: str, modes: Sequence[str], config: StressConfig, journal: Journal,
              progress: Callable[[str], None]) -> pd.DataFrame:
    """Every mode in turn, each case journaled as it ends and reported to ``progress``; returns
    the summary."""
    for index, mode in enumerate(modes, 1):
        record = run_case(mode, driver, spec, config)
        journal.append(record.to_json())
        progress(progress_line(index, len(modes), record))
    return journal.summarise()
