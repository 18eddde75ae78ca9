"""Type conversions: QUANTIZE, DEQUANTIZE and CAST.

Each has one input "input" of type variable T and one output of type variable U. QUANTIZE
and DEQUANTIZE are plain real-domain copies: the framework dequantises the input and
requantises (round half away from zero, saturating) or rounds the output. CAST ignores
scale and zero point and converts the stored numbers, so its record sees raw values
(``dequantize=False``) and does the conversion itself.
"""

from __future__ import annotations

import numpy as np

from nncert.hal.model import dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    Signature,
    Variant,
    variant,
)

V = Version
F16, F32, I32 = T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32
Q8, Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
Q8SYMM, Q8PC = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL


def _convert_signature(input_ranks: tuple[int, ...] | None) -> Signature:
    return Signature(inputs=(Arg("input", "T", ranks=input_ranks),), outputs=(Arg("output", "U"),))


def _same_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    return [ctx.dims("input")]


def _identity(ctx: OpContext) -> list[np.ndarray]:
    return [ctx.value("input")]


def _pairs(version: V, inputs: tuple[T, ...], outputs: tuple[T, ...]) -> list[Variant]:
    return [variant(version, T=i, U=o) for i in inputs for o in outputs]


# ---------------------------------------------------------------------------------------
# QUANTIZE / DEQUANTIZE


def _quantize_sample(s: SampleContext) -> None:
    s.tensor("input", s.dims())


def _dequantize_sample(s: SampleContext) -> None:
    dims = s.dims()
    if s.type("input") is Q8PC:
        s.tensor("input", dims, channel_dim=s.draw.int(0, len(dims) - 1))
    else:
        s.tensor("input", dims)


def _huge_sample(s: SampleContext) -> None:
    """Values of +-2 with every third one huge, the signs alternating: float32 1e10..1e30 (past
    int32 once divided by the output's scale of 1), float16 3e4..6e4 (its largest finite)."""
    dims = (s.draw.int(1, 3), s.draw.int(3, 6))
    x = s.draw.array(dims, -2.0, 2.0)
    lo, hi = (1e10, 1e30) if s.type("input") is F32 else (3e4, 6e4)
    flat = x.reshape(-1)
    n = flat[::3].size
    magnitudes = np.exp(s.draw.array((n,), float(np.log(lo)), float(np.log(hi))))
    flat[::3] = magnitudes * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    s.tensor("input", dims, value=x)


# QUANTIZE's own edge: generated inputs are within a few steps of the output's range, never
# where the scaled value leaves int32 (a kernel converting it to int32 before clamping gets
# INT_MIN for +1e30, so -128 where 127 is due).
_HUGE_INPUTS = edges.Edge("huge_inputs", "own", "inputs far past the output's range, of both signs "
                          "(float32 1e10..1e30, float16 3e4..6e4) at an output scale of 1: each saturates "
                          "at its own end of the type", sample=_huge_sample, output_quant="unit")

_QUANTIZE = OpRecord(
    Op.QUANTIZE, (_convert_signature(None),),
    (*_pairs(V.V1_2, (F32, F16), (Q8,)), *_pairs(V.V1_3, (F32, F16), (Q8S,))),
    _identity, _same_shape, _quantize_sample, criterion="medium", edges=(_HUGE_INPUTS,),
    doc="output = clamp(round(input / scale) + zeroPoint) in the output's quantised type",
)

_DEQUANTIZE = OpRecord(
    Op.DEQUANTIZE, (_convert_signature((1, 2, 3, 4)),),
    (*_pairs(V.V1_0, (Q8,), (F32,)), *_pairs(V.V1_2, (Q8,), (F16,)),
     *_pairs(V.V1_2, (Q8SYMM, Q8PC), (F32, F16)), *_pairs(V.V1_3, (Q8S,), (F32, F16))),
    _identity, _same_shape, _dequantize_sample, criterion="medium",
    doc="output = (input - zeroPoint) * scale (per channel for per-channel input), as float",
)


# ---------------------------------------------------------------------------------------
# CAST


def _cast_kernel(ctx: OpContext) -> list[np.ndarray]:
    """Stored value to stored value, as NNAPI's reference does: a C++ conversion (floats to
    integers truncate toward zero), saturating to [0, 255] only for a TENSOR_QUANT8_ASYMM
    output. Float-to-int32 of values outside int32 is undefined and never generated."""
    x = np.asarray(ctx.value("input"))
    out = ctx.type("output")
    if out in (F32, F16):
        return [x.astype(np.float64)]
    if out is Q8:
        x = np.clip(x.astype(np.float64), 0, 255)
    if x.dtype.kind == "f":
        x = np.trunc(x)
    return [x.astype(dtype_of(out))]


def _cast_sample(s: SampleContext) -> None:
    dims = s.dims()
    t, u = s.type("input"), s.type("output")
    if t in (F32, F16) and u not in (F32, F16):
        # quarter steps: exact in fp16 and fp32 (also under relaxed fp16 computation), so
        # truncation is unambiguous; outside [0, 255] to exercise uint8 saturation
        lo, hi = (-60, 300) if u is Q8 else (-200, 200)
        s.tensor("input", dims, value=s.draw.integers(dims, 4 * lo, 4 * hi) / 4.0)
    elif t is I32:
        lo, hi = (-60, 300) if u is Q8 else (-1000, 1000)  # exact in fp16 up to 2048
        s.tensor("input", dims, value=s.draw.integers(dims, lo, hi).astype(np.int32))
    elif t in (F32, F16):
        s.tensor("input", dims, value=s.draw.array(dims, -100.0, 100.0))
    else:
        s.tensor("input", dims)


def _float_and_int32(record, sig, var_) -> bool:
    return {var_.types["T"], var_.types["U"]} in ({F32, I32}, {F16, I32})


def _wide_integers(s: SampleContext) -> None:
    """Values past 16 bits, either sign: floats 32768..1e9 (float16: 32768..65504) with
    quarter steps where the type has them, int32 up to 2e9 (60000 towards float16)."""
    dims = (s.draw.int(1, 3), s.draw.int(4, 8))
    t, u = s.type("input"), s.type("output")
    sign = np.where(s.draw.integers(dims, 0, 1) == 1, 1.0, -1.0)
    if t is I32:
        hi = 4.6 if u is F16 else 9.3
        value = (sign * 10.0 ** s.draw.array(dims, 4.52, hi)).astype(np.int64).astype(np.int32)
    elif t is F16:
        value = sign * s.draw.array(dims, 32768.0, 65504.0)
    else:
        value = sign * np.round(10.0 ** s.draw.array(dims, 4.52, 9.0) * 4) / 4
    s.tensor("input", dims, value=value)


# CAST's own edge: its sampler keeps float <-> int32 values within +-1000 (+-200 for floats),
# where a kernel through a 16-bit integer (or float16) path is still right.
_WIDE_INTEGERS = edges.Edge(
    "wide_integers", "own", "float <-> int32 values past 16 bits (32768 up to 1e9, 2e9 from int32; "
    "float16 up to its largest)", applies=_float_and_int32, sample=_wide_integers)


_CAST_V12 = (F16, F32, I32, Q8)
_CAST = OpRecord(
    Op.CAST, (_convert_signature(None),),
    (*_pairs(V.V1_2, _CAST_V12, _CAST_V12),
     *(variant(V.V1_3, T=t, U=t) for t in (T.TENSOR_BOOL8, T.TENSOR_QUANT16_ASYMM,
                                          T.TENSOR_QUANT16_SYMM, Q8S, Q8SYMM))),
    _cast_kernel, _same_shape, _cast_sample, criterion="strict", dequantize=False, edges=(_WIDE_INTEGERS,),
    doc="input's stored numbers converted to the output type (scale and zero point ignored)",
)

RECORDS = [_QUANTIZE, _DEQUANTIZE, _CAST]
