"""pytest plugin: ``--driver``, ``--driver-option``, ``--req``, the ``req`` and ``slow``
markers, the ``driver`` fixture and a JSON outcome record (``--nncert-report``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.base import Driver
from nncert.requirements import REQUIREMENTS, matches


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nncert", "nncert driver conformance")
    group.addoption("--driver", default="reference", metavar="SPEC",
                    help="driver under test: reference, mutant:NAME, module:factory, with "
                         ":key=value options (default: reference)")
    group.addoption("--driver-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option for the driver (repeatable)")
    group.addoption("--req", action="append", default=[], metavar="ID",
                    help="run only tests checking this requirement (ACC-2) or family (ACC); repeatable")
    group.addoption("--nncert-report", metavar="PATH",
                    help="write every test's outcome and requirement IDs as JSON")


def _driver_options(config: pytest.Config) -> dict[str, str]:
    options = {}
    for item in config.getoption("driver_option"):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise pytest.UsageError(f"--driver-option {item!r}: expected KEY=VALUE")
        options[key] = value
    return options


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "req(*ids): the SPEC.md requirement IDs a test checks")
    config.addinivalue_line("markers", "slow: long-running suites, selected with -m slow")
    spec = config.getoption("driver")
    try:
        config.stash[_DRIVER] = load_driver(spec, _driver_options(config))
    except DriverSpecError as e:
        raise pytest.UsageError(str(e)) from None
    for selector in config.getoption("req"):
        if not any(matches(r, selector) for r in REQUIREMENTS):
            raise pytest.UsageError(f"--req {selector!r}: no such requirement (see SPEC.md)")
    config.pluginmanager.register(OutcomeRecorder(config), "nncert-outcomes")


def pytest_unconfigure(config: pytest.Config) -> None:
    driver = config.stash.get(_DRIVER, None)
    if driver is not None:
        driver.close()


_DRIVER = pytest.StashKey[Driver]()


def requirement_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("req"):
        ids.extend(mark.args)
    return list(dict.fromkeys(ids))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    for item in items:
        ids = requirement_ids(item)
        for rid in ids:
            if rid not in REQUIREMENTS:
                raise pytest.UsageError(f"{item.nodeid}: unknown requirement ID {rid!r} in req marker")
        # A certification suite traces every test to a requirement.
        if not ids and "conformance" in item.path.parts:
            raise pytest.UsageError(f"{item.nodeid}: conformance test without a req marker")
    selectors = config.getoption("req")
    if selectors:
        keep, drop = [], []
        for item in items:
            ids = requirement_ids(item)
            (keep if any(matches(r, s) for r in ids for s in selectors) else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


@pytest.fixture(scope="session")
def driver(pytestconfig: pytest.Config) -> Driver:
    """The driver under test (``--driver``)."""
    return pytestconfig.stash[_DRIVER]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    report.user_properties.append(("req", requirement_ids(item)))


class OutcomeRecorder:
    """Records each test's outcome with its requirement IDs; written by --nncert-report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        req = dict(report.user_properties).get("req", [])
        status = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2])
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            reason = crash.message if crash else report.longreprtext.strip().splitlines()[-1]
        self.tests[report.nodeid] = {"outcome": status, "req": req, "reason": reason[:500]}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = self.config.getoption("nncert_report")
        if not path:
            return
        by_req: dict[str, dict[str, int]] = {rid: {} for rid in REQUIREMENTS}
        for rec in self.tests.values():
            for rid in rec["req"]:
                by_req[rid][rec["outcome"]] = by_req[rid].get(rec["outcome"], 0) + 1
        Path(path).write_text(json.dumps({
            "driver": self.config.getoption("driver"),
            "version_string": self.config.stash[_DRIVER].version_string(),
            "tests": self.tests,
            "requirements": by_req,
        }, indent=1, sort_keys=True))
