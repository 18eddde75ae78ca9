"""A fuzz campaign's processes share the support probe's verdicts (issue 23,
nncert.drivers.probe_verdicts): a driver in another process (a restarted worker, a replay)
takes a verdict from the store instead of probing, declines included; drivers with other
options do not share; a probe that ran out of time is not kept; a line being written is read
once it is whole."""

from __future__ import annotations

import os

import pytest
from test_compiled import FaultyCompiled, NumpyCompiled, _unary_model

from nncert.drivers import probe_verdicts
from nncert.hal.types import OperationType
from nncert.testing.outcome import Kind, run_isolated

RELU, TANH = OperationType.RELU, OperationType.TANH


@pytest.fixture
def store(tmp_path):
    probe_verdicts.use(tmp_path / "verdicts")
    yield tmp_path / "verdicts"
    probe_verdicts.use(None)


def _reasons_elsewhere(make, model) -> list:
    """The driver's decline reasons worked out in another process (a fork: its own pid)."""
    outcome = run_isolated(lambda: make().decline_reasons(model), timeout=60)
    assert outcome.kind is Kind.SUCCESS, outcome.reason
    return outcome.value


def test_another_process_takes_the_verdicts_without_probing(store):
    model = _unary_model(RELU, TANH)
    make = lambda: FaultyCompiled(at_run={TANH: "abort"})  # noqa: E731
    probed = _reasons_elsewhere(make, model)
    assert probed[0] is None and "killed by SIGABRT when it runs TANH" in probed[1]
    driver = make()
    assert driver.decline_reasons(model) == probed
    assert driver._probe_child is None  # nothing probed here: no child started
    # other options, other verdicts: this driver probes for itself
    other = NumpyCompiled()
    assert other.decline_reasons(model) == [None, None] and other._probe_child is not None


def test_a_probe_that_ran_out_of_time_is_not_kept(store):
    space = probe_verdicts.current().space(NumpyCompiled())
    space.put({b"a": "numpy: no answer within 120 s when it runs TANH", b"b": None,
               b"c": "the support probe failed: it broke", b"d": "kernel rejects RELU"})
    lines = (space.dir / f"{os.getpid()}.jsonl").read_text().splitlines()
    assert len(lines) == 2
    fresh = probe_verdicts.VerdictStore(store).space(NumpyCompiled())
    fresh._pid = -1  # as another process: this one's file is not its own
    assert fresh.get(b"b") == (True, None) and fresh.get(b"d") == (True, "kernel rejects RELU")
    assert fresh.get(b"a") == (False, None)


def test_a_line_being_written_is_read_once_whole(store):
    space = probe_verdicts.current().space(NumpyCompiled())
    other = space.dir / "1.jsonl"
    other.write_text('{"k": "aa", "v": null}\n{"k": "bb", "v": "kern')
    assert space.get(bytes.fromhex("aa")) == (True, None)
    assert space.get(bytes.fromhex("bb")) == (False, None)
    with other.open("a") as f:
        f.write('el rejects it"}\n[1, 2]\n')  # and a line that is no record: skipped
    assert space.get(bytes.fromhex("bb")) == (True, "kernel rejects it")
    probe_verdicts.VerdictStore(store).clear()
    assert not any(space.dir.iterdir())
