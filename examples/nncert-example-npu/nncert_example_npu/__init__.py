"""``example-npu``: a vendor's NPU driver for nncert, written as a vendor would write one.

The "NPU" is played by LiteRT's interpreter, so that the example runs anywhere nncert's
``litert`` extra is installed. The driver does what a driver for a real accelerator does:

- it declares what the hardware runs (``SUPPORTED_OPERATIONS`` on ``SUPPORTED_TYPES``) and
  declines everything else with a reason;
- it compiles a HAL model to the runtime's format (here a .tflite flatbuffer, with nncert's
  LiteRT exporter) and loads it through the runtime's own public API (the Interpreter);
- it takes options from the driver spec: ``example-npu:threads=2,xnnpack=off``.

nncert's ``CompiledDriver`` does the rest: validation, a probe that compiles each operation
alone before claiming it, float16 computed in float32, dynamic shapes, compilation caching,
measured capabilities, and (through ``Driver``) the asynchronous, fenced and burst paths.
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from nncert.drivers.compiled import CompiledDriver
from nncert.drivers.litert.export import export, operation_problem
from nncert.hal.model import Model
from nncert.hal.types import DeviceType, OperandType, OperationType

__version__ = "0.1.0"

Op = OperationType

#: The operations the NPU has units for: elementwise arithmetic, convolutions, pooling and
#: activations. Everything else is declined.
SUPPORTED_OPERATIONS = frozenset({
    Op.ADD, Op.SUB, Op.MUL, Op.MAXIMUM, Op.MINIMUM,
    Op.CONV_2D, Op.DEPTHWISE_CONV_2D,
    Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D,
    Op.RELU, Op.RELU1, Op.RELU6, Op.LOGISTIC, Op.TANH, Op.HARD_SWISH,
})

#: The data types it computes in (float16 too: CompiledDriver widens it to float32 before
#: operation_problem sees the model).
SUPPORTED_TYPES = frozenset({
    OperandType.TENSOR_FLOAT32, OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
})


class NpuExecutable:
    """One compiled model: what ``CompiledDriver`` runs (its ``Executable`` protocol)."""

    def __init__(self, content: bytes, threads: int, resolver: OpResolverType) -> None:
        self.interpreter = Interpreter(model_content=content, num_threads=threads,
                                       experimental_op_resolver_type=resolver)
        # The kernels check their types and parameters here: a probe that fails in this call
        # declines the operation, with LiteRT's message as the reason.
        self.interpreter.allocate_tensors()
        self.inputs = [d["index"] for d in self.interpreter.get_input_details()]
        self.outputs = [d["index"] for d in self.interpreter.get_output_details()]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        for index, array in zip(self.inputs, inputs, strict=True):
            self.interpreter.set_tensor(index, array)
        self.interpreter.invoke()
        return [self.interpreter.get_tensor(index) for index in self.outputs]


class ExampleNpuDriver(CompiledDriver):
    name = "example-npu"
    device_type = DeviceType.ACCELERATOR

    # Options arrive as strings from the spec; an option the signature lacks is a TypeError,
    # which nncert reports as a one-line error naming the spec.
    def __init__(self, threads: str = "1", xnnpack: str = "on", state_dir: str | None = None) -> None:
        super().__init__(state_dir)
        if not threads.isdigit() or int(threads) < 1:
            raise ValueError(f"example-npu: threads={threads!r} must be a positive integer")
        if xnnpack not in ("on", "off"):
            raise ValueError(f"example-npu: xnnpack={xnnpack!r} must be on or off")
        self.threads, self.xnnpack = int(threads), xnnpack
        self.resolver = (OpResolverType.AUTO if xnnpack == "on"
                         else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        self.runtime = f"ai-edge-litert {version('ai-edge-litert')}"

    def version_string(self) -> str:
        # Names everything that changes results: nncert keys its capability and compilation
        # caches on it.
        return f"example-npu {__version__} ({self.runtime}, threads={self.threads}, xnnpack={self.xnnpack})"

    def operation_problem(self, model: Model, index: int) -> str | None:
        op = model.main.operations[index]
        if op.type not in SUPPORTED_OPERATIONS:
            return f"the NPU has no {op.type.name} unit"
        data = model.main.operands[op.inputs[0]].type
        if data not in SUPPORTED_TYPES:
            return f"the NPU computes float32 and 8-bit quantised tensors, not {data.name}"
        # What the hardware has but the .tflite format cannot express (the exporter's reasons).
        return operation_problem(model, index)

    def translate(self, model: Model) -> bytes:
        return export(model)

    def load(self, content: bytes, model: Model) -> NpuExecutable:
        return NpuExecutable(content, self.threads, self.resolver)


__all__ = ["SUPPORTED_OPERATIONS", "SUPPORTED_TYPES", "ExampleNpuDriver"]
