"""Run the zoo on a driver and on the LiteRT CPU baseline (MLTS-1): accuracy, latency and
compilation time, per model.

The baseline is LiteRT's own interpreter on the entry's .tflite (one thread, the default
XNNPACK delegate: "the TFLite CPU"); the driver gets the entry's HAL model through the HAL
(prepare_model, execute_synchronously). Every sample goes through both; then, on the first
sample, ``warmup`` runs and ``runs`` timed runs of each give the latency figures. The
compilation is timed without the compilation cache, and, for a driver that has one, with
it: the first preparation writes the cache (a miss), the second reads it (a hit).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nncert.drivers.base import Driver, PreparedModel
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import Request
from nncert.mlts import accuracy
from nncert.mlts.zoo import Built, Sample, ZooModel, to_input
from nncert.testing.harness import CaseError
from nncert.testing.harness import declined as why_declined


@dataclass
class RunConfig:
    limit: int | None = None  # samples per model (None: the whole data set)
    warmup: int = 5
    runs: int = 30
    cache_timing: bool = True

    def __post_init__(self) -> None:
        # Neutral names: the CLI (--limit) and the pytest suite (--mlts-limit) both report these.
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be at least 1 sample, not {self.limit}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0 runs, not {self.warmup}")
        if self.runs < 1:
            raise ValueError(f"runs must be at least 1, not {self.runs}")


@dataclass
class ModelResult:
    entry: ZooModel
    driver: str
    #: PASS; FAIL (less accurate than the baseline); ERROR (could not run); UNSUPPORTED (the
    #: driver declines some of the model's operations, as getSupportedOperations says: an app's
    #: runtime would run those elsewhere, so the model says nothing about the driver); XFAIL / XPASS
    #: (``apply_expectations``: a failure the driver's expectations list, or one that did not happen).
    status: str = "PASS"
    reasons: list[str] = field(default_factory=list)
    samples: int = 0
    outputs: list[accuracy.OutputStats] = field(default_factory=list)
    classes: accuracy.ClassStats | None = None
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # who -> stats (ms)
    compile_ms: dict[str, float] = field(default_factory=dict)  # plain / cache_miss / cache_hit
    #: Run on the first ``limit`` samples, not the whole data set: a pass then says nothing about
    #: the samples further on (``not_refuted``).
    limited: bool = False

    def fail(self, reason: str, status: str = "FAIL") -> None:
        self.reasons.append(reason)
        if self.status != "ERROR":
            self.status = status


#: The pytest node id of the accuracy test, ``[NAME]`` appended per model: the one name an
#: expectations entry gives a model, for ``pytest mlts`` and ``nncert mlts`` alike.
ACCURACY_TEST = "mlts/test_accuracy.py::test_model"


def expectation_id(entry: ZooModel) -> str:
    """How an expectations file names an MLTS model: the node id of its pytest test."""
    return f"{ACCURACY_TEST}[{entry.name}]"


def not_refuted(result: ModelResult) -> str | None:
    """Why a pass does not refute a listed failure: the run was limited to the first samples,
    and the listed failure may lie further on (None when the whole data set passed)."""
    if result.status != "PASS" or not result.limited:
        return None
    return (f"passed on the first {result.samples} samples only; a limited run neither confirms "
            "nor refutes the listed failure")


def apply_expectations(results: list[ModelResult], expectations: list) -> None:
    """Strict xfails, as in the conformance suites: a FAIL the driver's expectations list
    becomes XFAIL with the entry's reason; a listed model that passed becomes XPASS, a failure
    (the entry is stale), unless the run was limited (``not_refuted``: XFAIL, saying so)."""
    from nncert.testing.expectations import match

    for r in results:
        exp = match(expectations, expectation_id(r.entry))
        if exp is None:
            continue
        unrefuted = not_refuted(r)
        if r.status == "FAIL":
            r.status = "XFAIL"
            r.reasons.append(f"expected: {exp.describe()}")
        elif unrefuted:
            r.status = "XFAIL"
            r.reasons.append(f"expected: {exp.describe()}; {unrefuted}")
        elif r.status == "PASS":
            r.status = "XPASS"
            r.reasons.append(f"listed as an expected failure but passed: {exp.describe()}")


def baseline_interpreter(tflite: bytes, input_dims: Sequence[Sequence[int]] = ()) -> Any:
    """LiteRT's interpreter on ``tflite``: one thread, the default delegate (XNNPACK). Inputs
    are resized to ``input_dims`` where given and different from the file's (a dynamic size)."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=tflite, num_threads=1)
    for d, dims in zip(interp.get_input_details(), input_dims, strict=False):
        if dims and tuple(d["shape"]) != tuple(dims):
            interp.resize_tensor_input(d["index"], list(dims))
    interp.allocate_tensors()
    return interp


class Baseline:
    """The LiteRT CPU baseline: inputs in the model's stored types, outputs copied out. An
    input of dynamic size in the .tflite is resized to ``input_dims`` (the HAL model's)."""

    def __init__(self, tflite: bytes, input_dims: list[tuple[int, ...]]) -> None:
        self.interp = baseline_interpreter(tflite, input_dims)
        self.inputs = [d["index"] for d in self.interp.get_input_details()]
        self.outputs = [d["index"] for d in self.interp.get_output_details()]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for i, x in zip(self.inputs, inputs, strict=True):
            self.interp.set_tensor(i, x)
        self.interp.invoke()
        return [self.interp.get_tensor(i).copy() for i in self.outputs]


class OnDriver:
    """A prepared model on the driver under test, with the request built once per sample."""

    def __init__(self, prepared: PreparedModel, built: Built) -> None:
        self.prepared, self.model = prepared, built.model
        main = built.model.main
        self.output_dims = [main.operands[i].dimensions for i in main.output_indexes]

    def request(self, inputs: list[np.ndarray]) -> Request:
        return build_request(self.model, inputs)

    def execute(self, request: Request) -> list[np.ndarray]:
        shapes, _ = self.prepared.execute_synchronously(request)
        return read_outputs(self.model, request, [s.dimensions for s in shapes] or self.output_dims)


def latency_stats(times_s: list[float]) -> dict[str, float]:
    ms = np.asarray(times_s) * 1e3
    return {"mean_ms": float(ms.mean()), "p50_ms": float(np.percentile(ms, 50)),
            "p90_ms": float(np.percentile(ms, 90)), "p99_ms": float(np.percentile(ms, 99)),
            "runs": len(ms)}


def timed(fn: Callable[[], object], warmup: int, runs: int) -> list[float]:
    """Seconds of each of ``runs`` calls of ``fn``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _compile_times(driver: Driver, model, result: ModelResult, cache_timing: bool) -> PreparedModel:
    """Prepare ``model`` (timed), and time a cache miss and a hit where the driver caches."""
    from nncert.drivers.caching import prepare_with_cache

    start = time.perf_counter()
    prepared = driver.prepare_model(model)
    result.compile_ms["plain"] = (time.perf_counter() - start) * 1e3
    if cache_timing and driver.number_of_cache_files_needed() != (0, 0):
        with tempfile.TemporaryDirectory(prefix="nncert-mlts-cache-") as cache:
            for expected in ("miss", "hit"):
                start = time.perf_counter()
                outcome = prepare_with_cache(driver, model, cache)
                elapsed = (time.perf_counter() - start) * 1e3
                if outcome.kind == expected:
                    result.compile_ms[f"cache_{expected}"] = elapsed
                else:
                    result.reasons.append(f"compilation cache: {expected} expected, got {outcome.describe()}")
    return prepared


def _executions(entry: ZooModel, states: list, ours: OnDriver, in_ops: list, sample: Sample,
                baseline: Baseline) -> Iterator[tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]]:
    """(driver inputs, baseline outputs, driver outputs) of each execution a sample makes: one,
    or one per step of a streaming model, the driver's state outputs fed back as its state
    inputs (the baseline, made afresh per sample, keeps its own state)."""
    if not entry.streaming:
        inputs = [to_input(x, o) for x, o in zip(sample.inputs, in_ops, strict=True)]
        yield inputs, baseline.run(inputs), ours.execute(ours.request(inputs))
        return
    values = {s.input_index: s.initial for s in states}
    for step in sample.inputs[0]:
        inputs = [to_input(step, in_ops[0]), *(values[i] for i in range(1, len(in_ops)))]
        got = ours.execute(ours.request(inputs))
        values = {s.input_index: got[s.output_index] for s in states}
        yield inputs, baseline.run(inputs[:1]), got


def evaluate(entry: ZooModel, built: Built, driver: Driver, driver_name: str, samples: list[Sample],
             config: RunConfig, tick: Callable[[], None] = lambda: None) -> ModelResult:
    """Run ``samples`` through the driver and the baseline, judge, and time both."""
    # A data set no longer than the limit is whole; one exactly as long counts as limited (a
    # pass then stays inconclusive for a listed failure, the safe side).
    limited = config.limit is not None and len(samples) >= config.limit
    result = ModelResult(entry, driver_name, limited=limited)
    main = built.model.main
    in_ops = [main.operands[i] for i in main.input_indexes]
    out_ops = [main.operands[i] for i in main.output_indexes]
    try:
        declined = why_declined(driver, built.model)
    except (HalError, CaseError) as e:  # a valid model refused, or answered for wrongly (DRV-2)
        result.fail(f"supported_operations: {e}", "ERROR")
        return result
    if declined:
        result.status = "UNSUPPORTED"
        result.reasons.append(declined)
        return result
    try:
        prepared = _compile_times(driver, built.model, result, config.cache_timing)
    except HalError as e:
        result.fail(f"prepare_model: {e.status.name}: {e.message}", "ERROR")
        return result
    ours = OnDriver(prepared, built)
    dims = [o.dimensions for o in in_ops]

    def fresh_baseline() -> Baseline:
        return Baseline(built.tflite, dims[:1] if entry.streaming else dims)

    baseline = fresh_baseline()
    n_outputs = len(baseline.outputs)  # the model's own (a streaming model's state comes after)
    result.outputs = accuracy.output_stats(out_ops[:n_outputs], entry.steps, entry.count_output is not None)
    result.classes = accuracy.ClassStats() if entry.task == "classification" else None
    states = []  # a streaming model's state variables: read from the .tflite once, not per sample
    if entry.streaming:
        from nncert.mlts.tflite_import import import_report

        states = import_report(built.tflite).state
    first: list[np.ndarray] | None = None
    for sample in samples:
        if entry.streaming:
            baseline = fresh_baseline()
        try:
            for inputs, expected, got in _executions(entry, states, ours, in_ops, sample, baseline):
                first = first or inputs
                if entry.count_output is not None:  # rows past the count are unspecified
                    expected, got = accuracy.valid_rows(expected, got, entry.count_output)
                for stats, b, d in zip(result.outputs, expected, got, strict=False):
                    stats.add(b, d)
                if result.classes is not None:
                    result.classes.add(accuracy.real(expected[0], out_ops[0]),
                                       accuracy.real(got[0], out_ops[0]), sample.labels, entry.label_offset)
        except HalError as e:
            result.fail(f"sample {sample.name}: execute: {e.status.name}: {e.message}", "ERROR")
            return result
        result.samples += 1
        tick()
    if not result.samples:
        result.fail("no samples: the data set gives this model no input", "ERROR")
    for stats in result.outputs:
        problem = stats.failure()
        if problem:
            result.fail(problem)
    if result.classes is not None:
        problem = result.classes.failure()
        if problem:
            result.fail(problem)
    if first is not None:  # the request is built once, as an app reusing its buffers does
        request = ours.request(first)
        result.latency["driver"] = latency_stats(timed(lambda: ours.execute(request), config.warmup,
                                                        config.runs))
        base_inputs = first[:len(baseline.inputs)]
        result.latency["baseline"] = latency_stats(timed(lambda: baseline.run(base_inputs), config.warmup,
                                                          config.runs))
    return result


__all__ = ["ACCURACY_TEST", "Baseline", "ModelResult", "OnDriver", "RunConfig", "apply_expectations",
           "baseline_interpreter", "evaluate", "expectation_id", "latency_stats", "not_refuted", "timed"]
