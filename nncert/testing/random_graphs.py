"""The random-graph suite (ACC-5): run generated graphs on a driver, judge them with the
CTS criteria, and turn a failure into a minimal, replayable spec file.

Everything here is a pure function of (seed, cell, graph index) and of the driver's
answers: graph ``i`` of a cell is ``graphs.seeded(cell, seed, i)``, and a failure is shrunk
by ``reduce``, whose moves are deterministic and bounded by a count of candidate runs, not
by seconds or by what earlier tests spent. One test id rerun alone, in another order or
under pytest-xdist so fails the same way and writes the same spec file, byte for byte.

``reduce`` keeps one failing output and replaces intermediate results by model inputs fed
with their golden values while the graph still fails. A fault in one operation so ends as a
graph of that one operation; a fault that builds up over operations ends as the shortest
chain that still shows it.

The failure is replayed on the peer runtimes (N-way verdict) and written as a spec
file with the seed, the criteria, the driver's outputs and the verdict;
``nncert repro FILE --driver X`` replays it.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Sequence
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
from nncert.testing.graphs import Cell, Graph, save_spec, seeded


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


def run(driver: Driver, graph: Graph, prepare: Callable[[Model], PreparedModel] | None = None,
        built: tuple[Model, list[np.ndarray]] | None = None) -> Outcome:
    """Prepare (with ``prepare``, default ``driver.prepare_model``) and execute ``graph`` on
    ``driver`` and judge the outputs. ``built``: ``graph.model()``, when the caller has built it."""
    alive = getattr(driver, "alive", None)
    if alive is not None and not alive():
        driver.restart()  # a hosted driver that died on an earlier graph
    if graph.version > driver.feature_level:
        return Outcome("declined", [f"needs HAL {graph.version.label}"])
    model, feeds = built or graph.model()
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


#: Candidate graphs one failure may run while it is shrunk (``--shrink-budget``): enough for
#: ``reduce`` to reach its fixed point on a 40-operation graph in nearly every case.
SHRINK_RUNS = 200


def reduce(graph: Graph, fails: Callable[[Graph], bool], runs: int = SHRINK_RUNS) -> Graph:
    """The smallest graph found by cuts that still ``fails``, running at most ``runs``
    candidates. Two moves: an intermediate result becomes the only output (the operations
    after it go), and an intermediate result becomes an input fed with its golden value (the
    operations before it go). Each is first bisected along the topological order (a fault
    shows from some operation on), then tried one by one. Deterministic: the same graph and
    answers give the same candidates in the same order, whatever the machine's speed."""
    left = runs
    g = graph
    if len(g.outputs) > 1:
        for out in g.outputs:
            if left <= 0:
                return g
            left -= 1
            candidate = g.restrict([out])
            if fails(candidate):
                g = candidate
                break

    def as_output(g: Graph, nid: int) -> Graph:
        return g.restrict([nid])

    def cut(g: Graph, nid: int) -> Graph:
        return g.restrict(g.outputs, cut=[nid])

    passed: set[tuple[str, int]] = set()  # moves on the current ``g`` that did not fail

    def smaller_failing(g: Graph, move, nid: int) -> Graph | None:
        nonlocal left
        if left <= 0 or (move.__name__, nid) in passed:
            return None
        candidate = move(g, nid)
        if len(candidate.ops) >= len(g.ops):
            return None
        left -= 1
        if fails(candidate):
            return candidate
        passed.add((move.__name__, nid))
        return None

    progress = True
    while progress and len(g.ops) > 1 and left > 0:
        progress = False
        # The earliest result that fails as the output; the latest cut that still fails.
        for move, earliest in ((as_output, True), (cut, False)):
            nodes = g.cuttable()
            lo, hi, best = 0, len(nodes) - 1, None
            while lo <= hi and left > 0:
                mid = (lo + hi) // 2
                found = smaller_failing(g, move, nodes[mid])
                if found is not None:
                    best = found
                    lo, hi = (lo, mid - 1) if earliest else (mid + 1, hi)
                else:
                    lo, hi = (mid + 1, hi) if earliest else (lo, mid - 1)
            if best is not None:
                g, progress = best, True
                passed.clear()  # a new graph, renumbered: its moves are new
        if progress:
            continue
        for move in (as_output, cut):
            for nid in g.cuttable():
                found = smaller_failing(g, move, nid)
                if found is not None:
                    g, progress = found, True
                    passed.clear()
                    break
            if progress:
                break
    return g


@dataclass
class Failure:
    cell: Cell
    seed: int
    index: int  # the graph's index in its cell: ``graphs.seeded(cell, seed, index)``
    original: Graph  # as generated
    graph: Graph  # reduced
    outcome: Outcome
    verdict: dict | None = None
    spec_path: Path | None = None

    @property
    def headline(self) -> str:
        return (f"{self.cell.label} seed {self.seed} graph {self.index}: {'; '.join(self.outcome.reasons)} "
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


def search(driver: Driver, cell: Cell, seed: int = 0, graphs: int = 50,
           shrink_runs: int = SHRINK_RUNS) -> CellResult:
    """Run graphs 0, 1, ... ``graphs - 1`` of ``cell`` (``graphs.seeded``) on ``driver``
    until one fails, and shrink that one with ``reduce`` within ``shrink_runs`` candidate
    runs (0: keep it as generated). Every generated graph is validated first (an invalid one
    is a generator bug and raises). ``seconds`` is measured, never consulted."""
    result = CellResult(cell, seed)
    started = time.perf_counter()
    for index in range(graphs):
        graph = seeded(cell, seed, index)
        built = graph.model()
        validate_model(built[0])
        outcome = run(driver, graph, built=built)
        if outcome.failed:
            result.failure = _shrink(driver, cell, seed, index, graph, outcome, shrink_runs)
            break
        if outcome.status == "declined":
            result.declined += 1
            reason = outcome.reasons[0]
            result.decline_reasons[reason] = result.decline_reasons.get(reason, 0) + 1
        else:
            result.passed += 1
    result.seconds = time.perf_counter() - started
    return result


def _shrink(driver: Driver, cell: Cell, seed: int, index: int, graph: Graph, outcome: Outcome,
            runs: int) -> Failure:
    # How each failing graph failed (the graphs kept alive, so that their ids stay theirs):
    # the spec records the driver's answer on the reduced graph without running it again.
    failed = {id(graph): (graph, outcome)}

    def fails(candidate: Graph) -> bool:
        got = run(driver, candidate)
        if got.failed:
            failed[id(candidate)] = (candidate, got)
        return got.failed

    shrunk = reduce(graph, fails, runs) if runs > 0 else graph
    return Failure(cell, seed, index, graph, shrunk, failed[id(shrunk)][1])


def triage(failure: Failure, driver_spec: str) -> dict | None:
    """The N-way verdict on a failure: the peer runtimes judged against the golden and
    against the driver with the graph's criteria. In a pytest session with triage on, by the
    session's peers (--triage-peers, already started), whatever its budget has left: the spec
    file, verdict included, is the same in any run; else by peers of its own. None for a
    failure without outputs (a crash, hang or refusal: ``graph_verdict`` asks the peers all
    the same)."""
    if failure.outcome.actual is None:
        return None
    return graph_verdict(failure.graph, failure.outcome.actual, driver_spec)


def graph_verdict(graph: Graph, actual: Sequence[np.ndarray] | None, driver_spec: str,
                  peers: Sequence[str] | None = None) -> dict:
    """The N-way verdict on ``graph`` whose outputs on the driver were ``actual`` (None: it
    gave none), by the session's triage when one is active, else by ``peers`` of its own
    (default: triage's default peers)."""
    from nncert.testing import triage as triage_module

    session = triage_module.ACTIVE
    t = session if session is not None else triage_module.Triage(driver_spec, budget=1, peers=peers)
    try:
        model, feeds = graph.model()
        verdict = t.verdict(model, feeds, graph.expected, actual,
                            agree=lambda one, other: not judge(graph, model, other, one), budgeted=False)
    finally:
        if t is not session:
            t.close()
    return verdict.as_dict()


def dump(failure: Failure, directory: Path, driver_spec: str) -> Path:
    """Write the failure as a spec file under ``directory``; returns its path."""
    own_dir(directory)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{driver_spec}-{failure.cell.label}-s{failure.seed}")
    path = directory / f"{slug}.json"
    save_spec(path, failure.graph, seed=failure.seed, graph_index=failure.index, driver=driver_spec,
              shrunk_from_operations=len(failure.original.ops),
              results={driver_spec: {"outputs": failure.outcome.actual, "reasons": failure.outcome.reasons}},
              verdict=failure.verdict,
              repro=f"nncert repro {path} --driver {driver_spec}")
    failure.spec_path = path
    return path


def run_cells(driver: Driver, cells: Iterable[Cell], seed: int, graphs: int, *,
              shrink_runs: int = SHRINK_RUNS,
              progress: Callable[[CellResult, int, int], None] | None = None) -> list[CellResult]:
    """``search`` over ``cells`` (the seed of each cell derived from ``seed``). A driver that
    compiles ahead (``CompiledDriver.expect``) is told every graph first."""
    cells = list(cells)
    expect = getattr(driver, "expect", None)
    if expect is not None:
        expect(graph_models(cells, seed, graphs))
    results = []
    for i, cell in enumerate(cells):
        r = search(driver, cell, cell_seed(seed, cell), graphs, shrink_runs)
        results.append(r)
        if progress:
            progress(r, i + 1, len(cells))
    return results


def graph_models(cells: Iterable[Cell], seed: int, graphs: int) -> list[Callable[[], Model]]:
    """Functions making the models of ``graphs`` graphs of each of ``cells``, in the order
    ``search`` runs them (what a driver that compiles ahead is told)."""
    return [functools.partial(_graph_model, cell, cell_seed(seed, cell), index)
            for cell in cells for index in range(graphs)]


def _graph_model(cell: Cell, seed: int, index: int) -> Model:
    return seeded(cell, seed, index).model()[0]


def shard_cells(cells: Iterable[Cell], index: int, count: int) -> list[Cell]:
    """The cells of ``cells`` that shard ``index`` of ``count`` runs (``nncert graphs --shard``):
    their labels sorted and dealt round-robin (``nncert.certify.shard.select``), kept in the
    order of ``cells``. The matrix's large graphs, which cost the most, sort together and so
    are spread evenly. A cell's graphs depend only on the run's seed and the cell
    (``cell_seed``), so a cell fails or passes alike in any shard and in an unsharded run."""
    from nncert.certify.shard import select

    cells = list(cells)
    mine = select([c.label for c in cells], index, count)
    return [c for c in cells if c.label in mine]


def cell_seed(seed: int, cell: Cell) -> int:
    """The seed of ``cell``'s graphs in a run seeded ``seed``: a function of the two alone."""
    import zlib

    return (seed * 1_000_003 + zlib.crc32(cell.label.encode())) % (1 << 32)
