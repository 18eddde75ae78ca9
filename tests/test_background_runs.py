"""The background-run launcher (tests/background_runs.py) that pytest-xdist workers share: a
run two workers queue runs once, both get its result, and the launcher kills what still runs
when its owner closes its input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import background_runs

TESTS = Path(__file__).resolve().parent

WORKER = """
import sys
from pathlib import Path
import background_runs
background_runs.start(sys.argv[1])  # a worker joins the owner's directory
proc = background_runs.run([sys.executable, "-c", "import os, time; time.sleep(0.5); print(os.getpid())"], 60)
print(proc.returncode, proc.stdout.strip())
"""


def _launcher(directory: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, background_runs.__file__, str(directory)], stdin=subprocess.PIPE)


def test_a_run_two_workers_queue_runs_once(tmp_path):
    launcher = _launcher(tmp_path)
    try:
        path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)], env=env,
                                    stdout=subprocess.PIPE, text=True) for _ in range(2)]
        answers = [w.communicate(timeout=60)[0].strip() for w in workers]
    finally:
        launcher.stdin.close()
        launcher.wait(timeout=30)
    assert answers[0] == answers[1] and answers[0].startswith("0 "), answers
    assert len(list(tmp_path.glob("*.req"))) == 1


def test_closing_the_launchers_input_kills_what_still_runs(tmp_path):
    launcher = _launcher(tmp_path)
    sleeper = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(600)"]
    (tmp_path / "sleeper.req").write_text(json.dumps(sleeper))
    deadline = time.monotonic() + 30
    out = tmp_path / "sleeper.out"
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(out.read_text())
    launcher.stdin.close()
    assert launcher.wait(timeout=30) == 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"run {pid} outlived the launcher")


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.05)


def test_an_awaited_run_then_a_first_run_jump_the_queue_and_a_waiting_test_lends_its_core(tmp_path):
    """One run at a time: a run a test waits on starts next, then a run marked first (in the
    working directory it names) before those queued earlier; a test process waiting on a run
    (a file in waiting/, naming the run) adds a slot."""
    started, go = tmp_path / "started.txt", tmp_path / "go"

    def request(name: str, code: str = "", **extra) -> None:
        note = f"open({str(started)!r}, 'a').write({name!r} + ' ' + os.getcwd() + '\\n')"
        argv = [sys.executable, "-c", f"import os, time\n{note}\n{code}"]
        request = {"argv": argv, "cwd": None, "first": False, **extra}
        (tmp_path / f"{name}.req").write_text(json.dumps(request))

    request("blocker", f"while not os.path.exists({str(go)!r}): time.sleep(0.05)")
    launcher = subprocess.Popen([sys.executable, background_runs.__file__, str(tmp_path)],
                                stdin=subprocess.PIPE, env={**os.environ, "NNCERT_BACKGROUND_PARALLEL": "1"})
    try:
        _wait_for(started)
        (tmp_path / "elsewhere").mkdir()
        request("late")
        time.sleep(0.3)  # queued in this order: late, awaited, early (first)
        request("awaited")
        time.sleep(0.3)
        request("early", first=True, cwd=str(tmp_path / "elsewhere"))
        time.sleep(0.5)
        assert started.read_text().count("\n") == 1, "a second run started with one slot"
        waiting = tmp_path / "waiting" / "4242"  # a test waits on "awaited": one more slot, for it
        waiting.parent.mkdir()
        waiting.write_text("awaited")
        _wait_for(tmp_path / "awaited.rc")
        waiting.write_text("")  # a test waits on a run already done: the slot goes to the queue's head
        _wait_for(tmp_path / "early.rc")
        waiting.unlink()
        assert not (tmp_path / "blocker.rc").exists()
    finally:
        go.touch()
        _wait_for(tmp_path / "late.rc")
        launcher.stdin.close()
        launcher.wait(timeout=30)
    lines = started.read_text().splitlines()
    assert [line.split(" ")[0] for line in lines] == ["blocker", "awaited", "early", "late"]
    assert lines[2] == f"early {tmp_path / 'elsewhere'}"


def test_idle_runs_go_beside_the_others_two_at_a_time(tmp_path):
    """Runs marked idle (a faulty driver's deadlines) take no core's slot: with the one slot
    held, two of three start at once, the third when one of them ends."""
    started = tmp_path / "started.txt"

    def request(name: str, until: Path, idle: bool) -> None:
        code = (f"import os, time\nopen({str(started)!r}, 'a').write({name!r} + '\\n')\n"
                f"while not os.path.exists({str(until)!r}): time.sleep(0.05)")
        argv = [sys.executable, "-c", code]
        (tmp_path / f"{name}.req").write_text(json.dumps({"argv": argv, "idle": idle}))

    def names() -> list[str]:
        return started.read_text().split() if started.exists() else []

    request("blocker", tmp_path / "go", idle=False)
    for n in (1, 2, 3):
        request(f"idle{n}", tmp_path / f"go{n}", idle=True)
    launcher = subprocess.Popen([sys.executable, background_runs.__file__, str(tmp_path)],
                                stdin=subprocess.PIPE, env={**os.environ, "NNCERT_BACKGROUND_PARALLEL": "1"})
    try:
        deadline = time.monotonic() + 60
        while len(names()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert sorted(names()) == ["blocker", "idle1", "idle2"]
        (tmp_path / "go1").touch()
        while "idle3" not in names() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "idle3" in names() and not (tmp_path / "blocker.rc").exists()
    finally:
        for name in ("go", "go1", "go2", "go3"):
            (tmp_path / name).touch()
        launcher.stdin.close()
        launcher.wait(timeout=30)
