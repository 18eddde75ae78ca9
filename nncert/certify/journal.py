"""The certification journal: one JSON record a line, appended as things happen, the truth of
a certification run from which the report is built and from which ``--resume`` continues.

Records (``event``):
- ``collected``: the tests a suite's pytest run selected (id, requirement IDs, operation and
  type for the per-operation tests); written each time the suite starts, before any runs.
- ``start``: a test began (a child that dies leaves a start without an outcome: that test
  crashed or hung, and the runner records it so).
- ``outcome``: how a test ended (status, message, duration, properties); fsynced, so a
  machine that goes down loses nothing recorded.
- ``suite``: the runner's word on a suite's child process (started, finished, error, deadline).
- ``run``: an invocation of ``nncert certify`` began (the first, or a ``--resume``), with the
  driver's identity and the environment as they were then.

Every writer opens the file with O_APPEND and writes a record in one ``write``, holding an
exclusive ``flock`` on the file while it does: the runner, a suite's pytest-xdist controller
and its workers share the file without interleaving, even where the kernel cuts a write short
(a signal, a full disk) and the rest follows in a second ``write``. A record cut short by a
kill is the last line without its newline; the reader drops it (the test it described runs
again) and the writer cuts it off, under the same lock, before appending.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nncert import files
from nncert.datafiles import parse_json

#: The statuses of a test outcome in a certification report (docs/certification.md).
STATUSES = ("PASS", "FAIL", "WAIVED", "XPASS", "DECLINED", "SKIPPED", "CRASH", "HANG")
#: Statuses that fail the requirements the test names.
FAILING = ("FAIL", "CRASH", "HANG")
EVENTS = ("collected", "start", "outcome", "suite", "run")

_REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "collected": {"suite": str, "tests": list},
    "start": {"suite": str, "id": str},
    "outcome": {
        "suite": str,
        "id": str,
        "status": str,
        "req": list,
        "duration": (int, float),
        "message": str,
    },
    "suite": {"suite": str, "state": str},
    "run": {"state": str, "time": (int, float)},
}


class JournalError(ValueError):
    """A journal that is not one (corrupted, or not written by nncert): the message names the
    file and the line."""


def check_record(record: Any, where: str) -> dict[str, Any]:
    """``record`` if it is a well-formed journal record, else JournalError naming ``where``."""
    if not isinstance(record, dict) or record.get("event") not in EVENTS:
        raise JournalError(f"{where}: not a journal record (no known 'event')")
    for key, kind in _REQUIRED[record["event"]].items():
        if not isinstance(record.get(key), kind):
            raise JournalError(f"{where}: {record['event']} record without a valid {key!r}")
    if record["event"] == "outcome" and record["status"] not in STATUSES:
        raise JournalError(f"{where}: unknown status {record['status']!r}")
    if record["event"] == "collected":
        for test in record["tests"]:
            if (
                not isinstance(test, dict)
                or not isinstance(test.get("id"), str)
                or not isinstance(test.get("req"), list)
            ):
                raise JournalError(f"{where}: collected record with a malformed test entry")
    return record


def read(path: Path) -> list[dict[str, Any]]:
    """Every complete record of the journal at ``path`` (none if it does not exist yet)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise JournalError(f"{path}: cannot read it: {e.strerror or e}") from None
    lines = data.split(b"\n")
    lines.pop()  # what follows the last newline: empty, or a record a kill cut short
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = parse_json(line, f"{path}: line {n}", JournalError, allow_nonfinite=True)
        except JournalError as e:
            raise JournalError(f"{e}: the journal is corrupted") from None
        records.append(check_record(record, f"{path}: line {n}"))
    return records


class Writer:
    """Appends records to a journal; safe to share between processes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # A journal path planted as a symlink to another file is refused, not followed.
        self.fd = files.open_append(path)

    def write(self, record: dict[str, Any], sync: bool = False) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str).encode() + b"\n"
        view = memoryview(line)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        if sync:
            os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cut_torn_tail(path: Path) -> None:
    """Drop a last record that a kill cut short, so that the next append starts a line."""
    files.check_file(path)  # a planted link is named and refused; O_NOFOLLOW: never truncated
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    with open(fd, "rb+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # never a record another process is writing
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


@dataclass
class SuiteState:
    """What the journal says of one suite."""

    tests: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> collected entry, in order
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> outcome record
    started: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> its last start record
    events: list[dict[str, Any]] = field(default_factory=list)  # the runner's suite records
    duplicates: list[str] = field(default_factory=list)  # ids with more than one outcome

    @property
    def pending(self) -> list[str]:
        """Tests that started and have no outcome: the child died or hung in them."""
        return [t for t in self.started if t not in self.outcomes]

    @property
    def missing(self) -> list[str]:
        """Collected tests without an outcome."""
        return [t for t in self.tests if t not in self.outcomes]


def replay(records: Iterable[dict[str, Any]]) -> dict[str, SuiteState]:
    """The state of every suite after ``records``."""
    suites: dict[str, SuiteState] = {}
    for r in records:
        if r["event"] == "run":
            continue
        s = suites.setdefault(r["suite"], SuiteState())
        event = r["event"]
        if event == "collected":
            for test in r["tests"]:
                s.tests.setdefault(test["id"], test)
        elif event == "start":
            s.started[r["id"]] = r
        elif event == "outcome":
            if r["id"] in s.outcomes:
                s.duplicates.append(r["id"])
            else:
                s.outcomes[r["id"]] = r
        else:
            s.events.append(r)
    return suites
