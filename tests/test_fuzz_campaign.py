"""The fuzz campaign runner and ``nncert fuzz`` (VAL-3), on a toy target of our own: a script
that follows the fuzz-script contract, aborts the process on inputs starting with b"CR",
raises a Finding-like exception on b"FI" and (when asked) hangs on b"HA"; with TOY_KEEP_GOING
set it goes on past what Python raises, as the registered targets' scripts do."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nncert.cli import main
from nncert.fuzz import Finding
from nncert.fuzz.campaign import SCRIPTS_DIR, keep_going, minimise, replay, worker_hits

pytest.importorskip("atheris")

pytestmark = pytest.mark.req("VAL-3")

TOY = '''
import os
import sys
import time
from types import SimpleNamespace


class ToyFinding(Exception):
    def key(self) -> str:
        return "toy_oracle|OP_X|BAD_STATUS"


class KnownFinding(Exception):
    test = "conformance/test_operations.py::test_operation[NOT_EQUAL-quant8_asymm-s0]"

    def key(self) -> str:
        return "wrong-result|NOT_EQUAL|NONE"


class UnknownCaseFinding(KnownFinding):
    test = "conformance/test_operations.py::test_operation[NOT_EQUAL-float32-s0]"


def make(driver):
    modes = os.environ.get("TOY_MODES", "CR,FI").split(",")

    def one(data: bytes) -> None:
        if data[:2] == b"CR" and "CR" in modes:
            os.abort()
        if data[:2] == b"FI" and "FI" in modes:
            raise ToyFinding(f"accepted {data[:8]!r} on {driver}")
        if data[:2] == b"KN" and "KN" in modes:
            raise KnownFinding("NOT_EQUAL of equal real values")
        if data[:2] == b"KU" and "KN" in modes:
            raise UnknownCaseFinding("NOT_EQUAL of two floats")
        if data[:2] == b"HA" and "HA" in modes:
            time.sleep(1000)

    return one


TARGET = SimpleNamespace(name="toy", needs_driver=True, make=make,
                         seeds=lambda: [b"xx", b"FJ", b"CR1", b"CR2"],
                         describe=lambda data: f"toy input {data!r}")

if __name__ == "__main__":
    import atheris

    time.sleep(float(os.environ.get("TOY_STARTUP", "0")))  # a slow start (imports, instrumentation)

    argv = sys.argv[:]
    driver = None
    if "--driver" in argv:
        i = argv.index("--driver")
        driver = argv[i + 1]
        del argv[i:i + 2]
    one = make(driver)
    if os.environ.get("TOY_KEEP_GOING"):
        from nncert.fuzz.campaign import keep_going

        one, argv = keep_going(one, argv)
    atheris.Setup(argv, one)
    atheris.Fuzz()
'''

CRASH_KEY = "CRASH|toy.py:one|SIGABRT"
UNKNOWN_CASE = "conformance/test_operations.py::test_operation[NOT_EQUAL-float32-s0]"
FINDING_KEY = "toy_oracle|OP_X|BAD_STATUS"


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    script = tmp_path / "toy.py"
    script.write_text(TOY)
    return script


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]


def test_ctrl_c_ends_the_campaign_with_what_it_found(toy, tmp_path, capsys, monkeypatch):
    """Ctrl-C in the campaign's loop: the workers are stopped, the summary is written and
    printed (saying so), nothing journaled is lost; the status is the findings' or 130."""
    import nncert.fuzz.campaign as campaign

    out, real_sleep, ticks = tmp_path / "out", time.sleep, []

    def sleep(seconds: float) -> None:  # the loop ticks every 0.2 s: Ctrl-C once findings are in
        ticks.append(seconds)
        if (out / "findings.jsonl").exists() and "finding" in (out / "findings.jsonl").read_text() \
                and KeyboardInterrupt not in ticks:
            ticks.append(KeyboardInterrupt)
            raise KeyboardInterrupt
        real_sleep(seconds)

    monkeypatch.setattr(campaign.time, "sleep", sleep)
    code = main(["fuzz", str(toy), "--time", "120", "--jobs", "1", "--timeout", "2", "--seed", "1",
                 "--minimize-time", "1", "--out", str(out)])
    monkeypatch.undo()
    assert KeyboardInterrupt in ticks and code == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and summary["elapsed_s"] < 120 and summary["findings"] >= 1
    assert "interrupted (Ctrl-C) before its time was up" in capsys.readouterr().out
    assert any(r["event"] == "finding" for r in _records(out))


def test_campaign_finds_dedups_journals_and_keeps_going(toy, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["fuzz", str(toy), "--time", "8", "--jobs", "2", "--timeout", "2", "--seed", "1",
                 "--minimize-time", "3", "--progress-every", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1

    records = _records(out)
    findings = {r["key"]: r for r in records if r["event"] == "finding"}
    assert set(findings) == {CRASH_KEY, FINDING_KEY}, findings.keys()
    assert findings[CRASH_KEY]["signal"] == "SIGABRT"
    top = findings[CRASH_KEY]["frames"][0]
    assert top.endswith(" in one") and "toy.py" in top
    assert findings[FINDING_KEY]["message"].startswith("accepted b'FI")
    assert findings[FINDING_KEY]["message"].endswith("on reference")  # the driver reached the target
    # Both crashing seeds crash: one finding, the other a duplicate; the Finding is only found
    # by fuzzing on after the crashes, so the campaign kept going.
    assert any(r["event"] == "duplicate" and r["key"] == CRASH_KEY for r in records)
    assert findings[FINDING_KEY]["elapsed_s"] >= findings[CRASH_KEY]["elapsed_s"]
    assert {r["key"] for r in records if r["event"] == "minimized"} == {CRASH_KEY, FINDING_KEY}

    crash_dir = Path(findings[CRASH_KEY]["dir"])
    assert (crash_dir / "minimized").read_bytes() == b"CR"  # b"CR1" / b"CR2", one byte dropped
    spec = json.loads((crash_dir / "spec.json").read_text())
    assert spec["target"] == "toy" and spec["driver"] == "reference" and spec["key"] == CRASH_KEY
    assert spec["input_hex"] == b"CR".hex() and spec["describe"] == "toy input b'CR'"
    command = (crash_dir / "command.txt").read_text().strip()
    assert command == f"nncert fuzz replay {toy} {crash_dir / 'minimized'} --driver reference"
    assert command == spec["command"]

    summary = json.loads((out / "summary.json").read_text())
    # --time honoured: 8 s of fuzzing from the first worker ready, then the per-input timeout,
    # the minimising and the replays; a generous grace (16 s in all failed once at a load
    # average of 14), as a campaign that ignored --time would not stop at all.
    assert summary["startup_s"] is not None and summary["elapsed_s"] - summary["startup_s"] < 8 + 2 + 30
    assert set(summary["findings_by_key"]) == {CRASH_KEY, FINDING_KEY}
    assert summary["findings_by_key"][CRASH_KEY]["count"] >= 2
    assert summary["duplicates"] >= 1 and summary["worker_runs"] > 2
    assert summary["execs"] > 0  # and their mean rate (the workers' own are gone once they stopped)
    assert summary["exec_per_s"] == round(summary["execs"] / summary["elapsed_s"], 1) > 0
    # the crashing seeds are dropped from the working corpus, or every restart would stop on them
    assert not (out / "corpus" / hashlib.sha1(b"CR1").hexdigest()).exists()

    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert len(progress) >= 3 and all("execs" in p and "corpus" in p and "findings" in p for p in progress)
    assert f"FINDING {FINDING_KEY}" in captured.out and "replay: nncert fuzz replay" in captured.out


def test_a_worker_that_keeps_going_survives_findings_and_still_stops_on_crashes(
        toy, tmp_path, monkeypatch):
    """Issue 23: a Finding no longer ends the worker (each restart reloaded the whole corpus);
    it is written once as a finding- artifact, replayed and recorded as before, and every hit
    is counted. A crash still ends the run, is replayed in isolation and its seed dropped."""
    monkeypatch.setenv("TOY_KEEP_GOING", "1")
    corpus = tmp_path / "extra"
    corpus.mkdir()
    # Seeds that raise and crash as soon as they are loaded (libFuzzer loads the shorter first).
    (corpus / "fi").write_bytes(b"FI")
    (corpus / "cr").write_bytes(b"CR33")
    out = tmp_path / "out"
    code = main(["fuzz", str(toy), "--time", "6", "--timeout", "2", "--seed", "1", "--minimize-time", "1",
                 "--corpus", str(corpus), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 1, summary
    findings = {r["key"]: r for r in _records(out) if r["event"] == "finding"}
    assert set(findings) == {CRASH_KEY, FINDING_KEY}, summary
    assert findings[FINDING_KEY]["artifact_kind"] == "finding"
    assert findings[FINDING_KEY]["message"].startswith("accepted b'FI")
    assert findings[CRASH_KEY]["artifact_kind"] == "crash" and findings[CRASH_KEY]["signal"] == "SIGABRT"
    log = (out / "logs" / "worker-0.log").read_text()
    assert "Uncaught Python exception" not in log  # no run ended on the Finding
    assert log.count("deadly signal") >= summary["worker_runs"] - 1 >= 1, summary  # only crashes end runs
    # each run wrote the Finding's key once, and counted every input that raised it
    assert 1 <= len(list((out / "artifacts").glob("finding-*"))) <= summary["worker_runs"]
    assert summary["worker_hits_by_key"][FINDING_KEY] >= 1
    assert (out / "corpus" / hashlib.sha1(b"FI").hexdigest()).exists()  # it stops no worker: kept
    assert not (out / "corpus" / hashlib.sha1(b"CR33").hexdigest()).exists()


def test_keep_going_writes_a_key_once_counts_every_hit_and_lets_deaths_through(tmp_path):
    def one(data: bytes) -> None:
        if data[:1] == b"F":
            raise Finding("wrong-result", f"bad {data!r}", "ADD", "NONE")
        if data[:1] == b"G":  # the same key on another case: written too
            raise Finding("wrong-result", f"bad {data!r}", "ADD", "NONE", test="t[ADD-G]")
        if data[:1] == b"E":
            raise KeyError(data)
        if data[:1] == b"D":  # a hosted driver died: the worker must restart
            raise Finding("crash", "the service died", "ADD", "DEVICE_UNAVAILABLE")

    hits = tmp_path / "hits"
    argv = ["toy.py", f"--keep-going={hits}", f"-artifact_prefix={tmp_path}/", "corpus"]
    assert keep_going(one, argv[:1] + argv[2:]) == (one, argv[:1] + argv[2:])  # not a worker: as it is
    fn, rest = keep_going(one, argv)
    assert rest == ["toy.py", f"-artifact_prefix={tmp_path}/", "corpus"]
    for data in (b"F1", b"ok", b"F2", b"E1", b"F1", b"G1", b"G2"):
        fn(data)
    with pytest.raises(Finding):
        fn(b"D1")
    written = {p.name for p in tmp_path.glob("finding-*")}
    assert written == {f"finding-{hashlib.sha1(d).hexdigest()}" for d in (b"F1", b"E1", b"G1")}
    exception_key = "EXCEPTION|test_fuzz_campaign.py:one|KeyError"
    assert worker_hits([hits, tmp_path / "none"]) == {"wrong-result|ADD|NONE": 5, exception_key: 1}
    # the worker's keys are the replay's
    toy = SimpleNamespace(name="t", needs_driver=False, make=lambda driver: one)
    assert replay(toy, None, b"F2", 10).key == "wrong-result|ADD|NONE"
    assert replay(toy, None, b"E1", 10).key == exception_key


def test_replay_verdicts_and_exit_codes(toy, tmp_path, capsys):
    finding, crash, clean = tmp_path / "fi", tmp_path / "cr", tmp_path / "ok"
    finding.write_bytes(b"FIxyz")
    crash.write_bytes(b"CRxyz")
    clean.write_bytes(b"hello")
    assert main(["fuzz", "replay", str(toy), str(finding), "--driver", "reference"]) == 1
    out = capsys.readouterr().out
    assert f"FINDING {FINDING_KEY}: accepted b'FIxyz' on reference" in out
    assert "toy input b'FIxyz'" in out
    assert main(["fuzz", "replay", str(toy), str(crash)]) == 1
    assert f"CRASH {CRASH_KEY}: killed by SIGABRT" in capsys.readouterr().out
    assert main(["fuzz", "replay", str(toy), str(clean)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["fuzz", "replay", str(toy), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read it" in err


def test_corpus_writes_seeds_named_by_hash(toy, tmp_path, capsys):
    out = tmp_path / "seeds"
    assert main(["fuzz", "corpus", str(toy), "--out", str(out)]) == 0
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    assert files == {hashlib.sha1(s).hexdigest(): s for s in (b"xx", b"FJ", b"CR1", b"CR2")}
    assert "4 seeds" in capsys.readouterr().out


def test_hang_is_a_finding(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOY_MODES", "HA")
    corpus = tmp_path / "extra"
    corpus.mkdir()
    (corpus / "hang").write_bytes(b"HA!")
    out = tmp_path / "out"
    code = main(["fuzz", str(toy), "--time", "4", "--timeout", "1", "--seed", "1", "--corpus", str(corpus),
                 "--out", str(out)])
    assert code == 1
    findings = [r for r in _records(out) if r["event"] == "finding"]
    assert [f["key"] for f in findings] == ["HANG|toy.py:one|"]
    assert findings[0]["artifact_kind"] == "timeout"


@pytest.mark.parametrize("argv, message", [
    (["fuzz", "no_such_target", "--out", "x"], "fuzz target"),
    (["fuzz", "TOY", "--driver", "no_such_driver", "--out", "x"], "unknown driver 'no_such_driver'"),
    (["fuzz", "TOY", "--jobs", "0", "--out", "x"], "--jobs must be at least 1"),
    (["fuzz", "TOY", "--time", "-1", "--out", "x"], "--time must be positive"),
    (["fuzz", "TOY", "--out", "x", "--", "-fork=2"], "-fork is set by the campaign"),
    (["fuzz", "TOY", "--out", "x", "--", "max_len"], "expected -name=value"),
    (["fuzz", "TOY", "--jobs", "two", "--out", "x"], "invalid int value"),
    (["fuzz", "TOY"], "--out"),
    (["fuzz", "TOY", "--out", "x", "--corpus", "/no/such/dir"], "not a directory"),
    (["fuzz", "replay", "TOY"], "file"),
    (["fuzz", "corpus", "/no/such/script.py", "--out", "x"], "no fuzz script"),
])
def test_usage_errors_are_one_line(toy, tmp_path, capsys, argv, message):
    argv = [str(toy) if a == "TOY" else a for a in argv]
    argv = [str(tmp_path / a) if a == "x" else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_discrepancy_the_driver_expects_is_marked_known(toy, tmp_path, monkeypatch):
    """A finding whose case is a strict xfail of the driver (its expectations.toml) is still
    recorded, marked known with the entry's reason; a new one is not."""
    from nncert.fuzz.campaign import Campaign, CampaignConfig, resolve_target

    monkeypatch.setenv("TOY_MODES", "KN,FI")
    target, script = resolve_target(str(toy))
    said = []
    campaign = Campaign(target, script, "litert", tmp_path / "out", CampaignConfig(time=5, minimise_time=1),
                        progress=said.append)
    for name, data in (("crash-kn", b"KN"), ("crash-fi", b"FI"), ("finding-ku", b"KU")):
        (campaign.artifacts_dir / name).write_bytes(data)
        campaign._scan()
    # the known key again on a case the expectations do not list: said, and journaled as such
    again = [r for r in _records(tmp_path / "out") if r["event"] == "duplicate"]
    assert [(r["test"], r["known"]) for r in again] == [(UNKNOWN_CASE, False)]
    assert any(line.startswith("  finding #1 wrong-result|NOT_EQUAL|NONE again, on " + UNKNOWN_CASE)
               for line in said), said
    known = campaign.findings["wrong-result|NOT_EQUAL|NONE"]["known"]
    assert known["test"].endswith("[NOT_EQUAL-quant8_asymm-s0]")
    assert "fixed-point rescaling" in known["reason"]
    assert known["source"].startswith("litert/expectations.toml")
    assert "known" not in campaign.findings[FINDING_KEY]
    assert campaign._summary()["findings_by_key"]["wrong-result|NOT_EQUAL|NONE"]["known"] == known


def test_minimise_keeps_the_key():
    calls = []

    def same_key(data: bytes) -> bool:
        calls.append(data)
        return b"C" in data and b"R" in data[data.index(b"C"):] if b"C" in data else False

    assert minimise(b"xxxxCxxxxxxRxxxx", "k", same_key, budget=5) == b"CR"
    assert minimise(b"abc", "k", lambda d: False, budget=5) == b"abc"
    assert all(len(c) < 16 for c in calls)


_HAVE_TARGETS = (importlib.util.find_spec("nncert.fuzz.targets") is not None
                 and (SCRIPTS_DIR / "prepare_model.py").is_file())


@pytest.mark.slow
@pytest.mark.skipif(not _HAVE_TARGETS, reason="nncert.fuzz.targets or fuzz/prepare_model.py not there yet")
def test_prepare_model_finds_wrong_acceptance(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["fuzz", "prepare_model", "--driver", "mutant:no_validation", "--time", "60",
                 "--jobs", "2", "--seed", "1", "--minimize-time", "10", "--out", str(out)])
    assert code == 1
    findings = [r for r in _records(out) if r["event"] == "finding"]
    assert findings, capsys.readouterr()
    assert all(r["kind"] == "FINDING" for r in findings), [r["key"] for r in findings]


def test_the_fuzzing_time_counts_from_the_first_worker_ready(toy, tmp_path, monkeypatch):
    """A worker that takes longer to start than the campaign's time still fuzzes for that time
    (the start-up has its own allowance); without the allowance it is stopped before any input."""
    from nncert.fuzz.campaign import Campaign, CampaignConfig, resolve_target

    monkeypatch.setenv("TOY_MODES", "")
    monkeypatch.setenv("TOY_STARTUP", "2")
    monkeypatch.setenv("TOY_KEEP_GOING", "1")  # the registered scripts' contract (exact counts)
    target, script = resolve_target(str(toy))
    ran = Campaign(target, script, None, tmp_path / "a", CampaignConfig(time=1, seed=1)).run()
    assert ran["execs"] > len(target.seeds()) and ran["startup_s"] >= 2, ran
    cut = Campaign(target, script, None, tmp_path / "b", CampaignConfig(time=1, seed=1, startup=0)).run()
    assert cut["execs"] == 0 and cut["startup_s"] is None, cut


def test_the_driver_is_checked_in_a_child_and_never_loaded_here(tmp_path, monkeypatch):
    """The campaign and the replay run each input in a fork of the nncert process, which loads
    the driver afresh: a runtime loaded in that process first is inherited half-alive (TVM's
    executor thread is gone in the fork, so every TVM replay waited on it: HANG). So the spec
    is checked by loading it in a child, and what is wrong with it is still one line."""
    from nncert.cli import _check_driver
    from nncert.drivers import DriverSpecError
    from nncert.fuzz.targets import TARGETS

    (tmp_path / "fz_checked_driver.py").write_text(
        "from pathlib import Path\n"
        "from nncert.drivers import driver_factory, load_driver\n\n"
        "@driver_factory\n"
        "def create():\n"
        f"    Path({str(tmp_path / 'made')!r}).touch()\n"
        "    return load_driver('reference')\n\n"
        "@driver_factory\n"
        "def broken():\n"
        "    raise OSError('cannot open /dev/npu0')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = TARGETS["prepare_model"]
    assert _check_driver(target, "fz_checked_driver:create") == "fz_checked_driver:create"
    assert (tmp_path / "made").exists() and "fz_checked_driver" not in sys.modules
    with pytest.raises(DriverSpecError, match=r"could not be started: .*cannot open /dev/npu0"):
        _check_driver(target, "fz_checked_driver:broken")


def test_a_hang_without_a_frame_of_its_own_is_keyed_by_its_models_operations(monkeypatch):
    """A hang in a child the target waits on (the support probe's) or in a runtime's native
    loop leaves no frame of its own: keyed HANG|| alone, a TVM campaign's hangs in ROI_ALIGN,
    AVERAGE_POOL_2D, MAX_POOL_2D, TRANSPOSE_CONV_2D and GENERATE_PROPOSALS were one finding and
    four duplicates. The model's operations tell them apart."""
    import nncert.fuzz.campaign as campaign
    from nncert.fuzz import decode as dec
    from nncert.fuzz.targets import TARGETS

    def make(_driver):
        def one(_data):
            time.sleep(1000)
        return one

    monkeypatch.setattr(campaign, "_dump_frames", lambda _text: [])  # as the probe's wait leaves it
    pool = dec.encode_case(next(i for i, k in enumerate(dec.cases()) if k.id.startswith("MAX_POOL_2D-")))
    target = SimpleNamespace(name="sleepy", needs_driver=False, make=make, seeds=lambda: [],
                             describe=repr, operations=TARGETS["prepare_model"].operations)
    assert replay(target, None, pool, timeout=1).key == "HANG|MAX_POOL_2D|"
    del target.operations  # a script's own TARGET need not say
    assert replay(target, None, pool, timeout=1).key == "HANG||"
