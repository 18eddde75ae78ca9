"""MLTS-2: the stress / crash modes against ``--driver``, one test per mode. Each case runs
isolated in a child process and ends SUCCESS, FAILURE, HANG or CRASH; anything but SUCCESS
fails the test with the kind and the reason, and the suite moves on. A driver that declines
the mode's models (supported_operations) is a Declined skip with its reason, not a failure."""

from __future__ import annotations

import pytest

from nncert.mlts.stress import DECLINED, MODES, run_case
from nncert.testing.harness import decline


@pytest.mark.req("MLTS-2")
@pytest.mark.parametrize("mode", list(MODES))
def test_stress(mode, driver, pytestconfig, stress_config, record_property):
    record = run_case(mode, driver, pytestconfig.getoption("driver"), stress_config)
    record_property("mlts_stress", record.to_json())
    if record.kind == DECLINED:
        decline(record.reason)
    if not record.ok:
        pytest.fail(f"{record.kind}: {record.reason}", pytrace=False)
