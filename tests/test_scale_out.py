"""pytest-xdist as nncert's engine within a machine and across machines (docs/scale-out.md):
a suite slice gives the same outcome, test by test, run serially, on two local workers
(``-n 2``) and on two gateways (``--tx 2*popen``, standing in for ``--tx ssh=host//...``),
for an in-process driver, a hosted one (``service:``), a faulty one (a mutant: failures and
their messages) and under ``--isolate``; the ``--nncert-report`` a distributed run writes
holds every test's record, as the serial run's does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A slice that passes on the reference (random-graph cells of single operations, exactness
#: cases, pool kinds), quick to collect in every worker.
SLICE = ("conformance/test_random_graphs.py", "conformance/test_exactness.py", "conformance/test_pools.py",
         "-k", "single-ADD or single-SUB or single-MUL or single-SOFTMAX or single-QUANTIZE or "
               "single-AVERAGE_POOL_2D or (test_exactness and (ADD or AVERAGE_POOL_2D)) or test_pools")
#: How each run spreads the tests.
MODES = {"serial": (), "-n 2": ("-n", "2"), "--tx 2*popen": ("--tx", "2*popen", "--dist", "load")}


def _outcomes(tmp_path: Path, mode: str, driver: str, *extra: str) -> dict[str, tuple[str, str]]:
    report = tmp_path / f"{mode.replace(' ', '').replace('*', 'x')}-{driver.replace(':', '_')}.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SLICE,
                           f"--driver={driver}", "--no-three-way", "--graphs=4", f"--nncert-report={report}",
                           f"--graph-dir={tmp_path / 'graphs'}", *MODES[mode], *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert report.is_file(), f"{mode}: no report ({done.stdout[-2000:]}{done.stderr[-2000:]})"
    tests = json.loads(report.read_text())["tests"]
    # The first line of a failure's message: later lines may name per-run paths.
    return {nodeid: (t["outcome"], (t["message"] or "").split("\n")[0]) for nodeid, t in tests.items()}


@pytest.mark.parametrize("driver,extra", [
    pytest.param("reference", (), marks=pytest.mark.slow),
    ("mutant:quant_off_by_2", ()),  # passes and failures: the one CI runs
    pytest.param("service:reference", (), marks=pytest.mark.slow),
    pytest.param("reference", ("--isolate",), marks=pytest.mark.slow),
], ids=["reference", "mutant", "service", "isolate"])
def test_a_slice_gives_the_same_outcomes_serially_on_workers_and_on_gateways(tmp_path, driver, extra):
    serial = _outcomes(tmp_path, "serial", driver, *extra)
    assert len(serial) > 40
    if driver.startswith("mutant"):
        assert sum(o == "failed" for o, _ in serial.values()) >= 3, "the mutant must fail some of the slice"
    else:
        assert {o for o, _ in serial.values()} <= {"passed", "skipped"}
    for mode in ("-n 2", "--tx 2*popen"):
        spread = _outcomes(tmp_path, mode, driver, *extra)
        assert spread.keys() == serial.keys(), f"{mode}: other tests ran"
        differ = {k: (serial[k], spread[k]) for k in serial if serial[k] != spread[k]}
        assert not differ, f"{mode} differs from serial on {len(differ)} tests: {list(differ.items())[:3]}"


@pytest.mark.slow
def test_the_fuzz_suite_on_workers_runs_each_campaign_once(tmp_path):
    """Every worker collects every target: each must run only its own tests' campaigns (two of one
    target shared its directory, and one removed the corpus the other was writing)."""
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "fuzz/test_fuzz.py", "--driver=reference", "-n", "2", "--fuzz-seconds=5",
                           "--fuzz-seeds=50", f"--fuzz-out={tmp_path / 'fuzz'}", f"--nncert-report={report}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    tests = json.loads(report.read_text())["tests"]
    assert len(tests) == 6, done.stdout[-2000:]
    assert not [(k, t["message"]) for k, t in tests.items() if t["outcome"] == "failed"]
