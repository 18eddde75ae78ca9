"""A vendor's first hour, checked: the example driver package (examples/nncert-example-npu)
installed the way a vendor's CI installs it, the driver sketch of docs/writing-a-driver.md,
and what a broken vendor driver gets: one line naming the module or entry point and the
exception, from ``nncert drivers --check`` and from ``pytest --driver``.

Everything runs in subprocesses whose ``PYTHONPATH`` holds the installed package, so that
the shared environment is never touched and entry points are found as in a real install."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nncert.certify.plan import load_plan

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "nncert-example-npu"
GUIDE = ROOT / "docs" / "writing-a-driver.md"
NPU0 = "OSError: cannot open /dev/npu0"


def run(args: list[str], site: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def nncert(*args: str, site: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "nncert.cli", *args], site)


def pytest_run(*args: str, site: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "pytest", "-p", "no:randomly", "--no-three-way", *args], site, timeout)


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    """The example package pip-installed into a directory of its own (its dependency, nncert,
    is the one under test). pip builds from a copy: an in-tree build would leave build/ and
    *.egg-info in the shared checkout."""
    pytest.importorskip("ai_edge_litert")
    work = tmp_path_factory.mktemp("example")
    source = work / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = work / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--target", str(site), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site


def test_installed_example_is_listed_and_loads(example_site):
    listed = nncert("drivers", site=example_site)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^example-npu\s+entry point nncert_example_npu:ExampleNpuDriver$", listed.stdout, re.M)
    checked = nncert("drivers", "--check", "example-npu:threads=2,xnnpack=off", site=example_site)
    assert checked.returncode == 0, checked.stderr
    assert "example-npu 0.1.0 (ai-edge-litert " in checked.stdout
    assert "threads=2, xnnpack=off" in checked.stdout


@pytest.mark.parametrize("spec,needle", [
    ("example-npu:threads=0", "threads='0' must be a positive integer"),
    ("example-npu:xnnpack=maybe", "xnnpack='maybe' must be on or off"),
    ("example-npu:cores=4", "unexpected keyword argument 'cores'"),
])
def test_example_rejects_bad_options_in_one_line(example_site, spec, needle):
    proc = nncert("drivers", "--check", spec, site=example_site)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr


def test_conformance_subset_passes_on_the_example(example_site, tmp_path):
    """Claimed operations pass, declined ones are skipped as declined, and the package's own
    expectations.toml (package data of the wheel) turns its known discrepancy into an xfail."""
    select = ("test_operation and (ADD-float32 or ADD-int32 or SOFTMAX-float32 or (MAX_POOL_2D and float32 "
              "and nhwc) or (CONV_2D and quant8_asymm and nchw and not GROUPED and not TRANSPOSE)) "
              "or single-MINIMUM-1.3")
    proc = pytest_run("conformance/test_operations.py", "conformance/test_random_graphs.py", "-k", select,
                      "--driver=example-npu", f"--graph-dir={tmp_path}", "-q", "-rsx", site=example_site)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tally = proc.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d{3,} passed", tally) and not re.search(r"\bfailed\b", tally), tally
    assert "example-npu declines SOFTMAX" in proc.stdout
    assert "example-npu declines ADD" in proc.stdout  # int32: not a type the NPU computes in
    assert "XFAIL conformance/test_random_graphs.py::test_random_graph[single-MINIMUM-1.3]" in proc.stdout
    assert "nncert_example_npu/expectations.toml#1" in proc.stdout


def test_the_guides_driver_sketch_passes(tmp_path):
    """The first driver of docs/writing-a-driver.md, copied as a reader would, passes what it claims."""
    sketch = re.search(r"```python\n(# my_npu/driver\.py\n.*?)```", GUIDE.read_text(), re.S)
    assert sketch, "docs/writing-a-driver.md lost its my_npu/driver.py sketch"
    (tmp_path / "my_npu").mkdir()
    (tmp_path / "my_npu" / "__init__.py").write_text("")
    (tmp_path / "my_npu" / "driver.py").write_text(sketch.group(1))
    proc = pytest_run("conformance/test_operations.py", "conformance/test_execution.py", "-k", "ADD or MUL",
                      "--driver=my_npu.driver:MyNpuDriver", "-q", "-rs", site=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b\d{2,} passed", proc.stdout.splitlines()[-1])
    # The quantised and int32 variants, declined with the sketch's own reason.
    assert "my-npu declines ADD (my-npu computes float32 only, not TENSOR_QUANT8_ASYMM)" in proc.stdout


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory) -> Path:
    """A vendor package whose driver cannot start: one module fails to import, another's
    factory (marked @driver_factory, so that an import path may name it) raises, each also
    registered as an entry point (a hand-written dist-info, as pip would install it)."""
    site = tmp_path_factory.mktemp("broken")
    package = site / "vendor_npu"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken_import.py").write_text(f"raise OSError({NPU0.partition(': ')[2]!r})\n")
    (package / "broken_factory.py").write_text(
        "from nncert.drivers import driver_factory\n\n@driver_factory\n"
        f"def create(**options):\n    raise OSError({NPU0.partition(': ')[2]!r})\n")
    info = site / "vendor_npu-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendor-npu\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[nncert.drivers]\n"
                                           "npu-import = vendor_npu.broken_import:create\n"
                                           "npu-factory = vendor_npu.broken_factory:create\n")
    return site


BROKEN = [
    ("npu-import", "driver 'npu-import' (entry point vendor_npu.broken_import:create): "
                   "cannot import driver module 'vendor_npu.broken_import'"),
    ("vendor_npu.broken_import:create", "cannot import driver module 'vendor_npu.broken_import'"),
    ("npu-factory", "driver 'npu-factory' (entry point vendor_npu.broken_factory:create) "
                    "could not be started"),
    ("vendor_npu.broken_factory:create", "driver 'vendor_npu.broken_factory:create' could not be started"),
]


@pytest.mark.parametrize("spec,names", BROKEN)
def test_broken_vendor_driver_is_one_line_from_nncert(broken_site, spec, names):
    proc = nncert("drivers", "--check", spec, site=broken_site)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"nncert: error: {names}: {NPU0}\n"
    # The listing before the check loads no driver: the broken ones are listed like any other.
    assert re.search(r"^npu-import\s", proc.stdout, re.M) and re.search(r"^npu-factory\s", proc.stdout, re.M)


@pytest.mark.parametrize("spec,names", BROKEN)
def test_broken_vendor_driver_is_a_pytest_usage_error(broken_site, spec, names):
    proc = pytest_run("conformance", "--collect-only", "-q", f"--driver={spec}", site=broken_site)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert [line for line in out.splitlines() if line.strip()] == [f"ERROR: {names}: {NPU0}"]


@pytest.mark.parametrize("spec,names", BROKEN[:2])
def test_broken_vendor_driver_is_one_line_from_certify(broken_site, spec, names, tmp_path):
    proc = nncert("certify", "--driver", spec, "--out", str(tmp_path / "cert"), "--plan", "smoke",
                  site=broken_site)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == f"nncert: error: {names}: {NPU0}\n"
    assert not (tmp_path / "cert").exists()  # nothing written for a driver that cannot start


#: CI's certification of the example: the smoke plan's every suite with its own options, the
#: largest ones narrowed (the whole smoke plan took 193 s of CPU in CI, its validation suite of
#: 12,108 tests most of it; it runs under -m slow): claimed and declined operations (LSTM,
#: GATHER), every waived test of the example's expectations.toml, and seconds of fuzzing.
NARROWED = {
    "operations": "(s0] or s0-sync]) and (ADD or MAXIMUM or LSTM or GATHER)",
    "validation": "not (test_mutated_model_is_rejected or test_mutated_request_is_rejected or "
                  "test_guarded_request_runs or test_short_output_request_is_not_overrun) "
                  "or ADD-float32 or GATHER-float32",
    "random_graphs": "single-MINIMUM or single-MAXIMUM or single-GATHER",
}
NARROWED_OPTIONS = {"fuzz": ["--fuzz-seconds=2"], "mlts": ["--mlts-models=digits_mlp"]}


def _smoke_narrowed(path: Path) -> Path:
    """The smoke plan with the NARROWED selections (each replaces the suite's own -k, which
    it contains) and NARROWED_OPTIONS after the suite's own options (the last one counts)."""
    plan = tomllib.loads(load_plan("smoke").text)
    assert NARROWED.keys() | NARROWED_OPTIONS.keys() <= {s["name"] for s in plan["suite"]}
    lines = ['name = "smoke-narrowed"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in plan.items() if k not in ("suite", "name")]
    for suite in plan["suite"]:
        args = list(suite.get("args", []))
        if suite["name"] in NARROWED:
            if "-k" in args:
                del args[args.index("-k"):args.index("-k") + 2]
            args += ["-k", NARROWED[suite["name"]]]
        suite["args"] = args + NARROWED_OPTIONS.get(suite["name"], [])
        lines += ["", "[[suite]]", *(f"{k} = {json.dumps(v)}" for k, v in suite.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _certified_with_waivers(site: Path, out: Path, plan: str, name: str) -> None:
    """The example is CONFORMANT WITH WAIVERS on ``plan``: every suite finished, its three
    waivers applied, every decline with its reason, no memory domains, the report verifies."""
    proc = run([sys.executable, "-m", "nncert.cli", "certify", "--driver", "example-npu", "--plan", plan,
                "--out", str(out)], site, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"CONFORMANT WITH WAIVERS: example-npu on plan {name}")
    report = json.loads((out / "report.json").read_text())
    assert report["driver"]["version_string"].startswith("example-npu 0.1.0")
    assert [s["name"] for s in report["suites"]] == [s.name for s in load_plan("smoke").suites]
    assert [s["state"] for s in report["suites"]] == ["finished"] * len(report["suites"])
    assert sorted(w["source"] for w in report["waivers"]) == \
        [f"nncert_example_npu/expectations.toml#{n}" for n in (1, 2, 3)]
    declined = [c for c in report["coverage"] if c["state"] == "declined"]
    assert declined and all("example-npu declines" in c["declined_reason"] for c in declined)
    assert report["requirements"]["MEM-4"]["verdict"] == "NOT APPLICABLE"  # no memory domains
    check = run([sys.executable, "-m", "nncert.cli", "certify", "verify", str(out), "--no-recollect"], site)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_the_example_is_certified_with_the_smoke_plan(example_site, tmp_path):
    """What a vendor does at the end of the first hour: the smoke plan, every suite, one report.
    The example claims a subset and declines the rest with reasons; its known discrepancies
    (expectations.toml) are waivers, so it is conformant with waivers."""
    _certified_with_waivers(example_site, tmp_path / "cert", "smoke", "smoke")


def test_the_example_is_certified_with_every_suite_of_the_smoke_plan_narrowed(example_site, tmp_path):
    """The same in CI, on the smoke plan with its largest suites narrowed (NARROWED)."""
    plan = _smoke_narrowed(tmp_path / "smoke-narrowed.toml")
    _certified_with_waivers(example_site, tmp_path / "cert", str(plan), "smoke-narrowed")
