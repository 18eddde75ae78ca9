"""Fuzz targets: executions per second of each atheris script (fuzz/<target>.py) on the
reference driver, with instrumentation on, from libFuzzer's own reports. Each run starts
from the target's seed corpus (written to a temporary directory). Two figures: "overall" is
libFuzzer's last ``exec/s:`` (runs / seconds, the seeds' replay included, when every seed
case is built for the first time), "steady" is the rate after the corpus is loaded: the runs
between the INITED line and the end over the seconds between them (libFuzzer's cumulative
exec/s gives each line's time as runs / rate).

    python benchmarks/bench_fuzz.py [--seconds 20] [--target NAME ...] [--driver SPEC]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from nncert.fuzz.targets import TARGETS, write_corpus

ROOT = Path(__file__).resolve().parent.parent


def steady_rate(log: str) -> int | None:
    """Runs per second from INITED to the last status line (None when there are too few)."""
    lines = re.findall(r"^#(\d+)\s+(\w+)\s.*?exec/s: (\d+)", log, re.M)
    inited = [(int(n), int(r)) for n, kind, r in lines if kind == "INITED"]
    if not inited or not lines:
        return None
    (n0, r0), (n1, r1) = inited[0], (int(lines[-1][0]), int(lines[-1][2]))
    if not (r0 and r1) or n1 <= n0:
        return None
    dt = n1 / r1 - n0 / r0
    return round((n1 - n0) / dt) if dt > 0 else None


def measure(target: str, seconds: int, driver: str | None) -> tuple[int | None, int | None, str]:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        write_corpus(target, corpus)
        cmd = [sys.executable, str(ROOT / "fuzz" / f"{target}.py"), f"-max_total_time={seconds}",
               "-print_final_stats=1", str(corpus)]
        if driver:
            cmd[2:2] = ["--driver", driver]
        env = {**os.environ, "NNCERT_STATE_DIR": str(Path(tmp) / "state")}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds * 4 + 120).stderr
    rates = re.findall(r"exec/s: (\d+)", out)
    done = re.search(r"Done (\d+) runs in (\d+) second", out)
    summary = f"{done.group(1)} runs in {done.group(2)} s" if done else out.strip().splitlines()[-1][:200]
    return (int(rates[-1]) if rates else None), steady_rate(out), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--driver", default=None)
    args = parser.parse_args()
    for name in args.target or list(TARGETS):
        overall, steady, summary = measure(name, args.seconds, args.driver)
        print(f"{name:20s} exec/s overall {_n(overall):>7}  steady {_n(steady):>7}   ({summary})",
              flush=True)


def _n(x: int | None) -> str:
    return "?" if x is None else str(x)


if __name__ == "__main__":
    main()
