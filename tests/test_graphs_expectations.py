"""Known discrepancies in random-graph cells: `nncert graphs` applies the driver's expectations
as the pytest suite does (a covered failure is known, a covered pass is a strict XPASS), and an
entry's ``graphs = K`` (the cell's first failing graph) covers only runs of more than K graphs a
cell, in both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nncert.cli import main

ROOT = Path(__file__).resolve().parent.parent
# mutant:quant_off_by_2 fails this cell's graph 1 (graph 0 passes), seed 0
DRIVER, CELL, FIRST = "mutant:quant_off_by_2", "single-ADD-1.0", 1


def _file(tmp_path: Path, graphs: int | None) -> Path:
    path = tmp_path / f"exp-{graphs}.toml"
    line = "" if graphs is None else f"graphs = {graphs}\n"
    path.write_text(f'[[xfail]]\ntest = "conformance/test_random_graphs.py::test_random_graph[{CELL}]"\n'
                    f'reason = "quantised outputs two steps high"\n{line}')
    return path


def _graphs(tmp_path: Path, capsys, n: int, exp: Path) -> tuple[int, dict, str]:
    out = tmp_path / f"out-{n}-{exp.stem}"
    code = main(["graphs", "--driver", DRIVER, "--cell", CELL, "--graphs", str(n), "--no-triage",
                 "--expectations", str(exp), "--out", str(out)])
    return code, json.loads((out / "summary.json").read_text()), capsys.readouterr().out


@pytest.mark.req("ACC-5")
def test_graphs_applies_expectations_from_the_first_failing_graph_on(tmp_path, capsys):
    code, summary, text = _graphs(tmp_path, capsys, FIRST + 1, _file(tmp_path, FIRST))
    assert code == 0 and summary["totals"]["failed"] == 1 and summary["totals"]["waived"] == 1
    assert summary["results"][CELL]["failure"]["graph"] == FIRST
    assert f"KNOWN {CELL}" in text
    # fewer graphs: the failing one is not run and the entry claims nothing
    code, summary, _ = _graphs(tmp_path, capsys, FIRST, _file(tmp_path, FIRST))
    assert code == 0 and summary["totals"]["failed"] == 0 and summary["totals"]["xpass"] == 0
    # an entry for every run: at FIRST graphs the cell passes, a strict XPASS
    code, summary, text = _graphs(tmp_path, capsys, FIRST, _file(tmp_path, None))
    assert code == 1 and summary["totals"]["xpass"] == 1 and f"XPASS {CELL}" in text
    # an entry saying the failure comes later does not cover this one
    code, summary, text = _graphs(tmp_path, capsys, FIRST + 1, _file(tmp_path, FIRST + 1))
    assert code == 1 and summary["totals"]["waived"] == 0 and f"FAIL {CELL}" in text


@pytest.mark.req("ACC-5")
def test_pytest_applies_the_same_rule(tmp_path):
    def run(n: int) -> str:
        proc = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_random_graphs.py", "-q",
                               "-p", "no:cacheprovider", f"--driver={DRIVER}", f"--graphs={n}",
                               "--no-three-way", "-k", CELL, f"--expectations={_file(tmp_path, FIRST)}",
                               f"--graph-dir={tmp_path / 'g'}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        return proc.stdout.strip().splitlines()[-1]

    assert "1 xfailed" in run(FIRST + 1)
    assert "1 passed" in run(FIRST)


def test_a_bad_graphs_key_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[xfail]]\ntest = "x"\nreason = "r"\ngraphs = -1\n')
    assert main(["graphs", "--driver", DRIVER, "--cell", CELL, "--expectations", str(bad), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'graphs' must be the index" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_the_crash_guard_applies_the_same_rule(tmp_path):
    """A child that dies in a covered cell is an expected CRASH only in runs past the entry's K."""
    from types import SimpleNamespace

    from nncert.testing.crash_guard import Guard

    def guard(graphs: int) -> Guard:
        options = {"crash_guard_timeout": 3.0, "maxfail": 0, "nncert_suite": None, "nncert_journal": None,
                   "no_expectations": False, "driver": DRIVER, "graphs": graphs,
                   "expectations": [str(_file(tmp_path, FIRST))]}
        config = SimpleNamespace(getoption=options.__getitem__,
                                 invocation_params=SimpleNamespace(args=(), dir=tmp_path))
        return Guard(config)

    nodeid = f"conformance/test_random_graphs.py::test_random_graph[{CELL}]"
    assert guard(FIRST + 1)._expected(nodeid) is not None
    assert guard(FIRST)._expected(nodeid) is None
