"""The MLTS-2 stress engine and ``nncert mlts stress``: every mode passes on the reference, a
faulty driver is classified CRASH / HANG / FAILURE (in the case process, in a client process,
in a thread), the journal survives a killed run, bad arguments are one-line errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nncert.cli import main
from nncert.drivers import driver_factory, load_driver
from nncert.drivers.reference import ReferenceDriver, ReferencePreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model
from nncert.hal.types import ErrorStatus
from nncert.mlts.stress import DECLINED, MODES, StressConfig, run_case

ROOT = Path(__file__).resolve().parent.parent
HERE = "tests.test_mlts_stress"  # this module as load_driver reaches it from a child process


class FaultyPreparedModel(ReferencePreparedModel):
    def __init__(self, model: Model, fault: str) -> None:
        super().__init__(model)
        self.fault = fault

    def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        if self.fault == "abort":
            os.abort()
        if self.fault == "hang":
            time.sleep(3600)
        return [o + np.asarray(0.01, o.dtype) for o in super().compute(inputs)]  # "wrong"


class FaultyDriver(ReferenceDriver):
    """The reference driver whose executions abort, hang, or return slightly wrong outputs."""

    name = "faulty"

    def __init__(self, fault: str) -> None:
        super().__init__()
        if fault not in ("abort", "hang", "wrong"):
            raise ValueError(f"unknown fault {fault!r}")
        self.fault = fault

    def prepare_model(self, model: Model, *args, **kwargs) -> FaultyPreparedModel:
        return FaultyPreparedModel(super().prepare_model(model, *args, **kwargs).model, self.fault)


@driver_factory  # named by an import path (tests.test_mlts_stress:faulty:FAULT)
def faulty(fault: str) -> FaultyDriver:
    return FaultyDriver(fault)


class MarkingDriver(ReferenceDriver):
    """Leaves a file named after its process, saying whether it was closed."""

    def __init__(self, marks: str) -> None:
        super().__init__()
        self.mark = Path(marks) / str(os.getpid())
        self.mark.write_text("open")

    def close(self) -> None:
        self.mark.write_text("closed")


class FragileDriver(ReferenceDriver):
    """Keeps a file per client process and stops preparing models once one was left behind by
    a process that died: a driver that does not recover from a killed client."""

    def __init__(self, state: str) -> None:
        super().__init__()
        self.state = Path(state)
        self.mine = self.state / str(os.getpid())
        self.mine.write_text("")

    def prepare_model(self, model: Model, *args, **kwargs) -> ReferencePreparedModel:
        for f in self.state.iterdir():
            try:
                os.kill(int(f.name), 0)
            except ProcessLookupError:
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"state of dead client {f.name} left behind") from None
        return super().prepare_model(model, *args, **kwargs)

    def close(self) -> None:
        self.mine.unlink(missing_ok=True)


class DecliningDriver(ReferenceDriver):
    """Claims no operation (a driver for other kinds of models); its models still validate."""

    name = "declining"

    def supported_operations(self, model: Model) -> list[bool]:
        super().supported_operations(model)
        return [False] * len(model.main.operations)


class HostedDriver(ReferenceDriver):
    """Stands for a driver hosted as a service: other processes attach with ``attach_spec``."""

    def __init__(self, marks: Path) -> None:
        super().__init__()
        self.attach_spec = f"{HERE}:MarkingDriver:{marks}"


def quick(**kwargs) -> StressConfig:
    return StressConfig(**{"duration": 0.3, "margin": 2.0, "processes": 2, "threads": 2, **kwargs})


# ---------------------------------------------------------------------------------------
# The command line end to end


def stress_cli(out: Path, *args: str) -> subprocess.Popen:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.Popen([sys.executable, "-m", "nncert.cli", "mlts", "stress", "--out", str(out), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_cli_runs_every_mode_on_the_reference(tmp_path):
    # A generous slowdown bound: this host may be shared; the bound itself is tested below.
    proc = stress_cli(tmp_path, "--driver", "reference", "--duration", "0.4", "--max-slowdown", "20")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["mode"] for r in records] == list(MODES)
    assert all(r["kind"] == "SUCCESS" and r["driver"] == "reference" for r in records), records
    assert all(r["iterations"] > 0 and r["rate_per_s"] > 0 for r in records)
    by_mode = {r["mode"]: r for r in records}
    assert by_mode["client_termination"]["kills"] > 0
    assert by_mode["parallel_threads"]["shared_model_inferences"] > 0
    assert by_mode["parallel_threads"]["own_model_inferences"] > 0
    assert by_mode["performance_degradation"]["median_alone_ms"] > 0
    csv = pd.read_csv(tmp_path / "summary.csv")
    js = pd.read_json(tmp_path / "summary.json", orient="records")
    for frame in (csv, js):
        assert list(frame["mode"]) == list(MODES) and set(frame["kind"]) == {"SUCCESS"}
    progress = [line for line in stderr.splitlines() if line.startswith("[")]
    assert len(progress) == len(MODES) and "SUCCESS" in progress[0], stderr
    assert "performance_degradation" in stdout and "journal:" in stdout


def test_journal_survives_a_killed_run(tmp_path):
    proc = stress_cli(tmp_path, "--duration", "1", "--modes", "inference,model_loading,parallel_threads")
    journal = tmp_path / "journal.jsonl"
    try:
        deadline = time.monotonic() + 60
        while not (journal.exists() and journal.read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = journal.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]
    assert 1 <= len(records) < 3 and records[0]["mode"] == "inference" and records[0]["kind"] == "SUCCESS"
    assert not (tmp_path / "summary.csv").exists()


@pytest.mark.parametrize("args,needle", [
    (["--modes", "inference,nosuch"], "unknown mode nosuch"),
    (["--driver", "nosuch"], "unknown driver 'nosuch'"),
    (["--duration", "-1"], "duration must be >= 0"),
    (["--duration", "soon"], "invalid float value"),
    (["--processes", "0"], "processes must be at least 1"),
    (["--out-is-a-file"], "cannot write there"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, args, needle):
    out = tmp_path / "out"
    if args == ["--out-is-a-file"]:
        (tmp_path / "file").write_text("")
        out, args = tmp_path / "file" / "out", []
    try:
        status = main(["mlts", "stress", "--out", str(out), "--duration", "0.1", *args])
    except SystemExit as e:  # argparse's own errors
        status = e.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_works_even_with_no_time(mode):
    """A setup slower than the duration (a loaded host, duration 0) still leaves work done and
    checked: a case never succeeds on nothing."""
    # A generous margin: it costs nothing when the case ends in time (a forked case, its clients
    # and their set-up took over the 2 s of quick() at a load average of 12).
    record = run_case(mode, ReferenceDriver(), "reference", quick(duration=0, max_slowdown=1e9, margin=30.0))
    assert record.kind == "SUCCESS" and record.counters["iterations"] >= 1, record


# ---------------------------------------------------------------------------------------
# Classification of faulty drivers


@pytest.mark.parametrize("mode,fault,kind,needle", [
    ("inference", "abort", "CRASH", "SIGABRT"),
    ("parallel_processes", "abort", "CRASH", r"client \d was killed by SIGABRT"),
    ("inference", "wrong", "FAILURE", "inference 1: output 0"),
    ("client_termination", "wrong", "FAILURE", r"client \d: StressError: inference 1: output 0"),
    ("random_models", "wrong", "FAILURE", "output 0"),
    ("inference", "hang", "HANG", "no answer within"),
    ("parallel_threads", "hang", "HANG", "still in a driver call"),
    ("multiprocess_load_kill", "hang", "HANG", "still running"),
])
def test_faulty_driver_is_classified(mode, fault, kind, needle):
    spec = f"{HERE}:faulty:{fault}"
    # A hang waits out the margin, so it is short; which deadline names the hang (a client's or
    # a thread's, at 3/4 of it, before the case's own) needs a gap the host's load cannot close.
    # Any other fault ends the case by itself: a generous margin costs nothing there.
    config = quick(margin=6.0 if fault == "hang" else 30.0)
    start = time.monotonic()
    record = run_case(mode, load_driver(spec), spec, config)
    assert record.kind == kind and re.search(needle, record.reason), record
    assert time.monotonic() - start < config.timeout + 2, "the case outlived its deadline"
    assert record.to_json()["driver"] == spec


@pytest.mark.parametrize("mode,kind", [("parallel_processes", "SUCCESS"), ("client_termination", "FAILURE"),
                                       ("multiprocess_load_kill", "FAILURE")])
def test_driver_that_does_not_recover_from_killed_clients_fails(tmp_path, mode, kind):
    spec = f"{HERE}:FragileDriver:{tmp_path}"
    record = run_case(mode, load_driver(spec), spec, quick(duration=0.5))
    assert record.kind == kind, record
    if kind == "FAILURE":
        assert "left behind" in record.reason, record


@pytest.mark.parametrize("mode", list(MODES))
def test_a_declined_model_is_declined_not_a_failure(mode):
    record = run_case(mode, DecliningDriver(), "declining", quick(duration=0.2))
    needle = "declined every one of the" if mode == "random_models" else "declining declines CONV_2D"
    assert record.kind == DECLINED and needle in record.reason and not record.ok, record
    assert record.to_json()["kind"] == DECLINED and record.stderr_tail == ""


def test_cli_exit_status_does_not_count_declined_cases(tmp_path, capsys):
    spec = f"{HERE}:DecliningDriver"
    status = main(["mlts", "stress", "--out", str(tmp_path), "--driver", spec, "--duration", "0.1",
                   "--modes", "inference,random_models"])
    assert status == 0, capsys.readouterr()
    records = [json.loads(line) for line in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["kind"]) for r in records] == [("inference", DECLINED), ("random_models", DECLINED)]
    assert "declines CONV_2D" in capsys.readouterr().out


def test_mutant_is_caught():
    record = run_case("inference", load_driver("mutant:fp32_as_fp16"), "mutant:fp32_as_fp16", quick())
    assert record.kind == "FAILURE" and "ACC-1" in record.reason, record


def test_slowdown_beyond_the_bound_is_a_failure_with_its_figures():
    record = run_case("performance_degradation", ReferenceDriver(), "reference", quick(max_slowdown=0.01))
    data = record.to_json()
    assert record.kind == "FAILURE" and "> 0.01x" in record.reason, record
    assert data["attempts"] == 2  # a spoiled measurement is taken again before it fails
    assert data["median_alone_ms"] > 0 and data["median_loaded_ms"] > 0 and data["compilations"] > 0
    assert data["low_alone_ms"] <= data["median_alone_ms"]
    assert data["low_loaded_ms"] <= data["median_loaded_ms"]
    assert data["slowdown"] == pytest.approx(data["low_loaded_ms"] / data["low_alone_ms"], rel=1e-2)


@pytest.mark.parametrize("mode", ["inference", "parallel_processes", "client_termination"])
def test_clients_attach_to_a_hosted_driver(tmp_path, mode):
    """A driver with attach_spec: the case and client processes attach to it (never load the
    parent's spec, which here cannot load at all) and close what they loaded."""
    record = run_case(mode, HostedDriver(tmp_path), "no.such.module:driver", quick())
    assert record.kind == "SUCCESS", record
    marks = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert str(os.getpid()) not in marks  # the parent's own instance is not attached again
    assert len(marks) >= (1 if mode == "inference" else 2), marks
    if mode != "client_termination":  # killed clients cannot close
        assert set(marks.values()) == {"closed"}, marks


def test_hosted_driver_outlives_its_killed_clients():
    spec = "service:reference"
    driver = load_driver(spec)
    try:
        for mode in ("client_termination", "multiprocess_load_kill"):
            record = run_case(mode, driver, spec, quick(duration=0.5))
            assert record.kind == "SUCCESS" and record.counters["kills"] > 0, record
            assert record.driver_alive and not record.driver_restarted
    finally:
        driver.close()


def test_hosted_driver_death_is_a_crash_and_the_next_case_restarts_it():
    spec = "service:mutant:crash"
    driver = load_driver(spec)
    try:
        first = run_case("parallel_processes", driver, spec, quick())
        assert first.kind == "CRASH" and not first.driver_alive, first
        second = run_case("inference", driver, spec, quick())
        assert second.kind == "CRASH" and second.driver_restarted, second
    finally:
        driver.close()
