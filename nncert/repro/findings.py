"""The findings catalogue: one record per distinct real defect of a runtime behind a compiled
driver, each with its standalone reproducer (nncert.repro.standalone) under ``findings/``.

``findings/catalogue.toml`` holds what a person decides: the defect's id and title, the
driver spec that shows it (options included), how its reproducer is built (a failing test
id, or a random graph's spec file), the symptom, whether it is a bug or a documented
deviation, a summary, every source that meets it (test ids or globs, the random graphs
and fuzz findings) and the date first seen. What a machine measures comes from the
reproducer's ``case.json``: the runtime and its version, the operations and types, the
outcome, the magnitude, the N-way verdict. ``docs/findings.md`` is generated from both
(``render``); a test checks that it is up to date.

One defect is one record however many suites meet it: records are keyed by runtime,
operations, types and symptom (``key``), and that key is unique in the catalogue; the
record's ``sources`` list every test (per-operation, edge case, execution path, random graph)
and fuzz finding that meets it. A fuzz finding is named by its directory under findings/
(``fuzz/NAME``: the campaign's ``spec.json`` and ``minimized`` input, nncert.fuzz.campaign),
for what fuzzing meets on a case whose conformance test passes (the fuzzer's own values); a
graph spec file written by hand is named by its path under findings/ (``specs/NAME.json``).

``replay`` runs a record's reproducer against the installed runtime (nncert unimportable,
with a deadline: ``standalone.HANG_S`` for a hang, whose script must still be running then)
and says whether it still reproduces: a defect fixed upstream shows up as
"no longer reproduces" (a failure of the replay test until the record says ``fixed_in``),
never as a silent pass.
"""

from __future__ import annotations

import datetime
import re
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from nncert.datafiles import read_toml
from nncert.repro import standalone
from nncert.resources import CHECKOUT

#: The catalogue's directory: findings/ of the checkout.
FINDINGS_DIR = CHECKOUT / "findings"
CATALOGUE = FINDINGS_DIR / "catalogue.toml"
#: The generated page.
PAGE = CHECKOUT / "docs" / "findings.md"

#: symptom -> the outcome of the reproducer's script that shows it
SYMPTOMS = {
    "wrong result": "reproduced",
    "crash": "crashed",
    "refuses a valid model": "error",
    "hang": "hung",
}
KINDS = ("bug", "deviation")
REQUIRED = ("id", "title", "driver", "build", "symptom", "kind", "summary", "sources", "first_seen")
OPTIONAL = ("fixed_in", "note")
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
#: How a source that is a fuzz finding starts: its directory under findings/.
FUZZ_SOURCE = "fuzz/"
#: How a source that is a graph spec file under findings/ starts: a model written by hand (while
#: triaging another record, say), run with ``nncert repro SPEC --driver X``, which no suite meets.
SPEC_SOURCE = "specs/"


class CatalogueError(ValueError):
    """What is wrong with the catalogue or a record: one line."""


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    driver: str
    build: str
    symptom: str
    kind: str
    summary: str
    sources: tuple[str, ...]
    first_seen: str
    fixed_in: str = ""
    note: str = ""

    @property
    def directory(self) -> Path:
        return FINDINGS_DIR / self.id

    @property
    def deadline(self) -> float:
        """Seconds its reproducer's script runs at most: a hang's is killed (and so shown)
        at ``standalone.HANG_S``; the others are given the time a compile takes."""
        return standalone.HANG_S if self.symptom == "hang" else standalone.RUN_TIMEOUT_S

    @property
    def fuzz_sources(self) -> list[Path]:
        """The directories of the fuzz findings among the sources."""
        return [FINDINGS_DIR / s for s in self.sources if s.startswith(FUZZ_SOURCE)]

    def case(self) -> dict[str, Any]:
        """The reproducer's case.json (StandaloneError when it has none)."""
        return standalone.load_case(self.directory)

    def key(self) -> tuple:
        """What makes two records one defect: runtime, operations, operand types, symptom."""
        case = self.case()
        types = sorted({i["type"] for i in case["inputs"]} | {o["type"] for o in case["outputs"]})
        return case["runtime"], tuple(sorted(set(case["operations"]))), tuple(types), self.symptom


def load(path: str | Path = CATALOGUE) -> list[Finding]:
    """The catalogue's records, checked (CatalogueError with one line otherwise)."""
    doc = read_toml(path, CatalogueError)
    records = doc.get("finding")
    if not isinstance(records, list) or not records:
        raise CatalogueError(f"{path}: no [[finding]] records")
    out: list[Finding] = []
    for n, r in enumerate(records):
        where = f"{path}: finding {n + 1}" + (f" ({r['id']})" if isinstance(r, dict) and "id" in r else "")
        if not isinstance(r, dict):
            raise CatalogueError(f"{where}: not a table")
        missing = [k for k in REQUIRED if k not in r]
        unknown = sorted(set(r) - set(REQUIRED) - set(OPTIONAL))
        if missing or unknown:
            raise CatalogueError(f"{where}: " + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else []) +
                ([f"unknown {', '.join(unknown)}"] if unknown else [])))
        sources = r["sources"]
        if not (isinstance(sources, list) and sources and all(isinstance(s, str) and s for s in sources)):
            raise CatalogueError(f"{where}: sources must be a non-empty list of test ids or globs")
        text = {k: r.get(k, "") for k in (*REQUIRED, *OPTIONAL) if k != "sources"}
        if any(not isinstance(v, str) for v in text.values()):
            raise CatalogueError(f"{where}: every field but sources is a string")
        if not _ID.match(text["id"]):
            raise CatalogueError(f"{where}: id must be lower-case words joined by '-'")
        if text["symptom"] not in SYMPTOMS:
            raise CatalogueError(f"{where}: symptom {text['symptom']!r} is not one of {', '.join(SYMPTOMS)}")
        if text["kind"] not in KINDS:
            raise CatalogueError(f"{where}: kind {text['kind']!r} is not one of {', '.join(KINDS)}")
        try:
            datetime.date.fromisoformat(text["first_seen"])
        except ValueError:
            raise CatalogueError(f"{where}: first_seen {text['first_seen']!r} is no YYYY-MM-DD "
                                 f"date") from None
        out.append(Finding(**{**text, "sources": tuple(sources)}))
    ids = [f.id for f in out]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise CatalogueError(f"{path}: id {', '.join(twice)} used twice")
    return out


def build(finding: Finding, out_dir: str | Path | None = None) -> Path:
    """(Re)write ``finding``'s reproducer from its ``build`` source (a test id, or a spec
    file of ``nncert graphs`` relative to findings/), into its directory (replaced whole:
    the new one is written beside it first) or ``out_dir``."""
    target = Path(out_dir) if out_dir is not None else finding.directory
    staging = target.with_name(f".{target.name}.new")
    if staging.exists():
        shutil.rmtree(staging)
    if "::" in finding.build:
        # A crash or a refusal the support probe found is declined by the driver: written all
        # the same (a wrong result is never declined: the probe does not judge values).
        standalone.write_of_test(finding.build, finding.driver, staging,
                                 declined=finding.symptom != "wrong result", timeout=finding.deadline,
                                 peers="all")
    else:
        from nncert.drivers import load_driver
        from nncert.testing import triage
        from nncert.testing.graphs import SpecError, load_spec
        from nncert.testing.random_graphs import graph_verdict

        try:
            graph, doc = load_spec(FINDINGS_DIR / finding.build)
        except SpecError as e:
            raise standalone.StandaloneError(str(e)) from None
        verdict = (doc.get("verdict") or {}).get("summary") if isinstance(doc.get("verdict"), dict) else None
        if verdict is None:  # a crash, hang or refusal: which peers agree with the reference
            verdict = graph_verdict(graph, None, finding.driver, peers=triage.parse_peers("all"))["summary"]
        driver = load_driver(finding.driver)
        try:
            standalone.write_graph(driver, graph, staging, source=f"random graph {finding.build}",
                                   verdict=verdict, timeout=finding.deadline)
        finally:
            driver.close()
    case = standalone.load_case(staging)
    case["title"] = finding.title
    standalone.save_case(staging, case)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


@dataclass
class Replay:
    finding: Finding
    installed: str | None  # the runtime's installed version, None when it is not installed
    outcome: str | None  # the script's outcome now (standalone.OUTCOMES), None when not run
    detail: str

    @property
    def reproduces(self) -> bool:
        return self.outcome == SYMPTOMS[self.finding.symptom]

    @property
    def expected(self) -> bool:
        """Whether the defect should reproduce with the installed version (not at or past
        ``fixed_in``)."""
        return not (self.finding.fixed_in and self.installed and
                    _version(self.installed) >= _version(self.finding.fixed_in))

    def line(self) -> str:
        if self.installed is None:
            return f"{self.finding.id}: not run ({self.detail})"
        state = "reproduces" if self.reproduces else "does NOT reproduce"
        return f"{self.finding.id}: {state} with {self.detail}"


def replay(finding: Finding, timeout: float | None = None) -> Replay:
    """Run the reproducer of ``finding`` as it is committed (in a scratch copy: nothing under
    findings/ changes) for ``timeout`` seconds (default: ``Finding.deadline``) and say whether
    it still shows the symptom."""
    import tempfile

    case = finding.case()
    runtime = case["runtime"]
    distribution = case["packages"][0].partition("==")[0]  # the runtime's own (IREE: its compiler)
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return Replay(finding, None, None, f"{distribution} is not installed")
    with tempfile.TemporaryDirectory(prefix="nncert-replay-") as scratch:
        copy = Path(scratch) / finding.id
        shutil.copytree(finding.directory, copy, symlinks=True)
        now = standalone.measure(copy, finding.deadline if timeout is None else timeout)
    worst = f", max abs difference {now['max_abs_diff']:g}" if now.get("max_abs_diff") is not None else ""
    last = (now.get("output") or [""])[-1]
    detail = f"{runtime} {installed}: {now['outcome']} ({now.get('ended', '')}{worst}) {last}".rstrip()
    return Replay(finding, installed, now["outcome"], detail)


def _version(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+-]", text))


# -- the page ------------------------------------------------------------------------------

def render(findings: list[Finding]) -> str:
    """docs/findings.md: the catalogue as a page (generated: edit findings/catalogue.toml and
    run ``nncert findings render``)."""
    by_runtime: dict[str, list[tuple[Finding, dict]]] = {}
    for f in findings:
        case = f.case()
        by_runtime.setdefault(case["runtime"], []).append((f, case))
    bugs = sum(f.kind == "bug" for f in findings)
    lines = [
        "# Findings",
        "",
        "<!-- Generated from findings/catalogue.toml and each reproducer's case.json by",
        "     `nncert findings render`: edit those, not this page. -->",
        "",
        f"Real defects nncert found in the runtimes behind its compiled drivers: {len(findings)} "
        f"distinct defects in {len(by_runtime)} runtimes ({bugs} bugs, {len(findings) - bugs} "
        f"documented deviations from the NNAPI semantics that the runtime's own specification allows "
        f"or chooses). Each has a standalone reproducer under `findings/<id>/`: the runtime's model "
        f"file, the inputs, the reference results and a `run.py` that needs only numpy and the "
        f"runtime (docs/reproducers.md). `nncert findings replay` runs them all against the "
        f"installed runtimes and says which still reproduce; the test suite does the same "
        f"(tests/test_findings.py), so a defect fixed upstream shows up as fixed.",
        "",
        "One defect is one record however many suites meet it (keyed by runtime, operations, "
        "types and symptom); *sources* lists every test that meets it, each a strict xfail in "
        "the driver's expectations file.",
        "",
        "| id | runtime | operations | symptom | kind | magnitude |",
        "|---|---|---|---|---|---|",
    ]
    for runtime in sorted(by_runtime):
        for f, case in by_runtime[runtime]:
            lines.append(f"| [{f.id}](#{f.id}) | {runtime} {case['runtime_version']} | "
                         f"{', '.join(dict.fromkeys(case['operations']))} | {f.symptom} | {f.kind} | "
                         f"{_magnitude(case)} |")
    for runtime in sorted(by_runtime):
        lines += ["", f"## {runtime}"]
        for f, case in by_runtime[runtime]:
            types = sorted({i["type"] for i in case["inputs"]} | {o["type"] for o in case["outputs"]})
            lines += [
                "", f"### {f.id}", "", f"**{f.title}**", "", f.summary, "",
                f"- runtime: {runtime} {case['runtime_version']}; driver `{f.driver}`; options "
                f"{', '.join(f'{k}={v}' for k, v in case['options'].items()) or 'none'}",
                f"- operations: {', '.join(dict.fromkeys(case['operations']))}; types: {', '.join(types)}",
                f"- symptom: {f.symptom} ({f.kind}); magnitude: {_magnitude(case)}",
                f"- N-way verdict: {_verdict(case)}",
                f"- reproducer: [`findings/{f.id}/`](../findings/{f.id}/) (`python run.py`: "
                f"{case.get('ended', 'not run')})",
                f"- first seen: {f.first_seen}" + (f"; fixed in {f.fixed_in}" if f.fixed_in else ""),
                "- sources: " + "; ".join(f"`{s}`" for s in f.sources),
            ]
            if f.note:
                lines.append(f"- note: {f.note}")
    return "\n".join(lines) + "\n"


def _magnitude(case: dict) -> str:
    if case.get("outcome") == "crashed":
        return f"process killed by {case.get('signal')}"
    if case.get("outcome") == "hung":
        return f"no answer: {case.get('ended', '')}"
    if case.get("outcome") == "error":  # the runtime's error (run.py's ERROR line), not its stack
        lines = case.get("output") or [""]
        last = next((line for line in lines if line.startswith("ERROR:")), lines[-1])
        return last.replace("|", "/")[:120] or case.get("ended", "")
    for line in case.get("output") or ():
        if line.startswith("REPRODUCED:"):
            worst = (f"; max abs difference {case['max_abs_diff']:g}"
                     if case.get("max_abs_diff") is not None else "")
            return line.removeprefix("REPRODUCED:").strip().replace("|", "/") + worst
    return case.get("ended", "")


def _verdict(case: dict) -> str:
    v = case.get("verdict") or ""
    return v.removeprefix("N-way verdict: ") or "not triaged"
