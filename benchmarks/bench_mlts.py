"""MLTS models: a driver's inference latency against LiteRT's own, in one process.

Two ratios per model (median latency over ``--runs`` after ``--warmup``, on one real input):

- ``reference / LiteRT``: nncert's numpy reference driver against the LiteRT interpreter
  (XNNPACK, one thread) on the same .tflite (aim: 10x or less on EfficientNet-Lite0). numpy's
  BLAS is held to one thread too (threadpoolctl): the same resources, and no oversubscribed
  BLAS threads, which on a busy 2-core host made the reference 5x slower;
- ``litert driver / raw invoke``: the nncert litert driver through the HAL
  (execute_synchronously on a request built once: input copy, validation, output copy)
  against ``set_tensor`` + ``invoke`` + ``get_tensor`` on the raw interpreter (aim: 1.05x or
  less). The two are timed alternately, call by call, so that the host's drift (which moves
  a 1 ms model by 30% from one second to the next on a shared machine) falls on both; the
  ratio is the median of the per-pair ratios.

    python benchmarks/bench_mlts.py [--models A,B] [--runs 50] [--warmup 10] [--zoo-dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import statistics

from nncert.drivers import load_driver
from nncert.mlts.run import Baseline, OnDriver, timed
from nncert.mlts.zoo import load, select, to_input, zoo_dir


def median_ms(fn, warmup: int, runs: int) -> float:
    return statistics.median(timed(fn, warmup, runs)) * 1e3


def paired(base, other, warmup: int, runs: int) -> tuple[float, float, float]:
    """Median ms of ``base`` and of ``other``, timed alternately, and the median of the
    per-pair ratios other / base."""
    pairs = [(timed(base, warmup if i == 0 else 0, 1)[0], timed(other, warmup if i == 0 else 0, 1)[0])
             for i in range(runs)]
    return (statistics.median(a for a, _ in pairs) * 1e3, statistics.median(b for _, b in pairs) * 1e3,
            statistics.median(b / a for a, b in pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="efficientnet_lite0,efficientnet_lite0_int8,face_landmark,"
                                            "oww_embedding")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--reference-runs", type=int, default=3, help="runs of the (slow) reference")
    parser.add_argument("--zoo-dir", help="where the zoo is built (default: nncert's)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    drivers = {name: load_driver(name) for name in ("reference", "litert")}
    print(f"{'model':26s} {'LiteRT ms':>10s} {'litert drv':>10s} {'ratio':>6s} {'reference':>10s} "
          f"{'ratio':>7s}")
    for entry in select(args.models):
        if entry.streaming:
            continue  # state inputs: not a single-input figure
        built = load(entry, zoo_dir(args.zoo_dir))
        main_sg = built.model.main
        in_ops = [main_sg.operands[i] for i in main_sg.input_indexes]
        sample = entry.samples(1)[0]
        inputs = [to_input(x, o) for x, o in zip(sample.inputs, in_ops, strict=True)]
        raw = functools.partial(Baseline(built.tflite, [o.dimensions for o in in_ops]).run, inputs)
        runs = {}
        for name, driver in drivers.items():
            ours = OnDriver(driver.prepare_model(built.model), built)
            runs[name] = functools.partial(ours.execute, ours.request(inputs))
        raw_ms, litert_ms, litert_ratio = paired(raw, runs["litert"], args.warmup, args.runs)
        reference_ms = median_ms(runs["reference"], 1, args.reference_runs)
        print(f"{entry.name:26s} {raw_ms:10.3f} {litert_ms:10.3f} {litert_ratio:6.3f} {reference_ms:10.1f} "
              f"{reference_ms / raw_ms:7.1f}", flush=True)


if __name__ == "__main__":
    main()
