"""Child-process runs that tests wait on, started as soon as collection says they are wanted.

A test whose work is one long child process (a whole suite against a real runtime, the
conformance suite through the service) declares it with a module-level
``runs_to_start(item)`` giving the argument lists its item will run; ``tests/conftest.py``
queues them once collection is done, so that they run on the second core while this process
goes through the other tests, and the test then only waits (``run``). A run nobody queued
beforehand is queued when its test asks; the verdicts are the same either way.

The runs are started and reaped by one launcher process (this file run as a script), which
lives for the whole session: this process gains one child and one pipe at collection and
nothing afterwards, so the tests that count their own descriptors and zombie children see
no run start or end.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Runs going at once, at most (two cores: the main process keeps one).
PARALLEL = max(1, (os.cpu_count() or 2) - 1)

_dir: Path | None = None
_launcher: subprocess.Popen | None = None
_queued: dict[tuple[str, ...], Path] = {}


def scratch() -> Path:
    """A directory for the runs' files (reports, output), removed at the end of the session."""
    global _dir
    if _dir is None:
        _dir = Path(tempfile.mkdtemp(prefix="nncert-bg-"))
    return _dir


def want(argv: Sequence[str]) -> None:
    """Queue ``argv`` (it starts as soon as the launcher has a free slot)."""
    global _launcher
    key = tuple(argv)
    if key in _queued:
        return
    if _launcher is None:
        _launcher = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, cwd=ROOT)
    base = scratch() / f"run{len(_queued)}"
    _queued[key] = base
    assert _launcher.stdin is not None
    _launcher.stdin.write((json.dumps([list(key), str(base)]) + "\n").encode())
    _launcher.stdin.flush()


def run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """The finished run of ``argv`` (queued now unless it already was): its exit code, stdout
    and stderr. Raises subprocess.TimeoutExpired after ``timeout`` seconds of waiting."""
    want(argv)
    base = _queued[tuple(argv)]
    done = base.with_suffix(".rc")
    deadline = time.monotonic() + timeout
    while not done.exists():
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(list(argv), timeout)
        time.sleep(0.2)
    out, err = (base.with_suffix(kind).read_text() for kind in (".out", ".err"))
    return subprocess.CompletedProcess(list(argv), int(done.read_text()), out, err)


def stop_all() -> None:
    """End the launcher (it kills what still runs: a run no test asked for) and remove the files."""
    global _launcher
    if _launcher is not None:
        assert _launcher.stdin is not None
        _launcher.stdin.close()
        _launcher.wait()
        _launcher = None
    _queued.clear()
    if _dir is not None:
        shutil.rmtree(_dir, ignore_errors=True)


def _serve() -> None:
    """The launcher: one JSON request a line on stdin, [argv, base path]; runs them, PARALLEL
    at a time, output to base.out / base.err, and writes the exit code to base.rc when one
    ends (atomically). At the end of its input it kills what still runs and exits."""
    queue: list[tuple[list[str], Path]] = []
    running: list[tuple[subprocess.Popen, Path]] = []
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    pending = b""
    while True:
        if sel.select(0.2):
            chunk = os.read(sys.stdin.fileno(), 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            queue += [(argv, Path(base)) for argv, base in map(json.loads, filter(None, lines))]
        for proc, base in list(running):
            if proc.poll() is not None:
                running.remove((proc, base))
                base.with_suffix(".tmp").write_text(str(proc.returncode))
                os.replace(base.with_suffix(".tmp"), base.with_suffix(".rc"))
        while queue and len(running) < PARALLEL:
            argv, base = queue.pop(0)
            with base.with_suffix(".out").open("w") as out, base.with_suffix(".err").open("w") as err:
                running.append((subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err), base))
    for proc, _ in running:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    _serve()
