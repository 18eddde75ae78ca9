"""The certification report, built from the journal: ``report.json`` (the data, schema in
docs/certification.md), ``report.html`` (the view a reviewer reads), ``junit.xml``, CSV
tables, and ``MANIFEST.sha256`` over every file of the directory."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pandas as pd

from nncert.certify import journal, verdict
from nncert.certify.plan import Plan, Suite, parse_plan
from nncert.certify.runner import JOURNAL_FILE, RunSettings, reproduce_command
from nncert.datafiles import read_json
from nncert.files import own_dir, write_atomic
from nncert.requirements import REQUIREMENTS

SCHEMA = "nncert-certification-report"
SCHEMA_VERSION = 1
REPORT_FILE = "report.json"
HTML_FILE = "report.html"
JUNIT_FILE = "junit.xml"
TABLES_DIR = "tables"
MANIFEST_FILE = "MANIFEST.sha256"


def _iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


def _test_entry(
    suite_name: str, collected: dict[str, Any], outcome: dict[str, Any] | None, reproduce: str
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": collected["id"],
        "suite": suite_name,
        "req": (outcome or collected)["req"] or collected["req"],
        "status": outcome["status"] if outcome else None,
    }
    for key in ("operation", "type"):
        if key in collected:
            entry[key] = collected[key]
    if outcome:
        entry["duration"] = outcome["duration"]
        for key in ("message", "verdict", "detail", "expectation", "properties"):
            if outcome.get(key):
                entry[key] = outcome[key]
    if entry["status"] in journal.FAILING:
        entry["reproduce"] = (entry.get("properties") or {}).get("reproduce") or reproduce
    return entry


def _odd_ones_out(test: dict[str, Any]) -> list[str]:
    """The runtimes the test's N-way verdict names the odd ones out, from its machine-readable
    form (a report's own data: anything but a list of strings counts as none)."""
    triage = (test.get("properties") or {}).get("nncert_triage")
    odd = triage.get("odd_ones_out") if isinstance(triage, dict) else None
    return [n for n in odd if isinstance(n, str)] if isinstance(odd, list) else []


def _reproduce(test_id: str, outcome: dict[str, Any] | None, settings: RunSettings, suite: Suite) -> str:
    """A failure's reproducer; none for the rest, which show none (20,000 commands cost 0.1 s)."""
    if outcome is None or outcome["status"] not in journal.FAILING:
        return ""
    return reproduce_command(test_id, settings.driver, suite)


def test_entries(
    plan: Plan, settings: RunSettings, states: dict[str, journal.SuiteState]
) -> list[dict[str, Any]]:
    """Every test of the run, from the replayed journal, as the report lists them."""
    tests = []
    for name in settings.suites:
        state = states.get(name, journal.SuiteState())
        suite = plan.suite(name)
        for test_id, collected in state.tests.items():
            outcome = state.outcomes.get(test_id)
            tests.append(_test_entry(name, collected, outcome, _reproduce(test_id, outcome, settings, suite)))
        # Outcomes of tests the collection did not list (the runner's CRASH of a test whose
        # collection record was lost) are kept too: nothing recorded is dropped.
        for test_id, outcome in state.outcomes.items():
            if test_id not in state.tests:
                tests.append(
                    _test_entry(
                        name,
                        {"id": test_id, "req": outcome["req"]},
                        outcome,
                        _reproduce(test_id, outcome, settings, suite),
                    )
                )
    return tests


def _suites(
    settings: RunSettings, plan: Plan, states: dict[str, journal.SuiteState], tests: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    by_suite: dict[str, Counter[str]] = defaultdict(Counter)
    duration: dict[str, float] = defaultdict(float)
    for t in tests:
        by_suite[t["suite"]][t["status"] or "NO OUTCOME"] += 1
        duration[t["suite"]] += t.get("duration", 0.0)
    out = []
    for suite in plan.suites:
        name = suite.name
        state = states.get(name, journal.SuiteState())
        if name not in settings.suites:
            where, message = "not selected", "left out with --suites"
        elif settings.merged:
            where, message = _merged_state(state, settings.merged)
        else:
            where, message = _suite_state(state, state.events)
        out.append(
            {
                "name": name,
                "title": suite.title,
                "state": where,
                "message": message,
                "starts": sum(1 for e in state.events if e["state"] == "started"),
                "wall": _merged_wall(state, settings.merged) if settings.merged else _wall(state.events),
                "tests": len(state.tests),
                "counts": dict(by_suite[name]),
                "duration": round(duration[name], 3),
            }
        )
    return out


def _suite_state(state: journal.SuiteState, events: list[dict[str, Any]]) -> tuple[str, str]:
    """A suite's state and its message, from the runner's records of it."""
    if not events:
        return "not run", ""
    if events[-1]["state"] == "started":  # the run was interrupted before it ended
        return "interrupted", f"{len(state.missing)} tests did not run"
    return events[-1]["state"], events[-1].get("message", "")


def _merged_state(state: journal.SuiteState, shards: list[str]) -> tuple[str, str]:
    """A suite of a merged run: finished when it finished on every shard, else the state of the
    first shard where it did not (a shard that never started it: not run)."""
    parts = [(s, *_suite_state(state, [e for e in state.events if e.get("shard") == s])) for s in shards]
    unfinished = [p for p in parts if p[1] != "finished"]
    where = unfinished[0][1] if unfinished else "finished"
    return where, "; ".join(f"shard {s} {w}: {m}".rstrip(": ") for s, w, m in unfinished or parts)


def _merged_wall(state: journal.SuiteState, shards: list[str]) -> float:
    """A merged run's suite: its children's seconds on every shard, added up."""
    return round(sum(_wall([e for e in state.events if e.get("shard") == s]) for s in shards), 3)


def _shard(settings: RunSettings, records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a shard's report says of its shard: which, how the plan was dealt, and per suite how
    many tests it selected of how many the suite collected (its tests are the report's)."""
    if not settings.shard:
        return None
    index, count = settings.shard.split("/")
    suites: dict[str, dict[str, int]] = {}
    for r in records:
        if r["event"] == "collected" and isinstance(r.get("shard"), dict):
            suites[r["suite"]] = {"collected": r["shard"].get("of"), "selected": len(r["tests"])}
    return {
        "index": int(index),
        "count": int(count),
        "method": settings.partition,
        "partition_sha256": settings.partition_sha256,
        "durations_from": settings.durations_from or None,
        "suites": suites,
    }


def _wall(events: list[dict[str, Any]]) -> float:
    """Seconds a suite's child processes ran, from the runner's records (each start to its end)."""
    total, began = 0.0, None
    for e in events:
        if "time" not in e:
            continue
        if e["state"] == "started":  # a restart ends the previous child's stretch
            total += e["time"] - began if began is not None else 0.0
            began = e["time"]
        elif began is not None:
            total += e["time"] - began
            began = None
    return round(total, 3)


def suite_problems(suites: list[dict[str, Any]]) -> list[str]:
    """Suites that did not run to their end (their tests' outcomes are missing or partial)."""
    return [
        f"suite {s['name']} {s['state']}: {s['message']}".rstrip(": ")
        for s in suites
        if s["state"] != "finished"
    ]


def requirements_section(tests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    verdicts = verdict.requirement_verdicts(REQUIREMENTS, ((t["req"], t["status"]) for t in tests))
    ids: dict[str, list[str]] = defaultdict(list)
    for t in tests:
        for rid in t["req"]:
            ids[rid].append(t["id"])
    return {
        rid: {"title": REQUIREMENTS[rid], "verdict": v, "counts": dict(counts), "tests": ids[rid]}
        for rid, (v, counts) in verdicts.items()
    }


def overall(
    tests: list[dict[str, Any]], requirements: dict[str, dict[str, Any]], suites: list[dict[str, Any]]
) -> dict[str, Any]:
    missing = sum(1 for t in tests if t["status"] is None)
    result, reasons = verdict.overall_verdict(
        {rid: r["verdict"] for rid, r in requirements.items()}, missing, suite_problems(suites)
    )
    return {
        "overall": result,
        "exit_status": verdict.EXIT_STATUS[result],
        "reasons": reasons,
        "rules": "docs/certification.md#verdict-rules",
    }


def _coverage(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for t in tests:
        if "operation" not in t:
            continue
        cell = cells.setdefault(
            (t["operation"], t["type"]),
            {"operation": t["operation"], "type": t["type"], "counts": Counter(), "declined_reason": ""},
        )
        cell["counts"][t["status"] or "NO OUTCOME"] += 1
        if t["status"] == "DECLINED" and not cell["declined_reason"]:
            cell["declined_reason"] = t.get("message", "")
    out = []
    for cell in cells.values():
        c = cell["counts"]
        ran = sum(n for s, n in c.items() if s not in ("DECLINED", "SKIPPED", "NO OUTCOME"))
        state = (
            "failed"
            if any(c[s] for s in journal.FAILING)
            else "waived"
            if c["WAIVED"]
            else "passed"
            if ran
            else "declined"
            if c["DECLINED"]
            else "not run"
        )
        out.append({**cell, "counts": dict(c), "claimed": ran > 0 or c["NO OUTCOME"] > 0, "state": state})
    return sorted(out, key=lambda c: (c["operation"], c["type"]))


def _property_rows(tests: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    rows = []
    for t in tests:
        row = (t.get("properties") or {}).get(key)
        if isinstance(row, dict):
            # The test's status is the certification's; the row's own (an engine's word) is kept.
            rows.append({**row, "result": row.get("status"), "test": t["id"], "status": t["status"]})
    return rows


def _waivers(tests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The expectations entries that waived failures, and those whose tests passed (stale)."""
    used: dict[str, dict[str, Any]] = {}
    stale: dict[str, dict[str, Any]] = {}
    for t in tests:
        exp = t.get("expectation")
        if not exp or t["status"] not in ("WAIVED", "XPASS"):
            continue
        if t["status"] == "WAIVED":  # still failing: what would be said were it fixed does not apply
            into, exp = used, {k: v for k, v in exp.items() if k != "fixed"}
        else:
            into = stale
        entry = into.setdefault(exp["source"], {**exp, "tests": []})
        entry["tests"].append(t["id"])
    return list(used.values()), list(stale.values())


def build(out: Path, plan: Plan, settings: RunSettings) -> dict[str, Any]:
    """The report of the run in ``out``, from its journal."""
    records = journal.read(out / JOURNAL_FILE)
    states = journal.replay(records)
    runs = [r for r in records if r["event"] == "run"]
    tests = test_entries(plan, settings, states)
    suites = _suites(settings, plan, states, tests)
    requirements = requirements_section(tests)
    waivers, stale = _waivers(tests)
    last_run = runs[-1] if runs else {}
    finished = max((r["time"] for r in records if r["event"] == "suite" and "time" in r), default=None)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "verdict": overall(tests, requirements, suites),
        "driver": last_run.get("identity", {"spec": settings.driver}),
        "environment": last_run.get("environment", {}),
        "environment_changes": [
            r["environment"] for r in runs[1:] if r.get("environment") != runs[0].get("environment")
        ],
        "plan": {
            "name": plan.name,
            "given": settings.plan,
            "sha256": plan.sha256,
            "description": plan.description,
            "suites": settings.suites,
            "text": plan.text,
        },
        "run": {
            "started": _iso(runs[0]["time"]) if runs else None,
            "finished": _iso(finished),
            "invocations": len(runs),
            "jobs": settings.jobs,
            "expectations": settings.expectations,
            "nncert": settings.nncert,
        },
        "suites": suites,
        "tests": tests,
        "requirements": requirements,
        "coverage": _coverage(tests),
        "mlts": _property_rows(tests, "nncert_mlts"),
        "fuzz": _property_rows(tests, "nncert_fuzz"),
        "waivers": waivers,
        "stale_waivers": stale,
        "expectations_not_applied": last_run.get("expectations_not_applied", []),
        # A shard's own part (docs/certification.md, "Sharding"); a merged report's parts are
        # added by nncert.certify.merge.
        "shard": _shard(settings, records),
        "merged": None,
    }


# -- the files


def junit(report: dict[str, Any]) -> bytes:
    """JUnit XML: a testsuite per suite; properties are plain strings (requirement IDs
    comma-separated)."""
    root = ET.Element(
        "testsuites", name=f"nncert certify {report['plan']['name']}: {report['driver']['spec']}"
    )
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in report["tests"]:
        by_suite[t["suite"]].append(t)
    for suite in report["suites"]:
        tests = by_suite[suite["name"]]
        c = Counter(t["status"] for t in tests)
        element = ET.SubElement(
            root,
            "testsuite",
            name=suite["name"],
            tests=str(len(tests)),
            failures=str(c["FAIL"]),
            errors=str(c["CRASH"] + c["HANG"]),
            skipped=str(c["DECLINED"] + c["SKIPPED"] + c["WAIVED"] + c[None]),
            time=f"{suite['duration']:.3f}",
        )
        for t in tests:
            path, _, name = t["id"].partition("::")
            case = ET.SubElement(
                element,
                "testcase",
                classname=path.removesuffix(".py").replace("/", "."),
                name=name,
                time=f"{t.get('duration', 0.0):.3f}",
            )
            props = ET.SubElement(case, "properties")
            for key, value in (
                ("requirements", ",".join(t["req"])),
                ("status", t["status"] or "NO OUTCOME"),
                ("reproduce", t.get("reproduce", "")),
                ("three_way", t.get("verdict", "")),  # the N-way verdict (its old name kept)
                ("odd_ones_out", ",".join(_odd_ones_out(t))),
            ):
                if value:
                    ET.SubElement(props, "property", name=key, value=value)
            message = t.get("message", "")
            status = t["status"]
            if status == "FAIL":
                ET.SubElement(case, "failure", message=message[:500]).text = message
            elif status in ("CRASH", "HANG"):
                ET.SubElement(case, "error", type=status, message=message[:500]).text = t.get(
                    "detail", message
                )
            elif status in ("DECLINED", "SKIPPED", "WAIVED") or status is None:
                kind = (status or "no outcome").lower()
                ET.SubElement(case, "skipped", type=kind, message=message[:500] or kind)
    ET.indent(root)
    # Serialised to str and encoded once: the same bytes as encoding="utf-8", without a codec
    # call per write (a third of the time for 20,000 tests).
    return ("<?xml version='1.0' encoding='utf-8'?>\n" + ET.tostring(root, encoding="unicode")).encode()


def tables(report: dict[str, Any]) -> dict[str, pd.DataFrame]:
    tests = pd.DataFrame(
        [
            {
                "suite": t["suite"],
                "id": t["id"],
                "status": t["status"] or "NO OUTCOME",
                "requirements": ",".join(t["req"]),
                "duration_s": t.get("duration"),
                "operation": t.get("operation", ""),
                "type": t.get("type", ""),
                "message": t.get("message", ""),
                "reproduce": t.get("reproduce", ""),
            }
            for t in report["tests"]
        ]
    )
    requirements = pd.DataFrame(
        [
            {
                "requirement": rid,
                "title": r["title"],
                "verdict": r["verdict"],
                **{s: r["counts"].get(s, 0) for s in (*journal.STATUSES, "NO OUTCOME")},
            }
            for rid, r in report["requirements"].items()
        ]
    )
    coverage = pd.DataFrame(
        [
            {
                "operation": c["operation"],
                "type": c["type"],
                "state": c["state"],
                "claimed": c["claimed"],
                "declined_reason": c["declined_reason"],
                **{s: c["counts"].get(s, 0) for s in journal.STATUSES},
            }
            for c in report["coverage"]
        ]
    )
    suites = pd.DataFrame(
        [{k: v for k, v in s.items() if k != "counts"} | s["counts"] for s in report["suites"]]
    )
    mlts = pd.DataFrame(
        [{k: v for k, v in row.items() if not isinstance(v, dict | list)} for row in report["mlts"]]
    )
    return {
        "tests": tests,
        "requirements": requirements,
        "coverage": coverage,
        "suites": suites,
        "mlts": mlts,
    }


def manifest_lines(out: Path) -> list[str]:
    """``sha256  path`` for every file under ``out`` but the manifest itself, sorted."""
    lines = []
    for directory, dirs, files in os.walk(out):
        dirs.sort()
        for name in files:
            path = Path(directory) / name
            rel = path.relative_to(out).as_posix()
            if rel == MANIFEST_FILE:
                continue
            lines.append(f"{file_sha256(path)}  {rel}")
    return sorted(lines, key=lambda line: line.split("  ", 1)[1])


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write(out: Path, report: dict[str, Any]) -> None:
    """Every file of the report, then the manifest over the whole directory."""
    from nncert.certify import html

    write_atomic(out / REPORT_FILE, json.dumps(report, indent=1, default=str) + "\n")
    write_atomic(out / HTML_FILE, html.render(report))
    write_atomic(out / JUNIT_FILE, junit(report))
    own_dir(out / TABLES_DIR)
    for name, frame in tables(report).items():
        write_atomic(out / TABLES_DIR / f"{name}.csv", frame.to_csv(index=False))
    write_atomic(out / MANIFEST_FILE, "".join(line + "\n" for line in manifest_lines(out)))


#: What ``load`` checks of a report, as ``certify verify`` and ``certify diff`` read it: a key
#: maps to a type, a tuple of types, a dict (an object with those keys), a list of one shape
#: (an array of such items), or ``{_EACH: shape}`` (an object whose every value has the shape).
_EACH = object()
_MISSING = object()
_SHAPE: dict[str, Any] = {
    "plan": {"name": str, "given": str, "text": str, "sha256": str},
    "run": {"nncert": str},
    "driver": {},
    "verdict": {"overall": str, "reasons": [str]},
    "suites": [{"name": str, "state": str, "message": str}],
    "tests": [{"suite": str, "id": str, "status": (str, type(None)), "req": [str]}],
    "requirements": {_EACH: {"verdict": str, "counts": {_EACH: int}}},
    "coverage": [{"operation": str, "type": str, "state": str}],
    "mlts": [{"test": str}],
}


def _shape_problem(value: Any, shape: Any, where: str) -> str | None:
    """Where ``value`` departs from ``shape`` (see ``_SHAPE``), None if nowhere."""
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} must be an array"
        for n, item in enumerate(value):
            problem = _shape_problem(item, shape[0], f"{where}[{n}]")
            if problem:
                return problem
        return None
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} must be an object"
        for key, sub in shape.items():
            items = value.items() if key is _EACH else [(key, value.get(key, _MISSING))]
            for k, v in items:
                if v is _MISSING:
                    return f"{where} has no {k!r}"
                problem = _shape_problem(v, sub, f"{where}.{k}" if where else k)
                if problem:
                    return problem
        return None
    if not isinstance(value, shape) or (isinstance(value, bool) and shape is int):
        kinds = shape if isinstance(shape, tuple) else (shape,)
        return f"{where} must be {' or '.join('null' if k is type(None) else k.__name__ for k in kinds)}"
    return None



def load(out: Path) -> dict[str, Any]:
    """A report.json, checked to be one (well-formed JSON of nncert's schema, with the fields
    verify and diff read of the right types): ValueError (one line) otherwise."""
    path = out / REPORT_FILE
    if not path.is_file():
        raise ValueError(f"{out} is not a certification report ({REPORT_FILE} is missing)")
    # A report keeps NaN where a measurement has none (an MLTS model that did not run).
    report = read_json(path, ValueError, allow_nonfinite=True)
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not an nncert certification report")
    if report.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{path}: report schema version {report.get('schema_version')!r:.40}; this nncert "
            f"reads version {SCHEMA_VERSION}"
        )
    problem = _shape_problem(report, _SHAPE, "")
    if problem:
        raise ValueError(f"{path}: not a well-formed report: {problem}")
    return report


def report_plan(report: dict[str, Any]) -> Plan:
    return parse_plan(report["plan"]["text"], f"the plan in {REPORT_FILE}")
