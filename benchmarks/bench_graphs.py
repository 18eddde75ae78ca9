"""Random graphs (ACC-5): graphs per second, and the wall time of the CTS-size matrix.

For each cell of the matrix (every operation at each HAL version; small and large graphs
of each data type at ranks 1-4, the quantised types included unless --cts-types), N
seeded graphs are generated, validated (validate_model), run on the driver under test
and judged, exactly as ``nncert graphs`` does without shrinking. The golden run on the
reference is part of generation: each operation is evaluated by the reference kernels as it
is added (the reference driver runs the same kernels in the same order).

``--jobs N`` runs the cells in N processes, shard I of N each (``random_graphs.shard_cells``,
what ``nncert graphs --shard I/N`` runs), started together; the figures are the whole run's:
its wall time and the CPU time of every process (the drivers' probe children included).
The machine's other load shows in the wall time, not in the CPU time.

    python benchmarks/bench_graphs.py --driver litert [--graphs 50] [--kind single,small,large] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from nncert.certify.shard import ShardError, parse_shard
from nncert.drivers import load_driver
from nncert.testing import random_graphs as rg
from nncert.testing.graphs import matrix


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (waited for)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_cells(args: argparse.Namespace, shard: tuple[int, int] | None) -> dict:
    """The cells this process runs (a shard's with ``shard``): per kind, the counts and seconds."""
    kinds = args.kind.split(",")
    cells = [c for c in matrix(quantised=not args.cts_types) if c.kind in kinds]
    if shard:
        cells = rg.shard_cells(cells, *shard)
    driver = load_driver(args.driver)
    per_kind: dict[str, dict] = {}
    started = time.perf_counter()
    try:
        for i, cell in enumerate(cells):
            t0 = time.perf_counter()
            r = rg.search(driver, cell, rg.cell_seed(args.seed, cell), args.graphs, shrink_runs=0)
            spent = time.perf_counter() - t0
            k = per_kind.setdefault(cell.kind, {"cells": 0, "graphs": 0, "passed": 0, "declined": 0,
                                                "failed": 0, "seconds": 0.0, "failures": []})
            k["cells"] += 1
            k["graphs"] += r.run
            k["passed"] += r.passed
            k["declined"] += r.declined
            k["seconds"] += spent
            if r.failure:
                k["failed"] += 1
                k["failures"].append(r.failure.headline[:200])
            if (i + 1) % 20 == 0:
                print(f"[{i + 1}/{len(cells)}] {time.perf_counter() - started:.0f} s", file=sys.stderr,
                      flush=True)
    finally:
        driver.close()  # its probe child ends (and is waited for: its CPU time counts)
    return {"cells": len(cells), "kinds": per_kind}


def _merge(parts: list[dict]) -> dict:
    kinds: dict[str, dict] = {}
    for part in parts:
        for name, k in part["kinds"].items():
            into = kinds.setdefault(name, {"cells": 0, "graphs": 0, "passed": 0, "declined": 0, "failed": 0,
                                           "seconds": 0.0, "failures": []})
            for field in ("cells", "graphs", "passed", "declined", "failed", "seconds"):
                into[field] += k[field]
            into["failures"] += k["failures"]
    return {"cells": sum(p["cells"] for p in parts), "kinds": kinds}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default="reference")
    ap.add_argument("--graphs", type=int, default=50)
    ap.add_argument("--kind", default="single,small,large")
    ap.add_argument("--cts-types", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="processes, one shard of the cells each")
    ap.add_argument("--shard", help=argparse.SUPPRESS)  # I/N: one of --jobs, answering in JSON
    args = ap.parse_args()
    if args.shard:
        try:
            shard = parse_shard(args.shard)
        except ShardError as e:
            ap.error(str(e))
        print(json.dumps(run_cells(args, shard)))
        return 0
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    started = time.perf_counter()
    cpu0 = _cpu_s()
    if args.jobs == 1:
        result = run_cells(args, None)
    else:
        argv = [sys.executable, os.path.abspath(__file__), "--driver", args.driver,
                "--graphs", str(args.graphs), "--kind", args.kind, "--seed", str(args.seed),
                *(["--cts-types"] if args.cts_types else [])]
        procs = [subprocess.Popen([*argv, "--shard", f"{i}/{args.jobs}"], stdout=subprocess.PIPE, text=True)
                 for i in range(1, args.jobs + 1)]
        outs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            print(f"a shard failed: exit statuses {[p.returncode for p in procs]}", file=sys.stderr)
            return 1
        result = _merge([json.loads(out.strip().splitlines()[-1]) for out in outs])
    wall = time.perf_counter() - started
    cpu = _cpu_s() - cpu0
    per_kind = result["kinds"]
    graphs = sum(k["graphs"] for k in per_kind.values())
    summary = {"driver": args.driver, "jobs": args.jobs, "cells": result["cells"], "graphs": graphs,
               "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "graphs_per_s": round(graphs / wall, 1),
               "kinds": {name: {**{x: v for x, v in k.items() if x != "failures"},
                                "seconds": round(k["seconds"], 1),
                                "graphs_per_s": round(k["graphs"] / max(k["seconds"], 1e-9), 1),
                                "failures": k["failures"][:20]}
                         for name, k in per_kind.items()}}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
