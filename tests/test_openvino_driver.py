"""The OpenVINO driver (nncert/drivers/openvino): one-line option errors, the precision hint
(float32 models meet ACC-1's float32 tolerance although OpenVINO's own default on a bf16 CPU is
bf16; a relaxed model gets the relaxed choice), the pinned numerics properties, what it claims
and why it declines (WHILE), the compile cache (hits across instances and processes, corrupt
entries rebuilt), the HAL model-cache round trip, IF, dynamic shapes and the TFLite frontend.

OpenVINO compiles a small model in ~0.05-0.15 s; the tests share one compile-cache directory
per module and compile few models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("onnx")

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.caching import prepare_with_cache
from nncert.drivers.openvino import OpenVINODriver
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as O
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.control_flow_models import counting_while_model, dynamic_if_model, if_golden, if_model
from nncert.testing.criteria import output_mismatches

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("openvino-compiled")


@pytest.fixture(scope="module")
def driver(cache_dir) -> OpenVINODriver:
    return OpenVINODriver(cache=str(cache_dir))


def _capabilities() -> list[str]:
    import openvino as ov
    return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def _add_model(dims=(2, 3), t=T.TENSOR_FLOAT32):
    b = ModelBuilder()
    x, y, out = b.operand(t, dims), b.operand(t, dims), b.operand(t, dims)
    b.operation(O.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


def _conv_model(relax: bool = False, n: int = 16, c: int = 32):
    """A float32 3x3 CONV_2D, SAME padding, with ``c`` channels in and out (288 products a
    sum: bf16's 8-bit mantissa is far outside ACC-1's float32 tolerance there)."""
    rng = np.random.default_rng(7)
    w = rng.uniform(-1, 1, (c, 3, 3, c)).astype(np.float32)
    bias = rng.uniform(-1, 1, (c,)).astype(np.float32)
    b = ModelBuilder()
    x, out = b.operand(T.TENSOR_FLOAT32, (1, n, n, c)), b.operand(T.TENSOR_FLOAT32, (1, n, n, c))
    b.operation(O.CONV_2D, [x, b.constant(T.TENSOR_FLOAT32, w), b.constant(T.TENSOR_FLOAT32, bias),
                            b.constant(T.INT32, 1), b.constant(T.INT32, 1), b.constant(T.INT32, 1),
                            b.constant(T.INT32, 0)], [out])
    feed = rng.uniform(-1, 1, (1, n, n, c)).astype(np.float32)
    padded = np.pad(feed.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    golden = bias.astype(np.float64) + sum(
        np.einsum("nhwi,oi->nhwo", padded[:, i:i + n, j:j + n, :], w[:, i, j, :].astype(np.float64))
        for i in range(3) for j in range(3))
    return b.build([x], [out], relax=relax), feed, golden.astype(np.float32)


def _run(driver, model, feeds, dims, prepared=None):
    request = build_request(model, feeds, dims)
    (prepared or driver.prepare_model(model)).execute_synchronously(request)
    return read_outputs(model, request, dims)


X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, np.float32)


@pytest.mark.parametrize(("spec", "complaint"), [
    ("openvino:device=NPU7", "device='NPU7': allowed values are CPU"),
    ("openvino:precision=f64", "precision='f64': allowed values are f32, bf16, f16"),
    ("openvino:threads=0", "threads='0': allowed values are integers >= 1"),
    ("openvino:threads=two", "threads='two': allowed values are integers >= 1"),
    ("openvino:frontend=caffe", "frontend='caffe': allowed values are onnx, tflite"),
    ("openvino:cache=", "cache='': allowed values are on, off or a directory"),
    ("openvino:colour=red", "colour"),
])
def test_bad_options_are_one_line_errors(spec, complaint):
    with pytest.raises(DriverSpecError) as e:
        load_driver(spec)
    assert complaint in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("precision", "capability"), [("f16", "FP16"), ("bf16", "BF16")])
def test_a_precision_the_device_does_not_compute_is_refused(precision, capability):
    """OpenVINO would silently take another precision (f16 on a CPU without float16 compute
    runs in bf16): the driver refuses the option instead; where the device has it, it is taken."""
    if capability in _capabilities():
        assert OpenVINODriver(precision=precision, cache="off").precision == precision
    else:
        with pytest.raises(DriverSpecError, match=f"precision='{precision}': device CPU does not compute"):
            load_driver(f"openvino:precision={precision},cache=off")


def test_version_string_names_the_options_and_the_host(cache_dir):
    default = OpenVINODriver(cache="off").version_string()
    for part in ("openvino 2", "device=CPU", "precision=f32", "threads=1", "frontend=onnx", "host="):
        assert part in default
    assert "threads=2" in OpenVINODriver(threads="2", cache="off").version_string()
    # The version string is in the compile cache's key: other options, other entries.
    a = OpenVINODriver(cache=str(cache_dir))
    b = OpenVINODriver(threads="2", cache=str(cache_dir))
    assert a.compile_cache.key(b"model") != b.compile_cache.key(b"model")


def test_float32_convolution_meets_the_float32_tolerance(driver):
    """OpenVINO's default inference precision on a CPU with bf16 units is bf16; the driver
    sets f32 for a float32 model, so the convolution is within ACC-1's float32 tolerance."""
    model, feed, golden = _conv_model()
    exe = driver.compile(model)
    assert str(exe.compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    (got,) = _run(driver, model, [feed], [golden.shape])
    assert output_mismatches(model, [golden], [got]) == []
    if "BF16" in _capabilities():  # the test has teeth: bf16 is far outside the tolerance
        bf16 = OpenVINODriver(precision="bf16", cache="off")
        (coarse,) = _run(bf16, model, [feed], [golden.shape])
        assert output_mismatches(model, [golden], [coarse]) != []


def test_a_relaxed_model_gets_the_relaxed_choice(driver, monkeypatch):
    """Relaxed (ACC-1): f16 where the device computes float16, else f32 (never bf16, whose
    8-bit mantissa ACC-1's relaxed tolerance does not allow for). The precision is in the
    compile cache's key, since both models export to the same ONNX bytes."""
    model, feed, golden = _conv_model(relax=True)
    expected = "f16" if "FP16" in _capabilities() else "f32"
    assert driver.relaxed_precision == expected and driver.precision_for(model) == expected
    exe = driver.compile(model)
    assert str(exe.compiled.get_property("INFERENCE_PRECISION_HINT")) == \
        {"f16": "<Type: 'float16'>", "f32": "<Type: 'float32'>"}[expected]
    (got,) = _run(driver, model, [feed], [golden.shape])
    assert output_mismatches(model, [golden], [got], relaxed=True) == []
    # On a float16 device (simulated): the relaxed model compiles in f16 under its own key,
    # its float32 twin still in f32; an explicit precision is the user's choice for both.
    monkeypatch.setattr(driver, "relaxed_precision", "f16")
    plain = _conv_model()[0]
    assert driver.precision_for(model) == "f16" and driver.precision_for(plain) == "f32"
    assert driver.properties("f16")["INFERENCE_PRECISION_HINT"] == "f16"
    assert driver.translate(model) == driver.translate(plain)
    bf16 = OpenVINODriver(precision="bf16", cache="off") if "BF16" in _capabilities() else None
    if bf16 is not None:
        assert bf16.precision_for(model) == bf16.precision_for(plain) == "bf16"


def test_numerics_changing_defaults_are_pinned(driver):
    exe = driver.compile(_add_model())
    get = exe.compiled.get_property
    assert str(get("EXECUTION_MODE_HINT")) == "ExecutionMode.ACCURACY"
    assert get("DYNAMIC_QUANTIZATION_GROUP_SIZE") == 0
    assert get("CPU_DENORMALS_OPTIMIZATION") is False
    assert get("INFERENCE_NUM_THREADS") == 1 and get("NUM_STREAMS") == 1


def test_claims_most_operations_and_says_why_it_declines(driver):
    """The static rules (the ONNX exporter's, and OpenVINO's: no WHILE) over the first-seed
    case of every operation and variant (no compilation: the per-operation suite compiles
    each); then the full answer, OpenVINO's compilation included, on a few of them."""
    claimed, declined = set(), {}
    firsts = {}
    for k in enumerate_cases((0,)):
        firsts.setdefault((k[0].type, k[2]), k)
    models = [sample_case(*k).model()[0] for k in firsts.values()]
    for model in models:
        for n, op in enumerate(model.main.operations):
            problem = driver.operation_problem(model, n)
            (declined.setdefault(op.type, problem) if problem else claimed.add(op.type))
    assert len(claimed) >= 60, f"openvino passes the static rules for {len(claimed)} operations"
    assert all(declined.values()), declined
    picked = {}
    for model in models:
        kind = model.main.operations[0].type
        if kind in (O.ADD, O.SOFTMAX, O.CONV_2D, O.RESIZE_BILINEAR) and kind not in picked and \
                model.main.operands[model.main.input_indexes[0]].type is T.TENSOR_FLOAT32:
            picked[kind] = model
    assert len(picked) == 4
    for model in picked.values():
        assert driver.decline_reasons(model) == [None] * len(model.main.operations)


def test_while_is_declined_and_if_runs_both_branches(driver):
    (reason,) = driver.decline_reasons(counting_while_model())
    assert "cannot stop a running inference" in reason
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
    driver = OpenVINODriver(cache=str(cache_dir))
    model = _add_model(dims=(3, 2))
    assert driver.supported_operations(model) == [True]
    before = dict(driver.compile_cache.stats)
    (got,) = _run(driver, model, [X.reshape(3, 2), Y.reshape(3, 2)], [(3, 2)])
    np.testing.assert_array_equal(got, X.reshape(3, 2) + 0.5)
    assert driver.compile_cache.stats["hits"] == before["hits"] + 1
    assert driver.compile_cache.stats["misses"] == before["misses"]


def test_the_compile_cache_is_shared_with_another_process(cache_dir):
    model = _add_model(dims=(2, 5))
    first = OpenVINODriver(cache=str(cache_dir))
    first.runtime_form(model)
    assert first.compile_cache.stats == {"hits": 0, "misses": 1, "corrupt": 0}
    first.runtime_form(model)
    assert first.compile_cache.stats["hits"] == 1
    script = (
        "from nncert.drivers.openvino import OpenVINODriver\n"
        "from nncert.hal.builder import ModelBuilder\n"
        "from nncert.hal.types import OperandType as T, OperationType as O\n"
        "b = ModelBuilder(); x, y, out = (b.operand(T.TENSOR_FLOAT32, (2, 5)) for _ in range(3))\n"
        "b.operation(O.ADD, [x, y, b.constant(T.INT32, 0)], [out]); m = b.build([x, y], [out])\n"
        f"d = OpenVINODriver(cache={str(cache_dir)!r})\n"
        "d.runtime_form(m); s = d.compile_cache.stats; print(s['hits'], s['misses'])\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "0"]


def test_a_corrupt_entry_is_compiled_again_never_loaded(cache_dir):
    model = _add_model(dims=(4, 1))
    OpenVINODriver(cache=str(cache_dir)).runtime_form(model)
    driver = OpenVINODriver(cache=str(cache_dir))  # nothing compiled in memory
    entries = {p: p.stat().st_mtime_ns for p in driver.compile_cache.directory.glob("*.art")}
    path = max(entries, key=entries.get)  # the entry just written
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    # Read here, not by the support probe's child (whose counts stay in that process).
    driver.runtime_form(model)
    assert driver.compile_cache.stats["corrupt"] == 1 and driver.compile_cache.stats["misses"] == 1
    assert path.is_file() and path.read_bytes() != bytes(data)  # rebuilt and stored afresh
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    (got,) = _run(driver, model, [x, x], [(4, 1)])
    np.testing.assert_array_equal(got, 2 * x)


def test_the_hal_model_cache_holds_the_exported_compiled_model(tmp_path, cache_dir, monkeypatch):
    model, feed, golden = _conv_model(n=6, c=4)
    first = OpenVINODriver(cache=str(cache_dir), state_dir=str(tmp_path / "state"))
    outcome = prepare_with_cache(first, model, tmp_path / "hal")
    assert outcome.kind == "miss"
    (expected,) = _run(first, model, [feed], [golden.shape], outcome.prepared)
    # A fresh driver without a compile cache: the hit imports the compiled model the files
    # hold and compiles nothing.
    second = OpenVINODriver(cache="off", state_dir=str(tmp_path / "state"))

    def no_compiling(*args):
        raise AssertionError("compiled although the model cache holds the compiled model")

    monkeypatch.setattr(second, "build", no_compiling)
    again = prepare_with_cache(second, model, tmp_path / "hal")
    assert again.kind == "hit"
    (got,) = _run(second, model, [feed], [golden.shape], again.prepared)
    np.testing.assert_array_equal(got, expected)
    assert output_mismatches(model, [golden], [got]) == []


def test_the_tflite_frontend_runs_the_litert_exporters_model(cache_dir):
    pytest.importorskip("ai_edge_litert")
    driver = OpenVINODriver(frontend="tflite", cache=str(cache_dir))
    assert "frontend=tflite" in driver.version_string()
    (got,) = _run(driver, _add_model(), [X, Y], [(2, 3)])
    np.testing.assert_array_equal(got, X + Y)
    assert "cannot stop a running inference" in driver.decline_reasons(counting_while_model())[0]


def test_importing_the_drivers_does_not_import_openvino():
    proc = subprocess.run([sys.executable, "-c", "import sys, nncert.drivers, nncert.drivers.openvino; "
                           "print('openvino' in sys.modules)"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr
