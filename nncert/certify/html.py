"""report.html: one self-contained page (no network, no script) for a certification reviewer,
rendered from report.json: the verdict first, then the requirement traceability matrix with
drill-down to tests, the operation x type coverage heat map, outcomes per suite, failures with
their reproducers and three-way verdicts, MLTS, fuzzing, waivers, the driver and environment.
Everything wraps within 1280 px: nothing needs horizontal scrolling."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from html import escape
from typing import Any

#: Colours of test statuses and verdicts (colour-blind-safe-ish, with the word always beside).
COLOURS = {
    "PASS": "#2e7d32",
    "XPASS": "#66bb6a",
    "WAIVED": "#f9a825",
    "DECLINED": "#90a4ae",
    "SKIPPED": "#cfd8dc",
    "FAIL": "#c62828",
    "CRASH": "#6a1b9a",
    "HANG": "#ad1457",
    "NO OUTCOME": "#ffffff",
    "NOT TESTED": "#eceff1",
    "NOT APPLICABLE": "#b0bec5",
    "CONFORMANT": "#2e7d32",
    "CONFORMANT WITH WAIVERS": "#f9a825",
    "NOT CONFORMANT": "#c62828",
    "INCOMPLETE": "#546e7a",
    "passed": "#2e7d32",
    "failed": "#c62828",
    "waived": "#f9a825",
    "declined": "#90a4ae",
    "not run": "#ffffff",
}
_ORDER = ("FAIL", "CRASH", "HANG", "WAIVED", "XPASS", "PASS", "DECLINED", "SKIPPED", "NO OUTCOME")
#: Tests listed by name under a requirement, beyond its failing and waived ones (the rest are in
#: report.json and tables/tests.csv).
_LISTED = 40
_FAILURES_LISTED = 300

_CSS = """
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #212121;
       margin: 0 auto; padding: 16px 24px 48px; max-width: 1240px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; }
.verdict { display: inline-block; color: #fff; font-weight: 700; font-size: 20px; padding: 6px 14px;
           border-radius: 6px; margin: 8px 0; }
.badge { display: inline-block; color: #fff; padding: 0 6px; border-radius: 4px; font-size: 12px;
         font-weight: 600; white-space: nowrap; }
.badge.light { color: #212121; border: 1px solid #bbb; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; margin: 6px 0; }
th, td { border: 1px solid #e0e0e0; padding: 3px 6px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f5f5f5; }
code, pre { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap;
            overflow-wrap: anywhere; }
pre { background: #f7f7f7; padding: 6px; margin: 4px 0; max-height: 240px; overflow-y: auto; }
details > summary { cursor: pointer; }
.facts td:first-child { width: 210px; color: #555; }
.muted { color: #666; }
.legend span { margin-right: 12px; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; border: 1px solid #999; margin-right: 4px;
          vertical-align: -1px; }
.heat td { text-align: center; padding: 2px; font-size: 11px; }
.heat td.op { text-align: left; font-size: 12px; }
.heat th { font-size: 11px; padding: 2px; }
ul.tests { margin: 4px 0; padding-left: 18px; max-height: 320px; overflow-y: auto; }
"""


def _badge(word: str | None) -> str:
    word = word or "NO OUTCOME"
    colour = COLOURS.get(word, "#757575")
    light = " light" if colour in ("#ffffff", "#eceff1", "#cfd8dc") else ""
    return f'<span class="badge{light}" style="background:{colour}">{escape(word)}</span>'


def _table(headers: list[str], rows: list[list[str]], widths: list[str] | None = None) -> str:
    cols = "".join(f'<col style="width:{w}">' for w in widths) if widths else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{_badge(s)}&nbsp;{counts[s]}" for s in _ORDER if counts.get(s))


def _header(report: dict[str, Any]) -> str:
    v = report["verdict"]
    driver, env, plan, run = report["driver"], report["environment"], report["plan"], report["run"]
    reasons = "".join(f"<li>{escape(r)}</li>" for r in v["reasons"])
    facts = [
        (
            "driver",
            f"<code>{escape(driver.get('spec', ''))}</code> — "
            f"{escape(str(driver.get('version_string', driver.get('error', ''))))}",
        ),
        ("feature level, type", escape(f"{driver.get('feature_level', '?')}, {driver.get('type', '?')}")),
        (
            "plan",
            f"{escape(plan['name'])} — {escape(plan['description'])} "
            f"<span class='muted'>(sha256 {escape(plan['sha256'][:16])}…)</span>",
        ),
        ("suites", escape(", ".join(plan["suites"]))),
        (
            "run",
            escape(
                f"{run['started']} to {run['finished']} ({run['invocations']} invocation(s), "
                f"{run['jobs']} suite(s) at a time)"
            ),
        ),
        ("nncert", escape(f"{env.get('nncert', '?')} {env.get('nncert_commit') or ''}")),
    ]
    rows = "".join(f"<tr><td>{k}</td><td>{val}</td></tr>" for k, val in facts)
    return (
        f"<h1>nncert certification of <code>{escape(driver.get('spec', ''))}</code></h1>"
        f'<div class="verdict" style="background:{COLOURS[v["overall"]]}">{escape(v["overall"])}</div>'
        f"<ul>{reasons}</ul><p class='muted'>Verdicts follow the written rules of "
        f"docs/certification.md (verdict rules); <code>nncert certify verify DIR</code> re-checks "
        f"them, the manifest and the plan.</p><table class='facts'>{rows}</table>"
    )


def _suite_chart(report: dict[str, Any]) -> str:
    """Outcomes per suite: one horizontal bar per suite, its statuses stacked in proportion."""
    width, bar, label, gap = 1180, 18, 170, 6
    rows = report["suites"]
    height = len(rows) * (bar + gap) + 30
    parts = [f'<svg width="100%" viewBox="0 0 {width} {height}" role="img" aria-label="outcomes per suite">']
    for i, s in enumerate(rows):
        y = 20 + i * (bar + gap)
        total = sum(s["counts"].values()) or 1
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{escape(s["name"])}</text>')
        x = float(label)
        for status in _ORDER:
            n = s["counts"].get(status, 0)
            if not n:
                continue
            w = (width - label - 90) * n / total
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar}" '
                f'fill="{COLOURS[status]}" stroke="#999" stroke-width="0.3">'
                f"<title>{escape(s['name'])}: {n} {status}</title></rect>"
            )
            x += w
        parts.append(
            f'<text x="{width - 85}" y="{y + 13}" font-size="12">{sum(s["counts"].values())} tests</text>'
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span><span class="swatch" style="background:{COLOURS[s]}"></span>{s}</span>' for s in _ORDER
    )
    table = _table(
        ["suite", "state", "tests", "outcomes", "time (s)"],
        [
            [
                f"<b>{escape(s['name'])}</b><br><span class='muted'>{escape(s['title'])}</span>",
                escape(s["state"])
                + (
                    f"<br><span class='muted'>{escape(s['message'])}</span>"
                    if s["state"] != "finished"
                    else ""
                ),
                str(s["tests"]),
                _counts(s["counts"]),
                f"{s['duration']:.1f}",
            ]
            for s in rows
        ],
        ["26%", "20%", "7%", "39%", "8%"],
    )
    return f"<h2>Outcomes per suite</h2>{''.join(parts)}<div class='legend'>{legend}</div>{table}"


def _requirements(report: dict[str, Any]) -> str:
    by_id = {t["id"]: t for t in report["tests"]}
    rows = []
    for rid, r in report["requirements"].items():
        tests = [by_id[i] for i in r["tests"] if i in by_id]
        notable = [t for t in tests if t["status"] not in ("PASS", "DECLINED", "SKIPPED")]
        others = [t for t in tests if t["status"] in ("PASS", "DECLINED", "SKIPPED")]
        items = "".join(f"<li>{_badge(t['status'])} <code>{escape(t['id'])}</code></li>" for t in notable)
        items += "".join(
            f"<li>{_badge(t['status'])} <code>{escape(t['id'])}</code></li>" for t in others[:_LISTED]
        )
        more = len(others) - _LISTED
        if more > 0:
            items += f"<li class='muted'>… and {more} more (report.json, tables/tests.csv)</li>"
        drill = (
            f"<details><summary>{len(tests)} tests</summary><ul class='tests'>{items}</ul></details>"
            if tests
            else "<span class='muted'>no test in this plan</span>"
        )
        rows.append([f"<b>{rid}</b>", escape(r["title"]), _badge(r["verdict"]), _counts(r["counts"]), drill])
    return (
        "<h2>Requirements</h2><p class='muted'>Each requirement of docs/requirements.md, its verdict "
        "and the tests behind it (open a row).</p>"
        + _table(
            ["ID", "requirement", "verdict", "outcomes", "tests"], rows, ["7%", "30%", "13%", "25%", "25%"]
        )
    )


def _coverage(report: dict[str, Any]) -> str:
    cells = report["coverage"]
    if not cells:
        return ""
    types = sorted({c["type"] for c in cells})
    by_op: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for c in cells:
        by_op[c["operation"]][c["type"]] = c
    head = "".join(f"<th>{escape(t)}</th>" for t in types)
    body = []
    for op in sorted(by_op):
        tds = []
        for t in types:
            c = by_op[op].get(t)
            if c is None:
                tds.append("<td></td>")
                continue
            tip = f"{op} {t}: {c['state']}; " + ", ".join(f"{n} {s}" for s, n in c["counts"].items())
            if c["declined_reason"]:
                tip += f"; declined: {c['declined_reason']}"
            mark = {"passed": "✓", "failed": "✗", "waived": "W", "declined": "–", "not run": "?"}[c["state"]]
            colour = COLOURS[c["state"]]
            text = "#fff" if c["state"] in ("passed", "failed") else "#212121"
            tds.append(f'<td style="background:{colour};color:{text}" title="{escape(tip)}">{mark}</td>')
        body.append(f"<tr><td class='op'>{escape(op)}</td>{''.join(tds)}</tr>")
    tally = Counter(c["state"] for c in cells)
    legend = "".join(
        f'<span><span class="swatch" style="background:{COLOURS[s]}"></span>{s} {tally[s]}</span>'
        for s in ("passed", "failed", "waived", "declined", "not run")
    )
    declined = sorted(
        {(c["operation"], c["type"], c["declined_reason"]) for c in cells if c["state"] == "declined"}
    )
    declined_list = "".join(
        f"<li><code>{escape(o)}</code> {escape(t)}: {escape(r)}</li>" for o, t, r in declined
    )
    return (
        f"<h2>Operation × type coverage</h2><div class='legend'>{legend}</div>"
        f"<p class='muted'>Per-operation tests of each catalogue operation and type variant; hover a cell "
        f"for its counts and the driver's reason for a decline.</p>"
        f"<table class='heat'><colgroup><col style='width:24%'></colgroup><thead><tr><th>operation</th>"
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        + (
            f"<details><summary>{len(declined)} declined operation × type pairs, with the driver's reasons"
            f"</summary><ul class='tests'>{declined_list}</ul></details>"
            if declined
            else ""
        )
    )


def _failures(report: dict[str, Any]) -> str:
    failing = [t for t in report["tests"] if t["status"] in ("FAIL", "CRASH", "HANG")]
    if not failing:
        return "<h2>Failures</h2><p>None.</p>"
    items = []
    for t in failing[:_FAILURES_LISTED]:
        verdict = f"<div><b>three-way:</b> {escape(t['verdict'])}</div>" if t.get("verdict") else ""
        detail = (
            f"<details><summary>output of the suite's process</summary><pre>{escape(t['detail'])}</pre>"
            f"</details>"
            if t.get("detail")
            else ""
        )
        items.append(
            f"<li>{_badge(t['status'])} <code>{escape(t['id'])}</code> "
            f"<span class='muted'>[{escape(', '.join(t['req']))}]</span>"
            f"<pre>{escape(t.get('message', ''))}</pre>{verdict}"
            f"<div>reproduce: <code>{escape(t.get('reproduce', ''))}</code></div>{detail}</li>"
        )
    more = len(failing) - _FAILURES_LISTED
    tail = (
        f"<p class='muted'>… and {more} more failures in report.json and tables/tests.csv.</p>"
        if more > 0
        else ""
    )
    return f"<h2>Failures ({len(failing)})</h2><ol>{''.join(items)}</ol>{tail}"


def _number(value: Any, digits: int = 3) -> str:
    return (
        f"{value:.{digits}g}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else escape(str(value))
        if value not in (None, "")
        else ""
    )


def _mlts(report: dict[str, Any]) -> str:
    rows = report["mlts"]
    if not rows:
        return ""
    chart = _mlts_chart(rows)
    table = _table(
        ["model", "status", "samples", "top-1 (baseline)", "agreement", "p50 ms (baseline)"],
        [
            [
                escape(str(r.get("model", r["test"]))),
                _badge(r["status"]) + " " + _badge(r.get("result")),
                _number(r.get("samples")),
                f"{_number(r.get('top1'))} ({_number(r.get('baseline_top1'))})",
                _number(r.get("agreement")),
                f"{_number(r.get('p50_ms'))} ({_number(r.get('baseline_p50_ms'))})",
            ]
            for r in rows
        ],
        ["28%", "20%", "9%", "15%", "11%", "17%"],
    )
    return f"<h2>MLTS: real models against the LiteRT CPU baseline</h2>{chart}{table}"


def _mlts_chart(rows: list[dict[str, Any]]) -> str:
    """Latency of the driver relative to the baseline per model (log scale, 1x marked)."""
    import math

    data = [(str(r.get("model", "")), r.get("p50_ms"), r.get("baseline_p50_ms")) for r in rows]
    data = [
        (m, d / b) for m, d, b in data if isinstance(d, int | float) and isinstance(b, int | float) and b > 0
    ]
    if not data:
        return ""
    width, bar, label = 1180, 14, 230
    lo = min(0.5, *(r for _, r in data))
    hi = max(2.0, *(r for _, r in data))
    span = math.log10(hi) - math.log10(lo)

    def x(ratio: float) -> float:
        return label + (width - label - 70) * (math.log10(ratio) - math.log10(lo)) / span

    height = len(data) * (bar + 4) + 24
    parts = [f'<svg width="100%" viewBox="0 0 {width} {height}" role="img" aria-label="latency ratio">']
    one = x(1.0)
    for i, (model, ratio) in enumerate(data):
        y = 4 + i * (bar + 4)
        colour = "#2e7d32" if ratio <= 1.0 else "#ef6c00"
        x0, x1 = sorted((one, x(ratio)))
        parts.append(
            f'<text x="0" y="{y + 11}" font-size="11">{escape(model)}</text>'
            f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="{bar}" fill="{colour}">'
            f"<title>{escape(model)}: {ratio:.2f}x the baseline's median latency</title></rect>"
            f'<text x="{x1 + 4:.1f}" y="{y + 11}" font-size="11">{ratio:.2f}x</text>'
        )
    parts.append(
        f'<line x1="{one:.1f}" x2="{one:.1f}" y1="0" y2="{height - 16}" stroke="#333"/>'
        f'<text x="{one - 20:.1f}" y="{height - 3}" font-size="11">1x baseline</text></svg>'
    )
    return (
        "<p class='muted'>Median latency of the driver over the baseline's (log scale; left of the line is "
        "faster).</p>" + "".join(parts)
    )


def _fuzz(report: dict[str, Any]) -> str:
    rows = report["fuzz"]
    if not rows:
        return ""
    out = []
    for r in rows:
        findings = "".join(
            f"<li>{'KNOWN ' if f.get('known') else ''}<code>{escape(f['key'])}</code> {escape(f['message'])}"
            f"<br>replay: <code>{escape(str(f.get('command')))}</code></li>"
            for f in r.get("findings", [])
        )
        out.append(
            [
                escape(r["target"]),
                _badge(r["status"]),
                _number(r.get("execs"), 6),
                _number(r.get("seconds")),
                f"<ul>{findings}</ul>" if findings else "none",
            ]
        )
    return "<h2>Fuzzing</h2>" + _table(
        ["target", "status", "executions", "seconds", "findings"], out, ["16%", "10%", "12%", "9%", "53%"]
    )


def _waivers(report: dict[str, Any]) -> str:
    parts = ["<h2>Waivers</h2>"]
    if not report["waivers"] and not report["stale_waivers"] and not report["expectations_not_applied"]:
        return "<h2>Waivers</h2><p>None: no known discrepancy was needed.</p>"
    for title, entries in (
        ("Known discrepancies that waived failures", report["waivers"]),
        ("Stale: the waived tests passed (the discrepancy is fixed)", report["stale_waivers"]),
    ):
        if not entries:
            continue
        items = "".join(
            f"<li><b>{escape(e['source'])}</b>: {escape(e['reason'])}"
            + (f"<br>magnitude: {escape(e['magnitude'])}" if e.get("magnitude") else "")
            + (f"<br>agrees with: {escape(e['agrees_with'])}" if e.get("agrees_with") else "")
            + (f"<br>{escape(e['fixed'])}" if e.get("fixed") else "")
            + (f"<br>reproduce: <code>{escape(e['reproduce'])}</code>" if e.get("reproduce") else "")
            + f"<details><summary>{len(e['tests'])} tests</summary><ul class='tests'>"
            + "".join(f"<li><code>{escape(t)}</code></li>" for t in e["tests"])
            + "</ul></details></li>"
            for e in entries
        )
        parts.append(f"<h3>{title}</h3><ul>{items}</ul>")
    if report["expectations_not_applied"]:
        items = "".join(
            f"<li><b>{escape(e['source'])}</b>: {escape(e['reason'])}<br>"
            f"<span class='muted'>not applied: {escape(e['why'])}</span></li>"
            for e in report["expectations_not_applied"]
        )
        parts.append(f"<h3>Expectations not applied to this driver and runtime</h3><ul>{items}</ul>")
    return "".join(parts)


def _environment(report: dict[str, Any]) -> str:
    env = report["environment"]
    packages = ", ".join(f"{k} {v}" for k, v in env.get("packages", {}).items() if v)
    rows = [
        ("Python", f"{env.get('python', '')} ({env.get('python_implementation', '')})"),
        ("CPU", f"{env.get('cpu', '')} ({env.get('cpu_count', '?')} cores, {env.get('machine', '')})"),
        ("OS", env.get("os", "")),
        ("packages", packages),
    ]
    table = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    driver = json.dumps(report["driver"], indent=1)
    changes = ""
    if report.get("environment_changes"):
        changes = (
            "<p><b>The environment changed between invocations of this run</b> (a resume on another "
            "machine or with other packages); see report.json.</p>"
        )
    return (
        f"<h2>Driver and environment</h2>{changes}<table class='facts'>{table}</table>"
        f"<details><summary>driver identity and capabilities</summary><pre>{escape(driver)}</pre></details>"
    )


def render(report: dict[str, Any]) -> str:
    title = f"nncert certification: {report['driver'].get('spec', '')}: {report['verdict']['overall']}"
    body = "".join(
        [
            _header(report),
            _requirements(report),
            _coverage(report),
            _suite_chart(report),
            _failures(report),
            _mlts(report),
            _fuzz(report),
            _waivers(report),
            _environment(report),
        ]
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{escape(title)}</title>"
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )
