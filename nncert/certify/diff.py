"""``nncert certify diff OLD NEW``: what changed between two certification reports of the same plan
(two driver builds, two runtime releases): new failures and fixes, operations newly declined or
claimed, requirement verdicts that moved, MLTS accuracy and latency. Something regressed when a
test newly fails, a requirement newly fails, an operation the old build claimed is declined, an
MLTS model loses accuracy or status, or its latency grows past the threshold."""

from __future__ import annotations

from typing import Any

from nncert.certify.journal import FAILING

#: Statuses in which a test did what the requirement asks.
_GOOD = ("PASS", "XPASS")


def _tests(report: dict[str, Any]) -> dict[tuple[str, str], str | None]:
    return {(t["suite"], t["id"]): t["status"] for t in report["tests"]}


def _claimed(report: dict[str, Any]) -> dict[tuple[str, str], bool]:
    return {(c["operation"], c["type"]): c["state"] != "declined" for c in report["coverage"]}


def _mlts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(r.get("model", r["test"])): r for r in report["mlts"]}


def diff(old: dict[str, Any], new: dict[str, Any], latency_threshold: float = 0.25) -> dict[str, Any]:
    """The changes from ``old`` to ``new``; ValueError when they are not reports of one plan."""
    if old["plan"]["sha256"] != new["plan"]["sha256"]:
        raise ValueError(
            f"the reports ran different plans ({old['plan']['name']} {old['plan']['sha256'][:12]}, "
            f"{new['plan']['name']} {new['plan']['sha256'][:12]}): nothing to compare test by test"
        )
    a, b = _tests(old), _tests(new)
    changes: dict[str, list[Any]] = {"new_failures": [], "fixes": [], "other_changes": []}
    for key in sorted(a.keys() | b.keys()):
        was, now = a.get(key), b.get(key)
        if was == now:
            continue
        item = {"suite": key[0], "id": key[1], "old": was, "new": now}
        if now in FAILING and was not in FAILING:
            changes["new_failures"].append(item)
        elif was in FAILING and now in _GOOD:
            changes["fixes"].append(item)
        else:
            changes["other_changes"].append(item)
    ca, cb = _claimed(old), _claimed(new)
    newly_declined = [
        {"operation": op, "type": t} for (op, t) in sorted(ca) if ca[op, t] and cb.get((op, t)) is False
    ]
    newly_claimed = [
        {"operation": op, "type": t} for (op, t) in sorted(cb) if cb[op, t] and ca.get((op, t)) is False
    ]
    moved = [
        {"requirement": rid, "old": old["requirements"].get(rid, {}).get("verdict"), "new": r["verdict"]}
        for rid, r in new["requirements"].items()
        if old["requirements"].get(rid, {}).get("verdict") != r["verdict"]
    ]
    mlts = _mlts_changes(_mlts(old), _mlts(new), latency_threshold)
    regressions = {
        "new_failures": len(changes["new_failures"]),
        "requirements_now_failing": sum(1 for m in moved if m["new"] == "FAIL"),
        "newly_declined": len(newly_declined),
        "mlts_worse": sum(1 for m in mlts if m["worse"]),
    }
    return {
        "old": {
            "driver": old["driver"].get("spec"),
            "version": old["driver"].get("version_string"),
            "verdict": old["verdict"]["overall"],
        },
        "new": {
            "driver": new["driver"].get("spec"),
            "version": new["driver"].get("version_string"),
            "verdict": new["verdict"]["overall"],
        },
        "plan": new["plan"]["name"],
        **changes,
        "newly_declined": newly_declined,
        "newly_claimed": newly_claimed,
        "requirements_moved": moved,
        "mlts": mlts,
        "latency_threshold": latency_threshold,
        "regressions": regressions,
        "regressed": any(regressions.values()),
    }


def _mlts_changes(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], threshold: float
) -> list[dict[str, Any]]:
    out = []
    for model in sorted(old.keys() & new.keys()):
        o, n = old[model], new[model]
        notes, worse = [], False
        if o.get("status") != n.get("status"):
            notes.append(f"status {o.get('status')} -> {n.get('status')}")
            worse |= n.get("status") in FAILING and o.get("status") not in FAILING
        for key in ("top1", "agreement"):
            x, y = o.get(key), n.get(key)
            if isinstance(x, int | float) and isinstance(y, int | float) and x != y:
                notes.append(f"{key} {x:.4g} -> {y:.4g}")
                worse |= y < x
        x, y = o.get("p50_ms"), n.get("p50_ms")
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0:
            ratio = y / x
            if ratio > 1 + threshold or ratio < 1 / (1 + threshold):
                notes.append(f"median latency {x:.4g} -> {y:.4g} ms ({ratio:.2f}x)")
                worse |= ratio > 1 + threshold
        if notes:
            out.append({"model": model, "changes": notes, "worse": worse})
    return out


def text(result: dict[str, Any], limit: int = 50) -> str:
    """The diff for a terminal."""
    o, n = result["old"], result["new"]
    lines = [
        f"plan {result['plan']}: {o['driver']} ({o['version']}) {o['verdict']} -> "
        f"{n['driver']} ({n['version']}) {n['verdict']}"
    ]

    def section(title: str, items: list[str]) -> None:
        if not items:
            return
        lines.append(f"{title} ({len(items)}):")
        lines.extend(f"  {item}" for item in items[:limit])
        if len(items) > limit:
            lines.append(f"  ... and {len(items) - limit} more")

    section(
        "NEW FAILURES",
        [f"{t['id']}: {t['old'] or 'no outcome'} -> {t['new']}" for t in result["new_failures"]],
    )
    section("fixed", [f"{t['id']}: {t['old']} -> {t['new']}" for t in result["fixes"]])
    section(
        "requirement verdicts moved",
        [f"{m['requirement']}: {m['old']} -> {m['new']}" for m in result["requirements_moved"]],
    )
    section("NEWLY DECLINED operations", [f"{c['operation']} {c['type']}" for c in result["newly_declined"]])
    section("newly claimed operations", [f"{c['operation']} {c['type']}" for c in result["newly_claimed"]])
    section(
        "MLTS",
        [f"{'WORSE ' if m['worse'] else ''}{m['model']}: {'; '.join(m['changes'])}" for m in result["mlts"]],
    )
    section(
        "other status changes",
        [
            f"{t['id']}: {t['old'] or 'no outcome'} -> {t['new'] or 'no outcome'}"
            for t in result["other_changes"]
        ],
    )
    r = result["regressions"]
    lines.append(
        "REGRESSED: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in r.items() if v)
        if result["regressed"]
        else "no regression"
    )
    return "\n".join(lines)
