"""Running a plan against a driver: each suite a pytest run in a child process, supervised.

The child records every test's start and outcome in the journal (the pytest plugin's
``--nncert-journal``). ``--jobs N`` is N processes running tests: suites side by side, each
in one process while other suites wait for a slot; a suite that starts with more slots free
than suites waiting runs on those as pytest-xdist workers (``-n``: the last suites of a plan,
a plan of fewer suites than N); an exclusive suite, whose timings must not share the machine,
runs alone and in one process. Under xdist the workers journal their tests, and the xdist
controller records the CRASH of a test in which a worker died (which ends the child: it
restarts as below). The runner watches the
journal: a test that runs past the suite's ``test_timeout`` is a HANG (the child is killed
with its workers; the other tests in flight have no outcome and run again); a child that dies
in a test leaves a start without an outcome, which the runner records as that test's CRASH
(under xdist: when the child itself was killed by a signal in that test; with several in
flight none is blamed, and the suite goes on serially, where a death names its test; a worker
that died ends the child, its CRASH journaled). Either way the suite is started again,
isolated test by test from then on (``--isolate``), and runs what has no outcome yet. A
suite past its own deadline is stopped; what did not run has no outcome and the report says
INCOMPLETE. ``--resume`` is the same mechanism over an earlier run's journal.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

from nncert import __version__, datafiles, files
from nncert.certify import journal, shard
from nncert.certify.plan import Plan, Suite, suite_files
from nncert.resources import SUITE_DIRS, SUITES_INI, suites_root
from nncert.testing.outcome import how_it_ended

RUN_FILE = "run.json"
JOURNAL_FILE = "journal.jsonl"
LOGS_DIR = "logs"
#: What tests leave behind for the report's reproducers (failing random graphs, fuzz findings).
ARTIFACTS_DIR = "artifacts"
#: pytest exit statuses of a session that ran to its end (tests failed, or none selected).
_FINISHED = (0, 1, 5)
#: A suite whose child keeps dying is given up after this many starts.
MAX_STARTS = 25
_TAIL = 2000


class CertifyError(Exception):
    """Bad input to certification (a usage error): one line, exit status 2."""


@dataclass
class RunSettings:
    """What a run was asked to do; ``--resume`` continues exactly this."""

    driver: str
    plan: str  # the name or file given
    plan_sha256: str
    suites: list[str]
    expectations: list[str] = field(default_factory=list)
    jobs: int = 1
    nncert: str = __version__
    #: ``I/N``: this run is shard I of N (docs/certification.md, "Sharding"); empty: the whole plan.
    shard: str = ""
    #: A sharded or merged run: how the tests were dealt (round-robin, durations), and the SHA-256
    #: of the partition file, the same on every shard.
    partition: str = ""
    partition_sha256: str = ""
    #: The report whose durations balanced the shards, as given.
    durations_from: str = ""
    #: A merged run: its shards, ``1/N`` to ``N/N``.
    merged: list[str] = field(default_factory=list)

    def save(self, out: Path) -> None:
        files.write_atomic(out / RUN_FILE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, out: Path) -> RunSettings:
        path = out / RUN_FILE
        if not path.exists():
            raise CertifyError(f"{out} holds no certification run ({RUN_FILE} is missing)")
        data = datafiles.read_json(path, CertifyError)
        if not isinstance(data, dict):
            raise CertifyError(f"{path}: not a certification run's settings (not a JSON object)")
        kinds = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(data) - set(kinds))
        if unknown:
            raise CertifyError(f"{path}: not a certification run's settings (unknown key {unknown[0]!r})")
        for key, kind in kinds.items():
            if key not in data:
                if key in ("driver", "plan", "plan_sha256", "suites"):
                    raise CertifyError(f"{path}: not a certification run's settings (no {key!r})")
                continue
            value = data[key]
            if kind == "int":
                datafiles.integer(value, f"{path}: {key}", CertifyError, lo=1, hi=1024)
            elif kind == "str":
                datafiles.string(value, f"{path}: {key}", CertifyError)
            elif not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise CertifyError(f"{path}: {key} must be a list of strings")
        for name in [data["shard"]] if data.get("shard") else data.get("merged", []):
            try:
                shard.parse_shard(name)
            except shard.ShardError as e:
                raise CertifyError(f"{path}: {e}") from None
        return cls(**data)


def pytest_arguments(args: list[str]) -> list[str]:
    """pytest arguments that run nncert's suites from anywhere: the suites' own configuration,
    their root as rootdir (test ids read ``conformance/test_x.py::...``), and test paths given
    relative to that root resolved against it."""
    root = suites_root()
    resolved = [
        str(root / a)
        if a.split("::")[0].split("/")[0] in SUITE_DIRS and not Path(a.split("::")[0]).exists()
        else a
        for a in args
    ]
    return ["-c", str(SUITES_INI), "--rootdir", str(root), "--confcutdir", str(root), *resolved]


def reproduce_command(test_id: str, driver: str, suite: Suite) -> str:
    """The one line that reruns ``test_id`` alone with the suite's options (not its selection)."""
    options: list[str] = []
    skip = False
    for arg in suite.args:
        if skip:
            skip = False
        elif arg in ("-k", "-m"):
            skip = True
        elif arg.startswith("--"):
            options.append(arg)
    return shlex.join(["nncert", "test", test_id, f"--driver={driver}", *options])


def die_with_parent() -> None:
    """In the child, before exec: die when the runner dies (a SIGKILLed ``nncert certify`` must
    not leave suites writing to the journal that ``--resume`` reads)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class JournalTail:
    """The records appended to the journal since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.rest = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        out = []
        for line in lines:
            if line.strip():
                out.append(journal.check_record(json.loads(line), str(self.path)))
        return out


class SuiteRun:
    """One suite's child processes, from its first start to its end."""

    def __init__(
        self,
        suite: Suite,
        settings: RunSettings,
        out: Path,
        state: journal.SuiteState,
        writer: journal.Writer,
        workers: int = 1,
    ) -> None:
        self.suite, self.settings, self.out, self.state, self.writer = suite, settings, out, state, writer
        self.proc: subprocess.Popen | None = None
        self.log_path = out / LOGS_DIR / f"{suite.name}.log"
        self.starts = 0
        self.isolate = False
        #: pytest-xdist workers (``-n``); 1: the suite's tests run in its pytest process.
        self.workers = workers
        self.running: dict[str, float] = {}  # the tests this child started without an outcome yet
        self.hung: list[str] = []  # those past the deadline when the runner killed the child
        self.drained = False  # the journal was read once more after the child ended
        self.killed_for = ""  # why the runner killed the child: "hang" or "deadline"
        self.began = 0.0
        self.done_at_start = len(state.outcomes)
        self.outcomes_at_start = 0
        self.finished = False
        self.result = ""  # finished | error | deadline

    # -- the child

    def command(self) -> list[str]:
        suite, settings = self.suite, self.settings
        artifacts = self.out / ARTIFACTS_DIR
        args = [
            *(str(f) for f in suite_files(suite)),
            f"--driver={settings.driver}",
            f"--nncert-journal={self.out / JOURNAL_FILE}",
            f"--nncert-suite={suite.name}",
            f"--graph-dir={artifacts / 'graphs'}",
            "-q",
            "--tb=no",
            "--no-header",
            "-p",
            "no:randomly",
            "--crash-guard=off",  # this runner supervises the child itself
            *(f"--expectations={e}" for e in settings.expectations),
            *suite.args,
        ]
        if settings.shard:
            partition = self.out / shard.PARTITION_FILE
            args += [f"--nncert-shard={settings.shard}", f"--nncert-partition={partition}"]
        if self.isolate:
            args += ["--isolate", f"--isolate-timeout={suite.test_timeout}"]
        if self.workers > 1:
            # A worker that dies ends the child (xdist replacing it would pay a collection a
            # crash): restarted isolated, as a serial suite is, where a crash costs a fork.
            args += ["-n", str(self.workers), "--max-worker-restart=0"]
        return [sys.executable, "-m", "pytest", *pytest_arguments(args)]

    def start(self) -> None:
        self.starts += 1
        self.killed_for = ""
        self.running, self.hung, self.drained = {}, [], False
        self.outcomes_at_start = len(self.state.outcomes)
        if not self.began:
            self.began = time.monotonic()
        command = self.command()
        record = {
            "event": "suite",
            "suite": self.suite.name,
            "state": "started",
            "start": self.starts,
            "time": time.time(),
            "isolate": self.isolate,
            "command": shlex.join(command),
        }
        if self.settings.shard:  # a merged journal tells the shards' children apart by it
            record["shard"] = self.settings.shard
        self.writer.write(record, sync=True)
        with os.fdopen(files.open_append(self.log_path), "ab") as log:
            log.write(f"\n--- start {self.starts}: {record['command']}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command,
                cwd=self.out / ARTIFACTS_DIR,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def kill(self, why: str) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.killed_for = why
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    # -- what the journal says

    def on_record(self, record: dict[str, Any]) -> None:
        event = record["event"]
        if event == "collected":
            for test in record["tests"]:
                self.state.tests.setdefault(test["id"], test)
        elif event == "start":
            self.state.started[record["id"]] = record
            self.running[record["id"]] = time.monotonic()
        elif event == "outcome":
            self.state.outcomes.setdefault(record["id"], record)
            self.running.pop(record["id"], None)

    # -- supervision

    def check(self, now: float) -> None:
        """Kill a child past a deadline; handle a child that ended (call after the journal was read)."""
        if self.proc is None or self.finished:
            return
        if self.proc.poll() is None:
            limit = self.suite.test_timeout + (5 if self.isolate else 0)
            late = [test_id for test_id, began in self.running.items() if now - began > limit]
            if late:
                self.hung = late
                self.kill("hang")
            elif now - self.began > self.suite.timeout:
                self.kill("deadline")
            return
        if not self.drained:  # what it wrote just before it ended is read first
            self.drained = True
            return
        self._ended(self.proc.returncode)

    def _ended(self, code: int) -> None:
        self.proc = None
        pending = list(self.running)
        blamed = False  # several tests in flight when the whole child died: none is blamed
        if self.killed_for == "deadline":
            self._finish(
                "deadline",
                f"stopped at its deadline of {self.suite.timeout:g} s; "
                f"{len(self.state.missing)} tests did not run",
            )
            return
        if self.killed_for == "hang":  # the others in flight run again
            for test_id in self.hung:
                self._record(
                    test_id,
                    "HANG",
                    f"no outcome within {self.suite.test_timeout:g} s: the suite's process was killed",
                )
        elif self.workers > 1 and code >= 0:
            pass  # it ended itself; a worker that died is journaled; the tests cut short run again
        elif self.workers > 1 and len(pending) > 1:  # killed by a signal, with several in flight
            self.workers, blamed = 1, True
        else:
            for test_id in pending:
                died = how_it_ended(code)
                self._record(test_id, "CRASH", f"the suite's process died in this test ({died})")
        missing = self.state.missing
        progress = len(self.state.outcomes) > self.outcomes_at_start or blamed
        # Every test has its outcome: a child killed in its last test (in flight with the last
        # ones, under xdist) finished the suite as much as one that ended by itself.
        if not missing and (code in _FINISHED or pending or self.killed_for == "hang"):
            ended = f"exit status {code}" if code >= 0 else f"{how_it_ended(code)} in its last tests"
            self._finish("finished", f"pytest {ended}")
        elif missing and progress and self.starts < MAX_STARTS:
            self.isolate = True  # it died once: from here on each test runs in a child of its own
            self.start()
        else:
            self._finish(
                "error",
                f"pytest exit status {code}; {len(missing)} tests without an outcome; {self._log_tail(400)}",
            )

    def _record(self, test_id: str, status: str, message: str) -> None:
        started = self.state.started.get(test_id, {})
        entry = self.state.tests.get(test_id, {})
        record = {
            "event": "outcome",
            "suite": self.suite.name,
            "id": test_id,
            "status": status,
            "req": entry.get("req", []),
            "message": message,
            "detail": self._log_tail(_TAIL),
            "duration": round(time.time() - started.get("time", time.time()), 3),
        }
        self.writer.write(record, sync=True)
        self.on_record(record)

    def _finish(self, result: str, message: str) -> None:
        self.finished, self.result = True, result
        record = {
            "event": "suite",
            "suite": self.suite.name,
            "state": result,
            "message": message,
            "time": time.time(),
        }
        if self.settings.shard:
            record["shard"] = self.settings.shard
        self.writer.write(record, sync=True)

    def _log_tail(self, chars: int) -> str:
        try:
            size = self.log_path.stat().st_size
            with open(self.log_path, "rb") as f:
                f.seek(max(0, size - 4 * chars))
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return " ".join(text.split())[-chars:] if chars < _TAIL else text[-chars:]

    # -- progress

    def counts(self) -> tuple[int, int, int]:
        """(tests with an outcome, tests collected, failures so far)."""
        failures = sum(1 for r in self.state.outcomes.values() if r["status"] in journal.FAILING)
        return len(self.state.outcomes), len(self.state.tests), failures


class Progress:
    """A live line on a terminal (done / total, failures, elapsed, ETA per running suite), and one
    line per finished suite. Off a terminal only the finished lines, without the live one."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.last = 0.0

    def update(self, runs: list[SuiteRun], now: float) -> None:
        if not self.live or now - self.last < 0.5:
            return
        self.last = now
        parts = []
        for run in runs:
            done, total, failures = run.counts()
            elapsed = now - run.began
            fresh = done - run.done_at_start
            eta = f" ETA {_clock(elapsed / fresh * (total - done))}" if fresh and total > done else ""
            parts.append(f"{run.suite.name} {done}/{total or '?'} fail {failures} {_clock(elapsed)}{eta}")
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self.stream.write("\r\x1b[K" + " | ".join(parts)[:width])
        self.stream.flush()

    def finished(self, run: SuiteRun) -> None:
        done, total, _ = run.counts()
        tally: dict[str, int] = {}
        for r in run.state.outcomes.values():
            tally[r["status"]] = tally.get(r["status"], 0) + 1
        what = ", ".join(f"{n} {s}" for s, n in sorted(tally.items(), key=lambda kv: -kv[1])) or "no tests"
        note = "" if run.result == "finished" else f" [{run.result.upper()}]"
        where = f" on {run.workers} workers" if run.workers > 1 else ""
        if self.live:
            self.stream.write("\r\x1b[K")
        self.stream.write(
            f"{run.suite.name}: {done}/{total} tests in {_clock(time.monotonic() - run.began)}{where}: "
            f"{what}{note}\n"
        )
        self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


def suite_workers(suite: Suite, free: int, waiting: list[Suite]) -> int:
    """The processes a suite starting now runs its tests in, of the ``free`` slots of ``--jobs``:
    one, unless more are free than suites ``waiting`` for one (each of those will want one);
    then pytest-xdist workers on the rest. An exclusive suite: one."""
    if suite.exclusive:
        return 1
    return max(1, free - sum(1 for s in waiting if not s.exclusive))


def run_suites(
    plan: Plan,
    settings: RunSettings,
    out: Path,
    progress: Progress,
    interrupted: Callable[[], bool] = lambda: False,
) -> None:
    """Run the selected suites of ``plan`` that have not finished in ``out``'s journal in
    ``settings.jobs`` processes: suites side by side, a suite on pytest-xdist workers when more
    slots are free than suites wait for one; an exclusive suite alone, in one process."""
    files.own_dir(out / LOGS_DIR)
    files.own_dir(out / ARTIFACTS_DIR)
    path = out / JOURNAL_FILE
    journal.cut_torn_tail(path)
    states = journal.replay(journal.read(path))
    finished_before = {
        name
        for name, s in states.items()
        if any(e["state"] == "finished" for e in s.events) and not s.missing
    }
    tail = JournalTail(path)
    with journal.Writer(path) as writer:
        queue = [plan.suite(name) for name in settings.suites if name not in finished_before]
        queue.sort(key=lambda s: s.exclusive)  # the exclusive ones last, alone
        active: list[SuiteRun] = []
        try:
            while queue or active:
                while (
                    queue
                    and sum(r.workers for r in active) < settings.jobs
                    and not any(r.suite.exclusive for r in active)
                    and not (queue[0].exclusive and active)
                ):
                    suite = queue.pop(0)
                    free = settings.jobs - sum(r.workers for r in active)
                    workers = suite_workers(suite, free, queue)
                    state = states.get(suite.name, journal.SuiteState())
                    run = SuiteRun(suite, settings, out, state, writer, workers)
                    run.start()
                    active.append(run)
                for record in tail.read():
                    for run in active:
                        if run.suite.name == record["suite"]:
                            run.on_record(record)
                now = time.monotonic()
                for run in active:
                    run.check(now)
                for run in [r for r in active if r.finished]:
                    active.remove(run)
                    progress.finished(run)
                progress.update(active, now)
                if interrupted():
                    raise KeyboardInterrupt
                time.sleep(0.1)
        finally:
            for run in active:
                run.kill("interrupted")
                if run.proc is not None:
                    run.proc.wait()


@dataclass
class Request:
    """What ``nncert certify`` was asked on its command line."""

    out: Path
    driver: str | None = None
    plan: str | None = None
    suites: list[str] | None = None
    expectations: list[str] = field(default_factory=list)
    jobs: int | None = None
    resume: bool = False
    shard: str | None = None  # I/N
    durations_from: str | None = None  # a report directory


def _lock(out: Path) -> int:
    """Hold the run directory: a second ``nncert certify`` on it (or a ``--resume`` while the first
    still runs) is refused rather than interleaved."""
    import fcntl

    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise CertifyError(f"{out} is in use by another nncert certify") from None
    return fd


def _shard_name(text: str) -> str:
    """``--shard I/N`` checked, as ``I/N``."""
    try:
        return shard.shard_name(*shard.parse_shard(text))
    except shard.ShardError as e:
        raise CertifyError(str(e)) from None


def _durations(path: str) -> tuple[dict[str, Any], str]:
    """The report of ``--durations-from`` and the SHA-256 of its report.json."""
    from nncert.certify import report as reports

    try:
        previous = reports.load(Path(path))
    except ValueError as e:
        raise CertifyError(f"--durations-from: {e}") from None
    return previous, reports.file_sha256(Path(path) / reports.REPORT_FILE)


def _settings(request: Request) -> tuple[RunSettings, Plan, str]:
    """The run's settings: new from the request, or, with --resume, the recorded ones (which
    the request may repeat but not change); and a new sharded run's partition file."""
    from nncert.certify.plan import PlanError, load_plan
    from nncert.testing import expectations

    out = request.out
    shard_given = _shard_name(request.shard) if request.shard is not None else None
    if request.resume:
        if not out.is_dir():
            raise CertifyError(f"--resume {out}: no such directory")
        settings = RunSettings.load(out)
        try:  # read whole before anything runs: a corrupted journal is refused, never appended to
            journal.read(out / JOURNAL_FILE)
        except journal.JournalError as e:
            raise CertifyError(str(e)) from None
        for what, given, recorded in (
            ("--driver", request.driver, settings.driver),
            ("--plan", request.plan, settings.plan),
            ("--suites", request.suites, settings.suites),
            ("--jobs", request.jobs, settings.jobs),
        ):
            if given is not None and given != recorded:
                raise CertifyError(f"--resume {out}: the run there has {what} {recorded!r}, not {given!r}")
        if shard_given is not None and shard_given != settings.shard:
            raise CertifyError(
                f"--resume {out}: the run there is "
                + (f"shard {settings.shard}" if settings.shard else "not sharded")
                + f", not --shard {shard_given}"
            )
        if request.durations_from is not None and request.durations_from != settings.durations_from:
            raise CertifyError(
                f"--resume {out}: the run there was partitioned when it began "
                f"({settings.partition or 'not sharded'}); resume it without --durations-from"
            )
        if settings.merged:
            raise CertifyError(f"--resume {out}: a merged report; resume its shards, then merge them again")
        if settings.shard:
            try:
                digest = hashlib.sha256((out / shard.PARTITION_FILE).read_bytes()).hexdigest()
            except OSError as e:
                raise CertifyError(f"--resume {out}: {shard.PARTITION_FILE}: {e.strerror or e}") from None
            if digest != settings.partition_sha256:
                raise CertifyError(f"--resume {out}: {shard.PARTITION_FILE} changed since the run began")
        if (
            request.expectations
            and [str(Path(e).resolve()) for e in request.expectations] != settings.expectations
        ):
            raise CertifyError(f"--resume {out}: the run there has --expectations {settings.expectations}")
        try:
            plan = load_plan(settings.plan)
        except PlanError as e:
            raise CertifyError(str(e)) from None
        if plan.sha256 != settings.plan_sha256:
            raise CertifyError(
                f"--resume {out}: plan {settings.plan!r} changed since the run began "
                f"(sha256 {plan.sha256[:12]}, recorded {settings.plan_sha256[:12]})"
            )
        return settings, plan, ""
    if request.durations_from is not None and shard_given is None:
        raise CertifyError("--durations-from balances the shards of a sharded run: give --shard I/N too")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CertifyError(
            f"--out {out} is not empty: give --resume {out} to continue the run there, or a new directory"
        )
    if request.driver is None:
        raise CertifyError("--driver is required (e.g. --driver litert)")
    try:
        plan = load_plan(request.plan or "standard")
    except PlanError as e:
        raise CertifyError(str(e)) from None
    suites = request.suites or [s.name for s in plan.suites]
    unknown = [s for s in suites if s not in {x.name for x in plan.suites}]
    if unknown:
        raise CertifyError(
            f"--suites: plan {plan.name!r} has no suite {', '.join(unknown)}; "
            f"its suites: {plan.suite_names()}"
        )
    files = []
    for e in request.expectations:
        path = Path(e)
        if not path.is_file():
            raise CertifyError(f"--expectations {e}: no such file")
        files.append(str(path.resolve()))
    try:
        expectations.load_report(request.driver, files)
    except (expectations.ExpectationsError, ValueError) as e:
        raise CertifyError(str(e)) from None
    jobs = request.jobs if request.jobs is not None else min(2, os.cpu_count() or 1)
    if jobs < 1:
        raise CertifyError(f"--jobs must be at least 1, not {jobs}")
    settings = RunSettings(
        request.driver,
        request.plan or "standard",
        plan.sha256,
        [s.name for s in plan.suites if s.name in suites],
        files,
        jobs,
    )
    partition = ""
    if shard_given is not None:
        given = request.durations_from
        previous, digest = (None, "") if given is None else _durations(given)
        content = shard.partition(settings.suites, shard.parse_shard(shard_given)[1], previous, digest)
        partition = shard.dumps(content)
        settings.shard, settings.partition = shard_given, content["method"]
        settings.partition_sha256 = hashlib.sha256(partition.encode()).hexdigest()
        settings.durations_from = request.durations_from or ""
    return settings, plan, partition


def _expectations(settings: RunSettings) -> tuple[list[dict[str, str]], list[str]]:
    """The expectations entries that do not apply to this driver and runtime, with why; and the
    runtimes (distributions) every entry names, whose versions the report records."""
    from nncert.testing import expectations

    loaded = expectations.load_report(settings.driver, settings.expectations)
    not_applied = [
        {"source": n.expectation.source, "reason": n.expectation.reason, "why": n.why}
        for n in loaded.not_applied
    ]
    entries = [*loaded.applied, *(n.expectation for n in loaded.not_applied)]
    return not_applied, sorted({e.runtime for e in entries if e.runtime})


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def certify(request: Request, stream: TextIO = sys.stderr) -> dict[str, Any]:
    """Run (or resume) a certification and write its report; returns the report. Raises
    CertifyError for bad input, and UnsafePathError for an ``out`` that is a symlink or another
    user's directory, before anything is written."""
    from nncert.certify import report as reports
    from nncert.certify.environment import driver_identity, environment
    from nncert.drivers import DriverSpecError

    if os.path.lexists(request.out):  # a link, another user's directory: refused before anything runs
        files.check_dir(request.out)
    settings, plan, partition = _settings(request)
    for name in settings.suites:
        suite_files(plan.suite(name))
    try:
        identity = driver_identity(settings.driver)
    except DriverSpecError as e:
        raise CertifyError(str(e)) from None
    # Absolute: the suites' children run in the artifacts directory, and read these paths there.
    not_applied, runtimes = _expectations(settings)
    out = files.own_dir(os.path.abspath(request.out))
    lock = _lock(out)
    try:
        if not request.resume:
            if partition:  # before run.json: a run.json names a run that can be resumed
                files.write_atomic(out / shard.PARTITION_FILE, partition)
            settings.save(out)
        with journal.Writer(out / JOURNAL_FILE) as writer:
            journal.cut_torn_tail(out / JOURNAL_FILE)
            writer.write(
                {
                    "event": "run",
                    "state": "started",
                    "time": time.time(),
                    "resume": request.resume,
                    "shard": settings.shard,
                    "identity": identity,
                    "environment": environment(runtimes),
                    "expectations_not_applied": not_applied,
                },
                sync=True,
            )
        progress = Progress(stream)
        sharded = f", shard {settings.shard} ({settings.partition})" if settings.shard else ""
        stream.write(
            f"nncert certify: {settings.driver} ({identity.get('version_string', identity.get('error'))}), "
            f"plan {plan.name} ({len(settings.suites)} suites{sharded}), {settings.jobs} at a time; "
            f"output in {out}\n"
        )
        stream.flush()
        # A CI job's timeout (SIGTERM) ends the run as Ctrl-C does: children stopped, report written.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            with files.bytecode_for_children():
                run_suites(plan, settings, out, progress)
        except KeyboardInterrupt:
            stream.write(f"\ninterrupted: what ran is recorded; continue: nncert certify --resume {out}\n")
        finally:
            signal.signal(signal.SIGTERM, previous)
        report = reports.build(out, plan, settings)
        reports.write(out, report)
    finally:
        os.close(lock)
    return report
