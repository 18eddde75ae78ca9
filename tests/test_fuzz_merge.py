"""``nncert fuzz merge`` (VAL-3): campaigns run apart become one campaign directory, their
findings united by key with every campaign that found each listed, their corpora merged by
libFuzzer -merge=1 (no larger than the inputs); a refused merge is one line, exit 2."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from nncert.cli import main
from nncert.fuzz.campaign import recorded_findings

pytest.importorskip("atheris")

# A toy target following the fuzz-script contract: it aborts on inputs starting with b"CR" and
# raises a Finding-like exception on b"FI" (each when TOY_MODES names it); its `branches` is
# instrumented, so libFuzzer's merge sees coverage; it refuses to start without --driver, so a
# merge pass that lost the driver fails.
TOY = '''
import os
import sys
from types import SimpleNamespace

import atheris


class ToyFinding(Exception):
    def key(self) -> str:
        return "toy_oracle|OP_X|BAD_STATUS"


@atheris.instrument_func
def branches(data: bytes) -> int:
    n = 0
    if len(data) > 0 and data[0] == 97:
        n += 1
        if len(data) > 1 and data[1] == 98:
            n += 1
            if len(data) > 2 and data[2] == 99:
                n += 1
    return n


def make(driver):
    if driver is None:
        raise SystemExit("toy: no --driver")
    modes = os.environ.get("TOY_MODES", "CR,FI").split(",")

    def one(data: bytes) -> None:
        branches(data)
        if data[:2] == b"CR" and "CR" in modes:
            os.abort()
        if data[:2] == b"FI" and "FI" in modes:
            raise ToyFinding(f"accepted {data[:8]!r} on {driver}")

    return one


TARGET = SimpleNamespace(name="toy", needs_driver=True, make=make,
                         seeds=lambda: [b"xx", b"a", b"ab", b"abc", b"zz", b"CR1"],
                         describe=lambda data: f"toy input {data!r}")

if __name__ == "__main__":
    argv = sys.argv[:]
    driver = None
    if "--driver" in argv:
        i = argv.index("--driver")
        driver = argv[i + 1]
        del argv[i:i + 2]
    atheris.Setup(argv, make(driver))
    atheris.Fuzz()
'''

CRASH_KEY = "CRASH|toy.py:one|SIGABRT"
FINDING_KEY = "toy_oracle|OP_X|BAD_STATUS"


def _fuzz(*argv: str) -> int:
    return main(["fuzz", *argv])


def _tree(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.mark.req("VAL-3")
def test_fuzz_merge_unites_findings_by_key_and_lists_every_campaign(tmp_path, monkeypatch, capsys):
    toy = tmp_path / "toy.py"
    toy.write_text(TOY)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "fi").write_bytes(b"FIxy")
    a, b, merged = tmp_path / "a", tmp_path / "b", tmp_path / "merged"
    # Campaign a crashes only; b also raises the Finding on the input it starts from.
    monkeypatch.setenv("TOY_MODES", "CR")
    assert _fuzz(str(toy), "--time", "2", "--seed", "1", "--timeout", "2", "--minimize-time", "2",
                 "--out", str(a)) == 1
    monkeypatch.setenv("TOY_MODES", "CR,FI")
    assert _fuzz(str(toy), "--time", "2", "--seed", "2", "--timeout", "2", "--minimize-time", "2",
                 "--corpus", str(extra), "--out", str(b)) == 1
    capsys.readouterr()
    found_a, found_b = recorded_findings(a / "findings.jsonl"), recorded_findings(b / "findings.jsonl")
    assert set(found_a) == {CRASH_KEY} and set(found_b) == {CRASH_KEY, FINDING_KEY}
    before = {d: _tree(d) for d in (a, b)}

    assert _fuzz("merge", str(a), str(b), "--out", str(merged)) == 1
    out = capsys.readouterr().out
    assert before == {d: _tree(d) for d in (a, b)}  # the campaigns untouched
    summary = json.loads((merged / "summary.json").read_text())
    by_key = summary["findings_by_key"]
    assert set(by_key) == {CRASH_KEY, FINDING_KEY}  # the union by key
    crash = by_key[CRASH_KEY]
    assert [(s["dir"], s["number"]) for s in crash["sources"]] == \
        [(str(a), 1), (str(b), found_b[CRASH_KEY]["number"])]
    assert crash["count"] == found_a[CRASH_KEY]["count"] + found_b[CRASH_KEY]["count"] >= 2
    assert [s["dir"] for s in by_key[FINDING_KEY]["sources"]] == [str(b)]
    # The merged directory is a campaign's: its journal reads back, its finding files replay.
    journal = recorded_findings(merged / "findings.jsonl", repair=False)
    assert {k: r["number"] for k, r in journal.items()} == {CRASH_KEY: 1, FINDING_KEY: 2}
    assert journal[CRASH_KEY]["count"] == crash["count"]
    minimized = Path(journal[FINDING_KEY]["minimized"])
    assert minimized.parent.parent == merged / "findings" and minimized.read_bytes().startswith(b"FI")
    assert (minimized.parent / "command.txt").read_text().strip() == by_key[FINDING_KEY]["command"]
    assert str(minimized) in by_key[FINDING_KEY]["command"] and f"replay: {crash['command']}" in out
    assert _fuzz("replay", str(toy), str(minimized)) == 1
    # The corpora merged by coverage: the seeds both campaigns share count once, and of b"a",
    # b"ab", b"abc" and the rest only what adds coverage stays.
    inputs = len(list((a / "corpus").iterdir())) + len(list((b / "corpus").iterdir()))
    c = summary["corpus_merge"]
    assert c["method"] == "libfuzzer -merge=1", c
    assert c["inputs"] == inputs and 0 < c["kept"] == summary["corpus"] < c["distinct"] < inputs
    assert c["kept"] == len(list((merged / "corpus").iterdir()))
    assert (merged / "corpus" / hashlib.sha1(b"abc").hexdigest()).is_file()


@pytest.mark.slow
@pytest.mark.req("VAL-3")
def test_fuzz_merge_keeps_the_inputs_that_add_coverage(tmp_path, capsys):
    dirs = [tmp_path / "one", tmp_path / "two"]
    for seed, d in enumerate(dirs, 1):
        assert _fuzz("validate_model", "--time", "2", "--jobs", "1", "--seed", str(seed), "--max-seeds", "20",
                     "--out", str(d)) in (0, 1)
    capsys.readouterr()
    merged = tmp_path / "merged"
    _fuzz("merge", *map(str, dirs), "--out", str(merged))
    summary = json.loads((merged / "summary.json").read_text())
    c = summary["corpus_merge"]
    assert c["method"] == "libfuzzer -merge=1", c
    corpora = [list((d / "corpus").iterdir()) for d in dirs]
    assert c["inputs"] == sum(map(len, corpora)) and 0 < c["kept"] == summary["corpus"] <= c["distinct"]
    assert c["kept"] == len(list((merged / "corpus").iterdir()))
    keys = set().union(*(recorded_findings(d / "findings.jsonl") for d in dirs))
    assert set(summary["findings_by_key"]) == keys


def _campaign(d: Path, target: str = "validate_model", driver: str | None = None) -> Path:
    (d / "corpus").mkdir(parents=True)
    (d / "corpus" / "x").write_bytes(b"x")
    (d / "findings.jsonl").write_text("")
    (d / "summary.json").write_text(json.dumps({"target": target, "driver": driver, "nncert": "0.1.0"}))
    return d


@pytest.mark.parametrize("case, message", [
    ("not a campaign", "NOPE is not a fuzz campaign's directory (no summary.json)"),
    ("out is an input", "--out A is one of the campaigns being merged: merge into a new directory"),
    ("out not empty", "--out OUT is not empty"),
    ("twice", "campaign A given twice"),
    ("targets", "campaigns of different targets: A has target 'validate_model', B has target 'execute'"),
    ("drivers", "campaigns of different drivers"),
])
def test_a_refused_fuzz_merge_is_one_line(tmp_path, capsys, case, message):
    a, b, nope, out = tmp_path / "a", tmp_path / "b", tmp_path / "nope", tmp_path / "out"
    _campaign(a)
    nope.mkdir()
    dirs = {"not a campaign": [a, nope], "out is an input": [a], "out not empty": [a], "twice": [a, a],
            "targets": [a, b], "drivers": [a, b]}[case]
    if case == "targets":
        _campaign(b, "execute")
    if case == "drivers":
        _campaign(b, driver="mutant:drift")
    if case == "out is an input":
        out = a
    if case == "out not empty":
        out.mkdir()
        (out / "x").write_text("")
    before = {d: _tree(d) for d in dirs}
    assert _fuzz("merge", *map(str, dirs), "--out", str(out)) == 2
    err = capsys.readouterr().err
    expected = message.replace("NOPE", str(nope)).replace("OUT", str(out)).replace("A", str(a), 1) \
        .replace(" B ", f" {b} ")
    assert err.count("\n") == 1 and expected in err, err
    assert before == {d: _tree(d) for d in dirs}
    if out not in dirs:
        assert not (out / "summary.json").exists()
