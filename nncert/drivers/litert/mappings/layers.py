"""LiteRT mappings of the layers family: POW and SPLIT are TFLite builtins; CHANNEL_SHUFFLE is
a RESHAPE that splits the channel axis into (groups, channels / groups), a TRANSPOSE of the
two and a RESHAPE back (stored values moved, so exact); INSTANCE_NORMALIZATION (float) is
composed from MEAN over height and width, SUB, MUL, MEAN, ADD epsilon, RSQRT, MUL, MUL gamma
and ADD beta (NHWC; an NCHW operation is transposed by the Node)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.drivers.litert.export import Node, _direct
from nncert.hal.types import OperationType as Op


def _channel_shuffle(n: Node) -> None:
    g = n.g
    x = n.t("input")
    shape = list(n.in_shape("input"))
    axis = int(n.scalar("axis")) % len(shape)
    groups = int(n.scalar("num_groups"))
    split = [*shape[:axis], groups, shape[axis] // groups, *shape[axis + 1:]]
    y = g.unary("RESHAPE", x, split, extra=[g.const(split)])
    perm = list(range(len(split)))
    perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
    y = g.transpose(y, perm)
    g.op("RESHAPE", [y, g.const(shape)], [n.out()])


def _instance_normalization(n: Node) -> None:
    g = n.g
    x = n.t("input")
    b, _, _, c = n.in_shape("input")
    axes = g.const([1, 2])
    plane = [b, 1, 1, c]

    def scalar(v: float) -> int:
        return g.const(np.float32(v), np.float32)

    mean = g.unary("MEAN", x, plane, extra=[axes], options="Reducer", keepDims=True)
    d = g.unary("SUB", x, extra=[mean], options="Sub")
    var = g.unary("MEAN", g.unary("MUL", d, extra=[d], options="Mul"), plane, extra=[axes],
                  options="Reducer", keepDims=True)
    inv = g.unary("RSQRT", g.unary("ADD", var, extra=[scalar(n.scalar("epsilon"))], options="Add"))
    y = g.unary("MUL", d, extra=[inv], options="Mul")
    y = g.unary("MUL", y, extra=[scalar(n.scalar("gamma"))], options="Mul")
    g.op("ADD", [y, scalar(n.scalar("beta"))], [n.out()], "Add")


def _split(n: Node) -> None:
    parts = int(n.scalar("num_splits"))
    axis = int(n.scalar("axis"))
    n.g.op("SPLIT", [n.g.const(np.int32(axis)), n.t("input")], [n.out(k) for k in range(parts)],
           "Split", numSplits=parts)


MAPPINGS: dict[Op, Callable[[Node], None]] = {
    Op.CHANNEL_SHUFFLE: _channel_shuffle,
    Op.INSTANCE_NORMALIZATION: _instance_normalization,
    Op.POW: _direct("POW", names=("base", "exponent")),
    Op.SPLIT: _split,
}
