"""ONNX Runtime mappings of the lookup family.

- EMBEDDING_LOOKUP is a Gather along axis 0 (stored values: the output keeps the values'
  quantisation), which fails on an index out of range as NNAPI requires.
- HASHTABLE_LOOKUP is composed on stored values: Equal of every lookup against every key,
  the matching row's position by ArgMax (of the int32 matches), a hit where any matched
  (ReduceMax), the row gathered and replaced by zeros on a miss (Where); hits is the hit
  flag cast to uint8. Exact, and a miss is zero bytes as in NNAPI.
- TOPK_V2 is TopK on the row reversed (Slice with step -1): ONNX puts equal values smaller
  index first, NNAPI larger index first; each index i of the reversed row is n - 1 - i.
  Quantised rows are sorted as their real values (dequantised, an order-preserving map) and
  requantised with the same parameters, which gives the stored values back.
- LSH_PROJECTION is declined: ONNX has no fingerprint hash to compose it from.
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.onnxruntime.export import Emit, Mapping, _tensor_proto_type
from nncert.hal.model import dtype_of
from nncert.hal.types import OperationType as Op


def nodes(e: Emit, op_type: str, inputs: list[str], count: int, **attrs) -> list[str]:
    """One ``op_type`` node with ``count`` outputs (Emit.node makes nodes of one)."""
    from onnx import helper

    outs = [e.g.fresh(op_type.lower()) for _ in range(count)]
    e.g.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
    return outs


def _embedding_lookup(e: Emit) -> None:
    y = e.node("Gather", [e.raw("values"), e.raw("lookups")], axis=0)
    e.g.bind_output(y, e.op.outputs[0])


def _hashtable_lookup(e: Emit) -> None:
    values = e.raw("values")
    dims = e.dims("values")
    look = e.node("Unsqueeze", [e.raw("lookups"), e.const([1])])
    keys = e.node("Unsqueeze", [e.raw("keys"), e.const([0])])
    match = e.node("Cast", [e.node("Equal", [look, keys])], to=_tensor_proto_type(np.int32))
    row = e.node("ArgMax", [match], axis=1, keepdims=0)
    hit = e.node("Cast", [e.node("ReduceMax", [match, e.const([1])], keepdims=0)],
                 to=_tensor_proto_type(np.bool_))
    rows = e.node("Gather", [values, row], axis=0)
    flag = e.reshape(hit, (-1,) + (1,) * (len(dims) - 1))
    zero = e.const(0, dtype_of(e.operand("values").type))
    e.g.bind_output(e.node("Where", [flag, rows, zero]), e.op.outputs[0])
    e.g.bind_output(e.node("Cast", [hit], to=_tensor_proto_type(np.uint8)), e.op.outputs[1])


def _topk_v2(e: Emit) -> None:
    dims = e.dims("input")
    width = dims[-1]
    k = int(e.value("k"))
    last = len(dims) - 1
    # Reversed on the stored values, then dequantised (ORT's QDQ rewrites mistype a Slice
    # between DequantizeLinear and TopK in int8).
    flipped = e.node("Slice", [e.raw("input"), e.const([-1]), e.const([-(2 ** 62)]), e.const([last]),
                               e.const([-1])])
    flipped = e.g.dequantize(flipped, e.operand("input"))
    values, idx = nodes(e, "TopK", [flipped, e.const([k])], 2, axis=-1, largest=1, sorted=1)
    e.emit(values, k=0)
    back = e.node("Sub", [e.const(width - 1), idx])
    e.emit(e.node("Cast", [back], to=_tensor_proto_type(np.int32)), k=1)


def _lsh_projection(e: Emit) -> None:
    raise Unmappable("ONNX has no fingerprint hash (FarmHash) to compute LSH_PROJECTION's bits")


MAPPINGS: dict[Op, Mapping] = {
    Op.EMBEDDING_LOOKUP: Mapping(_embedding_lookup),
    Op.HASHTABLE_LOOKUP: Mapping(_hashtable_lookup),
    Op.TOPK_V2: Mapping(_topk_v2),
    Op.LSH_PROJECTION: Mapping(_lsh_projection),
}
