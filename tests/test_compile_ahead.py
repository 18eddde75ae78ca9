"""The compile-ahead (CompiledDriver.expect, nncert.drivers.probe.build_ahead): a driver that
compiles several models faster together is told what the tests will prepare, and compiles the
next ones with each it must compile, in its probe child, into the compile cache. Whatever the
runtime refuses together, or a child that dies, leaves those models to be compiled alone, with
the same verdicts and results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_compiled import NumpyCompiled, _Numpy, _unary_model

from nncert.drivers.compile_cache import CompileCache
from nncert.drivers.compiled import CompiledDriver, RefusedTogether, _model_digest
from nncert.hal.builder import build_request, read_outputs
from nncert.hal.types import OperationType
from nncert.ops.interpreter import run_model

RELU, TANH, LOGISTIC, ABS, EXP, NEG = (OperationType.RELU, OperationType.TANH, OperationType.LOGISTIC,
                                       OperationType.ABS, OperationType.EXP, OperationType.NEG)


class TogetherCompiled(NumpyCompiled):
    """NumpyCompiled through the compile cache: ``translate`` names the operations, ``build``
    and ``build_together`` mark their artefacts, so that the cache shows how each was made.
    ``refuse`` names operations ``build_together`` refuses, by position (``how="names"``) or as
    a whole (``how="halves"``); ``how="abort"`` kills the process building together."""

    name = "together-compiled"

    def __init__(self, refuse=(), how="names"):
        super().__init__()
        self.compile_cache = CompileCache(self.name, "v1", os.environ["NNCERT_TEST_AHEAD_CACHE"])
        self.refuse_together, self.how = {OperationType[n] for n in refuse}, how

    def translate(self, model):
        return ",".join(op.type.name for op in model.main.operations).encode() + b"|" + _model_digest(model)

    def build(self, content, model):
        return b"alone:" + content

    def build_together(self, contents):
        if self.how == "abort":
            os.abort()
        refused = [n for n, c in enumerate(contents)
                   if {OperationType[t] for t in c.split(b"|")[0].decode().split(",")} & self.refuse_together]
        if refused:
            if self.how == "names":
                raise RefusedTogether(refused)
            raise ValueError("the runtime refuses the lot")
        return [b"together:" + c for c in contents]

    def load_built(self, artefact, model):
        assert artefact.startswith((b"alone:", b"together:")), artefact[:20]
        return _Numpy(model)

    compile = CompiledDriver.compile  # through runtime_form and the cache, as real ones do


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NNCERT_TEST_AHEAD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


MODELS = [_unary_model(op, dims=(2, n + 1))
          for n, op in enumerate([RELU, TANH, LOGISTIC, ABS, EXP, NEG, TANH])]


def _how_built(driver, model) -> str:
    artefact = driver.compile_cache.get(driver._cache_key(model, driver.translate(model)))
    return "missing" if artefact is None else artefact.split(b":")[0].decode()


def _run_all(driver):
    """Each model claimed, prepared and run right; how each model's artefact was built."""
    built = []
    for model in MODELS:
        assert driver.supported_operations(model) == [True]
        dims = model.main.operands[model.main.input_indexes[0]].dimensions
        a = np.linspace(-2, 2, int(np.prod(dims)), dtype=np.float32).reshape(dims)
        request = build_request(model, [a], [dims])
        driver.prepare_model(model).execute_synchronously(request)
        got = read_outputs(model, request, [dims])[0]
        np.testing.assert_array_equal(got, run_model(model, [a])[0])
        built.append(_how_built(driver, model))
    return built


def test_the_expected_models_are_compiled_together_with_the_first_and_then_loaded():
    driver = TogetherCompiled()
    driver.expect([lambda m=m: m for m in MODELS])
    assert _run_all(driver) == ["together"] * len(MODELS)
    assert driver._ahead_at == len(MODELS) and not driver._ahead_failed


def test_without_expect_each_model_is_compiled_alone():
    assert _run_all(TogetherCompiled()) == ["alone"] * len(MODELS)


@pytest.mark.parametrize("how", ["names", "halves"])
def test_what_the_runtime_refuses_together_is_compiled_alone_and_the_rest_together(how):
    driver = TogetherCompiled(refuse=["TANH"], how=how)
    driver.expect([lambda m=m: m for m in MODELS])
    built = _run_all(driver)
    assert built == ["alone" if m.main.operations[0].type is TANH else "together" for m in MODELS]
    assert driver._ahead_failed  # not tried together again


def test_a_child_that_dies_building_together_leaves_every_model_to_be_compiled_alone():
    driver = TogetherCompiled(how="abort")
    driver.expect([lambda m=m: m for m in MODELS])
    assert _run_all(driver) == ["alone"] * len(MODELS)


def test_the_conformance_plugin_tells_the_driver_what_its_tests_prepare(cache_dir):
    """``pytest conformance`` hands the collected per-operation tests' models to the driver:
    the first test's compilation builds the others' too, which the later tests load."""
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]))
    ids = [f"conformance/test_operations.py::test_operation[{op}-float32-s0]"
           for op in ("TANH", "LOGISTIC", "ELU")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--crash-guard=off",
         "--no-three-way", "--driver=test_compile_ahead:TogetherCompiled", *ids],
        cwd=tests.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    entries = [p.read_bytes() for p in (cache_dir).glob("*.art")]
    assert len(entries) >= 3 and all(b"together:" in e for e in entries)


def test_a_random_graph_campaign_tells_the_driver_every_graph(cache_dir):
    """``nncert graphs`` (run_cells) and the random-graph suite tell the driver each cell's
    graphs in the order they run: the first compilation builds the rest with it."""
    from nncert.testing import random_graphs as rg
    from nncert.testing.graphs import Cell

    cells = [Cell.parse("single-ADD-1.0"), Cell.parse("small-float32-rank2")]
    results = rg.run_cells(TogetherCompiled(), cells, seed=0, graphs=3)
    assert [r.passed for r in results] == [3, 3]
    entries = [p.read_bytes() for p in cache_dir.glob("*.art")]
    assert len(entries) >= 6 and all(b"together:" in e for e in entries), \
        sorted(e.split(b"|")[0][-60:] for e in entries if b"together:" not in e)


@pytest.mark.parametrize("batch", [32, 2])
def test_models_another_process_claimed_are_left_to_it(batch):
    """Two processes told the same tests (pytest-xdist workers): what one has claimed the other
    does not compile ahead; it compiles such a model alone if it needs it first. In batches of
    2, models are still expected when the (forked) probe child compiles a claimed one alone:
    it must not compile ahead itself (it would wait for ever on the lock its parent held)."""
    driver = TogetherCompiled()
    driver.AHEAD_BATCH = batch
    driver.probe_timeout = 20.0
    others = [m for m in MODELS if m.main.operations[0].type in (TANH, EXP)]
    held = driver.compile_cache.claim(driver._uncached(others))
    assert held
    driver.expect([lambda m=m: m for m in MODELS])
    built = _run_all(driver)
    claimed = [m.main.operations[0].type in (TANH, EXP) for m in MODELS]
    assert [b for b, c in zip(built, claimed, strict=True) if c] == ["alone"] * 3
    if batch == 32:
        assert built == ["alone" if c else "together" for c in claimed]
    driver.compile_cache.release(held)
