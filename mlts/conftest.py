"""The MLTS suites run against ``--driver`` (default: reference).

Accuracy and latency (``test_accuracy.py``, MLTS-1): ``--mlts-limit`` samples per model
(``all``: the whole data set), ``--mlts-warmup`` untimed and ``--mlts-runs`` timed executions
for the latency figures, ``--mlts-models`` a subset of the zoo, ``--mlts-zoo-dir`` where built
models are cached. The defaults keep a CI run on the numpy reference cheap (a few samples, a
few timed runs): `nncert mlts`, or these options, give the full figures.

Stress (``test_stress.py``, MLTS-2): ``--mlts-duration`` scales the cases (seconds in CI,
minutes or hours on request); ``--mlts-max-slowdown`` is the performance_degradation bound
(raise it on a host shared with other work).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from nncert.mlts.run import RunConfig
from nncert.mlts.stress import StressConfig
from nncert.mlts.zoo import ZooError, select, zoo_dir

#: Defaults of the accuracy suite: what CI pays on the reference (see docs/mlts.md).
DEFAULT_LIMIT, DEFAULT_WARMUP, DEFAULT_RUNS = 2, 1, 3

_CONFIG = pytest.StashKey[StressConfig]()
_ACCURACY = pytest.StashKey["AccuracyOptions"]()
_ACCURACY_FILE = Path(__file__).parent / "test_accuracy.py"


@dataclass(frozen=True)
class AccuracyOptions:
    """What the accuracy suite runs with."""

    config: RunConfig
    models: frozenset[str]  # the zoo models to run (--mlts-models; default: all)
    zoo: Path


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nncert")
    group.addoption("--mlts-duration", type=float, default=1.0, metavar="SECONDS",
                    help="how long each MLTS stress case works (default: 1)")
    group.addoption("--mlts-max-slowdown", type=float, default=StressConfig.max_slowdown, metavar="RATIO",
                    help="performance_degradation: the most the inference latency (its fastest fifth) "
                         f"may grow beside a compilation (default: {StressConfig.max_slowdown})")
    # Read as text and checked in pytest_configure: a bad value is then one line, not argparse's usage.
    group.addoption("--mlts-limit", default=str(DEFAULT_LIMIT), metavar="N",
                    help=f"MLTS accuracy: samples per model, or 'all' (default: {DEFAULT_LIMIT})")
    group.addoption("--mlts-warmup", default=str(DEFAULT_WARMUP), metavar="N",
                    help=f"MLTS latency: untimed executions first (default: {DEFAULT_WARMUP})")
    group.addoption("--mlts-runs", default=str(DEFAULT_RUNS), metavar="N",
                    help=f"MLTS latency: timed executions per model (default: {DEFAULT_RUNS})")
    group.addoption("--mlts-models", metavar="A,B",
                    help="MLTS accuracy: only these zoo models (default: all; see `nncert mlts list`)")
    group.addoption("--mlts-zoo-dir", metavar="DIR",
                    help="where built zoo models are cached (default: STATE/mlts-zoo)")


def _whole_number(config: pytest.Config, option: str, allow_all: bool = False) -> int | None:
    text = config.getoption(option.removeprefix("--").replace("-", "_")).strip()
    if allow_all and text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        also = " or 'all'" if allow_all else ""
        raise pytest.UsageError(f"{option}: {text!r} is not a whole number{also}") from None


def pytest_configure(config: pytest.Config) -> None:
    try:
        config.stash[_CONFIG] = StressConfig(duration=config.getoption("mlts_duration"),
                                             max_slowdown=config.getoption("mlts_max_slowdown"))
    except ValueError as e:
        raise pytest.UsageError(f"MLTS stress options: {e}") from None
    counts = [_whole_number(config, "--mlts-limit", allow_all=True), _whole_number(config, "--mlts-warmup"),
              _whole_number(config, "--mlts-runs")]
    try:
        run_config = RunConfig(*counts)
    except ValueError as e:
        raise pytest.UsageError(f"MLTS options: {e}") from None
    try:
        models = frozenset(entry.name for entry in select(config.getoption("mlts_models")))
    except ZooError as e:
        raise pytest.UsageError(f"--mlts-models: {e}") from None
    config.stash[_ACCURACY] = AccuracyOptions(run_config, models, zoo_dir(config.getoption("mlts_zoo_dir")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--mlts-models deselects the other models' tests, as -k would."""
    wanted = config.stash[_ACCURACY].models
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        ours = item.path == _ACCURACY_FILE and callspec is not None
        (drop if ours and callspec.params.get("name") not in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def stress_config(pytestconfig: pytest.Config) -> StressConfig:
    return pytestconfig.stash[_CONFIG]


@pytest.fixture(scope="session")
def mlts_accuracy(pytestconfig: pytest.Config) -> AccuracyOptions:
    return pytestconfig.stash[_ACCURACY]
