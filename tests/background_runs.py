"""Child-process runs that tests wait on, started as soon as collection says they are wanted.

A test whose work is one long child process (a whole suite against a real runtime, the
conformance suite through the service, a suite against a mutant driver) declares it with a
module-level ``runs_to_start(item)`` giving the runs its item will wait on (argument lists, or
``Run`` for a working directory or a place at the head of the queue); ``tests/conftest.py``
queues them once collection is done, so that they run beside the tests, and the test then
only waits (``run``). A run nobody queued beforehand is queued when its test asks; the
verdicts are the same either way. This is also what keeps pytest-xdist workers from doing
the same work twice: every worker collects every test, so a module-scoped fixture that
starts its module's runs would start all of them on each worker that runs one of its tests.

One launcher process (this file run as a script) starts and reaps the runs for the whole
session, PARALLEL at a time plus one for each test process waiting on a run (its core is
idle meanwhile): a run some test waits on before any other, then the runs marked ``first``
(the longest), then the others in the order they came. Runs marked ``idle`` (a faulty driver's
hangs and crashes: mostly waiting out deadlines) go IDLE_PARALLEL at a time beside those, so
that no test process sits through their deadlines. The session's first process owns it
(the only process of a serial session, the controller of a pytest-xdist one, which hands the
directory to its workers): it starts it at configuration and ends it at the end of the
session, so a test process gains no child and no descriptor from it, and the tests that count
their own descriptors and zombie children see no run start or end. A run is queued by a
request file in the shared directory, named by a digest of its argument list and working
directory: every worker collects every test and queues the same runs, and each runs once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nncert.files import share_bytecode

ROOT = Path(__file__).resolve().parent.parent
#: Runs going at once, at most (on two cores the tests keep one).
PARALLEL = int(os.environ.get("NNCERT_BACKGROUND_PARALLEL", "0")) or max(1, (os.cpu_count() or 2) - 1)
#: Runs marked ``idle`` going at once, beside the PARALLEL others.
IDLE_PARALLEL = 2
#: The key a pytest-xdist worker finds the shared directory under, in its ``workerinput``.
WORKER_KEY = "nncert_background_runs"

_dir: Path | None = None
_launcher: subprocess.Popen | None = None


def start(directory: str | None = None, worker: str = "main") -> None:
    """Begin the session: a worker joins its controller's ``directory``; the session's first
    process makes the directory and starts the launcher on it. Each process of the session
    gets a driver state directory of its own unless NNCERT_STATE_DIR names one: the HAL cache's
    token store is reset by a driver of the same name and another version string, and tests
    in other processes run such drivers at the same time."""
    global _dir, _launcher
    if directory is not None:
        _dir = Path(directory)
    else:
        _dir = Path(tempfile.mkdtemp(prefix="nncert-bg-"))
        # The session's children share one bytecode cache (nncert.files.share_bytecode), and
        # this process writes into it too.
        if share_bytecode(_dir / "pycache"):
            sys.dont_write_bytecode = False
            sys.pycache_prefix = str(_dir / "pycache")
        _launcher = subprocess.Popen([sys.executable, __file__, str(_dir)], stdin=subprocess.PIPE, cwd=ROOT)
    # A worker inherits the controller's environment: the controller's own directory there
    # was not named by the user, and is replaced by the worker's.
    if os.environ.get("NNCERT_STATE_DIR", str(_dir / "state-main")) == str(_dir / "state-main"):
        os.environ["NNCERT_STATE_DIR"] = str(_dir / f"state-{worker}")


def scratch() -> Path:
    """The session's directory for the runs' files (reports, output), removed at its end."""
    if _dir is None:
        start()
    assert _dir is not None
    return _dir


@dataclass(frozen=True)
class Run:
    """A run: its argument list, its working directory (the repository's by default),
    whether it goes to the head of the queue (a long run, so that it does not end last), and
    whether it mostly waits (``idle``: hangs' deadlines; it takes no core's slot)."""

    argv: tuple[str, ...]
    cwd: str | None = None
    first: bool = False
    idle: bool = False


def _run(run: Run | Sequence[str]) -> Run:
    return run if isinstance(run, Run) else Run(tuple(run))


def _base(run: Run) -> Path:
    # ``first`` and ``idle`` are only how the run queues: the test that waits on it may name it
    # without.
    key = json.dumps([list(run.argv), run.cwd])
    return scratch() / hashlib.sha256(key.encode()).hexdigest()[:20]


def want(what: Run | Sequence[str]) -> None:
    """Queue a run (it starts as soon as the launcher has a free slot); once a session."""
    run = _run(what)
    base = _base(run)
    try:
        fd = os.open(base.with_suffix(".tmp-req"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # queued by this process or another worker
    with os.fdopen(fd, "w") as f:
        json.dump({"argv": list(run.argv), "cwd": run.cwd, "first": run.first, "idle": run.idle}, f)
    os.replace(base.with_suffix(".tmp-req"), base.with_suffix(".req"))


def run(what: Run | Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """The finished run (queued now unless it already was): its exit code, stdout and
    stderr. Raises subprocess.TimeoutExpired after ``timeout`` seconds of waiting. While it
    waits, this process lends its core to the launcher, and names the run it waits on, which
    starts next unless it has already (a file in ``waiting/``)."""
    run = _run(what)
    want(run)
    base = _base(run)
    done = base.with_suffix(".rc")
    deadline = time.monotonic() + timeout
    waiting = scratch() / "waiting" / f"{os.getpid()}"
    waiting.parent.mkdir(exist_ok=True)
    waiting.write_text(base.name)
    try:
        while not done.exists():
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(list(run.argv), timeout)
            time.sleep(0.2)
    finally:
        waiting.unlink(missing_ok=True)
    out, err = (base.with_suffix(kind).read_text() for kind in (".out", ".err"))
    return subprocess.CompletedProcess(list(run.argv), int(done.read_text()), out, err)


def stop_all() -> None:
    """End the session: the owner ends the launcher (it kills what still runs: a run no test
    asked for) and removes the directory; a worker only forgets it."""
    global _launcher, _dir
    if _launcher is not None:
        assert _launcher.stdin is not None
        _launcher.stdin.close()
        _launcher.wait()
        _launcher = None
        if _dir is not None:
            shutil.rmtree(_dir, ignore_errors=True)
    _dir = None


def _read(path: Path) -> str:
    """A waiting file's run name ("" if it went, or is being written, meanwhile)."""
    try:
        return path.read_text()
    except OSError:
        return ""


def _request(path: Path) -> dict:
    """A request file: {"argv", "cwd", "first", "idle"} (or, written by hand, the argument
    list)."""
    request = json.loads(path.read_text())
    request = request if isinstance(request, dict) else {"argv": request}
    return {"cwd": None, "first": False, "idle": False, **request}


def _serve(directory: Path) -> None:
    """The launcher: runs each request file's argument list (``first`` ones, then the oldest
    first, a run a test waits on before either), PARALLEL at a time and one more for each test
    process waiting on a run, ``idle`` ones IDLE_PARALLEL at a time beside them, output to
    base.out / base.err, and writes the exit code to base.rc when one ends (atomically). When
    its input closes it kills what still runs and exits."""
    seen: set[Path] = set()
    queue: list[Path] = []
    running: list[tuple[subprocess.Popen, Path]] = []
    idle: set[Path] = set()  # the idle runs among the queued and running ones
    started: dict[Path, float] = {}
    log = os.environ.get("NNCERT_BACKGROUND_LOG")  # each run's wall and CPU seconds, for profiling
    os.set_blocking(sys.stdin.fileno(), False)
    while True:
        try:
            if os.read(sys.stdin.fileno(), 4096) == b"":
                break
        except BlockingIOError:
            pass
        fresh = sorted((p for p in directory.glob("*.req") if p not in seen),
                       key=lambda p: p.stat().st_mtime_ns)
        seen.update(fresh)
        if fresh:
            queue += [p.with_suffix("") for p in fresh]
            idle.update(p.with_suffix("") for p in fresh if _request(p)["idle"])
            queue.sort(key=lambda base: not _request(base.with_suffix(".req"))["first"])  # stable
        for proc, base in list(running):
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                running.remove((proc, base))
                proc.returncode = os.waitstatus_to_exitcode(status)
                if log:
                    with open(log, "a") as f:
                        f.write(f"{time.monotonic() - started[base]:7.1f} s wall "
                                f"{usage.ru_utime + usage.ru_stime:7.1f} s cpu  "
                                f"{' '.join(_request(base.with_suffix('.req'))['argv'][3:])}\n")
                base.with_suffix(".rc-tmp").write_text(str(proc.returncode))
                os.replace(base.with_suffix(".rc-tmp"), base.with_suffix(".rc"))
        waits = [_read(p) for p in (directory / "waiting").glob("*")]
        while True:
            idling = sum(base in idle for _, base in running)
            free = {True: IDLE_PARALLEL - idling, False: PARALLEL + len(waits) - (len(running) - idling)}
            # An awaited run takes a slot of either kind: its test is waiting.
            awaited = [b for b in queue if b.name in waits and max(free.values()) > 0]
            startable = awaited or [b for b in queue if free[b in idle] > 0]
            if not startable:
                break
            base = startable[0]
            queue.remove(base)
            request = _request(base.with_suffix(".req"))
            # A state directory of its own (the HAL cache's token store): a driver of the same
            # name and another version string, in a test beside it, resets a shared store.
            env = {**os.environ, "NNCERT_STATE_DIR": str(base.with_suffix(".state"))}
            with base.with_suffix(".out").open("w") as out, base.with_suffix(".err").open("w") as err:
                running.append((subprocess.Popen(request["argv"], cwd=request["cwd"] or ROOT, stdout=out,
                                                 stderr=err, env=env), base))
            started[base] = time.monotonic()
        time.sleep(0.2)
    for proc, _ in running:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
