"""The findings catalogue (findings/catalogue.toml, nncert.repro.findings): every record has a
standalone reproducer that still shows its symptom on the installed runtime, one record per
defect, each the strict xfail of its driver, and docs/findings.md generated from it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

from nncert.repro import findings, fuzzed, standalone
from nncert.testing import expectations

CATALOGUE = findings.load()
IDS = [f.id for f in CATALOGUE]
#: A hang's replay runs until its deadline (standalone.HANG_S): behind -m slow, out of CI's time.
HANG = pytest.mark.slow
REPLAYED = [pytest.param(f, id=f.id, marks=HANG if f.symptom == "hang" else ()) for f in CATALOGUE]


def test_the_catalogue_has_fifteen_distinct_defects_at_least():
    assert len(CATALOGUE) >= 15
    keys = {}
    for f in CATALOGUE:
        key = f.key()
        assert key not in keys, f"{f.id} and {keys[key]} are one defect (runtime, operations, types, " \
                                "symptom)"
        keys[key] = f.id


@pytest.mark.parametrize("finding", CATALOGUE, ids=IDS)
def test_each_finding_has_a_reproducer_that_showed_its_symptom(finding):
    case = finding.case()
    assert set(standalone.OUTCOME_KEYS) <= set(case)
    assert case["outcome"] == findings.SYMPTOMS[finding.symptom], \
        f"{finding.id}: its reproducer {case.get('ended')} when built, not a {finding.symptom}"
    files = {p.name for p in finding.directory.iterdir()}
    assert {"run.py", "README.md", "case.json", "inputs.npz", "expected.npz", *case["model_files"]} <= files


@pytest.mark.parametrize("finding", CATALOGUE, ids=IDS)
def test_each_finding_says_which_runtimes_agree_with_the_reference(finding):
    """The N-way verdict of its case, a crash or refusal too (the driver gave no outputs: the
    peers are asked whether they agree with the reference): a maintainer sees whether the
    expected values are corroborated."""
    verdict = finding.case().get("verdict") or ""
    assert verdict.startswith("N-way verdict"), f"{finding.id}: no N-way verdict"
    assert "not triaged" not in verdict and "no peer runtime" not in verdict, f"{finding.id}: {verdict}"


@pytest.mark.parametrize("finding", CATALOGUE, ids=IDS)
def test_each_finding_is_a_strict_xfail_of_its_driver(finding):
    """... or declined by it: a crash or a refusal that the support probe finds is not
    claimed (DRV-2)."""
    if finding.case().get("note", "").startswith("The driver declines this case"):
        assert finding.symptom != "wrong result", \
            f"{finding.id}: declined by {finding.driver}: {finding.symptom}?"
        return
    exps = expectations.load(finding.driver)
    built_from_a_test = (finding.build,) if "::" in finding.build else ()  # not a random graph's spec
    tests = [s for s in finding.sources if "*" not in s and "?" not in s and
             not s.startswith((findings.FUZZ_SOURCE, findings.SPEC_SOURCE))]  # (fuzz, specs: below)
    for source in (*built_from_a_test, *tests):
        entry = expectations.match(exps, source)
        assert entry is not None, f"{finding.id}: {source} is no expected failure of {finding.driver}"


SPEC_SOURCES = [(f, s) for f in CATALOGUE for s in f.sources if s.startswith(findings.SPEC_SOURCE)]


@pytest.mark.parametrize("finding, source", SPEC_SOURCES, ids=[f"{f.id}:{s}" for f, s in SPEC_SOURCES])
def test_each_spec_source_is_a_graph_of_the_records_operations(finding, source):
    """A hand-written graph among a record's sources is a spec file under findings/ that
    ``nncert repro`` reads, of the record's operations."""
    from nncert.testing.graphs import load_spec

    graph, _ = load_spec(findings.FINDINGS_DIR / source)
    assert {op.type.name for op in graph.ops} <= set(finding.case()["operations"])


FUZZ_SOURCES = [(f, d) for f in CATALOGUE for d in f.fuzz_sources]


@pytest.mark.parametrize("finding, where", FUZZ_SOURCES, ids=[d.name for _, d in FUZZ_SOURCES])
def test_each_fuzz_source_replays_as_its_record_says(finding, where):
    """A fuzz finding among a record's sources is its campaign's directory (spec.json and the
    minimised input), found on the record's driver and operation, and its input still gives
    its key on its catalogue case when replayed (a fresh driver in a child process). A hang's
    input is decoded, not replayed: it was a hang for its campaign's deadline on that host, and
    whether it still is depends on the host (the LRN one finishes in 42 s with 7.8 GB on one
    of 2 busy cores); its record's own reproducer is what hangs on any host."""
    from nncert.fuzz.campaign import replay
    from nncert.fuzz.targets import TARGETS

    spec = json.loads((where / "spec.json").read_text())
    data = (where / "minimized").read_bytes()
    assert data.hex() == spec["input_hex"]
    hang = spec["kind"] == "HANG"
    assert hang == (finding.symptom == "hang") and spec["driver"] == finding.driver
    if hang:  # its key names no operation: its decoded model holds the record's
        model = fuzzed.decoded(fuzzed.load_finding(where))[0]
        assert {op.type.name for op in model.main.operations} <= set(finding.case()["operations"])
        return
    assert spec["key"].split("|")[1] in finding.case()["operations"]
    distribution = finding.case()["packages"][0].partition("==")[0]
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")
    verdict = replay(TARGETS[spec["target"]], spec["driver"], data, timeout=120)
    assert (verdict.key, verdict.test) == (spec["key"], spec["test"]), verdict.message


def test_the_page_is_generated_from_the_catalogue():
    assert findings.PAGE.read_text() == findings.render(CATALOGUE), \
        "docs/findings.md is stale: run `nncert findings render`"


@pytest.mark.parametrize("finding", REPLAYED)
def test_each_reproducer_replays_on_the_installed_runtime(finding):
    """Run without nncert importable: a defect fixed upstream fails here until the record
    says which release fixed it (fixed_in); a fixed one that comes back fails too."""
    result = findings.replay(finding)
    if result.installed is None:
        pytest.skip(result.detail)
    if result.expected:
        assert result.reproduces, (f"{finding.id} no longer reproduces: {result.detail}. Fixed upstream? "
                                   f"Set fixed_in in findings/catalogue.toml")
    else:
        assert not result.reproduces, f"{finding.id} is marked fixed in {finding.fixed_in}: {result.detail}"


def test_a_malformed_catalogue_is_one_line(tmp_path):
    bad = tmp_path / "catalogue.toml"
    bad.write_text('[[finding]]\nid = "x"\ntitle = "t"\n')
    with pytest.raises(findings.CatalogueError, match="missing driver, build, symptom"):
        findings.load(bad)
    bad.write_text('[[finding]]\nid = "Bad Id"\n' + "".join(
        f'{k} = "x"\n' for k in findings.REQUIRED if k not in ("id", "sources")) + "sources = ['a']\n")
    with pytest.raises(findings.CatalogueError, match="id must be"):
        findings.load(bad)
    bad.write_text("[[finding\n")
    with pytest.raises(findings.CatalogueError):
        findings.load(bad)


def test_the_cli_names_an_unknown_finding():
    done = subprocess.run([sys.executable, "-m", "nncert.cli", "findings", "replay", "no-such-finding"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no finding no-such-finding" in done.stderr


def test_a_hang_record_reproduces_when_its_script_outlives_the_deadline(tmp_path, monkeypatch):
    """A hang is shown by a script still running at the deadline (killed then: "hung"), which a
    crash record does not take for its own symptom; the page gives the deadline as magnitude."""
    from nncert.hal.builder import ModelBuilder
    from nncert.hal.types import OperandType as T
    from nncert.hal.types import OperationType as O
    from tests.test_fuzz_standalone import SleepyCompiled  # run.py sleeps for an hour

    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (1,))
    y = b.operand(T.TENSOR_FLOAT32, (1,))
    b.operation(O.RELU, [x], [y])
    monkeypatch.setattr(findings, "FINDINGS_DIR", tmp_path)
    case = standalone.load_case(standalone.write_standalone(SleepyCompiled(), b.build([x], [y]),
                                                            [np.ones(1, np.float32)], tmp_path / "sleepy",
                                                            timeout=1.0))
    case["packages"] = ["numpy"]  # (the fake runtime's distribution: installed)
    standalone.save_case(tmp_path / "sleepy", case)
    assert case["outcome"] == "hung" and case["ended"] == "still running after 1 s: killed"
    record = findings.Finding(id="sleepy", title="t", driver="sleepy", build="specs/x.json", symptom="hang",
                              kind="bug", summary="s", sources=("fuzz/x",), first_seen="2026-11-27")
    assert record.deadline == standalone.HANG_S
    result = findings.replay(record, timeout=1.0)
    assert result.outcome == "hung" and result.reproduces and result.line().startswith("sleepy: reproduces")
    crash = dataclasses.replace(record, symptom="crash")
    assert not findings.replay(crash, timeout=1.0).reproduces
    assert "| hang | bug | no answer: still running after 1 s: killed |" in findings.render([record])
