"""MLTS-2 outcomes: run_isolated's classification, and the pytest plugin's --isolate and its
crashed / hung categories."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from nncert.hal.errors import DriverFault, HalError
from nncert.testing import outcome as outcome_module
from nncert.testing.outcome import Kind, Outcome, classify_exception, run_isolated

ROOT = Path(__file__).resolve().parent.parent


def _raise_value_error() -> None:
    raise ValueError("bad operand\nsecond line")


def _print_and_abort() -> None:
    print("last words before abort", file=sys.stderr)
    os.abort()


def _fault(kind: str) -> None:
    try:
        raise DriverFault(kind, "driver service lost", "service stderr: boom")
    except HalError as e:
        raise RuntimeError(f"execution failed: {e}") from None  # only __context__ links the fault


def test_success_returns_the_value():
    outcome = run_isolated(lambda a, b=0: {"sum": a + b}, 2, b=3, timeout=10)
    assert outcome.kind is Kind.SUCCESS and outcome.value == {"sum": 5}
    assert outcome.exit_code == 0 and outcome.signal is None and outcome.duration > 0


def test_exception_is_a_failure_with_its_reason():
    outcome = run_isolated(_raise_value_error, timeout=10)
    assert outcome.kind is Kind.FAILURE
    assert outcome.reason == "ValueError: bad operand"
    assert "Traceback" in outcome.stderr_tail and "_raise_value_error" in outcome.stderr_tail


def test_abort_is_a_crash_with_the_stderr_tail():
    outcome = run_isolated(_print_and_abort, timeout=10)
    assert outcome.kind is Kind.CRASH and outcome.signal == 6 and outcome.exit_code is None
    assert outcome.reason == "killed by SIGABRT"
    assert str(outcome) == "CRASH (SIGABRT): killed by SIGABRT"
    assert "last words before abort" in outcome.stderr_tail
    assert "_print_and_abort" in outcome.stderr_tail  # faulthandler's traceback of the child


def test_the_child_dies_of_its_signal_on_a_stale_alternate_stack():
    """A library may leave the main thread's alternate signal stack on memory it has released
    (OpenVINO's CPU plugin does): the child installs its own, so an abort is still a SIGABRT
    and not the SIGSEGV of a signal the kernel could not deliver. Run in a process of its
    own, whose signal stack the test may ruin."""
    script = textwrap.dedent("""
        import ctypes, mmap, os
        from nncert.testing.outcome import _SignalStack, run_isolated
        region = mmap.mmap(-1, 1 << 16)
        address = ctypes.addressof(ctypes.c_char.from_buffer(region))
        stack = _SignalStack(address, 0, 1 << 16)
        assert ctypes.CDLL(None).sigaltstack(ctypes.byref(stack), None) == 0
        libc = ctypes.CDLL(None)
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        assert libc.munmap(address, 1 << 16) == 0  # released, and still installed
        print(run_isolated(os.abort, timeout=10).signal)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "6", done.stderr[-2000:]


@pytest.mark.parametrize("leave", [lambda: os._exit(3), lambda: sys.exit(3)], ids=["os._exit", "sys.exit"])
def test_exit_without_an_answer_is_a_crash_with_the_code(leave):
    outcome = run_isolated(leave, timeout=10)
    assert outcome.kind is Kind.CRASH and outcome.exit_code == 3 and outcome.signal is None
    assert outcome.reason == "exited with code 3"


def test_sleeper_is_a_hang_killed_at_the_deadline():
    start = time.monotonic()
    outcome = run_isolated(time.sleep, 60, timeout=1)
    assert time.monotonic() - start < 10
    assert outcome.kind is Kind.HANG and outcome.reason == "no answer within 1.0 s"
    assert "Timeout" in outcome.stderr_tail  # where it was stuck, dumped just before the kill


@pytest.mark.parametrize("kind", ["CRASH", "HANG"])
def test_driver_fault_is_the_drivers_crash_or_hang(kind):
    outcome = run_isolated(_fault, kind, timeout=10)
    assert outcome.kind == kind and outcome.reason == "driver service lost"
    assert "service stderr: boom" in outcome.stderr_tail


def test_classify_exception_follows_the_chain():
    try:
        _fault("HANG")
    except RuntimeError as e:
        assert classify_exception(e).kind is Kind.HANG
    assert classify_exception(KeyError("k")) == Outcome(Kind.FAILURE, "KeyError: 'k'")


def test_unpicklable_value_is_a_failure():
    outcome = run_isolated(lambda: threading.Lock(), timeout=10)
    assert outcome.kind is Kind.FAILURE and "cannot be pickled" in outcome.reason


def test_large_value_does_not_deadlock():
    outcome = run_isolated(bytes, 8 << 20, timeout=20)
    assert outcome.kind is Kind.SUCCESS and len(outcome.value) == 8 << 20


def test_to_dict_is_json():
    record = json.loads(json.dumps(run_isolated(_print_and_abort, timeout=10).to_dict()))
    assert record["kind"] == "CRASH" and record["signal_name"] == "SIGABRT"
    assert json.loads(json.dumps(run_isolated(object, timeout=10).to_dict()))["value"].startswith("<object")


def _zombie_children() -> list[int]:
    zombies = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rpartition(")")[2].split()[:2]
            if state == "Z" and int(ppid) == os.getpid():
                zombies.append(int(entry))
    return zombies


def test_many_runs_leak_no_zombie_and_no_fd():
    # Earlier tests' garbage (a peer's pipes) may close its descriptors during the runs: after
    # a collection, the runs may only leave fewer open, never one more.
    gc.collect()
    fds = set(os.listdir("/proc/self/fd"))
    outcomes = [run_isolated(abs, -i, timeout=10) for i in range(200)]
    assert [o.value for o in outcomes] == list(range(200))
    assert set(os.listdir("/proc/self/fd")) <= fds
    assert _zombie_children() == []


def _start_grandchild() -> int:
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    return pid


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_what_the_child_started_dies_with_it():
    grandchild = run_isolated(_start_grandchild, timeout=10).value
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _gone(grandchild)


def test_without_pidfd_the_exit_is_polled(monkeypatch):
    monkeypatch.setattr(outcome_module, "_pidfd", lambda pid: None)
    assert run_isolated(abs, -1, timeout=10).value == 1
    assert run_isolated(os.abort, timeout=10).kind is Kind.CRASH
    assert run_isolated(time.sleep, 60, timeout=0.5).kind is Kind.HANG


def test_runs_from_threads():
    results: list[Outcome] = []
    threads = [threading.Thread(target=lambda: results.extend(run_isolated(abs, -3, timeout=10)
                                                              for _ in range(20))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80 and all(o.kind is Kind.SUCCESS and o.value == 3 for o in results)


def test_a_run_inside_a_run_works():
    """A child that runs another (a driver's probe child inside an isolated test) inherits an
    armed faulthandler watchdog without its thread: the grandchild must not wait for it."""
    inner = run_isolated(lambda: str(run_isolated(abs, -3, timeout=30).value), timeout=60)
    assert inner.kind is Kind.SUCCESS and inner.value == "3", inner
    hang = run_isolated(lambda: str(run_isolated(time.sleep, 60, timeout=1).kind), timeout=60)
    assert hang.value == "HANG", hang


# -- the pytest plugin --

_FLAKY_DRIVER = '''
from pathlib import Path

from nncert.drivers.base import Driver

DEAD, RESTARTS = Path("driver-dead"), Path("driver-restarts")


class FlakyDriver(Driver):
    """A driver whose health lives in files, so that a forked test can kill it for the parent."""

    name = "flaky"

    def alive(self):
        return not DEAD.exists()

    def restart(self):
        DEAD.unlink()
        RESTARTS.write_text(str(int(RESTARTS.read_text()) + 1 if RESTARTS.exists() else 1))
'''

_TESTS = '''
import os
import sys
import time

import pytest

from fakedriver.flaky import DEAD, RESTARTS
from nncert.hal.errors import DriverFault, HalError


def test_passes():
    pass


def test_aborts():
    print("last words of test_aborts", file=sys.stderr)
    os.abort()


def test_sleeps():
    time.sleep(600)


def test_fails():
    assert 1 == 2


def test_driver_fault(driver):
    DEAD.touch()
    try:
        raise DriverFault("CRASH", "service died mid-call")
    except HalError as e:
        pytest.fail(f"execution failed: {e}")


def test_fresh_driver_after_a_fault(driver):
    assert driver.alive() and RESTARTS.read_text() == "1"
'''


def _run_pytest(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "fakedriver").mkdir(exist_ok=True)
    (tmp_path / "fakedriver" / "__init__.py").write_text("")
    (tmp_path / "fakedriver" / "flaky.py").write_text(textwrap.dedent(_FLAKY_DRIVER))
    (tmp_path / "test_mix.py").write_text(textwrap.dedent(_TESTS))
    installed = any(ep.value == "nncert.pytest_plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "nncert.pytest_plugin"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "test_mix.py",
                           "--driver=fakedriver.flaky:FlakyDriver", "--nncert-report=r.json", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    report = json.loads((tmp_path / "r.json").read_text())["tests"]
    return proc, {nodeid.partition("::")[2]: rec for nodeid, rec in report.items()}


def test_isolate_survives_crashes_and_hangs(tmp_path):
    start = time.monotonic()
    proc, tests = _run_pytest(tmp_path, "--isolate", "--isolate-timeout=2")
    assert time.monotonic() - start < 60
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 failed, 2 passed, 2 crashed, 1 hung" in proc.stdout, proc.stdout[-3000:]
    assert {name: rec["outcome"] for name, rec in tests.items()} == {
        "test_passes": "passed", "test_aborts": "crash", "test_sleeps": "hang", "test_fails": "failed",
        "test_driver_fault": "crash", "test_fresh_driver_after_a_fault": "passed"}
    assert tests["test_aborts"]["reason"] == "killed by SIGABRT"
    assert tests["test_sleeps"]["reason"] == "no answer within 2.0 s"
    assert tests["test_driver_fault"]["reason"] == "service died mid-call"
    assert "CRASH (SIGABRT): killed by SIGABRT" in proc.stdout
    assert "HANG: no answer within 2.0 s" in proc.stdout
    assert "in test_aborts" in proc.stdout  # the child's fatal-error traceback
    assert "Captured stderr call" in proc.stdout and "last words of test_aborts" in proc.stdout
    assert "last words" not in proc.stderr


def test_driver_fault_is_a_crash_without_isolation(tmp_path):
    proc, tests = _run_pytest(tmp_path, "-k", "driver")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "1 passed, 4 deselected, 1 crashed" in proc.stdout, proc.stdout[-3000:]
    fault = tests["test_driver_fault"]
    assert {k: fault[k] for k in ("outcome", "status", "reason", "req")} == {
        "outcome": "crash", "status": "CRASH", "reason": "service died mid-call", "req": []}
    assert tests["test_fresh_driver_after_a_fault"]["outcome"] == "passed"
