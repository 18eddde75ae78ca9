"""ONNX mappings of the tensor family (compositions exact: values are only copied, or, for
BATCH_MATMUL, multiplied in the real domain):

- FILL: ConstantOfShape of the dims (Cast to int64), its value attribute the scalar;
- RANK: Size of Shape, Cast to int32 (a rank-0 tensor for the HAL INT32 scalar);
- BATCH_MATMUL: MatMul, each input Transposed in its last two dimensions first where its
  adj flag says (quantised: DequantizeLinear / QuantizeLinear around it);
- PACK: each input Unsqueezed at axis, then Concat on axis (on stored integers: the
  inputs share the output's scale and zero point);
- MIRROR_PAD: REFLECT is Pad mode "reflect"; SYMMETRIC, which ONNX's Pad lacks (its
  "edge" repeats the border element only once), is per padded axis a Concat of the head
  reversed (Slice with step -1), the tensor and the tail reversed;
- REVERSE: Slice of the axis from its end with step -1.
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.onnxruntime.export import Emit, Mapping
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op

#: A Slice end beyond the start of any axis (ONNX clamps it to "before element 0").
_BEFORE_START = -(2 ** 62)


def _fill(e: Emit) -> None:
    from onnx import numpy_helper

    dtype = np.int32 if e.out.type is T.TENSOR_INT32 else np.float32
    value = numpy_helper.from_array(np.array([e.value("value")], dtype))
    e.emit(e.node("ConstantOfShape", [e.int64("dims")], value=value))


def _rank(e: Emit) -> None:
    size = e.node("Size", [e.node("Shape", [e.raw("input")])])
    e.emit(e.node("Cast", [size], to=6))  # TensorProto.INT32


def _batch_matmul(e: Emit) -> None:
    xs = []
    for name, adj in (("input0", "adj_x"), ("input1", "adj_y")):
        # Transposed as stored, then dequantised: ORT's QDQ rewriting of a Transpose after a
        # DequantizeLinear gives an int8 QuantizeLinear a uint8 zero point (fails to load).
        x = e.raw(name)
        if bool(e.value(adj, False)):
            rank = len(e.dims(name))
            x = e.node("Transpose", [x], perm=[*range(rank - 2), rank - 1, rank - 2])
        xs.append(e.g.dequantize(x, e.operand(name)))
    e.emit(e.node("MatMul", xs))


def _pack(e: Emit) -> None:
    axis = e.const([int(e.value("axis"))])
    xs = [e.node("Unsqueeze", [e.val("input", i=i), axis]) for i in range(len(e.indexes("input")))]
    e.emit(e.node("Concat", xs, axis=int(e.value("axis"))))


def _mirror_pad(e: Emit) -> None:
    x = e.val("input")
    if int(e.value("mode")) == 0:  # REFLECT: ONNX's "reflect"
        pads = e.node("Transpose", [e.int64("paddings")], perm=[1, 0])
        e.emit(e.node("Pad", [x, e.reshape(pads, (-1,))], mode="reflect"))
        return
    pads = np.asarray(e.ints("paddings")).reshape(-1, 2)
    for axis, (d, (head, tail)) in enumerate(zip(e.dims("input"), pads, strict=True)):
        parts = []
        ax = e.const([axis])
        if head:  # elements head-1 .. 0
            parts.append(e.node("Slice", [x, e.const([head - 1]), e.const([_BEFORE_START]), ax,
                                          e.const([-1])]))
        parts.append(x)
        if tail:  # elements d-1 .. d-tail
            end = d - tail - 1 if d - tail - 1 >= 0 else _BEFORE_START
            parts.append(e.node("Slice", [x, e.const([d - 1]), e.const([end]), ax, e.const([-1])]))
        if len(parts) > 1:
            x = e.node("Concat", parts, axis=axis)
    e.emit(x)


def _reverse(e: Emit) -> None:
    e.emit(e.node("Slice", [e.val("input"), e.const([-1]), e.const([_BEFORE_START]),
                            e.int64("axis"), e.const([-1])]))


MAPPINGS: dict[Op, Mapping] = {
    Op.FILL: Mapping(_fill),
    Op.RANK: Mapping(_rank),
    Op.BATCH_MATMUL: Mapping(_batch_matmul),
    Op.PACK: Mapping(_pack, move=True),
    Op.MIRROR_PAD: Mapping(_mirror_pad, move=True),
    Op.REVERSE: Mapping(_reverse, move=True),
}
