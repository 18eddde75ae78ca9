"""The crash guard's cost: the wall time of one pytest run of a native in-process driver with
the guard (a supervising pytest plus the child that runs the tests) against the same run without
it, alternating, best of ``--rounds`` each. The difference is the supervisor's start-up and
its polling of the journal; it is paid once a run (and once more for each crash restart).

    python benchmarks/bench_crash_guard.py [--driver litert] [-k "ADD and float32"] [--rounds 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(driver: str, select: str, guard: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_operations.py", "-q", "-p",
                           "no:randomly", f"--driver={driver}", "-k", select, f"--crash-guard={guard}"],
                          cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        sys.exit(f"pytest exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default="litert")
    parser.add_argument("-k", dest="select", default="ADD and float32")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.rounds):
        for guard in times:
            times[guard].append(run_once(args.driver, args.select, guard))
    on, off = min(times["on"]), min(times["off"])
    print(f"{args.driver}, -k {args.select!r}: guarded {on:.2f} s, unguarded {off:.2f} s, "
          f"guard cost {on - off:.2f} s a run ({on / off:.2f}x)")


if __name__ == "__main__":
    main()
