"""Files and driver specs crafted to break nncert (issue 18): no data file can run code, and bad
input gets one line naming the file and what is wrong, never a traceback (docs/security.md).

For each parser (nncert.datafiles and the loaders on it: graph spec files, the compilation
cache's model codec, expectations files, certification plans, reports and journals), crafted
files (nested 100,000 deep, a 5,000-digit integer, bytes that are not UTF-8, wrong types, NaN,
huge dimensions) make the library call raise the module's own error in one line, and the
command that reads the file exit with status 2 and one line on stderr. A driver spec naming a
plain callable (``os.path:os.system:...``, a module function with side effects) is refused
before anything is called."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nncert import datafiles
from nncert.certify import journal, report
from nncert.certify.plan import PlanError, load_plan
from nncert.drivers import DriverSpecError, load_driver, parse_spec
from nncert.hal.codec import CodecError, pack_model, unpack_model
from nncert.testing.expectations import ExpectationsError
from nncert.testing.expectations import load_file as load_expectations
from nncert.testing.graphs import Cell, SpecError, load_spec, save_spec, seeded, to_spec

ROOT = Path(__file__).resolve().parent.parent

DEEP = 100_000
#: The three attacks every parser gets, per format.
JSON_ATTACKS = {
    "deep": b"[" * DEEP + b"]" * DEEP,
    "big-integer": b'{"format": ' + b"9" * 5000 + b"}",
    "not-utf8": b'{"format": "\xff\xfe"}',
}
TOML_ATTACKS = {
    "deep": b"name = " + b"[" * DEEP + b"]" * DEEP + b"\n",
    "big-integer": b"name = " + b"9" * 5000 + b"\n",
    "not-utf8": b'name = "\xff\xfe"\n',
}


def nncert(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nncert.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=env)


def assert_one_line(proc: subprocess.CompletedProcess, needle: str) -> None:
    """Exit status 2 and one ``nncert: error:`` line naming ``needle`` (a file), no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("nncert: error:") and proc.stderr.count("\n") == 1, proc.stderr
    assert needle in proc.stderr, proc.stderr


def assert_error(error: BaseException, needle: str) -> None:
    assert "\n" not in str(error) and needle in str(error), str(error)


# -- the loaders ---------------------------------------------------------------------------------

@pytest.mark.parametrize("attack", JSON_ATTACKS)
def test_json_loader_refuses_attacks_in_one_line(attack):
    with pytest.raises(datafiles.DataFileError) as e:
        datafiles.parse_json(JSON_ATTACKS[attack], "x.json")
    assert_error(e.value, "x.json: ")


@pytest.mark.parametrize("attack", TOML_ATTACKS)
def test_toml_loader_refuses_attacks_in_one_line(attack):
    with pytest.raises(datafiles.DataFileError) as e:
        datafiles.parse_toml(TOML_ATTACKS[attack], "x.toml")
    assert_error(e.value, "x.toml: ")


@pytest.mark.parametrize("text, reason", [
    ("NaN", "not accepted here"),
    ("[1e999]", "not finite"),
    ('["\\ud800"]', "lone surrogate"),
    ("[18446744073709551616]", "does not fit 64 bits"),
    ("[" * (datafiles.MAX_DEPTH + 1) + "]" * (datafiles.MAX_DEPTH + 1), "nested deeper"),
])
def test_json_loader_bounds(text, reason):
    with pytest.raises(datafiles.DataFileError, match=reason):
        datafiles.parse_json(text, "x.json")


def test_json_loader_keeps_what_is_within_bounds():
    doc = '{"a": [18446744073709551615, -9223372036854775808, 1.5, "\\ud83d\\ude00"], "b": NaN}'
    value = datafiles.parse_json(doc, "x", allow_nonfinite=True)
    assert value["a"] == [2**64 - 1, -(2**63), 1.5, "\U0001F600"] and value["b"] != value["b"]
    nested = "[" * datafiles.MAX_DEPTH + "]" * datafiles.MAX_DEPTH
    assert datafiles.parse_json(nested, "x") == json.loads(nested)


@pytest.mark.parametrize("text", ["x = nan", "x = -inf", "x = 18446744073709551616"])
def test_toml_loader_refuses_non_finite_and_wide_numbers(text):
    with pytest.raises(datafiles.DataFileError):
        datafiles.parse_toml(text, "x.toml")


# -- graph spec files (`nncert repro`) ------------------------------------------------------------

@pytest.fixture(scope="module")
def spec_doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("spec") / "spec.json"
    save_spec(path, seeded(Cell.parse("single-ADD-1.0"), 0))  # inputs 0, 1; INT32 const 2; output 3
    return json.loads(path.read_text())


def _spec_edits() -> dict:
    def operand(i, **fields):
        return lambda d: d["operands"][i].update(fields)

    def strings(d):  # the input's values as strings, which numpy would parse
        d["operands"][0]["value"] = np.asarray(d["operands"][0]["value"]).astype(str).tolist()

    return {
        "dims-bool": (operand(3, dims=[True, 11, 7, 6]), "operands[3].dims must be an integer"),
        "scale-string": (operand(0, scale="0.5"), "operands[0].scale must be a number"),
        "scale-nan": (operand(0, scale=float("nan")), "operands[0].scale must be a finite number"),
        "zero-point-float": (operand(0, zero_point=1.5), "operands[0].zero_point must be an integer"),
        "value-strings": (strings, "operands[0]: not an array"),
        "index-bool": (lambda d: d["operations"][0].update(outputs=[True]), "operations[0].outputs"),
        "verdict-string": (lambda d: d.update(verdict="x"), "verdict must be an object"),
    }


SPEC_EDITS = _spec_edits()


@pytest.mark.parametrize("dims, message", [([1 << 20, 1 << 20], "more than a spec file may hold"),
                                           ([1 << 40, 1], "dims must be in")])
def test_spec_file_with_huge_dimensions_is_refused_at_load(tmp_path, dims, message):
    """An operand that no value pins down (an intermediate result) claiming 2**40 elements."""
    doc = json.loads(json.dumps(to_spec(seeded(Cell.parse("small-float32-rank2"), 0))))
    internal = next(i for i, o in enumerate(doc["operands"]) if o["role"] == "internal"
                    and i not in doc["outputs"])
    doc["operands"][internal]["dims"] = dims
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match=message):
        load_spec(path)
    assert_one_line(nncert("repro", str(path)), message)


@pytest.mark.parametrize("attack", JSON_ATTACKS)
def test_spec_file_attacks(tmp_path, attack):
    path = tmp_path / "spec.json"
    path.write_bytes(JSON_ATTACKS[attack])
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert_error(e.value, str(path))
    assert_one_line(nncert("repro", str(path)), str(path))


@pytest.mark.parametrize("edit", SPEC_EDITS)
def test_spec_file_fields_are_type_checked(tmp_path, spec_doc, edit):
    change, message = SPEC_EDITS[edit]
    doc = json.loads(json.dumps(spec_doc))
    change(doc)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        load_spec(path)
    assert_error(e.value, str(path))


def test_spec_file_type_errors_are_one_line_from_repro(tmp_path, spec_doc):
    for edit in ("dims-bool", "scale-nan", "verdict-string"):
        doc = json.loads(json.dumps(spec_doc))
        SPEC_EDITS[edit][0](doc)
        path = tmp_path / f"{edit}.json"
        path.write_text(json.dumps(doc))
        assert_one_line(nncert("repro", str(path)), str(path))


def test_a_written_spec_still_replays(tmp_path, spec_doc):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec_doc))  # its criteria hold Infinity: tensor data may
    load_spec(path)
    proc = nncert("repro", str(path))
    assert proc.returncode == 0 and "PASS: reference" in proc.stdout, proc.stdout + proc.stderr


# -- the model codec (compilation caches, the MLTS zoo) ------------------------------------------

def _structure(model) -> dict:
    structure, _ = pack_model(model)
    return json.loads(structure)


@pytest.fixture(scope="module")
def packed():
    model, _ = seeded(Cell.parse("single-CONV_2D-1.0"), 0).model()
    return pack_model(model)


@pytest.mark.parametrize("attack", JSON_ATTACKS)
def test_codec_attacks(packed, attack):
    with pytest.raises(CodecError) as e:
        unpack_model(JSON_ATTACKS[attack], packed[1])
    assert_error(e.value, "model structure")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["main"]["operands"][0].__setitem__(2, "1.0"), "scale must be a number"),
    (lambda d: d["main"]["operands"][0].__setitem__(3, 1.5), "zero point must be an integer"),
    (lambda d: d["main"]["operands"][0].__setitem__(1, [1 << 70]), "does not fit 64 bits"),
    (lambda d: d.update(values=1.5), "size must be an integer"),
    (lambda d: d.update(values=True), "size must be an integer"),
    (lambda d: d.update(pools=[0]), "a pool's size must be in"),  # no shared memory of 0 bytes
])
def test_codec_fields_are_type_checked(packed, edit, message):
    doc = json.loads(packed[0])
    edit(doc)
    with pytest.raises(CodecError, match=message):
        unpack_model(json.dumps(doc).encode(), packed[1])


def test_codec_passes_invalid_values_of_the_right_type_to_validation(packed):
    """A negative dimension or a NaN scale is validation's to refuse (VAL-1), not the codec's."""
    doc = json.loads(packed[0])
    doc["main"]["operands"][0][1] = [-1, 2]
    doc["main"]["operands"][0][2] = float("nan")
    model = unpack_model(json.dumps(doc).encode(), packed[1])
    operand = model.main.operands[0]
    assert operand.dimensions == (-1, 2) and operand.scale != operand.scale


def test_corrupt_cache_is_a_hal_error_never_an_exception(tmp_path):
    """A model cache whose hash the token store accepts (a tampered store) but which holds a
    crafted structure, and a data cache cut short: GENERAL_FAILURE from prepare_model_from_cache."""
    import struct

    from nncert.drivers import caching
    from nncert.drivers.reference import ReferenceDriver
    from nncert.hal.errors import HalError
    from nncert.hal.types import ErrorStatus

    driver = ReferenceDriver(state_dir=str(tmp_path / "state"))
    model, _ = seeded(Cell.parse("single-ADD-1.0"), 0).model()
    token = bytes(range(32))
    model_file, data_file = tmp_path / "model", tmp_path / "data"
    model_bytes, data_bytes = caching.export_model(model)
    for structure, data in [(JSON_ATTACKS["deep"], data_bytes), (JSON_ATTACKS["big-integer"], data_bytes),
                            (JSON_ATTACKS["not-utf8"], data_bytes), (None, data_bytes[:1])]:
        if structure is None:
            cache = model_bytes  # the real structure, with constants missing
        else:
            cache = caching.frame(struct.pack("<Q", len(structure)) + structure)
        model_file.write_bytes(cache)
        data_file.write_bytes(data)
        caching.token_store(driver).put(token, caching.digest(cache))
        fds = [os.open(f, os.O_RDWR) for f in (model_file, data_file)]
        try:
            with pytest.raises(HalError) as e:
                driver.prepare_model_from_cache(None, fds[:1], fds[1:], token)
        finally:
            for fd in fds:
                os.close(fd)
        assert e.value.status is ErrorStatus.GENERAL_FAILURE
        assert "\n" not in e.value.message


# -- expectations files (--expectations) ----------------------------------------------------------

EXPECTATION_TYPES = {
    "reproduce-int": 'runtime = "x"\n[[xfail]]\ntest = "a"\nreason = "r"\nreproduce = 5\n',
    "defaults-array": '[defaults]\nthreads = [1]\n',
    "agrees-with-array": '[[xfail]]\ntest = "a"\nreason = "r"\nagrees_with = ["x"]\n',
}


@pytest.mark.parametrize("attack", [*TOML_ATTACKS, *EXPECTATION_TYPES])
def test_expectations_file_attacks(tmp_path, attack):
    path = tmp_path / "vendor.toml"
    if attack in TOML_ATTACKS:
        path.write_bytes(TOML_ATTACKS[attack].replace(b"name = ", b"runtime = "))
    else:
        path.write_text(EXPECTATION_TYPES[attack])
    with pytest.raises(ExpectationsError) as e:
        load_expectations(path, "reference")
    assert_error(e.value, str(path))


@pytest.mark.parametrize("attack", TOML_ATTACKS)
def test_expectations_file_attacks_from_certify(tmp_path, attack):
    path = tmp_path / "vendor.toml"
    path.write_bytes(TOML_ATTACKS[attack].replace(b"name = ", b"runtime = "))
    out = tmp_path / "cert"
    proc = nncert("certify", "--driver", "reference", "--plan", "smoke", "--expectations", str(path),
                  "--out", str(out))
    assert_one_line(proc, str(path))
    assert not out.exists()


def test_expectations_file_attack_is_a_pytest_usage_error(tmp_path):
    path = tmp_path / "vendor.toml"
    path.write_bytes(TOML_ATTACKS["deep"].replace(b"name = ", b"runtime = "))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "conformance/test_caching.py", "--collect-only", "-q", "--driver=reference",
                           f"--expectations={path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and str(path) in errors[0], proc.stderr


# -- certification plans (--plan) -------------------------------------------------------------------

_SUITE = '[[suite]]\nname = "s"\npaths = ["conformance/test_caching.py"]\n'
PLAN_TYPES = {
    "timeout-inf": f'name = "p"\ntest_timeout = inf\n{_SUITE}',
    "timeout-1e300": f'name = "p"\ntest_timeout = 1e300\n{_SUITE}',
    "title-int": f'name = "p"\n{_SUITE}title = 5\n',
    "path-empty": 'name = "p"\n[[suite]]\nname = "s"\npaths = [""]\n',
    "arg-nul": f'name = "p"\n{_SUITE}args = ["-k\\u0000x"]\n',
}


@pytest.mark.parametrize("attack", [*TOML_ATTACKS, *PLAN_TYPES])
def test_plan_file_attacks(tmp_path, attack):
    path = tmp_path / "plan.toml"
    if attack in TOML_ATTACKS:
        path.write_bytes(TOML_ATTACKS[attack])
    else:
        path.write_text(PLAN_TYPES[attack])
    with pytest.raises(PlanError) as e:
        load_plan(str(path))
    assert_error(e.value, str(path))


@pytest.mark.parametrize("attack", TOML_ATTACKS)
def test_plan_file_attacks_from_certify(tmp_path, attack):
    path = tmp_path / "plan.toml"
    path.write_bytes(TOML_ATTACKS[attack])
    out = tmp_path / "cert"
    assert_one_line(nncert("certify", "--driver", "reference", "--plan", str(path), "--out", str(out)),
                    str(path))
    assert not out.exists()


# -- certification reports and journals (certify verify / diff) -----------------------------------

@pytest.fixture(scope="module")
def good_report(tmp_path_factory) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from certify_synthetic import write_run

    out = tmp_path_factory.mktemp("report") / "report"
    plan, settings = write_run(out, 300, failures=3)
    report.write(out, report.build(out, plan, settings))
    return out


def _report_with(tmp_path: Path, content: bytes, name: str = "bad") -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / report.MANIFEST_FILE).write_text("")
    (out / report.REPORT_FILE).write_bytes(content)
    return out


@pytest.mark.parametrize("attack", JSON_ATTACKS)
def test_report_attacks(tmp_path, good_report, attack):
    out = _report_with(tmp_path, JSON_ATTACKS[attack])
    with pytest.raises(ValueError) as e:
        report.load(out)
    where = str(out / report.REPORT_FILE)
    assert_error(e.value, where)
    assert_one_line(nncert("certify", "verify", str(out)), where)
    assert_one_line(nncert("certify", "diff", str(good_report), str(out)), where)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.update(tests=5), "tests must be an array"),
    (lambda r: r["tests"][0].update(req="ACC-1"), "tests[0].req must be an array"),
    (lambda r: r["plan"].update(sha256=None), "plan.sha256 must be str"),
    (lambda r: r["requirements"]["ACC-1"]["counts"].update(PASS=True), "counts.PASS must be int"),
    (lambda r: r["coverage"].append({"operation": "ADD"}), "has no 'type'"),
    (lambda r: r.pop("mlts"), "has no 'mlts'"),
])
def test_report_fields_are_checked_before_diff_reads_them(tmp_path, good_report, edit, message):
    doc = json.loads((good_report / report.REPORT_FILE).read_text())
    edit(doc)
    out = _report_with(tmp_path, json.dumps(doc).encode())
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        report.load(out)
    assert_one_line(nncert("certify", "diff", str(good_report), str(out)), message)


def test_a_written_report_still_loads_verifies_and_diffs(good_report):
    assert report.load(good_report)["schema"] == report.SCHEMA
    proc = nncert("certify", "diff", str(good_report), str(good_report))
    assert proc.returncode == 0 and "no regression" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("attack", JSON_ATTACKS)
def test_journal_attacks(tmp_path, attack):
    path = tmp_path / "journal.jsonl"
    path.write_bytes(JSON_ATTACKS[attack] + b"\n")
    with pytest.raises(journal.JournalError) as e:
        journal.read(path)
    assert_error(e.value, f"{path}: line 1")


RUN_TYPES = {
    "driver-type": b'{"driver": 1, "plan": "smoke", "plan_sha256": "", "suites": []}',
    "jobs-type": b'{"driver": "x", "plan": "smoke", "plan_sha256": "", "suites": [], "jobs": "2"}',
    "suites-type": b'{"driver": "x", "plan": "smoke", "plan_sha256": "", "suites": [1]}',
    "unknown-key": b'{"driver": "x", "plan": "smoke", "plan_sha256": "", "suites": [], "evil": 1}',
    "missing-key": b'{"driver": "x"}',
    "not-object": b'["driver"]',
}


@pytest.mark.parametrize("attack", [*JSON_ATTACKS, *RUN_TYPES])
def test_run_settings_attacks_from_resume(tmp_path, attack):
    """A run directory handed over for --resume (or verify) with a crafted run.json."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_bytes({**JSON_ATTACKS, **RUN_TYPES}[attack])
    assert_one_line(nncert("certify", "--resume", str(run)), "run.json")


# -- driver specs -----------------------------------------------------------------------------------

@pytest.fixture()
def vendor_site(tmp_path) -> tuple[Path, Path, dict[str, str]]:
    """A package whose module has a function with a side effect (it creates ``marker``), a
    marked factory, and a top-level module with a Driver class; the environment that finds them."""
    marker = tmp_path / "marker"
    site = tmp_path / "site"
    (site / "effects").mkdir(parents=True)
    (site / "effects" / "__init__.py").write_text("")
    (site / "effects" / "actions.py").write_text(
        "import os\n\n"
        "from nncert.drivers import driver_factory\n"
        "from nncert.drivers.reference import ReferenceDriver\n\n"
        f"def touch(*args, **options):\n    open({str(marker)!r}, 'w').close()\n\n"
        "class NotADriver:\n"
        f"    def __init__(self, *args, **options):\n        open({str(marker)!r}, 'w').close()\n\n"
        "@driver_factory\n"
        "def create(**options):\n    return ReferenceDriver(**options)\n")
    (site / "toplevel_npu.py").write_text(
        "from nncert.drivers.reference import ReferenceDriver\n\n"
        "class TopLevelDriver(ReferenceDriver):\n    name = 'top-level'\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(ROOT), env.get("PYTHONPATH")]))
    return site, marker, env


@pytest.mark.parametrize("spec", ["effects.actions:touch", "effects.actions:touch:a,b=c",
                                  "effects.actions:NotADriver", "effects.actions:os.system:touch {marker}"])
def test_import_path_to_a_plain_callable_is_refused_uncalled(vendor_site, spec, monkeypatch):
    site, marker, env = vendor_site
    spec = spec.format(marker=marker)
    proc = nncert("drivers", "--check", spec, env=env)
    assert_one_line(proc, "refused, nothing was called")
    assert not marker.exists()
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(DriverSpecError, match="nothing was called"):
        load_driver(spec)
    assert not marker.exists()


def test_os_system_spec_runs_no_command(tmp_path):
    marker = tmp_path / "marker"
    proc = nncert("drivers", "--check", f"os.path:os.system:touch {marker}")
    assert_one_line(proc, "os.path:os.system")
    assert not marker.exists()


def test_marked_factories_and_driver_classes_load(vendor_site):
    _, marker, env = vendor_site
    for spec in ("effects.actions:create", "toplevel_npu:TopLevelDriver"):
        proc = nncert("drivers", "--check", spec, env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"{spec}: nncert-reference" in proc.stdout
    assert not marker.exists()


def test_undotted_import_paths():
    assert parse_spec("toplevel_npu:TopLevelDriver:x=1") == ("toplevel_npu:TopLevelDriver", [], {"x": "1"})
    assert parse_spec("mutant:crash") == ("mutant", ["crash"], {})  # a registered name wins
    with pytest.raises(DriverSpecError, match="unknown driver 'nosuch', and no module 'nosuch'"):
        load_driver("nosuch:Driver")
