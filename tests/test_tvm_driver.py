"""The Apache TVM driver (nncert/drivers/tvm): one-line option errors, the target checks, what
it claims and why it declines, IF and dynamic shapes, the compile cache (shared by the probe
and the test, across instances and processes, a corrupt entry rebuilt), the HAL model-cache
round trip, private library files, a quiet stderr, and the fallback without a C toolchain.

A compilation costs TVM's pipeline and a link (~0.1-0.3 s): the tests share one driver and one
compile-cache directory per module and compile few models."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")

import nncert.drivers.tvm as tvm_driver
from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers.caching import prepare_with_cache
from nncert.drivers.tvm import TVMDriver
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as O
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.control_flow_models import (
    counting_while_model,
    dynamic_if_golden,
    dynamic_if_model,
    if_golden,
    if_model,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tvm-compiled")


@pytest.fixture(scope="module")
def driver(cache_dir) -> TVMDriver:
    return TVMDriver(cache=str(cache_dir))


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
    ("tvm:target=cuda", "target='cuda': only llvm targets run here"),
    ("tvm:target=c", "target='c': only llvm targets run here"),
    ("tvm:target=no_such_kind", "target='no_such_kind'"),
    ("tvm:target=llvm -mtriple=aarch64-linux-gnu", "is another architecture than this machine's"),
    ("tvm:target=llvm -mcpu=no-such-cpu", "LLVM knows no CPU 'no-such-cpu'"),
    ("tvm:target=llvm -no-such-attr=1", "Unknown config option 'no-such-attr'"),
    ("tvm:target=llvm mcpu", "'mcpu' is not a -key=value attribute"),
    ("tvm:target=", "target='': a TVM target is needed"),
    ("tvm:opt_level=4", "opt_level='4': allowed values are 0, 1, 2, 3"),
    ("tvm:opt_level=O2", "opt_level='O2'"),
    ("tvm:threads=0", "threads='0': allowed values are integers >= 1"),
    ("tvm:threads=many", "threads='many'"),
    ("tvm:threads=100000", "TVM's thread pool in this process gives at most"),
    ("tvm:cache=", "cache='': allowed values are on, off or a directory"),
    ("tvm:colour=red", "colour"),
])
def test_bad_options_are_one_line_errors(spec, complaint, capfd):
    with pytest.raises(DriverSpecError) as e:
        load_driver(spec)
    assert complaint in str(e.value) and "\n" not in str(e.value)
    # TVM's own log lines (LLVM's "not a recognized processor") stay off the terminal.
    assert "Warning" not in capfd.readouterr().err


def test_a_target_json_object_is_taken_from_python_callers():
    driver = TVMDriver(target='{"kind": "llvm", "opt-level": 2}', cache="off")
    assert '"opt-level":2' in driver.version_string()
    with pytest.raises(ValueError, match="not valid JSON"):
        TVMDriver(target='{"kind": llvm}', cache="off")


def test_code_for_a_cpu_this_host_lacks_is_refused():
    """Code for a CPU with instruction sets this host lacks would fault (SIGILL) when run: the
    driver refuses the target rather than let it crash a suite."""
    from tvm.target import codegen

    host = codegen.llvm_get_system_cpu()
    foreign = "sapphirerapids" if "amx" not in Path("/proc/cpuinfo").read_text() else "znver4"
    if foreign == host:
        pytest.skip(f"this host is a {host}")
    with pytest.raises(DriverSpecError, match=f"needs CPU features this host \\({host}\\) lacks"):
        load_driver(f"tvm:target=llvm -mcpu={foreign}")


def test_version_string_names_every_option_that_changes_the_code(cache_dir):
    default = TVMDriver(cache="off").version_string()
    assert "tvm 0." in default and '"kind":"llvm"' in default and "opt_level=2" in default
    assert "host=" not in default  # generic x86-64 code: a cache shared between machines may hold it
    native = TVMDriver(target="llvm -mcpu=native", opt_level="3", cache="off").version_string()
    assert "opt_level=3" in native and "host=" in native and '"mcpu":"native"' not in native
    # The version string is in the compile cache's key: different code, different entries.
    a, b = TVMDriver(cache=str(cache_dir)), TVMDriver(opt_level="0", cache=str(cache_dir))
    assert a.compile_cache.key(b"model") != b.compile_cache.key(b"model")


def test_claims_most_operations_and_says_why_it_declines(driver):
    """The static rules (the ONNX exporter's, and TVM's: no WHILE) over the first-seed case of
    every operation and variant; then the full answer, compiler probe included, on a few."""
    claimed, declined = set(), {}
    firsts = {}
    for k in enumerate_cases((0,)):
        firsts.setdefault((k[0].type, k[2]), k)
    models = [sample_case(*k).model()[0] for k in firsts.values()]
    for model in models:
        for n, op in enumerate(model.main.operations):
            problem = driver.operation_problem(model, n)
            (declined.setdefault(op.type, problem) if problem else claimed.add(op.type))
    assert len(claimed) >= 60, f"tvm passes the static rules for {len(claimed)} operations"
    assert all(declined.values()), declined
    picked = {}
    for model in models:
        kind = model.main.operations[0].type
        if kind in (O.ADD, O.SOFTMAX, O.CONV_2D) and kind not in picked and model.main.operands[
                model.main.input_indexes[0]].type is T.TENSOR_QUANT8_ASYMM:
            picked[kind] = model
    assert len(picked) == 3
    for model in picked.values():
        assert driver.decline_reasons(model) == [None] * len(model.main.operations)


def test_a_frontend_refusal_is_a_one_line_error(driver):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("DFT", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
    content = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10).SerializeToString()
    with pytest.raises(RuntimeError) as e:
        driver.build(content, None)
    assert "DFT" in str(e.value) and "\n" not in str(e.value)


def test_while_is_declined_and_if_runs_both_branches(driver):
    (reason,) = driver.decline_reasons(counting_while_model())
    assert "no Loop converter" in reason
    model = if_model()
    assert driver.supported_operations(model) == [True]
    a, b = np.arange(6, dtype=np.int32).reshape(2, 3), np.full((2, 3), 5, np.int32)
    prepared = driver.prepare_model(model)
    for c in (True, False):
        (got,) = _run(driver, model, [np.array([c]), a, b], [(2, 3)], prepared)
        np.testing.assert_array_equal(got, if_golden(c, a, b))


def _transpose_conv(stride_w: int, pad: int):
    """TRANSPOSE_CONV_2D-explicit-float32-nhwc-none-s0 (input width 4, output width 6) with
    ``stride_w`` and both horizontal paddings ``pad``."""
    import dataclasses

    key = next(k for k in enumerate_cases(seeds=(0,)) if k[0].type is O.TRANSPOSE_CONV_2D
               and k[1].name == "explicit" and k[2].label == "float32" and not k[3] and k[4] == 0)
    case = sample_case(*key)
    given = {"stride_w": stride_w, "pad_left": pad, "pad_right": pad}
    inputs = [dataclasses.replace(ci, value=np.asarray(given[ci.arg.name], np.int32))
              if ci.arg.name in given else ci for ci in case.inputs]
    case = dataclasses.replace(case, inputs=inputs)
    return case.model("base")[0]


def test_a_transposed_convolution_padded_down_from_a_huge_stride_is_declined(driver):
    """The tvm prepare_model campaign's hang: stride 7.7e8 on an input of width 4, padded down
    to an output of width 6. TVM computes the un-cropped 2.3e9-wide output first (37 GB; 48
    bytes a unit of stride, measured up to 5e7): declined by the static rule, no probe run."""
    stride = 770_000_000
    model = _transpose_conv(stride, stride * 3 // 2 - 2)
    (reason,) = driver.decline_reasons(model)
    assert "before it removes the padding" in reason and "2 x 2310000002" in reason
    assert tvm_driver._uncropped_transpose_conv(_transpose_conv(2, 1), 0) is None  # the seed case's own


def test_an_if_output_of_the_branchs_shape(driver):
    model = dynamic_if_model()
    prepared = driver.prepare_model(model)
    x = np.array([1, 2, 3], np.float32)
    for c, n in ((True, 6), (False, 3)):
        (got,) = _run(driver, model, [np.array([c]), x], [(n,)], prepared)
        np.testing.assert_array_equal(got, dynamic_if_golden(c, x))


def test_dynamic_shapes_compile_per_input_shape(driver):
    model = _add_model(dims=(0, 3))
    prepared = driver.prepare_model(model)
    for rows in (1, 4):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        (got,) = _run(driver, model, [x, x], [(rows, 3)], prepared)
        np.testing.assert_array_equal(got, x + x)


def test_the_probe_and_the_model_share_one_compilation(cache_dir):
    driver = TVMDriver(cache=str(cache_dir))
    model = _add_model(dims=(3, 2))
    assert driver.supported_operations(model) == [True]
    before = dict(driver.compile_cache.stats)
    (got,) = _run(driver, model, [X.reshape(3, 2), Y.reshape(3, 2)], [(3, 2)])
    np.testing.assert_array_equal(got, X.reshape(3, 2) + 0.5)
    assert driver.compile_cache.stats["hits"] == before["hits"] + 1
    assert driver.compile_cache.stats["misses"] == before["misses"]


def test_the_compile_cache_is_shared_with_another_process(cache_dir):
    model = _add_model(dims=(2, 5))
    first = TVMDriver(cache=str(cache_dir))
    content = first.translate(model)
    first.runtime_form(model)
    assert first.compile_cache.stats == {"hits": 0, "misses": 1, "corrupt": 0}
    first.runtime_form(model)
    assert first.compile_cache.stats["hits"] == 1
    script = (
        "from nncert.drivers.tvm import TVMDriver\n"
        "from nncert.hal.builder import ModelBuilder\n"
        "from nncert.hal.types import OperandType as T, OperationType as O\n"
        "b = ModelBuilder(); x, y, out = (b.operand(T.TENSOR_FLOAT32, (2, 5)) for _ in range(3))\n"
        "b.operation(O.ADD, [x, y, b.constant(T.INT32, 0)], [out]); m = b.build([x, y], [out])\n"
        f"d = TVMDriver(cache={str(cache_dir)!r})\n"
        "d.runtime_form(m); print(d.compile_cache.key(d.translate(m)), d.compile_cache.stats['hits'])\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    key, hits = proc.stdout.split()
    assert key == first.compile_cache.key(content) and hits == "1"


def test_a_corrupt_entry_is_compiled_again_never_loaded(cache_dir):
    driver = TVMDriver(cache=str(cache_dir))
    model = _add_model(dims=(4, 1))
    driver.runtime_form(model)
    path = driver.compile_cache.directory / f"{driver.compile_cache.key(driver.translate(model))}.art"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the middle of the library
    path.write_bytes(bytes(data))
    # Read here, not by the support probe's child (whose counts stay in that process).
    driver.runtime_form(model)
    assert driver.compile_cache.stats["corrupt"] == 1 and driver.compile_cache.stats["misses"] == 2
    assert driver.compile_cache.get(driver.compile_cache.key(driver.translate(model))) is not None
    x = X.reshape(6)[:4].reshape(4, 1)
    (got,) = _run(driver, model, [x, x], [(4, 1)])
    np.testing.assert_array_equal(got, 2 * x)


def test_the_hal_model_cache_holds_the_linked_library(tmp_path, cache_dir, monkeypatch):
    model = _add_model()
    first = TVMDriver(cache=str(cache_dir), state_dir=str(tmp_path / "state"))
    outcome = prepare_with_cache(first, model, tmp_path / "hal")
    assert outcome.kind == "miss"
    assert outcome.prepared.content.startswith(b"\x7fELF")  # the shared library itself
    (expected,) = _run(first, model, [X, Y], [(2, 3)], outcome.prepared)
    # A fresh driver without a compile cache: the hit loads the library the files hold and
    # compiles nothing.
    second = TVMDriver(cache="off", state_dir=str(tmp_path / "state"))

    def no_compiling(*args):
        raise AssertionError("compiled although the model cache holds the library")

    monkeypatch.setattr(second, "build", no_compiling)
    monkeypatch.setattr(second, "_compiled", no_compiling)
    again = prepare_with_cache(second, model, tmp_path / "hal")
    assert again.kind == "hit"
    (got,) = _run(second, model, [X, Y], [(2, 3)], again.prepared)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, X + Y)


def test_libraries_are_loaded_from_private_files_then_removed(driver, tmp_path, monkeypatch):
    """The library is written 0600 into a fresh 0700 directory of this user's, loaded, and both
    are gone afterwards; nothing is left in the temporary directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    real_load = driver._tvm.runtime.load_module

    def spying_load(path, *args):
        st, parent = os.stat(path), os.stat(os.path.dirname(path))
        seen.append((st.st_mode & 0o777, parent.st_mode & 0o777, st.st_uid == os.geteuid()))
        return real_load(path, *args)

    monkeypatch.setattr(driver._tvm.runtime, "load_module", spying_load)
    model = _add_model(dims=(1, 7))
    (got,) = _run(driver, model, [X.reshape(6)[:1].repeat(7).reshape(1, 7)] * 2, [(1, 7)])
    assert got.shape == (1, 7)
    assert seen and all(s == (0o600, 0o700, True) for s in seen)
    assert list(tmp_path.iterdir()) == []


def test_compiling_keeps_stderr_quiet(driver, capfd):
    """TVM's C++ log lines (and the linker's) never reach the user's terminal."""
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (1, 4, 4, 2))
    out = b.operand(T.TENSOR_FLOAT32, (1, 2, 2, 2))
    b.operation(O.AVERAGE_POOL_2D, [x, *(b.constant(T.INT32, v) for v in (0, 0, 0, 0, 2, 2, 2, 2, 0))],
                [out])
    model = b.build([x], [out])
    capfd.readouterr()
    (got,) = _run(driver, model, [np.ones((1, 4, 4, 2), np.float32)], [(1, 2, 2, 2)])
    np.testing.assert_array_equal(got, np.ones((1, 2, 2, 2), np.float32))
    assert capfd.readouterr().err == ""


def test_two_threads_give_the_same_results(cache_dir):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core")
    model = _add_model(dims=(64, 33))
    a = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)
    two = TVMDriver(threads="2", cache=str(cache_dir))
    assert "threads=2" in two.version_string()
    (got,) = _run(two, model, [a, a], [(64, 33)])
    np.testing.assert_array_equal(got, a + a)


def test_without_a_toolchain_the_model_cache_holds_onnx(tmp_path, monkeypatch, capfd):
    """No C compiler: one line says so, nothing is kept in a compile cache, and the HAL model
    cache holds the ONNX bytes, compiled again on import."""
    monkeypatch.setattr(tvm_driver, "_toolchain", lambda: None)
    # The support probe's child, a fresh interpreter, looks for one too: none on its PATH.
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers"))
    driver = TVMDriver(cache=str(tmp_path / "unused"), state_dir=str(tmp_path / "state"))
    (line,) = capfd.readouterr().err.splitlines()
    assert "no C compiler found" in line and driver.compile_cache is None
    model = _add_model()
    outcome = prepare_with_cache(driver, model, tmp_path / "hal")
    assert outcome.prepared.content == driver.translate(model)  # ONNX, not a library
    again = prepare_with_cache(driver, model, tmp_path / "hal")
    assert again.kind == "hit"
    (got,) = _run(driver, model, [X, Y], [(2, 3)], again.prepared)
    np.testing.assert_array_equal(got, X + Y)
    assert not (tmp_path / "unused").exists()


def test_executions_on_many_threads_leave_no_threads_or_libraries_behind(driver):
    """TVM's thread pools are per thread and outlive it, and TVM never unloads a library: the
    driver runs TVM on one thread of its own and loads a library once (DRV-5)."""
    import threading

    model = _add_model(dims=(3, 3))
    x = np.ones((3, 3), np.float32)
    _run(driver, model, [x, x], [(3, 3)])

    def task_count() -> int:
        return len(os.listdir("/proc/self/task"))

    def library_maps() -> int:
        with open("/proc/self/maps") as f:
            return sum("nncert-tvm-" in line for line in f)

    before = (task_count(), library_maps())
    for _ in range(6):
        worker = threading.Thread(target=lambda: _run(driver, model, [x, x], [(3, 3)]))
        worker.start()
        worker.join()
    # join() returns when the thread's Python part ends; the OS thread may take a moment
    # longer to leave /proc/self/task. A leak stays; an exiting thread goes.
    for _ in range(100):
        if (task_count(), library_maps()) == before:
            break
        time.sleep(0.02)
    assert (task_count(), library_maps()) == before
