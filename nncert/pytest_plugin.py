"""pytest plugin: ``--driver``, ``--driver-option``, ``--req``, the ``req`` and ``slow``
markers, the ``driver`` fixture, a JSON outcome record (``--nncert-report``) and the MLTS-2
outcomes: ``--isolate`` runs each test in a forked child with a deadline, and a test whose
process or driver crashed or hung is counted as ``crashed`` / ``hung`` (still a failure)."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

from nncert import files
from nncert.certify import journal, shard
from nncert.certify.journal import JournalError
from nncert.certify.runner import die_with_parent
from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.base import Driver, set_hang_timeout
from nncert.hal.errors import DriverFault, driver_fault_of
from nncert.repro import standalone
from nncert.requirements import DOCUMENT, REQUIREMENTS, matches
from nncert.testing import crash_guard, expectations, triage
from nncert.testing.harness import Declined
from nncert.testing.outcome import TAIL_CHARS, Kind, Outcome, classify_exception, how_it_ended, run_isolated
from nncert.testing.random_graphs import SHRINK_RUNS

#: Test status categories of the outcomes that are failures of their own kind (MLTS-2).
_CATEGORIES = {Kind.CRASH: ("crashed", "C", "CRASH"), Kind.HANG: ("hung", "H", "HANG")}


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
    group.addoption("--nncert-journal", metavar="PATH",
                    help="append each test's start and outcome to this certification journal as it "
                         "happens (fsynced), and run only the tests it holds no outcome of (how "
                         "`nncert certify` runs a suite, resumes it, and survives a driver that "
                         "takes the session down)")
    group.addoption("--nncert-suite", default="pytest", metavar="NAME",
                    help="the suite name journal records carry (default: pytest)")
    group.addoption("--nncert-shard", metavar="I/N",
                    help="run only shard I of N of the selected tests (after -k, -m and --req): "
                         "sorted ids dealt round-robin, or as --nncert-partition says (how `nncert "
                         "certify --shard` runs a suite)")
    group.addoption("--nncert-partition", metavar="FILE",
                    help="with --nncert-shard: the partition file of a sharded certification run "
                         "(its entry for --nncert-suite)")
    group.addoption("--isolate", action="store_true",
                    help="run every test in a forked child process with a deadline: a test that "
                         "crashes or hangs is reported as CRASH or HANG and the session goes on. "
                         "Session-scoped fixtures are set up and torn down in each child. With -s, "
                         "what a test prints is shown only if it crashes or hangs")
    group.addoption("--hang-timeout", type=float, default=None, metavar="SECONDS",
                    help="how long a driver call, a returned fence or an execution callback may take "
                         "before it counts as a HANG (default 30; a hosted driver's timeout= option "
                         "overrides it for that driver)")
    group.addoption("--expectations", action="append", default=[], metavar="PATH",
                    help="an expectations file of known discrepancies (strict xfails), besides the "
                         "one the driver's package ships (repeatable)")
    group.addoption("--no-expectations", action="store_true",
                    help="ignore every expectations file: known discrepancies fail as they are")
    group.addoption("--triage", "--three-way", dest="three_way", action=argparse.BooleanOptionalAction,
                    default=True,
                    help="replay a failing per-operation case on the peer runtimes (LiteRT, ONNX Runtime, "
                         "OpenVINO, IREE, TVM: those installed, out of process) and say which agree with "
                         "the reference or the driver, the N-way verdict (default: on; off under --isolate; "
                         "--three-way is its old name)")
    group.addoption("--triage-peers", metavar="NAMES",
                    help="the peer runtimes of the N-way verdict, comma-separated, or all: "
                         "litert, onnxruntime, openvino, iree, tvm (default: the installed ones "
                         "of litert, onnxruntime, openvino; iree and tvm compile each case)")
    group.addoption("--triage-budget", "--three-way-budget", dest="three_way_budget", type=_triage_cases,
                    default=triage.BUDGET_CASES, metavar="N",
                    help=f"triage at most N failing cases a session (default {triage.BUDGET_CASES})")
    group.addoption("--triage-seconds", type=_triage_seconds, default=triage.BUDGET_SECONDS, metavar="S",
                    help=f"spend at most about S seconds a session on triage (default "
                         f"{triage.BUDGET_SECONDS:g}); later failures say they were not triaged")
    group.addoption("--seed", type=int, default=0, metavar="N",
                    help="seed of the random-graph suite (ACC-5; default 0)")
    group.addoption("--graphs", type=int, default=5, metavar="N",
                    help="random graphs per cell of the random-graph suite (default 5; the CTS "
                         "runs 50: `nncert graphs` does)")
    group.addoption("--graph-dir", default="nncert-graphs", metavar="DIR",
                    help="where failing random graphs are written as spec files (default nncert-graphs)")
    group.addoption("--shrink-budget", type=_shrink_runs, default=SHRINK_RUNS, metavar="RUNS",
                    help=f"candidate graphs each failing random-graph test may run while it is shrunk "
                         f"(default {SHRINK_RUNS}; 0: report failures as generated). A count per test, "
                         f"not seconds a session: a failure shrinks the same way alone or in any run")
    group.addoption("--isolate-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="with --isolate: kill a test that has not finished after this long, as a "
                         "HANG (setup and teardown included; default 60)")
    group.addoption("--crash-guard", choices=("auto", "on", "off"), default="auto",
                    help="run the tests in a supervised child pytest, so that a driver whose native "
                         "code kills the process costs that test (CRASH) and the run goes on "
                         "(default auto: on for every driver but reference, mutant and service)")
    group.addoption("--standalone-dir", metavar="DIR",
                    help="write a standalone reproducer (the runtime's model file, inputs, expected "
                         "outputs, a run.py without nncert) of each failing per-operation case and "
                         "random graph into DIR/<test id>; compiled drivers only (litert, onnxruntime, "
                         "openvino, iree, tvm). Meant for a few test ids: `nncert repro TEST_ID "
                         "--driver X --standalone OUT`")
    group.addoption("--standalone-minimise", action="store_true",
                    help="with --standalone-dir: minimise each wrong result first (smallest inputs, "
                         "simplest values that keep it wrong: nncert.repro.minimise)")
    group.addoption("--standalone-declined", action="store_true",
                    help="with --standalone-dir: also write a reproducer of each case the driver "
                         "declines (and run it): how a runtime that dies on an operation, which the "
                         "support probe declines, gets its reproducer")
    group.addoption("--crash-guard-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="under the crash guard: kill a test that has not finished after this long, "
                         "as a HANG (default 600)")


def _shrink_runs(text: str) -> int:
    """``--shrink-budget``: a whole number of candidate runs (it was seconds a session once)."""
    try:
        runs = int(text)
    except ValueError:
        runs = -1
    if runs < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of candidate runs (0 or more): --shrink-budget counts the graphs "
            f"one failure may run while it is shrunk, not seconds")
    return runs


def _triage_cases(text: str) -> int:
    """``--triage-budget``: a whole number of cases, 0 or more."""
    try:
        cases = int(text)
    except ValueError:
        cases = -1
    if cases < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of cases (0 or more)")
    return cases


def _triage_seconds(text: str) -> float:
    """``--triage-seconds``: seconds, more than 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (more than 0)")
    return seconds


def _driver_options(config: pytest.Config) -> dict[str, str]:
    options = {}
    for item in config.getoption("driver_option"):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise pytest.UsageError(f"--driver-option {item!r}: expected KEY=VALUE")
        options[key] = value
    return options


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """Under the crash guard this process supervises a child pytest that runs the tests."""
    if crash_guard.wanted(config):
        if not config.getoption("crash_guard_timeout") > 0:
            raise pytest.UsageError("--crash-guard-timeout must be a positive number of seconds")
        return crash_guard.supervise(config)
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "req(*ids): the requirement IDs (docs/requirements.md) a test checks")
    config.addinivalue_line("markers", "slow: long-running suites, selected with -m slow")
    config.addinivalue_line("markers", "operation(name, type): the catalogue operation and type "
                                       "variant a per-operation test covers (the report's coverage)")
    hang = config.getoption("hang_timeout")
    if hang is not None:
        if not hang > 0:
            raise pytest.UsageError("--hang-timeout must be a positive number of seconds")
        set_hang_timeout(hang)
    spec = config.getoption("driver")
    try:
        config.stash[_DRIVER] = load_driver(spec, _driver_options(config))
    except DriverSpecError as e:
        raise pytest.UsageError(str(e)) from None
    try:
        config.stash[_EXPECTATIONS] = [] if config.getoption("no_expectations") else \
            expectations.load(spec, config.getoption("expectations"))
    except (expectations.ExpectationsError, DriverSpecError) as e:
        raise pytest.UsageError(str(e)) from None
    # Under --isolate every test is a child that would start its own peers: off there.
    peers = None
    if config.getoption("triage_peers") is not None:
        try:
            peers = triage.parse_peers(config.getoption("triage_peers"))
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
    if config.getoption("three_way") and not config.getoption("isolate"):
        triage.set_active(triage.Triage(spec, budget=config.getoption("three_way_budget"), peers=peers,
                                        seconds=config.getoption("triage_seconds")))
    for selector in config.getoption("req"):
        if not any(matches(r, selector) for r in REQUIREMENTS):
            raise pytest.UsageError(f"--req {selector!r}: no such requirement (see {DOCUMENT})")
    if config.getoption("isolate"):
        if config.getoption("usepdb"):
            raise pytest.UsageError("--isolate and --pdb do not mix: the test runs in a child without stdin")
        if not config.getoption("isolate_timeout") > 0:
            raise pytest.UsageError("--isolate-timeout must be a positive number of seconds")
    directory = config.getoption("standalone_dir")
    if directory:
        from nncert.drivers.compiled import CompiledDriver

        if not isinstance(config.stash[_DRIVER], CompiledDriver):
            raise pytest.UsageError(f"--standalone-dir: {spec} does not compile for another runtime "
                                    f"(litert, onnxruntime, openvino, iree, tvm): it has no runtime "
                                    f"model file to reproduce with")
        try:
            standalone.set_active(standalone.Session(files.own_dir(directory),
                                                     minimise=config.getoption("standalone_minimise"),
                                                     declined=config.getoption("standalone_declined")))
        except files.UnsafePathError as e:
            raise pytest.UsageError(f"--standalone-dir: {e}") from None
    try:
        config.stash[_SHARD] = _shard(config)
    except shard.ShardError as e:
        raise pytest.UsageError(str(e)) from None
    try:
        recorder = OutcomeRecorder(config)
    except (OSError, JournalError) as e:
        raise pytest.UsageError(f"--nncert-journal: {e}") from None
    config.pluginmanager.register(recorder, "nncert-outcomes")


def pytest_unconfigure(config: pytest.Config) -> None:
    triage.set_active(None)
    standalone.set_active(None)
    driver = config.stash.get(_DRIVER, None)
    if driver is not None:
        driver.close()


_DRIVER = pytest.StashKey[Driver]()
_EXPECTATIONS = pytest.StashKey[list]()
#: --nncert-shard: (I, N, the suite's partition entry), or None.
_SHARD = pytest.StashKey["tuple[int, int, dict] | None"]()


def _shard(config: pytest.Config) -> tuple[int, int, dict] | None:
    """--nncert-shard and --nncert-partition, checked (ShardError naming the fault)."""
    text, path = config.getoption("nncert_shard"), config.getoption("nncert_partition")
    if text is None:
        if path is not None:
            raise shard.ShardError("--nncert-partition needs --nncert-shard I/N")
        return None
    index, count = shard.parse_shard(text, "--nncert-shard")
    entry = None
    if path is not None:
        where = f"--nncert-partition {path}"
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise shard.ShardError(f"{where}: cannot read it: {e.strerror or e}") from None
        try:
            content = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            raise shard.ShardError(f"{where}: not JSON") from None
        entry = shard.suite_entry(content, config.getoption("nncert_suite"), count, where)
    return index, count, entry


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> object:
    """Collection without the cyclic garbage collector, and what it made kept out of later
    collections (gc.freeze). Collection builds a heap of long-lived objects (the per-operation
    suite: 13,000 items and their parameters; nncert's own tests: 33,000) that every full
    collection walked again: during collection, in the run, and five times at the session's end
    (pytest's unraisable-exception check). A one-case run of the per-operation suite took 4.8 s
    of CPU, now 2.9 s; collecting nncert's own tests 15.6 s, now 10.8 s. The items live until
    the session ends; at exit they are handed back (gc.unfreeze), so that the interpreter's last
    collection finalises them as before (extension modules report objects left alive at exit)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if enabled:
            gc.enable()
        gc.freeze()
        if not _unfreeze_at_exit:
            _unfreeze_at_exit.append(atexit.register(gc.unfreeze))


#: Whether gc.unfreeze is registered to run at exit (once a process, however many sessions).
_unfreeze_at_exit: list = []


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
    known = config.stash.get(_EXPECTATIONS, [])
    if known:
        for item in items:
            exp = expectations.match(known, item.nodeid, config.getoption("graphs"))
            if exp is not None:
                item.add_marker(pytest.mark.xfail(strict=True, reason=exp.describe()))
                # Reports copy the item's properties: the waiver travels with the outcome.
                item.user_properties.append(("nncert_expectation", _expectation_record(exp)))
    selectors = config.getoption("req")
    if selectors:
        keep, drop = [], []
        for item in items:
            ids = requirement_ids(item)
            (keep if any(matches(r, s) for r in ids for s in selectors) else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Tell the driver which models the collected tests will prepare, in order (a test module's
    ``models_ahead(item)``: functions making the models the item prepares), so that a driver
    that compiles several models faster together does so (``CompiledDriver.expect``). Not
    under --isolate: each test's child would start over."""
    config = session.config
    expect = getattr(config.stash.get(_DRIVER, None), "expect", None)
    if expect is None or config.getoption("isolate"):
        return
    models = []
    for item in session.items:
        ahead = getattr(getattr(item, "module", None), "models_ahead", None)
        if ahead is not None:
            models.extend(ahead(item))
    if models:
        expect(models)


@pytest.fixture(scope="session")
def driver(pytestconfig: pytest.Config) -> Driver:
    """The driver under test (``--driver``)."""
    return pytestconfig.stash[_DRIVER]


def _revive_driver(config: pytest.Config) -> None:
    """A test whose driver died must not doom the next one: start it afresh."""
    driver = config.stash.get(_DRIVER, None)
    if driver is not None and not driver.alive():
        driver.restart()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Under --isolate the parent revives it before each fork: a forked child is no owner of
    # the driver (a hosted driver reports itself not alive there) and must not restart it.
    if not item.config.getoption("isolate"):
        _revive_driver(item.config)
    if standalone.ACTIVE is not None:  # the test whose case a reproducer is written of
        standalone.ACTIVE.test_id = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    report.user_properties.append(("req", requirement_ids(item)))
    verdict = triage.ACTIVE.take() if triage.ACTIVE is not None else None
    if verdict is not None:  # the N-way verdict of a failure in this phase, machine-readable
        report.user_properties.append(("nncert_triage", verdict.as_dict()))
    if call.excinfo is not None and call.excinfo.errisinstance(Declined):
        report.user_properties.append(("nncert_declined", True))
    if standalone.ACTIVE is not None and call.when == "call":  # kept (and run) for a failure, xfail too
        failed = call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception)
        standalone.ACTIVE.finish(item.nodeid, failed, verdict.summary if verdict is not None else None)
    if _strict_xpass(report):
        expectation = dict(item.user_properties).get("nncert_expectation")
        if expectation:  # a known discrepancy that is gone: say which release fixed it
            report.longrepr += f" -- {expectation['fixed']}"
    # A driver fault surfacing as an API error (even re-raised as pytest.fail) is the
    # driver's crash or hang, not the test's failure (MLTS-2); so is any failure of a test
    # during which the driver died (a status the test judged, an async callback's status).
    if call.excinfo is not None:
        fault = driver_fault_of(call.excinfo.value) or _dead_driver_fault(item.config)
        if fault is not None:
            outcome = classify_exception(fault)
            report.user_properties.extend(_outcome_properties(outcome))
            if outcome.stderr_tail:
                report.sections.append(("driver process stderr", outcome.stderr_tail))
    return report


def _dead_driver_fault(config: pytest.Config) -> DriverFault | None:
    """How the driver under test died, if it did (it is revived before every test)."""
    driver = config.stash.get(_DRIVER, None)
    if driver is None or driver.alive():
        return None
    return driver.fault() or DriverFault("CRASH", f"{driver.name} died during the test")


def _outcome_properties(outcome: Outcome) -> list[tuple[str, str]]:
    return [("nncert_outcome", str(outcome.kind)), ("nncert_reason", outcome.reason)]


def nncert_outcome(report: pytest.TestReport) -> Kind | None:
    """CRASH or HANG for a failed test whose process or driver died or hung, else None."""
    if not report.failed:
        return None
    kind = dict(getattr(report, "user_properties", ())).get("nncert_outcome")
    return Kind(kind) if kind in _CATEGORIES else None


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport,
                             config: pytest.Config) -> tuple[str, str, tuple[str, dict]] | None:
    kind = nncert_outcome(report)
    if kind is None:
        return None
    category, letter, word = _CATEGORIES[kind]
    return category, letter, (word, {"red": True})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """With --isolate: run the test's setup, call and teardown in a forked child, log the
    reports it sends back, or a failed report saying how it crashed or hung."""
    config = item.config
    if not config.getoption("isolate"):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    try:
        _revive_driver(config)  # here, so that every child inherits a live driver
    except Exception as e:
        outcome = classify_exception(e)
        outcome.reason = f"the driver could not be restarted: {outcome.reason}"
    else:
        outcome = run_isolated(_run_test_in_child, item, timeout=config.getoption("isolate_timeout"))
    if outcome.kind is Kind.SUCCESS:
        reports = [config.hook.pytest_report_from_serializable(config=config, data=data)
                   for data in outcome.value]
    else:
        reports = [_lost_test_report(item, outcome)]
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _run_test_in_child(item: pytest.Item) -> list[dict]:
    """In the child: the whole protocol, tearing down every fixture (nothing outlives it)."""
    reports = runtestprotocol(item, log=False, nextitem=None)
    return [item.config.hook.pytest_report_to_serializable(config=item.config, report=report)
            for report in reports]


def _lost_test_report(item: pytest.Item, outcome: Outcome) -> pytest.TestReport:
    """The failed report of a test whose child crashed, hung, or could not answer."""
    longrepr = str(outcome)
    if outcome.stderr_tail.strip():
        longrepr += f"\n\nLast output of the test's process:\n{outcome.stderr_tail.rstrip()}"
    properties: list[tuple[str, object]] = [("req", requirement_ids(item))]
    if outcome.kind in _CATEGORIES:
        properties += _outcome_properties(outcome)
    sections = []
    # The child inherited pytest's capture files (--capture=fd): what the test printed in the
    # phase that never ended is still there, unread.
    capman = item.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        captured = capman.read_global_capture()
        sections = [(f"Captured {name} call", text[-TAIL_CHARS:])
                    for name, text in (("stdout", captured.out), ("stderr", captured.err)) if text]
    stop = time.time()
    report = pytest.TestReport(item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed",
                               longrepr, "call", sections, duration=outcome.duration,
                               start=stop - outcome.duration, stop=stop, user_properties=properties)
    xfail = item.get_closest_marker("xfail")
    if xfail is not None:  # an expected crash or hang (a driver's expectations file)
        report.outcome = "skipped"
        report.wasxfail = xfail.kwargs.get("reason", "")
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Crashed and hung tests are not in pytest's "failed" list: show their reports here."""
    reports = [r for category, _, _ in _CATEGORIES.values() for r in terminalreporter.getreports(category)]
    if not reports or config.option.tbstyle == "no":
        return
    showcapture = config.option.showcapture
    terminalreporter.write_sep("=", "CRASHES AND HANGS")
    for report in reports:
        terminalreporter.write_sep("_", report.head_line or report.nodeid, red=True, bold=True)
        terminalreporter.write_line(report.longreprtext)
        for name, content in report.sections:
            if showcapture != "no" and (showcapture == "all" or showcapture in name):
                terminalreporter.write_sep("-", name)
                terminalreporter.write_line(content.rstrip("\n"))


def _expectation_record(exp: expectations.Expectation) -> dict[str, str]:
    return {"source": exp.source, "reason": exp.reason, "reproduce": exp.reproduce,
            "magnitude": exp.magnitude, "agrees_with": exp.agrees_with, "runtime": exp.runtime,
            "versions": exp.versions, "runtime_version": exp.runtime_version, "text": exp.describe(),
            "fixed": exp.fixed_message()}


#: Properties the plugin itself puts on reports (the rest are the tests' own record_property).
_OWN_PROPERTIES = ("req", "nncert_outcome", "nncert_reason", "nncert_declined", "nncert_expectation",
                   "nncert_not_refuted")
#: The --nncert-report word of each status (pytest's own vocabulary, crash and hang added).
_REPORT_WORD = {"PASS": "passed", "FAIL": "failed", "WAIVED": "xfailed", "XPASS": "failed",
                "DECLINED": "skipped", "SKIPPED": "skipped", "CRASH": "crash", "HANG": "hang"}
_MESSAGE_CHARS = 2000


_XPASS = "[XPASS(strict)]"


def _strict_xpass(report: pytest.TestReport) -> bool:
    """A test a strict xfail covers that passed: pytest fails it with this text."""
    return report.failed and isinstance(report.longrepr, str) and report.longrepr.startswith(_XPASS)


def _failure_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    text = report.longreprtext.strip()
    return text.splitlines()[-1] if text else ""


def _status(report: pytest.TestReport) -> tuple[str, str]:
    """The certification status of one phase's report (docs/certification.md) and its message."""
    properties = dict(report.user_properties)
    kind = nncert_outcome(report)
    if kind is not None:
        return str(kind), properties.get("nncert_reason", "")
    if hasattr(report, "wasxfail"):
        if report.skipped and properties.get("nncert_not_refuted"):
            # It passed what ran; the expectation's failure lies beyond (a limited MLTS run).
            return "PASS", properties["nncert_not_refuted"]
        return ("WAIVED" if report.skipped else "XPASS"), report.wasxfail
    if _strict_xpass(report):
        return "XPASS", report.longrepr.removeprefix(_XPASS).strip()
    if report.passed:
        return "PASS", ""
    if report.skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        reason = re.sub(r"^[\w.]*(Skipped|Declined): ", "", reason)
        return ("DECLINED" if properties.get("nncert_declined") else "SKIPPED"), reason
    message = _failure_message(report)
    return "FAIL", (message if report.when == "call" else f"error in {report.when}: {message}")


def outcome_record(reports: list[pytest.TestReport]) -> dict[str, object]:
    """One test's record from the reports of its phases: the call's status (the setup's when it
    never got to the call), unless a later phase failed (a teardown error fails a passed test)."""
    main = next((r for r in reports if r.when == "call"), None) or reports[0]
    status, message = _status(main)
    for r in reports:
        if r is not main and r.failed and status not in journal.FAILING:
            status, message = _status(r)
    properties: dict[str, object] = {}
    for r in reports:
        properties.update(dict(r.user_properties))
    record: dict[str, object] = {
        "status": status, "req": list(properties.get("req", [])),
        "duration": round(sum(r.duration for r in reports), 6), "message": message[:_MESSAGE_CHARS]}
    if status in journal.FAILING:
        verdicts = re.findall(rf"{re.escape(triage.PREFIX)}.*", "\n".join(r.longreprtext for r in reports))
        if verdicts:
            record["verdict"] = verdicts[-1].strip()
    if "nncert_expectation" in properties:
        record["expectation"] = properties["nncert_expectation"]
    extra = {k: v for k, v in properties.items() if k not in _OWN_PROPERTIES}
    if extra:
        record["properties"] = extra
    return record


class OutcomeRecorder:
    """Records each test's outcome with its requirement IDs: written whole by --nncert-report,
    and test by test to the certification journal (--nncert-journal).

    Under pytest-xdist every record has one writer: a worker journals the tests it runs (the
    first worker, gw0, what was collected), the controller journals only the test in which a
    worker died (xdist names it; no worker can) and alone writes --nncert-report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, dict] = {}
        self._phases: dict[str, list[pytest.TestReport]] = {}
        self._crashed: set[str] = set()  # tests in which an xdist worker died (the controller's)
        self.suite = config.getoption("nncert_suite")
        path = config.getoption("nncert_journal")
        self.journal_path = Path(path) if path else None
        self.journal: journal.Writer | None = None
        self.done: set[str] = set()
        self.worker = getattr(config, "workerinput", None)  # an xdist worker's, else None
        if self.worker is not None and self.worker.get("nncert_controller") == os.getppid():
            die_with_parent()  # a worker outliving a killed run would journal into its --resume
            if os.getppid() != self.worker["nncert_controller"]:
                os._exit(1)
        if self.journal_path is not None:
            if self.worker is None:  # the controller cut it before its workers started, who append
                journal.cut_torn_tail(self.journal_path)
            state = journal.replay(journal.read(self.journal_path)).get(self.suite)
            self.done = set(state.outcomes) if state else set()
            if self.worker is not None and "nncert_done" in self.worker:
                # What had an outcome when the session began: a worker started later (xdist
                # replaces one that crashed) must deselect what the others did, or the controller's
                # test indexes would name other tests in it.
                self.done = set(self.worker["nncert_done"])
            # Outcomes an earlier process of the same run recorded (the crash guard's restarts)
            # belong in this process's --nncert-report too.
            for nodeid, record in (state.outcomes.items() if state else ()):
                self._keep(nodeid, {k: v for k, v in record.items() if k not in ("event", "suite", "id")})
            self.journal = journal.Writer(self.journal_path)

    @pytest.hookimpl(trylast=True)  # after -k, -m and --req chose the tests
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        sharded = config.stash.get(_SHARD, None)
        collected = len(items)
        if sharded is not None:  # this shard's part of what the whole run would collect
            index, count, entry = sharded
            mine = shard.select([item.nodeid for item in items], index, count, entry)
            others = [item for item in items if item.nodeid not in mine]
            if others:
                config.hook.pytest_deselected(items=others)
                items[:] = [item for item in items if item.nodeid in mine]
        if self.journal is None:
            return
        record: dict[str, object] = {"event": "collected", "suite": self.suite,
                                     "tests": [_collected_entry(item) for item in items]}
        if sharded is not None:
            record["shard"] = {"index": sharded[0], "count": sharded[1], "of": collected}
        # Every xdist worker collects the same tests (xdist checks): the first one says so.
        if self.worker is None or self.worker.get("workerid") == "gw0":
            self.journal.write(record)
        done = [item for item in items if item.nodeid in self.done]
        if done:
            config.hook.pytest_deselected(items=done)
            items[:] = [item for item in items if item.nodeid not in self.done]

    def _journals(self) -> bool:
        """Whether this process journals the tests it hears of: not an xdist controller, whose
        workers journal their own (it hears of them again, forwarded)."""
        return self.journal is not None and not self.config.pluginmanager.has_plugin("dsession")

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:
        if self._journals():
            self.journal.write({"event": "start", "suite": self.suite, "id": nodeid, "time": time.time()})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self._crashed:  # xdist's own report of it follows the crash record
            self._phases.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:
        reports = self._phases.pop(nodeid, [])
        if not reports:
            return
        record = outcome_record(reports)
        self._keep(nodeid, record)
        if self._journals():
            self.journal.write({"event": "outcome", "suite": self.suite, "id": nodeid, **record}, sync=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: object) -> None:
        """xdist controller: a popen worker is its child, and dies with it (see __init__)."""
        node.workerinput["nncert_controller"] = os.getpid()
        if self.journal is not None:
            node.workerinput["nncert_done"] = sorted(self.done)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: object) -> None:
        """xdist controller: a worker died in ``crashitem``. Its CRASH (WAIVED when an expectation
        names it, as under the crash guard) is recorded here, once: no worker can."""
        earlier = self._phases.pop(crashitem, [])  # the phases it finished before dying
        self._crashed.add(crashitem)
        req = next((dict(r.user_properties)["req"] for r in earlier if "req" in dict(r.user_properties)),
                   None)
        if req is None and self.journal_path is not None:
            state = journal.replay(journal.read(self.journal_path)).get(self.suite)
            req = state.tests.get(crashitem, {}).get("req") if state else None
        reason = f"the test's worker process died in this test ({_worker_end(report)})"
        report.user_properties.extend([("req", list(req or [])), ("nncert_outcome", str(Kind.CRASH)),
                                       ("nncert_reason", reason)])
        known = expectations.match(self.config.stash.get(_EXPECTATIONS, []), crashitem,
                                   self.config.getoption("graphs"))
        if known is not None:  # an expected crash: the worker's strict xfail never got to say so
            report.outcome, report.wasxfail = "skipped", known.describe()
            report.user_properties.append(("nncert_expectation", _expectation_record(known)))
        record = outcome_record([report])
        self._keep(crashitem, record)
        if self.journal is not None:
            self.journal.write({"event": "outcome", "suite": self.suite, "id": crashitem, **record},
                               sync=True)

    def _keep(self, nodeid: str, record: dict) -> None:
        self.tests[nodeid] = {"outcome": _REPORT_WORD[record["status"]], **record,
                              "reason": record["message"][:500]}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.journal is not None:
            self.journal.close()
        path = self.config.getoption("nncert_report")
        if not path or self.worker is not None:  # an xdist controller writes every worker's tests
            return
        by_req: dict[str, dict[str, int]] = {rid: {} for rid in REQUIREMENTS}
        for rec in self.tests.values():
            for rid in rec["req"]:
                by_req[rid][rec["outcome"]] = by_req[rid].get(rec["outcome"], 0) + 1
        try:  # the driver may have died in the last test: the record must be written anyway
            _revive_driver(self.config)
            version = self.config.stash[_DRIVER].version_string()
        except Exception as e:  # any failure of the driver, reported as such
            version = f"unavailable ({classify_exception(e)})"
        text = json.dumps({"driver": self.config.getoption("driver"), "version_string": version,
                           "tests": self.tests, "requirements": by_req},
                          indent=1, sort_keys=True, default=str)
        try:
            files.write_atomic(path, text)
        except OSError as e:  # a planted link is replaced, but the directory may be unwritable
            sys.stderr.write(f"nncert: error: --nncert-report {path}: cannot write it: {e.strerror or e}\n")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def _worker_end(report: pytest.TestReport) -> str:
    """How the xdist worker behind ``report`` ended ("killed by SIGABRT"), as far as can be told."""
    try:
        return how_it_ended(report.node.gateway._io.popen.wait(timeout=5))
    except Exception:  # not a local process (ssh=, socket=), or it would not say
        return "its gateway closed"


def _collected_entry(item: pytest.Item) -> dict[str, object]:
    entry: dict[str, object] = {"id": item.nodeid, "req": requirement_ids(item)}
    mark = item.get_closest_marker("operation")
    if mark is not None:
        entry["operation"], entry["type"] = mark.args
    return entry
