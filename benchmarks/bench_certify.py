"""Certification report building: the time from a finished run's journal to a verified report
directory, for a synthetic run of N outcomes (tests/certify_synthetic.py: realistic ids and
requirement lists, a few hundred failures with messages, declines with reasons, operation and
type markers, waivers, MLTS and fuzz properties). Each part is timed on its own — report.build
(journal to report dict), then what report.write writes: report.json, report.html, junit.xml,
the CSV tables, MANIFEST.sha256 — then report.write whole into a fresh directory, and
``verify(recollect=False)`` (manifest, journal against report, verdicts; the recollection runs
pytest and is not report building). Each figure is the best of ``--rounds``.

    python benchmarks/bench_certify.py [--outcomes 20000] [--rounds 3] [--profile]

With ``--driver SPEC [--plan smoke]`` it times a whole certification instead: ``nncert certify``
into a temporary directory, its wall time, and each suite's wall time from the report. With
``--jobs 1,2`` it times one certification per value of ``--jobs``, alternately, ``--rounds``
times (the machine's load moves between rounds), says whether each gave the same outcomes test
by test as the first, and prints each one's median and the ratio to the first; ``--baseline
SRC`` adds the same run by another checkout of nncert (its source directory on PYTHONPATH: an
earlier commit's ``git worktree``), e.g. the runner that ran suites side by side.

    python benchmarks/bench_certify.py --driver litert --plan smoke
    python benchmarks/bench_certify.py --driver litert --plan smoke --jobs 1,2 --rounds 3
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nncert.certify import html, report
from nncert.certify.verify import verify

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from certify_synthetic import write_run  # the shared synthetic run lives with the tests


def best(fn: Callable[[], object], rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def certification(driver: str, plan: str, jobs: str = "", source: str = "") -> tuple[float, dict]:
    """One whole certification's wall time and report, its suites' times printed. ``source``: run
    the nncert of that source directory instead of this one."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory(prefix="nncert-bench-certify-") as tmp:
        out = Path(tmp) / "cert"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "nncert.cli", "certify", "--driver", driver,
                               "--plan", plan, "--out", str(out), *(["--jobs", jobs] if jobs else [])],
                              capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        rep = json.loads((out / "report.json").read_text())
    load = os.getloadavg()[0]
    print(f"nncert certify --driver {driver} --plan {plan} --jobs {rep['run']['jobs']}"
          f"{f' ({source})' if source else ''}: {wall:.0f} s wall (load {load:.1f} after), "
          f"{rep['verdict']['overall']} (exit {proc.returncode}), {len(rep['tests'])} tests")
    for suite in rep["suites"]:
        print(f"  {suite['name']:18s} {suite['wall']:6.1f} s  {suite['tests']:6d} tests  {suite['state']}")
    return wall, rep


def compare_jobs(driver: str, plan: str, jobs: list[str], baseline: str, rounds: int) -> None:
    """Certifications with each --jobs value (and the baseline checkout's), alternately."""
    runs = [(j, "") for j in jobs] + ([(jobs[-1], baseline)] if baseline else [])
    walls: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    first: dict | None = None
    for _ in range(rounds):
        for j, source in runs:
            wall, rep = certification(driver, plan, j, source)
            walls[(j, source)].append(wall)
            outcomes = {(t["suite"], t["id"]): t["status"] for t in rep["tests"]}
            if first is None:
                first = outcomes
            differ = [k for k in first.keys() | outcomes.keys() if first.get(k) != outcomes.get(k)]
            print(f"  outcomes as the first run's: {'yes' if not differ else f'no, {len(differ)} differ'}")
    base = statistics.median(walls[runs[0]])
    for (j, source), times in walls.items():
        median = statistics.median(times)
        print(f"--jobs {j}{f' ({source})' if source else ''}: median {median:.0f} s of "
              f"{', '.join(f'{t:.0f}' for t in times)}; {median / base:.2f}x --jobs {runs[0][0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outcomes", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile build + write + verify once")
    parser.add_argument("--driver", metavar="SPEC", help="time a whole certification of this driver instead")
    parser.add_argument("--plan", default="smoke",
                        help="the plan of --driver's certification (default: smoke)")
    parser.add_argument("--jobs", default="", metavar="N,M",
                        help="with --driver: compare certifications with these --jobs, alternately")
    parser.add_argument("--baseline", default="", metavar="SRC",
                        help="with --jobs: also run the last --jobs with the nncert of this source directory")
    args = parser.parse_args()
    if args.driver and args.jobs:
        compare_jobs(args.driver, args.plan, args.jobs.split(","), args.baseline, args.rounds)
        return
    if args.driver:
        certification(args.driver, args.plan)
        return
    with tempfile.TemporaryDirectory(prefix="nncert-bench-certify-") as tmp:
        run = Path(tmp) / "run"
        plan, settings = write_run(run, args.outcomes)
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            report.write(run, report.build(run, plan, settings))
            verify(run, recollect=False)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
            return
        took: dict[str, float] = {}
        took["build"], built = best(lambda: report.build(run, plan, settings), args.rounds)
        rep: dict = built  # type: ignore[assignment]
        took["report.json"], _ = best(lambda: json.dumps(rep, indent=1, default=str), args.rounds)
        took["report.html"], page = best(lambda: html.render(rep), args.rounds)
        took["junit.xml"], _ = best(lambda: report.junit(rep), args.rounds)
        took["tables (CSV)"], _ = best(
            lambda: [frame.to_csv(index=False) for frame in report.tables(rep).values()], args.rounds
        )
        report.write(run, rep)
        took["manifest"], _ = best(lambda: report.manifest_lines(run), args.rounds)
        fresh = iter(range(args.rounds))

        def write_fresh() -> None:
            out = Path(tmp) / f"write{next(fresh)}"
            out.mkdir()
            report.write(out, rep)

        took["write (all files)"], _ = best(write_fresh, args.rounds)
        took["verify"], problems = best(lambda: verify(run, recollect=False), args.rounds)
    statuses: dict[str, int] = {}
    for t in rep["tests"]:
        statuses[t["status"] or "NO OUTCOME"] = statuses.get(t["status"] or "NO OUTCOME", 0) + 1
    print(
        f"{len(rep['tests'])} outcomes ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))}); "
        f"report.html {len(page) / 1e6:.1f} MB; verify problems: {len(problems)}"  # type: ignore[arg-type]
    )
    for part, seconds in took.items():
        print(f"  {part:20s} {seconds:6.2f} s")
    total = took["build"] + took["write (all files)"] + took["verify"]
    print(f"  {'build + write + verify':20s} {total:6.2f} s (aim 5 s)")


if __name__ == "__main__":
    main()
