"""Exact results (ACC-3, ACC-4): booleans, and the signed / unsigned 8-bit pairs of an
operation.

- ACC-3: every operation with a TENSOR_BOOL8 output (found in the catalogue) runs on edge
  inputs where an inexact comparison shows: ties, values one ulp apart in float32 and
  float16, +0 and -0, infinities and NaN, int32 values beyond float32's 24 bits and at the
  ends of the range, quantised inputs of different scales that are equal in real value or
  one step apart; boolean inputs in every combination. The booleans must be exact.
- ACC-4: every operation with both TENSOR_QUANT8_ASYMM and TENSOR_QUANT8_ASYMM_SIGNED
  variants (but the exceptions ACC-4 names) runs one generated case in both types (signed =
  unsigned - 128, zero points - 128): the driver's results must agree exactly, up to the
  offset. The reference computes in the real domain, where the two are the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from nncert.drivers.base import Driver
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError, ValidationError
from nncert.hal.model import Model, Operand, dtype_of
from nncert.hal.types import OperandType, OperationType
from nncert.hal.validation import validate_model
from nncert.ops import records
from nncert.ops.base import OpRecord, Signature, Variant
from nncert.ops.interpreter import run_model
from nncert.testing.cases import OpCase, case_id, enumerate_cases, sample_case
from nncert.testing.harness import execute, prepare_or_skip

T = OperandType
U8, S8 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def _run(driver: Driver, model: Model, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs as the driver computes them (skipped where it declines the model)."""
    prepared = prepare_or_skip(driver, model)
    request = build_request(model, feeds)
    execute(prepared, request, "sync")
    main = model.main
    return read_outputs(model, request, [main.operands[i].dimensions for i in main.output_indexes])


# -- ACC-3: booleans ----------------------------------------------------------------------------

def _float_pairs(dtype: type) -> np.ndarray:
    """(input0, input1) pairs of a float type: ties, neighbours one ulp apart (around 1, -1,
    0.1, the smallest normal, the largest finite, and for float32 past float16's range and
    precision), signed zeros, infinities, NaN."""
    f = np.finfo(dtype)

    def up(x: float) -> float:
        return np.nextafter(dtype(x), dtype(np.inf))

    def down(x: float) -> float:
        return np.nextafter(dtype(x), dtype(-np.inf))

    inf, nan = np.inf, np.nan
    ties = [(1.5, 1.5), (-2.0, -2.0), (0.1, 0.1), (0.0, 0.0), (0.0, -0.0), (-0.0, 0.0), (f.max, f.max),
            (inf, inf), (-inf, -inf), (f.tiny, f.tiny)]
    ulps = [(1.0, up(1.0)), (up(1.0), 1.0), (1.0, down(1.0)), (down(1.0), 1.0), (-1.0, down(-1.0)),
            (down(-1.0), -1.0), (0.1, up(0.1)), (up(0.1), 0.1), (f.tiny, up(f.tiny)),
            (-f.tiny, down(-f.tiny)), (f.max, down(f.max)), (down(f.max), f.max), (f.max, inf),
            (-inf, -f.max), (0.0, f.tiny), (-f.tiny, -0.0)]
    if dtype is np.float32:  # apart in float32, one value in float16 (rounded, or both infinite)
        ulps += [(2049.0, 2048.0), (2048.0, 2049.0), (1.0, 1.0 + 2.0**-12), (70000.0, 70001.0),
                 (-70001.0, -70000.0), (1e5, up(1e5))]
    odd = [(nan, nan), (nan, 1.0), (1.0, nan), (nan, inf), (-inf, nan)]
    return np.array(ties + ulps + odd, dtype=np.float64).astype(dtype)


def _int32_pairs() -> np.ndarray:
    """Ties and neighbours of TENSOR_INT32: beyond float32's 24-bit significand, and at the ends
    of the range, where a subtraction overflows."""
    big, lo, hi = 2**24, -2**31, 2**31 - 1
    pairs = [(0, 0), (-7, -7), (hi, hi), (lo, lo), (big, big + 1), (big + 1, big), (big + 1, big + 1),
             (-big - 1, -big), (hi, hi - 1), (hi - 1, hi), (lo, lo + 1), (lo + 1, lo), (hi, lo), (lo, hi),
             (-1, 0), (0, -1), (123456789, 123456788)]
    return np.array(pairs, dtype=np.int64).astype(np.int32)


#: Quantised pairs: input0's scale is BASE * m0, input1's BASE * m1 (exact in float32, and the
#: real values (q - zero point) * scale exact too), with zero points apart.
QUANT_SCALES = {"same": (1, 1), "double": (1, 2), "half": (2, 1), "third": (3, 1)}
BASE = 2.0**-5


def _quant_pairs(type_: OperandType, m0: int, m1: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Raw (input0, input1) pairs and the zero points: ties (equal real values through
    different scales and zero points) and the values one quantisation step either side."""
    zps = (100, 140) if type_ is U8 else (-28, 12)
    lo, hi = type_.quant_range
    pairs = []
    for j in range(-12, 13):  # real value j * m0 * m1 * BASE
        a, b = zps[0] + j * m1, zps[1] + j * m0
        pairs += [(a, b), (a + 1, b), (a - 1, b), (a, b + 1), (a, b - 1)]
    pairs = [p for p in pairs if lo <= min(p) and max(p) <= hi]
    return np.array(pairs, dtype=np.int64).astype(dtype_of(type_)), zps


def _bool_pairs() -> np.ndarray:
    return np.array([(False, False), (False, True), (True, False), (True, True)], dtype=bool)


def _edge_pairs(type_: OperandType) -> np.ndarray:
    if type_ is T.TENSOR_FLOAT32:
        return _float_pairs(np.float32)
    if type_ is T.TENSOR_FLOAT16:
        return _float_pairs(np.float16)
    if type_ is T.TENSOR_INT32:
        return _int32_pairs()
    return _bool_pairs()


@dataclasses.dataclass(frozen=True)
class BoolCase:
    """An edge case of an operation with a TENSOR_BOOL8 output: how to build its model."""

    record: OpRecord
    signature: Signature
    variant: Variant
    scales: str = ""  # a QUANT_SCALES key, for quantised inputs

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.record.name, self.variant.label, self.scales) if p)

    def model(self) -> tuple[Model, list[np.ndarray]]:
        """Elementwise operations (every input a tensor of the variant's types) take the edge
        pairs column by column; reductions (an ``axes`` input) take rows that are all true,
        all false, or all but one alike."""
        sig, types = self.signature, self.variant.types
        data = [a for a in sig.inputs if not a.optional and a.resolve(types).is_tensor and a.name != "axes"]
        b = ModelBuilder()
        if any(a.name == "axes" for a in sig.inputs):
            return self._reduction(b)
        t = data[0].resolve(types)
        if t.is_quant:
            pairs, zps = _quant_pairs(t, *QUANT_SCALES[self.scales])
            m = QUANT_SCALES[self.scales]
            params = [(BASE * m[0], zps[0]), (BASE * m[1], zps[1])]
        else:
            pairs, params = _edge_pairs(t), [(0.0, 0), (0.0, 0)]
        n = len(pairs)
        inputs, feeds = [], []
        for k, arg in enumerate(data):
            scale, zp = params[k]
            inputs.append(b.operand(arg.resolve(types), (n,), scale, zp))
            feeds.append(np.ascontiguousarray(pairs[:, k]))
        out_type = sig.outputs[0].resolve(types)
        out = b.operand(out_type, (n,), 0.0, 0)
        b.operation(self.record.type, inputs, [out])
        return b.build(inputs, [out]), feeds

    def _reduction(self, b: ModelBuilder) -> tuple[Model, list[np.ndarray]]:
        width = 5
        rows = [np.zeros(width, bool), np.ones(width, bool)]
        for i in range(width):
            rows += [np.eye(width, dtype=bool)[i], ~np.eye(width, dtype=bool)[i]]
        value = np.array(rows)
        x = b.operand(T.TENSOR_BOOL8, value.shape)
        axes = b.constant(T.TENSOR_INT32, np.array([1], np.int32))
        keep = self.signature.arg("keep_dims").resolve(self.variant.types)
        out = b.operand(T.TENSOR_BOOL8, (value.shape[0],))
        b.operation(self.record.type, [x, axes, b.constant(keep, 0)], [out])
        return b.build([x], [out]), [value]


def _bool_cases() -> Iterator[BoolCase]:
    for record in records():
        for sig in record.signatures:
            for variant in record.variants:
                if [a.resolve(variant.types) for a in sig.outputs] != [T.TENSOR_BOOL8]:
                    continue
                data = [a.resolve(variant.types) for a in sig.inputs if a.name != "axes" and not a.optional]
                if data and data[0].is_quant:
                    for scales in QUANT_SCALES:
                        yield BoolCase(record, sig, variant, scales)
                else:
                    yield BoolCase(record, sig, variant)


BOOL_CASES = [pytest.param(c, id=c.id) for c in _bool_cases()]


def _describe(feeds: list[np.ndarray], i: int) -> str:
    """Input element ``i`` of every feed (a row of a reduction's input)."""
    return ", ".join(repr(f[i].tolist()) for f in feeds)


@pytest.mark.req("ACC-3")
@pytest.mark.parametrize("case", BOOL_CASES)
def test_boolean_results_are_exact(driver, case):
    model, feeds = case.model()
    expected = [np.asarray(e) for e in run_model(model, feeds)]
    actual = _run(driver, model, feeds)
    for e, a in zip(expected, actual, strict=True):
        wrong = np.flatnonzero(e.astype(bool).ravel() != a.astype(bool).ravel())
        if wrong.size:
            shown = "; ".join(f"inputs ({_describe(feeds, i)}) gave {bool(a.ravel()[i])}"
                              for i in wrong[:4])
            pytest.fail(f"ACC-3: {case.id}: {wrong.size} of {e.size} booleans wrong: {shown}")


# -- ACC-4: signed and unsigned 8-bit variants --------------------------------------------------

#: The operations whose signed and unsigned variants need not agree (ACC-4).
NOT_OFFSET = {OperationType.CAST, OperationType.HASHTABLE_LOOKUP, OperationType.LSH_PROJECTION,
              OperationType.PAD_V2, OperationType.QUANTIZED_16BIT_LSTM}


def _twins() -> Iterator[tuple[OpRecord, Variant, Variant]]:
    """(record, unsigned variant, its signed twin): every variant using TENSOR_QUANT8_ASYMM
    whose bindings with TENSOR_QUANT8_ASYMM_SIGNED in its place are another variant."""
    for record in records():
        if record.type in NOT_OFFSET:
            continue
        by_bindings = {v.bindings: v for v in record.variants}
        for variant in record.variants:
            if U8 not in variant.types.values():
                continue
            twin = by_bindings.get(tuple((k, S8 if t is U8 else t) for k, t in variant.bindings))
            if twin is not None:
                yield record, variant, twin


def _signed(case: OpCase, twin: Variant) -> OpCase:
    """The same case in the signed type: every TENSOR_QUANT8_ASYMM operand becomes
    TENSOR_QUANT8_ASYMM_SIGNED with its zero point and values 128 lower."""
    def operand(o: Operand | None) -> Operand | None:
        if o is None or o.type is not U8:
            return o
        return dataclasses.replace(o, type=S8, zero_point=o.zero_point - 128)

    inputs = [dataclasses.replace(ci, operand=operand(ci.operand),
                                  value=_shift(ci.value) if ci.operand is not None and ci.operand.type is U8
                                  else ci.value)
              for ci in case.inputs]
    outputs = [operand(o) for o in case.outputs]
    expected = [_shift(e) if o.type is U8 else e for e, o in zip(case.expected, case.outputs, strict=True)]
    return dataclasses.replace(case, variant=twin, inputs=inputs, outputs=outputs, expected=expected,
                               version=max(case.version, twin.version))


def _shift(value: np.ndarray) -> np.ndarray:
    return (np.asarray(value).astype(np.int16) - 128).astype(np.int8)


def _half_steps(case: OpCase) -> OpCase | None:
    """The case with every freely quantised output given twice the scale (and the zero point) of
    its first quantised input: copies, pools, sums and means of the input then land on exact
    half steps, where rounding half away from zero, half to even or half up differ. None when
    no output is free to change, or the result is not a valid model."""
    first = next((ci.operand for ci in case.inputs if ci.operand is not None and ci.operand.type is U8
                  and ci.operand.channel_quant is None and ci.operand.type.is_tensor), None)
    free = [a.quant.kind == "free" and o.type is U8
            for a, o in zip(case.signature.output_args(len(case.outputs)), case.outputs, strict=True)]
    if first is None or not any(free):
        return None
    outputs = [dataclasses.replace(o, scale=float(np.float32(2 * first.scale)), zero_point=first.zero_point)
               if f else o for o, f in zip(case.outputs, free, strict=True)]
    halved = dataclasses.replace(case, outputs=outputs)
    try:
        model, feeds = halved.model()
        validate_model(model)
    except (ValidationError, HalError):
        return None
    return dataclasses.replace(halved, expected=[np.asarray(e) for e in run_model(model, feeds)])


def _twin_keys(slow: bool) -> Iterator:
    """Each twin pair's cases: in CI the first signature, default layout, no activation, seed
    0, as sampled and with its outputs on half steps (``_half_steps``); the slow sweep every
    signature, layout, activation and seed of the catalogue's matrix, as sampled."""
    twins = {(r.type, v): t for r, v, t in _twins()}
    seen = set()
    for key in enumerate_cases():
        record, sig, variant, nchw, act, seed = key
        twin = twins.get((record.type, variant))
        if twin is None:
            continue
        first = sig is record.signatures[0] and not nchw and not act and seed == 0
        if first == slow:
            continue
        if not slow and (record.type, variant) in seen:
            continue
        seen.add((record.type, variant))
        marks = [pytest.mark.slow] if slow else []
        yield pytest.param(key, twin, False, id=case_id(*key), marks=marks)
        if not slow and _half_steps(sample_case(*key)) is not None:
            yield pytest.param(key, twin, True, id=f"{case_id(*key)}-half_steps")


@pytest.mark.req("ACC-4")
@pytest.mark.parametrize(("key", "twin", "half_steps"), [*_twin_keys(False), *_twin_keys(True)])
def test_signed_and_unsigned_agree(driver, key, twin, half_steps):
    unsigned = sample_case(*key)
    if half_steps:
        unsigned = _half_steps(unsigned)
    signed = _signed(unsigned, twin)
    got_unsigned = _run(driver, *unsigned.model())
    got_signed = _run(driver, *signed.model())
    for i, (o, u, s) in enumerate(zip(unsigned.outputs, got_unsigned, got_signed, strict=True)):
        want = _shift(u) if o.type is U8 else u
        same = np.array_equal(s, want, equal_nan=s.dtype.kind == "f")
        if not same:
            diff = np.flatnonzero(s.ravel().astype(np.float64) != want.ravel().astype(np.float64))
            j = int(diff[0]) if diff.size else 0
            pytest.fail(f"ACC-4: output {i}: the signed variant differs from the unsigned one minus 128 in "
                        f"{diff.size} of {s.size} elements; first at {j}: signed {s.ravel()[j]}, "
                        f"unsigned {u.ravel()[j]}")
