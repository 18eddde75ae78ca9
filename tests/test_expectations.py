"""Per-driver expectations files: strict xfails with a reason, applied by the pytest plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from nncert.testing import expectations

ROOT = Path(__file__).resolve().parent.parent
ADD_Q = "conformance/test_operations.py::test_operation[ADD-quant8_asymm-none-s0]"
ADD_F = "conformance/test_operations.py::test_operation[ADD-float32-none-s0]"


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--no-three-way", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "expectations.toml"
    path.write_text(text)
    return path


def test_entries_apply_by_option_over_defaults(tmp_path):
    path = _write(tmp_path, """
[defaults]
kernels = "xnnpack"

[[xfail]]
test = "a::*"
reason = "only with the default kernels"
when = ["kernels=xnnpack"]

[[xfail]]
test = "b::*"
reason = "only with reference kernels"
when = "kernels=ref|builtin"

[[xfail]]
test = ["c::*", "d::x"]
reason = "always"
""")
    assert [e.tests for e in expectations.load_file(path, "litert")] == [("a::*",), ("c::*", "d::x")]
    assert [e.tests for e in expectations.load_file(path, "service:litert:kernels=ref")] == \
        [("b::*",), ("c::*", "d::x")]
    found = expectations.match(expectations.load_file(path, "litert"), "a::test[x]")
    assert found is not None and "only with the default kernels" in found.describe()


@pytest.mark.parametrize(("text", "complaint"), [
    ("[[xfail]]\nreason = 'no test'\n", "'test' is required"),
    ("[[xfail]]\ntest = []\nreason = 'r'\n", "'test' is required"),
    ("[[xfail]]\ntest = 'x'\nreason = 'r'\ncolour = 'red'\n", "unknown key 'colour'"),
    ("[[xfail]]\ntest = 'x'\nreason = 'r'\nwhen = ['kernels']\n", "KEY=VALUE"),
    ("[[xfail]\n", "expectations.toml"),
    ("[[xfail]]\ntest = 'x'\nreason = 'r'\nversions = '<2'\n",
     "entry 1: 'versions' needs the file's top-level runtime"),
    ("runtime = 'packaging'\n[[xfail]]\ntest = 'x'\nreason = 'r'\nversions = '2.0'\n",
     "'2.0' is not a PEP 440 specifier set"),
    ("runtime = 'packaging'\n[[xfail]]\ntest = 'x'\nreason = 'r'\nversions = ''\n", "PEP 440"),
    ("runtime = 3\n", "'runtime' must be"),
    ("runtim = 'packaging'\n", "unknown top-level key 'runtim'"),
])
def test_malformed_files_are_named_errors(tmp_path, text, complaint):
    path = _write(tmp_path, text)
    with pytest.raises(expectations.ExpectationsError, match=complaint):
        expectations.load_file(path, "reference")
    proc = _pytest(ADD_F, f"--expectations={path}")
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert complaint in proc.stderr


def test_a_known_discrepancy_is_a_strict_xfail_with_its_reason(tmp_path):
    path = _write(tmp_path, f"""
[[xfail]]
test = "{ADD_Q}"
reason = "quantised ADD is off by two steps"
magnitude = "2 steps where ACC-2 allows 1"
""")
    report = tmp_path / "r.json"
    proc = _pytest(ADD_Q, ADD_F, "--driver=mutant:quant_off_by_2", f"--expectations={path}",
                   f"--nncert-report={report}")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 passed, 1 xfailed" in proc.stdout
    tests = json.loads(report.read_text())["tests"]
    assert tests[ADD_Q]["outcome"] == "xfailed"
    assert "off by two steps (2 steps where ACC-2 allows 1)" in tests[ADD_Q]["reason"]
    # Without the file, the same test fails: nothing was loosened.
    assert _pytest(ADD_Q, "--driver=mutant:quant_off_by_2").returncode == 1


def test_an_expectation_that_no_longer_fails_is_an_error(tmp_path):
    path = _write(tmp_path, f"""
[[xfail]]
test = "{ADD_F}"
reason = "fixed long ago"
""")
    proc = _pytest(ADD_F, f"--expectations={path}")
    assert proc.returncode == 1 and "XPASS(strict)" in proc.stdout, proc.stdout[-2000:]


# packaging stands in for a runtime: it is installed with nncert, at a version the test reads.
PACKAGING = metadata.version("packaging")


def test_entries_apply_by_the_installed_runtime_version(tmp_path):
    path = _write(tmp_path, f"""
runtime = "packaging"

[[xfail]]
test = "a::*"
reason = "seen with the installed release"
versions = ">=1,<={PACKAGING}"

[[xfail]]
test = "b::*"
reason = "fixed in the installed release"
versions = "<{PACKAGING}"

[[xfail]]
test = "c::*"
reason = "every release"
""")
    applied, not_applied = expectations.load_file_report(path, "reference")
    assert [e.tests for e in applied] == [("a::*",), ("c::*",)]
    assert [(n.expectation.tests, n.why) for n in not_applied] == \
        [(("b::*",), f"applies to packaging <{PACKAGING}; installed {PACKAGING}")]
    assert expectations.load_file(path, "reference") == applied
    first = applied[0]
    assert (first.runtime, first.runtime_version) == ("packaging", PACKAGING)
    assert first.versions == f"<={PACKAGING},>=1"
    assert first.describe().endswith(f"[{tmp_path.name}/expectations.toml#1; packaging {PACKAGING} "
                                     f"(entry: <={PACKAGING},>=1)]")
    # An entry that passes with the installed release was fixed by it; the range to give it
    # keeps the lower bound it had.
    assert first.fixed_message() == (f"fixed in packaging {PACKAGING}: {tmp_path.name}/expectations.toml#1 "
                                     f'no longer fails; give it versions = "<{PACKAGING},>=1"')


def test_a_runtime_that_is_not_installed_applies_no_ranged_entry(tmp_path):
    path = _write(tmp_path, """
runtime = "nncert-no-such-runtime"

[defaults]
kernels = "xnnpack"

[[xfail]]
test = "a::*"
reason = "ranged"
versions = ">=1"

[[xfail]]
test = "b::*"
reason = "every release"

[[xfail]]
test = "c::*"
reason = "other kernels"
when = "kernels=ref|builtin"
""")
    report = expectations.load_file_report(path, "reference")
    assert [e.tests for e in report.applied] == [("b::*",)]
    assert "nncert-no-such-runtime not installed" in report.applied[0].describe()
    assert "fixed in" not in report.applied[0].fixed_message()
    assert [n.why for n in report.not_applied] == [
        "applies to nncert-no-such-runtime >=1; nncert-no-such-runtime is not installed",
        "applies when kernels=ref|builtin; the driver runs with kernels=xnnpack"]


def test_load_report_gathers_the_driver_file_and_extra_files(tmp_path):
    extra = _write(tmp_path, 'runtime = "packaging"\n[[xfail]]\ntest = "x::*"\nreason = "r"\n'
                             'versions = "<0.1"\n')
    applied, not_applied = expectations.load_report("onnxruntime", [str(extra)])
    assert applied == expectations.load("onnxruntime", [str(extra)])
    assert all(e.runtime == "onnxruntime" for e in applied)
    assert not_applied[-1].why == f"applies to packaging <0.1; installed {PACKAGING}"
    # The SOFTMAX fusion defect of onnxruntime before 1.32 applies exactly to those releases.
    softmax = [e for e in applied + [n.expectation for n in not_applied] if "SOFTMAX" in e.tests[0]]
    assert [e.versions for e in softmax] == ["<1.32"]
    assert (softmax[0] in applied) == (Version(metadata.version("onnxruntime")) < Version("1.32"))


@pytest.mark.parametrize("driver", ["litert", "onnxruntime"])
def test_shipped_files_name_their_runtime_and_range_every_conformance_entry(driver):
    applied, not_applied = expectations.load_report(driver)
    entries = applied + [n.expectation for n in not_applied]
    assert entries and {e.runtime for e in entries} == {"ai-edge-litert" if driver == "litert" else driver}
    assert all(e.versions for e in entries if e.tests[0].startswith("conformance/"))


def test_an_entry_outside_its_range_is_not_applied_in_a_session(tmp_path):
    path = _write(tmp_path, f"""
runtime = "packaging"

[[xfail]]
test = "{ADD_Q}"
reason = "quantised ADD is off by two steps"
versions = "<{PACKAGING}"
""")
    proc = _pytest(ADD_Q, "--driver=mutant:quant_off_by_2", f"--expectations={path}")
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout[-2000:]
