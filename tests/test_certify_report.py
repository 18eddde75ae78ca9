"""The certification report's views, built from synthetic journals (tests/certify_synthetic.py,
the same runs benchmarks/bench_certify.py times): report.html is self-contained, escapes what a
driver wrote, puts the verdict first, lists every requirement and renders every status; the
report directory verifies, and an edited outcome does not."""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from certify_synthetic import write_run

from nncert.certify import html, journal, report
from nncert.certify.verify import verify
from nncert.requirements import REQUIREMENTS

#: Closes a quoted attribute either way, opens a script, adds an event handler.
HOSTILE = "<script>alert(1)</script>\"' onmouseover=alert(1) x='"


class _Page(HTMLParser):
    """The tags, attributes and text of a page, as a browser would read them."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _build(out: Path, **kw) -> dict:
    plan, settings = write_run(out, **kw)
    return report.build(out, plan, settings)


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> dict:
    """A NOT CONFORMANT run of 1,500 tests: failures, crashes, hangs, waivers (one stale),
    declines, MLTS and fuzz failures, a driver's hostile strings, tests without an outcome."""
    return _build(
        tmp_path_factory.mktemp("failing"), outcomes=1500, failures=30, hostile=HOSTILE, incomplete=True
    )


def test_the_page_reaches_nothing_outside_itself(failing):
    page = html.render(failing)
    parsed = _Page(page)
    for tag, attrs in parsed.tags:
        assert tag not in ("script", "link", "iframe", "img", "object", "embed"), tag
        for name in ("src", "href", "action"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), (tag, name, value)
    assert not re.search(r"@import|url\(", page)
    assert "http://" not in page and "https://" not in page


def test_what_a_driver_wrote_is_text_not_markup(failing):
    ids = [t["id"] for t in failing["tests"] if HOSTILE in t["id"]]
    messages = [t for t in failing["tests"] if HOSTILE in t.get("message", "")]
    assert ids and {t["status"] for t in messages} >= {"FAIL", "DECLINED"}  # the page has them to show
    parsed = _Page(html.render(failing))
    assert all(not name.startswith("on") for _, attrs in parsed.tags for name in attrs)
    assert not any(tag == "script" for tag, _ in parsed.tags)
    text = "".join(parsed.text)
    assert f"test_prepare[{HOSTILE}]" in text  # the id as the driver gave it, shown as text
    assert f"EXE-10: {HOSTILE}" in text
    tips = " ".join(attrs.get("title") or "" for _, attrs in parsed.tags)
    assert HOSTILE in tips  # a declined reason in the heat map's tooltip, whole and inert


def test_the_verdict_comes_first(failing, tmp_path):
    for rep in (failing, _build(tmp_path / "incomplete", outcomes=600, failures=0, incomplete=True)):
        page = html.render(rep)
        first = re.search(r'<div class="verdict[^"]*"[^>]*>([^<]*)</div>', page)
        assert first and first.group(1) == rep["verdict"]["overall"]
        assert first.start() < page.index("<h2")
        assert rep["verdict"]["overall"] in page[: page.index("</title>")]
    assert failing["verdict"]["overall"] == "NOT CONFORMANT" and rep["verdict"]["overall"] == "INCOMPLETE"
    assert "tests of the plan have no outcome" in page


def test_every_requirement_is_listed_with_its_verdict(failing):
    page = html.render(failing)
    for rid, r in failing["requirements"].items():
        row = re.search(rf"<tr id='req-{re.escape(rid)}'>(.*?)</tr>", page)
        assert row, rid
        assert f">{r['verdict']}</span>" in row.group(1)
    assert set(failing["requirements"]) == set(REQUIREMENTS)


def test_a_report_with_every_status_renders(failing):
    statuses = Counter(t["status"] for t in failing["tests"])
    assert set(statuses) == {*journal.STATUSES, None}
    page = html.render(failing)
    for status in (*journal.STATUSES, "NO OUTCOME"):
        assert f">{status}</span>" in page, status
    failures = [t for t in failing["tests"] if t["status"] in journal.FAILING]
    assert f"Failures ({len(failures):,})" in page
    text = "".join(_Page(page).text)
    for t in failures:  # each with its reproducer
        assert t["reproduce"] in text
    assert "is the odd one out</span>" in page  # a three-way verdict's conclusion
    assert "fixed in 1.32" in text and "outside the entry's versions" in text  # stale, not applied
    assert ">new</span>" in page and "nncert fuzz replay" in text  # a new fuzz finding to replay


def test_every_link_lands_on_the_page(failing):
    parsed = _Page(html.render(failing))
    ids = {attrs["id"] for _, attrs in parsed.tags if attrs.get("id")}
    targets = {attrs["href"][1:] for tag, attrs in parsed.tags if tag == "a"}
    assert targets and targets <= ids
    assert any(t.startswith("f") for t in targets)  # requirement drill-downs reach their failures


def test_mlts_rows_show_their_own_figures(failing):
    page = html.render(failing)
    for row in failing["mlts"]:
        if isinstance(row.get("latency_ratio"), float):
            assert f"{row['latency_ratio']:.2f}×" in page
        if isinstance(row.get("top1"), float):
            assert f"{100 * row['top1']:.1f}% ({100 * row['baseline_top1']:.1f}%)" in page


def test_the_heat_map_has_a_column_per_operand_type(failing):
    page = html.render(failing)
    types = {c["type"].split("-")[0] for c in failing["coverage"]}
    heads = re.findall(r"<th class='vt'><div>([^<]*)</div></th>", page)
    blocks = page.count("<table class='heat'>")
    assert blocks in (1, 2) and sorted(heads) == sorted([*types] * blocks)


def test_sections_without_data_say_so(failing):
    empty = {
        **failing,
        "mlts": [],
        "fuzz": [],
        "coverage": [],
        "waivers": [],
        "stale_waivers": [],
        "expectations_not_applied": [],
    }
    page = html.render(empty)
    assert "No MLTS model ran" in page and "No fuzz target ran" in page
    assert "No per-operation test" in page and "no known discrepancy was needed" in page


def test_the_written_report_verifies_and_an_edited_outcome_does_not(tmp_path):
    out = tmp_path / "run"
    rep = _build(out, outcomes=800, failures=10)
    report.write(out, rep)
    assert verify(out, recollect=False) == []
    data = json.loads((out / report.REPORT_FILE).read_text())
    failed = next(t for t in data["tests"] if t["status"] == "FAIL")
    failed["status"] = "PASS"
    (out / report.REPORT_FILE).write_text(json.dumps(data))
    problems = verify(out, recollect=False)
    assert any("report.json was changed" in p for p in problems)
    edited = f"test {failed['id']}: the report's status is 'PASS', the journal's 'FAIL'"
    assert any(edited in p for p in problems)
