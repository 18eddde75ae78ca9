"""The ONNX Runtime driver: HAL models exported to ONNX (``export.py``) and run by an
``onnxruntime.InferenceSession``.

Options (strings, from a spec such as ``onnxruntime:opt_level=basic,threads=2``):

- ``provider``: an execution provider onnxruntime offers (default CPUExecutionProvider);
- ``opt_level``: graph optimisation level, disable | basic | extended | layout | all;
- ``threads``: intra-op threads (default 1);
- ``quant``: how quantised operations are expressed: ``qdq`` (DequantizeLinear -> float
  operation -> QuantizeLinear, which ORT fuses into quantised kernels at its higher levels)
  or ``qlinear`` (QLinearConv and the com.microsoft QLinear* kernels where they exist, QDQ
  otherwise).

IF and WHILE are ONNX If and Loop (see ``export.py``); a model with loops runs with
``RunOptions.terminate`` set at the loop timeout (counted from the start of the execution)
or the deadline, whichever comes first, and then fails with MISSED_DEADLINE_TRANSIENT
(EXE-9, EXE-10).

onnx and onnxruntime are imported when a driver is made, never by ``import nncert.drivers``.
Sessions are quiet (warnings off) and deterministic (``use_deterministic_compute``, one
inter-op thread, sequential execution).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from nncert.drivers.compiled import CompiledDriver, StandaloneRunner
from nncert.hal.errors import HalError
from nncert.hal.model import Model
from nncert.hal.types import DeviceType, ErrorStatus, OperationType

OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}
QUANT_MODES = ("qdq", "qlinear")


class OrtExecutable:
    def __init__(self, session, input_names: list[str], loops: bool = False) -> None:
        self.session = session
        self.input_names = input_names
        self.loops = loops  # the model has WHILE loops (ONNX Loop): run_until stops them

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, dict(zip(self.input_names, inputs, strict=True)))

    def run_until(self, inputs: list[np.ndarray], stop_at: int) -> list[np.ndarray]:
        """``run``, for a model with loops terminated at time.monotonic_ns() ``stop_at`` (ORT's
        RunOptions.terminate, which its executor and Loop check between nodes): the loop
        timeout bounds the whole execution of a model with loops, as in the LiteRT driver."""
        if not self.loops:
            return self.run(inputs)
        import onnxruntime as ort

        options = ort.RunOptions()
        options.log_severity_level = 4  # the termination is reported here, not logged
        timer = threading.Timer(max(0, stop_at - time.monotonic_ns()) / 1e9,
                                lambda: setattr(options, "terminate", True))
        timer.start()
        try:
            return self.session.run(None, dict(zip(self.input_names, inputs, strict=True)), options)
        except Exception:
            if options.terminate:
                raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                               "onnxruntime: the execution of a model with WHILE loops was still "
                               "running at the loop timeout or the deadline (terminated)") from None
            raise
        finally:
            timer.cancel()


class OnnxRuntimeDriver(CompiledDriver):
    name = "onnxruntime"
    device_type = DeviceType.CPU

    def __init__(self, provider: str = "CPUExecutionProvider", opt_level: str = "all",
                 threads: str = "1", quant: str = "qdq", state_dir: str | None = None) -> None:
        super().__init__(state_dir)
        import onnxruntime as ort

        available = ort.get_available_providers()
        if provider not in available:
            raise ValueError(f"onnxruntime option provider={provider!r}: allowed values are "
                             f"{', '.join(available)}")
        levels = {k: getattr(ort.GraphOptimizationLevel, v) for k, v in OPT_LEVELS.items()
                  if hasattr(ort.GraphOptimizationLevel, v)}
        if opt_level not in levels:
            raise ValueError(f"onnxruntime option opt_level={opt_level!r}: allowed values are "
                             f"{', '.join(levels)}")
        try:
            n_threads = int(threads)
        except ValueError:
            n_threads = -1
        if n_threads < 1:
            raise ValueError(f"onnxruntime option threads={threads!r}: allowed values are "
                             f"integers >= 1")
        if quant not in QUANT_MODES:
            raise ValueError(f"onnxruntime option quant={quant!r}: allowed values are "
                             f"{', '.join(QUANT_MODES)}")
        ort.set_default_logger_severity(3)  # kernels log through the default logger
        self._ort = ort
        self.provider = provider
        self.opt_level = opt_level
        self._level = levels[opt_level]
        self.threads = n_threads
        self.quant = quant
        self.runtime = f"onnxruntime {ort.__version__}"

    def options_label(self) -> str:
        return (f"provider={self.provider}, opt_level={self.opt_level}, threads={self.threads}, "
                f"quant={self.quant}")

    def operation_problem(self, model: Model, index: int) -> str | None:
        """The exporter's reason for the operation alone (its type, a parameter that is not a
        constant, a combination ONNX cannot express), or None."""
        from nncert.drivers.onnxruntime.export import exported_operation

        return exported_operation(model, index, self.quant)[0]

    def session_options(self):
        ort = self._ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = self._level
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.use_deterministic_compute = True
        return so

    def translate(self, model: Model) -> bytes:
        from nncert.drivers.onnxruntime.export import export

        return export(model, self.quant).SerializeToString()

    def load(self, content: bytes, model: Model) -> OrtExecutable:
        session = self._ort.InferenceSession(content, self.session_options(), providers=[self.provider])
        loops = any(op.type is OperationType.WHILE for sg in model.referenced for op in sg.operations) or \
            any(op.type is OperationType.WHILE for op in model.main.operations)
        return OrtExecutable(session, [i.name for i in session.get_inputs()], loops)

    def standalone_runner(self, wide: Model, content: bytes) -> StandaloneRunner:
        """The ONNX model as exported, in an ``InferenceSession`` with ``session_options``."""
        options = {"graph_optimization_level": f"ort.GraphOptimizationLevel.{OPT_LEVELS[self.opt_level]}",
                   "intra_op_num_threads": self.threads, "inter_op_num_threads": 1,
                   "execution_mode": "ort.ExecutionMode.ORT_SEQUENTIAL", "use_deterministic_compute": True}
        settings = "".join(f"\n    options.{k} = {v}" for k, v in options.items())
        code = f"""def run(inputs):
    import onnxruntime as ort

    options = ort.SessionOptions(){settings}
    session = ort.InferenceSession(str(HERE / "model.onnx"), options, providers=[{self.provider!r}])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))
"""
        return StandaloneRunner({"model.onnx": content}, code,
                                [f"onnxruntime=={self._ort.__version__}"],
                                {"provider": self.provider, "quant": self.quant, **options})


__all__ = ["OnnxRuntimeDriver"]
