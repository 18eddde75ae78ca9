"""Support-probe verdicts kept on disk for the processes of one fuzz campaign (issue 23).

A compiled driver decides each operation it claims by probing it in a child process
(nncert.drivers.probe) and remembers the verdict in memory, by the operation's signature. A
fuzz campaign's processes each start with an empty memory: a worker that restarts after a
crash loads the whole corpus again, every seed through the probe (a probe child started, the
operation compiled and run, a round trip per seed), and so does each replay of a finding,
once per candidate while it is minimised. With a store in use (``use(DIR)``), a driver looks a
verdict up there before it probes and adds what it probed, so that the campaign's workers,
their restarts and its replays probe each signature once between them.

Layout: ``DIR/<driver>/<pid>.jsonl``, ``<driver>`` a digest of what makes verdicts the same
(the driver's class and constructor arguments, its version string with the runtime's version
and options, nncert's version, the probe's time limit); each process appends only to its own
file, one JSON line ``{"k": key hex, "v": verdict or null}`` per verdict, and reads the others'
new lines when it misses. Only verdicts that would come out the same again are kept: not a
probe that ran out of time (a busy machine) nor one whose harness failed.

The store is for one campaign (the campaign empties it when it starts): verdicts are keyed by
nncert's version, not by its source, and an edited checkout must probe again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from nncert import datafiles, files

if TYPE_CHECKING:
    from nncert.drivers.compiled import CompiledDriver

_current: VerdictStore | None = None


def use(directory: str | os.PathLike | None) -> None:
    """Keep this process's probe verdicts in ``directory`` from now on (None: in memory only)."""
    global _current
    _current = None if directory is None else VerdictStore(directory)


def current() -> VerdictStore | None:
    return _current


def durable(verdict: str | None) -> bool:
    """Whether a verdict would come out the same on another probe: not a probe that ran out of
    time (nncert.drivers.probe: "no answer within ...") or whose harness failed."""
    return verdict is None or not (verdict.startswith("the support probe failed")
                                   or "no answer within" in verdict)


class VerdictStore:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.root = files.own_dir(directory)
        self._spaces: dict[str, _Space] = {}

    def space(self, driver: CompiledDriver) -> _Space:
        """The verdicts of drivers that probe as ``driver`` does."""
        from nncert import __version__
        identity = repr((driver.recipe, driver.version_string(), __version__, driver.probe_timeout))
        name = hashlib.blake2b(identity.encode(), digest_size=12).hexdigest()
        if name not in self._spaces:
            self._spaces[name] = _Space(self.root / name)
        return self._spaces[name]

    def clear(self) -> None:
        """Forget every verdict (a campaign starting)."""
        for space in self.root.iterdir():
            if space.is_dir() and not space.is_symlink():
                for f in space.iterdir():
                    f.unlink(missing_ok=True)
        self._spaces.clear()


class _Space:
    def __init__(self, directory: Path) -> None:
        self.dir = files.own_dir(directory)
        self.verdicts: dict[bytes, str | None] = {}
        self._read: dict[str, int] = {}  # file name -> bytes of it read (whole lines)
        self._fd: int | None = None
        self._pid = 0

    def get(self, key: bytes) -> tuple[bool, str | None]:
        """(found, verdict)."""
        if key not in self.verdicts:
            self._refresh()
        return key in self.verdicts, self.verdicts.get(key)

    def put(self, found: dict[bytes, str | None]) -> None:
        kept = {k: v for k, v in found.items() if durable(v)}
        if not kept:
            return
        lines = "".join(json.dumps({"k": k.hex(), "v": v}) + "\n" for k, v in kept.items())
        if self._fd is None or self._pid != os.getpid():  # a fork writes a file of its own
            self._pid = os.getpid()
            self._fd = files.open_append(self.dir / f"{self._pid}.jsonl")
            self._read[f"{self._pid}.jsonl"] = os.fstat(self._fd).st_size
        os.write(self._fd, lines.encode())
        self.verdicts.update(kept)

    def _refresh(self) -> None:
        own = f"{self._pid}.jsonl" if self._fd is not None else None
        for path in self.dir.iterdir():
            if path.name == own or path.suffix != ".jsonl":
                continue
            start = self._read.get(path.name, 0)
            try:
                with path.open("rb") as f:
                    f.seek(start)
                    chunk = f.read()
            except OSError:
                continue
            end = chunk.rfind(b"\n") + 1  # a line being written is read next time
            self._read[path.name] = start + end
            for line in chunk[:end].splitlines():
                try:
                    record = datafiles.parse_json(line, str(path))
                    key, verdict = bytes.fromhex(record["k"]), record["v"]
                except (datafiles.DataFileError, ValueError, KeyError, TypeError):
                    continue
                if verdict is None or isinstance(verdict, str):
                    self.verdicts[key] = verdict
