"""LiteRT mappings of the lookup family: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION and
TOPK_V2 are TFLite builtins of the same names.

- LSH_PROJECTION: NNAPI SPARSE (3) is TFLite SPARSE (which adds k * 2**bits for hash function
  k); NNAPI SPARSE_DEPRECATED (1) is TFLite SPARSE minus those offsets (an int32 SUB); DENSE is
  DENSE. Without a weight the operator has two inputs. (A float16 input reaches the exporter
  widened to float32, whose bytes hash differently: see the expectations file.)
- TOPK_V2: TFLite puts equal values smaller index first, NNAPI larger index first; the row is
  reversed first (a GATHER along the last axis) and each index i of the reversed row mapped
  back to n - 1 - i (a GATHER from the constant [n - 1, ..., 0]), which is exact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.drivers.litert.export import Node, fb
from nncert.hal.types import OperationType as Op

_SPARSE_DEPRECATED, _DENSE, _SPARSE = 1, 2, 3


def _embedding_lookup(n: Node) -> None:
    n.g.op("EMBEDDING_LOOKUP", [n.t("lookups"), n.t("values")], [n.out()])


def _hashtable_lookup(n: Node) -> None:
    n.g.op("HASHTABLE_LOOKUP", [n.t("lookups"), n.t("keys"), n.t("values")], [n.out(0), n.out(1)])


def _lsh_projection(n: Node) -> None:
    g = n.g
    kind = int(n.scalar("type"))
    ins = [n.t("hash"), n.t("input")] + ([n.t("weight")] if n.has("weight") else [])
    tfl_type = fb.LSHProjectionType.DENSE if kind == _DENSE else fb.LSHProjectionType.SPARSE
    if kind != _SPARSE_DEPRECATED:
        g.op("LSH_PROJECTION", ins, [n.out()], "LSHProjection", type=tfl_type)
        return
    num_hash, num_bits = n.operand("hash").dimensions
    packed = g.unary("LSH_PROJECTION", ins[0], extra=ins[1:], shape=[num_hash], quant=None,
                     ttype="INT32", options="LSHProjection", type=tfl_type)
    offsets = g.const(np.arange(num_hash, dtype=np.int64).astype(np.int32) << num_bits)
    g.op("SUB", [packed, offsets], [n.out()], "Sub")


def _topk_v2(n: Node) -> None:
    g = n.g
    x = n.t("input")
    shape = n.in_shape("input")
    last = len(shape) - 1
    width = shape[-1]
    k = int(n.scalar("k"))
    backwards = g.const(np.arange(width - 1, -1, -1, dtype=np.int32))
    reversed_x = g.unary("GATHER", x, extra=[backwards], options="Gather", axis=last)
    idx = g.tensor([*shape[:-1], k], "INT32")
    g.op("TOPK_V2", [reversed_x, g.const([k])], [n.out(0), idx])
    g.op("GATHER", [backwards, idx], [n.out(1)], "Gather", axis=0)


MAPPINGS: dict[Op, Callable[[Node], None]] = {
    Op.EMBEDDING_LOOKUP: _embedding_lookup,
    Op.HASHTABLE_LOOKUP: _hashtable_lookup,
    Op.LSH_PROJECTION: _lsh_projection,
    Op.TOPK_V2: _topk_v2,
}
