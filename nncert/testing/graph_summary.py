"""The summary of a ``nncert graphs`` run (``OUT/summary.json``) and ``nncert graphs merge``.

Every run of ``nncert graphs`` writes, beside its spec files, one summary: what was asked
(seed, graphs per cell, shrink budget, the cells of the whole selection), which shard of it
this run is (``--shard I/N``, or 1/1), the driver's spec and version string, nncert's version,
and each cell's outcome (graphs passed and declined, the failure's graph index, reasons and
spec file). It is rewritten after every cell, ``complete`` only once the last has run.

``merge`` builds the summary of the whole selection from its N shards' summaries, refusing
(one line, before anything is written) shards of different runs, missing or duplicate shards,
an unfinished shard and a directory with no summary. The failures' spec files are copied
beside the merged summary, their replay commands naming their new place, so the merged
directory is what an unsharded run would have written, cell for cell.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncert import __version__, datafiles, files
from nncert.testing.random_graphs import CellResult, shard_cells

SUMMARY_FILE = "summary.json"
FORMAT = "nncert-graphs-summary/1"


class MergeError(ValueError):
    """Summaries that cannot be merged: one line naming the directory and what is wrong."""


@dataclass
class Run:
    """What a ``nncert graphs`` run was asked, and on what."""

    driver: str
    version_string: str
    seed: int
    graphs: int
    shrink_runs: int
    triage: bool
    selection: list[str]  # the labels of every cell of the unsharded run, in order
    shard: tuple[int, int] = (1, 1)


def test_id(label: str) -> str:
    """The pytest node id of cell ``label`` (what the drivers' expectations files name)."""
    return f"conformance/test_random_graphs.py::test_random_graph[{label}]"


def unexpected(summary: dict[str, Any]) -> int:
    """Cells whose outcome no expectation foresaw: failures not covered, covered passes."""
    t = summary["totals"]
    return t["failed"] - t.get("waived", 0) + t.get("xpass", 0)


def cell_entry(r: CellResult) -> dict[str, Any]:
    """One cell's outcome as the summary records it."""
    entry: dict[str, Any] = {"seed": r.seed, "passed": r.passed, "declined": r.declined,
                             "failed": 1 if r.failure else 0, "seconds": round(r.seconds, 3)}
    if r.decline_reasons:
        entry["decline_reasons"] = dict(sorted(r.decline_reasons.items()))
    f = r.failure
    if f is not None:
        entry["failure"] = {"graph": f.index, "reasons": list(f.outcome.reasons), "headline": f.headline,
                            "operations": len(f.graph.ops), "shrunk_from": len(f.original.ops),
                            "spec": f.spec_path.name if f.spec_path else None,
                            "verdict": (f.verdict or {}).get("summary")}
    return entry


def build(run: Run, cells: Sequence[str], results: dict[str, dict[str, Any]], seconds: float,
          complete: bool) -> dict[str, Any]:
    """The summary of a run of ``cells`` (its shard of ``run.selection``) with ``results`` so far."""
    index, count = run.shard
    totals = {"cells": len(results), "passed": 0, "declined": 0, "failed": 0}
    for entry in results.values():
        for k in ("passed", "declined", "failed"):
            totals[k] += entry[k]
    totals["graphs"] = totals["passed"] + totals["declined"] + totals["failed"]
    # failures an expectations entry covers (known), and cells an entry covers that passed
    totals["waived"] = sum(1 for e in results.values() if e.get("expected"))
    totals["xpass"] = sum(1 for e in results.values() if e.get("unexpected_pass"))
    return {
        "format": FORMAT, "nncert": __version__,
        "driver": {"spec": run.driver, "version_string": run.version_string},
        "seed": run.seed, "graphs": run.graphs, "shrink_runs": run.shrink_runs, "triage": run.triage,
        "selection": list(run.selection), "shard": {"index": index, "count": count},
        "cells": list(cells), "complete": complete, "seconds": round(seconds, 3),
        "totals": totals, "results": {label: results[label] for label in cells if label in results},
    }


def write(out: Path, summary: dict[str, Any], sync: bool = True) -> Path:
    path = files.own_dir(out) / SUMMARY_FILE
    files.write_atomic(path, json.dumps(summary, indent=1) + "\n", sync=sync)
    return path


def final_lines(summary: dict[str, Any], out: Path) -> list[str]:
    """The lines a run ends with: the totals, then each failure and its replay command."""
    t = summary["totals"]
    known = f" ({t['waived']} known)" if t.get("waived") else ""
    xpass = f", {t['xpass']} known discrepancies did not show (XPASS)" if t.get("xpass") else ""
    lines = [f"{len(summary['cells'])} cells, {t['graphs']} graphs: {t['passed']} passed, "
             f"{t['declined']} declined, {t['failed']} failed{known}{xpass} ({summary['seconds']:.1f} s, "
             f"seed {summary['seed']})"]
    for label in summary["cells"]:
        entry = summary["results"].get(label, {})
        failure = entry.get("failure")
        if failure:
            word = "KNOWN" if entry.get("expected") else "FAIL"
            lines.append(f"{word} {failure['headline']}\n  replay: nncert repro {out / failure['spec']} "
                         f"--driver {summary['driver']['spec']}")
        if entry.get("unexpected_pass"):
            lines.append(f"XPASS {label}: {entry['unexpected_pass']}")
    return lines


# ---------------------------------------------------------------------------------------
# Merging shards


@dataclass
class _Part:
    dir: Path
    summary: dict[str, Any]
    index: int
    count: int


def _read(d: Path) -> _Part:
    def bad(what: str) -> MergeError:
        return MergeError(f"{d}: {SUMMARY_FILE} is malformed ({what})")

    if not d.is_dir():
        raise MergeError(f"{d}: no such directory")
    path = d / SUMMARY_FILE
    if not path.is_file():
        raise MergeError(f"{d} holds no {SUMMARY_FILE}: it is not the --out of a `nncert graphs` run")
    s = datafiles.read_json(path, MergeError)
    if not isinstance(s, dict) or s.get("format") != FORMAT:
        raise MergeError(f"{path} is not the summary of a `nncert graphs` run (format {FORMAT!r})")
    if s.get("merged"):
        raise MergeError(f"{d} is a merged summary: merge the shards themselves")
    if not s.get("complete"):
        raise MergeError(f"{d}: the run did not finish (its summary has {len(s.get('results') or {})} of "
                         f"{len(s.get('cells') or [])} cells): run that shard again")
    shard = s.get("shard")
    if not isinstance(shard, dict) or not all(isinstance(shard.get(k), int) for k in ("index", "count")):
        raise bad("shard")
    for key, kind in (("selection", list), ("cells", list), ("results", dict), ("driver", dict),
                      ("totals", dict), ("seed", int), ("graphs", int), ("shrink_runs", int),
                      ("seconds", int | float)):
        if not isinstance(s.get(key), kind) or isinstance(s.get(key), bool):
            raise bad(key)
    if not all(isinstance(c, str) for c in s["selection"]) or set(s["results"]) != set(s["cells"]):
        raise bad("its results are not those of its cells")
    for label, entry in s["results"].items():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), int)
                                                  for k in ("passed", "declined", "failed")):
            raise bad(f"result of {label}")
        failure = entry.get("failure")
        if failure is not None:
            spec = failure.get("spec") if isinstance(failure, dict) else None
            if not isinstance(spec, str) or Path(spec).name != spec or spec in ("", ".", "..") \
                    or not isinstance(failure.get("headline"), str):
                raise bad(f"failure of {label}")
            if not (d / spec).is_file():
                raise MergeError(f"{d}: the spec file {spec} of the failure in {label} is missing")
    return _Part(d, s, shard["index"], shard["count"])


def _same(parts: list[_Part], what: str, key: Callable[[dict[str, Any]], Any]) -> None:
    first = parts[0]
    for p in parts[1:]:
        if key(p.summary) != key(first.summary):
            raise MergeError(f"shards of different {what}: {first.dir} has {key(first.summary)}, "
                             f"{p.dir} has {key(p.summary)}")


def _check_out(out: Path, dirs: Iterable[Path]) -> None:
    if not os.path.lexists(out):
        return
    files.check_dir(out)
    for d in dirs:
        if d.exists() and os.path.samefile(d, out):
            raise MergeError(f"--out {out} is one of the shards: merge into a new directory")
    if any(out.iterdir()):
        raise MergeError(f"--out {out} is not empty: merge into a new directory")


def merge(dirs: Sequence[Path], out: Path) -> dict[str, Any]:
    """The summary of the whole selection from the shards' directories ``dirs``, written with
    the failures' spec files into ``out`` (new or empty); MergeError before anything is
    written when the shards are not the N shards of one run."""
    dirs = [Path(d) for d in dirs]
    _check_out(out, dirs)
    parts = [_read(d) for d in dirs]
    _same(parts, "seeds", lambda s: f"seed {s.get('seed')}")
    _same(parts, "graph counts", lambda s: f"{s.get('graphs')} graphs per cell")
    _same(parts, "shrink budgets", lambda s: f"a shrink budget of {s.get('shrink_runs')} runs")
    _same(parts, "drivers", lambda s: f"--driver {s['driver'].get('spec')!r}")
    _same(parts, "driver versions", lambda s: f"version string {s['driver'].get('version_string')!r}")
    _same(parts, "nncert versions", lambda s: f"nncert {s.get('nncert')}")
    _same(parts, "shard counts", lambda s: f"N = {s['shard']['count']}")
    _same(parts, "cell selections", lambda s: f"{len(s['selection'])} cells (sha256 "
          f"{hashlib.sha256(json.dumps(s['selection']).encode()).hexdigest()[:12]})")
    seen: dict[int, _Part] = {}
    for p in parts:
        if p.index in seen:
            raise MergeError(f"shard {p.index}/{p.count} given twice: {seen[p.index].dir} and {p.dir}")
        seen[p.index] = p
    count = parts[0].count
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise MergeError(f"missing shard {', '.join(missing)}: a merge needs all {count} shards of the run")
    selection = parts[0].summary["selection"]
    from nncert.testing.graphs import Cell

    try:
        cells = [Cell.parse(label) for label in selection]
    except ValueError as e:
        raise MergeError(f"{parts[0].dir}: {SUMMARY_FILE}'s selection: {e}") from None
    for p in parts:
        expected = [c.label for c in shard_cells(cells, p.index, count)]
        if p.summary["cells"] != expected:
            raise MergeError(f"{p.dir} ran other cells than shard {p.index}/{count} of its selection")

    first = parts[0].summary
    d = first["driver"]
    run = Run(d.get("spec"), d.get("version_string"), first["seed"], first["graphs"], first["shrink_runs"],
              bool(first.get("triage")), selection)
    results: dict[str, dict[str, Any]] = {}
    specs: list[tuple[str, dict[str, Any]]] = []  # read before a file is written
    for p in parts:
        for label, entry in p.summary["results"].items():
            results[label] = entry
            if entry.get("failure"):
                name = entry["failure"]["spec"]
                specs.append((name, _read_spec(p.dir / name)))
    out = files.own_dir(out)
    for name, doc in specs:
        if "repro" in doc:  # the spec file names its own place
            doc["repro"] = f"nncert repro {out / name} --driver {run.driver}"
        files.write_atomic(out / name, json.dumps(doc, indent=1) + "\n")
    seconds = sum(float(p.summary.get("seconds") or 0.0) for p in parts)
    summary = build(run, selection, results, seconds, complete=True)
    summary["shard"] = None
    summary["merged"] = [{"shard": f"{p.index}/{p.count}", "dir": os.path.abspath(p.dir),
                          "seconds": p.summary.get("seconds")} for p in sorted(parts, key=lambda p: p.index)]
    write(out, summary)
    return summary


def _read_spec(path: Path) -> dict[str, Any]:
    from nncert.testing.graphs import SpecError

    try:
        doc = datafiles.read_json(path, SpecError, allow_nonfinite=True)
    except SpecError as e:
        raise MergeError(str(e)) from None
    if not isinstance(doc, dict):
        raise MergeError(f"{path} is not a spec file")
    return doc
