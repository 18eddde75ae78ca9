"""Mutants whose arithmetic is off where only exact checks see it: booleans (ACC-3) and the
signed / unsigned 8-bit pairs of an operation (ACC-4). conformance/test_exactness.py must
catch both; the per-operation tolerances (ACC-1, ACC-2) let them through."""

from __future__ import annotations

import numpy as np

from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import dtype_of
from nncert.hal.types import OperandType
from nncert.ops import get
from nncert.ops.evaluate import evaluate, evaluate_real

T = OperandType


class ComparesFp32AsFp16(MutantDriver):
    """Compares float32 tensors in float16 (a comparison unit that is fp16 only): both inputs
    are rounded to float16 first, so values less than an fp16 step apart compare equal, and
    values beyond 65504 compare as infinities. Every other operation is exact."""

    name = "compares_fp32_as_fp16"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if [o.type for o in outputs] != [T.TENSOR_BOOL8] or \
                not any(o is not None and o.type is T.TENSOR_FLOAT32 for o in operands):
            return results
        halved = [np.asarray(v).astype(np.float16).astype(np.float32)
                  if o is not None and o.type is T.TENSOR_FLOAT32 else v
                  for o, v in zip(operands, inputs, strict=True)]
        with np.errstate(over="ignore"):
            return evaluate(get(op.type), operands, halved, outputs)


class Int8HalfToEven(MutantDriver):
    """Requantises TENSOR_QUANT8_ASYMM_SIGNED results rounding exact half steps to even (a
    vector unit's default rounding) where NNAPI rounds them away from zero; the unsigned path
    rounds as NNAPI does. At most one step off, only on exact half steps, and unbiased: ACC-2
    and the random graphs' bias and mse (ACC-5) let it through; the signed and unsigned
    variants of one case then differ (ACC-4)."""

    name = "int8_half_to_even"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        record = get(op.type)
        if not record.dequantize or not any(o.type is T.TENSOR_QUANT8_ASYMM_SIGNED for o in outputs):
            return results
        real = evaluate_real(record, operands, inputs, outputs)
        out = []
        for o, r, q in zip(outputs, real, results, strict=True):
            if o.type is T.TENSOR_QUANT8_ASYMM_SIGNED and o.channel_quant is None:
                lo, hi = o.type.quant_range
                q = np.clip(np.rint(np.asarray(r, np.float64) / o.scale) + o.zero_point, lo, hi)
                q = q.astype(dtype_of(o.type))
            out.append(q)
        return out


MUTANT_INFO = (
    MutantInfo(ComparesFp32AsFp16, "ACC-3", suite="test_exactness.py"),
    MutantInfo(Int8HalfToEven, "ACC-4", suite="test_exactness.py"),
)
