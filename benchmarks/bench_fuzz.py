"""Fuzz targets: executions per second of each atheris script (fuzz/<target>.py) on the
reference driver, with instrumentation on, from libFuzzer's own reports. Each run starts
from the target's seed corpus (written to a temporary directory). Two figures: "overall" is
libFuzzer's last ``exec/s:`` (runs / seconds, the seeds' replay included, when every seed
case is built for the first time), "steady" is the rate after the corpus is loaded: the runs
between the INITED line and the end over the seconds between them (libFuzzer's cumulative
exec/s gives each line's time as runs / rate).

With ``--cpu-runs M`` it measures instead the steady rate per CPU-second of the fuzzing
process, which a machine shared with other work distorts far less than wall time: two runs
from the same seeds and libFuzzer seed, one that stops once the corpus is loaded and one that
goes M runs further, and M over the difference of their CPU times (user + system).

With ``--campaign`` it runs whole campaigns (``nncert fuzz``: workers, restarts, replays and
minimisation included) of each target on ``--driver`` for ``--seconds`` with ``--jobs``
workers, twice from the same libFuzzer seed: as campaigns ran before issue 23 (a worker
restarted on every Finding, each process probing afresh) and as they run now (workers going
on past what Python raises, support-probe verdicts shared); execs/s is the campaign's
executions over its fuzzing time, with the load average beside it.

    python benchmarks/bench_fuzz.py [--seconds 20] [--target NAME ...] [--driver SPEC]
    python benchmarks/bench_fuzz.py --cpu-runs 50000 [--rounds 3] [--target NAME ...]
    python benchmarks/bench_fuzz.py --campaign --driver litert --target execute --seconds 120 --jobs 2
"""

from __future__ import annotations

import argparse
import os
import re
import resource
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


def _cpu_run(cmd: list[str], env: dict, timeout: float) -> tuple[float, str]:
    """(user + system CPU seconds of the child, its stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout).stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def measure_cpu(target: str, runs: int, driver: str | None) -> tuple[float | None, str]:
    """Runs after the corpus is loaded per CPU-second (see the module's docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        seeds, out_dir = Path(tmp) / "seeds", Path(tmp) / "new"
        write_corpus(target, seeds)
        env = {**os.environ, "NNCERT_STATE_DIR": str(Path(tmp) / "state")}
        cpu, inited = [], None
        for limit in (1, None):
            out_dir.mkdir(exist_ok=True)
            for f in out_dir.iterdir():
                f.unlink()
            n = 1 if limit else inited + runs
            cmd = [sys.executable, str(ROOT / "fuzz" / f"{target}.py"), f"-runs={n}", "-seed=1",
                   str(out_dir), str(seeds)]
            if driver:
                cmd[2:2] = ["--driver", driver]
            seconds, log = _cpu_run(cmd, env, timeout=3600)
            found = re.search(r"^#(\d+)\s+INITED", log, re.M)
            done = re.search(r"Done (\d+) runs", log)
            if not (found and done):
                return None, log.strip().splitlines()[-1][:200] if log.strip() else "no output"
            inited = int(found.group(1))
            cpu.append((seconds, int(done.group(1))))
    (cpu0, _), (cpu1, total) = cpu
    steady = (total - inited) / (cpu1 - cpu0) if cpu1 > cpu0 else None
    return steady, (f"{total - inited} runs after {inited} loading ones; CPU {cpu0:.1f} s loading, "
                    f"{cpu1:.1f} s in all")


def measure_campaign(target: str, seconds: int, jobs: int, driver: str | None, now: bool) -> str:
    """One campaign as before issue 23 (``now`` False) or as now: its figures in a line."""
    from nncert.fuzz.campaign import Campaign, CampaignConfig, resolve_target

    t, script = resolve_target(target)
    # startup=0: the time counts from the workers' start in both (a worker restarted on every
    # Finding would otherwise never be "ready" and get the whole start-up allowance on top)
    config = CampaignConfig(time=seconds, jobs=jobs, seed=1, startup=0, keep_going=now,
                            share_probe_verdicts=now)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        s = Campaign(t, script, driver, Path(tmp) / "campaign", config).run()
    rate = s["execs"] / s["elapsed_s"] if s["elapsed_s"] else 0.0
    return (f"{target:14s} {'now   ' if now else 'before'} {rate:7.1f} exec/s  ({s['execs']} execs in "
            f"{s['elapsed_s']} s, {s['worker_runs']} worker runs, {s['findings']} findings, "
            f"{s['duplicates']} duplicates, {s.get('worker_hits', 0)} hits in workers; load "
            f"{load:.1f} -> {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--driver", default=None)
    parser.add_argument("--cpu-runs", type=int, default=0, metavar="M",
                        help="steady runs per CPU-second over M runs after the corpus is loaded")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --cpu-runs: repeat, print each and the best")
    parser.add_argument("--campaign", action="store_true",
                        help="whole campaigns, as before issue 23 and as now (see above)")
    parser.add_argument("--jobs", type=int, default=2, help="with --campaign: workers")
    args = parser.parse_args()
    if args.campaign:
        for name in args.target or ["execute"]:
            for now in (False, True):
                print(measure_campaign(name, args.seconds, args.jobs, args.driver, now), flush=True)
        return
    if args.cpu_runs:
        for name in args.target or list(TARGETS):
            rates = []
            for _ in range(args.rounds):
                rate, summary = measure_cpu(name, args.cpu_runs, args.driver)
                rates.append(rate or 0)
                print(f"{name:20s} exec per CPU-second steady {_n(rate and round(rate)):>7}   ({summary})",
                      flush=True)
            if args.rounds > 1:
                print(f"{name:20s} best of {args.rounds}: {round(max(rates))}", flush=True)
        return
    for name in args.target or list(TARGETS):
        overall, steady, summary = measure(name, args.seconds, args.driver)
        print(f"{name:20s} exec/s overall {_n(overall):>7}  steady {_n(steady):>7}   ({summary})",
              flush=True)


def _n(x: int | None) -> str:
    return "?" if x is None else str(x)


if __name__ == "__main__":
    main()
