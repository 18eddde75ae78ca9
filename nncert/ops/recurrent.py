"""Basic recurrent layers: RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN, SVDF.

All four are float only (TENSOR_FLOAT32 from their first version, TENSOR_FLOAT16 from 1.2)
and carry state between executions: the hidden state (RNN cells) or the memory of feature
activations (SVDF) is an explicit input and, where the operation gives it back, an output
(``OpRecord.state``). The activation input is applied *inside* the recurrence, to every
step's new state, so it is not the framework's fused activation (which would clamp output 0
once, after the kernel): the kernels apply it themselves. Its values are those of
FusedActivationFunc (NONE, RELU, RELU1, RELU6); anything else is invalid.

One cell step, for every batch row::

    h' = act(x W^T + h R^T + b)            (W: [units, input_size], R: [units, units])

RNN is one step (outputs: the new state, twice). The sequence forms run it along the time
axis of a 3-D input ([batch, time, input] or, with time_major, [time, batch, input]);
BIDIRECTIONAL_SEQUENCE_RNN runs a second cell backwards in time, optionally with an
auxiliary input (cross-linking: both cells also add aux x aux_weights^T; parallel linking,
1.3: the backward cell reads the auxiliary input instead of the input).

SVDF follows Android's CPU implementation and CTS, which differ from the operation
documentation's shapes: weights_feature is [num_units x rank, input_size], weights_time
[num_units x rank, memory_size], the state [batch, memory_size x num_units x rank] (one
memory of memory_size slots per filter, oldest first). One step: the memory is the state
with its newest slot replaced by input x weights_feature^T; each filter's output is the
dot product of its memory with its weights_time row; the rank filters of a unit are summed,
the bias added, the activation applied; the state output is the memory shifted one slot
towards the oldest, the newest slot zero. So the newest slot of the state input is never
read.
"""

from __future__ import annotations

import math

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    ACTIVATION_RANGE,
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    apply_activation,
    variants,
)

F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16

#: Largest sizes the samplers draw: every case stays at a few hundred multiply-adds.
MAX_BATCH, MAX_SIZE, MAX_UNITS, MAX_TIME = 3, 6, 6, 4

# ---------------------------------------------------------------------------------------
# Shared pieces


def _act(ctx: OpContext) -> int:
    return int(ctx.value("act"))


def _check_act(ctx: OpContext) -> None:
    act = _act(ctx)
    if act not in (0, 1, 2, 3):
        raise ShapeError(f"act (the activation) is {act}, must be 0..3 (NONE, RELU, RELU1, RELU6)")


def _need(what: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    if tuple(got) != tuple(want):
        raise ShapeError(f"{what} has shape {list(got)}, expected {list(want)}")


def _rank(ctx: OpContext, name: str, rank: int) -> tuple[int, ...]:
    dims = ctx.dims(name)
    if len(dims) != rank:
        raise ShapeError(f"{name} must have rank {rank}, has {len(dims)}")
    return dims


def _cell(ctx: OpContext, prefix: str, input_size: int | None, batch: int,
          input_name: str = "weights") -> int:
    """Check one cell's weights, recurrent weights, bias and hidden state; its units."""
    units, size = _rank(ctx, f"{prefix}{input_name}", 2)
    if input_size is not None and size != input_size:
        raise ShapeError(f"{prefix}{input_name} has shape {[units, size]}: its second dimension must "
                         f"be the input size {input_size}")
    _need(f"{prefix}recurrent_weights", _rank(ctx, f"{prefix}recurrent_weights", 2), (units, units))
    _need(f"{prefix}bias", _rank(ctx, f"{prefix}bias", 1), (units,))
    _need(f"{prefix}hidden_state", _rank(ctx, f"{prefix}hidden_state", 2), (batch, units))
    return units


def step(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray, act: int,
         aux: np.ndarray | None = None, aux_w: np.ndarray | None = None) -> np.ndarray:
    """One basic RNN cell step in float64: act(x W^T + aux AuxW^T + h R^T + b)."""
    pre = x @ w.T + h @ r.T + b
    if aux is not None and aux_w is not None:
        pre = pre + aux @ aux_w.T
    return apply_activation(pre, act)


def run_sequence(xs: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray,
                 act: int, reverse: bool = False, aux: np.ndarray | None = None,
                 aux_w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A cell along time-major ``xs`` [time, batch, size]: (outputs [time, batch, units], last state)."""
    out = np.zeros((xs.shape[0], h.shape[0], w.shape[0]))
    order = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for t in order:
        h = step(xs[t], w, r, b, h, act, None if aux is None else aux[t], aux_w)
        out[t] = h
    return out, h


def _bound(act: int) -> float:
    """A data range that makes an activation's clamp act on both sides."""
    lo, hi = ACTIVATION_RANGE[act]
    return 1.0 if act in (0, 1) else max(abs(lo), hi) / 2


def _weights(s: SampleContext, name: str, dims: tuple[int, ...], depth: int, wide: float | None,
             const: bool) -> None:
    """Weights in [-1, 1] / sqrt(depth): states stay of order one over the steps (a wide
    edge draw scales them by ``wide``)."""
    v = s.draw.array(dims, -1.0, 1.0) / math.sqrt(max(depth, 1))
    s.tensor(name, dims, value=v * (wide or 1.0), const=const)


def _data(s: SampleContext, name: str, dims: tuple[int, ...], wide: float | None) -> None:
    """A data tensor (input, hidden state): drawn by the case builder from the arg's unit
    domain, so that a random graph can feed it, or ``wide`` for an edge draw."""
    if wide is None:
        s.tensor(name, dims)
    else:
        s.tensor(name, dims, value=s.draw.array(dims, -wide, wide))


def _draw_act(s: SampleContext, act: int | None) -> int:
    a = s.draw.int(0, 3) if act is None else act
    s.scalar("act", a)
    return a


def _sample_cell(s: SampleContext, prefix: str, batch: int, size: int, wide: float | None,
                 const: bool, aux_size: int = 0) -> int:
    units = s.draw.int(1, MAX_UNITS)
    _weights(s, f"{prefix}weights", (units, size), size + units + aux_size, wide, const)
    _weights(s, f"{prefix}recurrent_weights", (units, units), size + units + aux_size, wide, const)
    _weights(s, f"{prefix}bias", (units,), 4, wide, const)
    _data(s, f"{prefix}hidden_state", (batch, units), wide)
    return units


def _clamps(act: int):
    """Edge ``reached``: the recurrent clamp holds some outputs at each of its bounds."""
    lo, hi = ACTIVATION_RANGE[act]

    def reached(out: np.ndarray) -> int:
        at_hi = bool(np.any(out == hi))
        at_lo = bool(np.any(out == lo))
        return edges.FULL if at_hi and at_lo else edges.PARTIAL if at_hi else 0

    return reached


def _clamp_edges(sampler) -> tuple[edges.Edge, ...]:
    """RELU1 and RELU6 inside the recurrence, with data wide enough that every step's clamp
    holds states at both bounds, which the next step then reads."""
    return tuple(edges.Edge(f"recurrent_{name}", "saturate",
                            f"{name.upper()} inside the recurrence with pre-activations well past both "
                            f"bounds: clamped states are fed back into the next step",
                            sample=lambda s, a=act: sampler(s, act=a, wide=4.0 * _bound(a)),
                            reached=_clamps(act))
                 for name, act in (("relu1", 2), ("relu6", 3)))


# ---------------------------------------------------------------------------------------
# RNN


def _rnn_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    batch, size = _rank(ctx, "input", 2)
    units = _cell(ctx, "", size, batch)
    return [(batch, units), (batch, units)]


def _rnn_kernel(ctx: OpContext) -> list[np.ndarray]:
    h = step(ctx.value("input"), ctx.value("weights"), ctx.value("recurrent_weights"),
             ctx.value("bias"), ctx.value("hidden_state"), _act(ctx))
    return [h, h.copy()]


def _rnn_sample(s: SampleContext, act: int | None = None, wide: float | None = None) -> None:
    batch, size = s.dims(2, 1, MAX_SIZE)
    batch = min(batch, MAX_BATCH)
    _data(s, "input", (batch, size), wide)
    _sample_cell(s, "", batch, size, wide, s.draw.bool(0.8))
    _draw_act(s, act)


def _cell_args(prefix: str = "") -> tuple[Arg, ...]:
    return (Arg(f"{prefix}weights", ranks=(2,)), Arg(f"{prefix}recurrent_weights", ranks=(2,)),
            Arg(f"{prefix}bias", ranks=(1,)), Arg(f"{prefix}hidden_state", ranks=(2,), domain="unit"))


_ACT = Arg("act", T.INT32)

_RNN = Signature((Arg("input", ranks=(2,), domain="unit"), *_cell_args(), _ACT),
                 (Arg("hidden_state_out", ranks=(2,)), Arg("output", ranks=(2,))))

# ---------------------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_RNN


def _time_major(ctx: OpContext) -> bool:
    v = ctx.value("time_major")
    if ctx.type("time_major") is T.INT32 and int(v) not in (0, 1):
        raise ShapeError(f"time_major is {v}, must be 0 or 1")
    return bool(v)


def _sequence_dims(ctx: OpContext, name: str = "input") -> tuple[int, int, int]:
    """(time, batch, size) of a 3-D sequence input in either layout."""
    a, b, size = _rank(ctx, name, 3)
    return (a, b, size) if _time_major(ctx) else (b, a, size)


def _layout(ctx: OpContext, time: int, batch: int, units: int) -> tuple[int, int, int]:
    return (time, batch, units) if _time_major(ctx) else (batch, time, units)


def _time_first(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    return x if _time_major(ctx) else np.swapaxes(x, 0, 1)


def _uni_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    time, batch, size = _sequence_dims(ctx)
    units = _cell(ctx, "", size, batch)
    shapes = [_layout(ctx, time, batch, units)]
    if len(ctx.outputs) == 2:
        shapes.append((batch, units))
    return shapes


def _uni_kernel(ctx: OpContext) -> list[np.ndarray]:
    out, h = run_sequence(_time_first(ctx, ctx.value("input")), ctx.value("weights"),
                          ctx.value("recurrent_weights"), ctx.value("bias"),
                          ctx.value("hidden_state"), _act(ctx))
    result = [_time_first(ctx, out)]
    if len(ctx.outputs) == 2:
        result.append(h)
    return result


def _check_time_major(ctx: OpContext) -> None:
    _check_act(ctx)
    _time_major(ctx)


def _sequence_input(s: SampleContext, name: str, time: int, batch: int, size: int, major: bool,
                    wide: float | None) -> None:
    _data(s, name, (time, batch, size) if major else (batch, time, size), wide)


def _uni_sample(s: SampleContext, act: int | None = None, wide: float | None = None,
                time: int | None = None) -> None:
    a, b, size = s.dims(3, 1, MAX_SIZE)
    major = s.draw.bool()
    t, batch = (a, b) if major else (b, a)
    t, batch = min(t, MAX_TIME) if time is None else time, min(batch, MAX_BATCH)
    _sequence_input(s, "input", t, batch, size, major, wide)
    _sample_cell(s, "", batch, size, wide, s.draw.bool(0.8))
    _draw_act(s, act)
    s.scalar("time_major", int(major))


def _state_output_version(count: int):
    """The signatures with hidden-state outputs (``count`` outputs or more) need 1.3."""

    def min_version(ctx: OpContext) -> Version:
        v = Version.V1_3 if len(ctx.outputs) >= count else Version.V1_2
        if ctx.has("aux_input") and not ctx.has("fw_aux_weights"):
            v = Version.V1_3  # parallel linking
        return v

    return min_version


_SEQ_IN = Arg("input", ranks=(3,), domain="unit")
_UNI_IN = (_SEQ_IN, *_cell_args(), _ACT, Arg("time_major", T.INT32))
_UNI = (Signature(_UNI_IN, (Arg("output", ranks=(3,)),)),
        Signature(_UNI_IN, (Arg("output", ranks=(3,)), Arg("hidden_state_out", ranks=(2,))), "state"))

# ---------------------------------------------------------------------------------------
# BIDIRECTIONAL_SEQUENCE_RNN

#: Linking modes: which of aux_input, fw_aux_weights, bw_aux_weights are present.
_NO_LINK, _CROSS, _PARALLEL = "none", "cross", "parallel"


def _linking(ctx: OpContext) -> str:
    present = (ctx.has("aux_input"), ctx.has("fw_aux_weights"), ctx.has("bw_aux_weights"))
    modes = {(False, False, False): _NO_LINK, (True, True, True): _CROSS, (True, False, False): _PARALLEL}
    if present not in modes:
        raise ShapeError("aux_input, fw_aux_weights and bw_aux_weights must be all present "
                         "(cross-linking), all omitted, or aux_input alone (parallel linking)")
    return modes[present]


def _merged(ctx: OpContext) -> bool:
    merge = bool(ctx.value("merge_outputs"))
    want = len(ctx.outputs) in (1, 3)  # the merged signatures' output counts
    if merge != want:
        raise ShapeError(f"merge_outputs is {str(merge).lower()} but the operation has "
                         f"{len(ctx.outputs)} outputs (merged: 1, or 3 with the states; "
                         f"separate: 2, or 4 with the states)")
    return merge


def _bidi_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    time, batch, size = _sequence_dims(ctx)
    mode = _linking(ctx)
    aux_size = None
    if mode != _NO_LINK:
        at, ab, aux_size = _sequence_dims(ctx, "aux_input")
        if (at, ab) != (time, batch):
            raise ShapeError(f"aux_input has {at} steps of batch {ab}, the input {time} of {batch}")
    fw = _cell(ctx, "fw_", size, batch)
    bw = _cell(ctx, "bw_", aux_size if mode == _PARALLEL else size, batch)
    if mode == _CROSS:
        _need("fw_aux_weights", _rank(ctx, "fw_aux_weights", 2), (fw, aux_size))
        _need("bw_aux_weights", _rank(ctx, "bw_aux_weights", 2), (bw, aux_size))
    if _merged(ctx):
        shapes = [_layout(ctx, time, batch, fw + bw)]
    else:
        shapes = [_layout(ctx, time, batch, fw), _layout(ctx, time, batch, bw)]
    if len(ctx.outputs) in (3, 4):
        shapes += [(batch, fw), (batch, bw)]
    return shapes


def _bidi_kernel(ctx: OpContext) -> list[np.ndarray]:
    act, mode = _act(ctx), _linking(ctx)
    x = _time_first(ctx, ctx.value("input"))
    aux = _time_first(ctx, ctx.value("aux_input")) if mode != _NO_LINK else None
    cross = mode == _CROSS

    def cell(prefix: str, xs: np.ndarray, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
        return run_sequence(xs, ctx.value(f"{prefix}weights"), ctx.value(f"{prefix}recurrent_weights"),
                            ctx.value(f"{prefix}bias"), ctx.value(f"{prefix}hidden_state"), act, reverse,
                            aux if cross else None,
                            ctx.value(f"{prefix}aux_weights") if cross else None)

    fw_out, fw_h = cell("fw_", x, False)
    bw_out, bw_h = cell("bw_", aux if mode == _PARALLEL else x, True)
    if _merged(ctx):
        result = [_time_first(ctx, np.concatenate([fw_out, bw_out], axis=2))]
    else:
        result = [_time_first(ctx, fw_out), _time_first(ctx, bw_out)]
    if len(ctx.outputs) in (3, 4):
        result += [fw_h, bw_h]
    return result


def _bidi_check(ctx: OpContext) -> None:
    _check_act(ctx)
    _merged(ctx)
    _linking(ctx)


def _bidi_sample(s: SampleContext, act: int | None = None, wide: float | None = None,
                 time: int | None = None) -> None:
    a, b, size = s.dims(3, 1, MAX_SIZE)
    major = s.draw.bool()
    t, batch = (a, b) if major else (b, a)
    t, batch = min(t, MAX_TIME) if time is None else time, min(batch, MAX_BATCH)
    _sequence_input(s, "input", t, batch, size, major, wide)
    # Parallel linking (1.3) only where the signature needs 1.3 anyway (the state outputs),
    # so that a 1.2 driver still runs every case of the 1.2 signatures.
    modes = [_NO_LINK, _CROSS] + ([_PARALLEL] if s.signature.name.endswith("state") else [])
    mode = s.draw.choice(modes)
    # In parallel linking the backward cell reads aux_input in place of the input; Android's
    # CPU path steps through it with the input's row length, so the sizes are kept equal.
    aux_size = size if mode == _PARALLEL else s.draw.int(1, MAX_SIZE) if mode == _CROSS else 0
    const = s.draw.bool(0.8)
    fw = _sample_cell(s, "fw_", batch, size, wide, const, aux_size if mode == _CROSS else 0)
    bw = _sample_cell(s, "bw_", batch, aux_size if mode == _PARALLEL else size, wide, const,
                      aux_size if mode == _CROSS else 0)
    if mode != _NO_LINK:
        _sequence_input(s, "aux_input", t, batch, aux_size, major, wide)
    if mode == _CROSS:
        _weights(s, "fw_aux_weights", (fw, aux_size), size + fw + aux_size, wide, const)
        _weights(s, "bw_aux_weights", (bw, aux_size), size + bw + aux_size, wide, const)
    _draw_act(s, act)
    s.scalar("time_major", major)
    s.scalar("merge_outputs", s.signature.name.startswith("merged"))


_BIDI_IN = (_SEQ_IN, *_cell_args("fw_"), *_cell_args("bw_"),
            Arg("aux_input", ranks=(3,), optional=True, domain="unit"),
            Arg("fw_aux_weights", ranks=(2,), optional=True),
            Arg("bw_aux_weights", ranks=(2,), optional=True),
            _ACT, Arg("time_major", T.BOOL), Arg("merge_outputs", T.BOOL))
_FW_OUT, _BW_OUT = Arg("fw_output", ranks=(3,)), Arg("bw_output", ranks=(3,))
_STATES = (Arg("fw_hidden_state_out", ranks=(2,)), Arg("bw_hidden_state_out", ranks=(2,)))
_BIDI = (Signature(_BIDI_IN, (_FW_OUT, _BW_OUT)),
         Signature(_BIDI_IN, (_FW_OUT,), "merged"),
         Signature(_BIDI_IN, (_FW_OUT, _BW_OUT, *_STATES), "state"),
         Signature(_BIDI_IN, (_FW_OUT, *_STATES), "merged_state"))

# ---------------------------------------------------------------------------------------
# SVDF


def _svdf_dims(ctx: OpContext) -> tuple[int, int, int, int, int]:
    """(batch, num_filters, num_units, rank, memory_size), every shape checked."""
    batch, size = _rank(ctx, "input", 2)
    filters, fsize = _rank(ctx, "weights_feature", 2)
    if fsize != size:
        raise ShapeError(f"weights_feature has shape {[filters, fsize]}: its second dimension must be "
                         f"the input size {size}")
    tf, memory = _rank(ctx, "weights_time", 2)
    if tf != filters:
        raise ShapeError(f"weights_time has {tf} rows, weights_feature {filters} (one per filter)")
    rank = int(ctx.value("rank"))
    if rank < 1 or filters % rank:
        raise ShapeError(f"rank {rank} must be positive and divide the {filters} filters of weights_feature")
    units = filters // rank
    if ctx.has("bias"):
        _need("bias", _rank(ctx, "bias", 1), (units,))
    _need("state_in", _rank(ctx, "state_in", 2), (batch, memory * filters))
    return batch, filters, units, rank, memory


def _svdf_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    batch, filters, units, _, memory = _svdf_dims(ctx)
    return [(batch, memory * filters), (batch, units)]


def _svdf_kernel(ctx: OpContext) -> list[np.ndarray]:
    batch, filters, units, rank, memory = _svdf_dims(ctx)
    mem = ctx.value("state_in").reshape(batch, filters, memory).copy()
    mem[:, :, -1] = ctx.value("input") @ ctx.value("weights_feature").T
    per_filter = np.einsum("bfm,fm->bf", mem, ctx.value("weights_time"))
    out = per_filter.reshape(batch, units, rank).sum(axis=2)
    if ctx.has("bias"):
        out = out + ctx.value("bias")
    out = apply_activation(out, _act(ctx))
    state = np.zeros_like(mem)
    state[:, :, :-1] = mem[:, :, 1:]
    return [state.reshape(batch, memory * filters), out]


def _svdf_sample(s: SampleContext, memory: int | None = None, rank: int | None = None) -> None:
    batch, size = s.dims(2, 1, MAX_SIZE)
    batch = min(batch, MAX_BATCH)
    units = s.draw.int(1, 4)
    rank = s.draw.int(1, 3) if rank is None else rank
    # memory_size 1 (a state that carries nothing) is its own edge: drawn here, it would
    # leave the state chain nothing to check
    memory = s.draw.int(2, 5) if memory is None else memory
    filters = units * rank
    const = s.draw.bool(0.8)
    s.tensor("input", (batch, size))
    _weights(s, "weights_feature", (filters, size), size, None, const)
    _weights(s, "weights_time", (filters, memory), memory * rank, None, const)
    if s.draw.bool(0.7):
        _weights(s, "bias", (units,), 4, None, const)
    else:
        s.omit("bias")
    s.tensor("state_in", (batch, memory * filters))
    s.scalar("rank", rank)
    _draw_act(s, None)


_SVDF = Signature((Arg("input", ranks=(2,), domain="unit"), Arg("weights_feature", ranks=(2,)),
                   Arg("weights_time", ranks=(2,)), Arg("bias", ranks=(1,), optional=True),
                   Arg("state_in", ranks=(2,), domain="unit"), Arg("rank", T.INT32), _ACT),
                  (Arg("state_out", ranks=(2,)), Arg("output", ranks=(2,))))


def _svdf_check(ctx: OpContext) -> None:
    _check_act(ctx)


# ---------------------------------------------------------------------------------------

_FLOATS = (*variants(Version.V1_0, F32), *variants(Version.V1_2, F16))
_SEQ_FLOATS = tuple(variants(Version.V1_2, F32, F16))

RECORDS = [
    OpRecord(Op.RNN, (_RNN,), _FLOATS, _rnn_kernel, _rnn_shape, _rnn_sample, criterion="conv",
             check=_check_act, state=(("hidden_state", 0),),
             edges=_clamp_edges(_rnn_sample),
             doc="basic RNN cell, one step: state = output = act(input x weights^T + "
                 "hidden_state x recurrent_weights^T + bias)"),
    OpRecord(Op.SVDF, (_SVDF,), _FLOATS, _svdf_kernel, _svdf_shape, _svdf_sample, criterion="conv",
             check=_svdf_check, state=(("state_in", 0),),
             edges=(edges.Edge("memory_1", "length_1",
                               "memory_size 1: the state holds nothing, only the newest activation counts",
                               sample=lambda s: _svdf_sample(s, memory=1)),
                    edges.Edge("rank_4", "length_1",
                               "rank 4: four filters per unit, summed",
                               sample=lambda s: _svdf_sample(s, rank=4))),
             doc="rank-constrained time-filtering layer: features pushed into a memory of "
                 "memory_size steps per filter, filtered over time, rank filters summed per unit"),
    OpRecord(Op.BIDIRECTIONAL_SEQUENCE_RNN, _BIDI, _SEQ_FLOATS, _bidi_kernel, _bidi_shape, _bidi_sample,
             criterion="conv", check=_bidi_check, min_version=_state_output_version(3),
             state=(("fw_hidden_state", "fw_hidden_state_out"), ("bw_hidden_state", "bw_hidden_state_out")),
             edges=(*_clamp_edges(_bidi_sample),
                    edges.Edge("one_step", "length_1", "a sequence of one time step",
                               sample=lambda s: _bidi_sample(s, time=1)),
                    edges.long_sequence(lambda s, t: _bidi_sample(s, time=t))),
             doc="two RNN cells over a sequence, forwards and backwards in time, with optional "
                 "auxiliary input (cross- or parallel-linked) and merged or separate outputs"),
    OpRecord(Op.UNIDIRECTIONAL_SEQUENCE_RNN, _UNI, _SEQ_FLOATS, _uni_kernel, _uni_shape, _uni_sample,
             criterion="conv", check=_check_time_major, min_version=_state_output_version(2),
             state=(("hidden_state", "hidden_state_out"),),
             edges=(*_clamp_edges(_uni_sample),
                    edges.Edge("one_step", "length_1", "a sequence of one time step",
                               sample=lambda s: _uni_sample(s, time=1)),
                    edges.long_sequence(lambda s, t: _uni_sample(s, time=t))),
             doc="basic RNN cell applied along a sequence: output[t] = state = act(input[t] x "
                 "weights^T + state x recurrent_weights^T + bias)"),
]
