"""Layer operations of HAL 1.2: CHANNEL_SHUFFLE, INSTANCE_NORMALIZATION, POW, SPLIT.

CHANNEL_SHUFFLE and SPLIT move values (the "strict" criterion; quantised outputs keep the
input's scale and zero point). SPLIT has as many outputs as num_splits, any number up to
the axis's length: its one signature has a variadic output, and generated cases draw 1 to 6
parts (an edge makes every part one element thick). INSTANCE_NORMALIZATION normalises each
(batch, channel) plane over height and width (NHWC or NCHW). POW is base ** exponent with
broadcasting; where the real result is not a real number (a negative base with a
non-integer exponent) NNAPI leaves it to C's pow, NaN, and 0 ** negative is infinite:
generated cases keep the base positive, and the edges reach 0 ** 0 = 1, 0 ** x = 0 and a
negative base with integer exponents.
"""

from __future__ import annotations

import math

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
    broadcast_shape,
    normalize_axis,
    same_as,
    scalar_of,
    variants,
)
from nncert.ops.elementwise import broadcast_pair_dims

_F16, _F32, _I32 = T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32
_Q8, _Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED
_UP_TO_4 = (1, 2, 3, 4)
_FROM_1 = tuple(range(1, 9))


def _vs(table: dict[Version, tuple[T, ...]]) -> tuple:
    return tuple(v for version, types in table.items() for v in variants(version, *types))


# ---------------------------------------------------------------------------------------
# CHANNEL_SHUFFLE


def _shuffle_params(ctx: OpContext) -> tuple[int, int]:
    dims = ctx.dims("input")
    if not 1 <= len(dims) <= 4:
        raise ShapeError(f"input has rank {len(dims)}, CHANNEL_SHUFFLE takes rank 1..4")
    axis = normalize_axis(int(ctx.value("axis")), len(dims))
    groups = int(ctx.value("num_groups"))
    if groups <= 0:
        raise ShapeError(f"num_groups must be positive, is {groups}")
    if dims[axis] % groups:
        raise ShapeError(f"num_groups {groups} does not divide dimension {axis} of size {dims[axis]}")
    return axis, groups


def _shuffle_check(ctx: OpContext) -> None:
    _shuffle_params(ctx)


def _shuffle_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    _shuffle_params(ctx)
    return [ctx.dims("input")]


def channel_shuffle(x: np.ndarray, groups: int, axis: int) -> np.ndarray:
    """output channel k * groups + g = input channel g * (channels / groups) + k."""
    c = x.shape[axis]
    split = (*x.shape[:axis], groups, c // groups, *x.shape[axis + 1:])
    return np.swapaxes(x.reshape(split), axis, axis + 1).reshape(x.shape)


def _shuffle_kernel(ctx: OpContext) -> list[np.ndarray]:
    axis, groups = _shuffle_params(ctx)
    return [channel_shuffle(ctx.value("input"), groups, axis)]


def _shuffle_sample(s: SampleContext, groups: str = "any") -> None:
    rank = s.draw.int(1, 4)
    dims = list(s.dims(rank, 1, 4))
    axis = s.draw.int(-rank, rank - 1)
    g = s.draw.int(1, 4)
    dims[axis] = g * s.draw.int(1, 3) if groups == "any" else s.draw.int(2, 6)
    if groups == "channels":
        g = dims[axis]
    elif groups == "one":
        g = 1
    s.tensor("input", dims)
    s.scalar("num_groups", g)
    s.scalar("axis", axis)


CHANNEL_SHUFFLE = OpRecord(
    Op.CHANNEL_SHUFFLE,
    (Signature((Arg("input", ranks=_UP_TO_4), Arg("num_groups", T.INT32), Arg("axis", T.INT32)),
               (Arg("output", ranks=_UP_TO_4, quant=same_as("input")),)),),
    _vs({Version.V1_2: (_F16, _F32, _Q8), Version.V1_3: (_Q8S,)}),
    _shuffle_kernel, _shuffle_shape, _shuffle_sample, criterion="strict", check=_shuffle_check,
    edges=(edges.Edge("groups_equal_channels", "groups", "num_groups equal to the channel count "
                      "(groups of one channel: the identity)",
                      sample=lambda s: _shuffle_sample(s, "channels")),
           edges.Edge("one_group", "groups", "a single group of every channel (the identity)",
                      sample=lambda s: _shuffle_sample(s, "one"))),
    doc="the channels along axis regrouped: output channel k * num_groups + g is input "
        "channel g * (channels / num_groups) + k",
)


# ---------------------------------------------------------------------------------------
# INSTANCE_NORMALIZATION


def instance_norm(x: np.ndarray, gamma: float, beta: float, epsilon: float) -> np.ndarray:
    """NHWC: each (batch, channel) plane minus its mean over height and width, divided by
    sqrt(its variance (1/N, not 1/(N-1)) + epsilon), times gamma, plus beta."""
    mean = x.mean(axis=(1, 2), keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=(1, 2), keepdims=True)
    return d * gamma / np.sqrt(var + epsilon) + beta


def _instance_norm_kernel(ctx: OpContext) -> list[np.ndarray]:
    return [instance_norm(ctx.value("input"), float(ctx.value("gamma")), float(ctx.value("beta")),
                          float(ctx.value("epsilon")))]


def _instance_norm_check(ctx: OpContext) -> None:
    if len(ctx.dims("input")) != 4:
        raise ShapeError(f"input has rank {len(ctx.dims('input'))}, INSTANCE_NORMALIZATION takes rank 4")
    eps = float(ctx.value("epsilon"))
    if not eps >= 0:  # NaN too
        raise ShapeError(f"epsilon must be non-negative, is {eps}")


def _instance_norm_sample(s: SampleContext) -> None:
    dims = s.dims(4, 1, 4)
    dims = (dims[0], max(dims[1], 2), dims[2], dims[3])  # at least two values per plane
    s.tensor("input", dims)
    s.scalar("gamma", round(s.draw.float(-2.0, 2.0), 3))
    s.scalar("beta", round(s.draw.float(-1.0, 1.0), 3))
    s.scalar("epsilon", round(s.draw.float(0.01, 0.5), 3))
    s.scalar("layout", False)


def _flat_planes(s: SampleContext) -> None:
    """Planes of one repeated value (variance 0: the output is beta) beside varied ones, on
    multiples of 1/8 so that every mean is exact in float16."""
    dims = (s.draw.int(1, 2), s.draw.int(1, 3), s.draw.int(1, 3), s.draw.int(2, 3))
    x = edges.grid(s, dims, -16, 16)
    x[..., 0] = x[:, :1, :1, 0]
    s.tensor("input", dims, value=x)
    s.scalar("gamma", 1.5)
    s.scalar("beta", 0.25)
    s.scalar("epsilon", 0.125)
    s.scalar("layout", False)


def _one_pixel(s: SampleContext) -> None:
    """Height and width 1: every value is its plane's mean, the output beta."""
    dims = (s.draw.int(1, 3), 1, 1, s.draw.int(1, 5))
    s.tensor("input", dims)
    s.scalar("gamma", round(s.draw.float(-2.0, 2.0), 3))
    s.scalar("beta", round(s.draw.float(-1.0, 1.0), 3))
    s.scalar("epsilon", 0.0009765625)
    s.scalar("layout", False)


INSTANCE_NORMALIZATION = OpRecord(
    Op.INSTANCE_NORMALIZATION,
    (Signature((Arg("input", ranks=(4,)), Arg("gamma", scalar_of("T")), Arg("beta", scalar_of("T")),
                Arg("epsilon", scalar_of("T")), Arg("layout", T.BOOL)),
               (Arg("output", ranks=(4,)),)),),
    _vs({Version.V1_2: (_F16, _F32)}),
    _instance_norm_kernel, lambda ctx: [ctx.dims("input")], _instance_norm_sample,
    criterion="relaxed", layout="layout", check=_instance_norm_check,
    edges=(edges.Edge("flat_planes", "normalization", "planes of one repeated value "
                      "(variance 0, the output beta) beside varied ones", sample=_flat_planes),
           edges.Edge("one_pixel", "normalization", "height and width 1 (every plane one value)",
                      sample=_one_pixel),
           edges.float16_wide(300.0, 3000.0, True, "float16 inputs of magnitude 300..3000: the "
                              "squared deviations pass float16's largest (65504), the result does not")),
    doc="(input - mean) * gamma / sqrt(variance + epsilon) + beta, mean and variance of each "
        "(batch, channel) plane over height and width",
)


# ---------------------------------------------------------------------------------------
# POW


def _pow_kernel(ctx: OpContext) -> list[np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf and NaN as C's pow
        return [np.power(ctx.value("base"), ctx.value("exponent"))]


def _pow_sample(s: SampleContext) -> None:
    dims0, dims1 = broadcast_pair_dims(s)
    s.tensor("base", dims0)
    s.tensor("exponent", dims1)


def _zero_base(s: SampleContext) -> None:
    """Bases of exact zeros and ones against exponents 0, positive and fractional:
    0 ** 0 = 1, 0 ** x = 0, 1 ** x = 1."""
    n = s.draw.int(3, 6)
    base = np.where(s.draw.integers((n, 1), 0, 1) == 1, 1.0, 0.0)
    base[0, 0] = 0.0
    exp = np.array([[0.0, 1.0, 2.5, 0.5]])
    s.tensor("base", (n, 1), value=base)
    s.tensor("exponent", (1, 4), value=exp)


def _negative_base(s: SampleContext) -> None:
    """Negative bases with integer exponents (a real result: odd powers negative)."""
    n = s.draw.int(2, 5)
    s.tensor("base", (n, 1), value=-(s.draw.integers((n, 1), 2, 12) / 8.0))
    s.tensor("exponent", (1, 5), value=np.array([[-2.0, -1.0, 0.0, 2.0, 3.0]]))


POW = OpRecord(
    Op.POW,
    (Signature((Arg("base", ranks=_FROM_1, domain="positive"), Arg("exponent", ranks=_FROM_1)),
               (Arg("output", ranks=_FROM_1),)),),
    _vs({Version.V1_2: (_F16, _F32)}),
    _pow_kernel,
    lambda ctx: [broadcast_shape(ctx.dims("base"), ctx.dims("exponent"))], _pow_sample,
    criterion="relaxed",
    edges=(*edges.BROADCAST,
           edges.Edge("zero_base", "power", "0 ** 0 = 1, 0 ** x = 0 and 1 ** x = 1", sample=_zero_base),
           edges.Edge("negative_base_integer_exponent", "power",
                      "negative bases with integer exponents -2..3", sample=_negative_base)),
    doc="base ** exponent element-wise, broadcasting; a negative base with a non-integer "
        "exponent gives NaN (C's pow) and 0 ** negative infinity: NNAPI does not define them",
)


# ---------------------------------------------------------------------------------------
# SPLIT


def _split_params(ctx: OpContext) -> tuple[int, int]:
    dims = ctx.dims("input")
    if len(dims) < 1:
        raise ShapeError("input must have rank 1 or more")
    axis = normalize_axis(int(ctx.value("axis")), len(dims))
    parts = int(ctx.value("num_splits"))
    if parts != len(ctx.outputs):
        raise ShapeError(f"num_splits is {parts}, the operation has {len(ctx.outputs)} outputs")
    if dims[axis] % parts:
        raise ShapeError(f"num_splits {parts} does not divide dimension {axis} of size {dims[axis]}")
    return axis, parts


def _split_check(ctx: OpContext) -> None:
    _split_params(ctx)


def _split_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    axis, parts = _split_params(ctx)
    dims = list(ctx.dims("input"))
    dims[axis] //= parts
    return [tuple(dims)] * parts


def _split_kernel(ctx: OpContext) -> list[np.ndarray]:
    axis, parts = _split_params(ctx)
    return list(np.split(ctx.value("input"), parts, axis=axis))


def _split_sample(s: SampleContext, unit: bool = False) -> None:
    parts = s.output_count = s.draw.int(1, 6)
    rank = s.draw.int(1, 4)
    dims = list(s.dims(rank, 1, 4))
    axis = s.draw.int(-rank, rank - 1)
    dims[axis] = parts * (1 if unit else s.draw.int(1, 3))
    while math.prod(dims) > s.max_elements:
        i = max((j for j in range(rank) if j != axis % rank), key=lambda j: dims[j])
        dims[i] = max(1, dims[i] // 2)
    s.tensor("input", dims)
    s.scalar("axis", axis)
    s.scalar("num_splits", parts)


SPLIT = OpRecord(
    Op.SPLIT,
    (Signature((Arg("input", ranks=_FROM_1), Arg("axis", T.INT32), Arg("num_splits", T.INT32)),
               (Arg("output", ranks=_FROM_1, quant=same_as("input"), variadic=True),)),),
    _vs({Version.V1_2: (_F16, _F32, _I32, _Q8), Version.V1_3: (_Q8S,)}),
    _split_kernel, _split_shape, _split_sample, criterion="strict",
    check=_split_check,
    edges=(edges.Edge("parts_of_1", "split", "every part one element thick along axis",
                      sample=lambda s: _split_sample(s, unit=True)),
           edges.int32_wide("any")),
    doc="the input cut along axis into num_splits equal parts, one output each",
)


RECORDS: list[OpRecord] = [CHANNEL_SHUFFLE, INSTANCE_NORMALIZATION, POW, SPLIT]
