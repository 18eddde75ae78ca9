"""The written rules that turn test outcomes into verdicts (docs/certification.md, "Verdict
rules"). The report applies them and ``nncert certify verify`` applies them again: a report
whose verdicts do not follow from its outcomes has been edited."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from nncert.certify.journal import FAILING

CONFORMANT = "CONFORMANT"
WITH_WAIVERS = "CONFORMANT WITH WAIVERS"
NOT_CONFORMANT = "NOT CONFORMANT"
INCOMPLETE = "INCOMPLETE"
#: ``nncert certify``'s exit status for each overall verdict.
EXIT_STATUS = {CONFORMANT: 0, WITH_WAIVERS: 0, NOT_CONFORMANT: 1, INCOMPLETE: 3}
REQUIREMENT_VERDICTS = ("PASS", "FAIL", "WAIVED", "NOT TESTED", "NOT APPLICABLE")


def requirement_verdict(statuses: Counter[str]) -> str:
    """A requirement's verdict from the statuses of the tests that name it:
    FAIL if any failed, crashed or hung; else WAIVED if any failure was waived by an
    expectation; else PASS if any passed (an XPASS passed: its waiver is stale); else NOT
    APPLICABLE if the driver declined what they needed; else NOT TESTED (no test, or none ran)."""
    if any(statuses[s] for s in FAILING):
        return "FAIL"
    if statuses["WAIVED"]:
        return "WAIVED"
    if statuses["PASS"] or statuses["XPASS"]:
        return "PASS"
    if statuses["DECLINED"]:
        return "NOT APPLICABLE"
    return "NOT TESTED"


def requirement_verdicts(
    requirements: Iterable[str], tests: Iterable[tuple[list[str], str | None]]
) -> dict[str, tuple[str, Counter[str]]]:
    """Every requirement's verdict and status counts, from (requirement IDs, status) per test
    (status None: the test has no outcome)."""
    counts: dict[str, Counter[str]] = {rid: Counter() for rid in requirements}
    for req, status in tests:
        for rid in req:
            if rid in counts:
                counts[rid][status or "NO OUTCOME"] += 1
    return {rid: (requirement_verdict(c), c) for rid, c in counts.items()}


def overall_verdict(
    verdicts: dict[str, str], missing: int, suite_problems: list[str]
) -> tuple[str, list[str]]:
    """The run's verdict and why: NOT CONFORMANT if a requirement FAILed (no later outcome can
    undo a failure); else INCOMPLETE if a test of the plan has no outcome or a suite could not
    run to its end; else CONFORMANT WITH WAIVERS if a requirement is WAIVED; else CONFORMANT.
    Requirements no test of the plan checks are NOT TESTED and listed, without changing it."""
    failed = [rid for rid, v in verdicts.items() if v == "FAIL"]
    waived = [rid for rid, v in verdicts.items() if v == "WAIVED"]
    untested = [rid for rid, v in verdicts.items() if v == "NOT TESTED"]
    reasons = []
    if failed:
        reasons.append(f"requirements failed: {', '.join(failed)}")
    if missing:
        reasons.append(f"{missing} tests of the plan have no outcome")
    reasons.extend(suite_problems)
    if waived:
        reasons.append(f"requirements passed with waivers: {', '.join(waived)}")
    if untested:
        reasons.append(f"requirements no test of this run checked: {', '.join(untested)}")
    if failed:
        return NOT_CONFORMANT, reasons
    if missing or suite_problems:
        return INCOMPLETE, reasons
    return (WITH_WAIVERS if waived else CONFORMANT), reasons
