"""Files nncert writes, in directories someone else prepared (issue 18; nncert.files,
docs/security.md).

For each writer: a directory with symlinks at the names nncert will use, pointing at a victim
file (0600, known content) leaves the victim as it was, and the writer either refuses with a
one-line error naming the link or writes its own file in place of it; a directory owned by
another user (uid 65534, chowned: root only) is refused with a one-line error naming it; the
state nncert keeps for itself is created 0700 (directories) and 0600 (files). And a fuzz
campaign run again into the same directory keeps the findings of the earlier one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from nncert.drivers import measure
from nncert.drivers.caching import cache_token, prepare_with_cache
from nncert.drivers.reference import ReferenceDriver
from nncert.files import UnsafePathError
from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus, OperandType, OperationType

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"root's own file: nncert must never change it\n"
THEIRS = 65534  # nobody: "another local user"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def untouched(victim: Path, content: bytes = SECRET) -> bool:
    return victim.read_bytes() == content and stat.S_IMODE(victim.stat().st_mode) == 0o600


def plant(directory: Path, names: list[str], target: Path) -> Path:
    """``directory`` (made if need be) with each of ``names`` a symlink to ``target``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).symlink_to(target)
    return directory


@pytest.fixture
def theirs(tmp_path: Path) -> Path:
    """An empty directory that belongs to another local user."""
    if os.geteuid() != 0:
        pytest.skip("needs root: only root can give a directory to another user (chown to uid 65534)")
    path = tmp_path / "theirs"
    path.mkdir()
    os.chown(path, THEIRS, THEIRS)
    return path


def refused(excinfo: pytest.ExceptionInfo, path: Path, why: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message and str(path) in message and why in message, message


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _model():
    b = ModelBuilder()
    x = b.operand(OperandType.TENSOR_FLOAT32, (2,))
    out = b.operand(OperandType.TENSOR_FLOAT32, (2,))
    b.operation(OperationType.ADD, [x, b.constant(OperandType.TENSOR_FLOAT32, np.ones(2, np.float32)),
                                    b.constant(OperandType.INT32, 0)], [out])
    return b.build([x], [out])


# -- the compilation cache (prepare_with_cache) ---------------------------------------------------

def test_cache_files_planted_as_symlinks_are_refused(tmp_path, victim):
    driver = ReferenceDriver(state_dir=str(tmp_path / "state"))
    token = cache_token(_model(), driver).hex()  # predictable: anyone can compute it
    cache = plant(tmp_path / "cache", [f"{token}-model0", f"{token}-data0"], victim)
    with pytest.raises(UnsafePathError) as e:
        prepare_with_cache(driver, _model(), cache)
    refused(e, cache / f"{token}-model0", "is a symlink")
    assert untouched(victim)


def test_a_cache_directory_of_another_user_is_refused(tmp_path, theirs):
    with pytest.raises(UnsafePathError) as e:
        prepare_with_cache(ReferenceDriver(state_dir=str(tmp_path / "state")), _model(), theirs)
    refused(e, theirs, f"owned by uid {THEIRS}")
    assert not any(theirs.iterdir())


def test_a_cache_directory_others_may_write_into_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafePathError) as e:
        prepare_with_cache(ReferenceDriver(state_dir=str(tmp_path / "state")), _model(), shared)
    refused(e, shared, "writable by other users")


def test_cache_and_token_store_are_private(tmp_path):
    driver = ReferenceDriver(state_dir=str(tmp_path / "state"))
    assert prepare_with_cache(driver, _model(), tmp_path / "cache").kind == "miss"
    assert mode(tmp_path / "cache") == 0o700
    assert [mode(p) for p in (tmp_path / "cache").iterdir()] == [0o600, 0o600]
    store = tmp_path / "state" / "reference"
    assert mode(tmp_path / "state") == 0o700 and mode(store) == 0o700
    assert mode(store / "compilation-cache.sqlite") == 0o600


# -- the token store (the driver's state directory) -----------------------------------------------

def _cache_through(driver: ReferenceDriver, tmp_path: Path) -> HalError:
    """Prepare with caching (the driver saves and records the token), then prepare from the
    cache: the HalError that refusal gives."""
    fds = [os.open(tmp_path / n, os.O_RDWR | os.O_CREAT, 0o600) for n in ("m", "d")]
    token = bytes(range(32))
    try:
        driver.prepare_model(_model(), model_cache=fds[:1], data_cache=fds[1:], token=token)
        with pytest.raises(HalError) as e:
            driver.prepare_model_from_cache(None, fds[:1], fds[1:], token)
    finally:
        for fd in fds:
            os.close(fd)
    assert e.value.status is ErrorStatus.GENERAL_FAILURE
    return e.value


def test_token_store_sidecars_planted_as_symlinks_are_refused(tmp_path, victim):
    store = plant(tmp_path / "state" / "reference", ["compilation-cache.sqlite-wal",
                                                     "compilation-cache.sqlite-shm"], victim)
    error = _cache_through(ReferenceDriver(state_dir=str(tmp_path / "state")), tmp_path)
    assert f"{store / 'compilation-cache.sqlite-wal'} is a symlink" in error.message
    assert "\n" not in error.message
    assert untouched(victim)


def test_token_store_database_planted_as_a_symlink_is_refused(tmp_path):
    other = tmp_path / "someone-elses.sqlite"  # another program's database, root's, 0600
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE accounts (name TEXT)")
    other.chmod(0o600)
    before = other.read_bytes()
    plant(tmp_path / "state" / "reference", ["compilation-cache.sqlite"], other)
    error = _cache_through(ReferenceDriver(state_dir=str(tmp_path / "state")), tmp_path)
    assert "compilation-cache.sqlite is a symlink" in error.message
    assert untouched(other, before)


def test_a_state_directory_of_another_user_is_refused(tmp_path, theirs):
    error = _cache_through(ReferenceDriver(state_dir=str(theirs)), tmp_path)
    assert f"{theirs} is owned by uid {THEIRS}" in error.message and "\n" not in error.message
    assert not any(theirs.iterdir())


# -- fuzzing: `fuzz corpus`, a campaign's directory, and a campaign run again ------------------------

class ToyOracleError(Exception):
    """What an oracle raises: its key is what findings are de-duplicated by."""

    def key(self) -> str:
        return f"toy|{self.args[0]}|WRONG"


def _toy_one(data: bytes) -> None:
    if data[:1] in (b"A", b"B", b"C"):
        raise ToyOracleError(data[:1].decode())


TOY = SimpleNamespace(name="toy", needs_driver=False, make=lambda driver: _toy_one,
                      seeds=lambda: [b"xx", b"yy"], describe=lambda data: f"toy input {data!r}")


def _campaign(out: Path):
    from nncert.fuzz.campaign import Campaign, CampaignConfig

    return Campaign(TOY, Path("toy.py"), None, out, CampaignConfig(time=5, minimise_time=0.2))


def _found(campaign, *inputs: bytes) -> None:
    """Findings as a campaign records them: artifacts libFuzzer left, replayed and journaled."""
    for data in inputs:
        (campaign.artifacts_dir / f"crash-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
        campaign._scan()


def _journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]


def test_fuzz_corpus_links_are_replaced_not_followed(tmp_path, victim):
    from nncert.fuzz.campaign import write_seeds

    names = [hashlib.sha1(s).hexdigest() for s in TOY.seeds()]
    corpus = plant(tmp_path / "corpus", names, victim)
    write_seeds(TOY, corpus)
    assert untouched(victim)
    assert {p.name: p.read_bytes() for p in corpus.iterdir()} == dict(zip(names, TOY.seeds(), strict=True))
    assert not any(p.is_symlink() for p in corpus.iterdir())


def test_fuzz_campaign_files_planted_as_links_are_replaced_not_followed(tmp_path, victim):
    out = plant(tmp_path / "out", ["logs/worker-0.log", "summary.json",
                                   f"corpus/{hashlib.sha1(b'xx').hexdigest()}"], victim)
    campaign = _campaign(out)
    _found(campaign, b"A1")
    campaign._summary()
    assert untouched(victim)
    for name in ("logs/worker-0.log", "summary.json", f"corpus/{hashlib.sha1(b'xx').hexdigest()}"):
        assert not (out / name).is_symlink(), name
    assert json.loads((out / "summary.json").read_text())["findings"] == 1


def test_a_fuzz_journal_planted_as_a_link_is_refused(tmp_path, victim):
    out = plant(tmp_path / "out", ["findings.jsonl"], victim)
    with pytest.raises(UnsafePathError) as e:
        _campaign(out)
    refused(e, out / "findings.jsonl", "is a symlink")
    assert untouched(victim)


def test_a_fuzz_out_of_another_user_is_refused(theirs):
    from nncert.fuzz.campaign import write_seeds

    for write in (_campaign, lambda out: write_seeds(TOY, out)):
        with pytest.raises(UnsafePathError) as e:
            write(theirs)
        refused(e, theirs, f"owned by uid {THEIRS}")
    assert not any(theirs.iterdir())


def test_a_second_campaign_keeps_the_findings_and_numbers_of_the_first(tmp_path):
    out = tmp_path / "out"
    first = _campaign(out)
    _found(first, b"A1", b"B1")  # findings #1 (toy|A) and #2 (toy|B)
    earlier = (out / "findings.jsonl").read_text()
    assert [r["number"] for r in _journal(out) if r["event"] == "finding"] == [1, 2]

    second = _campaign(out)
    assert (out / "findings.jsonl").read_text() == earlier  # not emptied
    _found(second, b"A2", b"C2")  # toy|A again: a duplicate; toy|C is new, number 3
    records = _journal(out)
    assert [(r["number"], r["key"]) for r in records if r["event"] == "finding"] == \
        [(1, "toy|A|WRONG"), (2, "toy|B|WRONG"), (3, "toy|C|WRONG")]
    assert [r["key"] for r in records if r["event"] == "duplicate"] == ["toy|A|WRONG"]
    assert sorted(p.name for p in (out / "findings").iterdir()) == \
        ["001-toy_A_WRONG", "002-toy_B_WRONG", "003-toy_C_WRONG"]
    assert (out / "findings" / "001-toy_A_WRONG" / "original").read_bytes() == b"A1"  # kept
    summary = second._summary()
    assert summary["findings"] == 1 and summary["duplicates"] == 1 and summary["earlier_findings"] == 2
    found = summary["findings_by_key"]
    assert set(found) == {"toy|A|WRONG", "toy|C|WRONG"}  # what this campaign met; toy|B stays journaled
    assert found["toy|A|WRONG"]["earlier"] and found["toy|A|WRONG"]["number"] == 1
    assert found["toy|A|WRONG"]["command"].endswith(str(out / "findings" / "001-toy_A_WRONG" / "minimized"))
    assert not found["toy|C|WRONG"]["earlier"] and found["toy|C|WRONG"]["count"] == 1


# -- mlts stress: the journal and summaries ---------------------------------------------------------

def test_stress_journal_links_are_replaced_not_followed(tmp_path, victim):
    from nncert.mlts.stress import Journal

    out = plant(tmp_path / "stress", ["journal.jsonl", "summary.csv", "summary.json"], victim)
    journal = Journal(out)
    journal.append({"mode": "inference", "kind": "SUCCESS", "duration_s": 0.1, "reason": ""})
    frame = journal.summarise()
    assert untouched(victim)
    assert list(frame["mode"]) == ["inference"] and journal.records()[0]["kind"] == "SUCCESS"
    assert not any(p.is_symlink() for p in out.iterdir())


def test_a_stress_out_of_another_user_is_refused(theirs):
    from nncert.mlts.stress import Journal

    with pytest.raises(UnsafePathError) as e:
        Journal(theirs)
    refused(e, theirs, f"owned by uid {THEIRS}")


# -- measured capabilities: the lock and the figures ------------------------------------------------

@pytest.fixture
def measuring(monkeypatch, tmp_path):
    """measured_capabilities with $NNCERT_CACHE_DIR in tmp_path and no real measuring."""
    monkeypatch.setattr(measure, "_memo", {})
    figures = dict.fromkeys({*measure.FAMILY.values(), "relaxed"}, 1.5)
    monkeypatch.setattr(measure, "measure", lambda driver: figures)

    def at(directory: Path):
        monkeypatch.setenv("NNCERT_CACHE_DIR", str(directory))
        return measure.measured_capabilities(ReferenceDriver())

    return at


def test_measure_lock_and_figures_planted_as_links_are_refused(tmp_path, victim, measuring):
    cache = tmp_path / "cache"
    created = tmp_path / "nologin"  # a dangling link: following it would create this file
    plant(cache, ["capabilities.json", f"capabilities.{os.getpid()}.tmp"], victim)
    plant(cache, ["capabilities.lock"], created)
    with pytest.raises(UnsafePathError) as e:
        measuring(cache)
    refused(e, cache / "capabilities.lock", "is a symlink")
    assert untouched(victim) and not os.path.lexists(created)


def test_measured_figures_are_private(tmp_path, measuring):
    cache = tmp_path / "cache"
    measuring(cache)
    assert mode(cache) == 0o700
    assert mode(cache / "capabilities.lock") == 0o600 and mode(cache / "capabilities.json") == 0o600


def test_a_measure_directory_of_another_user_is_refused(theirs, measuring):
    with pytest.raises(UnsafePathError) as e:
        measuring(theirs)
    refused(e, theirs, f"owned by uid {THEIRS}")
    assert not any(theirs.iterdir())


# -- certification: the report's files and --out ----------------------------------------------------

def test_certify_report_files_planted_as_links_are_replaced_not_followed(tmp_path, victim):
    from nncert.certify import report as reports
    from nncert.certify.plan import load_plan
    from nncert.certify.runner import RunSettings

    names = ["report.json", "report.html", "junit.xml", "MANIFEST.sha256", "tables/tests.csv"]
    out = plant(tmp_path / "out", names, victim)
    plan = load_plan("smoke")
    settings = RunSettings("reference", "smoke", plan.sha256, [s.name for s in plan.suites])
    settings.save(out)
    reports.write(out, reports.build(out, plan, settings))
    assert untouched(victim)
    assert not any((out / n).is_symlink() for n in names)
    assert json.loads((out / "report.json").read_text())["plan"]["name"] == "smoke"


def test_mlts_report_links_are_replaced_not_followed(tmp_path, victim):
    from nncert.mlts import report

    names = ["summary.csv", "summary.json", "meta.json", "report.html"]
    out = plant(tmp_path / "mlts", names, victim)
    report.write([], out, {"driver": "reference"})
    assert untouched(victim)
    assert not any((out / n).is_symlink() for n in names)


def test_graph_specs_replace_a_link_in_their_place(tmp_path, victim):
    from nncert.testing.graphs import Cell, save_spec, seeded

    spec = plant(tmp_path / "graphs", ["failure.json"], victim) / "failure.json"
    save_spec(spec, seeded(Cell.parse("small-float32-rank2"), 0))
    assert untouched(victim) and json.loads(spec.read_text())["cell"] == "small-float32-rank2"


# -- the command line: one line naming the directory, a non-zero exit, no traceback -------------------

def _nncert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nncert.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.parametrize("command", [
    ["certify", "--driver", "nosuch", "--out", "DIR"],
    ["fuzz", "corpus", "burst", "--out", "DIR"],
    ["fuzz", "validate_model", "--time", "1", "--out", "DIR"],
    ["mlts", "stress", "--modes", "inference", "--duration", "0.1", "--out", "DIR"],
    ["graphs", "--cell", "small-float32-rank2", "--graphs", "1", "--out", "DIR"],
    ["repro", "SPEC", "--cache-dir", "DIR"],
], ids=lambda c: " ".join(c[:2]))
def test_the_cli_refuses_a_directory_of_another_user_in_one_line(command, theirs, tmp_path):
    from nncert.testing.graphs import Cell, save_spec, seeded

    spec = tmp_path / "graph.json"
    save_spec(spec, seeded(Cell.parse("small-float32-rank2"), 0))
    proc = _nncert(*[str(theirs) if a == "DIR" else str(spec) if a == "SPEC" else a for a in command])
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("nncert: error:") and str(theirs) in lines[0] \
        and f"owned by uid {THEIRS}" in lines[0], proc.stderr
    assert not any(theirs.iterdir())


def test_certify_refuses_an_out_that_is_a_symlink(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere)
    proc = _nncert("certify", "--driver", "nosuch", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"nncert: error: {tmp_path / 'out'} is a symlink: nncert writes only " \
                                  f"into a directory of its own, not through a link"
