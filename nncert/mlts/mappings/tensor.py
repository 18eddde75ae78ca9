"""TFLite importer mappings of the tensor family: FILL, RANK, MIRROR_PAD and REVERSE_V2
(PACK and BATCH_MATMUL, which the importer composed before these records existed, are in
``nncert.mlts.tflite_mappings`` and emit the records where NNAPI's rules allow).

- FILL: NNAPI's value is a scalar, so TFLite's value tensor must be a constant; dims that
  are not constant give an output shape known only at run time, which the importer
  declines (as for every such operator).
- RANK: the importer's shapes are static, so the rank is a constant (as SHAPE is); NNAPI's
  RANK gives an INT32 scalar where TFLite gives a 0-D tensor that later operators read.
- REVERSE_V2: NNAPI reverses one axis per REVERSE: one per listed axis.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import I32, Node, Unmapped


def _ints(n: Node, k: int, what: str) -> int:
    """Input ``k`` as TENSOR_INT32: a constant (narrowed from int64), or an int32 operand."""
    value = n.value(k)
    if value is not None:
        return n.g.const(I32, np.asarray(value, np.int64).astype(np.int32))
    x = n.x(k)
    if n.g.spec(x).type is not T.TENSOR_INT32:
        raise Unmapped(f"{what} of type {n.g.spec(x).type.name}")
    return x


def _fill(n: Node) -> None:
    value = n.value(1)
    if value is None:
        raise Unmapped("a non-constant fill value (NNAPI's FILL takes a scalar)")
    out = n.out_spec().type
    scalar = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16, T.TENSOR_INT32: T.INT32}.get(out)
    if scalar is None:
        raise Unmapped(f"FILL of {out.name} (NNAPI fills float16, float32 and int32)")
    v = np.asarray(value).reshape(-1)[0]
    n.emit(Op.FILL, [_ints(n, 0, "dims"), n.g.scalar(scalar, int(v) if scalar is T.INT32 else float(v))])


def _rank(n: Node) -> None:
    n.bind(0, n.g.ints([len(n.dims(0))]))


def _mirror_pad(n: Node) -> None:
    mode = int(n.opt("mode", 0))  # TFLite's MirrorPadMode: REFLECT 0, SYMMETRIC 1, as NNAPI's
    n.emit(Op.MIRROR_PAD, [n.x(0), _ints(n, 1, "paddings"), n.g.i32(mode)])


def _reverse_v2(n: Node) -> None:
    axes = n.ints(1, "the axes")
    x = n.x(0)
    rank = len(n.g.dims(x))
    if not axes:
        n.bind(0, n.g.reshape(x, n.g.dims(x), n.out_spec()))
        return
    for a in axes[:-1]:
        x = n.g.op(Op.REVERSE, [x, n.g.ints([a % rank])], [n.g.spec(x)])[0]
    n.emit(Op.REVERSE, [x, n.g.ints([axes[-1] % rank])])


MAPPINGS: dict[str, Callable[[Node], None]] = {
    "FILL": _fill,
    "RANK": _rank,
    "MIRROR_PAD": _mirror_pad,
    "REVERSE_V2": _reverse_v2,
}
