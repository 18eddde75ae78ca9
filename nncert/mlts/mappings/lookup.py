"""TFLite importer mappings of the lookup family: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP,
LSH_PROJECTION (TFLite SPARSE is NNAPI SPARSE, 3: both add k * 2**bits for hash function k)
and TOPK_V2, which TFLite orders smaller index first on ties and NNAPI larger index first:
the row is reversed first (GATHER along the last axis) and each index i mapped back to
n - 1 - i (GATHER from the constant [n - 1, ..., 0]), so the import is exact."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.drivers.litert.export import fb
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import I32, Node, Spec, Unmapped


def _same_type(n: Node, k: int) -> None:
    have, want = n.g.spec(n.x(k)).type, n.out_spec().type
    if have is not want:
        raise Unmapped(f"{n.code} of {have.name} values into {want.name} (hybrid) is not NNAPI's")


def _embedding_lookup(n: Node) -> None:
    _same_type(n, 1)
    n.emit(Op.EMBEDDING_LOOKUP, [n.x(0), n.x(1)])


def _hashtable_lookup(n: Node) -> None:
    _same_type(n, 2)
    hits = Spec(T.TENSOR_QUANT8_ASYMM, 1.0, 0)
    out, hit = n.g.op(Op.HASHTABLE_LOOKUP, [n.x(0), n.x(1), n.x(2)], [n.out_spec(0), hits])
    n.bind(0, out)
    n.bind(1, hit)


def _lsh_projection(n: Node) -> None:
    g = n.g
    kind = int(n.opt("type", 0))
    nn_type = {fb.LSHProjectionType.SPARSE: 3, fb.LSHProjectionType.DENSE: 2}.get(kind)
    if nn_type is None:
        raise Unmapped(f"LSH_PROJECTION type {kind}")
    hash_, x = n.x(0), n.x(1)
    if n.present(2):
        n.emit(Op.LSH_PROJECTION, [hash_, x, n.x(2), g.i32(nn_type)])
        return
    # No weight: an omitted (NO_VALUE) input, which Graph.op would read as present.
    num_hash, num_bits = g.dims(hash_)
    out = g.operand(I32, [num_hash * num_bits if nn_type == 2 else num_hash])
    g.raw_op(Op.LSH_PROJECTION, [hash_, x, g.b.no_value(g.spec(hash_).type), g.i32(nn_type)], [out])
    n.bind(0, out)


def _topk_v2(n: Node) -> None:
    g = n.g
    x = n.x(0)
    dims = g.dims(x)
    k = n.ints(1, "k")[0]
    backwards = g.const(I32, np.arange(dims[-1] - 1, -1, -1, dtype=np.int32))
    flipped = g.op(Op.GATHER, [x, g.i32(len(dims) - 1), backwards], [g.spec(x)])[0]
    values, idx = g.op(Op.TOPK_V2, [flipped, g.i32(k)], [n.out_spec(0), I32])
    n.bind(0, values)
    n.bind(1, g.op(Op.GATHER, [backwards, g.i32(0), idx], [n.out_spec(1)])[0])


MAPPINGS: dict[str, Callable[[Node], None]] = {
    "EMBEDDING_LOOKUP": _embedding_lookup,
    "HASHTABLE_LOOKUP": _hashtable_lookup,
    "LSH_PROJECTION": _lsh_projection,
    "TOPK_V2": _topk_v2,
}
