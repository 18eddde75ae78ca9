"""The operation record: the one declaration of an operation that every suite reads.

An ``OpRecord`` says, for one OperationType:

- its signatures (``Arg`` lists; most operations have one, CONV_2D has an explicit- and an
  implicit-padding form), with the allowed ranks, optional trailing inputs and the HAL
  version an input first appeared in;
- its type variants (``Variant``): bindings of the type variables the args use ("T" the
  primary data type, "W" a filter type, ...) and the HAL version of each;
- the quantisation rule of every quantised input and output (``Quant``);
- the output-shape rule, the reference kernel and the sampler of valid cases;
- which input is the data layout flag and which the fused activation, so that NCHW and
  activations are handled once, here, for every operation.

Reference kernels compute in the real domain (float64): quantised inputs are
dequantised, the kernel runs, the fused activation clamps, and the result is requantised
with round-half-away-from-zero and saturation. See ``nncert/ops/README.md``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import FusedActivationFunc, OperandType, OperationType, Version

T = OperandType
_MISSING = object()


class Unknown(Exception):  # noqa: N818 - a signal, not an error
    """A value or shape that is not known at compile time (DRV-3)."""


class ShapeError(Exception):
    """Parameters or shapes that make an operation invalid."""


#: The most elements an operation's output may have in the reference kernels (16 Mi; the
#: largest tensor of a real model here has under a million). Run-time values (a padding, a
#: shape, a multiple given as a model input) can ask for far more, and numpy would try to
#: allocate it: such an execution fails (GENERAL_FAILURE) before the kernel runs.
MAX_OUTPUT_ELEMENTS = 1 << 24


class TooLarge(Exception):  # noqa: N818 - named as what it reports
    """An operation whose outputs would exceed MAX_OUTPUT_ELEMENTS."""


# ---------------------------------------------------------------------------------------
# Declarations


TypeSpec = OperandType | str | Callable[[dict[str, OperandType]], OperandType]


@dataclass(frozen=True)
class Quant:
    """How a quantised operand's scale and zero point are set.

    kind: ``free`` (anything valid; generated cases pick it, outputs from the golden
    range), ``same`` (equal to ``ref``'s), ``follows`` (generated cases and importers give
    it ``ref``'s, but any is valid: the operation ignores it, as Android's QUANTIZED_LSTM
    does its outputs'), ``fixed`` (``scale`` and ``zero_point`` for the
    unsigned type; the signed type uses ``zero_point - 128``), ``bias`` (scale = product
    of the scales of the two args named in ``ref``, "input,filter"; zero point 0).
    """

    kind: str = "free"
    ref: str = ""
    scale: float = 0.0
    zero_point: int = 0


FREE = Quant()


def same_as(name: str) -> Quant:
    return Quant("same", name)


def follows(name: str) -> Quant:
    return Quant("follows", name)


def fixed(scale: float, zero_point_unsigned: int) -> Quant:
    return Quant("fixed", scale=scale, zero_point=zero_point_unsigned)


def bias_of(input_name: str, filter_name: str) -> Quant:
    return Quant("bias", f"{input_name},{filter_name}")


@dataclass(frozen=True)
class Arg:
    """One input or output of a signature.

    ``ranks``: allowed tensor ranks (None: any rank; ignored for scalars).
    ``optional``: may be absent (trailing) or omitted (NO_VALUE); ``default`` then applies.
    ``since``: the HAL version that introduced this input (its presence raises the
    version an operation instance needs). ``variadic``: one or more consecutive operands
    (an input, or an output: SPLIT's, as many as its num_splits).
    ``domain``: generated data constraint: None, "positive", "nonzero", "unit" (|x|<1).
    ``const``: generated cases keep it constant even when tensors become inputs.
    """

    name: str
    type: TypeSpec = "T"
    ranks: tuple[int, ...] | None = None
    optional: bool = False
    default: Any = None
    since: Version | None = None
    variadic: bool = False
    quant: Quant = FREE
    domain: str | None = None
    const: bool = False

    def resolve(self, bindings: dict[str, OperandType]) -> OperandType:
        spec = self.type
        if isinstance(spec, OperandType):
            return spec
        if isinstance(spec, str):
            return bindings[spec]
        return spec(bindings)


def scalar_of(var: str = "T") -> Callable[[dict[str, OperandType]], OperandType]:
    """The float scalar type that goes with a tensor type: FLOAT16 for TENSOR_FLOAT16,
    FLOAT32 otherwise (quantised operations take float32 parameters)."""

    def resolve(b: dict[str, OperandType]) -> OperandType:
        return T.FLOAT16 if b[var] is T.TENSOR_FLOAT16 else T.FLOAT32

    resolve.__name__ = f"scalar_of({var})"
    return resolve


def bias_type(var: str = "T") -> Callable[[dict[str, OperandType]], OperandType]:
    """TENSOR_INT32 for a quantised ``var``, else ``var`` itself."""

    def resolve(b: dict[str, OperandType]) -> OperandType:
        return T.TENSOR_INT32 if b[var].is_quant else b[var]

    resolve.__name__ = f"bias_type({var})"
    return resolve


def var(name: str, default: str = "T") -> Callable[[dict[str, OperandType]], OperandType]:
    """Type variable ``name``, falling back to ``default`` when a variant does not bind it."""

    def resolve(b: dict[str, OperandType]) -> OperandType:
        return b.get(name, b[default])

    resolve.__name__ = name
    return resolve


@dataclass(frozen=True)
class Signature:
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    name: str = ""

    def arg(self, name: str) -> Arg:
        try:
            return self._args[name]
        except KeyError:
            raise KeyError(name) from None

    @functools.cached_property
    def _args(self) -> dict[str, Arg]:
        """Name -> the first Arg of that name, inputs before outputs (shape rules look args up
        by name on every evaluation)."""
        return {a.name: a for a in reversed(self.inputs + self.outputs)}

    @property
    def min_inputs(self) -> int:
        return sum(1 for a in self.inputs if not a.optional)

    def output_args(self, count: int) -> list[Arg]:
        """The Arg of each output operand of an instance with ``count`` outputs: a variadic
        output stands for as many as the fixed ones leave."""
        extra = count - len(self.outputs)
        return [a for a in self.outputs for _ in range(1 + extra if a.variadic else 1)]


@dataclass(frozen=True)
class Variant:
    """A type variant: concrete types for the signature's type variables."""

    version: Version
    bindings: tuple[tuple[str, OperandType], ...]

    @property
    def types(self) -> dict[str, OperandType]:
        return dict(self.bindings)

    @property
    def primary(self) -> OperandType:
        return self.types.get("T", self.bindings[0][1])

    @functools.cached_property
    def label(self) -> str:
        b = self.types
        parts = [b.get("T", self.bindings[0][1]).short]
        parts += [f"{k}={v.short}" for k, v in self.bindings if k != "T"]
        return "-".join(parts)


def variants(version: Version, *types: OperandType, **extra: OperandType) -> list[Variant]:
    """One Variant per primary type ``T`` in ``types``, each with the ``extra`` bindings."""
    return [Variant(version, (("T", t), *extra.items())) for t in types]


def variant(version: Version, **bindings: OperandType) -> Variant:
    return Variant(version, tuple(bindings.items()))


#: Criterion classes of ACC-5 (docs/requirements.md; per-op tests use ACC-1..4; random graphs use these).
CRITERIA = ("strict", "medium", "relaxed", "conv")


@dataclass(frozen=True)
class OpRecord:
    type: OperationType
    signatures: tuple[Signature, ...]
    variants: tuple[Variant, ...]
    kernel: Callable[[OpContext], list[np.ndarray]]
    shape: Callable[[OpContext], list[tuple[int, ...]]]
    sample: Callable[[SampleContext], None]
    criterion: str = "medium"
    layout: str | None = None  # name of the NCHW flag input
    layout_inputs: tuple[str, ...] = ("input",)
    layout_outputs: tuple[int, ...] = (0,)
    activation: str | None = None  # name of the fused activation input
    dequantize: bool = True  # kernel sees real values of quantised operands
    check: Callable[[OpContext], None] | None = None  # extra validity rules
    #: The HAL version an instance needs beyond its variant's, when that depends on
    #: quantisation parameters, ranks or constant values (e.g. CONCATENATION before 1.2).
    min_version: Callable[[OpContext], Version] | None = None
    #: 4-element shape-vector inputs written in the operation's layout (NCHW when it is).
    layout_vectors: tuple[str, ...] = ()
    #: The output is a discontinuous function of float inputs (rounding): random graphs
    #: feed it only exactly computed values (ACC-5). Operations whose output type is
    #: integer or boolean from float or quantised inputs are treated so without the flag.
    discrete: bool = False
    #: Named edge cases this operation declares (``nncert.ops.edges.Edge``), besides the
    #: shared families every record with a fused activation or a quantised variant gets.
    edges: tuple[Any, ...] = ()
    #: State carried between executions (recurrent operations): (input name, output index
    #: or output name) pairs; the per-operation suite feeds each such output of one
    #: execution to its input in the next, and MLTS streaming does the same for a model's
    #: state. A pair whose output a signature lacks (the state outputs are optional in
    #: UNIDIRECTIONAL_SEQUENCE_RNN) does not apply to it: see ``state_pairs``.
    state: tuple[tuple[str, int | str], ...] = ()
    #: How a driver's outputs are judged when element-wise tolerances make no sense (boxes
    #: after non-maximum suppression, random samples): ``compare(ctx, expected, actual,
    #: relaxed)`` with ``ctx`` the case's OpContext (every input known), returning one line
    #: per problem (empty: accepted). None: ACC-1..4 per output type.
    compare: Callable[[OpContext, list[np.ndarray], list[np.ndarray], bool], list[str]] | None = None
    #: Where Android leaves a result unspecified (int32 DIV by zero): ``unspecified(ctx)``
    #: gives, per output, a boolean mask broadcastable to it (None: every element is
    #: specified); the per-operation suite accepts any value there and judges the rest by
    #: ACC-1..4. The execution itself must still succeed.
    unspecified: Callable[[OpContext], list[np.ndarray | None]] | None = None
    #: The result depends on the stored bytes of its tensor inputs, not only their values
    #: (LSH_PROJECTION hashes them): a driver that computes float16 in float32 changes it.
    reads_bytes: bool = False
    #: (indices input, table input, axis input or None for axis 0): the indices pick slices of
    #: the table along the axis, and one outside it fails the execution. A driver whose runtime
    #: answers such an index otherwise checks those a request gives (CompiledDriver's
    #: ``index_guards``).
    picks: tuple[str, str, str | None] | None = None
    #: Why the operation takes no part in random graphs (data-dependent output sizes, state,
    #: random results), or "" when it does.
    graphs: str = ""
    doc: str = ""

    @property
    def name(self) -> str:
        return self.type.name

    @property
    def versions(self) -> list[Version]:
        return sorted({v.version for v in self.variants})

    def state_pairs(self, signature: Signature) -> list[tuple[str, int]]:
        """The ``state`` pairs that apply to ``signature``, as (input name, output index)."""
        names = [a.name for a in signature.outputs]
        pairs = []
        for name, out in self.state:
            if isinstance(out, str):
                if out in names:
                    pairs.append((name, names.index(out)))
            elif out < len(names):
                pairs.append((name, out))
        return pairs


# ---------------------------------------------------------------------------------------
# Matching an operation instance to a signature and variant


@dataclass
class Match:
    signature: Signature
    variant: Variant
    #: arg name -> operand positions in the operation's input (or output) list
    positions: dict[str, list[int]]
    #: the HAL version this instance needs (variant, plus newer optional inputs present)
    version: Version


def match(record: OpRecord, in_types: Sequence[OperandType | None],
          out_types: Sequence[OperandType]) -> Match:
    """Find the signature and variant an operation instance uses.

    ``in_types[i]`` is None for an omitted optional input (NO_VALUE). Raises ShapeError
    naming what does not fit when nothing matches.
    """
    problems = []
    for sig in record.signatures:
        layout = _layout_positions(sig, len(in_types), len(out_types))
        if isinstance(layout, str):
            problems.append(layout)
            continue
        pos_in, pos_out = layout
        for var_ in record.variants:
            b = var_.types
            bad = _type_mismatch(sig.inputs, pos_in, in_types, b, "input") or \
                _type_mismatch(sig.outputs, pos_out, out_types, b, "output")
            if bad:
                problems.append(f"{var_.label}: {bad}")
                continue
            version = var_.version
            for a in sig.inputs:
                if a.since and pos_in.get(a.name) and any(in_types[p] is not None for p in pos_in[a.name]):
                    version = max(version, a.since)
            return Match(sig, var_, {**pos_in, **{f"out:{k}": v for k, v in pos_out.items()}}, version)
    detail = "; ".join(dict.fromkeys(problems)) if len(problems) <= 3 else \
        "; ".join(list(dict.fromkeys(problems))[:3]) + f"; ... ({len(problems)} candidates)"
    raise ShapeError(f"no signature of {record.name} accepts these operands: {detail}")


def _layout_positions(sig: Signature, n_in: int, n_out: int) -> tuple[dict, dict] | str:
    pos_out = _variadic_positions(sig.outputs, n_out, "outputs")
    if pos_out is None:
        if n_out != len(sig.outputs):
            return f"{len(sig.outputs)} outputs expected, got {n_out}"
        pos_out = {a.name: [i] for i, a in enumerate(sig.outputs)}
    if isinstance(pos_out, str):
        return pos_out
    pos_in = _variadic_positions(sig.inputs, n_in, "inputs")
    if pos_in is None:
        if not sig.min_inputs <= n_in <= len(sig.inputs):
            expect = str(len(sig.inputs)) if sig.min_inputs == len(sig.inputs) else \
                f"{sig.min_inputs}..{len(sig.inputs)}"
            return f"{expect} inputs expected, got {n_in}"
        pos_in = {a.name: [i] for i, a in enumerate(sig.inputs[:n_in])}
    if isinstance(pos_in, str):
        return pos_in
    return pos_in, pos_out


def _variadic_positions(args: Sequence[Arg], n: int, what: str) -> dict[str, list[int]] | str | None:
    """Operand positions of ``args`` when one is variadic (it takes the one or more operands
    the others leave), or a line saying why ``n`` operands do not fit; None when none is."""
    if not any(a.variadic for a in args):
        return None
    fixed_count = sum(1 for a in args if not a.variadic)
    n_var = n - fixed_count
    if n_var < 1:
        return f"at least {fixed_count + 1} {what} expected, got {n}"
    pos: dict[str, list[int]] = {}
    i = 0
    for a in args:
        k = n_var if a.variadic else 1
        pos[a.name] = list(range(i, i + k))
        i += k
    return pos


def _type_mismatch(args: Sequence[Arg], positions: dict[str, list[int]],
                   types: Sequence[OperandType | None], bindings: dict, kind: str) -> str:
    for a in args:
        for p in positions.get(a.name, []):
            want = a.resolve(bindings)
            got = types[p]
            if got is None:
                if not a.optional:
                    return f"{kind} {p} ({a.name}) may not be omitted"
                continue
            if got != want:
                return f"{kind} {p} ({a.name}) is {got.name}, expected {want.name}"
    return ""


# ---------------------------------------------------------------------------------------
# The context kernels, shape rules and checks read their operands from


class OpContext:
    """Named access to one operation instance's operands and (known) values.

    Values of tensors are numpy arrays (float64 real values for float and dequantised
    types when the record dequantizes); scalars are Python numbers. During validation,
    only constants are known: reading anything else raises Unknown.
    """

    def __init__(self, record: OpRecord, m: Match, inputs: Sequence[Operand | None],
                 values: Sequence[Any], outputs: Sequence[Operand]) -> None:
        self.record = record
        self.match = m
        self.signature = m.signature
        self.variant = m.variant
        self.inputs = list(inputs)
        self._complete = all(self.inputs)  # no input omitted (an Operand is always true)
        self._values = list(values)
        self.outputs = list(outputs)

    def positions(self, name: str) -> list[int]:
        """Positions in the input list of the present (not omitted) operands of ``name``."""
        if self._complete:
            return list(self.match.positions.get(name, ()))
        return [p for p in self.match.positions.get(name, []) if self.inputs[p] is not None]

    def has(self, name: str) -> bool:
        return bool(self.positions(name))

    def operand(self, name: str) -> Operand:
        pos = self.positions(name)
        if not pos:
            raise KeyError(f"{self.record.name} has no input {name!r} here")
        return self.inputs[pos[0]]

    def operands(self, name: str) -> list[Operand]:
        return [self.inputs[p] for p in self.positions(name)]

    def type(self, name: str) -> OperandType:
        return self.signature.arg(name).resolve(self.variant.types)

    def dims(self, name: str) -> tuple[int, ...]:
        """Fully known dimensions of an input (raises Unknown otherwise)."""
        op = self.operand(name)
        if not op.fully_specified:
            raise Unknown(name)
        return op.dimensions

    def rank(self, name: str) -> int:
        op = self.operand(name)
        if not op.dimensions and not op.type.is_scalar:
            raise Unknown(name)
        return len(op.dimensions)

    def value(self, name: str, default: Any = _MISSING) -> Any:
        pos = self.positions(name)
        if not pos:
            if default is not _MISSING:
                return default
            arg = self.signature.arg(name)
            if arg.optional:
                return arg.default
            raise KeyError(f"{self.record.name} has no input {name!r} here")
        v = self._values[pos[0]]
        if v is None:
            raise Unknown(name)
        return v

    def values(self, name: str) -> list[Any]:
        out = [self._values[p] for p in self.positions(name)]
        if any(v is None for v in out):
            raise Unknown(name)
        return out

    @property
    def nchw(self) -> bool:
        return bool(self.record.layout and self.value(self.record.layout, False))


# ---------------------------------------------------------------------------------------
# Quantisation arithmetic (documented in ops/README.md)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero (the rounding of TFLite and NNAPI's CPU path)."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim == 0:
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    # trunc(x + copysign(0.5, x)): the same values (IEEE addition is symmetric in sign), in
    # three passes and no temporaries
    r = np.copysign(0.5, x)
    r += x
    return np.trunc(r, out=r)


def dequantize(raw: np.ndarray, operand: Operand) -> np.ndarray:
    if operand.channel_quant is not None:
        scales = np.asarray(operand.channel_quant.scales, dtype=np.float64)
        shape = [1] * raw.ndim
        shape[operand.channel_quant.channel_dim] = -1
        return raw.astype(np.float64) * scales.reshape(shape)
    real = raw.astype(np.float64)
    if operand.zero_point:
        real -= operand.zero_point
    real *= operand.scale
    return real


def quantize(real: np.ndarray, operand: Operand) -> np.ndarray:
    lo, hi = operand.type.quant_range
    if operand.channel_quant is not None:
        scales = np.asarray(operand.channel_quant.scales, dtype=np.float64)
        shape = [1] * np.ndim(real)
        shape[operand.channel_quant.channel_dim] = -1
        q = round_half_away(np.asarray(real, dtype=np.float64) / scales.reshape(shape))
    else:
        q = round_half_away(np.asarray(real, dtype=np.float64) / operand.scale)
        if operand.zero_point:
            q += operand.zero_point
    return np.clip(q, lo, hi, out=q).astype(dtype_of(operand.type))


def to_real(raw: Any, operand: Operand) -> Any:
    """What a kernel sees for one input: float64 for float/quantised tensors, raw otherwise."""
    if operand.type.is_quant and operand.type is not T.TENSOR_INT32:
        return dequantize(np.asarray(raw), operand)
    if operand.type in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        return np.asarray(raw, dtype=np.float64)
    if operand.type.is_scalar:
        return np.asarray(raw).item()
    return np.asarray(raw)


def from_real(value: np.ndarray, operand: Operand) -> np.ndarray:
    """A kernel's output converted to the output operand's stored type."""
    if operand.type.is_quant:
        return quantize(value, operand)
    dt = dtype_of(operand.type)
    arr = np.asarray(value)
    if dt.kind in "iu" and arr.dtype.kind == "f":
        raise TypeError(f"kernel produced floats for a {operand.type.name} output")
    with np.errstate(over="ignore"):  # a float16 output past 65504 is infinite, as IEEE says
        return arr.astype(dt)


ACTIVATION_RANGE = {
    FusedActivationFunc.NONE: (-math.inf, math.inf),
    FusedActivationFunc.RELU: (0.0, math.inf),
    FusedActivationFunc.RELU1: (-1.0, 1.0),
    FusedActivationFunc.RELU6: (0.0, 6.0),
}


def apply_activation(x: np.ndarray, act: int) -> np.ndarray:
    lo, hi = ACTIVATION_RANGE[FusedActivationFunc(act)]
    out = np.maximum(x, lo)  # NaN stays NaN, as with clip
    if hi != math.inf:
        np.minimum(out, hi, out=out)
    return out


# ---------------------------------------------------------------------------------------
# Sampling valid cases


class Draw:
    """The random choices a sampler makes, from a numpy generator seeded by the case or graph id."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def fork(self) -> Draw:
        """The Draw for one part of a larger draw (a graph's next operation): this one."""
        return self

    def int(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, seq: Sequence[Any]) -> Any:
        return seq[self.int(0, len(seq) - 1)]

    def bool(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    def float(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))

    def array(self, shape: Sequence[int], lo: float, hi: float) -> np.ndarray:
        return self.rng.uniform(lo, hi, size=tuple(shape))

    def integers(self, shape: Sequence[int], lo: int, hi: int) -> np.ndarray:
        return self.rng.integers(lo, hi + 1, size=tuple(shape))


@dataclass
class SampledInput:
    name: str
    dims: tuple[int, ...] | None = None  # None for scalars
    value: Any = None  # None: generated from the arg's domain
    const: bool = False
    scale: float | None = None
    zero_point: int | None = None
    channel_dim: int | None = None  # per-channel quantised filters
    omitted: bool = False


#: (context, rank or None, lo, hi) -> dimensions to use, or None to draw them.
Steer = Callable[["SampleContext", "int | None", int, int], "tuple[int, ...] | None"]


class SampleContext:
    """What a record's ``sample`` function fills in: the shapes and parameters of one case.

    The sampler sees NHWC shapes only; layout and activation are chosen outside and set by
    the case builder. ``max_elements`` bounds tensor sizes so that cases stay fast.
    """

    def __init__(self, record: OpRecord, signature: Signature, variant: Variant, draw: Draw,
                 max_elements: int = 2048, *, dim_hi: int = 5, ranks: tuple[int, int] = (1, 4),
                 steer: Steer | None = None, edge: Any = None) -> None:
        self.record = record
        #: The edge case being drawn (``nncert.ops.edges.Edge``) or None: shared samplers
        #: (broadcast pairs, windows) ask its hooks before drawing the usual way.
        self.edge = edge
        self.signature = signature
        self.variant = variant
        self.draw = draw
        self.max_elements = max_elements
        self.dim_hi = dim_hi
        self.ranks = ranks
        self.steer = steer
        self.inputs: dict[str, SampledInput | list[SampledInput]] = {}
        self.output_dims: list[tuple[int, ...]] | None = None
        #: How many operands a variadic output has (the sampler sets it; SPLIT's num_splits).
        self.output_count = len(signature.outputs)

    def type(self, name: str) -> OperandType:
        return self.signature.arg(name).resolve(self.variant.types)

    def rank(self) -> int:
        """A tensor rank in ``ranks`` (1-4 unless a graph generator narrows it)."""
        return self.draw.int(*self.ranks)

    def dims(self, rank: int | None = None, lo: int = 1, hi: int | None = None) -> tuple[int, ...]:
        """Dimensions of ``rank`` (default: any rank in ``ranks``) within [lo, hi] (default
        [lo, ``dim_hi``]), at most ``max_elements`` in all. A graph generator's ``steer``
        may answer first with the dimensions of a tensor it already has, so that the
        operation can consume it."""
        hi = self.dim_hi if hi is None else hi
        if self.steer is not None:
            got = self.steer(self, rank, lo, hi)
            if got is not None:
                return got
        if rank is None:
            rank = self.rank()
        d = [self.draw.int(lo, hi) for _ in range(rank)]
        while math.prod(d) > self.max_elements:
            i = d.index(max(d))
            d[i] = max(lo, d[i] // 2)
        return tuple(d)

    def tensor(self, name: str, dims: Sequence[int], value: Any = None, *, const: bool = False,
               scale: float | None = None, zero_point: int | None = None,
               channel_dim: int | None = None) -> None:
        item = SampledInput(name, tuple(int(x) for x in dims), value, const, scale, zero_point,
                            channel_dim)
        if self.signature.arg(name).variadic:
            self.inputs.setdefault(name, []).append(item)  # type: ignore[union-attr]
        else:
            self.inputs[name] = item

    def scalar(self, name: str, value: Any) -> None:
        self.inputs[name] = SampledInput(name, None, value, True)

    def omit(self, name: str) -> None:
        """Pass an optional input as NO_VALUE."""
        self.inputs[name] = SampledInput(name, omitted=True)


# ---------------------------------------------------------------------------------------
# Shape helpers shared by several families


def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """NNAPI broadcasting: align trailing dimensions; equal, or one of them is 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ShapeError(f"dimensions {list(a)} and {list(b)} cannot be broadcast")
        out.append(0 if 0 in (x, y) else max(x, y))
    return tuple(reversed(out))


def broadcastable_dims(s: SampleContext, dims: Sequence[int]) -> tuple[int, ...]:
    """Dimensions that broadcast against ``dims``: maybe lower rank, some dimensions 1."""
    rank = s.draw.int(1, len(dims)) if s.draw.bool(0.3) else len(dims)
    tail = list(dims[len(dims) - rank:])
    return tuple(1 if s.draw.bool(0.25) else d for d in tail)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank
