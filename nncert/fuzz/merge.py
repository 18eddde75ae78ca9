"""``nncert fuzz merge DIR... --out DIR``: one campaign directory from campaigns run apart (on
several machines, or one after another) on the same target and driver.

- Findings: each campaign's journal (``findings.jsonl``, ``recorded_findings``) read, the
  findings de-duplicated by key as a campaign de-duplicates them, each listing every campaign
  that found it (its directory, its number there, how many times). A finding's files come from
  the campaign whose minimised input is the smallest (the first on a tie), its replay command
  naming its new place.
- Corpora: merged the libFuzzer way: the target's atheris script runs ``-merge=1 OUT/corpus
  IN/corpus...`` in a child process with a deadline (its own process group, killed at the
  deadline), keeping the inputs that add coverage. libFuzzer runs each merge pass by executing
  its ``argv[0]`` again; an atheris script's is a ``.py`` file, not a program, so the script is
  run through a small executable launcher written for the merge (it also puts ``--driver``
  back, which the script takes out of the arguments libFuzzer sees). Should the merge fail or
  run out of time, the corpora are kept whole (their union by content): nothing is lost.
- The merged directory is a campaign directory: ``findings.jsonl`` (one ``finding`` and one
  ``minimized`` record per key, the finding with ``count`` and ``sources``), ``findings/NNN-KEY``,
  ``corpus/`` and ``summary.json``. ``nncert fuzz TARGET --out MERGED`` goes on from it, and it
  merges again with other campaigns.

Refused in one line, before anything is written: a directory that is not a campaign's, the
same campaign twice, campaigns of different targets, drivers or nncert versions, and an
``--out`` that is one of the campaigns or not empty.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncert import __version__, datafiles, files
from nncert.fuzz.campaign import (
    CampaignError,
    content_name,
    finding_dir_name,
    recorded_findings,
    replay_command,
    resolve_target,
    script_command,
    standalone_command,
)

SUMMARY_FILE = "summary.json"
JOURNAL_FILE = "findings.jsonl"
CORPUS_DIR = "corpus"
#: The most seconds the corpus merge may run (``--deadline``).
MERGE_DEADLINE_S = 600.0
#: The fields of a campaign's finding record the merged record sets anew.
_OWN_FIELDS = ("event", "number", "key", "count", "minimized", "minimized_size", "command",
               "standalone_command", "dir", "size", "input_base64")


@dataclass
class Source:
    """One campaign directory, read."""

    dir: Path
    summary: dict[str, Any]
    findings: dict[str, dict[str, Any]]  # key -> its journal record, with ``count``
    corpus: list[Path]

    @property
    def target(self) -> str:
        return self.summary["target"]


def read_source(d: Path) -> Source:
    """A campaign's directory, read without changing it (CampaignError when it is none)."""
    if not d.is_dir():
        raise CampaignError(f"{d}: no such directory")
    missing = [name for name in (SUMMARY_FILE, JOURNAL_FILE) if not (d / name).is_file()]
    if missing or not (d / CORPUS_DIR).is_dir():
        what = missing[0] if missing else f"{CORPUS_DIR}/"
        raise CampaignError(f"{d} is not a fuzz campaign's directory (no {what}): merge the --out "
                            f"directories of `nncert fuzz`")
    summary = datafiles.read_json(d / SUMMARY_FILE, CampaignError)
    if not isinstance(summary, dict) or not isinstance(summary.get("target"), str) \
            or not isinstance(summary.get("driver"), str | None):
        raise CampaignError(f"{d / SUMMARY_FILE} is not a fuzz campaign's summary (no target)")
    corpus = sorted(p for p in (d / CORPUS_DIR).iterdir() if p.is_file() and not p.is_symlink())
    return Source(d, summary, recorded_findings(d / JOURNAL_FILE, repair=False), corpus)


def _same(sources: list[Source], what: str, key: Callable[[dict[str, Any]], Any]) -> None:
    first = sources[0]
    for s in sources[1:]:
        if key(s.summary) != key(first.summary):
            raise CampaignError(f"campaigns of different {what}: {first.dir} has {key(first.summary)}, "
                                f"{s.dir} has {key(s.summary)}")


def check(dirs: Sequence[Path], out: Path) -> list[Source]:
    """The campaigns in ``dirs``, read and checked to be mergeable into ``out``."""
    if os.path.lexists(out):
        files.check_dir(out)
        for d in dirs:
            if d.exists() and os.path.samefile(d, out):
                raise CampaignError(f"--out {out} is one of the campaigns being merged: merge into a "
                                    f"new directory")
        if any(out.iterdir()):
            raise CampaignError(f"--out {out} is not empty: merge into a new directory")
    sources = [read_source(d) for d in dirs]
    for i, s in enumerate(sources):
        for earlier in sources[:i]:
            if os.path.samefile(s.dir, earlier.dir):
                raise CampaignError(f"campaign {s.dir} given twice ({earlier.dir})")
    _same(sources, "targets", lambda s: f"target {s['target']!r}")
    _same(sources, "drivers", lambda s: f"--driver {s.get('driver')!r}")
    _same(sources, "nncert versions", lambda s: f"nncert {s.get('nncert', 'before 0.1.0')}")
    return sources


def _script(source: Source) -> tuple[Path, str]:
    """The target's script on this machine and how replay commands name the target."""
    name = source.target
    try:
        _, script = resolve_target(name)
        return script, name
    except CampaignError:
        pass
    script = source.summary.get("script")
    if isinstance(script, str) and script.endswith(".py") and Path(script).is_file():
        resolve_target(script)  # loads it: a script that is no fuzz script is named here
        return Path(script).resolve(), script
    raise CampaignError(f"fuzz target {name!r} is not registered and its script {script!r} is not on "
                        f"this machine: the corpora cannot be merged by coverage")


# ---------------------------------------------------------------------------------------
# The corpus


_LAUNCHER = """#!/bin/sh
"exec" {python} "$0" "$@"
# A launcher for libFuzzer's -merge=1 (nncert.fuzz.merge): libFuzzer runs argv[0] again for
# each merge pass, so argv[0] must be a program; it runs the atheris script with the driver,
# argv[0] left as this file (runpy would set it to the script's path).
import sys

sys.argv[1:1] = {driver_args!r}
sys.path[0] = {script_dir!r}
with open({script!r}, "rb") as f:
    code = compile(f.read(), {script!r}, "exec")
exec(code, {{"__name__": "__main__", "__file__": {script!r}, "__builtins__": __builtins__}})
"""


def _launcher(where: Path, script: Path, driver: str | None) -> Path:
    """An executable file that runs ``script`` as a campaign's workers run it (``script_command``)."""
    python, path, *driver_args = script_command(script, driver)
    quoted = "'" + python.replace("'", "'\"'\"'") + "'"  # quoted for sh, a string for Python
    text = _LAUNCHER.format(python=quoted, driver_args=driver_args, script_dir=str(Path(path).parent),
                            script=path)
    path = where / "launch-merge"
    files.write_atomic(path, text, mode=0o755)
    return path


def merge_corpus(script: Path, driver: str | None, out: Path, inputs: Sequence[Path], timeout: int,
                 deadline: float, log: Path) -> str | None:
    """libFuzzer's ``-merge=1 out inputs...`` by ``script``, in a child process killed after
    ``deadline`` seconds; None when it merged, else why not."""
    with tempfile.TemporaryDirectory(prefix=".merge-", dir=out.parent) as work:
        command = [str(_launcher(Path(work), script, driver)), "-merge=1", f"-timeout={timeout}",
                   f"-merge_control_file={Path(work) / 'control'}", str(out), *map(str, inputs)]
        with os.fdopen(files.open_append(log), "ab") as f:
            f.write(f"--- {' '.join(command)}\n".encode())
            f.flush()
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                    start_new_session=True)  # its own group: killed whole
            try:
                code = proc.wait(timeout=deadline)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return f"the libFuzzer merge ran past its deadline of {deadline:g} s"
    if code != 0:
        return f"the libFuzzer merge exited with status {code} (see {log})"
    return None


def _union(out: Path, corpus: Sequence[Path]) -> None:
    for path in corpus:
        data = path.read_bytes()
        files.write_atomic(out / content_name(data), data, sync=False)


# ---------------------------------------------------------------------------------------
# The merge


def _read_input(source: Source, record: dict[str, Any]) -> tuple[bytes, bytes]:
    """A finding's original and minimised inputs, from its campaign's directory (the journal's
    paths are the campaign machine's: its finding's directory is looked up by name)."""
    original = base64.b64decode(record.get("input_base64") or "", validate=False)
    minimal = original
    where = source.dir / "findings" / Path(str(record.get("dir") or "")).name
    with contextlib.suppress(OSError):
        minimal = (where / "minimized").read_bytes()
    return original, minimal


def merge(dirs: Sequence[Path], out: Path, timeout: int | None = None, deadline: float = MERGE_DEADLINE_S,
          progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Merge the campaigns in ``dirs`` into ``out`` (new or empty); returns the merged summary."""
    dirs = [Path(d) for d in dirs]
    sources = check(dirs, out)
    script, target_ref = _script(sources[0])
    first = sources[0].summary
    driver = first.get("driver")
    timeout = timeout or max(int(s.summary.get("timeout_s") or 10) for s in sources)

    # Findings, by key, in the order the campaigns found them (campaign by campaign).
    keys: dict[str, list[tuple[Source, dict[str, Any]]]] = {}
    for s in sources:
        for key, record in sorted(s.findings.items(), key=lambda kv: kv[1]["number"]):
            keys.setdefault(key, []).append((s, record))
    found: list[tuple[str, list[tuple[Source, dict[str, Any]]], bytes, bytes]] = []
    for key, where in keys.items():
        inputs = [_read_input(s, r) for s, r in where]
        best = min(range(len(where)), key=lambda i: len(inputs[i][1]))
        found.append((key, where, *inputs[best]))

    out = files.own_dir(os.path.abspath(out))
    corpus_dir, findings_dir, logs_dir = (files.own_dir(out / d) for d in (CORPUS_DIR, "findings", "logs"))
    journal = out / JOURNAL_FILE
    by_key: dict[str, dict[str, Any]] = {}
    with open(files.open_append(journal), "a", encoding="utf-8") as log:
        for number, (key, where, original, minimal) in enumerate(found, 1):
            # The first campaign's account of it (kind, message, frames, known...).
            account = {k: v for k, v in where[0][1].items() if k not in _OWN_FIELDS}
            sources_list = [{"dir": str(s.dir.resolve()), "number": r["number"], "count": r["count"],
                             "artifact": r.get("artifact")} for s, r in where]
            place = files.own_dir(findings_dir / finding_dir_name(number, key))
            files.write_atomic(place / "original", original)
            files.write_atomic(place / "minimized", minimal)
            command = replay_command(target_ref, place / "minimized", driver)
            count = sum(r["count"] for _, r in where)
            record = {"event": "finding", "number": number, "key": key, **account, "dir": str(place),
                      "count": count, "sources": sources_list, "size": len(original),
                      "input_base64": base64.b64encode(original).decode()}
            spec = _spec(where, record, minimal, original, command)
            standalone = standalone_command(place, spec)  # naming this directory, not a source's
            spec.pop("standalone_command", None)
            if standalone:
                spec["standalone_command"] = standalone
            files.write_atomic(place / "spec.json", json.dumps(spec, indent=1) + "\n")
            lines = command + "\n" + (standalone + "\n" if standalone else "")
            files.write_atomic(place / "command.txt", lines)
            log.write(json.dumps(record) + "\n")
            log.write(json.dumps({"event": "minimized", "key": key, "file": str(place / "minimized"),
                                  "size": len(minimal), "original_size": len(original),
                                  "command": command, "standalone_command": standalone}) + "\n")
            by_key[key] = {"count": count, "number": number, "earlier": False, "kind": record.get("kind"),
                           "message": record.get("message"), "command": command, "dir": str(place),
                           "standalone_command": standalone,
                           "known": record.get("known"), "sources": sources_list}
        log.flush()
        os.fsync(log.fileno())

    inputs = [s.dir / CORPUS_DIR for s in sources]
    every = [p for s in sources for p in s.corpus]
    distinct = len({content_name(p.read_bytes()) for p in every})
    progress(f"merging {len(every)} corpus inputs ({distinct} distinct) with libFuzzer -merge=1 "
             f"(at most {deadline:g} s)")
    started = time.monotonic()
    why = merge_corpus(script, driver, corpus_dir, inputs, timeout, deadline, logs_dir / "merge.log")
    if why is None and every and not any(corpus_dir.iterdir()):
        why = f"the libFuzzer merge kept no input (see {logs_dir / 'merge.log'})"
    if why is not None:
        progress(f"  {why}: the corpora are kept whole")
        _union(corpus_dir, every)
    kept = sum(1 for _ in corpus_dir.iterdir())

    hits: dict[str, int] = {}  # the times the campaigns' workers met each key, going on past it
    for s in sources:
        met = s.summary.get("worker_hits_by_key")
        for key, n in (met.items() if isinstance(met, dict) else ()):
            if isinstance(n, int) and n > 0:
                hits[key] = hits.get(key, 0) + n
    execs = sum(int(s.summary.get("execs") or 0) for s in sources)
    elapsed = sum(float(s.summary.get("elapsed_s") or 0) for s in sources)
    summary = {
        "target": first["target"], "driver": driver, "script": str(script), "nncert": __version__,
        "time_s": sum(float(s.summary.get("time_s") or 0) for s in sources),
        "jobs": sum(int(s.summary.get("jobs") or 0) for s in sources), "timeout_s": timeout,
        "seed": None, "seeds": max(int(s.summary.get("seeds") or 0) for s in sources),
        "elapsed_s": elapsed, "execs": execs,
        "exec_per_s": round(execs / elapsed, 1) if elapsed else 0,  # the campaigns' mean
        "corpus": kept, "findings": len(by_key),
        "duplicates": sum(f["count"] for f in by_key.values()) - len(by_key),
        "worker_hits": sum(hits.values()),
        "worker_runs": sum(int(s.summary.get("worker_runs") or 0) for s in sources),
        "earlier_findings": 0,
        "worker_hits_by_key": hits,
        "corpus_merge": {"method": "libfuzzer -merge=1" if why is None else "union", "why_not": why,
                         "inputs": len(every), "distinct": distinct, "kept": kept,
                         "seconds": round(time.monotonic() - started, 1)},
        "merged": [{"dir": str(s.dir.resolve()), "seed": s.summary.get("seed"),
                    "findings": len(s.findings), "corpus": len(s.corpus)} for s in sources],
        "findings_by_key": by_key,
    }
    files.write_atomic(out / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")
    return summary


def _spec(where: list[tuple[Source, dict[str, Any]]], record: dict[str, Any], minimal: bytes,
          original: bytes, command: str) -> dict[str, Any]:
    """The finding's spec.json: the chosen campaign's, if it has one, with the new command."""
    spec: Any = None
    for s, r in where:
        path = s.dir / "findings" / Path(str(r.get("dir") or "")).name / "spec.json"
        with contextlib.suppress(datafiles.DataFileError):
            candidate = datafiles.read_json(path)
            if isinstance(candidate, dict) and candidate.get("input_hex") == minimal.hex():
                spec = candidate
                break
    if spec is None:
        spec = {k: record.get(k) for k in ("target", "driver", "key", "kind", "message", "signal", "frames")}
        spec.update(input_hex=minimal.hex(), input_base64=base64.b64encode(minimal).decode(),
                    input_size=len(minimal), original_size=len(original),
                    original_sha1=content_name(original))
    spec["command"] = command
    spec["sources"] = record["sources"]
    return spec
