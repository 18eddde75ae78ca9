"""VAL-3: every fuzz target's campaign against ``--driver`` for ``--fuzz-seconds`` (a smoke run in
a certification; `nncert fuzz` runs long campaigns). A finding the driver's expectations do not
already list fails the test with its replay command; known ones are recorded, not failed. A
campaign's findings, logs and summary stay in ``--fuzz-out``; its corpus does not.

The selected targets' campaigns run at once (a campaign's time is wall-clock time, most of a
short one is its workers' start-up), each test waiting for its own; under ``--isolate`` a test
runs only its own, and so does a test on a pytest-xdist worker (every worker collects every
target, and two campaigns of one target would share its directory)."""

from __future__ import annotations

import importlib.util
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from nncert.fuzz.campaign import Campaign, CampaignConfig, known_targets, resolve_target


def _campaign(target: str, config: pytest.Config, out: Path) -> dict[str, Any]:
    found, script = resolve_target(target)
    settings = CampaignConfig(time=config.getoption("fuzz_seconds"), seed=config.getoption("fuzz_seed"),
                              minimise_time=5.0, max_seeds=config.getoption("fuzz_seeds"))
    summary = Campaign(found, script, config.getoption("driver"), out / target, settings).run()
    # The corpus is thousands of files a smoke run grew and nobody replays (its findings, their
    # inputs and replay commands stay): `nncert fuzz` keeps it, for campaigns that go on.
    shutil.rmtree(out / target / "corpus", ignore_errors=True)
    return summary


@pytest.fixture(scope="session")
def campaigns(request: pytest.FixtureRequest):
    """target -> the future of its campaign's summary, for every target this session runs."""
    config = request.config
    out = Path(config.getoption("fuzz_out"))
    targets = sorted({item.callspec.params["target"] for item in request.session.items
                      if item.originalname == "test_fuzz_target"})
    pool = ThreadPoolExecutor(max_workers=max(1, len(targets)))
    futures: dict[str, Future] = {}

    def start(target: str) -> Future:
        if target not in futures:
            futures[target] = pool.submit(_campaign, target, config, out)
        return futures[target]

    if (importlib.util.find_spec("atheris") is not None and not config.getoption("isolate")
            and not hasattr(config, "workerinput")):
        # (a forked test must not start its siblings' campaigns, nor a worker those of another's tests)
        for target in targets:
            start(target)
    yield start
    pool.shutdown(wait=True)


@pytest.mark.req("VAL-3")
@pytest.mark.parametrize("target", sorted(known_targets()))
def test_fuzz_target(target, campaigns, record_property):
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed: pip install 'nncert[fuzz]'")
    summary = campaigns(target).result()
    findings = [{"key": key, **f} for key, f in summary["findings_by_key"].items()]
    record_property("nncert_fuzz", {"target": target, "execs": summary["execs"], "corpus": summary["corpus"],
                                    "seconds": summary["elapsed_s"], "startup_s": summary.get("startup_s"),
                                    "findings": findings})
    new = [f for f in findings if not f["known"]]
    if new:
        pytest.fail("; ".join(f"VAL-3: {f['kind']} {f['key']}: {f['message']} (replay: {f['command']})"
                              for f in new), pytrace=False)
    if summary["execs"] == 0:  # no worker got through its imports and seeds: nothing was tested
        pytest.skip(f"the {target} campaign ran no input in {summary['elapsed_s']} s: its workers did not "
                    f"finish starting (a slow or busy machine)")
