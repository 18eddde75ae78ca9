"""Element-wise arithmetic: ADD SUB MUL DIV (broadcasting, fused activation), MAXIMUM MINIMUM
(broadcasting), and the unary maths ABS EXP FLOOR LOG NEG RSQRT SIN SQRT.

The factories ``binary`` and ``unary`` and the helpers ``by_version``, ``broadcast_pair_shape``
and ``sample_broadcast_pair`` are shared with ``logical.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
    TypeSpec,
    Variant,
    broadcast_shape,
    broadcastable_dims,
    variants,
)

#: "Supported tensor rank: up to 4" (None, the Arg default, stands for "from 1").
UP_TO_4 = (1, 2, 3, 4)


def by_version(versions: dict[Version, tuple[T, ...]]) -> tuple[Variant, ...]:
    """One variant per primary type, each with the HAL version it is listed under."""
    return tuple(v for version, types in versions.items() for v in variants(version, *types))


# ---------------------------------------------------------------------------------------
# Broadcasting binary operations


def broadcast_pair_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    return [broadcast_shape(ctx.dims("input0"), ctx.dims("input1"))]


def broadcast_pair_dims(s: SampleContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two broadcast-compatible shapes (either may be the smaller one); an edge case's
    ``pair_dims`` hook answers instead (``nncert.ops.edges.BROADCAST``)."""
    if s.edge is not None and s.edge.pair_dims is not None:
        return s.edge.pair_dims(s)
    dims = s.dims()
    other = broadcastable_dims(s, dims)
    return (other, dims) if s.draw.bool() else (dims, other)


def sample_broadcast_pair(s: SampleContext) -> None:
    dims0, dims1 = broadcast_pair_dims(s)
    s.tensor("input0", dims0)
    s.tensor("input1", dims1)


def _int32_no_activation(ctx: OpContext) -> None:
    if ctx.variant.primary is T.TENSOR_INT32 and ctx.value("act", 0) != 0:
        raise ShapeError(f"act must be NONE (0) for TENSOR_INT32, is {ctx.value('act')}")


def _mul_check(ctx: OpContext) -> None:
    _int32_no_activation(ctx)
    out = ctx.outputs[0]
    if out.type.is_quant:
        a, b = ctx.operand("input0"), ctx.operand("input1")
        if not out.scale > a.scale * b.scale:
            raise ShapeError(f"output scale {out.scale:g} must exceed input scales' product "
                             f"{a.scale * b.scale:g}")


def _sample_mul(s: SampleContext) -> None:
    # NNAPI wants output scale > input0 scale * input1 scale; free output scales are at least
    # 1e-3, so quantised inputs keep scales <= 0.03.
    dims0, dims1 = broadcast_pair_dims(s)
    t = s.type("input0")
    for name, dims in (("input0", dims0), ("input1", dims1)):
        if t.is_quant:
            s.tensor(name, dims, scale=s.draw.float(0.005, 0.03), zero_point=s.draw.int(*t.quant_range))
        else:
            s.tensor(name, dims)


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "i":  # TENSOR_INT32: floor division, like Python's //
        # Division by zero: NNAPI leaves the value unspecified and the execution must
        # succeed; nncert computes 0 there (Android's CPU path does the same) and accepts
        # any value (_div_unspecified). -2^31 // -1 wraps to -2^31 (also unspecified).
        a64, b64 = np.broadcast_arrays(a.astype(np.int64), np.asarray(b, np.int64))
        out = np.zeros(a64.shape, np.int64)
        np.floor_divide(a64, b64, out=out, where=b64 != 0)
        return out.astype(np.int32)
    return a / b


def _div_unspecified(ctx: OpContext) -> list[np.ndarray | None]:
    """Where an int32 divisor is zero: NNAPI leaves the quotient unspecified there."""
    if ctx.variant.primary is not T.TENSOR_INT32:
        return [None]
    return [np.asarray(ctx.value("input1")) == 0]


def _zero_divisors(s: SampleContext) -> None:
    """Edge hook: an int32 divisor with zeros among its values (one at least)."""
    item = s.inputs["input1"]
    lo, hi = -20, 20
    value = s.draw.integers(item.dims, lo, hi)
    value = np.where(s.draw.integers(item.dims, 0, 2) == 0, 0, value)
    value.reshape(-1)[s.draw.int(0, value.size - 1)] = 0
    item.value = value.astype(np.int32)


_DIV_EDGES = (*edges.BROADCAST, edges.Edge(
    "int32_zero_divisor", "division",
    "an int32 divisor holding zeros: the execution must succeed, the value there is unspecified",
    applies=lambda r, sig, v: v.primary is T.TENSOR_INT32, adjust=_zero_divisors),
    edges.int32_wide("big_small"))


def binary(op: Op, fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
           versions: dict[Version, tuple[T, ...]], *, doc: str, activation: bool = False,
           out: TypeSpec = "T", ranks: tuple[int, ...] | None = None, domain1: str | None = None,
           criterion: str = "medium", check: Callable[[OpContext], None] | None = None,
           sample: Callable[[SampleContext], None] = sample_broadcast_pair,
           edges_: tuple = edges.BROADCAST, unspecified: Callable | None = None) -> OpRecord:
    """A broadcasting ``output = fn(input0, input1)`` record (optionally with a fused
    activation input "act"); ``fn`` sees real values (raw ones for INT32 and BOOL8). Its
    sampler must draw the pair with ``broadcast_pair_dims``: the broadcast-corner edges
    answer there."""
    inputs = (Arg("input0", ranks=ranks), Arg("input1", ranks=ranks, domain=domain1))
    if activation:
        inputs += (Arg("act", T.INT32),)
    sig = Signature(inputs=inputs, outputs=(Arg("output", out),))
    return OpRecord(op, (sig,), by_version(versions),
                    lambda ctx: [fn(ctx.value("input0"), ctx.value("input1"))],
                    broadcast_pair_shape, sample, criterion=criterion,
                    activation="act" if activation else None, check=check, edges=edges_,
                    unspecified=unspecified, doc=doc)


# ---------------------------------------------------------------------------------------
# Unary operations


def _same_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    return [ctx.dims("input")]


def sample_unary(s: SampleContext) -> None:
    dims = s.dims()
    t = s.type("input")
    zero_point = None
    if t.is_quant and s.signature.arg("input").domain == "positive":
        lo, hi = t.quant_range
        zero_point = s.draw.int(lo, (lo + hi) // 2)  # leaves at least half the range positive
    s.tensor("input", dims, zero_point=zero_point)


def _sample_floor(s: SampleContext) -> None:
    dims = s.dims()
    value = None
    if s.draw.bool():  # integers and quarter steps: exact in fp16, hit floor's boundaries
        value = s.draw.integers(dims, -12, 12) / 4.0
    s.tensor("input", dims, value=value)


def unary(op: Op, fn: Callable[[np.ndarray], np.ndarray], versions: dict[Version, tuple[T, ...]], *,
          doc: str, criterion: str, domain: str | None = None,
          ranks: tuple[int, ...] | None = None, discrete: bool = False,
          sample: Callable[[SampleContext], None] = sample_unary, edges_: tuple = ()) -> OpRecord:
    """An ``output = fn(input)`` record; quantised outputs (if any) have free parameters."""
    sig = Signature(inputs=(Arg("input", ranks=ranks, domain=domain),), outputs=(Arg("output"),))
    return OpRecord(op, (sig,), by_version(versions), lambda ctx: [fn(ctx.value("input"))],
                    _same_shape, sample, criterion=criterion, discrete=discrete, edges=edges_, doc=doc)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _zeros_among(s: SampleContext) -> None:
    """Positive values (the domain's) with every other element exactly 0."""
    dims = (s.draw.int(1, 3), s.draw.int(2, 6))
    x = s.draw.array(dims, 0.1, 2.0)
    x.reshape(-1)[::2] = 0.0
    s.tensor("input", dims, value=x)


# SQRT's own edge: its domain's generated values are 0.1..2, never the one input where
# x * rsqrt(x) (a common lowering) is 0 * inf.
_ZERO_INPUT = edges.Edge("zero_input", "own", "inputs of exactly 0 among positive ones: sqrt(0) = 0",
                         sample=_zeros_among)


def _many_periods(s: SampleContext) -> None:
    """Magnitudes of 10..100 (two to sixteen periods), either sign."""
    dims = (s.draw.int(1, 3), s.draw.int(2, 6))
    sign = np.where(s.draw.integers(dims, 0, 1) == 1, 1.0, -1.0)
    s.tensor("input", dims, value=sign * s.draw.array(dims, 10.0, 100.0))


# SIN's own edge: generated inputs lie within +-2, inside the first period, where a kernel
# that does not reduce its argument (or reduces it by one period only) is still right.
_MANY_PERIODS = edges.Edge("many_periods", "own", "inputs of magnitude 10..100 (radians): the "
                           "argument must be reduced modulo 2 pi", sample=_many_periods)


def _wide_exponents(s: SampleContext) -> None:
    """Exponents across the type's range: -80..80 for float32 (results 1.8e-35..5.5e34),
    -16..11 for float16 (up to 59874, below its largest 65504)."""
    lo, hi = (-16.0, 11.0) if s.type("input") is T.TENSOR_FLOAT16 else (-80.0, 80.0)
    dims = (s.draw.int(1, 3), s.draw.int(4, 8))
    x = s.draw.array(dims, lo, hi)
    x[:, 0] = s.draw.array(dims[:1], hi - 1.0, hi)
    x[:, 1] = s.draw.array(dims[:1], lo, lo + 1.0)
    s.tensor("input", dims, value=x)


def _wide_magnitudes(s: SampleContext) -> None:
    """Positive values log-uniform over the type's normal range: 1e-30..1e30 for float32,
    2**-14..6e4 for float16."""
    lo, hi = (-14 * math.log10(2), math.log10(6e4)) if s.type("input") is T.TENSOR_FLOAT16 else (-30.0, 30.0)
    dims = (s.draw.int(1, 3), s.draw.int(4, 8))
    x = 10.0 ** s.draw.array(dims, lo, hi)
    x[:, 0] = 10.0 ** s.draw.array(dims[:1], hi - 1.0, hi)
    x[:, 1] = 10.0 ** s.draw.array(dims[:1], lo, lo + 1.0)
    s.tensor("input", dims, value=x)


# LOG's, SQRT's and RSQRT's own edge: their domain's generated values are 0.1..2, where a
# kernel without range reduction (a polynomial or table over a few octaves, a Newton iteration
# from a fixed seed) is still right.
_WIDE_MAGNITUDES = edges.Edge("wide_magnitudes", "own", "positive float inputs over the type's normal "
                              "range (float32 1e-30..1e30, float16 6.1e-5..6e4)",
                              applies=lambda record, sig, var_: not var_.primary.is_quant,
                              sample=_wide_magnitudes)


# EXP's own edge: generated inputs lie within +-2, where a kernel built for a narrow range
# (a table, or a float16 kernel reused for float32) is still right.
_WIDE_EXPONENTS = edges.Edge("wide_exponents", "own", "inputs across the type's range (float32 "
                             "-80..80, float16 -16..11): results from tiny to near the largest",
                             sample=_wide_exponents)


# ---------------------------------------------------------------------------------------

_F = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32)
_Q8 = (T.TENSOR_QUANT8_ASYMM,)
_Q8S = (T.TENSOR_QUANT8_ASYMM_SIGNED,)
_MINMAX = {Version.V1_2: (*_F, T.TENSOR_INT32, *_Q8), Version.V1_3: _Q8S}
_FLOAT_ONLY = {Version.V1_2: _F}

RECORDS = [
    binary(Op.ADD, np.add, {Version.V1_0: (T.TENSOR_FLOAT32, *_Q8), Version.V1_2: (T.TENSOR_FLOAT16,),
                            Version.V1_3: (*_Q8S, T.TENSOR_INT32)},
           activation=True, ranks=UP_TO_4, check=_int32_no_activation,
           edges_=(*edges.BROADCAST, edges.SCALE_OVER_OUTPUT, edges.int32_wide("half")),
           doc="input0 + input1"),
    binary(Op.MUL, np.multiply, {Version.V1_0: (T.TENSOR_FLOAT32, *_Q8), Version.V1_2: (T.TENSOR_FLOAT16,),
                                 Version.V1_3: (*_Q8S, T.TENSOR_INT32)},
           activation=True, ranks=UP_TO_4, check=_mul_check, sample=_sample_mul,
           edges_=(*edges.BROADCAST, edges.int32_wide("big_small"),
                   edges.Without("quant_scale_one", "a quantised output's scale must exceed the product "
                                                    "of the input scales, 1 at this edge")),
           doc="input0 * input1"),
    binary(Op.SUB, np.subtract, {Version.V1_1: (T.TENSOR_FLOAT32,), Version.V1_2: (T.TENSOR_FLOAT16, *_Q8),
                                 Version.V1_3: (*_Q8S, T.TENSOR_INT32)},
           activation=True, ranks=UP_TO_4, check=_int32_no_activation,
           edges_=(*edges.BROADCAST, edges.SCALE_OVER_OUTPUT, edges.int32_wide("half")),
           doc="input0 - input1"),
    binary(Op.DIV, _floor_div, {Version.V1_1: (T.TENSOR_FLOAT32,), Version.V1_2: (T.TENSOR_FLOAT16,),
                                Version.V1_3: (T.TENSOR_INT32,)},
           activation=True, ranks=UP_TO_4, domain1="nonzero", check=_int32_no_activation,
           edges_=_DIV_EDGES, unspecified=_div_unspecified,
           doc="input0 / input1 (floor division for TENSOR_INT32; any value where an int32 "
               "divisor is zero)"),
    binary(Op.MAXIMUM, np.maximum, _MINMAX, criterion="strict",
           edges_=(*edges.BROADCAST, edges.int32_wide("any"), edges.float_wide("mixed")),
           doc="element-wise max(input0, input1); quantised inputs and output may differ in scale"),
    binary(Op.MINIMUM, np.minimum, _MINMAX, criterion="strict",
           edges_=(*edges.BROADCAST, edges.int32_wide("any"), edges.float_wide("mixed")),
           doc="element-wise min(input0, input1); quantised inputs and output may differ in scale"),
    unary(Op.ABS, np.abs, {Version.V1_2: _F, Version.V1_3: (T.TENSOR_INT32,)}, criterion="strict",
          edges_=(edges.int32_wide("half"), edges.float_wide("mixed")),
          doc="|input|"),
    unary(Op.NEG, np.negative, {Version.V1_2: (*_F, T.TENSOR_INT32)}, criterion="strict",
          edges_=(edges.int32_wide("half"), edges.float_wide("mixed")),
          doc="-input"),
    unary(Op.FLOOR, np.floor, {Version.V1_0: (T.TENSOR_FLOAT32,), Version.V1_2: (T.TENSOR_FLOAT16,)},
          ranks=UP_TO_4, criterion="medium", sample=_sample_floor, discrete=True,
          edges_=(edges.float_wide("mixed"),),
          doc="floor(input): the largest integer not greater than input"),
    unary(Op.EXP, np.exp, _FLOAT_ONLY, criterion="relaxed", edges_=(_WIDE_EXPONENTS,), doc="e ** input"),
    unary(Op.LOG, np.log, _FLOAT_ONLY, domain="positive", criterion="relaxed", edges_=(_WIDE_MAGNITUDES,),
          doc="natural logarithm of input (input > 0)"),
    unary(Op.SIN, np.sin, _FLOAT_ONLY, criterion="relaxed", edges_=(_MANY_PERIODS,),
          doc="sine of input (radians)"),
    unary(Op.SQRT, np.sqrt, _FLOAT_ONLY, domain="positive", criterion="relaxed",
          edges_=(_ZERO_INPUT, _WIDE_MAGNITUDES),
          doc="square root of input (input >= 0)"),
    unary(Op.RSQRT, _rsqrt, {Version.V1_2: _F, Version.FL7: (*_Q8, *_Q8S)}, domain="positive",
          criterion="relaxed", edges_=(_WIDE_MAGNITUDES,),
          doc="1 / sqrt(input) (input > 0); a quantised output has its own scale and zero point"),
]
