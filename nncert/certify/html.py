"""report.html: one self-contained page (no network, no script) for a certification reviewer,
rendered from report.json and nothing else: the verdict and a summary strip first, then the
requirement traceability matrix with drill-down to tests, outcomes per suite, failures with
their reproducers and N-way verdicts, waivers, the operation x type coverage heat map, MLTS
accuracy and latency, fuzzing, the driver and environment. Everything wraps within 1280 px:
nothing needs horizontal scrolling. Every string that comes from a report (test ids, messages,
reasons: a driver writes them) is escaped."""

from __future__ import annotations

import json
import math
import shlex
from collections import Counter, defaultdict
from datetime import datetime
from html import escape
from typing import Any

#: Colours of test statuses and verdicts (the word is always beside the colour).
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
#: Backgrounds that need dark text.
_LIGHT = {"#ffffff", "#eceff1", "#cfd8dc", "#f9a825", "#66bb6a", "#b0bec5", "#90a4ae"}
_ORDER = ("FAIL", "CRASH", "HANG", "WAIVED", "XPASS", "PASS", "DECLINED", "SKIPPED", "NO OUTCOME")
_FAILING = ("CRASH", "HANG", "FAIL")  # the order failures are listed in: the worst first
_REQUIREMENT_ORDER = ("FAIL", "WAIVED", "PASS", "NOT APPLICABLE", "NOT TESTED")
_CELL_ORDER = ("failed", "waived", "not run", "passed", "declined")  # a heat-map cell shows the first
_CELL_MARK = {"passed": "✓", "failed": "✗", "waived": "W", "declined": "–", "not run": "?"}
#: Tests listed by name under a requirement: its failing and waived ones, then this many more
#: (all of them are in report.json and tables/tests.csv).
_LISTED = 40
_NOTABLE_LISTED = 200
_FAILURES_LISTED = 300
#: A verdict reason naming more requirements than this, none of them tested, is folded (failed ones
#: are always in sight).
_REASON_IDS = 8

_CSS = """
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #212121;
       margin: 0 auto; padding: 12px 24px 48px; max-width: 1240px; }
h1 { font-size: 22px; margin: 6px 0 2px; }
h1 code { font-size: 20px; }
h2 { font-size: 18px; margin: 30px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 2px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
a { color: #1565c0; text-decoration: none; }
a:hover { text-decoration: underline; }
.sub { color: #555; margin: 0 0 8px; }
.top { display: flex; gap: 16px; align-items: flex-start; margin: 8px 0; }
.verdict { color: #fff; font-weight: 700; font-size: 22px; padding: 8px 16px; border-radius: 6px;
           white-space: nowrap; }
.verdict.light { color: #212121; }
.reasons { margin: 0; padding-left: 18px; flex: 1; min-width: 0; }
.reasons li { margin: 2px 0; }
.reasons details summary { color: #333; }
.strip { display: flex; flex-wrap: wrap; gap: 8px; margin: 10px 0; }
.tile { border: 1px solid #ddd; border-top: 4px solid #9e9e9e; border-radius: 4px; padding: 3px 8px;
        min-width: 70px; }
.tile b { display: block; font-size: 18px; }
.tile span { color: #555; font-size: 12px; white-space: nowrap; }
nav { font-size: 13px; margin: 6px 0 0; }
nav a { margin-right: 14px; white-space: nowrap; }
.badge { display: inline-block; color: #fff; padding: 0 6px; border-radius: 4px; font-size: 12px;
         font-weight: 600; white-space: nowrap; }
.badge.light { color: #212121; border: 1px solid #bbb; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; margin: 6px 0; }
th, td { border: 1px solid #e0e0e0; padding: 3px 6px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
th { background: #f5f5f5; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap;
            overflow-wrap: anywhere; }
pre { background: #f7f7f7; padding: 6px; margin: 4px 0; max-height: 240px; overflow-y: auto; }
details > summary { cursor: pointer; }
.facts td:first-child { width: 190px; color: #555; }
.muted { color: #666; }
.nowrap { white-space: nowrap; }
.small { font-size: 12px; }
.legend { font-size: 12px; margin: 4px 0; }
.legend span { margin-right: 12px; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; border: 1px solid #999; margin-right: 4px;
          vertical-align: -1px; }
.bar { display: flex; height: 14px; border: 1px solid #bbb; background: #fafafa; margin: 3px 0; }
.bar span { display: block; height: 100%; }
.bar span.min { min-width: 3px; }
.bar.inline { display: inline-flex; width: 64px; margin: 0 6px 0 0; vertical-align: -2px; }
ul.tests { margin: 4px 0; padding-left: 18px; max-height: 320px; overflow-y: auto; }
ul.tests li { overflow-wrap: anywhere; }
ul.tests li.file { list-style: none; margin: 4px 0 0 -14px; color: #555; font-size: 12px; }
tr.family td { background: #fafafa; font-weight: 600; color: #555; font-size: 12px; }
.failures { list-style: none; padding: 0; margin: 0; }
.failures > li { font-size: 13px; border: 1px solid #e0e0e0; border-left: 4px solid #c62828;
                 border-radius: 3px;
                 padding: 3px 8px; margin: 4px 0; }
.failures .msg { min-width: 0; flex: 1; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace;
                 white-space: nowrap;
                 overflow: hidden; text-overflow: ellipsis; color: #333; }
.failures .repro { display: block; background: #f3f6fb; padding: 1px 6px; margin: 2px 0; }
.failures summary { display: flex; }
.failures summary::before { content: "▸"; margin-right: 4px; color: #666; }
.failures details[open] summary::before { content: "▾"; }
.odd { font-weight: 700; }
.heat-wrap { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
/* The declined list scrolls beside the heat map, as tall as the map and no taller. */
.heat-wrap .side { flex: 1 1 260px; min-width: 0; align-self: stretch; position: relative; min-height: 320px;
                   font-size: 13px; }
.heat-wrap .side h3 { margin-top: 0; }
.heat-wrap .side ul.tests { position: absolute; top: 28px; bottom: 0; left: 0; right: 0; max-height: none;
                            margin: 0; }
.heat { width: auto; table-layout: auto; margin: 0; }
.heat td { width: 28px; height: 18px; padding: 0; text-align: center; font-size: 11px; line-height: 18px; }
.heat td.op { width: 200px; max-width: 200px; text-align: left; padding: 0 4px; font-size: 12px;
              white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.heat th { padding: 2px 0; font-size: 11px; font-weight: 500; vertical-align: bottom; }
.heat th.vt { height: 132px; }
.heat th.vt div { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap;
                  margin: 0 auto; }
.heat td.part { background-image: linear-gradient(135deg, transparent 62%, #90a4ae 62%); }
.charts { display: flex; flex-wrap: wrap; gap: 24px; }
.charts > div { flex: 1 1 480px; min-width: 0; }
.cols { columns: 3; column-gap: 24px; }
.cols div { break-inside: avoid; }
"""


def _badge(word: str | None, colour: str | None = None) -> str:
    word = word or "NO OUTCOME"
    colour = colour or COLOURS.get(word, "#757575")
    light = " light" if colour in _LIGHT else ""
    return f'<span class="badge{light}" style="background:{colour}">{escape(word)}</span>'


def _table(
    headers: list[str], rows: list[list[str]], widths: list[str] | None = None, numeric: tuple[int, ...] = ()
) -> str:
    """A table of HTML cells (already escaped); ``numeric`` columns are right-aligned."""
    cols = "".join(f'<col style="width:{w}">' for w in widths) if widths else ""
    head = "".join(
        f"<th{' class=num' if i in numeric else ''}>{escape(h)}</th>" for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i in numeric else ''}>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{_badge(s)}&nbsp;{counts[s]:,}" for s in _ORDER if counts.get(s))


def _bar(counts: dict[str, int], inline: bool = False) -> str:
    """A stacked bar of ``counts`` in proportion; a failing status never shrinks out of sight."""
    total = sum(counts.values())
    if not total:
        return ""
    parts = []
    for s in _ORDER:
        n = counts.get(s, 0)
        if n:
            minimum = " class=min" if s in (*_FAILING, "WAIVED") else ""
            parts.append(
                f'<span{minimum} style="flex:{n} 1 0;background:{COLOURS[s]}" title="{n:,} {s}"></span>'
            )
    return f"<div class='bar{' inline' if inline else ''}'>{''.join(parts)}</div>"


def _legend(words: list[str], counts: dict[str, int] | None = None) -> str:
    items = "".join(
        f'<span><span class="swatch" style="background:{COLOURS[w]}"></span>{escape(w)}'
        + (f" {counts.get(w, 0):,}" if counts is not None else "")
        + "</span>"
        for w in words
    )
    return f"<div class='legend'>{items}</div>"


def _number(value: Any, digits: int = 3) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return escape(str(value))


def _percent(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, int | float) and not isinstance(value, bool) else "—"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _wall_time(run: dict[str, Any]) -> float | None:
    try:
        start, end = (datetime.strptime(run[k], "%Y-%m-%dT%H:%M:%S%z") for k in ("started", "finished"))
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()


class _Page:
    """What several sections share: the tests by id, and the anchors of the listed failures."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report
        self.tests = report["tests"]
        self.by_id = {t["id"]: t for t in self.tests}
        self.statuses = Counter(t["status"] or "NO OUTCOME" for t in self.tests)
        # By suite in the plan's order, the worst first within each.
        suites = {s["name"]: n for n, s in enumerate(report["suites"])}
        failing = [t for t in self.tests if t["status"] in _FAILING]
        failing.sort(key=lambda t: (suites.get(t["suite"], len(suites)), _FAILING.index(t["status"])))
        self.failing = failing
        self.anchor = {id(t): f"f{n}" for n, t in enumerate(failing[:_FAILURES_LISTED], 1)}

    def test_link(self, t: dict[str, Any], label: str | None = None) -> str:
        code = f"<code>{escape(t['id'] if label is None else label)}</code>"
        anchor = self.anchor.get(id(t))
        return f"<a href='#{anchor}'>{code}</a>" if anchor else code


def _req_links(ids: list[str], known: dict[str, Any]) -> str:
    return ", ".join(f"<a href='#req-{escape(r)}'>{escape(r)}</a>" if r in known else escape(r) for r in ids)


def _reasons(report: dict[str, Any]) -> str:
    """The verdict's reasons: requirement lists linked to the matrix (a long list folded), and
    suites that ended the same way named in one line."""
    requirements = report["requirements"]
    items: list[str | tuple[str]] = []  # a 1-tuple: the suites that ended this way, named once known
    grouped: dict[str, list[str]] = {}
    for text in report["verdict"]["reasons"]:
        head, sep, tail = text.partition(": ")
        ids = tail.split(", ") if sep else []
        if ids and all(i in requirements for i in ids):
            links = _req_links(ids, requirements)
            if len(ids) > _REASON_IDS and all(requirements[i]["verdict"] == "NOT TESTED" for i in ids):
                items.append(
                    f"<li><details><summary>{escape(head)} ({len(ids)})</summary>{links}</details></li>"
                )
            else:
                items.append(f"<li>{escape(head)}: {links}</li>")
            continue
        name, _, rest = text.removeprefix("suite ").partition(" ")
        if text.startswith("suite ") and rest:
            if rest not in grouped:
                grouped[rest] = []
                items.append((rest,))
            grouped[rest].append(name)
            continue
        items.append(f"<li>{escape(text)}</li>")
    out = []
    for item in items:
        if isinstance(item, tuple):
            names = grouped[item[0]]
            word = "suite" if len(names) == 1 else "suites"
            out.append(f"<li>{word} {escape(', '.join(names))} {escape(item[0])}</li>")
        else:
            out.append(item)
    return f"<ul class='reasons'>{''.join(out)}</ul>"


def _header(page: _Page) -> str:
    report = page.report
    v = report["verdict"]
    driver, env, plan, run = report["driver"], report["environment"], report["plan"], report["run"]
    colour = COLOURS.get(v["overall"], "#757575")
    light = " light" if colour in _LIGHT else ""
    version = driver.get("version_string", driver.get("error", ""))
    tiles = [(f"{len(page.tests):,}", "tests", "#616161")]
    tiles += [
        (f"{page.statuses.get(s, 0):,}", s, COLOURS[s])
        for s in _ORDER
        if page.statuses.get(s) or s in ("PASS", "FAIL")
    ]
    suites = report["suites"]
    finished = sum(1 for s in suites if s["state"] == "finished")
    tiles.append(
        (f"{finished}/{len(suites)}", "suites finished", "#2e7d32" if finished == len(suites) else "#546e7a")
    )
    verdicts = Counter(r["verdict"] for r in report["requirements"].values())
    tiles.append(
        (
            f"{verdicts['PASS'] + verdicts['WAIVED']}/{len(report['requirements'])}",
            "requirements pass",
            COLOURS["FAIL"] if verdicts["FAIL"] else COLOURS["PASS"],
        )
    )
    wall = _wall_time(run)
    in_tests = _duration(sum(s["duration"] for s in suites))
    tiles.append(
        (_duration(wall), f"wall time; {in_tests} in tests", "#1565c0")
        if wall is not None
        else (in_tests, "time in tests", "#1565c0")
    )
    strip = "".join(
        f'<div class="tile" style="border-top-color:{"#bdbdbd" if c == "#ffffff" else c}">'
        f"<b>{escape(n)}</b><span>{escape(label)}</span></div>"
        for n, label, c in tiles
    )
    sections = [
        ("requirements", "Requirements"),
        ("suites", "Suites"),
        ("failures", f"Failures ({len(page.failing):,})"),
        ("waivers", "Waivers"),
        ("coverage", "Operation × type"),
        ("mlts", "MLTS"),
        ("fuzz", "Fuzzing"),
        ("environment", "Driver and environment"),
    ]
    nav = "".join(f"<a href='#{a}'>{escape(t)}</a>" for a, t in sections)
    facts = [
        (
            "driver",
            f"<code>{escape(driver.get('spec', ''))}</code> — {escape(str(version))}; "
            + escape(f"{driver.get('type', '?')}, feature level {driver.get('feature_level', '?')}"),
        ),
        (
            "plan",
            f"<b>{escape(plan['name'])}</b> — {escape(plan['description'])} "
            f"<span class='muted small'>sha256 <code>{escape(plan['sha256'])}</code></span>",
        ),
        (
            "run",
            escape(
                f"{run['started']} to {run['finished']}; {run['invocations']} invocation(s), "
                f"{run['jobs']} suite(s) at a time"
            )
            + (
                "; expectations " + ", ".join(f"<code>{escape(e)}</code>" for e in run["expectations"])
                if run.get("expectations")
                else ""
            ),
        ),
        ("nncert", escape(f"{env.get('nncert', run.get('nncert', '?'))} {env.get('nncert_commit') or ''}")),
    ]
    facts += _shard_facts(report)
    rows = "".join(f"<tr><td>{k}</td><td>{val}</td></tr>" for k, val in facts)
    return (
        f"<h1>nncert certification of <code>{escape(driver.get('spec', ''))}</code></h1>"
        f"<p class='sub'>{escape(str(version))} · plan {escape(plan['name'])} · "
        f"{escape(str(run['finished']))}</p>"
        f'<div class="top"><div class="verdict{light}" style="background:{colour}">'
        f"{escape(v['overall'])}</div>"
        f"{_reasons(report)}</div>"
        f"<div class='strip'>{strip}</div>"
        f"<p class='muted small'>The verdicts follow the written rules of docs/certification.md (verdict "
        f"rules); <code>nncert certify verify DIR</code> re-checks them, the manifest and the plan.</p>"
        f"<table class='facts'>{rows}</table><nav>{nav}</nav>"
    )


def _test_list(page: _Page, tests: list[dict[str, Any]]) -> str:
    """Tests with their statuses, under the file each is in (the ids are long: the file once)."""
    out = []
    path = None
    for t in tests:
        file, sep, name = t["id"].partition("::")
        if sep and file != path:
            path = file
            out.append(f"<li class='file'>{escape(file)}</li>")
        out.append(f"<li>{_badge(t['status'])} {page.test_link(t, name if sep else None)}</li>")
    return "".join(out)


def _requirements(page: _Page) -> str:
    report = page.report
    rows = []
    family = ""
    for rid, r in report["requirements"].items():
        prefix = rid.rsplit("-", 1)[0]
        if prefix != family:
            family = prefix
            rows.append(f"<tr class='family'><td colspan='5'>{escape(family)}</td></tr>")
        tests = [page.by_id[i] for i in r["tests"] if i in page.by_id]
        notable = [t for t in tests if t["status"] not in ("PASS", "DECLINED", "SKIPPED")]
        notable.sort(key=lambda t: _ORDER.index(t["status"] or "NO OUTCOME"))
        others = [t for t in tests if t["status"] in ("PASS", "DECLINED", "SKIPPED")]
        items = _test_list(page, notable[:_NOTABLE_LISTED] + others[:_LISTED])
        more = len(tests) - min(len(notable), _NOTABLE_LISTED) - min(len(others), _LISTED)
        if more > 0:
            items += f"<li class='muted'>… and {more:,} more (report.json, tables/tests.csv)</li>"
        drill = (
            f"<details><summary>{len(tests):,} test{'s' if len(tests) != 1 else ''}</summary>"
            f"<ul class='tests'>{items}</ul></details>"
            if tests
            else "<span class='muted'>no test in this run</span>"
        )
        rows.append(
            f"<tr id='req-{escape(rid)}'><td><b>{escape(rid)}</b></td><td>{escape(r['title'])}</td>"
            f"<td>{_badge(r['verdict'])}</td><td>{_bar(r['counts'], inline=True)}{_counts(r['counts'])}</td>"
            f"<td>{drill}</td></tr>"
        )
    verdicts = Counter(r["verdict"] for r in report["requirements"].values())
    tally = " ".join(f"{_badge(v)}&nbsp;{verdicts[v]}" for v in _REQUIREMENT_ORDER if verdicts[v])
    return (
        f"<h2 id='requirements'>Requirements</h2><p>{tally}</p><p class='muted'>Every requirement of "
        f"docs/requirements.md, its verdict, its tests' outcomes, and the tests behind it (open a row; "
        f"failing ones link to their failure below).</p>"
        f"<table><colgroup><col style='width:7%'><col style='width:24%'><col style='width:12%'>"
        f"<col style='width:23%'><col style='width:34%'></colgroup><thead><tr><th>ID</th>"
        f"<th>requirement</th><th>verdict</th><th>outcomes</th><th>tests</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _suites(page: _Page) -> str:
    """Outcomes per suite: a bar per suite, its statuses stacked in proportion, with the counts."""
    rows = []
    present: Counter[str] = Counter()
    for s in page.report["suites"]:
        present.update(s["counts"])
        state = escape(s["state"])
        if s["state"] != "finished":
            state = (
                f"<b style='color:#c62828'>{state}</b><br><span class='muted small'>{escape(s['message'])}"
            )
        starts = (
            f"<br><span class='muted small'>started {s['starts']} times</span>" if s["starts"] > 1 else ""
        )
        rows.append(
            [
                f"<b>{escape(s['name'])}</b><br><span class='muted small'>{escape(s['title'])}</span>",
                state + starts,
                f"{s['tests']:,}",
                _bar(s["counts"]) + _counts(s["counts"]),
                _duration(s["duration"]),
            ]
        )
    return (
        "<h2 id='suites'>Outcomes per suite</h2>"
        + _legend([s for s in _ORDER if present[s]], present)
        + _table(
            ["suite", "state", "tests", "outcomes", "time in tests"],
            rows,
            ["27%", "16%", "8%", "39%", "10%"],
            numeric=(2, 4),
        )
    )


def _three_way(text: str) -> str:
    """An N-way verdict line (or a three-way one, of older reports) with its conclusion (who
    is the odd one out) in bold."""
    body = text.removeprefix("N-way verdict: ").removeprefix("three-way verdict: ")
    said, arrow, conclusion = body.partition(" -> ")
    out = escape(said) + (f" → <span class='odd'>{escape(conclusion)}</span>" if arrow else "")
    return f"<div><b>N-way verdict:</b> {out}</div>"


def _failure(page: _Page, t: dict[str, Any]) -> str:
    """One failure: its test and requirements, the first line of its message (open it for the
    whole message and the suite's output), the N-way verdict, the command that reruns it."""
    message = t.get("message", "").strip()
    first = message.splitlines()[0] if message else ""
    more = f"<pre>{escape(message)}</pre>" if message != first or len(first) > 140 else ""
    if t.get("detail"):
        more += f"<div class='muted small'>the suite's output</div><pre>{escape(t['detail'])}</pre>"
    line = f"<div class='msg'>{escape(first) or '(no message)'}</div>"
    requirements = _req_links(t["req"], page.report["requirements"])
    return (
        f"<li id='{page.anchor[id(t)]}' style='border-left-color:{COLOURS[t['status']]}'>"
        f"{_badge(t['status'])} <code>{escape(t['id'])}</code> <span class='muted small'>{requirements}"
        "</span>"
        + (f"<details><summary>{line}</summary>{more}</details>" if more else line)
        + (_three_way(t["verdict"]) if t.get("verdict") else "")
        + f"<code class='repro'>{escape(t.get('reproduce', ''))}</code>"
        + _standalone(page.report["driver"].get("spec", ""), t["id"]) + "</li>"
    )


#: Runtimes whose failures `nncert repro --standalone` hands over as a directory that runs
#: without nncert, and the tests it writes them of (per-operation cases, random graphs).
STANDALONE_DRIVERS = ("litert", "onnxruntime", "openvino", "iree", "tvm")
STANDALONE_TESTS = ("conformance/test_operations.py::", "conformance/test_execution.py::",
                    "conformance/test_random_graphs.py::")


def _standalone(spec: str, test_id: str) -> str:
    """The command that writes a failure's standalone reproducer, for a runtime's maintainers
    (docs/reproducers.md), where there is one."""
    if spec.split(":", 1)[0] not in STANDALONE_DRIVERS or not test_id.startswith(STANDALONE_TESTS):
        return ""
    command = shlex.join(["nncert", "repro", test_id, "--driver", spec, "--standalone", "repro-DIR"])
    return (f"<div class='muted small'>for the runtime's maintainers, a reproducer without nncert:</div>"
            f"<code class='repro'>{escape(command)}</code>")


def _failures(page: _Page) -> str:
    failing = page.failing
    if not failing:
        return "<h2 id='failures'>Failures</h2><p>None: no test failed, crashed or hung.</p>"
    listed = failing[:_FAILURES_LISTED]
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in listed:
        by_suite[t["suite"]].append(t)
    totals = Counter(t["suite"] for t in failing)
    groups = "".join(
        f"<h3 id='failures-{escape(suite)}'>{escape(suite)} ({totals[suite]:,})</h3>"
        f"<ol class='failures'>{''.join(_failure(page, t) for t in tests)}</ol>"
        for suite, tests in by_suite.items()
    )
    links = ", ".join(
        f"<a href='#failures-{escape(s)}'>{escape(s)}</a> {n:,}" for s, n in totals.items() if s in by_suite
    )
    tail = (
        f"<p class='muted'>… and {len(failing) - len(listed):,} more in report.json and tables/tests.csv.</p>"
        if len(failing) > len(listed)
        else ""
    )
    return (
        f"<h2 id='failures'>Failures ({len(failing):,})</h2>"
        f"<p>{_counts(Counter(t['status'] for t in failing))} — by suite: {links}</p>"
        "<p class='muted'>Crashes and hangs first in each suite. Each failure's command reruns it alone; "
        "where the peer runtimes replayed the case, the N-way verdict says who is the odd one out. "
        "Open a message for the whole of it and the suite's output.</p>"
        f"{groups}{tail}"
    )


def _entry(e: dict[str, Any]) -> str:
    """One expectations entry: its reason and what it says of itself, and the tests it covers."""
    facts = [
        ("magnitude", e.get("magnitude")),
        ("agrees with", e.get("agrees_with")),
        (
            "runtime",
            f"{e['runtime']} {e.get('versions') or ''} (ran {e.get('runtime_version') or '?'})"
            if e.get("runtime")
            else "",
        ),
    ]
    lines = "".join(f"<br><span class='muted'>{k}:</span> {escape(str(v))}" for k, v in facts if v)
    if e.get("fixed"):
        lines += f"<br><b>{escape(e['fixed'])}</b>"
    if e.get("reproduce"):
        lines += f"<br><span class='muted'>reproduce:</span> <code>{escape(e['reproduce'])}</code>"
    tests = e.get("tests", [])
    drill = (
        f"<details><summary>{len(tests):,} test{'s' if len(tests) != 1 else ''}</summary><ul class='tests'>"
        + "".join(f"<li><code>{escape(t)}</code></li>" for t in tests)
        + "</ul></details>"
        if tests
        else ""
    )
    return f"<li><code>{escape(e['source'])}</code>: {escape(e['reason'])}{lines}{drill}</li>"


def _waivers(report: dict[str, Any]) -> str:
    used, stale, not_applied = report["waivers"], report["stale_waivers"], report["expectations_not_applied"]
    if not used and not stale and not not_applied:
        return "<h2 id='waivers'>Waivers</h2><p>None: no known discrepancy was needed.</p>"
    parts = [
        f"<h2 id='waivers'>Waivers ({len(used)} used, {len(stale)} stale, {len(not_applied)} not "
        "applied)</h2>"
    ]
    if used:
        parts.append(
            "<h3>Known discrepancies that waived failures</h3><p class='muted'>Entries of the expectations "
            "files: each failure they cover is WAIVED, and its requirement passes with waivers.</p>"
            f"<ul>{''.join(_entry(e) for e in used)}</ul>"
        )
    if stale:
        parts.append(
            "<h3>Stale waivers: the tests they cover passed</h3><p class='muted'>The discrepancy is gone "
            "(XPASS); the entry should be removed or limited to the releases that have it.</p>"
            f"<ul>{''.join(_entry(e) for e in stale)}</ul>"
        )
    if not_applied:
        items = "".join(
            f"<li><code>{escape(e['source'])}</code>: {escape(e['reason'])}<br>"
            f"<span class='muted'>not applied:</span> {escape(e['why'])}</li>"
            for e in not_applied
        )
        parts.append(f"<h3>Expectations not applied to this driver and runtime</h3><ul>{items}</ul>")
    return "".join(parts)


def _base_type(variant: str) -> str:
    """The operand type of a type variant (``float32-U=int32``: float32)."""
    return variant.split("-", 1)[0]


def _coverage(report: dict[str, Any]) -> str:
    """The heat map: an operation a row, a type a column (its variants folded into the cell,
    which shows the worst of them and lists each in its tooltip); two blocks side by side when
    they fit."""
    cells = report["coverage"]
    if not cells:
        return "<h2 id='coverage'>Operation × type coverage</h2><p>No per-operation test in this plan.</p>"
    types = sorted({_base_type(c["type"]) for c in cells})
    by_op: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for c in cells:
        by_op[c["operation"]][_base_type(c["type"])].append(c)
    ops = sorted(by_op)
    head = "".join(f"<th class='vt'><div>{escape(t)}</div></th>" for t in types)
    rows = []
    for op in ops:
        tds = []
        for ty in types:
            variants = by_op[op].get(ty)
            if not variants:
                tds.append("<td></td>")
                continue
            states = {c["state"] for c in variants}
            state = next(s for s in _CELL_ORDER if s in states)
            tip = [f"{op} {ty}"]
            for c in variants:
                counts = ", ".join(f"{n} {s}" for s, n in c["counts"].items())
                line = f"{c['type']}: {c['state']} ({counts})"
                if c["declined_reason"]:
                    line += f"; declined: {c['declined_reason']}"
                tip.append(line)
            colour = COLOURS[state]
            text = "#fff" if state in ("passed", "failed") else "#212121"
            part = " class='part'" if "declined" in states and state != "declined" else ""
            tds.append(
                f'<td{part} style="background-color:{colour};color:{text}" '
                f'title="{escape(chr(10).join(tip))}">'
                f"{_CELL_MARK[state]}</td>"
            )
        rows.append(f"<tr><td class='op' title='{escape(op)}'>{escape(op)}</td>{''.join(tds)}</tr>")
    blocks = 2 if len(types) * 29 + 210 <= 580 else 1
    per = math.ceil(len(rows) / blocks)
    tables = "".join(
        f"<table class='heat'><thead><tr><th></th>{head}</tr></thead>"
        f"<tbody>{''.join(rows[i : i + per])}</tbody></table>"
        for i in range(0, len(rows), per)
    )
    tally = Counter(c["state"] for c in cells)
    reasons: dict[str, list[str]] = defaultdict(list)
    for c in cells:
        if c["state"] == "declined":
            reasons[c["declined_reason"] or "(no reason given)"].append(f"{c['operation']} {c['type']}")
    declined = "".join(
        f"<li>{escape(reason)}<br><span class='muted small'>{escape(', '.join(pairs))}</span></li>"
        for reason, pairs in sorted(reasons.items(), key=lambda kv: -len(kv[1]))
    )
    side = (
        f"<div class='side'><h3>Declined: {tally['declined']:,} pairs, by the driver's reason</h3>"
        f"<ul class='tests'>{declined}</ul></div>"
        if declined
        else "<div class='side'><h3>Declined</h3><p>No operation × type was declined.</p></div>"
    )
    return (
        "<h2 id='coverage'>Operation × type coverage</h2>"
        + _legend(["passed", "failed", "waived", "declined", "not run"], dict(tally))
        + f"<p class='muted'>{len(ops)} operations × {len(types)} operand types; the counts are of operation "
        f"× type-variant pairs ({len(cells):,}). A cell shows its worst variant; a grey corner: some "
        f"variants declined. Hover a cell for each variant's outcomes and the driver's reason for a "
        "decline.</p>"
        f"<div class='heat-wrap'>{tables}{side}</div>"
    )


def _mark(value: str, mark: Any) -> str:
    """A value with its same / better / worse mark against the baseline."""
    if mark in ("better", "worse"):
        colour = "#2e7d32" if mark == "better" else "#c62828"
        return f"{value} <span class='small' style='color:{colour}'>{escape(mark)}</span>"
    return value


def _outputs(row: dict[str, Any]) -> str:
    """The per-output comparison with the baseline: how many pass, the worst error."""
    outputs = [o for o in row.get("outputs") or [] if isinstance(o, dict)]
    if not outputs:
        return "—"
    passing = sum(1 for o in outputs if o.get("verdict") == "pass")
    steps = [o["max_steps"] for o in outputs if isinstance(o.get("max_steps"), int | float)]
    errors = [o["max_abs_err"] for o in outputs if isinstance(o.get("max_abs_err"), int | float)]
    worst = f"max {max(steps):g} steps" if steps else f"max |err| {max(errors):.2g}" if errors else ""
    failing = "".join(
        f"<br><span style='color:#c62828'>{escape(str(o.get('verdict')))}</span>"
        for o in outputs
        if o.get("verdict") != "pass"
    )
    worst = f"; <span class='nowrap'>{worst}</span>" if worst else ""
    return f"{passing}/{len(outputs)} pass{worst}{failing}"


def _mlts(report: dict[str, Any]) -> str:
    rows = report["mlts"]
    if not rows:
        return "<h2 id='mlts'>MLTS</h2><p>No MLTS model ran in this plan.</p>"
    table_rows = []
    for r in rows:
        tags = ", ".join(x for x in (r.get("task"), "quantised" if r.get("quantised") else "") if x)
        top1 = (
            _mark(f"{_percent(r['top1'])} ({_percent(r.get('baseline_top1'))})", r.get("top1_mark"))
            if "top1" in r
            else "—"
        )
        top5 = (
            _mark(f"{_percent(r['top5'])} ({_percent(r.get('baseline_top5'))})", r.get("top5_mark"))
            if "top5" in r
            else "—"
        )
        latency = (
            f"{_number(r['p50_ms'])} ({_number(r.get('baseline_p50_ms'))})"
            if r.get("p50_ms") is not None
            else "—"
        )
        ratio = (
            _mark(f"{r['latency_ratio']:.2f}×", r.get("latency_mark"))
            if _real(r.get("latency_ratio"))
            else "—"
        )
        compile_ms = r.get("compile_ms") or {}
        reasons = "".join(
            f"<br><span class='muted small'>{escape(str(x))}</span>" for x in r.get("reasons") or []
        )
        table_rows.append(
            [
                f"<b>{escape(str(r.get('model', r['test'])))}</b><br>"
                f"<span class='muted small'>{escape(tags)}</span>",
                _badge(r["status"]) + reasons,
                _number(r.get("samples")),
                top1,
                top5,
                _percent(r["agreement"]) if "agreement" in r else "—",
                _outputs(r),
                latency,
                ratio,
                _number(compile_ms.get("plain")) or "—",
            ]
        )
    table = _table(
        [
            "model",
            "status",
            "samples",
            "top-1 (baseline)",
            "top-5 (baseline)",
            "agreement",
            "outputs vs baseline",
            "p50 ms (baseline)",
            "latency",
            "compile ms",
        ],
        table_rows,
        ["16%", "10%", "7%", "10%", "10%", "9%", "13%", "11%", "7%", "7%"],
        numeric=(2, 9),
    )
    return (
        "<h2 id='mlts'>MLTS: real models against the LiteRT CPU baseline</h2>"
        f"<div class='charts'>{_accuracy_chart(rows)}{_latency_chart(rows)}</div>"
        "<p class='muted'>Top-1 and top-5: the driver's accuracy on the labelled samples (the "
        "baseline's in brackets); agreement: the share of samples whose top-1 class is the baseline's; "
        "outputs: each output compared with the baseline's (ACC-2, ACC-5); latency: the driver's median "
        "over the baseline's.</p>" + f"<div class='small'>{table}</div>"
    )


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _accuracy_chart(rows: list[dict[str, Any]]) -> str:
    """Top-1 of the driver and of the baseline per classifier, and their agreement."""
    data = [r for r in rows if _real(r.get("top1")) and _real(r.get("baseline_top1"))]
    if not data:
        return ""
    width, label, bar, gap = 560, 170, 9, 8
    scale = width - label - 150
    height = len(data) * (2 * bar + gap) + 26
    parts = [f'<svg width="100%" viewBox="0 0 {width} {height}" role="img" aria-label="top-1 accuracy">']
    for tick in (0, 0.5, 1):
        x = label + scale * tick
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{height - 16}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{height - 4}" font-size="10" text-anchor="middle">{tick:.0%}</text>'
        )
    for i, r in enumerate(data):
        y = 2 + i * (2 * bar + gap)
        model = escape(str(r.get("model", "")))
        parts.append(f'<text x="0" y="{y + bar + 3}" font-size="11">{model}</text>')
        for k, (key, colour) in enumerate((("top1", "#1565c0"), ("baseline_top1", "#90a4ae"))):
            w = max(scale * min(max(r[key], 0), 1), 1)
            parts.append(
                f'<rect x="{label}" y="{y + k * bar}" width="{w:.1f}" height="{bar - 1}" fill="{colour}">'
                f"<title>{model} {'driver' if k == 0 else 'baseline'} top-1 {r[key]:.1%}</title></rect>"
            )
        agreement = f"agree {r['agreement']:.0%}" if _real(r.get("agreement")) else ""
        parts.append(
            f'<text x="{label + scale + 6}" y="{y + bar + 3}" font-size="10">{r["top1"]:.0%} / '
            f"{r['baseline_top1']:.0%}, {agreement}</text>"
        )
    parts.append("</svg>")
    legend = (
        "<div class='legend'><span><span class='swatch' style='background:#1565c0'></span>driver</span>"
        "<span><span class='swatch' style='background:#90a4ae'></span>baseline</span></div>"
    )
    return f"<div><h3>Top-1 accuracy, driver and baseline</h3>{legend}{''.join(parts)}</div>"


def _latency_chart(rows: list[dict[str, Any]]) -> str:
    """The driver's median latency over the baseline's per model (log scale, 1× marked)."""
    data = []
    for r in rows:
        ratio = r.get("latency_ratio")
        if (
            not _real(ratio)
            and _real(r.get("p50_ms"))
            and _real(r.get("baseline_p50_ms"))
            and r["baseline_p50_ms"]
        ):
            ratio = r["p50_ms"] / r["baseline_p50_ms"]
        if _real(ratio) and ratio > 0:
            data.append((str(r.get("model", "")), ratio))
    if not data:
        return ""
    width, bar, label = 560, 12, 150
    lo = min(0.5, *(r for _, r in data))
    hi = max(2.0, *(r for _, r in data))
    span = math.log10(hi) - math.log10(lo)

    def x(ratio: float) -> float:
        return label + (width - label - 60) * (math.log10(ratio) - math.log10(lo)) / span

    height = len(data) * (bar + 4) + 24
    parts = [f'<svg width="100%" viewBox="0 0 {width} {height}" role="img" aria-label="latency ratio">']
    for power in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1):
        tick = x(10.0**power)
        parts.append(
            f'<line x1="{tick:.1f}" x2="{tick:.1f}" y1="0" y2="{height - 16}" stroke="#ddd"/>'
            f'<text x="{tick:.1f}" y="{height - 4}" font-size="10" text-anchor="middle">'
            f"{10.0**power:g}×</text>"
        )
    one = x(1.0)
    for i, (model, ratio) in enumerate(data):
        y = 2 + i * (bar + 4)
        colour = "#2e7d32" if ratio <= 1.0 else "#ef6c00"
        x0, x1 = sorted((one, x(ratio)))
        parts.append(
            f'<text x="0" y="{y + 10}" font-size="11">{escape(model)}</text>'
            f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="{bar}" fill="{colour}">'
            f"<title>{escape(model)}: {ratio:.2f}× the baseline's median latency</title></rect>"
            f'<text x="{max(x1, one) + 4:.1f}" y="{y + 10}" font-size="10">{ratio:.2f}×</text>'
        )
    parts.append(f'<line x1="{one:.1f}" x2="{one:.1f}" y1="0" y2="{height - 16}" stroke="#333"/></svg>')
    return (
        "<div><h3>Median latency over the baseline's</h3><p class='muted small'>Log scale; left of the "
        "black line (1×) the driver is faster.</p>" + "".join(parts) + "</div>"
    )


def _fuzz(report: dict[str, Any]) -> str:
    rows = report["fuzz"]
    if not rows:
        return "<h2 id='fuzz'>Fuzzing</h2><p>No fuzz target ran in this plan.</p>"
    out = []
    for r in rows:
        findings = "".join(
            f"<li>{_badge('known', COLOURS['WAIVED']) if f.get('known') else _badge('new', COLOURS['FAIL'])} "
            f"{escape(str(f.get('kind', '')))} "
            f"<code>{escape(str(f.get('key', '')))}</code>"
            + (f" ×{f['count']}" if isinstance(f.get("count"), int) and f["count"] > 1 else "")
            + f": {escape(str(f.get('message', '')))}"
            + (f"<br>replay: <code>{escape(str(f['command']))}</code>" if f.get("command") else "")
            + "</li>"
            for f in r.get("findings") or []
        )
        seconds, startup = r.get("seconds"), r.get("startup_s")
        rate = r["execs"] / seconds if _real(r.get("execs")) and _real(seconds) and seconds else None
        out.append(
            [
                f"<b>{escape(str(r.get('target', r['test'])))}</b>",
                _badge(r["status"]),
                _number(r.get("execs")),
                f"{rate:,.0f}" if rate is not None else "—",
                _number(r.get("corpus")),
                _number(seconds) + (f"<br><span class='muted'>{_number(startup)} starting</span>"
                                     if _real(startup) else ""),
                f"<ul class='tests'>{findings}</ul>" if findings else "<span class='muted'>none</span>",
            ]
        )
    found = sum(len(r.get("findings") or []) for r in rows)
    return (
        f"<h2 id='fuzz'>Fuzzing ({len(rows)} targets, {found} finding{'s' if found != 1 else ''})</h2>"
        "<p class='muted'>A finding the expectations already list is known (recorded, not failed); a new "
        "one fails its target with the command that replays it.</p>"
        + _table(
            ["target", "status", "executions", "exec/s", "corpus", "seconds", "findings"],
            out,
            ["16%", "8%", "9%", "7%", "7%", "7%", "46%"],
            numeric=(2, 3, 4, 5),
        )
    )


def _differences(first: dict[str, Any], other: dict[str, Any], prefix: str = "") -> list[str]:
    """What ``other`` changed of ``first``, key by key (``packages.numpy 2.4.6 → 2.5.0``)."""
    out = []
    for key in sorted(set(first) | set(other)):
        a, b = first.get(key), other.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        else:
            out.append(
                f"{prefix}{key} {a if a is not None else '(none)'} → {b if b is not None else '(none)'}"
            )
    return out


def _environment(report: dict[str, Any]) -> str:
    env, driver = report["environment"], report["driver"]
    identity = [
        ("spec", driver.get("spec")),
        ("version", driver.get("version_string") or driver.get("error")),
        ("type", driver.get("type")),
        ("feature level", driver.get("feature_level")),
        ("extensions", ", ".join(str(e) for e in driver.get("extensions") or []) or "none"),
        ("cache files needed", driver.get("cache_files_needed")),
    ]
    machine = [
        ("Python", f"{env.get('python', '')} ({env.get('python_implementation', '')})"),
        ("CPU", f"{env.get('cpu', '')} ({env.get('cpu_count', '?')} cores, {env.get('machine', '')})"),
        ("OS", env.get("os", "")),
        ("executable", env.get("executable", "")),
        ("nncert", f"{env.get('nncert', '')} {env.get('nncert_commit') or ''}"),
    ]

    def facts(rows: list[tuple[str, Any]]) -> str:
        return "".join(
            f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows if v not in (None, "")
        )

    packages = "".join(
        f"<div><code>{escape(str(k))}</code> {escape(str(v))}</div>"
        for k, v in (env.get("packages") or {}).items()
        if v
    )
    changes = "".join(
        f"<li>a later invocation: {escape('; '.join(_differences(env, other)))}</li>"
        for other in report.get("environment_changes") or []
    )
    if changes:
        changes = (
            "<p><b>The environment changed between invocations of this run</b> (a resume on another "
            f"machine or with other packages); against the first invocation's:</p><ul>{changes}</ul>"
        )
    plan = report["plan"]
    return (
        f"<h2 id='environment'>Driver and environment</h2>{changes}"
        f"<div class='charts'><div><h3>Driver</h3><table class='facts'>{facts(identity)}</table></div>"
        f"<div><h3>Machine</h3><table class='facts'>{facts(machine)}</table></div></div>"
        f"<h3>Packages</h3><div class='cols small'>{packages}</div>"
        f"<details><summary>driver identity and capabilities (as recorded)</summary>"
        f"<pre>{escape(json.dumps(driver, indent=1))}</pre></details>"
        f"<details><summary>the plan <code>{escape(plan['name'])}</code> as run (sha256 "
        f"<code>{escape(plan['sha256'][:16])}</code>…)</summary><pre>{escape(plan['text'])}</pre></details>"
    )


def _shard_facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A shard's report says which shard it is, and that its verdict is over that part alone; a
    merged report names its parts (docs/certification.md, "Sharding")."""
    part, merged = report.get("shard"), report.get("merged")
    if isinstance(part, dict):
        suites = part.get("suites") or {}
        selected = sum(s.get("selected") or 0 for s in suites.values() if isinstance(s, dict))
        collected = sum(s.get("collected") or 0 for s in suites.values() if isinstance(s, dict))
        return [
            (
                "shard",
                "<b>"
                + escape(
                    f"shard {part.get('index')}/{part.get('count')}: {selected:,} of the plan's "
                    f"{collected:,} "
                    f"tests; the verdict covers this shard's tests alone"
                )
                + "</b>"
                + escape(
                    f" (partition {part.get('method')}"
                    + (f", durations from {part['durations_from']}" if part.get("durations_from") else "")
                    + "; merge every shard's report with nncert certify merge)"
                ),
            )
        ]
    if isinstance(merged, dict):
        parts = [p for p in merged.get("parts") or [] if isinstance(p, dict)]
        return [
            (
                "merged",
                escape(f"from {len(parts)} shards (partition {merged.get('method')}): ")
                + "; ".join(
                    escape(
                        f"{p.get('shard')}: {p.get('tests')} tests, {p.get('verdict')}, "
                        f"{(p.get('environment') or {}).get('cpu', '?')}, "
                        f"{p.get('started')} to {p.get('finished')}"
                    )
                    for p in parts
                ),
            )
        ]
    return []


def render(report: dict[str, Any]) -> str:
    page = _Page(report)
    title = f"nncert certification: {report['driver'].get('spec', '')}: {report['verdict']['overall']}"
    body = "".join(
        [
            _header(page),
            _requirements(page),
            _suites(page),
            _failures(page),
            _waivers(report),
            _coverage(report),
            _mlts(report),
            _fuzz(report),
            _environment(report),
        ]
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{escape(title)}</title>"
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )
