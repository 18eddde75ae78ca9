"""`nncert certify` end to end, on a small plan of every suite family: the golden driver is
CONFORMANT, LiteRT's known discrepancies are WAIVED, mutants of different requirement families
are NOT CONFORMANT with the broken requirement FAIL, a crash is recorded and later suites run,
a run SIGKILLed and resumed equals one never interrupted, `verify` catches each kind of
tampering, `diff` names a regression, and bad input is a one-line error."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import background_runs
import pytest

from nncert.certify import journal, verdict
from nncert.certify.plan import PlanError, known_plans, load_plan, parse_plan
from nncert.certify.report import MANIFEST_FILE, manifest_lines
from nncert.resources import suites_root

#: A few tests of each family; the mutants below each break one of them.
MINI_PLAN = """
name = "mini"
description = "a few tests of every suite family, for nncert's own tests"
test_timeout = 120

[[suite]]
name = "operations"
paths = ["conformance/test_operations.py"]
args = ["-k", "test_operation[ and s0] and (ADD-float32 or ADD-quant8_asymm- or NOT_EQUAL-quant8_asymm-)"]

[[suite]]
name = "validation"
paths = ["conformance/test_validation.py"]
args = ["-k", "ADD-float32 and mutated_model"]

[[suite]]
name = "execution"
paths = ["conformance/test_execution.py"]
args = ["-k", "test_timing[ADD-float32 or test_every_path_gives_the_same_results[ADD-float32-none"]

[[suite]]
name = "caching"
paths = ["conformance/test_caching.py"]
args = ["-k", "float and (model_cache_with_bytes_appended or save_and_retrieve)"]

[[suite]]
name = "memory_domains"
paths = ["conformance/test_memory_domains.py"]
args = ["-k", "float32-sync and (execution_bad_token or buffer_of_another_prepared_model)"]
"""

#: One suite whose first test hangs (an in-process driver that never returns) and a short limit.
HANG_PLAN = """
name = "hang"
test_timeout = 4

[[suite]]
name = "operations"
paths = ["conformance/test_operations.py"]
args = ["-k", "test_operation[ and s0] and (ADD-float32-none or NOT_EQUAL-quant8_asymm-)"]
"""

#: What a vendor passes with --expectations: quant_off_by_2's fault on the mini plan's cases.
VENDOR_EXPECTATIONS = """
[[xfail]]
test = "conformance/test_operations.py::test_operation[ADD-quant8_asymm-*"
reason = "our requantisation rounds two steps up (ticket NPU-123)"
magnitude = "2 steps"
"""

#: mutant -> (the suite that catches it, the requirement it breaks): four requirement families.
MUTANTS = {
    "quant_off_by_2": ("operations", "ACC-2"),
    "no_validation": ("validation", "VAL-1"),
    "timing_inverted": ("execution", "EXE-7"),
    "trusts_cache": ("caching", "CACHE-4"),
    "ignores_roles": ("memory_domains", "MEM-4"),
}


def certify(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nncert.cli", "certify", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def statuses(report: dict) -> dict[tuple[str, str], str | None]:
    return {(t["suite"], t["id"]): t["status"] for t in report["tests"]}


def _shared() -> Path:
    """The session's directory of this module's certification runs and their input files
    (tests/background_runs.py): every pytest-xdist worker names the same runs."""
    base = background_runs.scratch() / "certify"
    base.mkdir(exist_ok=True)
    inputs = {"mini.toml": MINI_PLAN, "vendor.toml": VENDOR_EXPECTATIONS, "hang.toml": HANG_PLAN}
    for name, text in inputs.items():
        if not (base / name).exists():  # each worker writes the same text, whole, under its name
            tmp = base / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            os.replace(tmp, base / name)
    return base


def _runs() -> dict[str, background_runs.Run]:
    """Every certification run of this module, by name: background runs, queued at collection
    and run once in the session however many workers run this module's tests."""
    base = _shared()
    cli = (sys.executable, "-m", "nncert.cli", "certify")

    def run(name: str, *args: str) -> background_runs.Run:
        # --out relative to the working directory, as a user types it.
        return background_runs.Run((*cli, "--out", name, "--plan", str(base / "mini.toml"), *args), str(base))

    runs = {"reference": run("reference", "--driver", "reference"),
            "litert": run("litert", "--driver", "litert")}
    for name, (suite, _) in MUTANTS.items():
        # quant_off_by_2 runs the whole plan: the diff test compares it with the reference.
        whole = name == "quant_off_by_2"
        runs[name] = run(name, "--driver", f"mutant:{name}", *([] if whole else ["--suites", suite]))
    runs["crash"] = run("crash", "--driver", "mutant:crash,op=ADD", "--suites", "operations,validation")
    # A vendor's own expectations file, naming the fault as known.
    runs["waived"] = run("waived", "--driver", "mutant:quant_off_by_2",
                         "--expectations", str(base / "vendor.toml"))
    # One process (--jobs 1): the hang kills the suite's pytest, which starts again isolated (on
    # two xdist workers the other test finishes beside it: tests/test_certify_jobs.py).
    runs["hang"] = background_runs.Run((*cli, "--out", str(base / "hang"), "--plan", str(base / "hang.toml"),
                                        "--driver", "mutant:hang,op=ADD", "--jobs", "1"), str(base))
    return runs


def runs_to_start(item) -> list[background_runs.Run]:
    return list(_runs().values()) if "runs" in item.fixturenames else []


@pytest.fixture(scope="module")
def mini() -> Path:
    return _shared() / "mini.toml"


@pytest.fixture(scope="module")
def runs():
    """The certification run of a name: (its finished process, its output directory)."""
    base, runs = _shared(), _runs()

    def result(name: str) -> tuple[subprocess.CompletedProcess, Path]:
        return background_runs.run(runs[name], timeout=1500), base / name

    return result


def test_reference_is_conformant_and_its_report_verifies(runs):
    proc, out = runs("reference")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = report_of(out)
    assert report["verdict"]["overall"] == verdict.CONFORMANT
    assert proc.stdout.startswith("CONFORMANT: reference")
    for name in ("report.html", "junit.xml", "tables/tests.csv", "tables/requirements.csv", MANIFEST_FILE):
        assert (out / name).is_file(), name
    assert all(s["state"] == "finished" for s in report["suites"])
    assert report["requirements"]["ACC-2"]["verdict"] == "PASS"
    assert report["requirements"]["MLTS-1"]["verdict"] == "NOT TESTED"  # not in this plan, and said so
    assert report["driver"]["version_string"].startswith("nncert-reference")
    assert report["plan"]["sha256"] == hashlib.sha256(MINI_PLAN.encode()).hexdigest()
    # JUnit: a testsuite per suite; requirement IDs as a plain comma-separated string.
    junit = ET.parse(out / "junit.xml").getroot()
    assert [s.get("name") for s in junit] == [s["name"] for s in report["suites"]]
    req = junit.find(".//testcase/properties/property[@name='requirements']").get("value")
    assert "," in req and "[" not in req and "'" not in req
    html = (out / "report.html").read_text()
    assert "CONFORMANT" in html and "http://" not in html and "https://" not in html
    check = subprocess.run([sys.executable, "-m", "nncert.cli", "certify", "verify", str(out)],
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr


def test_litert_known_discrepancies_are_waived(runs):
    proc, out = runs("litert")
    report = report_of(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["verdict"]["overall"] == verdict.WITH_WAIVERS
    waived = [t for t in report["tests"] if t["status"] == "WAIVED"]
    assert waived and all(t["expectation"]["reason"] for t in waived)
    assert report["waivers"][0]["source"].startswith("litert/expectations.toml")
    assert report["requirements"]["ACC-3"]["verdict"] == "WAIVED"
    # LiteRT has no memory domains: declined with its reason, the requirement not applicable.
    assert report["requirements"]["MEM-4"]["verdict"] == "NOT APPLICABLE"
    assert all(t["message"] for t in report["tests"] if t["status"] == "DECLINED")


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutants_are_not_conformant(runs, name):
    proc, out = runs(name)
    _, broken = MUTANTS[name]
    report = report_of(out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["verdict"]["overall"] == verdict.NOT_CONFORMANT
    assert report["requirements"][broken]["verdict"] == "FAIL"
    failing = [t for t in report["tests"] if t["status"] == "FAIL"]
    assert all(t["reproduce"].startswith("nncert test ") and f"--driver=mutant:{name}" in t["reproduce"]
               for t in failing)


def test_a_vendors_expectations_file_waives_its_known_failures(runs):
    proc, out = runs("waived")
    report = report_of(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["verdict"]["overall"] == verdict.WITH_WAIVERS
    assert [w["source"] for w in report["waivers"]] == [f"{out.parent.name}/vendor.toml#1"]
    covered = [t for t in report["tests"] if "ADD-quant8_asymm-" in t["id"]]
    # Two steps too high fails most cases; one a fused activation clamps back may pass (stale).
    assert covered and {t["status"] for t in covered} <= {"WAIVED", "XPASS"}
    assert report["requirements"]["ACC-2"]["verdict"] == "WAIVED"
    assert report["run"]["expectations"] == [str(out.parent / "vendor.toml")]


def test_a_crash_is_recorded_and_later_suites_still_run(runs):
    proc, out = runs("crash")
    report = report_of(out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    crashed = [t for t in report["tests"] if t["status"] == "CRASH"]
    assert crashed and all(t["suite"] == "operations" and "ADD" in t["id"] for t in crashed)
    assert "SIGABRT" in " ".join(t["message"] for t in crashed)
    operations, validation = report["suites"][0], report["suites"][1]
    assert operations["state"] == "finished" and operations["starts"] >= 2  # restarted, isolated
    assert operations["counts"].get("PASS", 0) >= 1  # NOT_EQUAL ran after the crashes
    assert validation["state"] == "finished" and validation["counts"] == {"PASS": validation["tests"]}
    assert report["requirements"]["DRV-2"]["verdict"] == "FAIL"


def test_a_hang_is_recorded_and_the_suite_goes_on(runs):
    proc, out = runs("hang")
    report = report_of(out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    by_status = {t["status"]: t for t in report["tests"]}
    assert set(by_status) == {"HANG", "PASS"}
    assert "ADD-float32-none" in by_status["HANG"]["id"] and "NOT_EQUAL" in by_status["PASS"]["id"]
    assert "no outcome within 4 s" in by_status["HANG"]["message"]
    assert report["suites"][0]["state"] == "finished" and report["suites"][0]["starts"] == 2
    assert report["requirements"]["MLTS-2"]["verdict"] == "NOT TESTED"


def test_a_run_killed_then_resumed_equals_one_never_interrupted(runs, mini, tmp_path):
    _, reference = runs("reference")
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "nncert.cli", "certify", "--driver", "reference", "--out",
                             str(out), "--plan", str(mini), "--jobs", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        records = journal.read(out / "journal.jsonl") if (out / "journal.jsonl").exists() else []
        if sum(r["event"] == "outcome" for r in records) >= 12:  # inside the second suite
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = certify("--resume", str(out))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    report = report_of(out)
    assert statuses(report) == statuses(report_of(reference))
    states = journal.replay(journal.read(out / "journal.jsonl"))
    assert not any(s.duplicates for s in states.values())
    assert report["run"]["invocations"] == 2
    check = subprocess.run([sys.executable, "-m", "nncert.cli", "certify", "verify", str(out),
                            "--no-recollect"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout


def _rewrite(out: Path, edit) -> None:
    """Edit report.json and write the manifest again, as a careful forger would."""
    report = report_of(out)
    edit(report)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / MANIFEST_FILE).write_text("".join(line + "\n" for line in manifest_lines(out)))


def _drop_test(report: dict) -> None:
    gone = report["tests"].pop(0)
    for r in report["requirements"].values():
        if gone["id"] in r["tests"]:
            r["tests"].remove(gone["id"])


def _drop_from_journal_too(out: Path) -> None:
    report = report_of(out)
    gone = report["tests"][0]["id"]
    lines = (out / "journal.jsonl").read_text().splitlines(keepends=True)
    kept = [line for line in lines if gone not in line]
    (out / "journal.jsonl").write_text("".join(kept))
    _rewrite(out, _drop_test)


TAMPERING = {
    "edited outcome": (lambda out: _rewrite(out, lambda r: r["tests"][0].update(status="PASS" if
                       r["tests"][0]["status"] != "PASS" else "FAIL")), "the journal's"),
    "edited verdict": (lambda out: _rewrite(out, lambda r: r["verdict"].update(overall="CONFORMANT")),
                       "the overall verdict"),
    "deleted test": (_drop_from_journal_too, "in the plan but not in the report"),
    "changed file": (lambda out: (out / "logs" / "operations.log").write_text("nothing failed\n"),
                     "was changed after the report was written"),
    "added file": (lambda out: (out / "extra.txt").write_text("x"), "not in the manifest"),
    "edited plan": (lambda out: _rewrite(out, lambda r: r["plan"].update(text=r["plan"]["text"] + "#")),
                    "does not hash"),
}


#: The tampering only the recollection of the plan's suites finds.
RECOLLECTED = {"deleted test"}


@pytest.mark.parametrize("kind", list(TAMPERING))
def test_verify_fails_on_each_kind_of_tampering(runs, tmp_path, kind):
    _, source = runs("quant_off_by_2")  # a report with failures: its outcomes are worth forging
    out = tmp_path / "copy"
    shutil.copytree(source, out)
    tamper, expected = TAMPERING[kind]
    tamper(out)
    # Only a deleted test needs the suites collected again to be found (verify's slowest part:
    # a pytest child per suite, 13 s of CPU); the others are found from the files alone.
    recollect = [] if kind in RECOLLECTED else ["--no-recollect"]
    check = subprocess.run([sys.executable, "-m", "nncert.cli", "certify", "verify", str(out), *recollect],
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 1, check.stdout + check.stderr
    assert expected in check.stdout, check.stdout


def test_diff_names_the_regression(runs, tmp_path):
    _, old = runs("reference")
    _, new = runs("quant_off_by_2")
    as_json = tmp_path / "diff.json"
    proc = subprocess.run([sys.executable, "-m", "nncert.cli", "certify", "diff", str(old), str(new),
                           "--json", str(as_json)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NEW FAILURES" in proc.stdout and "ADD-quant8_asymm" in proc.stdout
    assert "ACC-2: PASS -> FAIL" in proc.stdout
    result = json.loads(as_json.read_text())
    assert result["regressed"] and result["regressions"]["requirements_now_failing"] >= 1
    same = subprocess.run([sys.executable, "-m", "nncert.cli", "certify", "diff", str(old), str(old)],
                          capture_output=True, text=True, timeout=120)
    assert same.returncode == 0 and "no regression" in same.stdout


def _bad(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "nncert.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nncert: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_bad_input_is_a_one_line_error(tmp_path, runs):
    assert "unknown plan 'nope'" in _bad("certify", "--driver", "reference", "--out", str(tmp_path / "a"),
                                         "--plan", "nope")
    assert "has no suite bogus" in _bad("certify", "--driver", "reference", "--out", str(tmp_path / "b"),
                                        "--plan", "smoke", "--suites", "bogus")
    assert "unknown driver 'nosuch'" in _bad("certify", "--driver", "nosuch", "--out", str(tmp_path / "c"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert "not empty" in _bad("certify", "--driver", "reference", "--out", str(tmp_path / "full"))
    assert "not a certification report" in _bad("certify", "verify", str(tmp_path / "full"))
    assert "holds no certification run" in _bad("certify", "--resume", str(tmp_path / "full"))
    _, reference = runs("reference")
    broken = tmp_path / "broken"
    shutil.copytree(reference, broken)
    with open(broken / "journal.jsonl", "r+b") as f:  # a record in the middle overwritten
        f.seek(200)
        f.write(b"\x00garbage\x00")
    assert "corrupted" in _bad("certify", "--resume", str(broken))
    assert "has --driver 'reference'" in _bad("certify", "--resume", str(reference), "--driver", "litert")


# -- pieces, without a run


def test_every_shipped_plan_parses_and_names_options_the_suites_have():
    root = suites_root()
    help_text = subprocess.run([sys.executable, "-m", "nncert.cli", "test", "--help",
                                *(str(root / d) for d in ("conformance", "mlts", "fuzz"))],
                               capture_output=True, text=True, timeout=120).stdout
    assert known_plans() == ["full", "smoke", "standard"]
    for name in known_plans():
        plan = load_plan(name)
        assert [s.name for s in plan.suites] == [s.name for s in load_plan("smoke").suites]
        for suite in plan.suites:
            for arg in suite.args:
                if arg.startswith("--"):
                    assert arg.split("=")[0] in help_text, f"plan {name}, suite {suite.name}: {arg}"
    assert load_plan("smoke").sha256 != load_plan("full").sha256


@pytest.mark.parametrize(("text", "message"), [
    ("name = 'x'", "at least one [[suite]]"),
    ("name = 'x'\n[[suite]]\nname = 'a'\npaths = ['/etc/passwd']", "must lie in"),
    ("name = 'x'\n[[suite]]\nname = 'a'\npaths = ['conformance/x.py']\ntimeout = -1", "positive"),
    ("name = 'x'\nsurprise = 1", "unknown key 'surprise'"),
    ("name = 'x'\n[[suite]]\nname = 'a b'\npaths = ['conformance/x.py']", "letters, digits"),
])
def test_a_malformed_plan_is_refused_with_a_reason(text, message):
    with pytest.raises(PlanError, match=message.replace("[", r"\[")):
        parse_plan(text)


def test_the_journal_drops_a_torn_last_record_and_refuses_a_corrupted_one(tmp_path):
    path = tmp_path / "journal.jsonl"
    with journal.Writer(path) as w:
        w.write({"event": "start", "suite": "s", "id": "t1", "time": 1.0})
        w.write({"event": "outcome", "suite": "s", "id": "t1", "status": "PASS", "req": [], "duration": 0.1,
                 "message": ""}, sync=True)
    with open(path, "ab") as f:
        f.write(b'{"event": "outcome", "suite": "s", "id": "t2", "sta')  # a kill mid-write
    assert [r["id"] for r in journal.read(path)] == ["t1", "t1"]
    journal.cut_torn_tail(path)
    assert path.read_bytes().endswith(b"\n")
    path.write_bytes(b'{"event": "start"}\n' + path.read_bytes())
    with pytest.raises(journal.JournalError, match="line 1"):
        journal.read(path)
    os.symlink(tmp_path / "elsewhere", tmp_path / "link.jsonl")
    with pytest.raises(OSError):
        journal.Writer(tmp_path / "link.jsonl")  # never written through a planted symlink


@pytest.mark.parametrize(("counts", "expected"), [
    ({"PASS": 3, "FAIL": 1}, "FAIL"),
    ({"PASS": 3, "CRASH": 1}, "FAIL"),
    ({"PASS": 3, "HANG": 1, "WAIVED": 2}, "FAIL"),
    ({"PASS": 3, "WAIVED": 1}, "WAIVED"),
    ({"PASS": 1, "DECLINED": 9}, "PASS"),
    ({"XPASS": 1}, "PASS"),
    ({"DECLINED": 4, "SKIPPED": 1}, "NOT APPLICABLE"),
    ({"SKIPPED": 2}, "NOT TESTED"),
    ({}, "NOT TESTED"),
])
def test_requirement_verdict_rules(counts, expected):
    from collections import Counter

    assert verdict.requirement_verdict(Counter(counts)) == expected


def test_overall_verdict_rules():
    assert verdict.overall_verdict({"A": "PASS", "B": "NOT TESTED"}, 0, [])[0] == verdict.CONFORMANT
    assert verdict.overall_verdict({"A": "PASS", "B": "WAIVED"}, 0, [])[0] == verdict.WITH_WAIVERS
    assert verdict.overall_verdict({"A": "FAIL"}, 5, ["suite x deadline"])[0] == verdict.NOT_CONFORMANT
    assert verdict.overall_verdict({"A": "PASS"}, 1, [])[0] == verdict.INCOMPLETE
    assert verdict.overall_verdict({"A": "WAIVED"}, 0, ["suite x error"])[0] == verdict.INCOMPLETE


def test_the_run_never_writes_through_a_planted_symlink(tmp_path):
    from nncert.files import UnsafePathError, own_dir, write_atomic

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "logs").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="is a symlink"):
        own_dir(tmp_path / "logs")
    (tmp_path / "report.json").symlink_to(elsewhere / "victim")
    write_atomic(tmp_path / "report.json", "{}")  # the link is replaced, not followed
    assert not (elsewhere / "victim").exists()
    assert not (tmp_path / "report.json").is_symlink() and (tmp_path / "report.json").read_text() == "{}"


@pytest.mark.parametrize("name", ["smoke", "standard", "full"])
def test_every_builtin_plan_runs_every_conformance_file(name):
    """A conformance file no plan names would be missing from every certification report."""
    from nncert.certify import plan as plans

    named = {p for suite in plans.load_plan(name).suites for p in suite.paths}
    root = Path(__file__).resolve().parent.parent
    files = {f"conformance/{p.name}" for p in (root / "conformance").glob("test_*.py")}
    assert not files - named, f"plan {name} leaves out {sorted(files - named)}"
