"""Compilation caching: preparation time without caching, with caching (compile and write the
cache), and from the cache (read, hash check, import), per driver, on one model.

Each round uses a fresh driver instance, so that nothing a driver keeps between
preparations (LiteRT's and ONNX Runtime's per-operation probes) helps the cold numbers; the
figures are medians over the rounds. The model: a chain of 20 operations (3x3 convolutions
over 1x32x32x16 with ReLU, alternating with ADDs of a constant), whose constants are real
weights (CONSTANT_REFERENCE pools), so that the data cache is not trivial.

    python benchmarks/bench_caching.py [--driver SPEC ...] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from nncert.drivers import load_driver
from nncert.drivers.caching import TOKEN_SIZE
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op


def chain_model(depth: int = 20):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    shape = (1, 32, 32, 16)
    x = b.operand(T.TENSOR_FLOAT32, shape)
    one, same, relu = b.constant(T.INT32, 1), b.constant(T.INT32, 1), b.constant(T.INT32, 1)
    cur = x
    for k in range(depth):
        out = b.operand(T.TENSOR_FLOAT32, shape)
        if k % 2 == 0:
            w = b.constant(T.TENSOR_FLOAT32, rng.uniform(-0.1, 0.1, (16, 3, 3, 16)))
            bias = b.constant(T.TENSOR_FLOAT32, rng.uniform(-0.1, 0.1, (16,)))
            b.operation(Op.CONV_2D, [cur, w, bias, same, one, one, relu], [out])
        else:
            c = b.constant(T.TENSOR_FLOAT32, rng.uniform(-0.1, 0.1, shape))
            none = b.constant(T.INT32, 0)
            b.operation(Op.ADD, [cur, c, none], [out])
        cur = out
    return b.build([x], [cur]), rng.uniform(-1, 1, shape).astype(np.float32)


def measure(spec: str, rounds: int) -> dict[str, float]:
    model, feed = chain_model()
    times: dict[str, list[float]] = {"plain": [], "save": [], "load": []}
    sizes = (0, 0)
    with tempfile.TemporaryDirectory() as state, tempfile.TemporaryDirectory() as cache_dir:
        options = {"state_dir": state} if not spec.startswith("service:") else {}
        for r in range(rounds):
            token = r.to_bytes(TOKEN_SIZE, "little")
            paths = [os.path.join(cache_dir, f"{r}-{kind}") for kind in ("model", "data")]
            fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in paths]
            try:
                driver = load_driver(spec, options)
                t0 = time.perf_counter()
                driver.prepare_model(model)
                times["plain"].append(time.perf_counter() - t0)
                driver.close()
                driver = load_driver(spec, options)
                t0 = time.perf_counter()
                driver.prepare_model(model, model_cache=fds[:1], data_cache=fds[1:], token=token)
                times["save"].append(time.perf_counter() - t0)
                driver.close()
                driver = load_driver(spec, options)
                t0 = time.perf_counter()
                prepared = driver.prepare_model_from_cache(None, fds[:1], fds[1:], token)
                times["load"].append(time.perf_counter() - t0)
                request = build_request(model, [feed])
                prepared.execute_synchronously(request)
                assert np.isfinite(read_outputs(model, request, [feed.shape])[0]).all()
                driver.close()
                sizes = tuple(os.path.getsize(p) for p in paths)
            finally:
                for fd in fds:
                    os.close(fd)
    result = {k: statistics.median(v) for k, v in times.items()}
    result["model_kib"], result["data_kib"] = sizes[0] / 1024, sizes[1] / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", action="append",
                        help="driver spec (repeatable; default: reference, litert, onnxruntime)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'driver':<14} {'plain ms':>9} {'save ms':>9} {'load ms':>9} {'plain/load':>10} "
          f"{'model KiB':>10} {'data KiB':>9}")
    for spec in args.driver or ["reference", "litert", "onnxruntime"]:
        r = measure(spec, args.rounds)
        print(f"{spec:<14} {r['plain'] * 1e3:9.1f} {r['save'] * 1e3:9.1f} {r['load'] * 1e3:9.1f} "
              f"{r['plain'] / r['load']:10.1f} {r['model_kib']:10.0f} {r['data_kib']:9.0f}")


if __name__ == "__main__":
    main()
