"""The support probe asks its child once a model (issue 23): the operations of a model that
are not cached go to the probe child in one request, each with its own deadline, and a death
in the middle keeps what the child had finished and judges the rest as if probed alone."""

from __future__ import annotations

import time

import pytest
from test_compiled import FaultyCompiled, NumpyCompiled, _unary_model

from nncert.drivers.probe import ProbeChild
from nncert.hal.errors import HalError
from nncert.hal.types import OperationType

RELU, TANH, LOGISTIC = OperationType.RELU, OperationType.TANH, OperationType.LOGISTIC


def _count_requests(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = ProbeChild.ask
    monkeypatch.setattr(ProbeChild, "ask", lambda self, probes, budgets: sizes.append(len(probes))
                        or real(self, probes, budgets))
    return sizes


def test_a_models_uncached_operations_go_to_the_child_in_one_request(monkeypatch):
    sizes = _count_requests(monkeypatch)
    driver = NumpyCompiled()
    model = _unary_model(RELU, TANH, RELU, LOGISTIC)
    assert driver.supported_operations(model) == [True] * 4
    assert sizes == [3]  # the second RELU has the first one's signature: probed once
    assert driver._probe_child.served == 3 and len(driver.compiled) == 0  # compiled in the child
    assert driver.supported_operations(_unary_model(TANH, OperationType.ABS)) == [True, True]
    assert sizes == [3, 1]  # TANH from the cache


def test_a_death_in_the_middle_keeps_the_finished_probes_and_retries_the_dead_one_first(monkeypatch):
    """TANH's compilation aborts once the child has compiled anything (state an earlier probe
    left): the first child finishes RELU and dies on TANH; TANH goes first to a fresh child,
    which compiles it, then LOGISTIC. RELU is not probed again."""
    sizes = _count_requests(monkeypatch)
    driver = FaultyCompiled(at_compile={TANH}, after=1)
    assert driver.supported_operations(_unary_model(RELU, TANH, LOGISTIC)) == [True, True, True]
    assert sizes == [3, 2] and driver._probe_child.served == 2


def test_probes_that_break_each_other_end():
    """Each of RELU and TANH aborts in a child that has compiled something before: asked
    together they would kill every child in turn if the finished one were asked again."""
    driver = FaultyCompiled(at_compile={RELU, TANH}, after=1)
    assert driver.supported_operations(_unary_model(RELU, TANH)) == [True, True]


def test_a_crash_after_others_in_a_fresh_child_is_declined_and_the_rest_are_probed():
    driver = FaultyCompiled(at_run={TANH: "abort"})
    reasons = driver.decline_reasons(_unary_model(RELU, TANH, LOGISTIC))
    assert reasons[0] is None and reasons[2] is None
    assert "killed by SIGABRT when it runs TANH on TENSOR_FLOAT32[2, 2]" in reasons[1]


class _Slow:
    def __init__(self, exe, seconds):
        self.exe, self.seconds = exe, seconds

    def run(self, inputs):
        time.sleep(self.seconds)
        return self.exe.run(inputs)


class SlowCompiled(NumpyCompiled):
    """Every run takes ``seconds``."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def compile(self, model):
        return _Slow(super().compile(model), self.seconds)


def test_each_probe_of_a_request_has_its_own_deadline():
    # Three probes of 1.2 s each in one request: 3.6 s in all, each within its 2 s.
    driver = SlowCompiled(1.2)
    driver.probe_timeout = 2.0
    assert driver.decline_reasons(_unary_model(RELU, TANH, LOGISTIC)) == [None, None, None]
    # A hang in the third is declined with the third's own budget.
    hanging = FaultyCompiled(at_run={TANH: "hang"})
    hanging.probe_timeout = 1.0
    start = time.monotonic()
    reasons = hanging.decline_reasons(_unary_model(RELU, LOGISTIC, TANH))
    assert reasons[:2] == [None, None] and time.monotonic() - start < 20
    assert "no answer within 1 s when it runs TANH" in reasons[2]


def test_preparing_a_model_reuses_the_plans_of_its_supported_operations(monkeypatch):
    from nncert.drivers.compiled import CompiledDriver

    planned = []
    real = CompiledDriver._probe_plan
    monkeypatch.setattr(CompiledDriver, "_probe_plan", lambda self, wide, n: planned.append(n)
                        or real(self, wide, n))
    driver = NumpyCompiled(reject_at_compile={TANH})
    model = _unary_model(RELU, LOGISTIC)
    assert driver.supported_operations(model) == [True, True] and planned == [0, 1]
    driver.prepare_model(model)
    assert planned == [0, 1]  # the same content: planned once
    # Changed in place afterwards: planned (and probed) again, and refused.
    model.main.operations[1].type = TANH
    with pytest.raises(HalError) as e:
        driver.prepare_model(model)
    assert "operation 1 (TANH) is not supported" in e.value.message
    assert "kernel rejects TANH" in e.value.message
    assert planned == [0, 1, 0, 1]


def test_a_full_probe_cache_starts_afresh_without_losing_a_models_verdicts(monkeypatch):
    from nncert.drivers import compiled

    monkeypatch.setattr(compiled, "PROBE_CACHE", 2)
    driver = NumpyCompiled(reject_at_compile={TANH})
    assert driver.supported_operations(_unary_model(RELU)) == [True]
    # RELU from the cache, TANH and LOGISTIC probed: three verdicts, more than the cache keeps
    assert driver.supported_operations(_unary_model(RELU, TANH, LOGISTIC)) == [True, False, True]
    assert len(driver._probes) == 2
