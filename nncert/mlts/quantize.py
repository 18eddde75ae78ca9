"""Post-training static quantisation of a float32 HAL model.

``quantize(model, calibration, scheme)`` runs the float model in the reference interpreter on
the calibration inputs, records the range of every float tensor, and rewrites the model with
quantised operands, every operation taking the catalogue's quantised type variant:

- ``uint8``: TENSOR_QUANT8_ASYMM activations and weights, one scale per tensor (HAL 1.0 types);
- ``int8``: TENSOR_QUANT8_ASYMM_SIGNED activations; filters of the operations whose catalogue
  record has a TENSOR_QUANT8_SYMM_PER_CHANNEL variant (CONV_2D, DEPTHWISE_CONV_2D, GROUPED and
  TRANSPOSE convolutions) quantised per output channel, other weights (FULLY_CONNECTED)
  symmetric per tensor (HAL 1.3 types).

``per_channel=True`` gives uint8 models per-channel filters too (HAL 1.2): per-tensor filters
cost much accuracy where batch normalisation was folded into depthwise convolutions
(EfficientNet-Lite0 keeps about half its top-1 decisions with them).

Nothing here names an operation's inputs: the catalogue says it. The type variant gives each
operand's new type; ``Quant`` rules give the parameters: ``same`` ties operands to one scale
and zero point (their ranges are merged), ``fixed`` imposes the documented ones (LOGISTIC,
SOFTMAX, TANH), and ``bias`` names the input and the weights whose scales multiply into the
TENSOR_INT32 bias's (for a per-channel filter, the bias's scale is 0 and each channel's is
implied). CONCATENATION also gets one scale for its inputs and output: the catalogue allows
different ones from HAL 1.2, but sharing keeps the model valid at 1.0 and is what TFLite's
quantiser does.

Ranges include 0 (so that zero padding and ReLU are exact); a range is mapped onto the whole
integer range of the type. The model's inputs and outputs are quantised too by default (as
NNAPI's MLTS quantised models take and give uint8): ``quantize_inputs`` and
``dequantize_outputs`` convert data at the boundary. ``float_io=True`` keeps float32 inputs
and outputs instead, with QUANTIZE and DEQUANTIZE operations inside the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model, Operand, OperandSpec, SymmPerChannelQuantParams
from nncert.hal.types import OperandLifeTime, OperationType
from nncert.hal.types import OperandType as T
from nncert.ops import get
from nncert.ops.base import Match, OpContext, OpRecord, ShapeError, Unknown, Variant, match
from nncert.ops.base import dequantize as dequantize_values
from nncert.ops.base import quantize as quantize_values
from nncert.ops.interpreter import Constants, run_model

SCHEMES = {"uint8": T.TENSOR_QUANT8_ASYMM, "int8": T.TENSOR_QUANT8_ASYMM_SIGNED}

#: Operations whose quantised inputs and output share one scale and zero point here although
#: the catalogue lets them differ (from HAL 1.2): see the module docstring.
SHARED_PARAMETERS = frozenset({OperationType.CONCATENATION})

#: The smallest scale given to any operand: LiteRT's fixed-point rescaling fails outside
#: [2^-32, 2^32] (see the litert exporter), and a tensor spanning less is zero for any use.
MIN_SCALE = 2.0**-30
#: A per-channel filter scale is at least this fraction of the filter's largest one.
CHANNEL_SCALE_FLOOR = 2.0**-10

_EIGHT_BIT = (*SCHEMES.values(), T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)
_INT32_MAX = np.iinfo(np.int32).max


@dataclass
class _Plan:
    """How one operation is quantised: its record, the quantised variant's match, and the
    new type of each of its operands (by operand index)."""

    record: OpRecord
    match: Match
    types: dict[int, T]


def _f32(x: float) -> float:
    """A scale as the float32 the HAL stores, so that products checked in float32 agree."""
    return float(np.float32(x))


# ---------------------------------------------------------------------------------------
# Calibration


def calibrate(model: Model, calibration: Iterable[Sequence[np.ndarray]]) -> dict[int, tuple[float, float]]:
    """(min, max) over the calibration inputs of every TENSOR_FLOAT32 model input and
    operation output of the main subgraph, by operand index (non-finite values ignored)."""
    sg = model.main
    ranges: dict[int, tuple[float, float]] = {}

    def note(idx: int, value: np.ndarray) -> None:
        v = np.asarray(value, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        lo, hi = float(v.min()), float(v.max())
        if idx in ranges:
            lo, hi = min(lo, ranges[idx][0]), max(hi, ranges[idx][1])
        ranges[idx] = (lo, hi)

    def after(n, op, in_ops, in_values, out_ops, outs):  # the interpreter's AfterOperation hook
        for idx, operand, value in zip(op.outputs, out_ops, outs, strict=True):
            if operand.type is T.TENSOR_FLOAT32:
                note(idx, value)
        return outs

    from threadpoolctl import threadpool_limits

    count = 0
    constants: Constants = {}  # read from the pools and converted once, not once per input
    # One BLAS thread: one input at a time gives products too small to share, and threads only
    # contend on a busy host (EfficientNet-Lite0's 64 images took 27 s on 2 shared cores, 8 s on
    # one thread); the order of every sum is then fixed whatever the host.
    with threadpool_limits(limits=1, user_api="blas"):
        for inputs in calibration:
            feeds = [np.asarray(x, dtype=np.float32) for x in inputs]
            for idx, x in zip(sg.input_indexes, feeds, strict=True):
                if sg.operands[idx].type is T.TENSOR_FLOAT32:
                    note(idx, x)
            run_model(model, feeds, after=after, constants=constants)
            count += 1
    if count == 0:
        raise ValueError("quantize needs at least one calibration input")
    return ranges


# ---------------------------------------------------------------------------------------
# Choosing each operation's quantised variant


def _describe(n: int, op_type: OperationType) -> str:
    name = getattr(op_type, "name", str(op_type))
    return f"operation {n} ({name})"


def _weight_args(record_match: Match) -> dict[str, str]:
    """{bias arg: weights arg} from the signature's ``bias`` rules ("input,filter")."""
    out = {}
    for a in record_match.signature.inputs:
        if a.quant.kind == "bias":
            out[a.name] = a.quant.ref.split(",")[1]
    return out


def _candidates(record: OpRecord, qtype: T, prefer_per_channel: bool) -> list[Variant]:
    found = [v for v in record.variants if v.primary is qtype]
    per_channel = [v for v in found if T.TENSOR_QUANT8_SYMM_PER_CHANNEL in v.types.values()]
    per_tensor = [v for v in found if v not in per_channel]
    return per_channel + per_tensor if prefer_per_channel else per_tensor + per_channel


def _plan(model: Model, n: int, record: OpRecord | None, op_type: OperationType, inputs: list[int],
          outputs: list[int], qtype: T, per_channel: bool) -> _Plan | None:
    """The quantised form of one operation, or None when it has no float32 tensor to quantise."""
    sg = model.main
    where = _describe(n, op_type)
    if record is None:
        raise ValueError(f"cannot quantise {where}: the operation catalogue has no record for it")
    ins: list[Operand | None] = [None if sg.operands[i].lifetime is OperandLifeTime.NO_VALUE
                                 else sg.operands[i] for i in inputs]
    outs = [sg.operands[i] for i in outputs]
    if not any(o is not None and o.type is T.TENSOR_FLOAT32 for o in [*ins, *outs]):
        return None
    try:
        float_match = match(record, [None if o is None else o.type for o in ins], [o.type for o in outs])
    except ShapeError as e:
        raise ValueError(f"cannot quantise {where}: {e}") from None
    weights = set(_weight_args(float_match).values())
    weights_constant = all(ins[p] is not None and ins[p].lifetime in _CONSTANT
                           for name in weights for p in float_match.positions.get(name, []))
    prefer_pc = per_channel and bool(weights) and weights_constant
    sig = float_match.signature
    for variant in _candidates(record, qtype, prefer_pc):
        if T.TENSOR_QUANT8_SYMM_PER_CHANNEL in variant.types.values() and not weights_constant:
            continue
        bindings = variant.types
        types: dict[int, T] = {}
        ok = True
        for args, positions, operands, prefix in ((sig.inputs, inputs, ins, ""),
                                                   (sig.outputs, outputs, outs, "out:")):
            for a in args:
                for p in float_match.positions.get(prefix + a.name, []):
                    old = operands[p]
                    if old is None:
                        continue
                    new = a.resolve(bindings)
                    if old.type is T.TENSOR_FLOAT32:
                        # Every float tensor becomes 8-bit, or a bias TENSOR_INT32.
                        if new in _EIGHT_BIT or (new is T.TENSOR_INT32 and a.quant.kind == "bias"):
                            types[positions[p]] = new
                        else:
                            ok = False
                    elif new is not old.type:
                        ok = False
        if not ok:
            continue
        new_in = [None if o is None else types.get(i, o.type) for i, o in zip(inputs, ins, strict=True)]
        new_out = [types.get(i, o.type) for i, o in zip(outputs, outs, strict=True)]
        try:
            m = match(record, new_in, new_out)
        except ShapeError:
            continue
        if m.variant == variant:
            return _Plan(record, m, types)
    raise ValueError(f"cannot quantise {where}: the catalogue has no {qtype.name} variant for it "
                     f"with these operands")


# ---------------------------------------------------------------------------------------
# Parameters


class _Groups:
    """Union-find over operand indexes that must share a scale and zero point."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, i: int) -> int:
        self.parent.setdefault(i, i)
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        self.parent[self.find(i)] = self.find(j)


def asymmetric(lo: float, hi: float, qtype: T) -> tuple[float, int]:
    """(scale, zero point) mapping [lo, hi] (widened to include 0) onto the type's range."""
    qmin, qmax = qtype.quant_range
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = _f32(max((hi - lo) / (qmax - qmin), MIN_SCALE))
    zero_point = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return scale, zero_point


def _symmetric_scale(values: np.ndarray, qmax: int) -> float:
    m = float(np.max(np.abs(values))) if values.size else 0.0
    return _f32(max(m / qmax, MIN_SCALE))


def _channel_dim(plan: _Plan, model: Model, n: int, inputs: list[int], outputs: list[int],
                 weight_pos: int, bias_pos: int, scales_for: dict[int, OperandSpec]) -> int:
    """The per-channel dimension of a filter: among the dimensions as long as the bias, the
    one the record's ``check`` accepts (the catalogue decides, e.g. 0 for CONV_2D, 3 for
    DEPTHWISE_CONV_2D)."""
    sg = model.main
    filt = sg.operands[inputs[weight_pos]]
    channels = sg.operands[inputs[bias_pos]].dimensions[0]

    def operand(i: int) -> Operand | None:
        o = sg.operands[i]
        if o.lifetime is OperandLifeTime.NO_VALUE:
            return None
        p = scales_for.get(i)
        t = plan.types.get(i, o.type)
        return Operand(t, o.dimensions, p.scale if p else 0.0, p.zero_point if p else 0, o.lifetime)

    for dim, size in enumerate(filt.dimensions):
        if size != channels:
            continue
        ins = [operand(i) for i in inputs]
        ins[weight_pos] = Operand(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, filt.dimensions, lifetime=filt.lifetime,
                                  channel_quant=SymmPerChannelQuantParams((1.0,) * size, dim))
        ctx = OpContext(plan.record, plan.match, ins, [None] * len(ins), [operand(i) for i in outputs])
        try:
            if plan.record.check is not None:
                plan.record.check(ctx)
        except ShapeError:
            continue
        except Unknown:
            pass
        return dim
    raise ValueError(f"cannot quantise {_describe(n, plan.record.type)}: no filter dimension of "
                     f"{list(filt.dimensions)} is accepted for per-channel quantisation")


def quantize(model: Model, calibration: Iterable[Sequence[np.ndarray]], scheme: str = "uint8",
             float_io: bool = False, per_channel: bool | None = None) -> Model:
    """A quantised copy of float32 ``model`` (see the module docstring), calibrated on
    ``calibration``: an iterable of input lists, one float array per model input.
    ``per_channel`` overrides the scheme's filter quantisation (uint8: per tensor, int8: per
    channel); uint8 activations with per-channel filters need HAL 1.2.

    Raises ValueError naming the first operation it cannot quantise (no catalogue record,
    or no quantised variant for it: e.g. EXP, or an IF / WHILE model)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown quantisation scheme {scheme!r} (known: {', '.join(SCHEMES)})")
    qtype = SCHEMES[scheme]
    sg = model.main
    if model.referenced:
        for n, op in enumerate(sg.operations):
            if get(op.type) is None:
                raise ValueError(f"cannot quantise {_describe(n, op.type)}: control flow is not supported")
    if per_channel is None:
        per_channel = scheme == "int8"
    plans = [_plan(model, n, get(op.type), op.type, op.inputs, op.outputs, qtype, per_channel)
             for n, op in enumerate(sg.operations)]

    # New type of every float operand; a conflict means one tensor plays two roles.
    new_type: dict[int, T] = {}
    for n, (op, plan) in enumerate(zip(sg.operations, plans, strict=True)):
        if plan is None:
            continue
        for idx, t in plan.types.items():
            if new_type.setdefault(idx, t) is not t:
                raise ValueError(f"cannot quantise {_describe(n, op.type)}: operand {idx} would be "
                                 f"{t.name} here and {new_type[idx].name} elsewhere")
    for idx in [*sg.input_indexes, *sg.output_indexes]:
        if sg.operands[idx].type is T.TENSOR_FLOAT32:
            new_type.setdefault(idx, qtype)

    roles = _roles(model, plans, new_type, qtype)
    params = _shared_params(model, roles, new_type, calibrate(model, calibration), qtype)
    _weight_params(model, plans, roles, new_type, params)
    return _rebuild(model, params, roles.weight_of, float_io)


@dataclass
class _Roles:
    """Which quantised operands are weights (quantised on their own, biases following them),
    which must share parameters (``groups``) and which have fixed ones."""

    weight_of: dict[int, tuple[int, int, int]]  # bias operand -> (operation, input, weights)
    weights: set[int]  # constant weights
    groups: _Groups
    fixed: dict[int, tuple[float, int]]


def _roles(model: Model, plans: list[_Plan | None], new_type: dict[int, T], qtype: T) -> _Roles:
    sg = model.main
    roles = _Roles({}, set(), _Groups(), {})
    activations = set(SCHEMES.values())
    for n, (op, plan) in enumerate(zip(sg.operations, plans, strict=True)):
        if plan is None:
            continue
        pos = plan.match.positions

        def at(name: str, op=op, pos=pos) -> list[int]:
            return [op.inputs[p] for p in pos.get(name, [])] + \
                [op.outputs[p] for p in pos.get(f"out:{name}", [])]

        for a in plan.match.signature.inputs:
            if a.quant.kind != "bias":
                continue
            input_name, weights_name = a.quant.ref.split(",")
            for b_idx in at(a.name):
                if b_idx not in plan.types:
                    continue
                if sg.operands[b_idx].lifetime not in _CONSTANT:
                    raise ValueError(f"cannot quantise {_describe(n, op.type)}: its bias (operand "
                                     f"{b_idx}) is not a constant")
                w_idx = at(weights_name)[0]
                roles.weight_of[b_idx] = (n, at(input_name)[0], w_idx)
                if sg.operands[w_idx].lifetime in _CONSTANT:
                    roles.weights.add(w_idx)
        quantised = [i for i in op.inputs + op.outputs if new_type.get(i) in activations]
        for a in (*plan.match.signature.inputs, *plan.match.signature.outputs):
            members = [i for i in at(a.name) if new_type.get(i) in activations]
            if a.quant.kind == "same" or op.type in SHARED_PARAMETERS:
                ref = [i for i in at(a.quant.ref) if new_type.get(i) in activations] \
                    if a.quant.kind == "same" else quantised
                for i in members:
                    for r in ref:
                        roles.groups.union(i, r)
            elif a.quant.kind == "fixed":
                zp = a.quant.zero_point - (128 if qtype is T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
                for i in members:
                    roles.fixed[i] = (_f32(a.quant.scale), zp)
    return roles


def _shared_params(model: Model, roles: _Roles, new_type: dict[int, T],
                   ranges: dict[int, tuple[float, float]], qtype: T) -> dict[int, OperandSpec]:
    """Parameters of every quantised operand but weights and biases: per group, the fixed
    ones if a member has them, else the merged range of the members (calibrated, or the
    values of a constant)."""
    sg = model.main

    def value_range(idx: int) -> tuple[float, float] | None:
        o = sg.operands[idx]
        if o.lifetime in _CONSTANT:
            v = model.constant_value(o).astype(np.float64)
            return (float(v.min()), float(v.max())) if v.size else None
        return ranges.get(idx)

    by_root: dict[int, list[int]] = {}
    for idx, t in new_type.items():
        if t in SCHEMES.values() and idx not in roles.weights:
            by_root.setdefault(roles.groups.find(idx), []).append(idx)
    params: dict[int, OperandSpec] = {}
    for group in by_root.values():
        imposed = {roles.fixed[i] for i in group if i in roles.fixed}
        if len(imposed) > 1:
            raise ValueError(f"cannot quantise: operands {sorted(group)} must share parameters but "
                             f"have different fixed ones {sorted(imposed)}")
        if imposed:
            scale, zp = imposed.pop()
        else:
            spans = [r for r in (value_range(i) for i in group) if r is not None]
            lo = min((r[0] for r in spans), default=0.0)
            hi = max((r[1] for r in spans), default=0.0)
            scale, zp = asymmetric(lo, hi, qtype)
        for i in group:
            params[i] = OperandSpec(new_type[i], scale, zp)
    return params


def _weight_params(model: Model, plans: list[_Plan | None], roles: _Roles, new_type: dict[int, T],
                   params: dict[int, OperandSpec]) -> None:
    """Parameters of the constant weights, then of the biases (whose scales follow from the
    input's and the weights'), added to ``params``."""
    sg = model.main
    for b_idx, (n, _, w_idx) in roles.weight_of.items():
        if w_idx in params:
            continue
        t = new_type[w_idx]
        w = model.constant_value(sg.operands[w_idx]).astype(np.float64)
        if t is T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            op, plan = sg.operations[n], plans[n]
            w_pos, b_pos = op.inputs.index(w_idx), op.inputs.index(b_idx)
            dim = _channel_dim(plan, model, n, op.inputs, op.outputs, w_pos, b_pos, params)
            peak = np.abs(np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)).max(axis=1) / 127
            # A channel far weaker than the strongest (batch norm folded a near-zero gain into
            # it) gets the floor: its output is below one step of the shared output scale anyway.
            floor = max(float(peak.max()) * CHANNEL_SCALE_FLOOR, MIN_SCALE)
            scales = tuple(_f32(max(float(p), floor)) for p in peak)
            params[w_idx] = OperandSpec(t, 0.0, 0, SymmPerChannelQuantParams(scales, dim))
        elif t is T.TENSOR_QUANT8_ASYMM_SIGNED:
            params[w_idx] = OperandSpec(t, _symmetric_scale(w, 127), 0)
        else:
            params[w_idx] = OperandSpec(t, *asymmetric(float(w.min()), float(w.max()), t))
    for b_idx, (_, x_idx, w_idx) in roles.weight_of.items():
        w_params = params[w_idx]
        # A per-channel filter's bias has scale 0: each channel's is input x filter scale.
        bias_scale = 0.0 if w_params.channel_quant is not None else \
            _f32(np.float32(params[x_idx].scale) * np.float32(w_params.scale))
        params[b_idx] = OperandSpec(T.TENSOR_INT32, bias_scale, 0)


def _bias_values(model: Model, b_idx: int, x: OperandSpec, w: OperandSpec) -> np.ndarray:
    bias = model.constant_value(model.main.operands[b_idx]).astype(np.float64)
    scale = np.asarray(w.channel_quant.scales, np.float64) if w.channel_quant is not None else w.scale
    q = np.round(bias / (np.float64(x.scale) * scale))
    return np.clip(q, -_INT32_MAX, _INT32_MAX).astype(np.int32)


def _rebuild(model: Model, params: dict[int, OperandSpec], weight_of: dict[int, tuple[int, int, int]],
             float_io: bool) -> Model:
    sg = model.main
    b = ModelBuilder()
    for idx, o in enumerate(sg.operands):
        p = params.get(idx)
        s = p or OperandSpec.of(o)
        t, scale, zp, cq = s.type, s.scale, s.zero_point, s.channel_quant
        if o.lifetime in _CONSTANT:
            value = model.constant_value(o)
            if p is not None and idx in weight_of:
                _, x_idx, w_idx = weight_of[idx]
                value = _bias_values(model, idx, params[x_idx], params[w_idx])
            elif p is not None:
                value = quantize_values(value, Operand(t, o.dimensions, scale, zp, channel_quant=cq))
            b.constant(t, value, scale, zp, cq)
        elif o.lifetime is OperandLifeTime.NO_VALUE:
            b.no_value(t)
        else:
            b.operand(t, o.dimensions, scale, zp, cq)
    inputs, outputs = list(sg.input_indexes), list(sg.output_indexes)
    head, tail = [], []
    if float_io:
        for k, idx in enumerate(inputs):
            if idx in params:
                f = b.operand(T.TENSOR_FLOAT32, sg.operands[idx].dimensions)
                head.append((OperationType.QUANTIZE, [f], [idx]))
                inputs[k] = f
        for k, idx in enumerate(outputs):
            if idx in params:
                f = b.operand(T.TENSOR_FLOAT32, sg.operands[idx].dimensions)
                tail.append((OperationType.DEQUANTIZE, [idx], [f]))
                outputs[k] = f
    for op_type, ins, outs in head:
        b.operation(op_type, ins, outs)
    for op in sg.operations:
        b.operation(op.type, op.inputs, op.outputs)
    for op_type, ins, outs in tail:
        b.operation(op_type, ins, outs)
    return b.build(inputs, outputs, relax=model.relax_computation_float32_to_float16)


# ---------------------------------------------------------------------------------------
# Data at the boundary


def quantize_inputs(model: Model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Real-valued inputs as the stored values a (quantised) model's inputs take; inputs of
    other types pass unchanged."""
    sg = model.main
    out = []
    for idx, x in zip(sg.input_indexes, inputs, strict=True):
        o = sg.operands[idx]
        out.append(quantize_values(np.asarray(x, np.float64), o) if o.type.is_quant else np.asarray(x))
    return out


def dequantize_outputs(model: Model, outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A model's raw outputs as real values (float64 for quantised outputs)."""
    sg = model.main
    return [dequantize_values(np.asarray(y), sg.operands[idx]) if sg.operands[idx].type.is_quant
            else np.asarray(y) for idx, y in zip(sg.output_indexes, outputs, strict=True)]
