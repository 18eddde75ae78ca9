"""LiteRT mappings of the tensor family: FILL, RANK, BATCH_MATMUL, PACK, MIRROR_PAD and
REVERSE, each one TFLite builtin (FILL, RANK, BATCH_MATMUL, PACK, MIRROR_PAD, REVERSE_V2).

Declined: int32 BATCH_MATMUL (TFLite's kernel has float32, int8 and int16 cases only).
Float16 variants are declined by the exporter as a whole (no float16 tensors).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import Node, fb
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op


def _fill(n: Node) -> None:
    g = n.g
    out = n.outputs[0]
    dtype = np.int32 if out.type is T.TENSOR_INT32 else np.float32
    g.op("FILL", [n.t("dims"), g.const(n.scalar("value"), dtype)], [n.out()])


def _rank(n: Node) -> None:
    """TFLite's RANK gives a 0-D int32 tensor: it becomes the HAL INT32 scalar output (the
    exporter maps tensors only, so the output tensor is made here)."""
    g = n.g
    idx = n.op.outputs[0]
    out = g.tensor((), "INT32", name=f"hal{idx}")
    n.ex._tensors[idx] = out  # the exporter's operand -> tensor table
    g.op("RANK", [n.t("input")], [out])


def _batch_matmul(n: Node) -> None:
    if n.outputs[0].type is T.TENSOR_INT32:
        raise Unmappable("TFLite's BATCH_MATMUL has no int32 kernel (float32, int8, int16 only)")
    n.g.op("BATCH_MATMUL", [n.t("input0"), n.t("input1")], [n.out()], "BatchMatMul",
           adjX=bool(n.scalar("adj_x")), adjY=bool(n.scalar("adj_y")))


def _pack(n: Node) -> None:
    ins = n.ts("input")
    n.g.op("PACK", ins, [n.out()], "Pack", valuesCount=len(ins), axis=int(n.scalar("axis")))


def _mirror_pad(n: Node) -> None:
    mode = int(n.scalar("mode"))
    n.g.op("MIRROR_PAD", [n.t("input"), n.t("paddings")], [n.out()], "MirrorPad",
           mode=fb.MirrorPadMode.REFLECT if mode == 0 else fb.MirrorPadMode.SYMMETRIC)


def _reverse(n: Node) -> None:
    n.g.op("REVERSE_V2", [n.t("input"), n.t("axis")], [n.out()])


MAPPINGS: dict[Op, Callable[[Node], None]] = {
    Op.FILL: _fill,
    Op.RANK: _rank,
    Op.BATCH_MATMUL: _batch_matmul,
    Op.PACK: _pack,
    Op.MIRROR_PAD: _mirror_pad,
    Op.REVERSE: _reverse,
}
