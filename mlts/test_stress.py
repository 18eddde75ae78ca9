"""MLTS-2: the stress / crash modes against ``--driver``, one test per mode. Each case runs
isolated in a child process and ends SUCCESS, FAILURE, HANG or CRASH; anything but SUCCESS
fails the test with the kind and the reason, and the suite moves on. A driver that declines
the mode's models (supported_operations) is a Declined skip with its reason, not a failure."""

from __future__ import annotations

import pytest

from nncert.mlts.stress import DECLINED, MODES, run_case
from nncert.testing.harness import decline

#: A latency ratio is a measurement, not a pass/fail test where CI runs it: beside whatever else
#: a busy host runs it moved from 1.0x (alone) to 2.4x and 9.7x (the end of a CI run). It is
#: judged where it is asked for (-m slow, and `nncert certify`, whose plans run every mode);
#: tests/test_mlts_stress.py checks its figures and its verdict either way in the default run.
_MEASURED = {"performance_degradation"}


@pytest.mark.req("MLTS-2")
@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.slow) if m in _MEASURED else m
                                  for m in MODES])
def test_stress(mode, driver, pytestconfig, stress_config, record_property):
    record = run_case(mode, driver, pytestconfig.getoption("driver"), stress_config)
    record_property("mlts_stress", record.to_json())
    if record.kind == DECLINED:
        decline(record.reason)
    if not record.ok:
        pytest.fail(f"{record.kind}: {record.reason}", pytrace=False)
