"""VAL-3: every fuzz target's campaign against ``--driver`` for ``--fuzz-seconds`` (a smoke run in
a certification; `nncert fuzz` runs long campaigns). A finding the driver's expectations do not
already list fails the test with its replay command; known ones are recorded, not failed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from nncert.fuzz.campaign import Campaign, CampaignConfig, known_targets, resolve_target


@pytest.mark.req("VAL-3")
@pytest.mark.parametrize("target", sorted(known_targets()))
def test_fuzz_target(target, pytestconfig, tmp_path, record_property):
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed: pip install 'nncert[fuzz]'")
    out = Path(pytestconfig.getoption("fuzz_out") or tmp_path) / target
    found, script = resolve_target(target)
    config = CampaignConfig(time=pytestconfig.getoption("fuzz_seconds"),
                            seed=pytestconfig.getoption("fuzz_seed"), minimise_time=5.0)
    summary = Campaign(found, script, pytestconfig.getoption("driver"), out, config).run()
    findings = [{"key": key, **f} for key, f in summary["findings_by_key"].items()]
    record_property("nncert_fuzz", {"target": target, "execs": summary["execs"], "corpus": summary["corpus"],
                                    "seconds": summary["elapsed_s"], "findings": findings})
    new = [f for f in findings if not f["known"]]
    if new:
        pytest.fail("; ".join(f"VAL-3: {f['kind']} {f['key']}: {f['message']} (replay: {f['command']})"
                              for f in new), pytrace=False)
    if summary["execs"] == 0:  # libFuzzer was still loading its corpus: nothing was tested
        pytest.skip(f"the {target} campaign ran no input in {summary['elapsed_s']} s (a slow or busy "
                    f"machine: give it more --fuzz-seconds)")
