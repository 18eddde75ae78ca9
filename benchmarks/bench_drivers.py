"""The real drivers: models exported and run per second, and the overhead of the nncert
driver over the raw runtime on the same model.

1. Throughput: every per-operation case of the catalogue (seed 0, base variation) that the
   driver claims, through supported_operations + prepare_model (export, load, the runtime's
   preparation) + one synchronous execution with shared-memory pools + the comparison. For
   the compilers (OpenVINO, IREE, TVM) twice: with an empty compile cache (cold) and with a
   new driver on the cache the first pass filled (warm: a suite's second run); a driver that
   compiles several models faster together (IREE) a third time, cold, told the models ahead
   as the conformance plugin tells it a suite's (``CompiledDriver.expect``).
2. Overhead: one model, prepared once, executed N times through the driver protocol
   (request validation, pools read and written, timing) against the runtime's own call on
   the very model the driver exported (LiteRT: set_tensor / invoke / get_tensor; ONNX
   Runtime: InferenceSession.run; OpenVINO: InferRequest.infer; IREE: the module's function;
   TVM: the Relax VM's main), alternating rounds in the same process; the ratio of the
   medians. Two models: a 3x3 convolution over 1x64x64x32 (work dominates) and a 1x8 ADD
   (the fixed cost dominates).

    python benchmarks/bench_drivers.py [--driver SPEC ...] [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from nncert.drivers import load_driver
from nncert.drivers.compiled import CompiledDriver
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.criteria import output_mismatches


def throughput(spec: str, cases, ahead: bool = False) -> tuple[int, int, float]:
    """(claimed cases, mismatching cases, seconds) over ``cases``; ``ahead``: the driver is
    told every case's model first, as the conformance plugin tells it the collected tests'
    (``CompiledDriver.expect``: a driver that compiles several models faster together does)."""
    driver = load_driver(spec)
    if ahead:
        driver.expect([lambda case=case: case.model()[0] for case in cases])
    claimed = bad = 0
    t0 = time.perf_counter()
    for case in cases:
        model, feeds = case.model()
        if not all(driver.supported_operations(model)):
            continue
        claimed += 1
        prepared = driver.prepare_model(model)
        dims = [e.shape for e in case.expected]
        request = build_request(model, feeds, dims)
        prepared.execute_synchronously(request)
        bad += bool(output_mismatches(model, case.expected, read_outputs(model, request, dims)))
    elapsed = time.perf_counter() - t0
    driver.close()
    return claimed, bad, elapsed


def conv_model():
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (1, 64, 64, 32))
    w = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, (32, 3, 3, 32)))
    bias = b.constant(T.TENSOR_FLOAT32, rng.uniform(-1, 1, (32,)))
    out = b.operand(T.TENSOR_FLOAT32, (1, 64, 64, 32))
    one = b.constant(T.INT32, 1)
    b.operation(OperationType.CONV_2D, [x, w, bias, one, one, one, b.constant(T.INT32, 1)], [out])
    return b.build([x], [out]), [rng.uniform(-1, 1, (1, 64, 64, 32)).astype(np.float32)]


def add_model():
    b = ModelBuilder()
    x, y = b.operand(T.TENSOR_FLOAT32, (1, 8)), b.operand(T.TENSOR_FLOAT32, (1, 8))
    out = b.operand(T.TENSOR_FLOAT32, (1, 8))
    b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out]), [np.ones((1, 8), np.float32), np.ones((1, 8), np.float32)]


def raw_runner(spec: str, executable):
    """The runtime's own call on the model the driver compiled."""
    if hasattr(executable, "interp"):  # LiteRT
        interp, ins, outs = executable.interp, executable.inputs, executable.outputs

        def run(feeds):
            for i, a in zip(ins, feeds, strict=True):
                interp.set_tensor(i, a)
            interp.invoke()
            return [interp.get_tensor(o) for o in outs]
        return run
    if hasattr(executable, "session"):  # ONNX Runtime
        session = executable.session
        names = [i.name for i in session.get_inputs()]

        def run(feeds):
            return session.run(None, dict(zip(names, feeds, strict=True)))
        return run
    if hasattr(executable, "compiled"):  # OpenVINO: an infer request on the compiled model
        request, n = executable.compiled.create_infer_request(), len(executable.compiled.outputs)

        def run(feeds):
            request.infer(feeds)
            return [request.get_output_tensor(i).data.copy() for i in range(n)]
        return run
    if hasattr(executable, "vm"):  # TVM: the Relax VM's main function
        import tvm
        main = executable.vm["main"]

        def run(feeds):
            out = main(*[tvm.runtime.tensor(a) for a in feeds])
            return [out.numpy()] if isinstance(out, tvm.runtime.Tensor) else [o.numpy() for o in out]
        return run
    function = executable._function  # IREE: the module's function on its VM context

    def run(feeds):
        out = function(*feeds)
        return [o.to_host() for o in (out if isinstance(out, (tuple, list)) else (out,))]
    return run


def overhead(spec: str, model, feeds, runs: int) -> tuple[float, float]:
    """(median seconds through the driver, median seconds of the raw runtime call)."""
    driver = load_driver(spec)
    prepared = driver.prepare_model(model)
    out = model.main.operands[model.main.output_indexes[0]]
    request = build_request(model, feeds, [out.dimensions])
    raw = raw_runner(spec, prepared._static)
    for _ in range(5):
        prepared.execute_synchronously(request)
        raw(feeds)
    mine, theirs = [], []
    for _ in range(runs):  # alternate, so that drift of the machine hits both alike
        t0 = time.perf_counter()
        prepared.execute_synchronously(request)
        t1 = time.perf_counter()
        raw(feeds)
        t2 = time.perf_counter()
        mine.append(t1 - t0)
        theirs.append(t2 - t1)
    driver.close()
    return statistics.median(mine), statistics.median(theirs)


def _caches(spec: str) -> bool:
    """Whether the driver keeps compiled artefacts in a compile cache."""
    return spec.split(":")[0] in ("openvino", "iree", "tvm")


def _with_option(spec: str, option: str) -> str:
    return f"{spec},{option}" if ":" in spec else f"{spec}:{option}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", action="append", metavar="SPEC",
                        help="a driver to measure (repeatable; default: litert in each kernels mode, "
                             "onnxruntime, openvino, iree and tvm)")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--only", choices=("throughput", "overhead"),
                        help="measure only one of the two (default: both)")
    args = parser.parse_args()
    specs = args.driver or ["litert", "litert:kernels=builtin", "litert:kernels=ref", "onnxruntime",
                            "openvino", "iree", "tvm"]
    if args.only != "overhead":
        measure_throughput(specs)
    if args.only != "throughput":
        measure_overhead(specs, args.runs)


def measure_throughput(specs: list[str]) -> None:
    cases = [sample_case(*k) for k in enumerate_cases(seeds=(0,))]
    print(f"throughput over {len(cases)} per-operation cases (seed 0, base variation)")
    with tempfile.TemporaryDirectory() as scratch:
        for spec in specs:
            if not _caches(spec):
                claimed, bad, elapsed = throughput(spec, cases)
                print(f"  {spec:28s} {claimed:5d} claimed  {claimed / elapsed:7.1f} models exported+run/s"
                      f"  ({bad} outside tolerance)")
                continue
            # A compiler's drivers: an empty compile cache, then a new driver on the filled one
            # (what a second run of a suite sees; the probes share the test's compilations);
            # and an empty one again with the models told ahead, where the driver compiles
            # them together (IREE).
            cached = _with_option(spec, f"cache={scratch}/{spec.replace(':', '_')}")
            ahead = _with_option(spec, f"cache={scratch}/{spec.replace(':', '_')}-ahead")
            driver = load_driver(spec)
            together = type(driver).build_together is not CompiledDriver.build_together
            driver.close()
            for state, where, told in (("cold cache", cached, False), ("warm cache", cached, False),
                                       *([("cold cache, told ahead", ahead, True)] if together else [])):
                claimed, bad, elapsed = throughput(where, cases, told)
                print(f"  {spec + ' (' + state + ')':34s} {claimed:5d} claimed  "
                      f"{claimed / elapsed:7.1f} models exported+compiled+run/s  ({bad} outside tolerance)")


def measure_overhead(specs: list[str], runs: int) -> None:
    print("overhead of the nncert driver over the raw runtime call (median of "
          f"{runs} alternating runs)")
    for spec in specs:
        for name, (model, feeds) in (("conv 1x64x64x32 3x3", conv_model()), ("add 1x8", add_model())):
            mine, theirs = overhead(spec, model, feeds, runs)
            print(f"  {spec:28s} {name:20s} driver {mine * 1e6:8.1f} us  raw {theirs * 1e6:8.1f} us"
                  f"  ratio {mine / theirs:.3f}x")


if __name__ == "__main__":
    main()
