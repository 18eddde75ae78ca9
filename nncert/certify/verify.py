"""``nncert certify verify DIR``: re-check a certification report the way a reviewer would.

- The manifest is intact: every file it lists has its SHA-256, and no file is unlisted.
- The plan in the report hashes to the recorded SHA-256, and a shipped plan is the one this
  nncert ships (the report's nncert version must be this one's: tests differ between versions).
- The report's outcomes are the journal's, test by test, with nothing recorded twice.
- Every test of the plan is in the report: each suite that ran is collected again here and
  compared (``recollect=False`` skips it).
- The verdicts follow from the outcomes by the written rules (nncert.certify.verdict).

Each problem is one line; none means the report verifies.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from nncert import __version__
from nncert.certify import journal, shard
from nncert.certify.plan import Plan, PlanError, known_plans, load_plan, suite_files
from nncert.certify.report import (
    JOURNAL_FILE,
    MANIFEST_FILE,
    file_sha256,
    load,
    overall,
    report_plan,
    requirements_section,
    suite_problems,
    test_entries,
)
from nncert.certify.runner import CertifyError, RunSettings, pytest_arguments

#: Problems listed one by one before the rest are counted.
_SHOWN = 20


class NotAReport(ValueError):  # noqa: N818 - the directory is not a report: a usage error
    """The directory is not a certification report (a usage error, exit status 2)."""


def verify(out: Path, recollect: bool = True) -> list[str]:
    """Every problem found with the report in ``out`` (empty: it verifies)."""
    if not out.is_dir():
        raise NotAReport(f"{out}: no such directory")
    if not (out / MANIFEST_FILE).is_file():
        raise NotAReport(f"{out} is not a certification report ({MANIFEST_FILE} is missing)")
    try:
        report = load(out)
    except ValueError as e:
        raise NotAReport(str(e)) from None
    problems = manifest_problems(out)
    try:
        problems += _content(out, report, recollect)
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a report edited out of shape
        problems.append(f"report.json is malformed: {type(e).__name__}: {e}")
    return problems


def manifest_problems(out: Path) -> list[str]:
    """The manifest's problems: files changed, missing, unlisted, symlinks."""
    problems = []
    listed: set[str] = set()
    for n, line in enumerate((out / MANIFEST_FILE).read_text(errors="replace").splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel:
            problems.append(f"{MANIFEST_FILE} line {n} is malformed")
            continue
        listed.add(rel)
        path = out / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            problems.append(f"{MANIFEST_FILE} lists a path outside the report: {rel}")
        elif path.is_symlink():
            problems.append(f"{rel} is a symlink")
        elif not path.is_file():
            problems.append(f"{rel} is listed in the manifest but missing")
        elif file_sha256(path) != digest:
            problems.append(f"{rel} was changed after the report was written (its SHA-256 differs)")
    for directory, _, files in os.walk(out):
        for name in files:
            rel = (Path(directory) / name).relative_to(out).as_posix()
            if rel != MANIFEST_FILE and rel not in listed:
                problems.append(f"{rel} is not in the manifest (added after the report was written)")
    return problems


def _content(out: Path, report: dict[str, Any], recollect: bool) -> list[str]:
    problems: list[str] = []
    made_by = report["run"]["nncert"]
    if made_by != __version__:
        problems.append(
            f"the report was made by nncert {made_by}; this is nncert {__version__}: verify "
            f"it with nncert {made_by}"
        )
    plan = _plan(report, problems)
    try:
        settings = RunSettings.load(out)
    except CertifyError as e:
        return [*problems, str(e)]
    if settings.shard:
        problems += _partition(out, settings)
    if settings.merged:
        from nncert.certify import merge

        problems += merge.check(out, report, settings)
    if plan is not None:
        problems += _journal_matches(out, report, plan, settings)
        if recollect and made_by == __version__:
            problems += _recollected(out, report, plan, settings)
    problems += _verdicts(report)
    return problems


def _plan(report: dict[str, Any], problems: list[str]) -> Plan | None:
    recorded = report["plan"]
    if hashlib.sha256(recorded["text"].encode()).hexdigest() != recorded["sha256"]:
        problems.append("the plan in report.json does not hash to its recorded sha256 (edited)")
        return None
    try:
        plan = report_plan(report)
    except PlanError as e:
        problems.append(str(e))
        return None
    if recorded["given"] in known_plans() and report["run"]["nncert"] == __version__:
        shipped = load_plan(recorded["given"])
        if shipped.sha256 != recorded["sha256"]:
            problems.append(
                f"plan {recorded['given']!r} in the report (sha256 {recorded['sha256'][:12]}) is not "
                f"the one nncert {__version__} ships ({shipped.sha256[:12]})"
            )
    return plan


def _key(t: dict[str, Any]) -> tuple[str, str]:
    return t["suite"], t["id"]


def _journal_matches(out: Path, report: dict[str, Any], plan: Plan, settings: RunSettings) -> list[str]:
    """The report's tests are what the journal recorded."""
    try:
        records = journal.read(out / JOURNAL_FILE)
    except journal.JournalError as e:
        return [str(e)]
    states = journal.replay(records)
    problems = [
        f"test {t} of suite {name} has more than one outcome in the journal"
        for name, state in states.items()
        for t in state.duplicates
    ]
    # The tests as report.build lists them, from the journal read once (building the whole report
    # again would read and decode it a second time).
    rebuilt = {_key(t): t for t in test_entries(plan, settings, states)}
    stated = {_key(t): t for t in report["tests"]}
    mismatches = []
    for key in stated.keys() | rebuilt.keys():
        a, b = stated.get(key), rebuilt.get(key)
        if a is None:
            mismatches.append(f"test {key[1]} has an outcome in the journal but is missing from the report")
        elif b is None:
            mismatches.append(f"test {key[1]} is in the report but not in the journal")
        else:
            for field in ("status", "req", "message"):
                if a.get(field) != b.get(field):
                    mismatches.append(
                        f"test {key[1]}: the report's {field} is {a.get(field)!r}, the journal's "
                        f"{b.get(field)!r}"
                    )
    return problems + _bounded(sorted(mismatches))


def _partition(out: Path, settings: RunSettings) -> list[str]:
    """A shard's partition file is the one its run began with."""
    path = out / shard.PARTITION_FILE
    if not path.is_file() or file_sha256(path) != settings.partition_sha256:
        return [f"{shard.PARTITION_FILE} is not the partition shard {settings.shard} was dealt by (changed)"]
    return []


def _recollected(out: Path, report: dict[str, Any], plan: Plan, settings: RunSettings) -> list[str]:
    """Collect each suite that ran again, as the plan says (a shard: its part of each), and
    compare its tests with the report's."""
    stated: dict[str, set[str]] = {}
    for t in report["tests"]:
        stated.setdefault(t["suite"], set()).add(t["id"])
    problems = []
    with tempfile.TemporaryDirectory(prefix="nncert-verify-") as tmp:
        procs = {}
        for name in settings.suites:
            path = Path(tmp) / f"{name}.jsonl"
            suite = plan.suite(name)
            # The reference driver: collection does not depend on the driver, and a reviewer may
            # not have the vendor's installed.
            args = [
                *(str(f) for f in suite_files(suite)),
                "--collect-only",
                "-q",
                "--driver=reference",
                f"--nncert-journal={path}",
                f"--nncert-suite={name}",
                *suite.args,
            ]
            if settings.shard:
                partition = os.path.abspath(out / shard.PARTITION_FILE)
                args += [f"--nncert-shard={settings.shard}", f"--nncert-partition={partition}"]
            procs[name] = (
                subprocess.Popen(
                    [sys.executable, "-m", "pytest", *pytest_arguments(args)],
                    cwd=tmp,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
                path,
            )
        for name, (proc, path) in procs.items():
            _, err = proc.communicate(timeout=600)
            state = journal.replay(journal.read(path)).get(name)
            if state is None:
                problems.append(f"suite {name}: its tests cannot be collected again ({err.strip()[-200:]})")
                continue
            expected = set(state.tests)
            missing = sorted(expected - stated.get(name, set()))
            extra = sorted(stated.get(name, set()) - expected)
            problems += _bounded(
                [f"test {t} of suite {name} is in the plan but not in the report" for t in missing]
            )
            problems += _bounded(
                [f"test {t} is in the report but not in suite {name} of the plan" for t in extra]
            )
    return problems


def _verdicts(report: dict[str, Any]) -> list[str]:
    """The verdicts are what the written rules derive from the report's own outcomes."""
    problems = []
    requirements = requirements_section(report["tests"])
    for rid, derived in requirements.items():
        stated = report["requirements"].get(rid)
        if stated is None:
            problems.append(f"requirement {rid} is missing from the report")
        elif (stated["verdict"], stated["counts"]) != (derived["verdict"], derived["counts"]):
            problems.append(
                f"requirement {rid}: the report says {stated['verdict']} {stated['counts']}; its "
                f"outcomes give {derived['verdict']} {derived['counts']}"
            )
    derived = overall(report["tests"], requirements, report["suites"])
    if derived["overall"] != report["verdict"]["overall"]:
        problems.append(
            f"the overall verdict is {report['verdict']['overall']}; the outcomes give {derived['overall']}"
        )
    if suite_problems(report["suites"]) != [
        r for r in report["verdict"]["reasons"] if r.startswith("suite ")
    ]:
        problems.append("the suites' states and the verdict's reasons disagree")
    return problems


def _bounded(problems: list[str]) -> list[str]:
    if len(problems) <= _SHOWN:
        return problems
    return [*problems[:_SHOWN], f"... and {len(problems) - _SHOWN} more like these"]


__all__ = ["NotAReport", "verify"]
