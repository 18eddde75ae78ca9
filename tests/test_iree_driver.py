"""The IREE driver (nncert/drivers/iree): one-line option errors, what it claims and why it
declines, the compile cache (hits across instances and processes, corrupt entries rebuilt),
the HAL model-cache round trip, IF, dynamic shapes and both backends.

Every compilation costs IREE's pipeline (~0.5-1 s): the tests share one driver and one
compile-cache directory per module, and compile few models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")
pytest.importorskip("iree.runtime")
pytest.importorskip("onnx")

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.caching import prepare_with_cache
from nncert.drivers.iree import IREEDriver
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as O
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.control_flow_models import counting_while_model, dynamic_if_model, if_golden, if_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("iree-compiled")


@pytest.fixture(scope="module")
def driver(cache_dir) -> IREEDriver:
    return IREEDriver(cache=str(cache_dir))


def _add_model(dims=(2, 3), t=T.TENSOR_FLOAT32):
    b = ModelBuilder()
    x, y = b.operand(t, dims), b.operand(t, dims)
    out = b.operand(t, dims)
    b.operation(O.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


def _run(driver, model, feeds, dims, prepared=None):
    request = build_request(model, feeds, dims)
    (prepared or driver.prepare_model(model)).execute_synchronously(request)
    return read_outputs(model, request, dims)


X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, np.float32)


@pytest.mark.parametrize(("spec", "complaint"), [
    ("iree:backend=cuda", "backend='cuda': allowed values are llvm-cpu, vmvx"),
    ("iree:opt=O7", "opt='O7': allowed values are O0, O1, O2, O3"),
    ("iree:flags=--no-such-flag", "'--no-such-flag' is refused by the compiler: option not found"),
    ("iree:flags=--iree-opt-level=O9", "'--iree-opt-level=O9' is refused by the compiler"),
    ("iree:flags=O2", "'O2' is refused by the compiler"),
    ("iree:cache=", "cache='': allowed values are on, off or a directory"),
    ("iree:colour=red", "colour"),
])
def test_bad_options_are_one_line_errors(spec, complaint, capfd):
    with pytest.raises(DriverSpecError) as e:
        load_driver(spec)
    assert complaint in str(e.value) and "\n" not in str(e.value)
    # What LLVM's option parser prints goes into the message, not onto the terminal.
    assert "O9" not in capfd.readouterr().err


def test_version_string_names_every_option_that_changes_the_code(cache_dir):
    default = IREEDriver(cache="off").version_string()
    assert "iree 3." in default and "backend=llvm-cpu" in default and "opt=O0" in default
    assert "host=" in default  # code for this CPU: a cache shared between machines keeps it apart
    vmvx = IREEDriver(backend="vmvx", opt="O2", cache="off").version_string()
    assert "backend=vmvx" in vmvx and "opt=O2" in vmvx and "host=" not in vmvx
    flagged = IREEDriver(flags="--iree-llvmcpu-debug-symbols=false --iree-opt-level=O1", opt="O3",
                         cache="off")
    assert "flags=--iree-llvmcpu-debug-symbols=false --iree-opt-level=O1" in flagged.version_string()
    assert "opt=O1" in flagged.version_string()  # the user's flags come last and win
    # The version string is in the compile cache's key: different code, different entries.
    a, b = IREEDriver(cache=str(cache_dir)), IREEDriver(opt="O2", cache=str(cache_dir))
    assert a.compile_cache.key(b"model") != b.compile_cache.key(b"model")


def test_claims_most_operations_and_says_why_it_declines(driver):
    """The static rules (the ONNX exporter's, and IREE's: no WHILE) over the first-seed case
    of every operation and variant (no compilation: the per-operation suite compiles each);
    then the full answer, compiler probe included, on a few of them."""
    claimed, declined = set(), {}
    firsts = {}  # the first case of each operation and variant
    for k in enumerate_cases((0,)):
        firsts.setdefault((k[0].type, k[2]), k)
    models = [sample_case(*k).model()[0] for k in firsts.values()]
    for model in models:
        for n, op in enumerate(model.main.operations):
            problem = driver.operation_problem(model, n)
            (declined.setdefault(op.type, problem) if problem else claimed.add(op.type))
    assert len(claimed) >= 60, f"iree passes the static rules for {len(claimed)} operations"
    assert all(declined.values()), declined
    picked = {}
    for model in models:
        kind = model.main.operations[0].type
        if kind in (O.ADD, O.SOFTMAX, O.CONV_2D) and kind not in picked and model.main.operands[
                model.main.input_indexes[0]].type is T.TENSOR_FLOAT32:
            picked[kind] = model
    assert len(picked) == 3
    for model in picked.values():
        assert driver.decline_reasons(model) == [None] * len(model.main.operations)


def test_a_compiler_refusal_is_an_error_carrying_its_diagnostic(driver):
    """What IREE's compiler says (its diagnostics, routed to a callback) is the exception's
    message, hence the decline reason the probe keeps."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("DFT", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
    content = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10).SerializeToString()
    with pytest.raises(Exception, match=r"IREE's compiler refuses the model: failed to legalize .*onnx\.DFT"):
        driver.build(content, None)


def test_models_compiled_together_compute_what_each_compiled_alone_computes(driver):
    """``build_together`` (the compile-ahead): one module, a function a model, each artefact
    headed by its function's name; a model the compiler refuses is named by its position (from
    the diagnostics' lines), so the others can be compiled again without it."""
    from onnx import TensorProto, helper

    from nncert.drivers.compiled import RefusedTogether
    from nncert.drivers.iree import TOGETHER

    graph = helper.make_graph([helper.make_node("DFT", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
    refused = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10).SerializeToString()
    models = [_add_model(), _add_model((3, 2)), _add_model((2, 3), T.TENSOR_INT32)]
    contents = [driver.translate(m) for m in models]
    with pytest.raises(RefusedTogether) as e:
        driver.build_together([contents[0], refused, *contents[1:]])
    assert e.value.refused == [1]
    artefacts = driver.build_together(contents)
    for n, (model, artefact) in enumerate(zip(models, artefacts, strict=True)):
        assert artefact.startswith(TOGETHER + f"m{n}".encode() + b"\n")
        dims = model.main.operands[0].dimensions
        feeds = [np.arange(6).reshape(dims).astype(X.dtype if n < 2 else np.int32)] * 2
        alone = driver.load_built(driver.build(contents[n], model), model)
        together = driver.load_built(artefact, model)
        np.testing.assert_array_equal(together.run(feeds)[0], alone.run(feeds)[0])
        np.testing.assert_array_equal(together.run(feeds)[0], feeds[0] * 2)


def test_while_is_declined_and_if_runs_both_branches(driver):
    (reason,) = driver.decline_reasons(counting_while_model())
    assert "cannot stop a running invocation" in reason
    model = if_model()
    assert driver.supported_operations(model) == [True]
    a, b = np.arange(6, dtype=np.int32).reshape(2, 3), np.full((2, 3), 5, np.int32)
    prepared = driver.prepare_model(model)
    for c in (True, False):
        (got,) = _run(driver, model, [np.array([c]), a, b], [(2, 3)], prepared)
        np.testing.assert_array_equal(got, if_golden(c, a, b))


def test_an_if_output_of_the_branchs_shape(driver):
    model = dynamic_if_model()
    prepared = driver.prepare_model(model)
    x = np.array([1, 2, 3], np.float32)
    assert _run(driver, model, [np.array([True]), x], [(6,)], prepared)[0].tolist() == [1, 2, 3, 1, 2, 3]
    assert _run(driver, model, [np.array([False]), x], [(3,)], prepared)[0].tolist() == [2, 4, 6]


def test_dynamic_shapes_compile_per_input_shape(driver):
    model = _add_model(dims=(0, 3))
    prepared = driver.prepare_model(model)
    for rows in (1, 4):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        (got,) = _run(driver, model, [x, x], [(rows, 3)], prepared)
        np.testing.assert_array_equal(got, x + x)


def test_the_probe_and_the_model_share_one_compilation(cache_dir):
    """The probe compiles the operation alone (isolate_operation renumbers its operands):
    the driver's canonical ONNX names make it the very model the test prepares next."""
    driver = IREEDriver(cache=str(cache_dir))
    model = _add_model(dims=(3, 2))
    assert driver.supported_operations(model) == [True]
    before = dict(driver.compile_cache.stats)
    (got,) = _run(driver, model, [X.reshape(3, 2), Y.reshape(3, 2)], [(3, 2)])
    np.testing.assert_array_equal(got, X.reshape(3, 2) + 0.5)
    assert driver.compile_cache.stats["hits"] == before["hits"] + 1
    assert driver.compile_cache.stats["misses"] == before["misses"]


def test_the_compile_cache_is_shared_with_another_process(cache_dir):
    model = _add_model(dims=(2, 5))
    first = IREEDriver(cache=str(cache_dir))
    content = first.translate(model)
    first.runtime_form(model)
    assert first.compile_cache.stats == {"hits": 0, "misses": 1, "corrupt": 0}
    first.runtime_form(model)
    assert first.compile_cache.stats["hits"] == 1
    script = (
        "from nncert.drivers.iree import IREEDriver\n"
        "from nncert.hal.builder import ModelBuilder\n"
        "from nncert.hal.types import OperandType as T, OperationType as O\n"
        "b = ModelBuilder(); x, y, out = (b.operand(T.TENSOR_FLOAT32, (2, 5)) for _ in range(3))\n"
        "b.operation(O.ADD, [x, y, b.constant(T.INT32, 0)], [out]); m = b.build([x, y], [out])\n"
        f"d = IREEDriver(cache={str(cache_dir)!r})\n"
        "d.runtime_form(m); print(d.compile_cache.key(d.translate(m)), d.compile_cache.stats['hits'])\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    key, hits = proc.stdout.split()
    assert key == first.compile_cache.key(content) and hits == "1"


def test_a_corrupt_entry_is_compiled_again_never_loaded(cache_dir):
    driver = IREEDriver(cache=str(cache_dir))
    model = _add_model(dims=(4, 1))
    driver.runtime_form(model)
    path = driver.compile_cache.directory / f"{driver.compile_cache.key(driver.translate(model))}.art"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the middle of the machine code
    path.write_bytes(bytes(data))
    # Read here, not by the support probe's child (whose counts stay in that process).
    driver.runtime_form(model)
    assert driver.compile_cache.stats["corrupt"] == 1 and driver.compile_cache.stats["misses"] == 2
    assert driver.compile_cache.get(driver.compile_cache.key(driver.translate(model))) is not None
    (got,) = _run(driver, model, [X.reshape(6)[:4].reshape(4, 1)] * 2, [(4, 1)])
    np.testing.assert_array_equal(got, 2 * X.reshape(6)[:4].reshape(4, 1))


def test_the_hal_model_cache_holds_the_compiled_module(tmp_path, cache_dir, monkeypatch):
    model = _add_model()
    first = IREEDriver(cache=str(cache_dir), state_dir=str(tmp_path / "state"))
    outcome = prepare_with_cache(first, model, tmp_path / "hal")
    assert outcome.kind == "miss"
    (expected,) = _run(first, model, [X, Y], [(2, 3)], outcome.prepared)
    # A fresh driver without a compile cache: the hit loads the module the files hold and
    # compiles nothing.
    second = IREEDriver(cache="off", state_dir=str(tmp_path / "state"))

    def no_compiling(*args):
        raise AssertionError("compiled although the model cache holds the module")

    monkeypatch.setattr(second, "build", no_compiling)
    again = prepare_with_cache(second, model, tmp_path / "hal")
    assert again.kind == "hit"
    (got,) = _run(second, model, [X, Y], [(2, 3)], again.prepared)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, X + Y)


def test_the_vmvx_backend_runs_quantised_and_boolean_models(cache_dir):
    driver = IREEDriver(backend="vmvx", cache=str(cache_dir))
    b = ModelBuilder()
    x, y = b.operand(T.TENSOR_QUANT8_ASYMM, (4,), 0.5, 10), b.operand(T.TENSOR_QUANT8_ASYMM, (4,), 0.5, 10)
    out = b.operand(T.TENSOR_BOOL8, (4,))
    b.operation(O.GREATER, [x, y], [out])
    model = b.build([x, y], [out])
    (got,) = _run(driver, model, [np.array([1, 20, 30, 255], np.uint8), np.array([2, 20, 10, 0], np.uint8)],
                  [(4,)])
    assert got.tolist() == [False, False, True, True]


def test_uint8_results_keep_their_values(driver):
    """IREE's buffers are signless: uint8 results come back as int8 of the same bits and are
    read as uint8 (200 stays 200)."""
    model = _add_model(dims=(4,), t=T.TENSOR_QUANT8_ASYMM)
    for i in model.main.input_indexes + model.main.output_indexes:
        model.main.operands[i].scale, model.main.operands[i].zero_point = 1.0, 0
    a, b = np.array([100, 0, 250, 127], np.uint8), np.array([100, 255, 10, 1], np.uint8)
    (got,) = _run(driver, model, [a, b], [(4,)])
    assert got.tolist() == [200, 255, 255, 128]
