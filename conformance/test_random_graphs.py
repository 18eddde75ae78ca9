"""Random graphs (ACC-5): every cell of the CTS random-graph matrix (each operation at each
HAL version; small and large graphs of each data type at ranks 1-4, the quantised types
too), ``--graphs`` seeded graphs per cell from ``--seed``, judged by the CTS criteria.

A failing graph is shrunk (at most ``--shrink-budget`` candidate runs), replayed on the peer
runtimes (three-way verdict, unless --no-three-way) and written under ``--graph-dir`` as a
spec file; the failure message says how to replay it with ``nncert repro``. A test's graphs,
its shrinking and so its spec file depend on its id, --seed, --graphs and --shrink-budget
alone: rerun one failing id by itself and it fails the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nncert.repro import standalone
from nncert.testing import random_graphs as rg
from nncert.testing.graphs import matrix
from nncert.testing.harness import decline


def models_ahead(item) -> list:
    """The models the cell's graphs are, made when called (nncert.pytest_plugin hands these to
    a driver that compiles ahead; a cell stops at its first failure, so some go unused)."""
    seed, graphs = item.config.getoption("seed"), item.config.getoption("graphs")
    return rg.graph_models([item.callspec.params["cell"]], seed, graphs)


@pytest.mark.req("ACC-5")
@pytest.mark.parametrize("cell", matrix(), ids=lambda c: c.label)
def test_random_graph(cell, driver, pytestconfig, record_property):
    seed, graphs = pytestconfig.getoption("seed"), pytestconfig.getoption("graphs")
    spec, shrink_runs = pytestconfig.getoption("driver"), pytestconfig.getoption("shrink_budget")
    result = rg.search(driver, cell, rg.cell_seed(seed, cell), graphs, shrink_runs)
    failure = result.failure
    if failure is None:
        if result.passed == 0:
            reasons = ", ".join(sorted(result.decline_reasons, key=result.decline_reasons.get)[-3:])
            decline(f"{spec} declined all {result.declined} graphs ({reasons})")
        return
    if pytestconfig.getoption("three_way") and not pytestconfig.getoption("isolate"):
        failure.verdict = rg.triage(failure, spec)
    path = rg.dump(failure, Path(pytestconfig.getoption("graph_dir")), spec)
    record_property("reproduce", f"nncert repro {path} --driver {spec}")  # the report's reproducer
    if standalone.ACTIVE is not None:  # --standalone-dir
        standalone.ACTIVE.graph_failed(driver, failure.graph, (failure.verdict or {}).get("summary"), path)
    verdict = f"; {failure.verdict['summary']}" if failure.verdict else ""
    pytest.fail(f"ACC-5: {failure.headline}{verdict}\nspec: {path}\n"
                f"replay: nncert repro {path} --driver {spec}\n{failure.graph.describe()}")
