"""The cost of hosting a driver out of process (service:SPEC) against the same driver in
process, measured in one process, one after the other:

- suite: the per-operation cases (every signature x variant x layout x activation, seed 0),
  each checked, prepared and run synchronously through real shared-memory pools, then
  compared (the harness's claim: Driver.first_run, one round trip a case through a service):
  in process vs. through the service (ratio; aim <= 1.25x), in wall time and in CPU time
  (this process's, plus the service's from /proc: a loaded machine moves it far less);
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


def service_cpu(driver) -> float:
    """CPU seconds (user + system) the hosted driver's service process has used so far."""
    if driver is None:
        return 0.0
    with open(f"/proc/{driver.conn.service_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn, remote=None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and of ``remote``'s service) of ``fn()``:
    on a machine shared with other work the CPU figure moves far less than the wall one
    (a round trip's wake-ups wait for a core there)."""
    w0, c0, s0 = time.perf_counter(), time.process_time(), service_cpu(remote)
    fn()
    return time.perf_counter() - w0, time.process_time() - c0 + service_cpu(remote) - s0


def per_call_us(fn, calls: int, remote=None) -> tuple[float, float]:
    """(wall, CPU) microseconds a call (see ``timed``)."""
    fn()  # warm: first mappings, burst slot registration

    def loop():
        for _ in range(calls):
            fn()

    wall, cpu = timed(loop, remote)
    return wall / calls * 1e6, cpu / calls * 1e6


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
    local_runs, remote_runs = [], []
    for _ in range(args.repeat):  # alternately, so that a change of load hits both
        local_runs.append(timed(lambda: driver_seconds(local, cases, models)))
        remote_runs.append(timed(lambda: driver_seconds(remote, cases, models), remote))
    n = len(cases)
    (wall_l, cpu_l), (wall_r, cpu_r) = (min(r[0] for r in local_runs), min(r[1] for r in local_runs)), \
        (min(r[0] for r in remote_runs), min(r[1] for r in remote_runs))
    print(f"suite, {n} cases: in process {n / wall_l:7.0f} cases/s, through the service "
          f"{n / wall_r:7.0f} cases/s; ratio {wall_r / wall_l:.2f}x wall; CPU {cpu_l / n * 1e6:.0f} us a "
          f"case in process, {cpu_r / n * 1e6:.0f} us client + service: ratio {cpu_r / cpu_l:.2f}x "
          f"(load {os.getloadavg()[0]:.1f})")

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
        t_local, c_local = per_call_us(lambda p=in_process, r=request: p.execute_synchronously(r), args.calls)
        t_sync, c_sync = per_call_us(lambda p=prepared, r=request: p.execute_synchronously(r), args.calls,
                                     remote)
        t_burst, c_burst = per_call_us(lambda b=burst, r=request, s=slots: b.execute(r, s), args.calls,
                                       remote)
        print(f"round trip {op.name:8s}: in process {t_local:6.0f} us, service sync {t_sync:6.0f} us, "
              f"service burst {t_burst:6.0f} us; burst/sync {t_burst / t_sync:.2f}x wall "
              f"(over in process: sync +{t_sync - t_local:.0f} us, burst +{t_burst - t_local:.0f} us); CPU "
              f"client + service: in process {c_local:.0f} us, sync {c_sync:.0f} us, burst {c_burst:.0f} us, "
              f"burst/sync {c_burst / c_sync:.2f}x")

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
