"""Child-process runs that tests wait on, started as soon as collection says they are wanted.

A test whose work is one long child process (a whole suite against a real runtime, the
conformance suite through the service) declares it with a module-level
``runs_to_start(item)`` giving the argument lists its item will run; ``tests/conftest.py``
starts them all once collection is done, so that they run on the second core while this
process goes through the other tests, and the test then only waits (``run``). A run nobody
asked for beforehand starts when the test asks; the verdicts are the same either way.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Runs started at once, at most; the others start as the first finish (two cores: the
#: main process keeps one).
PARALLEL = max(1, (os.cpu_count() or 2) - 1)

_dir: Path | None = None
_pending: list[tuple[str, ...]] = []
_runs: dict[tuple[str, ...], tuple[subprocess.Popen, Path, Path]] = {}


def scratch() -> Path:
    """A directory for the runs' files (reports), removed at the end of the session."""
    global _dir
    if _dir is None:
        _dir = Path(tempfile.mkdtemp(prefix="nncert-bg-"))
    return _dir


def want(argv: Sequence[str]) -> None:
    """Queue ``argv`` to start as soon as a slot is free."""
    key = tuple(argv)
    if key not in _runs and key not in _pending:
        _pending.append(key)
    _fill()


def _fill() -> None:
    while _pending and sum(run[0].poll() is None for run in _runs.values()) < PARALLEL:
        _start(_pending.pop(0))


def _start(key: tuple[str, ...]) -> None:
    out, err = (scratch() / f"run{len(_runs)}.{kind}" for kind in ("out", "err"))
    with out.open("w") as o, err.open("w") as e:
        _runs[key] = (subprocess.Popen(list(key), cwd=ROOT, stdout=o, stderr=e, text=True), out, err)


def run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """The finished run of ``argv`` (started now unless it already was): its exit code,
    stdout and stderr."""
    key = tuple(argv)
    if key in _pending:
        _pending.remove(key)
    if key not in _runs:
        _start(key)
    proc, out, err = _runs[key]
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        _fill()
    return subprocess.CompletedProcess(list(key), proc.returncode, out.read_text(), err.read_text())


def stop_all() -> None:
    """Kill what is still running (a test that never asked for its run) and remove the files."""
    import shutil

    _pending.clear()
    for proc, *_ in _runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _runs.clear()
    if _dir is not None:
        shutil.rmtree(_dir, ignore_errors=True)
