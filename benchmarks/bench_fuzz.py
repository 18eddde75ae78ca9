"""Fuzz targets: executions per second of each atheris script (fuzz/<target>.py) on the
reference driver, with instrumentation on, as libFuzzer reports them (its last
``exec/s:`` figure, and ``Done N runs in S second(s)``). Each run starts from the target's
seed corpus (written to a temporary directory), so the figures include the seeds' replay.

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


def measure(target: str, seconds: int, driver: str | None) -> tuple[int | None, str]:
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
    return (int(rates[-1]) if rates else None), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--driver", default=None)
    args = parser.parse_args()
    for name in args.target or list(TARGETS):
        rate, summary = measure(name, args.seconds, args.driver)
        print(f"{name:20s} exec/s {rate if rate is not None else '?':>7}   ({summary})", flush=True)


if __name__ == "__main__":
    main()
