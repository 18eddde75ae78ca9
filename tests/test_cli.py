"""The command line and the pytest options: listings, and one-line errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nncert.cli import main
from nncert.drivers import DriverSpecError, load_driver, parse_spec

ROOT = Path(__file__).resolve().parent.parent


def test_ops_lists_the_catalogue(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "CONV_2D" in out and "operations" in out.splitlines()[-1]
    assert main(["ops", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    add = next(r for r in rows if r["operation"] == "ADD")
    assert add["since"] == "1.0" and "float32" in add["variants"]["1.0"]


def test_ops_lists_every_hal_operation(capsys):
    """Every operation of HAL 1.3 and feature levels 6-7 (OEM_OPERATION excepted: its meaning is
    the vendor's), each with at least one type variant unless it is control flow."""
    from nncert.hal.types import OperationType

    assert main(["ops", "--json"]) == 0
    rows = {r["operation"]: r for r in json.loads(capsys.readouterr().out)}
    every = {op.name for op in OperationType if op is not OperationType.OEM_OPERATION}
    assert len(every) == 106
    assert sorted(every - set(rows)) == []
    assert len(rows) == 106
    assert [name for name, r in rows.items() if not r["variants"] and name not in ("IF", "WHILE")] == []
    assert main(["ops"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("106 operations")


def test_drivers_lists_reference_and_mutants(capsys):
    assert main(["drivers"]) == 0
    out = capsys.readouterr().out
    assert "reference" in out and "mutant:quant_off_by_2" in out


def test_python_dash_m_nncert_is_the_command():
    proc = subprocess.run([sys.executable, "-m", "nncert", "drivers"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "reference" in proc.stdout, proc.stderr
    bad = subprocess.run([sys.executable, "-m", "nncert", "repro", "x.json", "--driver", "nosuch"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def test_drivers_says_which_runtimes_are_installed(capsys, monkeypatch):
    """Each real runtime's release, read from the installed distributions; a missing one is
    named with the extra that installs it."""
    import importlib.metadata as md

    from nncert import drivers

    real = md.version

    def version(dist):
        if dist == "apache-tvm":
            raise md.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(md, "version", version)
    assert main(["drivers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    status = {lines[n].split()[0]: lines[n + 1].strip() for n in range(len(lines) - 1)
              if lines[n].split()[0] in drivers.RUNTIMES}
    assert status["onnxruntime"] == f"installed: onnxruntime {real('onnxruntime')}, onnx {real('onnx')}"
    assert status["tvm"] == "not installed: pip install 'nncert[tvm]'"
    assert set(status) == set(drivers.RUNTIMES)


def test_unknown_driver_is_a_one_line_error(capsys):
    assert main(["drivers", "--check", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown driver 'nosuch'" in err and "reference" in err


@pytest.mark.parametrize("argv, said", [
    (["mutants"], "nncert: error: argument command: invalid choice: 'mutants' (choose from "),
    (["certify", "merge"], "nncert: error: certify merge: the following arguments are required: "),
    (["fuzz", "merge", "--out"], "nncert: error: fuzz merge: argument --out: expected one argument"),
])
def test_argument_errors_name_the_command_as_typed(capsys, argv, said):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(said) and err.count("\n") == 1
    if argv == ["mutants"]:  # the commands listed as they are typed
        assert "'certify merge'" in err and "certify-merge" not in err


@pytest.mark.parametrize("spec,head,args,options", [
    ("reference", "reference", [], {}),
    ("mutant:quant_off_by_2", "mutant", ["quant_off_by_2"], {}),
    ("litert:kernels=ref,threads=1", "litert", [], {"kernels": "ref", "threads": "1"}),
    ("pkg.mod:factory", "pkg.mod:factory", [], {}),
    ("pkg.mod:factory:x=1", "pkg.mod:factory", [], {"x": "1"}),
])
def test_parse_spec(spec, head, args, options):
    assert parse_spec(spec) == (head, args, options)


@pytest.mark.parametrize("spec", ["", "nosuch", "reference:bogus=1", "mutant:nosuch", "pkg.mod",
                                  "nncert.drivers.reference:Nope", "no_such_module.x:f", "a:=1"])
def test_bad_specs_raise_driver_spec_error(spec):
    with pytest.raises(DriverSpecError):
        load_driver(spec)


def test_import_path_spec_loads():
    assert load_driver("nncert.drivers.reference:ReferenceDriver").name == "reference"


@pytest.mark.parametrize("args,needle", [
    (["--driver=nosuch"], "unknown driver 'nosuch'"),
    (["--driver=reference", "--driver-option=x=1"], "takes no option"),
    (["--driver-option=oops"], "expected KEY=VALUE"),
    (["--req=NOPE-1"], "no such requirement"),
])
def test_pytest_usage_errors_are_one_line(args, needle):
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance", "--collect-only", "-q", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
