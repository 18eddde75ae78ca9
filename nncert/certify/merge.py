"""``nncert certify merge DIR... --out DIR``: the report of a sharded run, from its N shard reports.

The shards' journals, concatenated in shard order, are the merged run's journal, and the
report is built from it by the same code as any run's (nncert.certify.report.build: the
verdicts over the union, by nncert.certify.verdict). A suite is finished when it finished on
every shard. Refused, with one line, unless the directories are N verifying shard reports of
one plan, one driver (spec and version string, at every invocation), one nncert version, one
partition, shards 1/N to N/N once each, no test in two of them.

The merged directory keeps what ties it to its parts: ``shards/I-of-N/`` holds each shard's
``MANIFEST.sha256``, ``run.json`` and ``partition.json``, and report.json's ``merged`` lists each
part's hashes and where its bytes lie in the merged journal. ``nncert certify verify`` checks
them (``check``): the journal is the parts' journals, byte for byte, as their manifests hash
them. The shards' logs and artifacts are copied under ``logs/I-of-N/`` and ``artifacts/I-of-N/``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nncert import files
from nncert.certify import journal
from nncert.certify import report as reports
from nncert.certify.runner import ARTIFACTS_DIR, JOURNAL_FILE, LOGS_DIR, RUN_FILE, CertifyError, RunSettings
from nncert.certify.shard import PARTITION_FILE, parse_shard, shard_name

PARTS_DIR = "shards"
#: The files of each shard kept in the merged report (its manifest hashes every other).
_KEPT = (reports.MANIFEST_FILE, RUN_FILE, PARTITION_FILE)


@dataclass
class Part:
    """One shard's report, read."""

    dir: Path
    report: dict[str, Any]
    settings: RunSettings
    index: int
    count: int
    journal: bytes
    manifest: dict[str, str]  # path -> sha256, as its MANIFEST.sha256 lists them
    versions: list[str]  # the driver's version string at each invocation of the shard's run

    @property
    def name(self) -> str:
        return shard_name(self.index, self.count)

    @property
    def folder(self) -> str:
        return f"{self.index}-of-{self.count}"



def _read(d: Path) -> Part:
    """A shard report's directory, read (CertifyError when it is none)."""
    from nncert.certify.verify import NotAReport, manifest_problems

    if not d.is_dir():
        raise CertifyError(f"{d}: no such directory")
    if not (d / reports.MANIFEST_FILE).is_file():
        raise CertifyError(f"{d} is not a certification report ({reports.MANIFEST_FILE} is missing)")
    try:
        report = reports.load(d)
    except (ValueError, NotAReport) as e:
        raise CertifyError(str(e)) from None
    settings = RunSettings.load(d)
    if settings.merged:
        raise CertifyError(f"{d} is a merged report, not a shard's: merge the shards themselves")
    if not settings.shard:
        raise CertifyError(f"{d} is not a shard's report (it ran the whole plan, without --shard)")
    problems = manifest_problems(d)
    if problems:
        raise CertifyError(f"{d} does not verify: {problems[0]}{_more(problems)}")
    index, count = parse_shard(settings.shard)
    manifest = {}
    for line in (d / reports.MANIFEST_FILE).read_text().splitlines():
        digest, _, rel = line.partition("  ")
        manifest[rel] = digest
    data = (d / JOURNAL_FILE).read_bytes()
    if data and not data.endswith(b"\n"):
        raise CertifyError(f"{d}: {JOURNAL_FILE} ends in a torn record (resume the shard to finish it)")
    try:
        records = journal.read(d / JOURNAL_FILE)
    except journal.JournalError as e:
        raise CertifyError(str(e)) from None
    versions = sorted(
        {
            str(r["identity"].get("version_string", r["identity"].get("error")))
            for r in records
            if r["event"] == "run" and isinstance(r.get("identity"), dict)
        }
    )
    return Part(d, report, settings, index, count, data, manifest, versions)


def _more(problems: list[str]) -> str:
    return f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""


def _same(parts: list[Part], what: str, key: Callable[[Part], str]) -> None:
    """Refuse parts that differ in ``key``: the first part and the first that differs, named."""
    first = parts[0]
    for p in parts[1:]:
        if key(p) != key(first):
            raise CertifyError(
                f"shards of different {what}: {first.dir} has {key(first)}, {p.dir} has {key(p)}"
            )


def _check(parts: list[Part]) -> None:
    _same(parts, "plans", lambda p: f"plan {p.report['plan']['name']!r} sha256 {p.settings.plan_sha256[:12]}")
    _same(parts, "suite selections", lambda p: f"--suites {','.join(p.settings.suites)}")
    _same(parts, "drivers", lambda p: f"--driver {p.settings.driver!r}")
    for p in parts:
        if len(p.versions) > 1:
            raise CertifyError(
                f"{p.dir}: the driver's version string changed between invocations of the shard "
                f"({' and '.join(p.versions)})"
            )
    _same(parts, "driver versions", lambda p: f"version string {' '.join(p.versions)!r}")
    _same(parts, "nncert versions", lambda p: f"nncert {p.settings.nncert}")
    _same(parts, "expectations", lambda p: f"--expectations {p.settings.expectations}")
    _same(parts, "shard counts", lambda p: f"N = {p.count}")
    _same(parts, "partitions", lambda p: f"{p.settings.partition} {p.settings.partition_sha256[:12]}")
    seen: dict[int, Part] = {}
    for p in parts:
        if p.index in seen:
            raise CertifyError(f"shard {p.name} given twice: {seen[p.index].dir} and {p.dir}")
        seen[p.index] = p
    count = parts[0].count
    missing = [shard_name(i, count) for i in range(1, count + 1) if i not in seen]
    if missing:
        raise CertifyError(f"missing shard {', '.join(missing)}: a merge needs all {count} shards of the run")
    owner: dict[tuple[str, str], Part] = {}
    for p in parts:
        for t in p.report["tests"]:
            key = (t["suite"], t["id"])
            if key in owner:
                raise CertifyError(
                    f"test {t['id']} of suite {t['suite']} is in shard {owner[key].name} ({owner[key].dir}) "
                    f"and shard {p.name} ({p.dir}): the shards overlap"
                )
            owner[key] = p


def _copy(src: Path, dst: Path) -> None:
    """``src`` (a regular file a verified manifest lists) into ``dst``, never through a link."""
    files.own_dir(dst.parent)
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with open(fd_in, "rb") as f_in, os.fdopen(files.open_append(dst), "wb") as f_out:
        f_out.truncate(0)
        for chunk in iter(lambda: f_in.read(1 << 20), b""):
            f_out.write(chunk)


def merge(dirs: list[Path], out: Path) -> dict[str, Any]:
    """Merge the shard reports in ``dirs`` into a new report in ``out``; returns it. Raises
    CertifyError (one line) for shards that are not one run's, before anything is written."""
    from nncert.certify.verify import verify

    if os.path.lexists(out):
        files.check_dir(out)
        if any(out.iterdir()):
            raise CertifyError(f"--out {out} is not empty: merge into a new directory")
    parts = [_read(Path(d)) for d in dirs]
    _check(parts)
    for p in parts:  # the rest of what verify checks (the journal's outcomes, the verdicts)
        problems = verify(p.dir, recollect=False)
        if problems:
            raise CertifyError(f"{p.dir} does not verify: {problems[0]}{_more(problems)}")
    parts.sort(key=lambda p: p.index)
    first = parts[0]
    plan = reports.report_plan(first.report)
    out = files.own_dir(os.path.abspath(out))
    for p in parts:
        for name in _KEPT:
            _copy(p.dir / name, out / PARTS_DIR / p.folder / name)
        for rel in p.manifest:
            top = rel.split("/", 1)
            if top[0] in (LOGS_DIR, ARTIFACTS_DIR) and len(top) == 2:
                _copy(p.dir / rel, out / top[0] / p.folder / top[1])
    with os.fdopen(files.open_append(out / JOURNAL_FILE), "wb") as f:
        for p in parts:
            f.write(p.journal)
        f.flush()
        os.fsync(f.fileno())
    settings = RunSettings(
        first.settings.driver,
        first.settings.plan,
        first.settings.plan_sha256,
        first.settings.suites,
        first.settings.expectations,
        first.settings.jobs,
        first.settings.nncert,
        partition=first.settings.partition,
        partition_sha256=first.settings.partition_sha256,
        merged=[p.name for p in parts],
    )
    settings.save(out)
    report = reports.build(out, plan, settings)
    offset = 0
    merged = []
    for p in parts:
        merged.append(
            {
                "shard": p.name,
                "dir": os.path.abspath(p.dir),
                "manifest_sha256": reports.file_sha256(p.dir / reports.MANIFEST_FILE),
                "report_sha256": p.manifest.get(reports.REPORT_FILE),
                "journal_sha256": hashlib.sha256(p.journal).hexdigest(),
                "journal_offset": offset,
                "journal_bytes": len(p.journal),
                "tests": len(p.report["tests"]),
                "verdict": p.report["verdict"]["overall"],
                "driver": {k: p.report["driver"].get(k) for k in ("spec", "version_string")},
                "environment": p.report["environment"],
                "started": p.report["run"].get("started"),
                "finished": p.report["run"].get("finished"),
            }
        )
        offset += len(p.journal)
    report["merged"] = {
        "count": first.count,
        "method": first.settings.partition,
        "partition_sha256": first.settings.partition_sha256,
        "parts": merged,
    }
    reports.write(out, report)
    return report


def check(out: Path, report: dict[str, Any], settings: RunSettings) -> list[str]:
    """What a merged report claims of its parts, checked: shards 1/N to N/N, each one's kept
    manifest with its recorded hash, its run.json and partition file those the manifest lists,
    and the journal the parts' journals end to end, each as its manifest hashes it."""
    merged = report.get("merged")
    if not isinstance(merged, dict) or not isinstance(merged.get("parts"), list):
        return ["a merged run (run.json 'merged') whose report.json has no 'merged' parts"]
    parts = merged["parts"]
    count = len(settings.merged)
    expected = [shard_name(i, count) for i in range(1, count + 1)]
    if settings.merged != expected or [p.get("shard") for p in parts] != expected:
        return [f"a merged report's shards must be {', '.join(expected)}: run.json has {settings.merged}, "
                f"report.json {[p.get('shard') for p in parts]}"]
    problems = []
    data = (out / JOURNAL_FILE).read_bytes()
    offset = 0
    for p in parts:
        name, folder = p["shard"], p["shard"].replace("/", "-of-")
        kept = out / PARTS_DIR / folder
        try:
            manifest_text = (kept / reports.MANIFEST_FILE).read_bytes()
        except OSError:
            problems.append(f"shard {name}: {PARTS_DIR}/{folder}/{reports.MANIFEST_FILE} is missing")
            continue
        if hashlib.sha256(manifest_text).hexdigest() != p["manifest_sha256"]:
            problems.append(f"shard {name}: its manifest is not the one the merge recorded (sha256 differs)")
        listed = {}
        for line in manifest_text.decode(errors="replace").splitlines():
            digest, _, rel = line.partition("  ")
            listed[rel] = digest
        if listed.get(reports.REPORT_FILE) != p["report_sha256"]:
            problems.append(f"shard {name}: the recorded report.json hash is not its manifest's")
        for rel in (RUN_FILE, PARTITION_FILE):
            path = kept / rel
            if not path.is_file() or reports.file_sha256(path) != listed.get(rel):
                problems.append(
                    f"shard {name}: {PARTS_DIR}/{folder}/{rel} is not the file its manifest hashes"
                )
        try:
            part = RunSettings.load(kept)
        except CertifyError as e:
            problems.append(f"shard {name}: {e}")
        else:
            if (part.shard, part.plan_sha256, part.driver, part.partition_sha256) != (
                name, settings.plan_sha256, settings.driver, settings.partition_sha256
            ):
                problems.append(f"shard {name}: its run.json is not a shard {name} of this run's plan, "
                                f"driver and partition")
        size = p["journal_bytes"]
        chunk = data[offset : offset + size]
        if p["journal_offset"] != offset or len(chunk) != size:
            problems.append(f"shard {name}: the journal does not hold its {size} bytes at offset {offset}")
        elif hashlib.sha256(chunk).hexdigest() != p["journal_sha256"] or p["journal_sha256"] != listed.get(
            JOURNAL_FILE
        ):
            problems.append(f"shard {name}: its part of the journal is not the journal its manifest hashes")
        offset += size
    if offset != len(data):
        problems.append(f"the journal holds {len(data) - offset} bytes beyond its shards' journals")
    return problems
