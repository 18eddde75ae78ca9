"""The random-graph suite (ACC-5): run generated graphs on a driver, judge them with the
CTS criteria, and turn a failure into a minimal, replayable spec file.

A cell's graphs come from hypothesis (``graphs.strategy``) under a fixed seed, so a run is
reproducible. When one fails, hypothesis shrinks it (fewer operations, smaller choices),
then ``reduce`` cuts it further: it keeps one failing output and replaces intermediate
results by model inputs fed with their golden values while the graph still fails. A fault
in one operation so ends as a graph of that one operation; a fault that builds up over
operations ends as the shortest chain that still shows it.

The failure is replayed on the peer runtimes (three-way verdict) and written as a spec
file with the seed, the criteria, the driver's outputs and the verdict;
``nncert repro FILE --driver X`` replays it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nncert.drivers.base import Driver, PreparedModel
from nncert.files import own_dir
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import DriverFault, HalError
from nncert.hal.model import Model
from nncert.hal.validation import validate_model
from nncert.testing.criteria import compare_graph
from nncert.testing.graphs import Cell, Graph, save_spec, strategy


@dataclass
class Outcome:
    """How one graph went on a driver: ``passed``, ``failed`` (with reasons) or
    ``declined`` (an operation or HAL version the driver does not claim)."""

    status: str
    reasons: list[str] = field(default_factory=list)
    actual: list[np.ndarray] | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def judge(graph: Graph, model: Model, actual: list[np.ndarray],
          expected: list[np.ndarray] | None = None) -> list[str]:
    """The ACC-5 reasons ``actual`` is outside the graph's criteria around ``expected``
    (default: the golden); empty when it passes."""
    expected = graph.expected if expected is None else expected
    reasons = []
    for k, (idx, e, a) in enumerate(zip(graph.outputs, expected, actual, strict=True)):
        t = model.main.operands[idx].type
        why = compare_graph(e, a, t, graph.criterion(t), output=k)
        if why:
            reasons.append(f"{why} [{graph.criterion_class} criteria]")
    return reasons


def run(driver: Driver, graph: Graph, prepare: Callable[[Model], PreparedModel] | None = None) -> Outcome:
    """Prepare (with ``prepare``, default ``driver.prepare_model``) and execute ``graph`` on
    ``driver`` and judge the outputs."""
    alive = getattr(driver, "alive", None)
    if alive is not None and not alive():
        driver.restart()  # a hosted driver that died on an earlier graph
    if graph.version > driver.feature_level:
        return Outcome("declined", [f"needs HAL {graph.version.label}"])
    model, feeds = graph.model()
    try:
        supported = driver.supported_operations(model)
    except HalError as e:
        return Outcome("failed", [f"DRV-2: supported_operations failed on a valid model: {e}"])
    if not all(supported):
        names = sorted({op.type.name for op, ok in zip(graph.ops, supported, strict=True) if not ok})
        return Outcome("declined", [f"declines {', '.join(names)}"])
    dims = [tuple(e.shape) for e in graph.expected]
    try:
        prepared = (prepare or driver.prepare_model)(model)
        request = build_request(model, feeds, dims)
        prepared.execute_synchronously(request)
        actual = read_outputs(model, request, dims)
    except (HalError, DriverFault) as e:
        return Outcome("failed", [f"DRV-2: claimed every operation of a valid graph, then failed: {e}"])
    reasons = judge(graph, model, actual)
    return Outcome("failed" if reasons else "passed", reasons, actual)


def reduce(graph: Graph, fails: Callable[[Graph], bool], seconds: float = 20.0) -> Graph:
    """The smallest graph found by cuts that still ``fails``, in about ``seconds``. Two
    moves: an intermediate result becomes the only output (the operations after it go),
    and an intermediate result becomes an input fed with its golden value (the operations
    before it go). Each is first bisected along the topological order (a fault shows from
    some operation on), then tried one by one while time remains."""
    deadline = time.perf_counter() + seconds
    g = graph
    if len(g.outputs) > 1:
        for out in g.outputs:
            candidate = g.restrict([out])
            if fails(candidate):
                g = candidate
                break

    def as_output(g: Graph, nid: int) -> Graph:
        return g.restrict([nid])

    def cut(g: Graph, nid: int) -> Graph:
        return g.restrict(g.outputs, cut=[nid])

    def smaller_failing(g: Graph, move, nid: int) -> Graph | None:
        candidate = move(g, nid)
        return candidate if len(candidate.ops) < len(g.ops) and fails(candidate) else None

    progress = True
    while progress and len(g.ops) > 1 and time.perf_counter() < deadline:
        progress = False
        # The earliest result that fails as the output; the latest cut that still fails.
        for move, earliest in ((as_output, True), (cut, False)):
            nodes = g.cuttable()
            lo, hi, best = 0, len(nodes) - 1, None
            while lo <= hi and time.perf_counter() < deadline:
                mid = (lo + hi) // 2
                found = smaller_failing(g, move, nodes[mid])
                if found is not None:
                    best = found
                    lo, hi = (lo, mid - 1) if earliest else (mid + 1, hi)
                else:
                    lo, hi = (mid + 1, hi) if earliest else (lo, mid - 1)
            if best is not None:
                g, progress = best, True
        if progress:
            continue
        for move in (as_output, cut):
            for nid in g.cuttable():
                if time.perf_counter() >= deadline:
                    return g
                found = smaller_failing(g, move, nid)
                if found is not None:
                    g, progress = found, True
                    break
            if progress:
                break
    return g


@dataclass
class Failure:
    cell: Cell
    seed: int
    original: Graph  # as hypothesis generated it
    graph: Graph  # shrunk and reduced
    outcome: Outcome
    verdict: dict | None = None
    spec_path: Path | None = None

    @property
    def headline(self) -> str:
        return (f"{self.cell.label} seed {self.seed}: {'; '.join(self.outcome.reasons)} "
                f"(shrunk from {len(self.original.ops)} to {len(self.graph.ops)} operations)")


@dataclass
class CellResult:
    cell: Cell
    seed: int
    passed: int = 0
    declined: int = 0
    failure: Failure | None = None
    seconds: float = 0.0
    decline_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def run(self) -> int:
        return self.passed + self.declined + (1 if self.failure else 0)


class _GraphFailedError(AssertionError):
    pass


def search(driver: Driver, cell: Cell, seed: int = 0, graphs: int = 50,
           shrink: bool = True, shrink_seconds: float = 10.0) -> CellResult:
    """Run up to ``graphs`` hypothesis graphs of ``cell`` (seeded) on ``driver``; on the
    first failure, shrink it (hypothesis, then ``reduce``, each for about
    ``shrink_seconds``; twice that for ``reduce``).
    Every generated graph is validated first (an invalid one is a generator bug and
    raises)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import Flaky

    result = CellResult(cell, seed)
    found: list[tuple[Graph, Outcome]] = []  # every failing run: the first, ..., the shrunk
    started = time.perf_counter()
    found_at = [0.0]

    @settings(max_examples=graphs, database=None, deadline=None, derandomize=False,
              phases=(Phase.generate, Phase.shrink) if shrink else (Phase.generate,),
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              verbosity=Verbosity.quiet, print_blob=False)
    @hseed(seed)
    @given(strategy(cell))
    def body(graph: Graph) -> None:
        if found and time.perf_counter() - found_at[0] > shrink_seconds:
            return  # shrinking budget spent: no candidate counts as failing any more
        model, _ = graph.model()
        validate_model(model)
        outcome = run(driver, graph)
        if outcome.failed:
            if not found:
                found_at[0] = time.perf_counter()
            found.append((graph, outcome))
            raise _GraphFailedError(outcome.reasons[0])
        if found:  # a shrinking run that passed: not one of the cell's graphs
            return
        if outcome.status == "declined":
            result.declined += 1
            reason = outcome.reasons[0]
            result.decline_reasons[reason] = result.decline_reasons.get(reason, 0) + 1
        else:
            result.passed += 1

    try:
        body()
    except (_GraphFailedError, Flaky):
        pass
    if found:
        # Hypothesis ran its shrunk example last; the cuts of ``reduce`` finish the job.
        shrunk = found[-1][0]
        graph = reduce(shrunk, lambda g: run(driver, g).failed, 2 * shrink_seconds) if shrink else shrunk
        result.failure = Failure(cell, seed, found[0][0], graph, run(driver, graph))
    result.seconds = time.perf_counter() - started
    return result


def triage(failure: Failure, driver_spec: str) -> dict | None:
    """The three-way verdict on a failure: the peer runtimes judged against the golden and
    against the driver with the graph's criteria."""
    from nncert.testing.triage import Triage

    if failure.outcome.actual is None:
        return None
    t = Triage(driver_spec, budget=1)
    try:
        graph = failure.graph
        model, feeds = graph.model()
        verdict = t.verdict(model, feeds, graph.expected, failure.outcome.actual,
                            agree=lambda one, other: not judge(graph, model, other, one))
    finally:
        t.close()
    return verdict.as_dict() if verdict else None


def dump(failure: Failure, directory: Path, driver_spec: str) -> Path:
    """Write the failure as a spec file under ``directory``; returns its path."""
    own_dir(directory)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{driver_spec}-{failure.cell.label}-s{failure.seed}")
    path = directory / f"{slug}.json"
    save_spec(path, failure.graph, seed=failure.seed, driver=driver_spec,
              shrunk_from_operations=len(failure.original.ops),
              results={driver_spec: {"outputs": failure.outcome.actual, "reasons": failure.outcome.reasons}},
              verdict=failure.verdict,
              repro=f"nncert repro {path} --driver {driver_spec}")
    failure.spec_path = path
    return path


def run_cells(driver: Driver, cells: Iterable[Cell], seed: int, graphs: int, *, shrink: bool = True,
              progress: Callable[[CellResult, int, int], None] | None = None) -> list[CellResult]:
    """``search`` over ``cells`` (the seed of each cell derived from ``seed``)."""
    cells = list(cells)
    results = []
    for i, cell in enumerate(cells):
        r = search(driver, cell, cell_seed(seed, cell), graphs, shrink)
        results.append(r)
        if progress:
            progress(r, i + 1, len(cells))
    return results


def cell_seed(seed: int, cell: Cell) -> int:
    """The hypothesis seed of ``cell`` in a run seeded ``seed``: stable across runs."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(cell.label.encode())) % (1 << 32)
