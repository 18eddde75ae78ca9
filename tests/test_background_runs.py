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
