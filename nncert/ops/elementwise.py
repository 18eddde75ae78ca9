"""Element-wise binary arithmetic: ADD, SUB, MUL, DIV (broadcasting, fused activation)."""

from __future__ import annotations

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version as V
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    broadcast_shape,
    broadcastable_dims,
    variants,
)

_BINARY = Signature(
    inputs=(Arg("input0", ranks=(1, 2, 3, 4)), Arg("input1", ranks=(1, 2, 3, 4)),
            Arg("act", T.INT32)),
    outputs=(Arg("output"),),
)
_DIV = Signature(
    inputs=(Arg("input0", ranks=(1, 2, 3, 4)), Arg("input1", ranks=(1, 2, 3, 4), domain="nonzero"),
            Arg("act", T.INT32)),
    outputs=(Arg("output"),),
)


def _binary_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    return [broadcast_shape(ctx.dims("input0"), ctx.dims("input1"))]


def _binary_sample(s: SampleContext) -> None:
    dims = s.dims(s.draw.int(1, 4))
    other = broadcastable_dims(s, dims)
    if s.draw.bool():
        dims, other = other, dims
    s.tensor("input0", dims)
    s.tensor("input1", other)


def _mul_check(ctx: OpContext) -> None:
    out = ctx.outputs[0]
    if out.type.is_quant:
        a, b = ctx.operand("input0"), ctx.operand("input1")
        if not out.scale > a.scale * b.scale:
            raise ShapeError(f"output scale {out.scale:g} must exceed input scales' product "
                             f"{a.scale * b.scale:g}")


def _floor_div(ctx: OpContext) -> list[np.ndarray]:
    a, b = ctx.value("input0"), ctx.value("input1")
    if ctx.variant.primary is T.TENSOR_INT32:
        if np.any(b == 0):
            raise ShapeError("integer division by zero")
        return [np.floor_divide(a.astype(np.int64), b).astype(np.int32)]  # NNAPI: floor division
    return [a / b]


def _binary(op: Op, fn, versions: dict[V, tuple[T, ...]], sig: Signature = _BINARY,
            check=None, doc: str = "") -> OpRecord:
    vs = [v for version, types in versions.items() for v in variants(version, *types)]
    kernel = fn if fn is _floor_div else (lambda ctx: [fn(ctx.value("input0"), ctx.value("input1"))])
    return OpRecord(op, (sig,), tuple(vs), kernel, _binary_shape, _binary_sample,
                    criterion="medium", activation="act", check=check, doc=doc)


_Q8 = (T.TENSOR_QUANT8_ASYMM,)
RECORDS = [
    _binary(Op.ADD, np.add, {V.V1_0: (T.TENSOR_FLOAT32, *_Q8), V.V1_2: (T.TENSOR_FLOAT16,),
                             V.V1_3: (T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32)},
            doc="input0 + input1"),
    _binary(Op.MUL, np.multiply, {V.V1_0: (T.TENSOR_FLOAT32, *_Q8), V.V1_2: (T.TENSOR_FLOAT16,),
                                  V.V1_3: (T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32)},
            check=_mul_check, doc="input0 * input1"),
    _binary(Op.SUB, np.subtract, {V.V1_1: (T.TENSOR_FLOAT32,), V.V1_2: (T.TENSOR_FLOAT16, *_Q8),
                                  V.V1_3: (T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32)},
            doc="input0 - input1"),
    _binary(Op.DIV, _floor_div, {V.V1_1: (T.TENSOR_FLOAT32,), V.V1_2: (T.TENSOR_FLOAT16,),
                                 V.V1_3: (T.TENSOR_INT32,)},
            sig=_DIV, doc="input0 / input1 (floor division for TENSOR_INT32)"),
]
