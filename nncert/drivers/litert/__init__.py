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
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from nncert.drivers.compiled import CompiledDriver, Unmappable
from nncert.drivers.litert.export import export, operation_problem
from nncert.hal.model import Model
from nncert.hal.types import DeviceType

KERNELS = ("xnnpack", "builtin", "ref")


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
    def __init__(self, interpreter: Any, output_dims: list[tuple[int, ...]]) -> None:
        self.interp = interpreter
        self.inputs = [d["index"] for d in interpreter.get_input_details()]
        self.outputs = [d["index"] for d in interpreter.get_output_details()]
        self.output_dims = output_dims
        self._sizes = [int(np.prod(d)) for d in output_dims]
        # Views of the interpreter's output buffers (no copy; valid until the next invoke).
        self._views = [interpreter.tensor(i) for i in self.outputs]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for idx, a in zip(self.inputs, inputs, strict=True):
            self.interp.set_tensor(idx, a)
        self.interp.invoke()
        outs = []
        for view, dims, size in zip(self._views, self.output_dims, self._sizes, strict=True):
            a = view()
            # TFLite gives rank 0 where NNAPI has [1] (a reduction over every axis)
            outs.append(a.reshape(dims) if a.size == size else a)
        return outs


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
        return operation_problem(model, index)

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
        return LiteRTExecutable(interp, [main.operands[i].dimensions for i in main.output_indexes])


__all__ = ["LiteRTDriver", "Unmappable", "export"]
