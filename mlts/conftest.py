"""The MLTS suites run against ``--driver`` (default: reference). ``--mlts-duration`` scales the
stress cases (seconds in CI, minutes or hours on request); ``--mlts-max-slowdown`` is the
performance_degradation bound (raise it on a host shared with other work)."""

from __future__ import annotations

import pytest

from nncert.mlts.stress import StressConfig

_CONFIG = pytest.StashKey[StressConfig]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nncert")
    group.addoption("--mlts-duration", type=float, default=1.0, metavar="SECONDS",
                    help="how long each MLTS stress case works (default: 1)")
    group.addoption("--mlts-max-slowdown", type=float, default=StressConfig.max_slowdown, metavar="RATIO",
                    help="performance_degradation: the most the median inference latency may grow "
                         f"beside a compilation (default: {StressConfig.max_slowdown})")


def pytest_configure(config: pytest.Config) -> None:
    try:
        config.stash[_CONFIG] = StressConfig(duration=config.getoption("mlts_duration"),
                                             max_slowdown=config.getoption("mlts_max_slowdown"))
    except ValueError as e:
        raise pytest.UsageError(f"MLTS stress options: {e}") from None


@pytest.fixture(scope="session")
def stress_config(pytestconfig: pytest.Config) -> StressConfig:
    return pytestconfig.stash[_CONFIG]
