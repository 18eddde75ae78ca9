"""Per-driver expectations files: strict xfails with a reason, applied by the pytest plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
