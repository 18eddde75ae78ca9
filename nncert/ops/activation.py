"""Activation functions: RELU, RELU1, RELU6, LOGISTIC, TANH, HARD_SWISH, ELU and PRELU.

All but PRELU are element-wise maps of one input (ELU also takes a scalar ``alpha``);
PRELU multiplies the negative inputs by a broadcast ``alpha`` tensor. ``check_rank`` and
the shape rule ``same_shape`` (which enforces the input's declared ranks) are shared with
``normalization.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    FREE,
    Arg,
    OpContext,
    OpRecord,
    Quant,
    SampleContext,
    ShapeError,
    Signature,
    broadcast_shape,
    fixed,
    same_as,
    scalar_of,
)
from nncert.ops.elementwise import UP_TO_4, broadcast_pair_dims, by_version

_F32, _F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
_Q8, _Q8S = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED


def check_rank(ctx: OpContext, name: str) -> int:
    """The rank of input ``name``, which must be one its Arg declares."""
    rank = ctx.rank(name)
    ranks = ctx.signature.arg(name).ranks
    if ranks is not None and rank not in ranks:
        raise ShapeError(f"{ctx.record.name}: {name} has rank {rank}, "
                         f"supported ranks are {min(ranks)}..{max(ranks)}")
    return rank


def same_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    """Shape rule of operations whose one output has the shape of ``input``."""
    check_rank(ctx, "input")
    return [ctx.dims("input")]


# ---------------------------------------------------------------------------------------
# Element-wise activations of one input


def _unary_sampler(span: float, params: dict[str, tuple[float, float]]) -> Callable[[SampleContext], None]:
    """Float inputs uniform in [-span, span] (to reach every branch of the function);
    quantised inputs span their type's range at the case's scale."""

    def sample(s: SampleContext) -> None:
        dims = s.dims()
        value = None if s.type("input").is_quant else s.draw.array(dims, -span, span)
        s.tensor("input", dims, value)
        for name, (lo, hi) in params.items():
            s.scalar(name, s.draw.float(lo, hi))

    return sample


def _unary(op: Op, fn: Callable[..., np.ndarray], table: dict[Version, tuple[T, ...]], *,
           out_quant: Quant = FREE, ranks: tuple[int, ...] | None = UP_TO_4, span: float = 4.0,
           params: dict[str, tuple[float, float]] | None = None, criterion: str = "medium",
           edges_: tuple = (), doc: str = "") -> OpRecord:
    """An element-wise activation; ``params`` are float scalars (typed like the input's
    elements) passed to ``fn`` by name, with the range the sampler draws them from."""
    params = params or {}
    sig = Signature(
        inputs=(Arg("input", ranks=ranks), *(Arg(p, scalar_of("T")) for p in params)),
        outputs=(Arg("output", quant=out_quant),),
    )

    def kernel(ctx: OpContext) -> list[np.ndarray]:
        return [fn(ctx.value("input"), **{p: ctx.value(p) for p in params})]

    return OpRecord(op, (sig,), by_version(table), kernel, same_shape, _unary_sampler(span, params),
                    criterion=criterion, edges=edges_, doc=doc)


def _logistic(x: np.ndarray) -> np.ndarray:
    # exp of a non-positive argument only: no overflow warnings for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _far_tails(s: SampleContext) -> None:
    """Rows of 4..8 values in [-100, 100], the first of each row in [90, 100] and the second in
    [-100, -90]: past where exp(x) overflows float32 (88.7) and float16 (11.1), and exp(2x)
    (44.4, 5.5)."""
    dims = (s.draw.int(1, 3), s.draw.int(4, 8))
    x = s.draw.array(dims, -100.0, 100.0)
    x[:, 0] = s.draw.array(dims[:1], 90.0, 100.0)
    x[:, 1] = -s.draw.array(dims[:1], 90.0, 100.0)
    s.tensor("input", dims, value=x)


# LOGISTIC's and TANH's own edge: the generated inputs stay within +-6, where a kernel that
# divides exponentials (exp(x) / (1 + exp(x)), (exp(2x) - 1) / (exp(2x) + 1)) is still right.
_FAR_TAILS = edges.Edge(
    "far_tails", "own", "float inputs up to +-100: the function saturates to its bounds, where "
    "a quotient of overflowing exponentials is inf / inf (NaN)",
    applies=lambda record, sig, var_: not var_.primary.is_quant, sample=_far_tails)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


_CLASSIC = {Version.V1_0: (_F32, _Q8), Version.V1_2: (_F16,), Version.V1_3: (_Q8S,)}

# ---------------------------------------------------------------------------------------
# PRELU: input and alpha broadcast against each other


def _prelu_sample(s: SampleContext) -> None:
    dims, alpha = broadcast_pair_dims(s)  # either may be the larger operand
    s.tensor("input", dims)
    s.tensor("alpha", alpha)


_PRELU = OpRecord(
    Op.PRELU,
    (Signature(inputs=(Arg("input"), Arg("alpha")), outputs=(Arg("output"),)),),
    by_version({Version.V1_2: (_F32, _F16, _Q8), Version.V1_3: (_Q8S,)}),
    kernel=lambda ctx: [np.where(ctx.value("input") >= 0, ctx.value("input"),
                                 ctx.value("alpha") * ctx.value("input"))],
    shape=lambda ctx: [broadcast_shape(ctx.dims("input"), ctx.dims("alpha"))],
    sample=_prelu_sample,
    criterion="medium",
    edges=edges.BROADCAST,
    doc="input where input >= 0, else alpha * input (alpha broadcasts against input)",
)

RECORDS = [
    _unary(Op.RELU, lambda x: np.maximum(x, 0.0), _CLASSIC, out_quant=same_as("input"),
           span=3.0, criterion="strict", edges_=(edges.float_wide("mixed", (_F32, _F16)),),
           doc="max(0, input)"),
    _unary(Op.RELU1, lambda x: np.clip(x, -1.0, 1.0), _CLASSIC, out_quant=same_as("input"),
           span=2.0, criterion="strict", doc="min(1, max(-1, input))"),
    _unary(Op.RELU6, lambda x: np.clip(x, 0.0, 6.0), _CLASSIC, out_quant=same_as("input"),
           span=8.0, criterion="strict", doc="min(6, max(0, input))"),
    _unary(Op.LOGISTIC, _logistic, _CLASSIC, out_quant=fixed(1 / 256, 0), span=6.0,
           criterion="relaxed", edges_=(_FAR_TAILS,), doc="1 / (1 + exp(-input))"),
    _unary(Op.TANH, np.tanh, {Version.V1_0: (_F32,), Version.V1_2: (_F16, _Q8), Version.V1_3: (_Q8S,)},
           out_quant=fixed(1 / 128, 128), span=4.0, criterion="relaxed", edges_=(_FAR_TAILS,),
           doc="tanh(input)"),
    _unary(Op.HARD_SWISH, _hard_swish, {Version.V1_3: (_F32, _F16, _Q8, _Q8S)}, ranks=None, span=5.0,
           criterion="medium", doc="input * min(6, max(0, input + 3)) / 6"),
    _unary(Op.ELU, _elu, {Version.V1_3: (_F32, _F16)}, ranks=None, span=3.0,
           params={"alpha": (0.1, 2.0)}, criterion="relaxed",
           doc="input where input > 0, else alpha * (exp(input) - 1)"),
    _PRELU,
]
