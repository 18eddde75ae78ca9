"""`nncert certify --jobs N` runs suites side by side and gives the slots no suite waits for to
pytest-xdist workers of the suite starting (an exclusive suite: alone, serially); on workers it
certifies exactly as `--jobs 1` does: the same outcome test by test, the same verdicts, a
report that verifies, one journal record of each start and outcome (the workers write them;
the controller only the CRASH of a test whose worker died), a crash recorded once. A run
killed mid-suite and resumed runs only what has no outcome."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from nncert.certify import journal
from nncert.certify.plan import Suite
from nncert.certify.runner import suite_workers

#: A suite where the crash mutant kills the process in 4 of 19 tests (the others pass; not the
#: short deadlines, which expire before the crash or not, as the machine's load has it, nor the
#: tests that run the ADD model more often: every priority and preference, the generous deadline,
#: the warm burst's first run), and an exclusive one it passes; both quick to collect in every
#: worker. The qos slice names the tests it takes, so that new qos tests stay out of it.
PLAN = """
name = "jobs"
description = "a suite with crashes, and an exclusive one, for the --jobs tests"
test_timeout = 120

[[suite]]
name = "qos"
paths = ["conformance/test_qos.py"]
args = ["-k", "(with_a_deadline or with_a_past_deadline or stops_at_its_deadline) and not short \
and not generous and not burst-warm and not fenced-no-wait"]

[[suite]]
name = "caching"
paths = ["conformance/test_caching.py"]
args = ["-k", "float and model_cache_with_bytes_appended"]
exclusive = true
"""
DRIVER = "mutant:crash,op=ADD"


def nncert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nncert.cli", *args], capture_output=True, text=True,
                          timeout=600)


def certify(out: Path, plan: Path, jobs: int) -> subprocess.CompletedProcess:
    return nncert("certify", "--driver", DRIVER, "--plan", str(plan), "--out", str(out), "--jobs", str(jobs))


def statuses(out: Path) -> dict[tuple[str, str], str | None]:
    tests = json.loads((out / "report.json").read_text())["tests"]
    return {(t["suite"], t["id"]): t["status"] for t in tests}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, tuple[subprocess.CompletedProcess, Path]]:
    base = tmp_path_factory.mktemp("jobs")
    (base / "jobs.toml").write_text(PLAN)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {j: pool.submit(certify, base / f"jobs{j}", base / "jobs.toml", j) for j in (1, 2)}
    return {jobs: (future.result(), base / f"jobs{jobs}") for jobs, future in futures.items()}


def test_jobs_2_certifies_as_jobs_1_does_test_by_test(runs):
    (serial, serial_out), (spread, spread_out) = runs[1], runs[2]
    assert serial.returncode == spread.returncode == 1, serial.stderr + spread.stderr
    one, two = statuses(serial_out), statuses(spread_out)
    assert len(one) == 19 + 1 and Counter(one.values()) == {"PASS": 16, "CRASH": 4}
    assert one == two
    reports = [json.loads((out / "report.json").read_text()) for out in (serial_out, spread_out)]
    assert reports[0]["verdict"] == reports[1]["verdict"]
    assert {k: r["verdict"] for k, r in reports[0]["requirements"].items()} == \
           {k: r["verdict"] for k, r in reports[1]["requirements"].items()}
    # Without collecting the plan again (tests/test_certify.py checks that): the journal against
    # the report, one outcome a test, the verdicts, the manifest.
    check = nncert("certify", "verify", str(spread_out), "--no-recollect")
    assert check.returncode == 0, check.stdout + check.stderr


def test_suites_run_on_workers_and_an_exclusive_one_serially(runs):
    _, out = runs[2]
    commands = {r["suite"]: r["command"] for r in journal.read(out / "journal.jsonl")
                if r["event"] == "suite" and r["state"] == "started"}
    assert " -n 2 " in commands["qos"] and " -n " not in commands["caching"]
    assert json.loads((out / "report.json").read_text())["run"]["jobs"] == 2


def test_every_start_and_outcome_is_journaled_once(runs):
    _, out = runs[2]
    records = journal.read(out / "journal.jsonl")
    outcomes = Counter(r["id"] for r in records if r["event"] == "outcome")
    assert len(outcomes) == 20 and set(outcomes.values()) == {1}
    # One collected record each time a suite's pytest started (the first worker's), never one a worker.
    started = Counter(r["suite"] for r in records if r["event"] == "suite" and r["state"] == "started")
    assert Counter(r["suite"] for r in records if r["event"] == "collected") == started
    # A test runs again only after the suite's pytest was restarted (here: the tests cut short
    # when a worker died ended that child): never two starts in one child.
    children: dict[str, int] = Counter()  # each suite's pytest processes so far
    starts = Counter()
    for r in records:
        if r["event"] == "suite" and r["state"] == "started":
            children[r["suite"]] += 1
        elif r["event"] == "start":
            starts[r["suite"], children[r["suite"]], r["id"]] += 1
    assert len(starts) >= 20 and set(starts.values()) == {1}


def test_a_crash_on_a_worker_is_recorded_once_as_crash(runs):
    _, out = runs[2]
    records = journal.read(out / "journal.jsonl")
    crashed = [r for r in records if r["event"] == "outcome" and r["status"] == "CRASH"]
    assert len(crashed) == 4 == len({r["id"] for r in crashed})
    assert all("SIGABRT" in r["message"] for r in crashed), [r["message"] for r in crashed]
    # The first crash ended the suite's pytest (--max-worker-restart=0): the rest ran isolated.
    qos = json.loads((out / "report.json").read_text())["suites"][0]
    assert qos["name"] == "qos" and qos["state"] == "finished" and qos["starts"] >= 2


@pytest.mark.slow
def test_a_run_on_workers_killed_then_resumed_runs_only_what_has_no_outcome(runs, tmp_path):
    _, reference = runs[1]
    out, plan = tmp_path / "killed", reference.parent / "jobs.toml"
    proc = subprocess.Popen([sys.executable, "-m", "nncert.cli", "certify", "--driver", DRIVER, "--plan",
                             str(plan), "--out", str(out), "--jobs", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        records = journal.read(out / "journal.jsonl") if (out / "journal.jsonl").exists() else []
        if sum(r["event"] == "outcome" for r in records) >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1)
    size = (out / "journal.jsonl").stat().st_size
    time.sleep(3)  # the suite's pytest and its workers died with the runner: nothing journals now
    assert (out / "journal.jsonl").stat().st_size == size
    before = {r["id"] for r in journal.read(out / "journal.jsonl") if r["event"] == "outcome"}
    resumed = nncert("certify", "--resume", str(out))
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert statuses(out) == statuses(reference)
    records = journal.read(out / "journal.jsonl")
    assert not any(s.duplicates for s in journal.replay(records).values())
    invocations = [i for i, r in enumerate(records) if r["event"] == "run"]
    again = {r["id"] for r in records[invocations[-1]:] if r["event"] == "start"}
    assert before and not again & before, "the resumed run ran tests that had an outcome"


@pytest.mark.slow
def test_tests_hanging_on_workers_are_each_a_hang_and_the_others_run_again(tmp_path):
    """Both workers stuck at once: each past the deadline is a HANG, what else was in flight runs
    again, and the outcomes are the serial run's."""
    plan = tmp_path / "hang.toml"
    qos_only = PLAN.split('[[suite]]\nname = "caching"')[0]
    plan.write_text(qos_only.replace("test_timeout = 120", "test_timeout = 6"))
    outs = {jobs: tmp_path / f"hang{jobs}" for jobs in (1, 2)}

    def run(jobs: int) -> subprocess.CompletedProcess:
        return nncert("certify", "--driver", "mutant:hang,op=ADD", "--plan", str(plan),
                      "--out", str(outs[jobs]), "--jobs", str(jobs))

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(run, (1, 2)))
    assert [d.returncode for d in done] == [1, 1], done[1].stderr
    one, two = statuses(outs[1]), statuses(outs[2])
    assert one == two and Counter(one.values()) == {"PASS": 15, "HANG": 4}
    records = journal.read(outs[2] / "journal.jsonl")
    outcomes = Counter(r["id"] for r in records if r["event"] == "outcome")
    assert len(outcomes) == 19 and set(outcomes.values()) == {1}
    qos = json.loads((outs[2] / "report.json").read_text())["suites"][0]
    assert qos["state"] == "finished"


def test_slots_go_to_suites_side_by_side_and_the_spare_ones_to_xdist_workers():
    def suite(name: str, exclusive: bool = False) -> Suite:
        return Suite(name, name, ("conformance/test_qos.py",), (), 60.0, 60.0, exclusive)

    plan = [suite(f"s{i}") for i in range(5)] + [suite("mlts", exclusive=True)]
    # --jobs 2 over a plan of many suites: one process each, side by side
    assert suite_workers(plan[0], 2, plan[1:]) == 1 and suite_workers(plan[1], 1, plan[2:]) == 1
    # the last one, with both slots free (an exclusive suite waits for none): both
    assert suite_workers(plan[4], 2, plan[5:]) == 2
    assert suite_workers(plan[4], 1, plan[5:]) == 1
    # --jobs 8: what the suites waiting will not need goes to the one starting
    assert suite_workers(plan[0], 8, plan[1:]) == 4
    assert suite_workers(plan[5], 8, []) == 1  # exclusive: alone, in one process


def _append(path: Path, writer_id: int, count: int) -> None:
    """In a child process: ``count`` large records, each written a few hundred bytes per ``write``
    (as when the kernel cuts writes short), which only the journal's lock keeps whole."""
    real = os.write

    def short_write(fd: int, data: bytes) -> int:
        time.sleep(0)
        return real(fd, bytes(data[:700]))

    journal.os.write = short_write  # this child's module only
    with journal.Writer(path) as writer:
        for n in range(count):
            writer.write({"event": "start", "suite": f"w{writer_id}", "id": f"{n}:" + "x" * 5000})


def test_concurrent_writers_never_interleave_records(tmp_path):
    path = tmp_path / "journal.jsonl"
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_append, args=(path, w, 40)) for w in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0] * 4
    records = journal.read(path)  # a torn or interleaved line would not parse
    assert Counter(r["suite"] for r in records) == {f"w{w}": 40 for w in range(4)}
    for w in range(4):
        ids = [r["id"] for r in records if r["suite"] == f"w{w}"]
        assert ids == [f"{n}:" + "x" * 5000 for n in range(40)]
