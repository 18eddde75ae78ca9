"""The cost of hosting a driver out of process (service:SPEC) against the same driver in
process, measured in one process, one after the other:

- suite: the per-operation cases (every signature x variant x layout x activation, seed 0),
  each checked, prepared and run synchronously through real shared-memory pools, then
  compared: in process vs. through the service (ratio; aim <= 1.25x);
- round trip: one small execution (ADD of 4 floats) and one larger (the CONV_2D case),
  synchronous through the service vs. a burst through the service (ratio; aim <= 0.5x), with
  the in-process synchronous call as the floor;
- restart: a service killed with SIGKILL, restarted and answering again (seconds).

    python benchmarks/bench_service.py [--driver reference] [--repeat 3] [--calls 2000]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

from bench_operations import driver_seconds  # the same per-case work, measured the same way

from nncert.drivers import load_driver
from nncert.hal.builder import build_request
from nncert.hal.types import OperationType
from nncert.ops import get
from nncert.testing.cases import enumerate_cases, sample_case


def per_call_us(fn, calls: int) -> float:
    fn()  # warm: first mappings, burst slot registration
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default="reference", help="the hosted driver's spec")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    local = load_driver(args.driver)
    remote = load_driver(f"service:{args.driver}")

    cases = [sample_case(*k) for k in enumerate_cases(seeds=(0,))]
    models = [c.model() for c in cases]
    best_local = min(driver_seconds(local, cases, models) for _ in range(args.repeat))
    best_remote = min(driver_seconds(remote, cases, models) for _ in range(args.repeat))
    n = len(cases)
    print(f"suite, {n} cases: in process {n / best_local:7.0f} cases/s, through the service "
          f"{n / best_remote:7.0f} cases/s; ratio {best_remote / best_local:.2f}x")

    for op in (OperationType.ADD, OperationType.CONV_2D):
        record = get(op)
        case = sample_case(record, record.signatures[0], record.variants[0],
                           False if record.layout else None, 0 if record.activation else None, 0)
        model, feeds = case.model()
        request = build_request(model, feeds, [e.shape for e in case.expected])
        in_process = local.prepare_model(model)
        prepared = remote.prepare_model(model)
        burst = prepared.configure_execution_burst()
        slots = list(range(len(request.pools)))
        t_local = per_call_us(lambda p=in_process, r=request: p.execute_synchronously(r), args.calls)
        t_sync = per_call_us(lambda p=prepared, r=request: p.execute_synchronously(r), args.calls)
        t_burst = per_call_us(lambda b=burst, r=request, s=slots: b.execute(r, s), args.calls)
        print(f"round trip {op.name:8s}: in process {t_local:6.0f} us, service sync {t_sync:6.0f} us, "
              f"service burst {t_burst:6.0f} us; burst/sync {t_burst / t_sync:.2f}x "
              f"(over in process: sync +{t_sync - t_local:.0f} us, burst +{t_burst - t_local:.0f} us)")

    restarts = []
    for _ in range(5):
        os.kill(remote.conn.service_pid, signal.SIGKILL)
        t0 = time.perf_counter()
        while remote.alive():
            time.sleep(0.001)
        remote.restart()
        remote.version_string()
        restarts.append(time.perf_counter() - t0)
    print(f"restart of a dead service: median {statistics.median(restarts):.3f} s "
          f"(min {min(restarts):.3f}, max {max(restarts):.3f})")
    remote.close()


if __name__ == "__main__":
    main()
