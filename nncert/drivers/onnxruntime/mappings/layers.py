"""ONNX Runtime mappings of the layers family: POW is Pow; SPLIT is Split with equal sizes
(stored values); INSTANCE_NORMALIZATION is InstanceNormalization (NCHW, gamma and beta
repeated per channel); CHANNEL_SHUFFLE is a Reshape splitting the channel axis into
(groups, channels / groups), a Transpose of the two and a Reshape back (stored values)."""

from __future__ import annotations

import numpy as np

from nncert.drivers.onnxruntime.export import Emit, Mapping
from nncert.drivers.onnxruntime.mappings.lookup import nodes
from nncert.hal.types import OperationType as Op


def _channel_shuffle(e: Emit) -> None:
    dims = list(e.dims("input"))
    axis = int(e.value("axis")) % len(dims)
    groups = int(e.value("num_groups"))
    split = (*dims[:axis], groups, dims[axis] // groups, *dims[axis + 1:])
    perm = list(range(len(split)))
    perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
    y = e.node("Transpose", [e.reshape(e.val("input"), split)], perm=perm)
    e.emit(e.reshape(y, tuple(dims)))


def _instance_normalization(e: Emit) -> None:
    c = e.dims("input")[3]
    scale = e.const(np.full(c, float(e.value("gamma")), np.float32), np.float32)
    bias = e.const(np.full(c, float(e.value("beta")), np.float32), np.float32)
    y = e.node("InstanceNormalization", [e.val("input", "nchw"), scale, bias],
               epsilon=float(e.value("epsilon")))
    e.emit(y, "nchw")


def _pow(e: Emit) -> None:
    e.emit(e.node("Pow", [e.val("base"), e.val("exponent")]))


def _split(e: Emit) -> None:
    dims = e.dims("input")
    axis = int(e.value("axis")) % len(dims)
    parts = int(e.value("num_splits"))
    sizes = e.const([dims[axis] // parts] * parts)
    for k, y in enumerate(nodes(e, "Split", [e.val("input"), sizes], parts, axis=axis)):
        e.emit(y, k=k)


MAPPINGS: dict[Op, Mapping] = {
    Op.CHANNEL_SHUFFLE: Mapping(_channel_shuffle, move=True),
    Op.INSTANCE_NORMALIZATION: Mapping(_instance_normalization),
    Op.POW: Mapping(_pow),
    Op.SPLIT: Mapping(_split, move=True),
}
