"""Per-operation cases per second on the reference driver.

Measures, over the whole catalogue (every signature x variant x layout x activation, seed 0):
- generation: sampling a case and computing its golden;
- baseline: running the case's model with the interpreter directly (no driver);
- driver: supported_operations + prepare_model + a synchronous execution through the driver
  protocol with real shared-memory pools, then the comparison.
The driver/baseline ratio is the harness and protocol overhead.

    python benchmarks/bench_operations.py [--driver SPEC] [--repeat N]
"""

from __future__ import annotations

import argparse
import time

from nncert.drivers import load_driver
from nncert.hal.builder import build_request, read_outputs
from nncert.ops.interpreter import run_model
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.criteria import compare
from nncert.testing.harness import claim


def driver_seconds(driver, cases, models) -> float:
    """supported_operations + prepare_model + a synchronous execution + the comparison, for
    every case: the driver path of one per-operation test, without pytest (the harness's
    claim: Driver.first_run, one round trip for the three calls through a service)."""
    t0 = time.perf_counter()
    for case, (model, feeds) in zip(cases, models, strict=True):
        dims = [e.shape for e in case.expected]
        request = build_request(model, feeds, dims)
        reason, first = claim(driver, model, request)
        assert reason is None, f"{case.id}: {reason}"
        first.execute(first.prepare())
        for i, (e, a) in enumerate(zip(case.expected, read_outputs(model, request, dims), strict=True)):
            assert compare(e, a, case.outputs[i].type) is None, case.id
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default="reference")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    driver = load_driver(args.driver)
    keys = list(enumerate_cases(seeds=(0,)))

    t0 = time.perf_counter()
    cases = [sample_case(*k) for k in keys]
    gen = time.perf_counter() - t0
    models = [c.model() for c in cases]

    best_base = best_drv = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for model, feeds in models:
            run_model(model, feeds)
        best_base = min(best_base, time.perf_counter() - t0)
        best_drv = min(best_drv, driver_seconds(driver, cases, models))
    n = len(cases)
    print(f"{n} cases over the catalogue")
    print(f"generation (sample + golden): {n / gen:8.0f} cases/s")
    print(f"baseline (interpreter only):  {n / best_base:8.0f} cases/s")
    print(f"driver {args.driver!r} (validate, prepare, execute, compare): {n / best_drv:8.0f} cases/s")
    print(f"overhead ratio driver/baseline: {best_drv / best_base:.2f}x")


if __name__ == "__main__":
    main()
