"""Start the long child-process runs the selected tests will wait on (background_runs.py)."""

from __future__ import annotations

import background_runs


def pytest_collection_finish(session) -> None:
    for item in session.items:
        declare = getattr(item.module, "runs_to_start", None)
        if declare is not None:
            for argv in declare(item):
                background_runs.want(argv)


def pytest_sessionfinish(session, exitstatus) -> None:
    background_runs.stop_all()
