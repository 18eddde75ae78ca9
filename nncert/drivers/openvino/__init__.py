"""The ``openvino`` driver: HAL models exported to ONNX (the ONNX Runtime driver's exporter,
QDQ form) or to TFLite (the LiteRT driver's exporter), read by OpenVINO's frontend, compiled
for an OpenVINO device and run by an ``InferRequest``.

Options (strings, from a spec such as ``openvino:precision=bf16,threads=2``):

- ``device``: an OpenVINO device of ``Core.available_devices`` (default ``CPU``);
- ``precision``: the inference precision (INFERENCE_PRECISION_HINT) of float32 models,
  ``f32`` (default), ``bf16`` or ``f16`` (each only on a device that lists it in its
  OPTIMIZATION_CAPABILITIES: OpenVINO would otherwise silently take another). With ``f32``
  a model that allows relaxed computation (``relax_computation_float32_to_float16``, ACC-1)
  gets ``f16`` where the device computes float16, and stays ``f32`` otherwise (bf16 keeps 8
  bits of mantissa, fewer than ACC-1's relaxed tolerance assumes). OpenVINO's own default on
  a CPU with bf16 units is bf16, so the hint is always set;
- ``threads``: INFERENCE_NUM_THREADS (default 1, for determinism);
- ``frontend``: ``onnx`` (default) or ``tflite``: which exporter, and which OpenVINO
  frontend, the model goes through (the static rules are that exporter's);
- ``cache``: ``on`` (default), ``off`` or a directory: the compile cache
  (nncert.drivers.compile_cache) of OpenVINO's exported compiled models
  (``CompiledModel.export_model``), loaded with ``Core.import_model`` and the same
  properties.

Every other setting that changes numerics is pinned: the CPU plugin's execution mode
ACCURACY, no dynamic quantisation of weights (DYNAMIC_QUANTIZATION_GROUP_SIZE 0), denormals
kept (CPU_DENORMALS_OPTIMIZATION off), one stream, no thread pinning. The CPU plugin
specialises the compiled graph for the host (its instruction sets decide kernels and
precisions), so the compile cache's key names the device's and the host CPU's fingerprint:
a cache shared between machines never loads an artefact made for another CPU.

IF and WHILE are ONNX If and Loop (TFLite IF and WHILE with ``frontend=tflite``). OpenVINO
cannot stop a running inference (``InferRequest.cancel`` only drops one not yet started), so
a model with WHILE loops is bounded as the LiteRT and ONNX Runtime drivers bound theirs only
where it can be: see ``operation_problem``.

openvino (and onnx, ai-edge-litert for the exporters) are imported when a driver is made,
never by ``import nncert.drivers``.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import platform
import tempfile
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from nncert import files
from nncert.drivers import compile_cache
from nncert.drivers.compiled import CompiledDriver, StandaloneRunner, Unmappable
from nncert.hal.model import Model
from nncert.hal.types import DeviceType, OperandType, OperationType

PRECISIONS = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}  # option -> OPTIMIZATION_CAPABILITIES
FRONTENDS = ("onnx", "tflite")
#: Compiled models a driver keeps in memory (each can make any number of infer requests).
MEMO = 16


def host_fingerprint(core: Any, device: str) -> str:
    """A short digest of what the device's compiled code depends on: the device's name,
    architecture and capabilities and, for the CPU, the host's instruction-set flags."""
    h = hashlib.blake2b(digest_size=6)
    for key in ("FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "OPTIMIZATION_CAPABILITIES"):
        try:
            h.update(repr(core.get_property(device, key)).encode())
        except Exception:  # a plugin without the property
            h.update(b"?")
    if device.split(".")[0] == "CPU":
        h.update(platform.machine().encode())
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")):  # x86, arm
                        h.update(line.encode())
                        break
        except OSError:
            h.update(platform.processor().encode())
    return h.hexdigest()


#: Why WHILE is declined (EXE-9: a loop past its timeout must be stopped, never hang the suite).
WHILE_REASON = ("OpenVINO cannot stop a running inference: InferRequest.cancel does not interrupt "
                "a Loop that has started, and a Loop reads no input that could change while it "
                "runs, so a WHILE that does not end would hang past the loop timeout (EXE-9)")


def _runs_a_loop(model: Model, sg: Any, op: Any, depth: int = 0) -> bool:
    """Whether ``op`` (of subgraph ``sg``) is a WHILE or an IF with a WHILE in a branch."""
    if op.type is OperationType.WHILE:
        return True
    if op.type is not OperationType.IF or depth > len(model.referenced):  # no endless recursion
        return False
    for i in op.inputs:
        o = sg.operands[i]
        if o.type is OperandType.SUBGRAPH and 0 <= o.location.offset < len(model.referenced):
            inner = model.referenced[o.location.offset]
            if any(_runs_a_loop(model, inner, x, depth + 1) for x in inner.operations):
                return True
    return False


def _strided_quantised_1x1_conv(graph: Any) -> str | None:
    """OpenVINO 2026.4's CPU plugin rewrites a quantised (DequantizeLinear -> Conv) 1x1
    convolution with a stride over 1 as a subsampling MaxPool plus a stride-1 convolution and
    gets the output shape wrong when the convolution is padded: it then writes past its
    buffers, corrupting the heap (a later, unrelated execution may crash). Declined rather
    than claimed: a corrupted process would change the verdicts of every test after it."""
    from onnx import helper

    producers = {out: node.op_type for node in graph.node for out in node.output}
    for node in graph.node:
        if node.op_type != "Conv" or producers.get(node.input[0]) != "DequantizeLinear":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if list(attrs.get("kernel_shape", [])) == [1, 1] and any(v > 1 for v in attrs.get("strides", [])) \
                and any(attrs.get("pads", [])):
            return ("OpenVINO miscompiles a quantised 1x1 convolution with a stride over 1 and padding "
                    "(a wrong output shape, then writes past its buffers and corrupts the heap)")
    return None


def _slice_at_run_time(graph: Any) -> str | None:
    """OpenVINO 2026.4's Slice with starts, ends, axes or steps that are not constants (the
    parameters of STRIDED_SLICE, SLICE or REVERSE given as model inputs) reads the wrong
    elements and, with run-time axes, crashed the process (SIGSEGV): declined."""
    constant = {t.name for t in graph.initializer}
    for node in graph.node:
        if all(i in constant or i == "" for i in node.input):
            constant.update(node.output)
        elif node.op_type == "Slice" and not all(i in constant or i == "" for i in node.input[1:]):
            return ("OpenVINO's Slice with starts, ends, axes or steps known only at run time reads "
                    "the wrong elements or crashes (SIGSEGV with run-time axes)")
    return None


class OpenVINOExecutable:
    """A compiled model and its infer request. ``positions[j]``: which model input feeds the
    compiled model's input ``j``. OpenVINO's frontends drop a graph input that nothing reads
    (a parameter given as a model input whose value the exporter took from the model's known
    shapes): the inputs are matched by name, never by position."""

    def __init__(self, compiled: Any, positions: list[int]) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.positions = positions
        self.n_outputs = len(compiled.outputs)

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        request = self.request
        request.infer({j: inputs[k] for j, k in enumerate(self.positions)})
        return [request.get_output_tensor(i).data for i in range(self.n_outputs)]


class OpenVINODriver(CompiledDriver):
    name = "openvino"
    device_type = DeviceType.CPU

    def __init__(self, device: str = "CPU", precision: str = "f32", threads: str = "1",
                 frontend: str = "onnx", cache: str = "on", state_dir: str | None = None) -> None:
        super().__init__(state_dir)
        import openvino as ov

        core = ov.Core()
        available = core.available_devices
        if device not in available:
            raise ValueError(f"openvino option device={device!r}: allowed values are {', '.join(available)}")
        if precision not in PRECISIONS:
            raise ValueError(f"openvino option precision={precision!r}: allowed values are "
                             f"{', '.join(PRECISIONS)}")
        try:
            capabilities = [str(c) for c in core.get_property(device, "OPTIMIZATION_CAPABILITIES")]
        except Exception:
            capabilities = []
        if precision != "f32" and PRECISIONS[precision] not in capabilities:
            raise ValueError(f"openvino option precision={precision!r}: device {device} does not "
                             f"compute {PRECISIONS[precision]} (its capabilities: "
                             f"{', '.join(capabilities) or 'none'})")
        try:
            n_threads = int(threads)
        except ValueError:
            n_threads = 0
        if n_threads < 1:
            raise ValueError(f"openvino option threads={threads!r}: allowed values are integers >= 1")
        if frontend not in FRONTENDS:
            raise ValueError(f"openvino option frontend={frontend!r}: allowed values are "
                             f"{', '.join(FRONTENDS)}")
        if frontend == "onnx":
            import onnx  # noqa: F401 - the exporter's, checked here rather than at the first model
        else:
            tflite = importlib.import_module("nncert.drivers.litert.export")
            if tflite.fb is None:
                raise ValueError("openvino option frontend='tflite' needs ai-edge-litert's flatbuffer schema")
        self._ov = ov
        self._core = core
        self.device = device
        self.precision = precision
        self.threads = n_threads
        self.frontend = frontend
        #: Where a relaxed model may run in float16 (ACC-1's relaxed tolerance).
        self.relaxed_precision = "f16" if "FP16" in capabilities else "f32"
        self.host = host_fingerprint(core, device)
        try:
            self._supported = set(core.get_property(device, "SUPPORTED_PROPERTIES"))
        except Exception:
            self._supported = set()
        self.runtime = f"openvino {ov.__version__.split('-')[0]}"
        self.compile_cache = compile_cache.from_option(cache, self.name, self.version_string())
        #: Compiled models by (artefact digest, precision), most recent last.
        self._memo: OrderedDict[tuple[bytes, str], Any] = OrderedDict()
        self._memo_lock = threading.Lock()

    def options_label(self) -> str:
        return (f"device={self.device}, precision={self.precision}, threads={self.threads}, "
                f"frontend={self.frontend}, host={self.host}")

    # -- what is compiled, and how --
    def precision_for(self, model: Model) -> str:
        """The inference precision ``model`` runs in: the option, except that a relaxed
        model under the default f32 takes the device's relaxed choice."""
        if self.precision == "f32" and model.relax_computation_float32_to_float16:
            return self.relaxed_precision
        return self.precision

    def properties(self, precision: str) -> dict[str, Any]:
        """The compile (and import) properties: the precision and every numerics-changing
        default pinned (only those the device knows)."""
        wanted = {
            "INFERENCE_PRECISION_HINT": precision,
            "EXECUTION_MODE_HINT": "ACCURACY" if precision == "f32" else "PERFORMANCE",
            "INFERENCE_NUM_THREADS": self.threads,
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            "ENABLE_CPU_PINNING": False,
            "CPU_DENORMALS_OPTIMIZATION": False,
            "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
        }
        return {k: v for k, v in wanted.items() if k in self._supported}

    # -- hooks --
    def operation_problem(self, model: Model, index: int) -> str | None:
        """OpenVINO's own reason (a WHILE, alone or inside an IF's branches), else the
        exporter's: its static rules, then, for ONNX, an export of the operation alone."""
        if _runs_a_loop(model, model.main, model.main.operations[index]):
            return WHILE_REASON
        if self.frontend == "tflite":
            from nncert.drivers.litert.export import operation_problem
            return operation_problem(model, index)
        from nncert.drivers.onnxruntime.export import exported_operation

        problem, proto = exported_operation(model, index)
        if problem or proto is None:
            return problem
        return _strided_quantised_1x1_conv(proto.graph) or _slice_at_run_time(proto.graph)

    def translate(self, model: Model) -> bytes:
        if self.frontend == "tflite":
            from nncert.drivers.litert.export import export as tflite_export
            return tflite_export(model)
        from nncert.drivers.onnxruntime.export import canonical_names, export

        proto = export(model, "qdq")
        problem = _strided_quantised_1x1_conv(proto.graph) or _slice_at_run_time(proto.graph)
        if problem:  # shapes known only now (dynamic shapes): declined by the probe
            raise Unmappable(problem)
        canonical_names(proto.graph)
        return proto.SerializeToString()

    def build_variant(self, model: Model) -> str:
        """The inference precision, for the compile cache's key: a relaxed model exports to the
        same bytes as its float32 twin, and may compile differently."""
        return f"precision={self.precision_for(model)}"

    def read(self, content: bytes) -> Any:
        """The OpenVINO model of translated bytes. The ONNX frontend reads them from memory;
        the TFLite frontend reads only a file named ``*.tflite``: written into a fresh private
        temporary directory (mode 0700, under TMPDIR), read and removed at once."""
        if self.frontend == "onnx":
            return self._core.read_model(io.BytesIO(content))
        with tempfile.TemporaryDirectory(prefix="nncert-openvino-") as directory:
            path = os.path.join(files.private_dir(directory), "model.tflite")
            files.write_atomic(path, content, mode=0o600, sync=False)
            return self._core.read_model(path)

    def build(self, content: bytes, model: Model) -> bytes:
        ov_model = self.read(content)
        compiled = self._core.compile_model(ov_model, self.device, self.properties(self.precision_for(model)))
        artefact = compiled.export_model().getvalue()
        self._remember(artefact, model, compiled)
        return artefact

    def load_built(self, artefact: bytes, model: Model) -> OpenVINOExecutable:
        """An executable of an exported compiled model: the one this driver compiled it from
        when it still has it (the probe and the test that follows it share one), else
        ``Core.import_model`` with the properties it was compiled with."""
        precision = self.precision_for(model)
        key = (hashlib.blake2b(artefact, digest_size=20).digest(), precision)
        with self._memo_lock:
            compiled = self._memo.get(key)
            if compiled is not None:
                self._memo.move_to_end(key)
        if compiled is None:
            compiled = self._core.import_model(artefact, self.device, self.properties(precision))
            self._remember(artefact, model, compiled)
        return OpenVINOExecutable(compiled, self._positions(compiled, model))

    def standalone_runner(self, wide: Model, content: bytes) -> StandaloneRunner:
        """The exported model read by OpenVINO's frontend and compiled with ``properties``; the
        inputs fed by the names the exporters give them, as ``_positions`` matches them."""
        name = "model.onnx" if self.frontend == "onnx" else "model.tflite"
        if self.frontend == "onnx":
            names = [f"n{k}" for k in range(len(wide.main.input_indexes))]
        else:
            names = [f"hal{i}" for i in wide.main.input_indexes]
        properties = self.properties(self.precision_for(wide))
        listed = "".join(f"\n        {k!r}: {v!r}," for k, v in properties.items())
        code = f"""def run(inputs):
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(HERE / "{name}")), {self.device!r}, {{{listed}
    }})
    # OpenVINO drops a model input that nothing reads: inputs are fed by name
    by_name = dict(zip({names!r}, inputs))
    feeds = {{port: by_name[n] for port in compiled.inputs for n in port.get_names() if n in by_name}}
    request = compiled.create_infer_request()
    request.infer(feeds)
    return [request.get_output_tensor(i).data for i in range(len(compiled.outputs))]
"""
        version = self._ov.__version__.split("-")[0]
        return StandaloneRunner({name: content}, code, [f"openvino=={version}"],
                                {"device": self.device, "frontend": self.frontend, **properties})

    def _positions(self, compiled: Any, model: Model) -> list[int]:
        """The model input of each compiled input, by the names the exporters give them
        (``canonical_names``' n0, n1, ... in input order; the LiteRT exporter's hal<operand>)."""
        if self.frontend == "onnx":
            names = {f"n{k}": k for k in range(len(model.main.input_indexes))}
        else:
            names = {f"hal{i}": k for k, i in enumerate(model.main.input_indexes)}
        positions = []
        for port in compiled.inputs:
            k = next((names[n] for n in port.get_names() if n in names), None)
            if k is None:
                raise RuntimeError(f"OpenVINO's compiled model has an input "
                                   f"{sorted(port.get_names())} that is no model input")
            positions.append(k)
        return positions

    def _remember(self, artefact: bytes, model: Model, compiled: Any) -> None:
        key = (hashlib.blake2b(artefact, digest_size=20).digest(), self.precision_for(model))
        with self._memo_lock:
            self._memo[key] = compiled
            self._memo.move_to_end(key)
            while len(self._memo) > MEMO:
                self._memo.popitem(last=False)


__all__ = ["OpenVINODriver"]
