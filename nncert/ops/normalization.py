"""Normalisations along one axis: SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION and
LOCAL_RESPONSE_NORMALIZATION.

Each normalises the 1-D slices of its input along ``axis`` (the last dimension by
default). SOFTMAX, L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION took no axis before
HAL 1.2 (its presence raises an instance's version, ``Arg.since``), and accepted fewer
ranks: their ``min_version`` raises the version of an instance of another rank
to 1.2.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.activation import check_rank, same_shape
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    fixed,
    normalize_axis,
    scalar_of,
)
from nncert.ops.elementwise import UP_TO_4, by_version

_F32, _F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
_Q8, _Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED

#: The ranks SOFTMAX, and L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION, accepted before HAL 1.2.
_SOFTMAX_RANKS_1_0, _RANKS_1_0 = (2, 4), (4,)

#: The optional axis of SOFTMAX, L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION.
_OPTIONAL_AXIS = Arg("axis", T.INT32, optional=True, default=-1, since=Version.V1_2)


def _axis(ctx: OpContext) -> int:
    """The normalised axis; NNAPI requires it in [-rank, rank)."""
    return normalize_axis(int(ctx.value("axis")), check_rank(ctx, "input"), "axis")


def _check(positive: tuple[str, ...] = ()) -> Callable[[OpContext], None]:
    """Validity rules: axis in range; the named float scalars strictly positive."""

    def check(ctx: OpContext) -> None:
        for name in positive:
            if not ctx.value(name) > 0:
                raise ShapeError(f"{ctx.record.name}: {name} must be positive, is {ctx.value(name)}")
        _axis(ctx)

    return check


def _ranks_before_1_2(ranks: tuple[int, ...]) -> Callable[[OpContext], Version]:
    """``min_version``: an input rank outside ``ranks`` needs HAL 1.2."""

    def min_version(ctx: OpContext) -> Version:
        if ctx.rank("input") in ranks:
            return ctx.match.version
        return max(ctx.match.version, Version.V1_2)

    return min_version


def _sample_input(s: SampleContext, legacy_ranks: tuple[int, ...] | None = None, *,
                  axis_optional: bool = True) -> tuple[tuple[int, ...], int]:
    """Input dimensions and the axis (as an index) for one case; sets ``axis`` when it is
    required or drawn (the caller sets ``input``)."""
    # Variants older than 1.2 favour the ranks they had then, so that cases stay at their
    # own version (other ranks, or an axis, make a case a 1.2 one).
    legacy = legacy_ranks is not None and s.variant.version < Version.V1_2
    rank = s.draw.choice(legacy_ranks) if legacy and s.draw.bool(0.6) else s.draw.int(1, 4)
    dims = s.dims(rank, 1, 6)
    axis = -1
    if not axis_optional or s.draw.bool():
        axis = s.draw.int(-rank, rank - 1)
        s.scalar("axis", axis)
    return dims, axis % rank


# ---------------------------------------------------------------------------------------
# SOFTMAX and LOG_SOFTMAX


def _scaled_shifted(ctx: OpContext) -> tuple[np.ndarray, int]:
    """beta * input minus its maximum along the axis (so that exp cannot overflow)."""
    axis = _axis(ctx)
    y = ctx.value("input") * ctx.value("beta")
    return y - np.max(y, axis=axis, keepdims=True, initial=-np.inf), axis


def _softmax(ctx: OpContext) -> list[np.ndarray]:
    y, axis = _scaled_shifted(ctx)
    e = np.exp(y)
    return [e / np.sum(e, axis=axis, keepdims=True)]


def _log_softmax(ctx: OpContext) -> list[np.ndarray]:
    y, axis = _scaled_shifted(ctx)
    return [y - np.log(np.sum(np.exp(y), axis=axis, keepdims=True))]


def _softmax_sampler(legacy_ranks: tuple[int, ...] | None,
                     axis_optional: bool) -> Callable[[SampleContext], None]:
    def sample(s: SampleContext) -> None:
        dims, _ = _sample_input(s, legacy_ranks, axis_optional=axis_optional)
        s.tensor("input", dims)
        s.scalar("beta", 1.0 if s.draw.bool(0.3) else s.draw.float(0.1, 2.0))

    return sample


#: Length of the long normalisations' axis (two rows of it).
LONG_AXIS = 4096


def _long_softmax_sample(s: SampleContext) -> None:
    """The last element of each row at 0, the rest in [-12, -10]: the sum of exponentials is
    about 1.07, of which the many small terms (each under 2e-5) make 0.07. A float16
    accumulator stops adding them past about 0.035; a float32 one, even summing in order,
    is within ACC-1 (the large term comes last: added first, it would make every later
    addition round at its scale, the same way each time, and a naive sum drift by 2e-5)."""
    dims = (2, LONG_AXIS)
    k = np.asarray(edges.grid(s, dims, -96, -80) * 8, np.int64)
    k[:, -1] = 0
    t = s.type("input")
    if t.is_quant:
        zp = t.quant_range[1]
        s.tensor("input", dims, value=zp + k, scale=0.125, zero_point=zp)
    else:
        s.tensor("input", dims, value=k / 8.0)
    s.scalar("beta", 1.0)
    if not s.signature.arg("axis").optional:
        s.scalar("axis", -1)


def _long_l2_sample(s: SampleContext) -> None:
    dims = (2, LONG_AXIS)
    if s.type("input").is_quant:
        s.tensor("input", dims)
        return
    x = edges.grid(s, dims, -16, 15)
    s.tensor("input", dims, value=np.where(x == 0, 2.0, x))  # domain: nonzero


def _input_scale_1e_8(s: SampleContext) -> None:
    s.inputs["input"].scale = 1e-8


# SOFTMAX's own edge: an input scale so small that every input is nearly equal (the output
# uniform), where a fixed-point multiplier for beta x scale is out of range.
_TINY_INPUT_SCALE = edges.Edge(
    "input_scale_1e_8", "quant", "a quantised input of scale 1e-8: every probability equal",
    applies=lambda record, sig, var_: var_.primary.is_quant, adjust=_input_scale_1e_8)


def _large_logits(s: SampleContext) -> None:
    item = s.inputs["input"]
    item.value = s.draw.array(item.dims, 80.0, 120.0)
    s.scalar("beta", 1.0)


# SOFTMAX's and LOG_SOFTMAX's own edge: inputs whose exponentials overflow float32 (past
# 88.7) and float16 (past 11.1), so a kernel must subtract the maximum first (as every
# numerically sound one does); the results themselves are ordinary.
_LARGE_LOGITS = edges.Edge(
    "large_logits", "own", "float inputs of 80..120 at beta 1: exp overflows unless the maximum "
    "is subtracted first", applies=lambda record, sig, var_: not var_.primary.is_quant,
    adjust=_large_logits)

def _wide_logits(s: SampleContext) -> None:
    """Rows of 4..8 along the last axis, at beta 1: the first of each 110..200 below the
    others (which lie in [-2, 2])."""
    dims = (s.draw.int(1, 3), s.draw.int(4, 8))
    x = s.draw.array(dims, -2.0, 2.0)
    x[:, 0] = -s.draw.array(dims[:1], 110.0, 200.0)
    s.tensor("input", dims, value=x)
    s.scalar("beta", 1.0)
    s.scalar("axis", -1)


# LOG_SOFTMAX's own edge: a logit 110..200 below its row's maximum, whose softmax underflows
# float32 (below 1.4e-45) while its log-softmax is an ordinary -110..-200: log(softmax(x))
# gives -inf. The generated inputs (+-2) and the large logits (80..120) are never that far apart.
_WIDE_LOGITS = edges.Edge(
    "wide_logits", "own", "float logits 110..200 below the row's maximum at beta 1: the "
    "probability underflows, its logarithm must not", sample=_wide_logits)

_LONG_SOFTMAX = edges.long_reduction(_long_softmax_sample,
                                     f"two rows of {LONG_AXIS}, the sum of exponentials mostly small terms")
_AXIS_OF_1 = edges.axis_of_1("axis")

_SOFTMAX = OpRecord(
    Op.SOFTMAX,
    (Signature(inputs=(Arg("input", ranks=UP_TO_4), Arg("beta", scalar_of("T")), _OPTIONAL_AXIS),
               outputs=(Arg("output", quant=fixed(1 / 256, 0)),)),),
    by_version({Version.V1_0: (_F32, _Q8), Version.V1_2: (_F16,), Version.V1_3: (_Q8S,)}),
    _softmax, same_shape, _softmax_sampler(_SOFTMAX_RANKS_1_0, axis_optional=True),
    criterion="relaxed", check=_check(positive=("beta",)),
    edges=(_AXIS_OF_1, _LONG_SOFTMAX, _TINY_INPUT_SCALE, _LARGE_LOGITS),
    doc="exp(beta * x) / sum(exp(beta * x)) over the 1-D slices of input along axis",
    min_version=_ranks_before_1_2(_SOFTMAX_RANKS_1_0),
)

_LOG_SOFTMAX = OpRecord(
    Op.LOG_SOFTMAX,
    (Signature(inputs=(Arg("input"), Arg("beta", scalar_of("T")), Arg("axis", T.INT32)),
               outputs=(Arg("output"),)),),
    by_version({Version.V1_2: (_F32, _F16)}),
    _log_softmax, same_shape, _softmax_sampler(None, axis_optional=False),
    criterion="relaxed", check=_check(positive=("beta",)),
    edges=(_AXIS_OF_1, _LONG_SOFTMAX, _LARGE_LOGITS, _WIDE_LOGITS),
    doc="beta * x - log(sum(exp(beta * x))) over the 1-D slices of input along axis",
)

# ---------------------------------------------------------------------------------------
# L2_NORMALIZATION


def _l2_normalization(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.value("input")
    norm = np.sqrt(np.sum(x * x, axis=_axis(ctx), keepdims=True))
    # Since HAL 1.3 an all-zero slice gives zeros (before, undefined).
    return [np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)]


def _l2_sample(s: SampleContext) -> None:
    dims, axis = _sample_input(s, _RANKS_1_0)
    if s.variant.version >= Version.V1_3 and s.type("input").is_quant and s.draw.bool(0.5):
        # Exercise the all-zero slice, defined since HAL 1.3: raw values at the zero point.
        lo, hi = s.type("input").quant_range
        zp = s.draw.int(lo, hi)
        raw = s.draw.integers(dims, lo, hi)
        raw[raw == zp] = zp + 1 if zp < hi else zp - 1
        where = [s.draw.int(0, d - 1) for d in dims]
        where[axis] = slice(None)
        raw[tuple(where)] = zp
        s.tensor("input", dims, raw, scale=float(np.float32(s.draw.float(0.01, 0.05))), zero_point=zp)
    else:
        s.tensor("input", dims)


def _zero_slice_sample(s: SampleContext) -> None:
    """One 1-D slice along the axis all zeros (raw values at the zero point), the others
    without a zero: the slice's output is zeros since HAL 1.3, not 0 / 0."""
    dims, axis = _sample_input(s)
    where: list = [s.draw.int(0, d - 1) for d in dims]
    where[axis] = slice(None)
    if s.type("input").is_quant:
        lo, hi = s.type("input").quant_range
        zp = s.draw.int(lo, hi)
        raw = s.draw.integers(dims, lo, hi)
        raw[raw == zp] = zp + 1 if zp < hi else zp - 1
        raw[tuple(where)] = zp
        s.tensor("input", dims, raw, scale=float(np.float32(s.draw.float(0.01, 0.05))), zero_point=zp)
        return
    x = edges.grid(s, dims, -16, 15)
    x = np.where(x == 0, 2.0, x)
    x[tuple(where)] = 0.0
    s.tensor("input", dims, value=x)


_L2_NORMALIZATION = OpRecord(
    Op.L2_NORMALIZATION,
    # Inputs stay away from zero: an all-zero slice is undefined before HAL 1.3.
    (Signature(inputs=(Arg("input", ranks=UP_TO_4, domain="nonzero"), _OPTIONAL_AXIS),
               outputs=(Arg("output", quant=fixed(1 / 128, 128)),)),),
    by_version({Version.V1_0: (_F32,), Version.V1_2: (_F16, _Q8), Version.V1_3: (_Q8S,)}),
    _l2_normalization, same_shape, _l2_sample,
    criterion="relaxed", check=_check(),
    edges=(_AXIS_OF_1, edges.long_reduction(_long_l2_sample, f"two rows of {LONG_AXIS} squares summed"),
           edges.Edge("zero_slice", "zero", "one slice along the axis all zeros: zeros out (HAL 1.3)",
                      sample=_zero_slice_sample, since=Version.V1_3),
           edges.float16_wide(300.0, 3000.0, True, "float16 inputs of magnitude 300..3000: their "
                              "squares pass float16's largest (65504), the result does not")),
    doc="input / sqrt(sum(input ** 2)) over the 1-D slices of input along axis",
    min_version=_ranks_before_1_2(_RANKS_1_0),
)

# ---------------------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION


def _local_response_normalization(ctx: OpContext) -> list[np.ndarray]:
    axis = _axis(ctx)
    x = np.moveaxis(ctx.value("input"), axis, -1)
    radius = int(ctx.value("radius"))
    i = np.arange(x.shape[-1])
    # window[j, k]: element j lies within radius of element k (edges clip the window).
    window = (np.abs(i[:, None] - i[None, :]) <= radius).astype(np.float64)
    sqr_sum = (x * x) @ window
    out = x / (ctx.value("bias") + ctx.value("alpha") * sqr_sum) ** ctx.value("beta")
    return [np.moveaxis(out, -1, axis)]


def _lrn_sample(s: SampleContext) -> None:
    dims, axis = _sample_input(s, _RANKS_1_0)
    s.tensor("input", dims)
    # The radius may exceed the slice (the window is clipped); bias > 0 keeps the base positive.
    s.scalar("radius", s.draw.int(0, dims[axis] + 1))
    s.scalar("bias", s.draw.float(0.5, 2.0))
    s.scalar("alpha", s.draw.float(0.05, 1.0))
    s.scalar("beta", s.draw.float(0.25, 1.0))


_LOCAL_RESPONSE_NORMALIZATION = OpRecord(
    Op.LOCAL_RESPONSE_NORMALIZATION,
    (Signature(inputs=(Arg("input", ranks=UP_TO_4), Arg("radius", T.INT32), Arg("bias", scalar_of("T")),
                       Arg("alpha", scalar_of("T")), Arg("beta", scalar_of("T")), _OPTIONAL_AXIS),
               outputs=(Arg("output"),)),),
    by_version({Version.V1_0: (_F32,), Version.V1_2: (_F16,)}),
    _local_response_normalization, same_shape, _lrn_sample,
    criterion="relaxed", check=_check(),
    edges=(_AXIS_OF_1, edges.float16_wide(300.0, 3000.0, True, "float16 inputs of magnitude 300..3000: "
                                          "their squares pass float16's largest, the result does not")),
    doc="input / (bias + alpha * sum of squares within radius along axis) ** beta",
    min_version=_ranks_before_1_2(_RANKS_1_0),
)

RECORDS = [_SOFTMAX, _LOG_SOFTMAX, _L2_NORMALIZATION, _LOCAL_RESPONSE_NORMALIZATION]
