"""Start the long child-process runs the selected tests will wait on (background_runs.py),
from one launcher per session, which a pytest-xdist controller shares with its workers."""

from __future__ import annotations

import background_runs
import pytest


def pytest_configure(config) -> None:
    worker = getattr(config, "workerinput", None)
    if worker:
        background_runs.start(worker[background_runs.WORKER_KEY], worker["workerid"])
    else:
        background_runs.start()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(pytest-xdist, in the controller) the directory each worker queues its runs in."""
    node.workerinput[background_runs.WORKER_KEY] = str(background_runs.scratch())


def pytest_collection_finish(session) -> None:
    for item in session.items:
        declare = getattr(item.module, "runs_to_start", None)
        if declare is not None:
            for argv in declare(item):
                background_runs.want(argv)


def pytest_unconfigure(config) -> None:
    background_runs.stop_all()
