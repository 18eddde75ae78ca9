"""Standalone reproducers: a finding of nncert on a compiled driver (LiteRT, ONNX Runtime,
OpenVINO, IREE, TVM) as a directory a runtime's maintainers run without installing nncert.

``write_standalone(driver, model, feeds, out_dir)`` writes into a new (or empty) directory:

- the runtime's own model file(s), exactly as the driver hands them to the runtime
  (``model.tflite``, ``model.onnx``; for IREE also ``model.mlir``, what its compiler takes);
- ``inputs.npz``: the inputs as the driver feeds them (float16 widened to float32);
  ``expected.npz``: the reference results; both read with ``allow_pickle=False``;
- ``case.json``: data only: the runtime, its version and the driver's options, the model's
  operations, each output's tolerance as numbers (nncert's criteria: ACC-1..4 per output
  type, or the random-graph criteria of ACC-5), and what running the script gave;
- ``run.py``: numpy and the runtime's public Python API only. The runtime's part (which model
  file, which options) comes from the driver (``CompiledDriver.standalone_runner``), the rest
  (load the arrays, run, compare, print, exit status) is ``SCRIPT`` below, written once;
- ``README.md``: what is wrong (the script's first lines when it ran at write time), the
  model, the verdict of the peer runtimes, the source, and how to run it.

The script's exit status: 0 every output within its tolerance (not reproduced), 1 an output
outside it (reproduced), 2 the runtime is not installed, 3 the runtime raised an error; a
process killed by a signal is itself the reproduction of a crash. ``write_standalone`` runs
it once in a child process with a deadline and records the outcome in case.json under
stable keys (``OUTCOME_KEYS``): ``outcome`` ("reproduced", "not_reproduced", "crashed",
"error", or "hung": still running at the deadline, killed), ``returncode``, ``signal``,
``max_abs_diff``, beside ``runtime``, ``runtime_version``, ``options`` and ``operations``.

The pytest plugin's ``--standalone-dir DIR`` (``Session``) writes one for each failing
per-operation case (``harness.check_case``, before the driver runs it: a case that kills the
process leaves its reproducer behind, run afterwards by ``nncert repro``) and each failing
random graph, into ``DIR/<test id, sanitised>/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nncert import files
from nncert.hal.model import Model, Operand, dtype_of
from nncert.hal.types import OperandType as T

if TYPE_CHECKING:
    from nncert.drivers.base import Driver
    from nncert.drivers.compiled import CompiledDriver
    from nncert.testing.graphs import Graph

FORMAT = "nncert-standalone/1"
#: The keys of case.json other tools read (the findings catalogue): they keep their meaning.
OUTCOME_KEYS = ("outcome", "returncode", "signal", "max_abs_diff", "runtime", "runtime_version",
                "options", "operations")
OUTCOMES = ("reproduced", "not_reproduced", "crashed", "error", "hung")
#: How long the script may run at write time (an IREE or TVM compile takes seconds).
RUN_TIMEOUT_S = 300.0
#: How long the script of a hang's reproducer runs before it counts as hung: well past what the
#: slowest runtime takes to load and run a small model (an IREE compile: seconds), short enough
#: that replaying a hang costs a test no more.
HANG_S = 25.0
#: Lines of the script's output kept in case.json and the README.
OUTPUT_LINES = 30


#: How ``measure`` runs run.py (cwd: its directory): with nncert unimportable, so that a
#: reproducer that works here works on a machine without nncert (an editable install would
#: otherwise make nncert importable from anywhere). Exit status 99: nncert was importable.
WITHOUT_NNCERT = """
import runpy, sys

class NoNncert:
    def find_spec(self, name, path=None, target=None):
        if name == "nncert" or name.startswith("nncert."):
            raise ImportError("nncert is not importable here")
        return None

sys.meta_path.insert(0, NoNncert())
try:
    import nncert  # noqa: F401
except ImportError:
    pass
else:
    sys.exit(99)
sys.argv = ["run.py"]
runpy.run_path("run.py", run_name="__main__")
"""
#: How long the test run that writes a test's standalone reproducer may take.
TEST_TIMEOUT_S = 1800


class StandaloneError(ValueError):
    """Why no reproducer can be written: one line."""


# ---------------------------------------------------------------------------------------
# tolerances: nncert's criteria as numbers the script reads


def tolerances(model: Model, relaxed: bool = False) -> list[dict[str, Any]]:
    """Each output's per-element tolerance of ACC-1..4 (``criteria.tolerance``), as the
    per-operation suites judge it."""
    from nncert.testing.criteria import tolerance

    out = []
    for i in model.main.output_indexes:
        type_ = model.main.operands[i].type
        tol = tolerance(type_, relaxed)
        if type_.is_quant:
            text = f"{tol.atol:g} quantisation step ({tol.requirement})"
        elif tol.atol == 0 and tol.rtol == 0:
            text = f"exact ({tol.requirement})"
        else:
            text = f"|actual - expected| <= {tol.atol:g} + {tol.rtol:g} x |expected| ({tol.requirement}" + \
                   (", relaxed float32" if relaxed and type_ in (T.TENSOR_FLOAT32, T.FLOAT32) else "") + ")"
        out.append({"atol": tol.atol, "rtol": tol.rtol, "requirement": tol.requirement, "text": text})
    return out


def graph_tolerances(graph: Graph, model: Model) -> list[dict[str, Any]]:
    """Each output's criterion of ACC-5 (``criteria.compare_graph``) for a random graph."""
    from nncert.testing.criteria import SKIP_ABOVE

    out = []
    for k, i in enumerate(model.main.output_indexes):
        type_ = model.main.operands[i].type
        c = graph.criterion(type_)
        label = f"ACC-5, {graph.criterion_class} criteria"
        if type_ in (T.TENSOR_BOOL8, T.BOOL):
            allowed = math.ceil(0.1 * graph.expected[k].size)
            out.append({"atol": 0, "rtol": 0, "allowed_wrong": allowed, "requirement": "ACC-5",
                        "text": f"at most {allowed} wrong booleans ({label})"})
            continue
        item: dict[str, Any] = {"atol": c.atol, "rtol": c.rtol, "ignore_above": SKIP_ABOVE,
                                "requirement": "ACC-5"}
        text = f"|actual - expected| <= {c.atol:g} + {c.rtol:g} x |expected|"
        if math.isfinite(c.bias) and math.isfinite(c.mse):
            item.update(max_bias=c.bias, max_mse=c.mse, relative_error=type_.is_float)
            text += f", |mean error| <= {c.bias:g}, mean squared error <= {c.mse:g}" + \
                (" (errors relative to max(1, |expected|))" if type_.is_float else "")
        item["text"] = f"{text}; |expected| > {SKIP_ABOVE:g} not judged ({label})"
        out.append(item)
    return out


# ---------------------------------------------------------------------------------------
# the script: the runtime's run(inputs) (the driver's) between this head and tail

SCRIPT_HEAD = '''#!/usr/bin/env python3
"""{title}

Runs {model_files} on {runtime} with the inputs in inputs.npz and compares every output
with expected.npz (the reference results) within the tolerance case.json gives for it.

    pip install {packages} numpy
    python run.py

Exit status 0: every output within its tolerance (not reproduced); 1: an output outside it
(REPRODUCED); 2: the runtime is not installed; 3: the runtime raised an error. A process
killed by a signal reproduces a crash; one that does not end reproduces a hang.
"""

import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASE = json.loads((HERE / "case.json").read_text())
WORST = 5  # elements shown per output


'''

SCRIPT_TAIL = '''

def judge(actual, expected, tolerance):
    """|actual - expected| per element, the elements outside the tolerance, and why the
    output fails ("" when it does not)."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        diff = np.where(same, 0.0, np.nan_to_num(np.abs(a - e), nan=np.inf))
        outside = ~same & ~(diff <= tolerance["atol"] + tolerance["rtol"] * np.abs(e))
    judged = np.ones(e.shape, bool)
    if "ignore_above" in tolerance:  # huge or non-finite expected values are not judged
        judged = np.isfinite(e) & (np.abs(e) <= tolerance["ignore_above"])
        outside &= judged
    if outside.sum() > tolerance.get("allowed_wrong", 0):
        return diff, outside, f"{outside.sum()} of {outside.size} elements outside the tolerance"
    if "max_bias" in tolerance and judged.sum() >= 10:
        error = (a - e)[judged]
        if tolerance["relative_error"]:
            error = error / np.maximum(1.0, np.abs(e[judged]))
        if abs(error.mean()) > tolerance["max_bias"]:
            return diff, outside, f"mean error {error.mean():.3g} beyond {tolerance['max_bias']:g}"
        if (error ** 2).mean() > tolerance["max_mse"]:
            return diff, outside, f"mse {(error ** 2).mean():.3g} beyond {tolerance['max_mse']:g}"
    return diff, outside, ""


def show(value, output):
    """An element, with its real value when the output is quantised."""
    if "scale" not in output:
        return repr(value.item())
    return f"{value.item()} (real {(float(value) - output['zero_point']) * output['scale']:g})"


def main():
    with np.load(HERE / "inputs.npz", allow_pickle=False) as f:
        inputs = [f[i["name"]] for i in CASE["inputs"]]
    with np.load(HERE / "expected.npz", allow_pickle=False) as f:
        expected = [f[o["name"]] for o in CASE["outputs"]]
    package = CASE["packages"][0].split("==")[0]
    try:
        installed = metadata.version(package)
    except metadata.PackageNotFoundError:
        installed = "not installed"
    print(f"{package} {installed} (the reproducer was written with {CASE['runtime_version']})")
    try:
        actual = run(inputs)
    except ImportError as e:
        print(f"cannot run: {e}; pip install {' '.join(CASE['packages'])} numpy")
        return 2
    except Exception as e:
        print(f"ERROR: {CASE['runtime']} raised {type(e).__name__}: {e}")
        return 3
    failed = [] if len(actual) == len(expected) else [f"{len(actual)} outputs, expected {len(expected)}"]
    for output, a, e in zip(CASE["outputs"], actual, expected):
        a = np.asarray(a)
        if a.dtype != e.dtype:  # float16 is computed in float32: rounded to the output's type
            a = a.astype(e.dtype)
        tolerance = output["tolerance"]
        print(f"{output['name']} ({output['type']}): shape {list(a.shape)} {a.dtype}")
        if a.shape != e.shape:
            failed.append(f"{output['name']}: shape {list(a.shape)}, expected {list(e.shape)}")
            continue
        diff, outside, why = judge(a, e, tolerance)
        print(f"  max abs difference {diff.max() if diff.size else 0:g}; tolerance: {tolerance['text']}")
        for flat in np.argsort(-diff, axis=None, kind="stable")[:WORST]:
            index = np.unravel_index(flat, diff.shape)
            if diff[index] > 0:
                mark = "outside" if outside[index] else "within"
                print(f"  {[int(i) for i in index]}: actual {show(a[index], output)}, "
                      f"expected {show(e[index], output)} ({mark})")
        if why:
            failed.append(f"{output['name']}: {why}")
    if failed:
        print("REPRODUCED: " + "; ".join(failed))
        return 1
    print("not reproduced: every output is within its tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


# ---------------------------------------------------------------------------------------
# writing


def write_standalone(driver: Driver, model: Model, feeds: Sequence[np.ndarray | None],
                     out_dir: str | os.PathLike, *, expected: Sequence[np.ndarray] | None = None,
                     relaxed: bool | None = None, tolerance: Sequence[dict] | None = None,
                     title: str = "", verdict: str | None = None, source: str = "", note: str = "",
                     run: bool = True, timeout: float = RUN_TIMEOUT_S) -> Path:
    """Write the reproducer of ``model`` run on ``driver`` with ``feeds`` (arrays in
    model-input order, the model's own types) into ``out_dir`` (created; an existing one
    must be an empty directory of this user's, not a symlink), and return its path.

    ``expected``: the reference outputs (default: computed by the reference kernels);
    ``relaxed``: judge float32 outputs with the relaxed tolerance (default: the model's
    relax flag); ``tolerance``: each output's criterion instead of ACC-1..4 (``tolerances``,
    ``graph_tolerances``); ``verdict``: the N-way verdict's line, if known; ``source``: where
    the finding comes from (a test id, a spec file); ``note``: anything else the README must
    say. With ``run``, the script runs once (a child process, ``timeout`` seconds) and its
    outcome goes into case.json and the README (``measure``).

    StandaloneError (one line) when the driver is no compiled driver, the model cannot be
    expressed in its runtime's format, or ``out_dir`` cannot take it."""
    from nncert.drivers.compiled import CompiledDriver

    if not isinstance(driver, CompiledDriver):
        raise StandaloneError(f"{driver.name} is not a driver that compiles for another runtime (litert, "
                              f"onnxruntime, openvino, iree, tvm): a standalone reproducer runs that "
                              f"runtime's own model file")
    if len(feeds) != len(model.main.input_indexes) or any(a is None for a in feeds):
        raise StandaloneError(f"the model has {len(model.main.input_indexes)} inputs: give an array for "
                              f"each (an omitted input cannot be fed to {driver.runtime})")
    feeds = [np.asarray(a) for a in feeds]
    if relaxed is None:
        relaxed = bool(model.relax_computation_float32_to_float16)
    if expected is None:
        expected = _reference(model, feeds)
    expected = [np.asarray(e) for e in expected]
    if len(expected) != len(model.main.output_indexes):
        raise StandaloneError(f"{len(expected)} expected outputs for a model of "
                              f"{len(model.main.output_indexes)} outputs")
    tolerance = list(tolerance) if tolerance is not None else tolerances(model, relaxed)
    wide, fed = _as_the_driver_runs(driver, model, feeds)
    try:
        runner = driver.standalone_runner(wide, driver.translate(wide))
    except NotImplementedError as e:
        raise StandaloneError(str(e)) from None
    except Exception as e:  # the exporter's Unmappable, a frontend's error: the driver would fail alike
        raise StandaloneError(f"{driver.name} cannot express the model in its runtime's format: "
                              f"{type(e).__name__}: {_one_line(e)}") from None
    runtime, _, version = driver.runtime.partition(" ")
    sg = model.main
    case: dict[str, Any] = {
        "format": FORMAT,
        "title": title or _title(runtime, version.split(" ")[0], model),
        "source": source,
        "verdict": verdict,
        "note": note,
        "runtime": runtime,
        "runtime_version": version.split(" ")[0],
        "driver": driver.version_string(),
        "options": runner.options,
        "packages": runner.packages,
        "model_files": sorted(runner.files),
        "operations": [op.type.name for g in (sg, *model.referenced) for op in g.operations],
        "model": _model_lines(model),
        "inputs": [{"name": f"input{k}", "type": sg.operands[i].type.name, "shape": list(a.shape),
                    "dtype": str(a.dtype), **_small_values(a)}
                   for k, (i, a) in enumerate(zip(sg.input_indexes, fed, strict=True))],
        "outputs": [_output(k, sg.operands[i], e, t) for k, (i, e, t) in
                    enumerate(zip(sg.output_indexes, expected, tolerance, strict=True))],
        "command": "python run.py",
        "outcome": None,
    }
    path = _fresh_dir(out_dir)
    for name, content in runner.files.items():
        files.write_atomic(path / name, content)
    files.write_atomic(path / "inputs.npz", _npz(case["inputs"], fed))
    files.write_atomic(path / "expected.npz", _npz(case["outputs"], expected))
    head = SCRIPT_HEAD.format(title=case["title"], model_files=" and ".join(case["model_files"]),
                              runtime=f"{runtime} {case['runtime_version']}",
                              packages=" ".join(runner.packages))
    files.write_atomic(path / "run.py", head + runner.code.rstrip() + "\n" + SCRIPT_TAIL, mode=0o755)
    save_case(path, case)
    if run:
        measure(path, timeout)
    return path


def write_graph(driver: Driver, graph: Graph, out_dir: str | os.PathLike, *, verdict: str | None = None,
                source: str = "", run: bool = True, timeout: float = RUN_TIMEOUT_S) -> Path:
    """``write_standalone`` of a random graph (a spec file's), judged by its ACC-5 criteria."""
    model, feeds = graph.model()
    return write_standalone(driver, model, feeds, out_dir, expected=graph.expected,
                            tolerance=graph_tolerances(graph, model), verdict=verdict, source=source,
                            run=run, timeout=timeout)


def measure(path: str | os.PathLike, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """Run the reproducer's script once (a child process, ``timeout`` seconds), record how it
    ended in case.json and the README, and return case.json's content."""
    path = Path(path)
    case = load_case(path)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", WITHOUT_NNCERT], cwd=path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        hung = True
    text = out.decode(errors="replace")
    code = proc.returncode
    if hung:  # a hang's reproduction: the runtime never answered (case.json: ``seconds``)
        outcome, what = "hung", f"still running after {timeout:g} s: killed"
    elif code is not None and code < 0:
        outcome, what = "crashed", f"killed by {_signal_name(-code)}"
    else:
        outcome = {0: "not_reproduced", 1: "reproduced"}.get(code, "error")
        what = f"exit status {code}"
    diffs = [float(m) for m in re.findall(r"max abs difference (\S+);", text)]
    worst = max(diffs) if diffs else None
    case.update(outcome=outcome, returncode=None if hung else code,
                signal=_signal_name(-code) if not hung and code is not None and code < 0 else None,
                max_abs_diff=worst if worst is None or math.isfinite(worst) else None,
                ended=what, seconds=round(time.monotonic() - started, 2),
                output=_tail_lines(text))
    save_case(path, case)
    return case


def write_of_test(test_id: str, spec: str, out_dir: str | os.PathLike, minimise: bool = True,
                  declined: bool = False, timeout: float = RUN_TIMEOUT_S, peers: str | None = None) -> Path:
    """The reproducer of a failing test id on driver ``spec``: the test runs with
    ``--standalone-dir`` in a pytest child process (under the crash guard: a test that kills
    its process leaves its reproducer, run here afterwards), and its reproducer moves to
    ``out_dir`` (new or empty); with ``minimise``, a wrong result is minimised first
    (``--standalone-minimise``: nncert.repro.minimise); with ``declined``, a case the driver
    declines is written too (``--standalone-declined``), with the N-way verdict of ``peers``
    (``--triage-peers``; default: the default peers) on it as on a failure; a script the test did not run (its
    case killed or hung the process) runs here for ``timeout`` seconds. StandaloneError (one
    line) when the test does not fail, is unknown, or writes no reproducer (a test that is no
    per-operation case or random graph)."""
    from nncert.certify.runner import pytest_arguments

    out = check_out_dir(out_dir)
    parent = files.own_dir(out.absolute().parent)
    with tempfile.TemporaryDirectory(prefix=".nncert-standalone-", dir=parent) as staging:
        command = [sys.executable, "-m", "pytest", *pytest_arguments([test_id]), f"--driver={spec}",
                   f"--standalone-dir={staging}", "-q", "-p", "no:cacheprovider"]
        if minimise:
            command.append("--standalone-minimise")
        if declined:
            command.append("--standalone-declined")
        if peers is not None:
            command.append(f"--triage-peers={peers}")
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=TEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise StandaloneError(f"{test_id} ran longer than {TEST_TIMEOUT_S} s: stopped") from None
        lines = [ln.strip() for ln in done.stdout.decode(errors="replace").splitlines() if ln.strip()]
        last = lines[-1] if lines else f"pytest exited with status {done.returncode}"
        written = [p for p in Path(staging).iterdir() if p.is_dir()]
        if len(written) != 1:
            if done.returncode in (4, 5):  # usage error, nothing collected
                raise StandaloneError(f"{test_id}: no such test on {spec} ({last.strip('()')})")
            if done.returncode == 0 and not written:  # passed, or skipped (declined)
                raise StandaloneError(f"{test_id} does not fail on {spec} ({last}): there is nothing "
                                      f"to reproduce")
            raise StandaloneError(f"{test_id} on {spec} wrote {len(written)} reproducers ({last}): only "
                                  f"the per-operation cases and random graphs of one test id are written")
        if load_case(written[0]).get("outcome") is None:  # the case killed its process
            measure(written[0], timeout)
        os.rename(written[0], out)  # out is missing or an empty directory
    return out


def _declined_verdict(model: Model, feeds: list[np.ndarray], expected: list[np.ndarray],
                      relaxed: bool) -> str | None:
    """The N-way verdict of the session's triage (None when off) on a case the driver
    declined, so gave no outputs: which peers agree with the reference."""
    from nncert.testing import triage

    if triage.ACTIVE is None:
        return None
    verdict = triage.ACTIVE.verdict(model, feeds, expected, None, relaxed, budgeted=False)
    triage.ACTIVE.take()  # not the next test's report's
    return verdict.summary


def record_verdict(path: str | os.PathLike, verdict: str) -> None:
    """Add the N-way verdict, known once the case failed, to a written reproducer."""
    path = Path(path)
    case = load_case(path)
    case["verdict"] = verdict
    save_case(path, case)


def load_case(path: str | os.PathLike) -> dict[str, Any]:
    """A reproducer's case.json (StandaloneError when it is not one)."""
    from nncert.datafiles import read_json

    case = read_json(Path(path) / "case.json", StandaloneError)
    if not isinstance(case, dict) or case.get("format") != FORMAT:
        raise StandaloneError(f"{path}: not a standalone reproducer (case.json of format {FORMAT})")
    return case


# ---------------------------------------------------------------------------------------
# the pytest plugin's --standalone-dir


def directory_name(test_id: str) -> str:
    """The directory of a test's reproducer: its id with every character that is not a
    letter, digit, '.', '-' or '_' as '_' (long ids cut, with a hash of the whole)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_id).strip("._-") or "test"
    if len(name) > 150:
        name = f"{name[:130]}-{hashlib.blake2b(test_id.encode(), digest_size=6).hexdigest()}"
    return name


class Session:
    """Reproducers of a pytest session's failing cases, one directory per test under
    ``directory``. A per-operation case is written before the driver runs it (``before_case``),
    so that a case that kills the process leaves its reproducer; the script then runs once
    the case has failed (``finish``), and a passing case's directory is removed."""

    def __init__(self, directory: str | os.PathLike, minimise: bool = False, declined: bool = False) -> None:
        self.directory = Path(directory)
        self.minimise = minimise
        #: Also write (and keep, and run) the cases the driver declines: how a defect that the
        #: support probe found (a runtime that dies running an operation) gets its reproducer.
        self.declined = declined
        #: test id -> the declined case kept (model, inputs, expected, relaxed), for its verdict
        self._kept: dict[str, tuple] = {}
        self.test_id: str | None = None
        self.written: dict[str, Path] = {}
        #: test id -> what ``before_case`` wrote its reproducer of (for ``minimise``)
        self._cases: dict[str, tuple] = {}

    def _path(self) -> Path | None:
        if self.test_id is None or self.test_id in self.written:
            return None  # one reproducer a test: its first case
        return self.directory / directory_name(self.test_id)

    def before_case(self, driver: Driver, model: Model, feeds: Sequence[np.ndarray | None],
                    expected: Sequence[np.ndarray], relaxed: bool, note: str = "",
                    declined: bool = False) -> None:
        path = self._path()
        if path is None:
            return
        if declined:
            self._kept[self.test_id] = (model.copy(), [np.array(a) for a in feeds],
                                        [np.array(e) for e in expected], relaxed)
        try:
            self.written[self.test_id] = write_standalone(
                driver, model, feeds, path, expected=expected, relaxed=relaxed, source=self.test_id,
                note=note, run=False)
            if self.minimise:
                self._cases[self.test_id] = (driver, model.copy(), [np.array(a) for a in feeds],
                                             relaxed, note)
        except (StandaloneError, OSError) as e:
            print(f"nncert: no standalone reproducer for {self.test_id}: {e}", file=sys.stderr, flush=True)

    def graph_failed(self, driver: Driver, graph: Graph, verdict: str | None,
                     spec: str | os.PathLike) -> None:
        """A random graph that failed (shrunk, written as the spec file ``spec``)."""
        path = self._path()
        if path is None:
            return
        try:
            self.written[self.test_id] = write_graph(driver, graph, path, verdict=verdict,
                                                     source=f"{self.test_id} (spec file {spec})")
        except (StandaloneError, OSError) as e:
            print(f"nncert: no standalone reproducer for {self.test_id}: {e}", file=sys.stderr, flush=True)

    def finish(self, test_id: str, failed: bool, verdict: str | None = None) -> None:
        """After a test's call: keep and run the reproducer of a failed test (an expected
        failure too), remove a passed or skipped one's."""
        path = self.written.get(test_id)
        self.test_id = None
        if path is None:
            return
        if not failed and test_id not in self._kept:
            shutil.rmtree(path, ignore_errors=True)
            del self.written[test_id]
            return
        try:
            kept = self._kept.pop(test_id, None)
            if not verdict and kept is not None:  # declined: no test failed, so none was triaged
                verdict = _declined_verdict(*kept)
            if verdict:
                record_verdict(path, verdict)
            if load_case(path).get("outcome") is None:
                measure(path)
            if test_id in self._cases and load_case(path).get("outcome") == "reproduced":
                self._minimised(path, *self._cases.pop(test_id))
        except (StandaloneError, OSError) as e:
            print(f"nncert: the standalone reproducer {path} could not be run: {e}", file=sys.stderr,
                  flush=True)


    def _minimised(self, path: Path, driver: Driver, model: Model, feeds: list[np.ndarray],
                   relaxed: bool, note: str) -> None:
        """Replace the reproducer at ``path`` by one of the smallest inputs and simplest values
        that keep the wrong result (nncert.repro.minimise), if its script reproduces too."""
        from nncert.repro.minimise import minimise, still_wrong

        small, small_feeds, steps = minimise(model, feeds, still_wrong(driver, relaxed))
        if not steps:
            return
        case = load_case(path)
        staging = path.with_name(f".{path.name}.minimised")
        shutil.rmtree(staging, ignore_errors=True)
        what = f"Minimised by nncert ({'; '.join(steps)})."
        write_standalone(driver, small, small_feeds, staging, relaxed=relaxed, source=case["source"],
                         verdict=case.get("verdict"), note=f"{note} {what}".strip())
        if load_case(staging).get("outcome") != "reproduced":  # the script must show it too
            shutil.rmtree(staging, ignore_errors=True)
            return
        shutil.rmtree(path)
        staging.rename(path)


#: The session's writer, set by the pytest plugin (--standalone-dir); None: off.
ACTIVE: Session | None = None


def set_active(session: Session | None) -> None:
    global ACTIVE
    ACTIVE = session


# ---------------------------------------------------------------------------------------
# helpers


def _as_the_driver_runs(driver: CompiledDriver, model: Model, feeds: list[np.ndarray]) -> tuple[Model, list]:
    """The model the driver translates (float16 widened, shapes of these inputs filled in) and
    the inputs as it feeds them (CompiledPreparedModel.execute_synchronously)."""
    from nncert.hal.transform import ShapeUnknown, fully_specified, specialize_shapes, widen_float16

    wide = widen_float16(model.copy())
    if not fully_specified(wide):
        try:
            wide = specialize_shapes(wide, [a.shape for a in feeds])
        except (ShapeUnknown, ValueError) as e:
            raise StandaloneError(f"the model's shapes for these inputs: {_one_line(e)}") from None
    types = [dtype_of(wide.main.operands[i].type) for i in wide.main.input_indexes]
    return wide, [a if a.dtype == t else a.astype(t) for a, t in zip(feeds, types, strict=True)]


def _reference(model: Model, feeds: list[np.ndarray]) -> list[np.ndarray]:
    from nncert.ops.interpreter import run_model

    try:
        return [np.asarray(a) for a in run_model(model.copy(), feeds)]
    except Exception as e:
        raise StandaloneError(f"the reference kernels cannot run the model: {_one_line(e)}") from None


#: Arrays of at most this many elements have their values in case.json and the README.
SHOWN_VALUES = 16


def _small_values(a: np.ndarray) -> dict[str, Any]:
    """{"values": the elements as a nested list} for a small array (a minimised finding's),
    else {}; non-finite floats as strings, which JSON cannot hold."""
    if a.size > SHOWN_VALUES:
        return {}
    if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
        return {"values": np.vectorize(repr, otypes=[object])(a.astype(np.float64)).tolist()}
    return {"values": a.tolist()}


def _output(k: int, operand: Operand, expected: np.ndarray, tolerance: dict) -> dict[str, Any]:
    item: dict[str, Any] = {"name": f"output{k}", "type": operand.type.name, "shape": list(expected.shape),
                            "dtype": str(expected.dtype), **_small_values(expected)}
    if operand.type.is_quant and operand.channel_quant is None:
        item.update(scale=operand.scale, zero_point=operand.zero_point)
    item["tolerance"] = tolerance
    return item


def _operand_text(model: Model, sg: Any, index: int) -> str:
    from nncert.hal.transform import CONSTANT
    from nncert.hal.types import OperandLifeTime

    o = sg.operands[index]
    if o.lifetime is OperandLifeTime.NO_VALUE:
        return f"{o.type.name} (omitted)"
    text = o.type.name if o.type.is_scalar else f"{o.type.name} {list(o.dimensions)}"
    if o.type.is_quant:
        text += f" scale={o.scale:g} zero_point={o.zero_point}" if o.channel_quant is None else \
            f" per-channel scales along axis {o.channel_quant.channel_dim}"
    if o.lifetime in CONSTANT:
        value = model.constant_value(o)
        single = value is not None and np.size(value) == 1
        text += f" = {np.asarray(value).item()}" if single else " (constant)"
    return text


def _model_lines(model: Model) -> list[str]:
    """One line per operation, with its operands' types, shapes and quantisation."""
    lines = []
    for n, sg in enumerate((model.main, *model.referenced)):
        if n:
            lines.append(f"subgraph {n}:")
        for op in sg.operations:
            ins = ", ".join(_operand_text(model, sg, i) for i in op.inputs)
            outs = ", ".join(_operand_text(model, sg, i) for i in op.outputs)
            lines.append(f"{op.type.name}({ins}) -> {outs}")
    return lines


def _title(runtime: str, version: str, model: Model) -> str:
    names = list(dict.fromkeys(op.type.name for op in model.main.operations))
    types = list(dict.fromkeys(model.main.operands[i].type.name for i in model.main.input_indexes))
    what = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{runtime} {version}: {what} on {', '.join(types[:3])} inputs"


def _npz(items: list[dict], arrays: Sequence[np.ndarray]) -> bytes:
    """The arrays as a .npz, named by case.json's inputs or outputs."""
    buffer = io.BytesIO()
    np.savez(buffer, **{item["name"]: a for item, a in zip(items, arrays, strict=True)})
    return buffer.getvalue()


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` if a reproducer may go there: missing, or an empty directory of this user's
    that is no symlink; StandaloneError otherwise."""
    path = Path(out_dir)
    if os.path.lexists(path):
        try:
            files.check_dir(path)
        except files.UnsafePathError as e:
            raise StandaloneError(str(e)) from None
        if any(os.scandir(path)):
            raise StandaloneError(f"{path}: not empty: a reproducer goes into a new or empty directory")
    return path


def _fresh_dir(out_dir: str | os.PathLike) -> Path:
    path = check_out_dir(out_dir)
    try:
        return files.own_dir(path)
    except files.UnsafePathError as e:
        raise StandaloneError(str(e)) from None


def save_case(path: Path, case: dict[str, Any]) -> None:
    """Write case.json and the README made from it."""
    files.write_atomic(path / "case.json", json.dumps(case, indent=1) + "\n")
    files.write_atomic(path / "README.md", readme(case))


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _tail_lines(text: str) -> list[str]:
    lines = text.rstrip().splitlines()
    if len(lines) > OUTPUT_LINES:  # its head says what is wrong; its last line the conclusion
        lines = [*lines[:OUTPUT_LINES - 2], "...", lines[-1]]
    return [line[:300] for line in lines]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__


_OUTCOME_WORDS = {
    "reproduced": "reproduced: an output is outside its tolerance (exit status 1)",
    "not_reproduced": "not reproduced: every output was within its tolerance (exit status 0)",
    "crashed": "crashed",
    "error": "error",
    "hung": "hung: still running at the deadline",
}


def readme(case: dict[str, Any]) -> str:
    """The README of a reproducer, from its case.json."""
    options = ", ".join(f"{k}={v}" for k, v in case["options"].items())
    lines = [f"# {case['title']}", "",
             f"Runtime: {case['runtime']} {case['runtime_version']} (options: {options}).", ""]
    lines += ["## What is wrong", ""]
    outcome = case.get("outcome")
    if outcome is None:
        lines += ["The script has not been run yet (the reproducer was written before nncert ran the case)."]
    else:
        words = _OUTCOME_WORDS[outcome]
        if outcome in ("crashed", "error", "hung"):
            words += f" ({case.get('ended', '')})"
        lines += [f"When it was written, `python run.py` gave: **{words}**:", "", "```",
                  *case.get("output", []), "```"]
    if case.get("note"):
        lines += ["", case["note"]]
    lines += ["", "## The model", "", f"{', '.join(case['model_files'])}: "
              f"{len(case['operations'])} operation(s).", "", "```", *case["model"], "```", "",
              "Inputs (inputs.npz):", ""]
    lines += [f"- {i['name']} {i['type']} {i['shape']} {i['dtype']}" +
              (f" = {i['values']}" if "values" in i else "") for i in case["inputs"]]
    lines += ["", "Outputs (expected.npz: the reference results) and their tolerances:", ""]
    lines += [f"- {o['name']} {o['type']} {o['shape']} {o['dtype']}: {o['tolerance']['text']}" +
              (f"; expected {o['values']}" if "values" in o else "") for o in case["outputs"]]
    lines += ["", "## Who agrees", "",
              "The expected results are those of nncert's reference kernels (numpy implementations of "
              "the operations' specified semantics)."]
    lines += [case["verdict"] if case.get("verdict") else "Other runtimes were not asked about this case."]
    lines += ["", "## Run it", "", "```", f"pip install {' '.join(case['packages'])} numpy",
              case["command"], "```", "",
              "Exit status 0: every output within its tolerance (not reproduced); 1: an output outside "
              "it (reproduced); 2: the runtime is not installed; 3: the runtime raised an error. A "
              "process killed by a signal reproduces a crash; one that does not end (case.json's "
              "`ended` says how long it was given) reproduces a hang. run.py prints, per output, its shape "
              "and type, the largest difference, the worst elements and the tolerance.", "",
              "## Source", "",
              f"Found by {case['driver']}" + (f": `{case['source']}`." if case["source"] else ".")]
    return "\n".join(lines) + "\n"


__all__ = ["OUTCOMES", "OUTCOME_KEYS", "Session", "StandaloneError", "check_out_dir", "directory_name",
           "graph_tolerances", "load_case", "measure", "record_verdict", "tolerances", "write_graph",
           "write_standalone"]
