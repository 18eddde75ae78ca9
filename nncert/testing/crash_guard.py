"""The crash guard: a plain ``pytest --driver=SPEC`` run survives a driver whose native code
kills the process (an abort in a runtime's kernel preparation, a segfault in a delegate).

A driver loaded in process shares the test process: when its C++ aborts, pytest dies with it,
with no summary, no report and every result so far gone. Under the guard the pytest process
that the user started only supervises; the tests run in a child pytest that writes each test's
start and outcome to a journal (the certification journal, ``nncert.certify.journal``). When
the child dies inside a test, or a test runs past the guard's limit, the supervisor:

- records that test as CRASH (the signal) or HANG in the journal, and says so in one line with
  the command that reruns it alone, isolated;
- starts a fresh child that skips every test with an outcome (the journal's resume), so the
  rest of the run goes on; after a few crashes every later test runs in a forked child of its
  own (``--isolate``), where a crash costs one test rather than a restart;
- ends with one line counting the outcomes of all the children, and an exit status that
  fails when anything crashed or hung. ``--nncert-report`` holds every outcome.

It is on by default for drivers whose code nncert cannot vouch for (anything but the
pure-Python ``reference`` and ``mutant`` drivers and ``service:`` drivers, which already run
out of process), and chosen with ``--crash-guard=on|off|auto``. The certification runner
supervises its suites itself and turns it off in them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from nncert.certify import journal
from nncert.certify.runner import JournalTail, die_with_parent
from nncert.drivers import parse_spec
from nncert.resources import SUITES_INI
from nncert.testing import expectations
from nncert.testing.outcome import how_it_ended

#: Drivers that are nncert's own Python (or already out of process): no guard by default.
UNGUARDED = ("reference", "mutant", "service")
#: Crashes after which the remaining tests each run isolated rather than in one process.
ISOLATE_AFTER = 3
#: Child pytest processes at most (the first and its restarts).
MAX_STARTS = 50
#: pytest's exit statuses for a run that ended by itself (tests failed or not, none collected).
_ENDED = (0, 1, 5)
_POLL_S = 0.2


def wanted(config: pytest.Config) -> bool:
    """Whether this pytest process should supervise rather than run the tests."""
    mode = config.getoption("crash_guard")
    if mode == "off" or hasattr(config, "workerinput"):  # an xdist worker is supervised already
        return False
    option = config.option
    if any(getattr(option, name, False) for name in
           ("help", "version", "collectonly", "markers", "showfixtures", "show_fixtures_per_test",
            "setuponly", "setupplan", "isolate", "usepdb")):
        return False
    if mode == "on":
        return True
    try:
        name = parse_spec(config.getoption("driver"))[0]
    except ValueError:
        return False  # the spec is judged (and refused in one line) by the test process itself
    return name not in UNGUARDED


class Guard:
    """Runs the user's pytest command as supervised children until every test has an outcome."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.args = list(config.invocation_params.args)  # the child's --crash-guard=off comes last: it wins
        self.cwd = config.invocation_params.dir
        self.suite = config.getoption("nncert_suite")
        given = config.getoption("nncert_journal")
        if given:
            self.path = Path(given)
            self.scratch = None
        else:
            self.scratch = tempfile.TemporaryDirectory(prefix="nncert-guard-")  # 0700, ours
            self.path = Path(self.scratch.name) / "journal.jsonl"
        self.limit = config.getoption("crash_guard_timeout")
        self.maxfail = config.getoption("maxfail")
        self.crashes: list[str] = []  # the tests a child died or hung in
        self.known: list[expectations.Expectation] | None = None
        self.starts = 0

    def command(self) -> list[str]:
        extra = [f"--nncert-journal={self.path}", f"--nncert-suite={self.suite}", "--crash-guard=off"]
        if len(self.crashes) >= ISOLATE_AFTER:
            extra += ["--isolate", f"--isolate-timeout={self.limit:g}"]
        return [sys.executable, "-m", "pytest", *self.args, *extra]

    def run(self) -> int:
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                self.starts += 1
                code, hung = self._one_child()
                interrupted = code == pytest.ExitCode.INTERRUPTED and not hung
                pending = [] if interrupted else self._pending()
                if not pending:
                    if code < 0:
                        self._say(f"the test process died outside any test ({how_it_ended(code)}); "
                                  f"the results so far are kept")
                        return self._finish(128 - code)
                    return self._finish(code)
                for test_id in [t for t in hung if t in pending] or pending[-1:]:
                    self._record(test_id, bool(hung), code)
                if self._stop():
                    return self._finish(int(pytest.ExitCode.TESTS_FAILED))
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if self.scratch is not None:
                self.scratch.cleanup()

    # -- the child

    def _one_child(self) -> tuple[int, list[str]]:
        """Run a child to its end: (its exit status, negative for a signal; the tests past the
        limit when we killed it for a hang: under pytest-xdist, several run at once)."""
        tail = JournalTail(self.path)
        # Its own process group, so that Ctrl-C reaches it once (forwarded from here) and it
        # stops the way pytest stops; it dies with this process.
        proc = subprocess.Popen(self.command(), cwd=self.cwd, process_group=0, preexec_fn=die_with_parent)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda n, _: proc.send_signal(n))
        running: dict[str, float] = {}  # started, no outcome yet: when
        while True:
            try:
                code = proc.wait(timeout=_POLL_S)
                if code < 0:  # what it forked (an --isolate'd test) must not outlive it
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                return code, []
            except subprocess.TimeoutExpired:
                pass
            for record in tail.read():
                if record["event"] == "start":
                    running[record["id"]] = time.monotonic()
                elif record["event"] == "outcome":
                    running.pop(record["id"], None)
            late = [t for t, began in running.items() if time.monotonic() - began > self.limit]
            if late:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # with the forked children of --isolate
                proc.wait()
                return proc.returncode, late

    def _state(self) -> journal.SuiteState:
        return journal.replay(journal.read(self.path)).get(self.suite, journal.SuiteState())

    def _pending(self) -> list[str]:
        return self._state().pending

    def _record(self, test_id: str, hung: bool, code: int) -> None:
        state = self._state()
        started = state.started.get(test_id, {})
        entry = state.tests.get(test_id, {})
        if hung:
            status = "HANG"
            message = (f"no outcome within {self.limit:g} s (--crash-guard-timeout): "
                       f"the test process was killed")
        else:
            status = "CRASH"
            message = f"the test process died in this test ({how_it_ended(code)})"
        self.crashes.append(test_id)
        record = {"event": "outcome", "suite": self.suite, "id": test_id, "status": status,
                  "req": entry.get("req", []), "message": message,
                  "duration": round(time.time() - started.get("time", time.time()), 3)}
        known = self._expected(test_id)
        if known is not None:  # a strict xfail that failed the way it is known to: waived
            from nncert.pytest_plugin import _expectation_record
            record.update(status="WAIVED", message=f"{known.describe()} ({message})",
                          expectation=_expectation_record(known))
        writer = journal.Writer(self.path)
        try:
            writer.write(record, sync=True)
        finally:
            writer.close()
        kept = len(state.outcomes)
        more = ("; the remaining tests go on in a fresh process" +
                (", each isolated" if len(self.crashes) >= ISOLATE_AFTER else "")) if not self._stop() else ""
        self._say(f"{record['status']}: {test_id}: {message}{' (expected)' if known else ''}; "
                  f"{kept} results so far are kept{more}. Rerun it alone: {self.rerun(test_id)}")

    def _expected(self, test_id: str) -> expectations.Expectation | None:
        """The expectation (--expectations, the driver's own file) that waives ``test_id``."""
        if self.known is None:
            self.known = []
            if not self.config.getoption("no_expectations"):
                try:
                    self.known = expectations.load(self.config.getoption("driver"),
                                                   self.config.getoption("expectations"))
                except (ValueError, OSError):
                    pass  # the child said what is wrong with them, and stopped
        return expectations.match(self.known, test_id, self.config.getoption("graphs"))

    def rerun(self, test_id: str) -> str:
        # `nncert test` runs the suites from anywhere (its own -c and --rootdir): rerun the same way.
        runner = ["nncert", "test"] if str(SUITES_INI) in self.args else ["pytest"]
        return shlex.join([*runner, test_id, f"--driver={self.config.getoption('driver')}",
                           *(f"--driver-option={o}" for o in self.config.getoption("driver_option")),
                           "--isolate"])

    def _stop(self) -> bool:
        if self.starts >= MAX_STARTS:
            return True
        if self.maxfail:
            failing = sum(1 for r in self._state().outcomes.values() if r["status"] in journal.FAILING)
            return failing >= self.maxfail
        return False

    def _finish(self, code: int) -> int:
        state = self._state()
        if self.starts > 1 or self.crashes:
            counts = Counter(r["status"] for r in state.outcomes.values())
            words = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            self._say(f"{len(state.outcomes)} tests over {self.starts} test processes: {words}")
        if code in _ENDED and state.outcomes:  # the verdict of every child's tests, not the last's
            failed = any(r["status"] in (*journal.FAILING, "XPASS") for r in state.outcomes.values())
            return int(pytest.ExitCode.TESTS_FAILED if failed else pytest.ExitCode.OK)
        return code

    @staticmethod
    def _say(line: str) -> None:
        sys.stderr.write(f"nncert: {line}\n")
        sys.stderr.flush()


def supervise(config: pytest.Config) -> int:
    return Guard(config).run()
