"""Comparisons (EQUAL NOT_EQUAL LESS LESS_EQUAL GREATER GREATER_EQUAL), boolean logic
(LOGICAL_AND LOGICAL_OR LOGICAL_NOT) and SELECT.

Comparisons of quantised tensors compare real values, so the two inputs may have different
scales and zero points; the output is always TENSOR_BOOL8.
"""

from __future__ import annotations

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
)
from nncert.ops.elementwise import (
    binary,
    broadcast_pair_dims,
    by_version,
    sample_broadcast_pair,
    unary,
)

_BOOL = (T.TENSOR_BOOL8,)
_DATA = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
_Q8S = (T.TENSOR_QUANT8_ASYMM_SIGNED,)


# ---------------------------------------------------------------------------------------
# Comparisons


def _tie_values(s: SampleContext, dims0: tuple[int, ...], dims1: tuple[int, ...]) -> None:
    """Set both inputs from a coarse grid of real values (so that equal pairs are frequent),
    with some elements drawn over the whole range. Quantised inputs get scales s and s or
    s and 2s, and zero points apart: the grid values are exact in both."""
    t = s.type("input0")
    d = s.draw
    if t is T.TENSOR_BOOL8:
        s.tensor("input0", dims0)
        s.tensor("input1", dims1)
        return
    if not t.is_quant:
        for name, dims in (("input0", dims0), ("input1", dims1)):
            if t is T.TENSOR_INT32:
                value = d.integers(dims, -3, 3)
            else:  # multiples of 0.5 (exact in fp16) mixed with arbitrary values
                value = np.where(d.array(dims, 0, 1) < 0.25, d.array(dims, -2, 2),
                                 d.integers(dims, -4, 4) * 0.5)
            s.tensor(name, dims, value=value)
        return
    lo, hi = t.quant_range
    base = float(np.float32(d.float(0.01, 0.05)))
    steps = d.choice(((1, 1), (1, 2), (2, 1)))  # input i's scale is base * steps[i]
    top = max(steps)
    for name, dims, step in (("input0", dims0, steps[0]), ("input1", dims1, steps[1])):
        zp = d.int(lo + 6, hi - 6)
        grid = zp + d.integers(dims, -3, 3) * (top // step)  # real value k * base * top
        value = np.where(d.array(dims, 0, 1) < 0.25, d.integers(dims, lo, hi), grid)
        s.tensor(name, dims, value=value, scale=base * step, zero_point=zp)


def _sample_comparison(s: SampleContext) -> None:
    _tie_values(s, *broadcast_pair_dims(s))


def _signed_zeros(s: SampleContext) -> None:
    """Two inputs of one shape [4, n]: row 0 pairs -0 with +0, row 1 +0 with -0, row 2 -0
    with -0, row 3 ordinary values of either sign against -0."""
    n = s.draw.int(1, 4)
    a, b = np.zeros((4, n)), np.zeros((4, n))
    a[0], b[1], a[2], b[2] = -0.0, -0.0, -0.0, -0.0
    a[3] = s.draw.array((n,), -2.0, 2.0)
    b[3] = -0.0
    s.tensor("input0", (4, n), value=a)
    s.tensor("input1", (4, n), value=b)


# The comparisons' own edge: -0 and +0 are equal (IEEE), which a kernel comparing the bits
# (or their monotonic integer key: -0 just below +0) gets wrong; generated values are never -0.
_SIGNED_ZEROS = edges.Edge(
    "signed_zeros", "own", "float32 -0 against +0 and -0: equal, neither less than the other",
    applies=lambda record, sig, var_: var_.primary is T.TENSOR_FLOAT32, sample=_signed_zeros)


def _comparison(op: Op, fn, doc: str) -> OpRecord:
    return binary(op, fn, {Version.V1_2: _BOOL + _DATA, Version.V1_3: _Q8S}, out=T.TENSOR_BOOL8,
                  criterion="strict", sample=_sample_comparison,
                  edges_=(*edges.BROADCAST, _SIGNED_ZEROS, edges.int32_wide("near")),
                  doc=doc)


# ---------------------------------------------------------------------------------------
# SELECT


_SELECT = Signature(
    inputs=(Arg("input0", T.TENSOR_BOOL8), Arg("input1"), Arg("input2")),
    outputs=(Arg("output"),),
)


def _select_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    cond = ctx.dims("input0")
    for name in ("input1", "input2"):
        if ctx.dims(name) != cond:
            raise ShapeError(f"{name} has shape {list(ctx.dims(name))}, "
                             f"must equal input0's {list(cond)} (no broadcasting)")
    return [cond]


def _select(ctx: OpContext) -> list[np.ndarray]:
    return [np.where(ctx.value("input0").astype(bool), ctx.value("input1"), ctx.value("input2"))]


def _sample_select(s: SampleContext) -> None:
    dims = s.dims()
    for name in ("input0", "input1", "input2"):
        s.tensor(name, dims)


# ---------------------------------------------------------------------------------------

RECORDS = [
    _comparison(Op.EQUAL, np.equal, "input0 == input1 (real values), as TENSOR_BOOL8"),
    _comparison(Op.NOT_EQUAL, np.not_equal, "input0 != input1 (real values), as TENSOR_BOOL8"),
    _comparison(Op.LESS, np.less, "input0 < input1 (real values), as TENSOR_BOOL8"),
    _comparison(Op.LESS_EQUAL, np.less_equal, "input0 <= input1 (real values), as TENSOR_BOOL8"),
    _comparison(Op.GREATER, np.greater, "input0 > input1 (real values), as TENSOR_BOOL8"),
    _comparison(Op.GREATER_EQUAL, np.greater_equal,
                "input0 >= input1 (real values), as TENSOR_BOOL8"),
    binary(Op.LOGICAL_AND, np.logical_and, {Version.V1_2: _BOOL}, criterion="strict",
           sample=sample_broadcast_pair, doc="input0 AND input1"),
    binary(Op.LOGICAL_OR, np.logical_or, {Version.V1_2: _BOOL}, criterion="strict",
           sample=sample_broadcast_pair, doc="input0 OR input1"),
    unary(Op.LOGICAL_NOT, np.logical_not, {Version.V1_2: _BOOL}, criterion="strict", doc="NOT input"),
    OpRecord(Op.SELECT, (_SELECT,), by_version({Version.V1_2: _DATA, Version.V1_3: _Q8S}), _select,
             _select_shape, _sample_select, criterion="strict", edges=(edges.int32_wide("any"),),
             doc="input1 where input0 is true, else input2 (same shapes); quantised inputs "
                 "and output may differ in scale"),
]
