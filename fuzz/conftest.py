"""The fuzz suite runs each target's campaign against ``--driver`` for ``--fuzz-seconds``;
campaign directories (findings, logs, summary) go under ``--fuzz-out`` (default: nncert-fuzz in
the current directory, as failing random graphs go to nncert-graphs: a finding's replay command
names its files)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nncert")
    group.addoption("--fuzz-seconds", type=float, default=5.0, metavar="SECONDS",
                    help="how long each fuzz target runs (default: 5)")
    group.addoption("--fuzz-out", default="nncert-fuzz", metavar="DIR",
                    help="where each target's campaign directory goes, its findings and their replay "
                         "commands kept (default: nncert-fuzz)")
    group.addoption("--fuzz-seeds", type=int, default=None, metavar="N",
                    help="start each campaign from at most N of its target's seeds, spread over the "
                         "catalogue (default: all)")
    group.addoption("--fuzz-seed", type=int, default=1, metavar="N",
                    help="libFuzzer -seed of each campaign (default: 1; 0 lets libFuzzer choose)")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("fuzz_seconds") > 0:
        raise pytest.UsageError("--fuzz-seconds must be a positive number of seconds")
    if config.getoption("fuzz_seeds") is not None and config.getoption("fuzz_seeds") < 1:
        raise pytest.UsageError("--fuzz-seeds must be at least 1")
