"""Edge cases declared per operation (PyTorch OpInfo's edge samples, for the catalogue).

The samplers of the records draw from the middle of every range, so behaviour that only
matters at the edges is never exercised. An ``Edge`` names one such place; the case
builder (``nncert.testing.cases.sample_case(..., edge=NAME)``) draws an edge case through
the same path as every other case, with a seed derived from the case id and the golden
from the reference kernels. An edge changes the draw in one or more of these ways:

- ``sample`` replaces the record's sampler, ``adjust`` edits what it drew (both in NHWC);
- ``pair_dims`` and ``window`` answer the shared samplers of broadcasting pairs
  (``elementwise.broadcast_pair_dims``) and of window geometry (``window.sample_window``);
- ``activation``, ``floats`` and ``scales`` set the fused activation and the data ranges;
- ``output_quant`` sets how a free quantised output's scale and zero point are chosen;
- ``reached`` checks that a draw really is at the edge (a saturating activation really
  saturates); the builder draws again, deterministically, until one is.

Families shared by many records live here: ``SATURATE`` and ``QUANT`` apply by themselves
to every record with a fused activation and every quantised variant (``edges_of``); the
others (``long_reduction``, ``axis_of_1``, ``BROADCAST``, ``WINDOW``) are declared in the
records' ``edges``. ``heavy`` edges (tens of thousands of elements) run on the synchronous
path in CI and on every path under ``-m slow``. The families are listed in ops/README.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from nncert.hal.types import FusedActivationFunc, Version
from nncert.hal.types import OperandType as T
from nncert.ops.base import ACTIVATION_RANGE, OpRecord, SampleContext, Signature, Variant
from nncert.ops.window import IMPLICIT, PADDING_SAME, PADDING_VALID, effective_size, implicit_padding

Applies = Callable[[OpRecord, Signature, Variant], bool]

#: Reached: the draw is at the edge on every side it has.
FULL = 2
#: Reached on the side that matters most (the upper clamp of RELU1/RELU6).
PARTIAL = 1


@dataclass(frozen=True)
class Edge:
    """One named edge case of an operation; see the module doc for what each hook does."""

    name: str
    family: str
    doc: str
    applies: Applies | None = None
    sample: Callable[[SampleContext], None] | None = None
    adjust: Callable[[SampleContext], None] | None = None
    activation: int = 0
    floats: tuple[float, float] | None = None
    scales: tuple[float, float] | None = None
    #: "" (as usual), "pre_activation" (cover the golden before the fused activation, so
    #: that a clamp shows in the quantised output), "zero_point_min" / "zero_point_max" (the
    #: zero point at the type's extreme, the scale covering the golden's side of zero),
    #: "range" (cover the golden's range exactly, however small the scale gets), "unit" (scale
    #: exactly 1, the zero point placing the golden's range inside the type's as far as it fits),
    #: "below_inputs" (OVER_OUTPUT_SMALL of the smallest quantised input's scale, the zero point
    #: placing the golden's values within that scale's reach inside the type).
    output_quant: str = ""
    #: Real output 0 before the fused activation -> FULL, PARTIAL or 0 (draw again).
    reached: Callable[[np.ndarray], int] | None = None
    heavy: bool = False
    pair_dims: Callable[[SampleContext], tuple[tuple[int, ...], tuple[int, ...]]] | None = None
    #: (context, filter_h, filter_w, dilation allowed, pool) -> input (height, width); sets
    #: the padding, stride and dilation scalars as ``window.sample_window`` does.
    window: Callable[[SampleContext, int, int, bool, bool], tuple[int, int]] | None = None
    #: The HAL version whose specification first defines what the edge expects (an L2
    #: normalisation of an all-zero slice: zeros since 1.3): the case needs a driver of it.
    since: Version | None = None


@dataclass(frozen=True)
class Without:
    """In a record's ``edges``: a shared edge that cannot happen for it, and why (L2 pooling
    is never negative, so a fused RELU has nothing to clamp)."""

    name: str
    reason: str


#: ``edges_of``'s answers by the identity of its arguments (the catalogue's records live as long
#: as the process; each entry holds its arguments, so an identity is never reused for another).
_EDGES: dict[tuple[int, int, int], tuple[OpRecord, Signature, Variant, tuple[Edge, ...]]] = {}


def edges_of(record: OpRecord, sig: Signature, var_: Variant) -> tuple[Edge, ...]:
    """The edges of one signature and type variant: the record's own, then the shared
    families that apply by themselves (saturating activations, quantisation extremes),
    less those the record rules out (``Without``). Collecting the per-operation suite asks
    for each about seven times (every path of every edge case)."""
    key = (id(record), id(sig), id(var_))
    hit = _EDGES.get(key)
    if hit is None:
        hit = _EDGES[key] = (record, sig, var_, _edges_of(record, sig, var_))
    return hit[3]


def _edges_of(record: OpRecord, sig: Signature, var_: Variant) -> tuple[Edge, ...]:
    own = [e for e in record.edges if isinstance(e, Edge)]
    ruled_out = {w.name for w in record.edges if isinstance(w, Without)}
    found = [e for e in (*own, *SATURATE, *QUANT) if e.name not in ruled_out and
             (e.applies is None or e.applies(record, sig, var_))]
    names = [e.name for e in found]
    if len(set(names)) != len(names):
        raise RuntimeError(f"{record.name} declares an edge twice: {names}")
    return tuple(found)


def find(record: OpRecord, sig: Signature, var_: Variant, name: str) -> Edge:
    for e in edges_of(record, sig, var_):
        if e.name == name:
            return e
    raise ValueError(f"{record.name} {var_.label} has no edge case {name!r}")


def grid(s: SampleContext, dims: Sequence[int], lo: int, hi: int) -> np.ndarray:
    """Multiples of 1/8 in [lo/8, hi/8]: sums and products of many of them are exact in
    float32 (in any order), so a long accumulation has one right answer, which a float16
    accumulator misses."""
    return s.draw.integers(dims, lo, hi) / 8.0


# ---------------------------------------------------------------------------------------
# Saturating fused activations (every record with an activation input)


def _has_activation(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    return bool(record.activation) and sig.outputs[0].resolve(var_.types) is not T.TENSOR_INT32


def _crosses(act: FusedActivationFunc) -> Callable[[np.ndarray], int]:
    lo, hi = ACTIVATION_RANGE[act]

    def reached(pre: np.ndarray) -> int:
        x = pre[np.isfinite(pre)]
        above, below = bool((x > hi).any()), bool((x < lo).any())
        inside = bool(((x > lo) & (x < hi)).any())
        key = above if hi != math.inf else below
        if not key:
            return 0
        return FULL if inside and (below or lo == -math.inf) and (above or hi == math.inf) else PARTIAL

    return reached


SATURATE = tuple(
    Edge(f"saturate_{act.name.lower()}", "saturate",
         f"fused {act.name} with results well beyond its bounds on both sides",
         applies=_has_activation, activation=int(act), floats=(-8.0, 8.0), scales=(0.05, 0.1),
         output_quant="pre_activation", reached=_crosses(act))
    for act in (FusedActivationFunc.RELU, FusedActivationFunc.RELU1, FusedActivationFunc.RELU6))


# ---------------------------------------------------------------------------------------
# Extreme but valid quantisation parameters (every quantised variant)

_EIGHT_BIT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM)


def _quant_inputs(sig: Signature, var_: Variant) -> list[str]:
    return [a.name for a in sig.inputs if a.resolve(var_.types) in _EIGHT_BIT]


def _asymm(t: T) -> bool:
    lo, hi = t.quant_range
    return lo != -hi


def _quant_applies(zero_point: str = "") -> Applies:
    """Records that dequantize, with an 8-bit quantised input or a free 8-bit output;
    ``zero_point``: one that is asymmetric (and, for "max", no input that must be positive:
    the zero point at the top leaves no positive value)."""

    def applies(record: OpRecord, sig: Signature, var_: Variant) -> bool:
        if not record.dequantize:
            return False
        args = [a for a in sig.inputs if a.resolve(var_.types) in _EIGHT_BIT]
        outs = [a for a in sig.outputs if a.resolve(var_.types) in _EIGHT_BIT and a.quant.kind == "free"]
        if zero_point:
            args = [a for a in args if _asymm(a.resolve(var_.types))]
            outs = [a for a in outs if _asymm(a.resolve(var_.types))]
            if zero_point == "max" and any(a.domain == "positive" for a in args):
                return False
        return bool(args or outs)

    return applies


def _zero_points(which: str) -> Callable[[SampleContext], None]:
    def adjust(s: SampleContext) -> None:
        for name in _quant_inputs(s.signature, s.variant):
            t = s.type(name)
            if not _asymm(t):
                continue
            lo, hi = t.quant_range
            for item in _items(s, name):
                item.zero_point = lo if which == "min" else hi

    return adjust


def _scales(first: tuple[float, float], rest: tuple[float, float]) -> Callable[[SampleContext], None]:
    """The first quantised input's scale from ``first``, the others' from ``rest``."""

    def adjust(s: SampleContext) -> None:
        k = 0
        for name in _quant_inputs(s.signature, s.variant):
            for item in _items(s, name):
                if item.channel_dim is not None:
                    continue
                lo, hi = first if k == 0 else rest
                item.scale = lo if lo == hi else \
                    float(np.float32(math.exp(s.draw.float(math.log(lo), math.log(hi)))))
                if item.zero_point is None:  # what the case builder would draw for a free one
                    t = s.type(name)
                    item.zero_point = s.draw.int(*t.quant_range) if _asymm(t) else 0
                k += 1

    return adjust


def _items(s: SampleContext, name: str) -> list:
    got = s.inputs.get(name)
    if got is None:
        return []
    items = got if isinstance(got, list) else [got]
    return [i for i in items if not i.omitted and i.dims is not None]


def _one_quant_input(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    """Element-wise records of one 8-bit quantised tensor input that dequantize it (activations,
    DEQUANTIZE, RSQRT): a kernel of 256 entries at most, often a lookup table."""
    return (record.dequantize and len(sig.inputs) == 1 and len(sig.outputs) == 1
            and sig.inputs[0].resolve(var_.types) in _EIGHT_BIT
            and sig.inputs[0].domain in (None, "positive", "nonzero"))


def _every_raw_value(s: SampleContext) -> None:
    """The input holds each value of its type once, in order, along its last axis: its zero
    point in the middle (at the bottom for a positive domain, so all but one are in it; a
    nonzero domain leaves out the zero point), so that both sides of zero reach as far as
    the scale the record drew for its function's interesting range."""
    arg = s.signature.inputs[0]
    t = s.type(arg.name)
    lo, hi = t.quant_range
    for item in _items(s, arg.name):
        if _asymm(t):
            item.zero_point = lo if arg.domain == "positive" else (lo + hi + 1) // 2
        raw = np.arange(lo, hi + 1)
        if arg.domain == "positive":
            raw = raw[raw > item.zero_point]
        elif arg.domain == "nonzero":
            raw = raw[raw != item.zero_point]
        item.dims = (*(1 for _ in item.dims[:-1]), raw.size)
        item.value = raw.reshape(item.dims)


QUANT = (
    Edge("quant_every_value", "quant",
         "the one 8-bit input holds each of its type's values once, at the case's scale and zero "
         "point: a table-driven kernel checked entry by entry",
         applies=_one_quant_input, adjust=_every_raw_value),
    Edge("quant_zero_point_min", "quant",
         "every 8-bit asymmetric input and free output with its zero point at the type's minimum",
         applies=_quant_applies("min"), adjust=_zero_points("min"), output_quant="zero_point_min"),
    Edge("quant_zero_point_max", "quant",
         "every 8-bit asymmetric input and free output with its zero point at the type's maximum",
         applies=_quant_applies("max"), adjust=_zero_points("max"), output_quant="zero_point_max"),
    Edge("quant_scale_tiny", "quant",
         "8-bit inputs with scales near 1e-7 (below float16's normal range), outputs to match",
         applies=_quant_applies(), adjust=_scales((1e-7, 1e-6), (1e-7, 1e-6)), output_quant="range"),
    Edge("quant_scale_ratio", "quant",
         "the first 8-bit input with a scale near 1, the others near 1e-4: input/output scale "
         "ratios far from 1 both ways",
         applies=_quant_applies(), adjust=_scales((0.25, 1.0), (1e-4, 4e-4)), output_quant="range"),
    Edge("quant_scale_one", "quant",
         "8-bit inputs and free outputs of scale exactly 1: integer real values and requantisation "
         "multipliers of exactly 1 (the power-of-two boundary of fixed-point multipliers)",
         applies=_quant_applies(), adjust=_scales((1.0, 1.0), (1.0, 1.0)), output_quant="unit"),
    Edge("quant_scale_large", "quant",
         "8-bit inputs with scales of 64..1024: real values past float16's largest (65504), "
         "outputs to match",
         applies=_quant_applies(), adjust=_scales((64.0, 1024.0), (64.0, 1024.0)), output_quant="range"),
)


# ---------------------------------------------------------------------------------------
# Input scales far above the output's (declared by ADD and SUB)

#: Input-to-output scale ratios of the ``quant_scale_over_output`` edge: Android's CPU ADD and
#: SUB rescale with a 20-bit left shift and take a ratio below 2**19 (LiteRT's kernels alike).
OVER_OUTPUT_RATIOS = (2.0**16, 2.0**18.5)
#: The output's scale, as a fraction of the smaller input's.
OVER_OUTPUT_SMALL = 0.75


def _two_quant_inputs(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    return len(_quant_inputs(sig, var_)) == 2 and all(
        a.resolve(var_.types) in _EIGHT_BIT for a in sig.outputs[:1])


def _over_output(s: SampleContext) -> None:
    """Two inputs of one shape (rank 2..4, 2..5 per dimension: a one-element tensor may take
    another code path). One (either) with a scale 2**16..2**18.5 times the output's, most of
    its values at its zero point (real 0; the others one step off, far past the output's
    range) and the zero point near the type's top, so that zero_point x scale / output scale
    is large; the other with a usual scale and values anywhere. The output (policy
    ``below_inputs``) gets 3/4 of the smaller scale."""
    dims = s.dims(s.draw.int(2, 4), 2, 5)
    big, small = _quant_inputs(s.signature, s.variant)
    s.tensor(big, dims)
    s.tensor(small, dims)
    if s.draw.bool():
        big, small = small, big
    lo_ratio, hi_ratio = OVER_OUTPUT_RATIOS
    ratio = math.exp(s.draw.float(math.log(lo_ratio), math.log(hi_ratio)))
    small_scale = float(np.float32(math.exp(s.draw.float(math.log(0.005), math.log(0.05)))))
    big_scale = float(np.float32(OVER_OUTPUT_SMALL * small_scale * ratio))
    for name, scale in ((small, small_scale), (big, big_scale)):
        lo, hi = s.type(name).quant_range
        for item in _items(s, name):
            item.scale = scale
            if name == small:
                item.zero_point = s.draw.int(lo, hi)
                item.value = s.draw.integers(item.dims, lo, hi)
            else:
                item.zero_point = s.draw.int(hi - 24, hi - 1)
                step = s.draw.integers(item.dims, -1, 1) * (s.draw.integers(item.dims, 0, 3) == 0)
                item.value = item.zero_point + step


SCALE_OVER_OUTPUT = Edge(
    "quant_scale_over_output", "quant",
    "one 8-bit input's scale 2**16..2**18.5 times the output's (the largest ratio Android's "
    "rescaling takes is 2**19), its values at its zero point or one step off (saturating), "
    "its zero point near the type's top: the zero-point terms must cancel exactly",
    applies=_two_quant_inputs, sample=_over_output, output_quant="below_inputs")



# ---------------------------------------------------------------------------------------
# Requantisation multipliers above 1 (declared by the filtered operations)


def _quant_data(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    return sig.inputs[0].resolve(var_.types) in _EIGHT_BIT


def _small_sums(s: SampleContext) -> None:
    """Every quantised tensor input (data, filter) at its zero point or up to two steps off
    (half of them), the int32 bias 0 or one step: each output's integer sum is a few dozen
    steps of input x filter at most, so the output (policy "range") gets a scale below their
    product."""
    for a in s.signature.inputs:
        t = s.type(a.name)
        if not t.is_tensor or not (t.is_quant or t is T.TENSOR_INT32):
            continue
        for item in _items(s, a.name):
            if t is T.TENSOR_INT32:
                item.value = s.draw.integers(item.dims, -1, 1)
                continue
            if _asymm(t):
                lo, hi = t.quant_range
                item.zero_point = s.draw.int(lo + 2, hi - 2)
            elif item.channel_dim is None:
                item.zero_point = 0
            zp = item.zero_point or 0
            step = s.draw.integers(item.dims, -2, 2) * (s.draw.integers(item.dims, 0, 1) == 0)
            item.value = zp + step


MULTIPLIER_ABOVE_ONE = Edge(
    "quant_multiplier_above_one", "quant",
    "an output scale below input scale x filter scale (valid since HAL 1.2): sums of a few "
    "steps, the output covering just them, a requantisation multiplier above 1 (2 to 255) that "
    "a right-shift-only fixed-point path cannot take",
    applies=_quant_data, adjust=_small_sums, output_quant="range",
    reached=lambda pre: FULL if np.any(pre[np.isfinite(pre)] != 0) else 0)


def _wide_bias(s: SampleContext) -> None:
    """The int32 bias past 16 bits, either sign (the samplers keep it within +-5000 steps)."""
    for item in _items(s, "bias"):
        sign = np.where(s.draw.integers(item.dims, 0, 1) == 1, 1, -1)
        item.value = sign * s.draw.integers(item.dims, 2**16, 2**22)


BIAS_WIDE = Edge(
    "quant_bias_wide", "quant",
    "an int32 bias of 2^16..2^22 steps (input scale x filter scale), either sign: past what a "
    "16-bit bias register holds; the output covers the golden",
    applies=_quant_data, adjust=_wide_bias, output_quant="range")

# ---------------------------------------------------------------------------------------
# Long reductions and accumulations (declared by the records, which know their inputs)


def long_reduction(sample: Callable[[SampleContext], None], doc: str) -> Edge:
    """An accumulation over thousands of elements: ``sample`` draws it (``grid`` data
    makes float32 results exact). Heavy: the synchronous path in CI."""
    return Edge("long_reduction", "long", doc, sample=sample, heavy=True)


# ---------------------------------------------------------------------------------------
# Wide int32 data (declared by the records with TENSOR_INT32 data)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Magnitudes of ``int32_wide``'s "big" values: past float32's 24-bit significand.
_PAST_FLOAT32 = 2**24 + 1
#: Bound of the "small" operand of ``big_small`` (a multiplier or divisor).
_SMALL = 15


def _int32_data(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    return var_.types.get("T") is T.TENSOR_INT32 and any(a.type == "T" for a in sig.inputs)


def _wide_values(s: SampleContext, kind: str, k: int, dims: tuple[int, ...], value, base: int) -> np.ndarray:
    n = int(np.prod(dims))
    if kind == "any":  # anywhere in the type, both extremes included
        v = s.draw.integers(dims, INT32_MIN, INT32_MAX).reshape(-1)
        if n >= 2:
            v[s.draw.int(0, n - 1)] = INT32_MIN
            v[s.draw.int(0, n - 1)] = INT32_MAX
        return v.reshape(dims)
    if kind == "half":  # |v| < 2^30: sums, differences and negations stay in the type
        return s.draw.integers(dims, -(2**30 - 1), 2**30 - 1)
    if kind == "near":  # one common offset past 2^30 plus the draw's own values (order and ties kept)
        small = s.draw.integers(dims, -20, 20) if value is None else np.asarray(value, np.int64)
        return base + small
    # big_small: the first data input past 2^24 (either sign), the others in [-15, 15]
    bound = (2**31 - 1) // _SMALL
    if k == 0:
        sign = np.where(s.draw.integers(dims, 0, 1) == 1, 1, -1)
        return sign * s.draw.integers(dims, _PAST_FLOAT32, bound)
    return s.draw.integers(dims, -_SMALL, _SMALL)


def int32_wide(kind: str) -> Edge:
    """TENSOR_INT32 data past float32's 24-bit significand, which the samplers (values within
    +-20) never reach: a kernel that runs int32 through float32 (a GPU's float textures or ALU)
    is exact there and wrong here. ``kind``: "any" (anywhere in the type, INT32_MIN and
    INT32_MAX included: data movement, MAXIMUM / MINIMUM), "half" (|v| < 2^30: ADD, SUB, ABS,
    NEG stay in range), "near" (a common offset of 2^30..2^31 - 2^20, either sign, plus the
    sampler's own values: distinct integers equal in float32, for comparisons, ARGMAX and
    TOPK_V2), "big_small" (the first data input past 2^24, the others in [-15, 15]: MUL and
    DIV stay in range)."""

    def adjust(s: SampleContext) -> None:
        base = s.draw.choice((1, -1)) * s.draw.int(2**30, 2**31 - 2**20)
        names = [a.name for a in s.signature.inputs if a.type == "T"]
        for k, name in enumerate(names):
            for item in _items(s, name):
                v = _wide_values(s, kind, k, tuple(item.dims), item.value, base)
                if s.signature.arg(name).domain == "nonzero":
                    v = np.where(v == 0, 1, v)
                item.value = np.asarray(v, np.int64).astype(np.int32)

    docs = {"any": "anywhere in the type, INT32_MIN and INT32_MAX included",
            "half": "of magnitude up to 2^30 (results stay in range)",
            "near": "distinct values a few units apart past 2^30 (equal once in float32)",
            "big_small": "the first past 2^24, the others in [-15, 15] (results stay in range)"}
    return Edge("int32_wide", "int32", f"int32 data {docs[kind]}", applies=_int32_data, adjust=adjust)



# ---------------------------------------------------------------------------------------
# float16 intermediates past float16's range (declared by the normalisations and means)


def float16_wide(lo: float, hi: float, signed: bool, doc: str) -> Edge:
    """The float16 ``input`` of magnitudes ``lo``..``hi`` (either sign where ``signed``): the
    result is in float16's range, but the squares or sums on the way to it are not, so a
    kernel that keeps its intermediates in float16 gets inf (or 0) where the reference, like
    any kernel computing in float32, gets the result."""

    def adjust(s: SampleContext) -> None:
        for item in _items(s, "input"):
            x = s.draw.array(item.dims, lo, hi)
            if signed:
                x = x * np.where(s.draw.integers(item.dims, 0, 1) == 1, 1.0, -1.0)
            item.value = x

    return Edge("float16_wide", "float16", doc,
                applies=lambda record, sig, var_: var_.primary is T.TENSOR_FLOAT16, adjust=adjust)

# ---------------------------------------------------------------------------------------
# Float data far past the samplers' +-2 (declared by the exact float operations)

#: ``float_wide``'s magnitudes per type: (smallest, a value past which a narrower path breaks).
_FLOAT_WIDE = {T.TENSOR_FLOAT32: (1e5, 2.0**31), T.TENSOR_FLOAT16: (100.0, 32768.0)}


def float_wide(sign: str, types: tuple[T, ...] = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)) -> Edge:
    """Float tensor inputs of magnitudes log-uniform from 1e5 to float32's largest (float16:
    100 to 65504), every one of them ``sign`` ("negative", "positive" or "mixed": either),
    one at the type's largest finite magnitude and one past 2^31 (float16: 32768). The
    samplers keep floats within +-2, so a kernel that starts a maximum at -65504 (a float16
    shader's constant reused), clamps at 65504, takes |x| as sqrt(x * x), FLOOR through an
    int32 (int16) conversion, or MAXIMUM as (a + b + |a - b|) / 2 passed every generated case.
    Only for operations whose result is exact (moves, comparisons, ABS, FLOOR): the golden
    is then exact whatever the magnitude."""

    def adjust(s: SampleContext) -> None:
        t = s.variant.primary
        lo, past = _FLOAT_WIDE[t]
        top = float(np.finfo(np.float32 if t is T.TENSOR_FLOAT32 else np.float16).max)
        for a in s.signature.inputs:
            if s.type(a.name) is not t:
                continue
            for item in _items(s, a.name):
                dims = tuple(item.dims)
                mag = np.exp(s.draw.array(dims, math.log(lo), math.log(top))).reshape(-1)
                if mag.size >= 2:
                    mag[s.draw.int(0, mag.size - 1)] = top
                mag[s.draw.int(0, mag.size - 1)] = s.draw.float(past, top)
                if sign == "mixed":
                    sgn = np.where(s.draw.integers(mag.shape, 0, 1) == 1, 1.0, -1.0)
                else:
                    sgn = -1.0 if sign == "negative" else 1.0
                item.value = (np.minimum(mag, top) * sgn).reshape(dims)

    docs = {"negative": "every one negative", "positive": "every one positive", "mixed": "either sign"}
    return Edge("float_wide", "float", f"float data of magnitudes 1e5..3.4e38 (float16: 100..65504), "
                f"{docs[sign]}, one at the type's largest",
                applies=lambda record, sig, var_: var_.primary in types, adjust=adjust)


# ---------------------------------------------------------------------------------------
# Counts past 8 bits (declared by the records)

#: ``long_sequence``'s time steps: past 256, so that a step counter held in 8 bits wraps.
LONG_SEQUENCE = (257, 300)


def long_sequence(sample: Callable[[SampleContext, int], None]) -> Edge:
    """A sequence of 257..300 time steps (the samplers draw at most a few): a recurrent
    kernel counting steps in 8 bits stops, or overwrites its first outputs, past step 255.
    ``sample(s, steps)`` draws the record's case with that many. Heavy: the real runtimes take
    seconds to a minute to compile each (ONNX Runtime 74 s for the 24 cases on two paths)."""
    return Edge("long_sequence", "long", f"{LONG_SEQUENCE[0]}..{LONG_SEQUENCE[1]} time steps: past an "
                "8-bit step counter",
                sample=lambda s: sample(s, s.draw.int(*LONG_SEQUENCE)), heavy=True)


def past_255(doc: str, *, sample: Callable[[SampleContext], None] | None = None,
             adjust: Callable[[SampleContext], None] | None = None, applies: Applies | None = None) -> Edge:
    """A size, offset, count or index of 256..600 where the samplers' stay below 8 (TILE's
    multiples, PAD's paddings, SLICE's begin, TOPK_V2's indices): a driver holding it in 8
    bits wraps. Cheap: a few hundred elements."""
    return Edge("count_past_255", "byte", doc, applies=applies, sample=sample, adjust=adjust)


# ---------------------------------------------------------------------------------------
# Length-1 axes (declared by the reductions and normalisations)


def axis_of_1(axis_arg: str, applies: Applies | None = None) -> Edge:
    """The reduced or normalised axes (the ``axis_arg`` input: a scalar or a 1-D tensor,
    default the arg's default) of length 1; an explicit input value is cut to match."""

    def adjust(s: SampleContext) -> None:
        item = s.inputs["input"]
        dims = list(item.dims)
        got = s.inputs.get(axis_arg)
        value = s.signature.arg(axis_arg).default if got is None else got.value
        for a in sorted({int(a) % len(dims) for a in np.asarray(value).reshape(-1)}):
            dims[a] = 1
            if item.value is not None:
                item.value = np.take(np.asarray(item.value), [0], axis=a)
        item.dims = tuple(dims)

    return Edge("axis_of_1", "length_1", f"every axis named by {axis_arg} has length 1",
                applies=applies, adjust=adjust)


# ---------------------------------------------------------------------------------------
# Broadcast corners (declared by every broadcasting binary operation)


def _ordered(s: SampleContext, a: tuple[int, ...], b: tuple[int, ...]):
    return (a, b) if s.draw.bool() else (b, a)


def _complementary(s: SampleContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank, flip = s.draw.int(2, 4), s.draw.int(0, 1)
    a, b = [], []
    for i in range(rank):
        n = s.draw.int(2, 4)
        a.append(n if (i + flip) % 2 else 1)
        b.append(1 if (i + flip) % 2 else n)
    return tuple(a), tuple(b)


def _rank_mismatch(s: SampleContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    big = s.dims(s.draw.int(3, 4), 2, 4)
    small = big[len(big) - s.draw.int(1, 2):]
    return _ordered(s, big, small)


def _one_element(s: SampleContext) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return _ordered(s, s.dims(s.draw.int(2, 4), 2, 4), (1,))


BROADCAST = (
    Edge("broadcast_complementary", "broadcast",
         "both operands broadcast: complementary 1s, as [2, 1] x [1, 3]", pair_dims=_complementary),
    Edge("broadcast_rank_mismatch", "broadcast",
         "a rank-3/4 operand against a rank-1/2 one (its trailing dimensions)", pair_dims=_rank_mismatch),
    Edge("broadcast_one_element", "broadcast", "a [1] operand against a rank-2..4 one",
         pair_dims=_one_element),
)


# ---------------------------------------------------------------------------------------
# Padding, stride and dilation at the border of validity (declared by the windowed ops)


def _has_dilation(record: OpRecord, sig: Signature, var_: Variant) -> bool:
    return any(a.name == "dilation_w" for a in sig.inputs)


def _window_edge(kind: str) -> Callable[[SampleContext, int, int, bool, bool], tuple[int, int]]:
    def window(s: SampleContext, filter_h: int, filter_w: int, dilation: bool, pool: bool) -> tuple[int, int]:
        implicit = s.signature.name == IMPLICIT
        scheme = PADDING_SAME if kind in ("stride_over_filter", "same_odd") else PADDING_VALID
        sizes, strides, dils, pads = [], [], [], []
        for f in (filter_h, filter_w):
            d = s.draw.int(2, 4) if kind == "dilation_border" and dilation else 1
            eff = effective_size(f, d)
            limit = f - 1 if pool else 2  # a pooling window must overlap the input
            p = (0, 0)
            if kind == "stride_over_filter":
                st = s.draw.int(max(f + 1, 4), f + 3)
                if not implicit:
                    p = (s.draw.int(0, min(2, limit)), s.draw.int(0, min(2, limit)))
                n = s.draw.int(max(1, eff - sum(p)) + st, max(1, eff - sum(p)) + 2 * st)
            elif kind == "filter_covers_input":
                st = s.draw.int(1, 3)
                if not implicit:
                    head = s.draw.int(0, min(limit, eff - 1))
                    p = (head, s.draw.int(0, min(limit, eff - 1 - head)))
                n = eff - sum(p)
            elif kind == "dilation_border":
                st = s.draw.int(1, 3)
                if not implicit:
                    p = (s.draw.int(0, 2), s.draw.int(0, 2))
                k = s.draw.int(0, 2)
                while eff + st * k - sum(p) < 1:
                    k += 1
                n = eff + st * k - sum(p)  # the last window's last tap on the last padded row
            else:  # same_odd: padding split unevenly (the tail one larger)
                st = s.draw.int(1, 2)
                n = s.draw.int(1, 4)
                if implicit:
                    odd = [m for m in range(1, 9) if sum(implicit_padding(m, st, f, PADDING_SAME)) % 2]
                    n = odd[s.draw.int(0, len(odd) - 1)] if odd else n
                elif limit >= 1:
                    head = s.draw.int(0, min(limit, 2) - 1)
                    p = (head, head + 1)
                    n = s.draw.int(max(1, eff - sum(p)), max(1, eff - sum(p)) + 3)
            sizes.append(n)
            strides.append(st)
            dils.append(d)
            pads.append(p)
        if implicit:
            s.scalar("padding", scheme)
        else:
            s.scalar("pad_left", pads[1][0])
            s.scalar("pad_right", pads[1][1])
            s.scalar("pad_top", pads[0][0])
            s.scalar("pad_bottom", pads[0][1])
        s.scalar("stride_w", strides[1])
        s.scalar("stride_h", strides[0])
        if kind == "dilation_border" and dilation:
            s.scalar("dilation_w", dils[1])
            s.scalar("dilation_h", dils[0])
        return sizes[0], sizes[1]

    return window


WINDOW = (
    Edge("window_stride_over_filter", "window",
         "strides of 4 and more, larger than the filter (rows skipped; SAME padding for that stride)",
         window=_window_edge("stride_over_filter")),
    Edge("window_filter_covers_input", "window",
         "the (dilated) filter as large as the padded input: one output position",
         window=_window_edge("filter_covers_input")),
    Edge("window_dilation_border", "window",
         "dilation 2..4 whose last tap lands on the last (padded) row and column",
         applies=_has_dilation, window=_window_edge("dilation_border")),
    Edge("window_same_odd", "window",
         "padding split unevenly: SAME with an odd total, or explicit tail = head + 1",
         window=_window_edge("same_odd")),
)
