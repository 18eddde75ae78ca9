"""Random graphs (ACC-5): graphs per second, and the wall time of the CTS-size matrix.

For each cell of the matrix (every operation at each HAL version; small and large graphs
of each data type at ranks 1-4, the quantised types included unless --cts-types), N
seeded graphs are generated, validated (validate_model), run on the driver under test
and judged, exactly as ``nncert graphs`` does without shrinking. The golden run on the
reference is part of generation: each operation is evaluated by the reference kernels as it
is added (the reference driver runs the same kernels in the same order).

    python benchmarks/bench_graphs.py --driver litert [--graphs 50] [--kind single,small,large]
"""

from __future__ import annotations

import argparse
import json
import time

from nncert.drivers import load_driver
from nncert.testing import random_graphs as rg
from nncert.testing.graphs import matrix


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default="reference")
    ap.add_argument("--graphs", type=int, default=50)
    ap.add_argument("--kind", default="single,small,large")
    ap.add_argument("--cts-types", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    kinds = args.kind.split(",")
    cells = [c for c in matrix(quantised=not args.cts_types) if c.kind in kinds]
    driver = load_driver(args.driver)
    per_kind: dict[str, dict] = {}
    started = time.perf_counter()
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
            print(f"[{i + 1}/{len(cells)}] {time.perf_counter() - started:.0f} s", flush=True)
    wall = time.perf_counter() - started
    graphs = sum(k["graphs"] for k in per_kind.values())
    summary = {"driver": args.driver, "cells": len(cells), "graphs": graphs, "wall_s": round(wall, 1),
               "graphs_per_s": round(graphs / wall, 1),
               "kinds": {name: {**{x: v for x, v in k.items() if x != "failures"},
                                "seconds": round(k["seconds"], 1),
                                "graphs_per_s": round(k["graphs"] / max(k["seconds"], 1e-9), 1),
                                "failures": k["failures"][:20]}
                         for name, k in per_kind.items()}}
    print(json.dumps(summary, indent=1))
    driver.close()


if __name__ == "__main__":
    main()
