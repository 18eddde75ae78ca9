"""The ``litert`` driver: HAL models exported to .tflite (``export.py``) and run by the LiteRT
(TFLite) CPU interpreter.

Options (strings, from the spec ``litert:kernels=ref,threads=2``):

- ``kernels``: ``xnnpack`` (default: builtin kernels with the default XNNPACK delegate),
  ``builtin`` (builtin optimised kernels, no default delegate) or ``ref`` (the builtin
  reference kernels);
- ``threads``: the interpreter's thread count (a positive integer);
- ``delegate``: path of an external delegate shared object (``load_delegate``), with
  ``delegate_options`` as ``key:value;key:value``.

The runtime is ``ai_edge_litert`` (ai-edge-litert); when that is not importable the driver
falls back to ``tflite_runtime`` (tflite-runtime; version 2.14 needs numpy < 2). Both are
imported lazily, when a driver is created, so that ``import nncert.drivers`` never needs
them. The exporter uses ai-edge-litert's flatbuffer schema module.

Float16 operands are computed in float32 (the ``CompiledDriver`` strategy); NCHW operations
are wrapped in TRANSPOSE operators; see ``export.py`` for the compositions used where TFLite
has no direct equivalent, and ``expectations.toml`` for known LiteRT discrepancies.

IF and WHILE are TFLite IF and WHILE. LiteRT has no way to cancel a run from Python, so a
model with WHILE loops runs with a watcher thread (``LiteRTExecutable.run_until``): at the
loop timeout, counted from the start of the execution, or at the deadline if it comes first,
it sets a stop flag that every loop condition reads, the loops end at their next condition
and the execution fails with MISSED_DEADLINE_TRANSIENT (EXE-9, EXE-10). The loop timeout
thus bounds the whole execution of a model with loops: no loop runs longer, and one that
starts late gets less.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from nncert.drivers.compiled import CompiledDriver, StandaloneRunner, Unmappable, installed_version
from nncert.drivers.litert.export import export, operation_problem, stop_flags
from nncert.hal.errors import HalError
from nncert.hal.model import Model, Operation
from nncert.hal.types import DeviceType, ErrorStatus, OperandType, OperationType

KERNELS = ("xnnpack", "builtin", "ref")

#: The reference quantised SOFTMAX sums exp(x - max) in fixed point with 12 integer bits and
#: divides by the sum with a rounding shift of 23 + (bits of the sum above 1); from a sum of 512
#: on (512 equal values along the axis) the shift passes 31 and a gemmlowp assertion aborts
#: the process (SIGABRT at invoke; 511 equal values run). Every input of a longer axis can
#: reach it, whatever its scale and beta, so such a SOFTMAX is declined up front: the support
#: probe's sample values may not (DRV-2).
REF_SOFTMAX_MAX_AXIS = 511
_QUANT8 = (OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED)


def _reference_kernel_problem(model: Model, op: Operation) -> str | None:
    """Why the reference kernels (kernels=ref) cannot be trusted with ``op`` (an IF or WHILE:
    with any operation of the model's subgraphs), beyond what the exporter declines."""
    graphs = [(model.main, op)]
    if op.type in (OperationType.IF, OperationType.WHILE):
        graphs = [(sg, o) for sg in model.referenced for o in sg.operations]
    for sg, o in graphs:
        if o.type is not OperationType.SOFTMAX:
            continue
        x = sg.operands[o.inputs[0]]
        if x.type not in _QUANT8 or not x.dimensions:
            continue
        axis = model.constant_value(sg.operands[o.inputs[2]]) if len(o.inputs) > 2 else None
        axis = -1 if axis is None else int(axis)
        if -len(x.dimensions) <= axis < len(x.dimensions) and \
                x.dimensions[axis] > REF_SOFTMAX_MAX_AXIS:
            return (f"LiteRT's reference quantised SOFTMAX aborts the process (SIGABRT) when the sum "
                    f"of exponentials along the axis reaches 512, e.g. {REF_SOFTMAX_MAX_AXIS + 1} equal "
                    f"values (its output shift passes 31): an axis of {x.dimensions[axis]} is declined "
                    f"with kernels=ref")
    return None


def _runtime() -> tuple[Any, str]:
    """(interpreter module, runtime description)."""
    try:
        from importlib.metadata import version

        from ai_edge_litert import interpreter as mod
        try:
            v = version("ai-edge-litert")
        except Exception:  # pragma: no cover
            v = "?"
        return mod, f"ai-edge-litert {v}"
    except ImportError:
        try:
            from tflite_runtime import interpreter as mod  # type: ignore[no-redef]
        except ImportError as e:
            raise ImportError("the litert driver needs ai-edge-litert (or tflite-runtime, "
                              "which at 2.14 needs numpy < 2)") from e
        return mod, f"tflite-runtime {getattr(mod, '__version__', '?')}"


class LiteRTExecutable:
    def __init__(self, interpreter: Any, output_dims: list[tuple[int, ...]],
                 loops: list[tuple[int, int]] = ()) -> None:
        self.interp = interpreter
        self.inputs = [d["index"] for d in interpreter.get_input_details()]
        self.outputs = [d["index"] for d in interpreter.get_output_details()]
        self.output_dims = output_dims
        self._sizes = [int(np.prod(d)) for d in output_dims]
        # Views of the interpreter's output buffers (no copy; valid until the next invoke).
        self._views = [interpreter.tensor(i) for i in self.outputs]
        #: (subgraph, stop tensor) of each WHILE condition (export.stop_flags)
        self.loops = list(loops)

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for idx, a in zip(self.inputs, inputs, strict=True):
            self.interp.set_tensor(idx, a)
        self.interp.invoke()
        return self._results()

    def run_until(self, inputs: list[np.ndarray], stop_at: int) -> list[np.ndarray]:
        """``run``, with every WHILE loop stopped at time.monotonic_ns() ``stop_at``: from then
        until the run ends, a watcher thread keeps setting the stop flag that each loop
        condition reads (export._stoppable; LiteRT releases the GIL while it runs, and resets
        a subgraph's variables when it reallocates it, as at the start of each loop), so each
        loop ends at its next condition; the execution then fails with
        MISSED_DEADLINE_TRANSIENT: a model with loops is bounded as a whole, from the start
        of its execution."""
        if not self.loops:
            return self.run(inputs)
        interp = self.interp
        for idx, a in zip(self.inputs, inputs, strict=True):
            interp.set_tensor(idx, a)
        interp._ensure_safe()  # as invoke() does, before the watcher may touch the wrapper
        done = threading.Event()
        fired: list[bool] = []

        def watch() -> None:
            if done.wait(max(0, stop_at - time.monotonic_ns()) / 1e9):
                return
            fired.append(True)
            while True:
                for sg, stop in self.loops:
                    try:
                        interp._interpreter.SetTensor(stop, _TRUE, sg)
                    except ValueError:  # released between two loops
                        pass
                if done.wait(STOP_PERIOD_S):
                    return

        watcher = threading.Thread(target=watch, name="litert-loop-stop", daemon=True)
        watcher.start()
        try:
            interp._interpreter.Invoke()
        finally:
            done.set()
            watcher.join()
        if fired:
            for sg, stop in self.loops:
                try:
                    interp._interpreter.SetTensor(stop, _FALSE, sg)
                except ValueError:
                    pass
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                           "litert: the execution of a model with WHILE loops was still running at "
                           "the loop timeout or the deadline (its loops were stopped)")
        return self._results()

    def _results(self) -> list[np.ndarray]:
        outs = []
        for view, dims, size in zip(self._views, self.output_dims, self._sizes, strict=True):
            a = view()
            # TFLite gives rank 0 where NNAPI has [1] (a reduction over every axis)
            outs.append(a.reshape(dims) if a.size == size else a)
        return outs


_TRUE, _FALSE = np.array([True]), np.array([False])
#: How often the watcher sets the stop flags again once they are due (a loop that starts
#: after that finds its flag cleared; it is stopped within this much).
STOP_PERIOD_S = 1e-4


class LiteRTDriver(CompiledDriver):
    name = "litert"
    device_type = DeviceType.CPU

    def __init__(self, kernels: str = "xnnpack", threads: str = "1", delegate: str | None = None,
                 delegate_options: str | None = None, state_dir: str | None = None) -> None:
        super().__init__(state_dir)
        if kernels not in KERNELS:
            raise ValueError(f"litert: kernels={kernels!r} is not one of {', '.join(KERNELS)}")
        try:
            n_threads = int(threads)
            if n_threads < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"litert: threads={threads!r} must be a positive integer") from None
        if delegate_options and not delegate:
            raise ValueError("litert: delegate_options needs delegate=PATH")
        opts: dict[str, str] = {}
        for item in filter(None, (delegate_options or "").split(";")):
            key, sep, value = item.partition(":")
            if not sep or not key:
                raise ValueError(f"litert: delegate_options item {item!r} is not key:value")
            opts[key.strip()] = value.strip()
        self.kernels, self.threads = kernels, n_threads
        self.delegate_path, self.delegate_options = delegate, opts
        self._mod, self.runtime = _runtime()
        resolver = self._mod.OpResolverType
        self._resolver = {"xnnpack": resolver.AUTO,
                          "builtin": resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                          "ref": resolver.BUILTIN_REF}[kernels]
        self._delegate = None
        if delegate:
            if not os.path.isfile(delegate):  # before LiteRT's loader, whose failure is noisy
                raise ValueError(f"litert: delegate={delegate!r} cannot be loaded: no such file")
            try:
                self._delegate = self._mod.load_delegate(delegate, opts)
            except (ValueError, OSError) as e:
                raise ValueError(f"litert: delegate={delegate!r} cannot be loaded: {e}") from None

    def options_label(self) -> str:
        label = f"kernels={self.kernels}, threads={self.threads}"
        if self.delegate_path:
            label += f", delegate={self.delegate_path}"
        return label

    def operation_problem(self, model: Model, index: int) -> str | None:
        problem = operation_problem(model, index)
        if problem is None and self.kernels == "ref":
            problem = _reference_kernel_problem(model, model.main.operations[index])
        return problem

    def translate(self, model: Model) -> bytes:
        return export(model)

    def load(self, content: bytes, model: Model) -> LiteRTExecutable:
        kwargs: dict[str, Any] = {"model_content": content, "num_threads": self.threads,
                                  "experimental_op_resolver_type": self._resolver}
        if self._delegate is not None:
            kwargs["experimental_delegates"] = [self._delegate]
        interp = self._mod.Interpreter(**kwargs)
        interp.allocate_tensors()  # kernels' Prepare: type and parameter checks happen here
        main = model.main
        return LiteRTExecutable(interp, [main.operands[i].dimensions for i in main.output_indexes],
                                stop_flags(content))

    def standalone_runner(self, wide: Model, content: bytes) -> StandaloneRunner:
        """The .tflite as exported, run by ``Interpreter`` with this driver's kernels, threads
        and delegate."""
        resolver = {"xnnpack": "AUTO", "builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "ref": "BUILTIN_REF"}
        options = {"num_threads": self.threads,
                   "experimental_op_resolver_type": f"OpResolverType.{resolver[self.kernels]}"}
        if self.delegate_path:
            delegate = f"load_delegate({self.delegate_path!r}, {self.delegate_options!r})"
            options["experimental_delegates"] = f"[{delegate}]"
        arguments = "".join(f",\n        {k}={v}" for k, v in options.items())
        names = "Interpreter, OpResolverType" + (", load_delegate" if self.delegate_path else "")
        module = "ai_edge_litert" if self.runtime.startswith("ai-edge-litert") else "tflite_runtime"
        code = f"""def run(inputs):
    from {module}.interpreter import {names}

    interpreter = Interpreter(
        model_path=str(HERE / "model.tflite"){arguments})
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    # TFLite gives rank 0 where the model's output has shape [1]
    return [a.reshape(o["shape"]) if a.size == np.prod(o["shape"]) else a
            for a, o in zip(outputs, CASE["outputs"])]
"""
        distribution = "ai-edge-litert" if module == "ai_edge_litert" else "tflite-runtime"
        return StandaloneRunner({"model.tflite": content}, code,
                                [f"{distribution}=={installed_version(distribution)}"],
                                {"kernels": self.kernels, **options})


__all__ = ["LiteRTDriver", "Unmappable", "export"]
