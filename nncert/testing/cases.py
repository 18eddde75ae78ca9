"""Per-operation test cases built from catalogue records (the CTS generated tests, generated).

``sample_case`` turns a record's sampler into a concrete, valid single-operation case with
golden outputs; ``OpCase.model`` renders it as a HAL model in one of the CTS variations.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model, Operand, SymmPerChannelQuantParams, dtype_of
from nncert.hal.types import FusedActivationFunc, OperandType, OperationType, Version
from nncert.ops import edges, get, records
from nncert.ops.base import (
    Arg,
    Draw,
    OpContext,
    OpRecord,
    SampleContext,
    SampledInput,
    ShapeError,
    Signature,
    Steer,
    Variant,
    match,
    quantize,
    to_real,
)
from nncert.ops.evaluate import TO_NCHW, bind, evaluate, evaluate_real, instance_version, output_shapes

T = OperandType

#: The model variations CTS generates for each example (ACC-6 in docs/requirements.md).
VARIATIONS = ("base", "relaxed", "inputs_as_internal", "all_tensors_as_inputs", "dynamic_output",
              "output_consumed")
#: The test of conformance/test_operations.py that runs each variation.
VARIATION_TESTS = {"base": "test_operation", "relaxed": "test_operation_relaxed",
                   "inputs_as_internal": "test_operation_inputs_as_internal",
                   "all_tensors_as_inputs": "test_operation_all_tensors_as_inputs",
                   "dynamic_output": "test_operation_dynamic_output_shape",
                   "output_consumed": "test_operation_output_consumed"}

#: Variations run by tests of their own on chosen cases, outside the CTS's (the fuzz targets
#: index cases x VARIATIONS, so these stay out of it): ``activation_split``, the case's fused
#: activation run as a RELU / RELU1 / RELU6 operation of its own after the operation;
#: ``then_inverse``, the output read by the operation's inverse or a second one of its kind
#: (``_then_inverse``), a pair a compiler may fold away.
EXTRA_VARIATIONS = ("activation_split", "then_inverse")
_SPLIT_ACTIVATIONS = {FusedActivationFunc.RELU: OperationType.RELU,
                      FusedActivationFunc.RELU1: OperationType.RELU1,
                      FusedActivationFunc.RELU6: OperationType.RELU6}


@dataclass
class CaseInput:
    arg: Arg
    operand: Operand | None  # None: omitted optional input (NO_VALUE)
    value: Any  # raw value in the operand's stored type
    const: bool
    #: What ``connect`` answered for this input (a graph generator's operand), else None.
    source: Any = None


@dataclass(frozen=True)
class Values:
    """How generated data is drawn: float range, INT32 range, scales of free quantised
    inputs. The per-operation suite keeps scales small (pre-1.2 scale rules hold); random
    graphs use the CTS random-graph values (docs/requirements.md, notes on ACC-5)."""

    floats: tuple[float, float] = (-2.0, 2.0)
    int32: tuple[int, int] = (-20, 20)
    scales: tuple[float, float] = (0.01, 0.05)


PER_OPERATION = Values()
RANDOM_GRAPH = Values(int32=(0, 255), scales=(0.1, 2.0))

#: A graph generator's hook: (arg, the operand the case would create, its sampled
#: dimensions) -> (an existing operand, its value, a token stored in CaseInput.source) to
#: consume instead, or None.
Connect = Callable[[Arg, Operand, SampledInput], "tuple[Operand, np.ndarray, Any] | None"]


@dataclass
class OpCase:
    record: OpRecord
    signature: Signature
    variant: Variant
    nchw: bool | None
    activation: int | None
    seed: int
    inputs: list[CaseInput]
    outputs: list[Operand]
    expected: list[np.ndarray]
    version: Version
    notes: dict[str, Any] = field(default_factory=dict)
    #: The edge case (``nncert.ops.edges``) this case was drawn as, or None.
    edge: str | None = None

    @property
    def id(self) -> str:
        return case_id(self.record, self.signature, self.variant, self.nchw, self.activation,
                       self.seed, self.edge)

    def model(self, variation: str = "base", pool_kind: str = "ashmem") -> tuple[Model, list[np.ndarray]]:
        """The case as a HAL model in a CTS ``variation``, with the request's input values.
        Large constants live in a pool of ``pool_kind`` (MEM-1, MEM-3)."""
        if variation not in VARIATIONS and variation not in EXTRA_VARIATIONS:
            raise ValueError(f"unknown variation {variation!r}")
        split = variation == "activation_split"
        b = ModelBuilder(pool_kind)
        model_inputs: list[int] = []
        feeds: list[np.ndarray] = []
        op_inputs = []
        for ci in self.inputs:
            if ci.operand is None:
                op_inputs.append(b.no_value(ci.arg.resolve(self.variant.types)))
                continue
            o = ci.operand
            if split and ci.arg.name == self.record.activation:
                op_inputs.append(b.constant(o.type, np.asarray(0, np.int32)))  # NONE: run apart below
                continue
            as_input = o.type.is_tensor and (not ci.const or variation == "all_tensors_as_inputs")
            if not as_input:
                op_inputs.append(b.constant(o.type, ci.value, o.scale, o.zero_point, o.channel_quant))
                continue
            if variation == "inputs_as_internal":
                fed = b.operand(o.type, o.dimensions, o.scale, o.zero_point)
                zero = quantize(np.zeros(1), o) if o.type.is_quant else np.zeros(1, dtype_of(o.type))
                zero_idx = b.constant(o.type, zero, o.scale, o.zero_point)
                act = b.constant(T.INT32, 0)
                idx = b.operand(o.type, o.dimensions, o.scale, o.zero_point)
                b.operation(OperationType.ADD, [fed, zero_idx, act], [idx])
                model_inputs.append(fed)
            else:
                idx = b.operand(o.type, o.dimensions, o.scale, o.zero_point, o.channel_quant)
                model_inputs.append(idx)
            feeds.append(np.asarray(ci.value))
            op_inputs.append(idx)
        outs = []
        for o in self.outputs:
            dims = tuple(0 for _ in o.dimensions) if variation == "dynamic_output" else o.dimensions
            outs.append(b.operand(o.type, dims, o.scale, o.zero_point))
        if split:  # the operation into an intermediate of the output's type and parameters
            o = self.outputs[0]
            mid = b.operand(o.type, o.dimensions, o.scale, o.zero_point)
            b.operation(self.record.type, op_inputs, [mid])
            b.operation(_SPLIT_ACTIVATIONS[FusedActivationFunc(self.activation)], [mid], outs)
        elif variation == "then_inverse":  # the operation, then its inverse (or a second transpose)
            op2, extra, last = _then_inverse(self)
            b.operation(self.record.type, op_inputs, outs)
            second = [outs[0]] + [b.constant(e.type, v, e.scale, e.zero_point) for e, v in extra]
            outs = [b.operand(last.type, last.dimensions, last.scale, last.zero_point)]
            b.operation(op2, second, outs)
        else:
            b.operation(self.record.type, op_inputs, outs)
        model_outputs = list(outs)
        if variation == "output_consumed":
            # Each output read again by ADD(output, output), a second output: twice the first
            # (quantised: the same stored values at twice the scale). Read twice, and its value
            # changed, so that an ADD run in place over the model output, or reading its second
            # input as anything but the first, is seen.
            for idx, o in zip(outs, self.outputs, strict=True):
                scale = 2 * o.scale if o.type.is_quant else o.scale
                copy = b.operand(o.type, o.dimensions, scale, o.zero_point)
                b.operation(OperationType.ADD, [idx, idx, b.constant(T.INT32, 0)], [copy])
                model_outputs.append(copy)
        model = b.build(model_inputs, model_outputs, relax=variation == "relaxed")
        return model, feeds

    def variation_expected(self, variation: str) -> list[np.ndarray]:
        """The golden outputs of the case's model in ``variation``: the case's, and for
        ``output_consumed`` then each doubled by ADD(output, output) (quantised: the same stored
        values, at twice the scale)."""
        if variation == "then_inverse":
            op2, extra, last = _then_inverse(self)
            return [np.asarray(evaluate(get(op2), [self.outputs[0], *(e for e, _ in extra)],
                                        [self.expected[0], *(v for _, v in extra)], [last])[0])]
        if variation != "output_consumed":
            return list(self.expected)
        return [*self.expected, *(np.asarray(e) if o.type.is_quant else np.asarray(e) * 2
                                  for e, o in zip(self.expected, self.outputs, strict=True))]

    def supports(self, variation: str) -> bool:
        """Whether ``variation`` makes sense for this case (CTS applies each selectively)."""
        tensors = [ci for ci in self.inputs if ci.operand is not None and ci.operand.type.is_tensor]
        if variation == "relaxed":
            return any(o.type is T.TENSOR_FLOAT32 for o in self.outputs) or \
                any(ci.operand.type is T.TENSOR_FLOAT32 for ci in tensors)
        if variation == "inputs_as_internal":
            inputs = [ci for ci in tensors if not ci.const]
            return bool(inputs) and all(ci.operand.type in _ADD_TYPES for ci in inputs)
        if variation == "all_tensors_as_inputs":
            return any(ci.const for ci in tensors)
        if variation == "dynamic_output":
            return all(o.dimensions for o in self.outputs)
        if variation == "then_inverse":
            return _then_inverse(self) is not None
        if variation == "activation_split":  # a RELU / RELU1 / RELU6 of the output's type
            return bool(self.activation) and len(self.outputs) == 1 and self.outputs[0].type in _ADD_TYPES \
                and self.outputs[0].type is not T.TENSOR_INT32
        if variation == "output_consumed":  # ADD's types and ranks, and room to double
            return all(o.type in _ADD_TYPES and 1 <= len(o.dimensions) <= 4 and all(o.dimensions) and
                       (o.type.is_quant or _doubles(e, o.type)) for o, e in zip(self.outputs, self.expected,
                                                                                 strict=True))
        return True

    def variation_version(self, variation: str) -> Version:
        v = self.version
        if variation == "relaxed":
            v = max(v, Version.V1_1)
        if variation == "dynamic_output":
            v = max(v, Version.V1_2)
        if variation == "inputs_as_internal":
            v = max([v] + [_ADD_TYPES[ci.operand.type] for ci in self.inputs
                           if ci.operand is not None and ci.operand.type.is_tensor and not ci.const])
        if variation == "output_consumed":
            v = max([v] + [_ADD_TYPES[o.type] for o in self.outputs])
        if variation == "then_inverse" and self.record.type is OperationType.DEQUANTIZE:
            v = max(v, Version.V1_2)  # QUANTIZE
        return v


_FLOATS = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
_QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _then_inverse(case: OpCase) -> tuple[OperationType, list[tuple[Operand, np.ndarray]], Operand] | None:
    """The operation ``then_inverse`` appends to ``case``: (its type, its constant inputs after
    the case's output, its output operand), or None where there is none. CAST from a float to
    an integer type: CAST back (the truncation must stay); QUANTIZE: DEQUANTIZE to its input's
    type (the rounding must stay); DEQUANTIZE of 8-bit asymmetric data: QUANTIZE to its type at
    three times the scale (a requantisation, not a copy); TRANSPOSE of rank 3 or 4: TRANSPOSE by
    the rotation (1, ..., rank-1, 0), which composes with most permutations only one way round;
    a quantised ADD or MUL: ADD of a constant zero or MUL by a constant one into twice the
    output's scale (identities, but a requantisation, not a copy)."""
    kinds = (OperationType.CAST, OperationType.QUANTIZE, OperationType.DEQUANTIZE, OperationType.TRANSPOSE,
             OperationType.ADD, OperationType.MUL)
    if len(case.outputs) != 1 or case.record.type not in kinds:
        return None
    out = case.outputs[0]
    if not out.dimensions or not all(out.dimensions):
        return None
    kind = case.record.type
    if kind in (OperationType.ADD, OperationType.MUL):
        if out.type not in _QUANT8:
            return None
        lo = out.type.quant_range[0]
        # 0 at scale 0.5, or 1 at scale 1/128 (zero point at the type's bottom, 1 stored as lo + 128)
        scale, zp, stored = (0.5, lo, lo) if kind is OperationType.ADD else (1 / 128, lo, lo + 128)
        const = Operand(out.type, (1,), scale, zp)
        return (kind, [(const, np.asarray([stored], dtype_of(out.type))),
                       (Operand(T.INT32), np.asarray(0, np.int32))],
                Operand(out.type, out.dimensions, _f32(2 * out.scale), out.zero_point))
    src = next(ci.operand for ci in case.inputs if ci.arg.name == "input")
    if kind is OperationType.CAST and src.type in _FLOATS and \
            out.type in (T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM):
        return OperationType.CAST, [], Operand(src.type, out.dimensions)
    if kind is OperationType.QUANTIZE and src.type in _FLOATS:
        return OperationType.DEQUANTIZE, [], Operand(src.type, out.dimensions)
    if kind is OperationType.DEQUANTIZE and src.type in _QUANT8:
        return (OperationType.QUANTIZE, [],
                Operand(src.type, out.dimensions, _f32(3 * src.scale), src.zero_point))
    if kind is OperationType.TRANSPOSE and len(out.dimensions) >= 3:
        rank = len(out.dimensions)
        perm = np.roll(np.arange(rank, dtype=np.int32), -1)
        dims = tuple(out.dimensions[int(p)] for p in perm)
        return (OperationType.TRANSPOSE, [(Operand(T.TENSOR_INT32, (rank,)), perm)],
                Operand(out.type, dims, out.scale, out.zero_point))
    return None


def _doubles(value: np.ndarray, t: OperandType) -> bool:
    """Whether twice every element of ``value`` is finite (within int32) in type ``t``."""
    v = np.abs(np.asarray(value, np.float64))
    top = np.iinfo(np.int32).max if t is T.TENSOR_INT32 else np.finfo(dtype_of(t)).max
    return bool(np.isfinite(v).all() and (2 * v <= top).all())


_ADD_TYPES = {T.TENSOR_FLOAT32: Version.V1_0, T.TENSOR_QUANT8_ASYMM: Version.V1_0,
              T.TENSOR_FLOAT16: Version.V1_2, T.TENSOR_QUANT8_ASYMM_SIGNED: Version.V1_3,
              T.TENSOR_INT32: Version.V1_3}


def case_id(record: OpRecord, sig: Signature, var_: Variant, nchw: bool | None,
            act: int | None, seed: int, edge: str | None = None) -> str:
    """``ADD-float32-relu6-s0``; an edge case names its edge instead of the activation (which
    the edge sets): ``ADD-float32-edge_saturate_relu6-s0``."""
    parts = [record.name]
    if sig.name:
        parts.append(sig.name)
    parts.append(var_.label)
    if nchw is not None:
        parts.append("nchw" if nchw else "nhwc")
    if edge is not None:
        parts.append(f"edge_{edge}")
    elif act is not None:
        parts.append(FusedActivationFunc(act).name.lower())
    parts.append(f"s{seed}")
    return "-".join(parts)


def _case_rng(record: OpRecord, sig: Signature, var_: Variant, seed: int,
              edge: str | None = None, attempt: int = 0) -> np.random.Generator:
    # Layout and activation do not change the draw: NCHW and NHWC cases of a seed hold the
    # same data, so a layout-only failure shows as such. An edge case's draw is its own (and
    # its attempt's, when a draw missed the edge).
    key = f"{record.name}/{sig.name}/{var_.label}/{seed}"
    if edge is not None:
        key += f"/edge={edge}/{attempt}"
    return np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))


#: The seeds of the per-operation suite: three sampled cases per combination.
SEEDS = (0, 1, 2)
#: The seeds of the edge cases: one per edge of each signature and type variant.
EDGE_SEEDS = (0,)


def enumerate_cases(seeds: Sequence[int] = SEEDS) -> Iterator[tuple]:
    """(record, signature, variant, nchw, activation, seed) for the whole catalogue: every
    signature x type variant x layout x fused activation x seed."""
    for record in records():
        for sig in record.signatures:
            for var_ in record.variants:
                layouts = (False, True) if record.layout else (None,)
                acts: Sequence[int | None] = (None,)
                if record.activation:
                    out_type = sig.outputs[0].resolve(var_.types)
                    acts = tuple(FusedActivationFunc) if out_type is not T.TENSOR_INT32 else (0,)
                for nchw, act, seed in itertools.product(layouts, acts, seeds):
                    yield record, sig, var_, nchw, act, seed


#: Draws an edge case may take to reach its edge (``Edge.reached``) before it is a
#: catalogue bug.
EDGE_TRIES = 12


def enumerate_edge_cases(seeds: Sequence[int] = EDGE_SEEDS) -> Iterator[tuple]:
    """(record, signature, variant, nchw, activation, seed, edge name) of every edge case:
    each signature x type variant x edge (``nncert.ops.edges.edges_of``) x seed, in NHWC
    (an edge is not about the layout)."""
    for record in records():
        for sig in record.signatures:
            for var_ in record.variants:
                nchw = False if record.layout else None
                for e in edges.edges_of(record, sig, var_):
                    act = e.activation if record.activation else None
                    for seed in seeds:
                        yield record, sig, var_, nchw, act, seed, e.name


def is_heavy(key: tuple) -> bool:
    """Whether an edge case key names a heavy edge (thousands of elements)."""
    return len(key) > 6 and key[6] is not None and edges.find(key[0], key[1], key[2], key[6]).heavy


def sample_case(record: OpRecord, sig: Signature, var_: Variant, nchw: bool | None = None,
                act: int | None = None, seed: int = 0, edge: str | None = None,
                draw: Draw | None = None, max_elements: int = 2048, *, values: Values = PER_OPERATION,
                dim_hi: int = 5, ranks: tuple[int, int] = (1, 4), steer: Steer | None = None,
                connect: Connect | None = None, must_connect: bool = False) -> OpCase:
    """A valid single-operation case with golden outputs. Raises ShapeError (naming the
    record) if the record's sampler produced an invalid case: a catalogue bug, or, with a
    graph generator's ``steer`` and ``connect`` hooks, a combination to draw again (also,
    with ``must_connect``, a case that consumes nothing ``connect`` offered).

    ``edge``: the name of one of the record's edge cases (``nncert.ops.edges``); it sets the
    activation (``act`` is ignored), and the case is drawn again (from the next attempt's
    seed) until it reaches its edge."""
    kw = dict(max_elements=max_elements, values=values, dim_hi=dim_hi, ranks=ranks, steer=steer,
              connect=connect, must_connect=must_connect)
    if edge is None:
        return _sample(record, sig, var_, nchw, act, seed, draw or Draw(_case_rng(record, sig, var_, seed)),
                       None, **kw)
    e = edges.find(record, sig, var_, edge)
    act = e.activation if record.activation else None
    if e.floats or e.scales:
        kw["values"] = dataclasses.replace(values, floats=e.floats or values.floats,
                                           scales=e.scales or values.scales)
    partial = None
    for attempt in range(EDGE_TRIES):
        attempt_draw = draw or Draw(_case_rng(record, sig, var_, seed, edge, attempt))
        case = _sample(record, sig, var_, nchw, act, seed, attempt_draw, e, **kw)
        score = e.reached(case.notes["pre_activation"]) if e.reached else edges.FULL
        if score == edges.FULL:
            return case
        if score and partial is None:
            partial = case
    if partial is None:
        raise ShapeError(f"{record.name} {var_.label}: edge case {edge} not reached in {EDGE_TRIES} draws")
    return partial


def _sample(record: OpRecord, sig: Signature, var_: Variant, nchw: bool | None, act: int | None,
            seed: int, draw: Draw, edge: edges.Edge | None, *, max_elements: int, values: Values,
            dim_hi: int, ranks: tuple[int, int], steer: Steer | None, connect: Connect | None,
            must_connect: bool) -> OpCase:
    s = SampleContext(record, sig, var_, draw, max_elements, dim_hi=dim_hi, ranks=ranks, steer=steer,
                      edge=edge)
    (edge.sample if edge is not None and edge.sample else record.sample)(s)
    if edge is not None and edge.adjust:
        edge.adjust(s)
    if record.layout and nchw:
        s.scalar(record.layout, True)
    if record.activation:
        s.scalar(record.activation, int(act or 0))
    inputs = _materialise(record, sig, var_, s, bool(nchw), draw, values, connect)
    if must_connect and not any(ci.source is not None for ci in inputs):
        raise ShapeError(f"{record.name}: consumes no tensor of the graph")
    in_ops = [ci.operand for ci in inputs]
    raw = [ci.value for ci in inputs]
    out_args = sig.output_args(s.output_count)
    m = match(record, [None if o is None else o.type for o in in_ops],
              [a.resolve(var_.types) for a in out_args])
    provisional = [Operand(a.resolve(var_.types), (), 1.0 if a.resolve(var_.types).is_quant else 0.0)
                   for a in out_args]
    shapes = output_shapes(record, in_ops, raw, provisional, m)
    if shapes is None:
        raise ShapeError(f"{record.name}: output shape unknown with every input known")
    outputs = [dataclasses.replace(o, dimensions=tuple(d)) for o, d in zip(provisional, shapes, strict=True)]
    policy = edge.output_quant if edge is not None else ""
    notes: dict[str, Any] = {}
    if edge is not None and (edge.reached or policy == "pre_activation"):
        # The golden before the fused activation: where a clamp must act, and what a
        # quantised output must be able to hold for the clamp to show.
        plain = [np.zeros((), np.int32) if ci.operand is not None and ci.arg.name == record.activation
                 else ci.value for ci in inputs]
        notes["pre_activation"] = evaluate_real(record, in_ops, plain, outputs, m)[0]
    if any(o.type.is_quant for o in outputs):
        real = evaluate_real(record, in_ops, raw, outputs, m)
        if policy == "pre_activation":
            real = [notes["pre_activation"], *real[1:]]
        outputs = [_output_quant(record, a, o, r, inputs, var_, policy)
                   for a, o, r in zip(out_args, outputs, real, strict=True)]
    real_in = [kernel_value(record, o, v) for o, v in zip(in_ops, raw, strict=True)]
    ctx = bind(record, in_ops, real_in, outputs, m)
    if record.check:
        record.check(ctx)
    expected = evaluate(record, in_ops, raw, outputs, m)
    for i, (e, o) in enumerate(zip(expected, outputs, strict=True)):
        if tuple(e.shape) != tuple(o.dimensions):
            raise ShapeError(f"{record.name}: kernel output {i} has shape {list(e.shape)}, "
                             f"the shape rule says {list(o.dimensions)}")
    version = instance_version(ctx)
    if edge is not None and edge.since is not None:
        version = max(version, edge.since)
    return OpCase(record, sig, var_, nchw, act, seed, inputs, outputs, expected, version,
                  notes, None if edge is None else edge.name)


def stepped(case: OpCase, step: int, state: Sequence[np.ndarray]) -> OpCase:
    """Execution ``step`` of a chain on a recurrent operation's case (``OpRecord.state``):
    ``state`` (one array per state pair, in the record's order) in its state inputs, the
    other non-constant tensors given new values (a permutation of the case's own, drawn
    from the case id and ``step``, so every domain rule still holds), and the golden
    recomputed from exactly these inputs."""
    record = case.record
    given = {name: value for (name, _), value in zip(record.state_pairs(case.signature), state, strict=True)}
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"{case.id}/step{step}".encode()).digest()[:8],
                                               "little"))
    inputs = []
    for ci in case.inputs:
        o = ci.operand
        if o is not None and ci.arg.name in given:
            value = np.asarray(given[ci.arg.name]).astype(dtype_of(o.type)).reshape(o.dimensions)
        elif o is None or not o.type.is_tensor or ci.const:
            value = ci.value
        else:
            value = rng.permutation(np.asarray(ci.value).ravel()).reshape(np.shape(ci.value))
        inputs.append(dataclasses.replace(ci, value=np.ascontiguousarray(value)))
    expected = evaluate(record, [ci.operand for ci in inputs], [ci.value for ci in inputs], case.outputs)
    return dataclasses.replace(case, inputs=inputs, expected=expected)


def state_values(case: OpCase, outputs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """The state a recurrent case carries: its state inputs' values, or with ``outputs`` (one
    execution's), the state outputs it hands to the next execution."""
    if outputs is not None:
        return [np.asarray(outputs[k]) for _, k in case.record.state_pairs(case.signature)]
    by_name = {ci.arg.name: ci.value for ci in case.inputs if ci.operand is not None}
    return [np.asarray(by_name[name]) for name, _ in case.record.state_pairs(case.signature)]


def kernel_value(record: OpRecord, operand: Operand | None, value: Any) -> Any:
    """An input value as ``record``'s kernels and shape rules see it (None when omitted or
    not known)."""
    if operand is None or value is None:
        return None
    return to_real(value, operand) if record.dequantize else value


def _materialise(record: OpRecord, sig: Signature, var_: Variant, s: SampleContext, nchw: bool,
                 draw: Draw, values: Values, connect: Connect | None) -> list[CaseInput]:
    sampled: list[tuple[Arg, SampledInput | None]] = []
    present = [i for i, a in enumerate(sig.inputs) if a.name in s.inputs]
    last = max(present, default=-1)
    for i, a in enumerate(sig.inputs):
        got = s.inputs.get(a.name)
        if got is None:
            if i > last and a.optional:
                break
            if not a.optional:
                raise ShapeError(f"{record.name}: sampler did not set required input {a.name!r}")
            got = SampledInput(a.name, None, a.default, True) if a.default is not None \
                else SampledInput(a.name, omitted=True)
        for item in (got if isinstance(got, list) else [got]):
            sampled.append((a, item))
    chosen: dict[str, Operand] = {}
    result: list[CaseInput] = []
    for a, item in sampled:
        t = a.resolve(var_.types)
        if item.omitted:
            result.append(CaseInput(a, None, None, True))
            continue
        if t.is_scalar:
            result.append(CaseInput(a, Operand(t), np.asarray(item.value, dtype=dtype_of(t)), True))
            continue
        dims = item.dims
        transpose = nchw and a.name in record.layout_inputs and len(dims) == 4
        if transpose:
            dims = tuple(dims[j] for j in TO_NCHW)
        operand = _input_operand(a, t, dims, item, chosen, draw, values)
        if connect is not None and item.value is None and not (item.const or a.const):
            found = connect(a, operand, item)
            if found is not None:
                operand, value, source = found
                chosen.setdefault(a.name, operand)
                result.append(CaseInput(a, operand, value, False, source))
                continue
        chosen.setdefault(a.name, operand)
        value = item.value
        if value is None:
            value = _generate(a, operand, item.dims, draw, values)
        else:
            value = np.asarray(value)
            if t.is_quant and value.dtype.kind == "f":
                value = quantize(value, operand)
            value = value.astype(dtype_of(t))
        if transpose:
            value = np.transpose(np.asarray(value).reshape(item.dims), TO_NCHW)
        elif nchw and a.name in record.layout_vectors:
            value = np.asarray(value)[list(TO_NCHW)]  # a 4-D shape vector sampled in NHWC order
        result.append(CaseInput(a, operand, np.ascontiguousarray(value), item.const or a.const))
    return result


def _input_operand(a: Arg, t: OperandType, dims: tuple[int, ...], item: SampledInput,
                   chosen: dict[str, Operand], draw: Draw, values: Values) -> Operand:
    if item.channel_dim is not None:
        n = dims[item.channel_dim]
        scales = tuple(_f32(draw.float(0.005, 0.02)) for _ in range(n))
        return Operand(t, dims, 0.0, 0, channel_quant=SymmPerChannelQuantParams(scales, item.channel_dim))
    if not t.is_quant:
        scale = 0.0
        if a.quant.kind == "bias":
            first, second = (chosen[n] for n in a.quant.ref.split(","))
            if second.channel_quant is None:
                scale = _f32(first.scale * second.scale)
        return Operand(t, dims, scale if item.scale is None else item.scale, 0)
    lo, hi = t.quant_range
    q = a.quant
    if item.scale is not None:
        scale, zp = item.scale, item.zero_point if item.zero_point is not None else 0
    elif q.kind == "same":
        ref = chosen[q.ref]
        scale, zp = ref.scale, ref.zero_point
    elif q.kind == "fixed":
        scale = q.scale
        zp = q.zero_point - (128 if t is T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
    else:
        scale = _f32(draw.float(*values.scales))
        zp = 0 if lo == -hi or t in (T.TENSOR_QUANT16_SYMM,) else draw.int(lo, hi)
        if item.zero_point is not None:
            zp = item.zero_point
    return Operand(t, dims, _f32(scale), zp)


def _f32(x: float) -> float:
    """Scales are 32-bit floats in the HAL: keep them representable."""
    return float(np.float32(x))


def _generate(a: Arg, o: Operand, dims: tuple[int, ...], draw: Draw, values: Values) -> np.ndarray:
    t = o.type
    dom = a.domain
    if t.is_quant:
        lo, hi = t.quant_range
        zp = o.zero_point if o.channel_quant is None else 0
        if dom == "positive":
            lo = min(max(lo, zp + 1), hi)
        raw = draw.integers(dims, lo, hi)
        if dom == "nonzero":
            raw = np.where(raw == zp, zp + 1 if zp < hi else zp - 1, raw)
        return raw.astype(dtype_of(t))
    if t is T.TENSOR_BOOL8:
        return draw.integers(dims, 0, 1).astype(bool)
    if t is T.TENSOR_INT32:
        lo, hi = values.int32
        if dom == "positive":
            lo = max(lo, 1)
        raw = draw.integers(dims, lo, hi)
        if dom == "nonzero":
            raw = np.where(raw == 0, 1, raw)
        return raw.astype(np.int32)
    if dom == "positive":
        x = draw.array(dims, 0.1, 2.0)
    elif dom == "nonzero":
        x = draw.array(dims, 0.25, 2.0) * np.where(draw.integers(dims, 0, 1) == 1, 1.0, -1.0)
    elif dom == "unit":
        x = draw.array(dims, -0.95, 0.95)
    else:
        x = draw.array(dims, *values.floats)
    return x.astype(dtype_of(t))


def _output_quant(record: OpRecord, a: Arg, o: Operand, real: np.ndarray,
                  inputs: list[CaseInput], var_: Variant, policy: str = "") -> Operand:
    t = o.type
    if not t.is_quant:
        return o
    lo, hi = t.quant_range
    q = a.quant
    if q.kind in ("same", "follows"):
        ref = next(ci.operand for ci in inputs if ci.arg.name == q.ref)
        return dataclasses.replace(o, scale=ref.scale, zero_point=ref.zero_point)
    if q.kind == "fixed":
        zp = q.zero_point - (128 if t is T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
        return dataclasses.replace(o, scale=q.scale, zero_point=zp)
    # Free: cover the golden's range (including 0), as CTS does when it re-quantises.
    finite = real[np.isfinite(real)] if real.size else np.zeros(1)
    rmin = min(0.0, float(finite.min()) if finite.size else 0.0)
    rmax = max(0.0, float(finite.max()) if finite.size else 0.0)
    if lo == -hi or t is T.TENSOR_QUANT16_SYMM:  # symmetric types: zero point must be 0
        return dataclasses.replace(o, scale=_f32(max(max(-rmin, rmax) / hi, 1e-3)), zero_point=0)
    # An edge case's policy (nncert.ops.edges.Edge.output_quant): a zero point at the
    # type's extreme, or a scale as small as the golden's range, below the usual 1e-3 floor.
    if policy in ("zero_point_min", "zero_point_max"):
        # The zero point at that extreme holds the golden's values of one sign; when the
        # golden has none of that sign, the other extreme (a saturated output tests little).
        at_min = policy == "zero_point_min"
        if (rmax if at_min else -rmin) <= 0:
            at_min = not at_min
        side = rmax if at_min else -rmin
        scale = side / (hi - lo) if side > 0 else 1e-3
        return dataclasses.replace(o, scale=_f32(scale), zero_point=lo if at_min else hi)
    if policy == "below_inputs":
        # OVER_OUTPUT_SMALL of the smallest 8-bit input scale; the zero point placing the
        # golden's values within that scale's reach (not the saturated ones) inside the type.
        smallest = min(ci.operand.scale for ci in inputs
                       if ci.operand is not None and ci.operand.type.is_quant and ci.operand.type.is_tensor)
        scale = _f32(edges.OVER_OUTPUT_SMALL * smallest)
        near = finite[np.abs(finite) <= (hi - lo) * scale]
        low = min(0.0, float(near.min()) if near.size else 0.0)
        return dataclasses.replace(o, scale=scale, zero_point=int(np.clip(round(lo - low / scale), lo, hi)))
    if policy == "unit":
        return dataclasses.replace(o, scale=1.0, zero_point=int(np.clip(round(lo - rmin), lo, hi)))
    floor = 1e-3 if policy != "range" or rmax == rmin else 0.0
    scale = max((rmax - rmin) / (hi - lo), floor)
    zp = int(np.clip(round(lo - rmin / scale), lo, hi))
    return dataclasses.replace(o, scale=_f32(scale), zero_point=zp)


def context_for(case: OpCase) -> OpContext:
    """The OpContext of a case with every value known (for checks and tests)."""
    in_ops = [ci.operand for ci in case.inputs]
    return bind(case.record, in_ops, [kernel_value(case.record, o, ci.value)
                                      for o, ci in zip(in_ops, case.inputs, strict=True)], case.outputs)
