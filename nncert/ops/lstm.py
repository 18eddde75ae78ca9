"""Long short-term memory: LSTM (one time step), UNIDIRECTIONAL_SEQUENCE_LSTM and
BIDIRECTIONAL_SEQUENCE_LSTM (whole sequences).

One cell serves all three. For each step, with x the input, h the output state and C the
cell state (NNAPI's OperationTypes.h, LSTM):

    i = sigmoid(N_i(W_xi x + W_hi h + w_ci . C) + b_i)   (i = 1 - f with CIFG)
    f = sigmoid(N_f(W_xf x + W_hf h + w_cf . C) + b_f)
    C' = clip(f . C + i . g(N_c(W_xc x + W_hc h) + b_c), cell_clip)
    o = sigmoid(N_o(W_xo x + W_ho h + w_co . C') + b_o)
    h' = clip(W_proj (o . g(C')) + b_proj, proj_clip)     (o . g(C') without projection)

``N`` is the identity, or with layer normalisation (HAL 1.2) N(v) = (v - mean(v)) /
sqrt(var(v) + 1e-8) x the gate's layer-norm weights over the units of each batch row (the
bias is added after it). ``g`` is the activation parameter: 0 none, 1 RELU, 3 RELU6, 4 tanh,
6 sigmoid. A clip of 0 disables clipping. The optional weights come in groups, each all
present or all absent: CIFG (no input gate: input-to-input, recurrent-to-input weights and
input gate bias absent), peephole (cell-to-forget and cell-to-output, plus cell-to-input
unless CIFG), projection (weights; its bias only with them), layer normalisation (four
weights; three with CIFG). The samplers draw each group on and off across seeds.

State is explicit: the output and cell states are inputs, and their successors outputs
(``OpRecord.state``); a driver keeps nothing between executions. LSTM's scratch buffer
(output 0, [batch, 3 or 4 x num_units]) holds implementation-defined intermediates: it is
checked for shape only (``compare``). The sequence operations' state outputs are optional
(HAL 1.3): a second signature, ``states``, has them; BIDIRECTIONAL_SEQUENCE_LSTM merges
its two sequences into output 0 when merge_outputs is true (then it has no backward output:
signatures ``merged`` and ``merged_states``) and takes an auxiliary input, multiplied by
auxiliary weights (cross-linking) or, without them (HAL 1.3), in place of the input of the
backward cell (parallel linking).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

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
    scalar_of,
    variants,
)

_F32, _F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
GATES = ("input", "forget", "cell", "output")
#: The activation parameter's values (a subset of TFLite's fused activations).
ACTIVATIONS = {0: "none", 1: "relu", 3: "relu6", 4: "tanh", 6: "sigmoid"}
#: Layer normalisation's epsilon (added to the variance, as NNAPI's CPU path and TFLite do).
LAYER_NORM_EPSILON = 1e-8


# ---------------------------------------------------------------------------------------
# Signatures


def cell_args(p: str = "") -> tuple[Arg, ...]:
    """The 17 weight and bias inputs of one cell, in HAL order (``p``: "fw_" / "bw_")."""
    return (
        *(Arg(f"{p}input_to_{g}_weights", ranks=(2,), optional=g == "input") for g in GATES),
        *(Arg(f"{p}recurrent_to_{g}_weights", ranks=(2,), optional=g == "input") for g in GATES),
        *(Arg(f"{p}cell_to_{g}_weights", ranks=(1,), optional=True) for g in ("input", "forget", "output")),
        Arg(f"{p}input_gate_bias", ranks=(1,), optional=True),
        Arg(f"{p}forget_gate_bias", ranks=(1,)),
        Arg(f"{p}cell_bias", ranks=(1,)),
        Arg(f"{p}output_gate_bias", ranks=(1,)),
        Arg(f"{p}projection_weights", ranks=(2,), optional=True),
        Arg(f"{p}projection_bias", ranks=(1,), optional=True),
    )


def layer_norm_args(p: str = "", since: Version | None = None) -> tuple[Arg, ...]:
    return tuple(Arg(f"{p}{g}_layer_norm_weights", ranks=(1,), optional=True, since=since) for g in GATES)


_PARAMS = (Arg("activation", T.INT32), Arg("cell_clip", scalar_of("T")), Arg("proj_clip", scalar_of("T")))

_LSTM_INPUTS = (Arg("input", ranks=(2,)), *cell_args(), Arg("output_state_in", ranks=(2,)),
                Arg("cell_state_in", ranks=(2,)), *_PARAMS, *layer_norm_args(since=Version.V1_2))
_LSTM_SIG = Signature(_LSTM_INPUTS, (Arg("scratch_buffer", ranks=(2,)), Arg("output_state_out", ranks=(2,)),
                                     Arg("cell_state_out", ranks=(2,)), Arg("output", ranks=(2,))))

_UNI_INPUTS = (Arg("input", ranks=(3,)), *cell_args(), Arg("output_state_in", ranks=(2,)),
               Arg("cell_state_in", ranks=(2,)), *_PARAMS, Arg("time_major", T.BOOL), *layer_norm_args())
_UNI_STATES = (Arg("output_state_out", ranks=(2,)), Arg("cell_state_out", ranks=(2,)))
_UNI_SIGS = (Signature(_UNI_INPUTS, (Arg("output", ranks=(3,)),)),
             Signature(_UNI_INPUTS, (Arg("output", ranks=(3,)), *_UNI_STATES), "states"))

_AUX = (Arg("aux_input", ranks=(3,), optional=True),
        *(Arg(f"{d}_aux_input_to_{g}_weights", ranks=(2,), optional=True)
          for d in ("fw", "bw") for g in GATES))
_BI_INPUTS = (Arg("input", ranks=(3,)), *cell_args("fw_"), *cell_args("bw_"),
              *(Arg(f"{d}_{s}_state_in", ranks=(2,)) for d in ("fw", "bw") for s in ("activation", "cell")),
              *_AUX, *_PARAMS, Arg("merge_outputs", T.BOOL), Arg("time_major", T.BOOL),
              *layer_norm_args("fw_"), *layer_norm_args("bw_"))
_BI_STATES = tuple(Arg(f"{d}_{s}_state_out", ranks=(2,))
                   for d in ("fw", "bw") for s in ("activation", "cell"))
_FW_OUT, _BW_OUT = Arg("fw_output", ranks=(3,)), Arg("bw_output", ranks=(3,))
_BI_SIGS = (Signature(_BI_INPUTS, (_FW_OUT, _BW_OUT)),
            Signature(_BI_INPUTS, (_FW_OUT,), "merged"),
            Signature(_BI_INPUTS, (_FW_OUT, _BW_OUT, *_BI_STATES), "states"),
            Signature(_BI_INPUTS, (_FW_OUT, *_BI_STATES), "merged_states"))


# ---------------------------------------------------------------------------------------
# One cell: its weights, shapes and validity


@dataclass
class Cell:
    """The weights of one cell (float64, None where absent) and its sizes."""

    n_input: int
    n_cell: int
    n_output: int
    x: dict[str, np.ndarray | None]  # gate -> input weights [n_cell, n_input]
    h: dict[str, np.ndarray | None]  # gate -> recurrent weights [n_cell, n_output]
    c: dict[str, np.ndarray | None]  # gate -> peephole weights [n_cell]
    b: dict[str, np.ndarray | None]  # gate -> bias [n_cell]
    ln: dict[str, np.ndarray | None]  # gate -> layer-norm weights [n_cell]
    aux: dict[str, np.ndarray | None]  # gate -> auxiliary input weights [n_cell, n_aux]
    proj: np.ndarray | None
    proj_bias: np.ndarray | None

    @property
    def cifg(self) -> bool:
        return self.x["input"] is None


def _present(ctx: OpContext, names: Sequence[str]) -> list[bool]:
    return [ctx.has(n) for n in names]


def _all_or_none(ctx: OpContext, names: Sequence[str], what: str) -> bool:
    got = _present(ctx, names)
    if any(got) and not all(got):
        missing = [n for n, g in zip(names, got, strict=True) if not g]
        raise ShapeError(f"{ctx.record.name}: {what} needs all of {', '.join(names)}; "
                         f"{', '.join(missing)} omitted")
    return all(got)


def cell_dims(ctx: OpContext, p: str, n_input: int) -> tuple[int, int]:
    """(num_units, output_size) of cell ``p``, every present weight's shape checked against
    them and ``n_input``; ShapeError naming the first that does not fit."""
    n_cell, n_in = ctx.dims(f"{p}input_to_output_weights")
    n_output = ctx.dims(f"{p}recurrent_to_output_weights")[1]
    if n_in != n_input:
        raise ShapeError(f"{p}input_to_output_weights has input size {n_in}, the input {n_input}")
    want = {**{f"{p}input_to_{g}_weights": (n_cell, n_input) for g in GATES},
            **{f"{p}recurrent_to_{g}_weights": (n_cell, n_output) for g in GATES},
            **{f"{p}cell_to_{g}_weights": (n_cell,) for g in ("input", "forget", "output")},
            **{f"{p}{g}_bias": (n_cell,) for g in ("input_gate", "forget_gate", "cell", "output_gate")},
            f"{p}projection_weights": (n_output, n_cell), f"{p}projection_bias": (n_output,),
            **{f"{p}{g}_layer_norm_weights": (n_cell,) for g in GATES}}
    for name, dims in want.items():
        if _has_arg(ctx, name) and ctx.has(name) and ctx.dims(name) != dims:
            raise ShapeError(f"{name} has shape {list(ctx.dims(name))}, expected {list(dims)}")
    if not ctx.has(f"{p}projection_weights") and n_output != n_cell:
        raise ShapeError(f"output size {n_output} differs from num_units {n_cell} without projection weights")
    return n_cell, n_output


def _has_arg(ctx: OpContext, name: str) -> bool:
    try:
        ctx.signature.arg(name)
    except KeyError:
        return False
    return True


def check_cell(ctx: OpContext, p: str = "") -> None:
    """The all-or-none groups of optional weights of cell ``p`` (OperationTypes.h, LSTM)."""
    name = ctx.record.name
    cifg = not _all_or_none(ctx, [f"{p}input_to_input_weights", f"{p}recurrent_to_input_weights",
                                  f"{p}input_gate_bias"], "the input gate (no CIFG)")
    peephole = _all_or_none(ctx, [f"{p}cell_to_forget_weights", f"{p}cell_to_output_weights"], "peephole")
    if ctx.has(f"{p}cell_to_input_weights") != (peephole and not cifg):
        raise ShapeError(f"{name}: {p}cell_to_input_weights must be present exactly when peephole "
                         f"weights are and CIFG is not used")
    if ctx.has(f"{p}projection_bias") and not ctx.has(f"{p}projection_weights"):
        raise ShapeError(f"{name}: {p}projection_bias without {p}projection_weights")
    if _has_arg(ctx, f"{p}forget_layer_norm_weights"):
        gates = GATES[1:] if cifg else GATES
        _all_or_none(ctx, [f"{p}{g}_layer_norm_weights" for g in gates], "layer normalisation")
        if cifg and ctx.has(f"{p}input_layer_norm_weights"):
            raise ShapeError(f"{name}: {p}input_layer_norm_weights with CIFG (no input gate)")


def check_params(ctx: OpContext) -> None:
    act = int(ctx.value("activation"))
    if act not in ACTIVATIONS:
        raise ShapeError(f"{ctx.record.name}: activation {act} is not one of {sorted(ACTIVATIONS)}")
    for clip in ("cell_clip", "proj_clip"):
        v = float(ctx.value(clip))
        if not v >= 0:
            raise ShapeError(f"{ctx.record.name}: {clip} must be >= 0, is {v}")


def read_cell(ctx: OpContext, p: str = "") -> Cell:
    def get(name: str) -> np.ndarray | None:
        return np.asarray(ctx.value(name), np.float64) if _has_arg(ctx, name) and ctx.has(name) else None

    x = {g: get(f"{p}input_to_{g}_weights") for g in GATES}
    n_cell, n_input = x["output"].shape
    h = {g: get(f"{p}recurrent_to_{g}_weights") for g in GATES}
    return Cell(n_input, n_cell, h["output"].shape[1], x, h,
                {g: get(f"{p}cell_to_{g}_weights") for g in ("input", "forget", "output")},
                {"input": get(f"{p}input_gate_bias"), "forget": get(f"{p}forget_gate_bias"),
                 "cell": get(f"{p}cell_bias"), "output": get(f"{p}output_gate_bias")},
                {g: get(f"{p}{g}_layer_norm_weights") for g in GATES},
                {g: get(f"{p}aux_input_to_{g}_weights") for g in GATES},
                get(f"{p}projection_weights"), get(f"{p}projection_bias"))


# ---------------------------------------------------------------------------------------
# The arithmetic (float64)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for any z


def activation(z: np.ndarray, act: int) -> np.ndarray:
    if act == 0:
        return z
    if act == 1:
        return np.maximum(z, 0.0)
    if act == 3:
        return np.clip(z, 0.0, 6.0)
    if act == 4:
        return np.tanh(z)
    if act == 6:
        return sigmoid(z)
    raise ShapeError(f"activation {act} is not one of {sorted(ACTIVATIONS)}")


def layer_norm(v: np.ndarray) -> np.ndarray:
    """(v - mean) / sqrt(var + epsilon) over the last axis (the units of a batch row)."""
    mean = v.mean(axis=-1, keepdims=True)
    d = v - mean
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + LAYER_NORM_EPSILON)


def gate_inputs(cell: Cell, gate: str, x: np.ndarray, h: np.ndarray,
                aux: np.ndarray | None = None) -> np.ndarray:
    """W_x x + W_h h (+ W_aux aux): a gate's pre-activation before peephole, norm and bias."""
    z = x @ cell.x[gate].T + h @ cell.h[gate].T
    if aux is not None and cell.aux[gate] is not None:
        z = z + aux @ cell.aux[gate].T
    return z


def step(cell: Cell, x: np.ndarray, h: np.ndarray, c: np.ndarray, act: int, cell_clip: float,
         proj_clip: float, aux: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One time step of a batch: x [batch, n_input], h [batch, n_output], c [batch, n_cell]
    -> (h', C')."""
    norm = cell.ln["forget"] is not None

    def finish(z: np.ndarray, gate: str) -> np.ndarray:
        if norm:
            return layer_norm(z) * cell.ln[gate] + cell.b[gate]
        return z + cell.b[gate]

    def peep(gate: str, state: np.ndarray) -> np.ndarray:
        w = cell.c.get(gate)
        return 0.0 if w is None else state * w

    f = sigmoid(finish(gate_inputs(cell, "forget", x, h, aux) + peep("forget", c), "forget"))
    if cell.cifg:
        i = 1.0 - f
    else:
        i = sigmoid(finish(gate_inputs(cell, "input", x, h, aux) + peep("input", c), "input"))
    g = activation(finish(gate_inputs(cell, "cell", x, h, aux), "cell"), act)
    c_new = f * c + i * g
    if cell_clip > 0:
        c_new = np.clip(c_new, -cell_clip, cell_clip)
    o = sigmoid(finish(gate_inputs(cell, "output", x, h, aux) + peep("output", c_new), "output"))
    m = o * activation(c_new, act)
    if cell.proj is None:
        return m, c_new
    out = m @ cell.proj.T
    if cell.proj_bias is not None:
        out = out + cell.proj_bias
    if proj_clip > 0:
        out = np.clip(out, -proj_clip, proj_clip)
    return out, c_new


def sequence(cell: Cell, xs: np.ndarray, h: np.ndarray, c: np.ndarray, act: int, cell_clip: float,
             proj_clip: float, aux: np.ndarray | None = None,
             reverse: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A time-major sequence xs [time, batch, n_input] -> (outputs [time, batch, n_output],
    last h, last C); ``reverse`` runs from the last step to the first (outputs stay at their
    steps' places)."""
    out = np.zeros((xs.shape[0], xs.shape[1], cell.n_output))
    order = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for t in order:
        h, c = step(cell, xs[t], h, c, act, cell_clip, proj_clip, None if aux is None else aux[t])
        out[t] = h
    return out, h, c


def _params(ctx: OpContext) -> tuple[int, float, float]:
    return int(ctx.value("activation")), float(ctx.value("cell_clip")), float(ctx.value("proj_clip"))


def _time_major(ctx: OpContext, seq: np.ndarray) -> np.ndarray:
    return seq if ctx.value("time_major") else np.swapaxes(seq, 0, 1)


def _seq_dims(ctx: OpContext, name: str = "input") -> tuple[int, int, int]:
    """(max_time, batch, size) of a rank-3 sequence input in either layout."""
    d = ctx.dims(name)
    if len(d) != 3:
        raise ShapeError(f"{name} must have rank 3, has {len(d)}")
    major = ctx.value("time_major")
    return (d[0], d[1], d[2]) if major else (d[1], d[0], d[2])


def _state_dims(ctx: OpContext, name: str, want: tuple[int, int]) -> None:
    if ctx.dims(name) != want:
        raise ShapeError(f"{name} has shape {list(ctx.dims(name))}, expected {list(want)}")


# ---------------------------------------------------------------------------------------
# LSTM (one step)


def _lstm_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    batch, n_input = ctx.dims("input")
    n_cell, n_output = cell_dims(ctx, "", n_input)
    _state_dims(ctx, "output_state_in", (batch, n_output))
    _state_dims(ctx, "cell_state_in", (batch, n_cell))
    gates = 3 if not ctx.has("input_to_input_weights") else 4
    return [(batch, n_cell * gates), (batch, n_output), (batch, n_cell), (batch, n_output)]


def _lstm_check(ctx: OpContext) -> None:
    if len(ctx.inputs) not in (23, 27):
        raise ShapeError(f"LSTM takes 23 inputs (27 with layer normalisation weights), has {len(ctx.inputs)}")
    check_cell(ctx)
    check_params(ctx)


def _lstm_min_version(ctx: OpContext) -> Version:
    return max(ctx.match.version, Version.V1_2) if len(ctx.inputs) > 23 else ctx.match.version


def _lstm_kernel(ctx: OpContext) -> list[np.ndarray]:
    cell = read_cell(ctx)
    h, c = step(cell, ctx.value("input"), ctx.value("output_state_in"), ctx.value("cell_state_in"),
                *_params(ctx))
    batch = h.shape[0]
    scratch = np.zeros((batch, cell.n_cell * (3 if cell.cifg else 4)))
    return [scratch, h, c, h]


def _lstm_compare(ctx: OpContext, expected: list[np.ndarray], actual: list[np.ndarray],
                  relaxed: bool) -> list[str]:
    """ACC-1 on outputs 1-3; the scratch buffer (output 0) is implementation-defined: its
    shape only."""
    from nncert.testing.criteria import compare

    problems = []
    if tuple(np.shape(actual[0])) != tuple(expected[0].shape):
        problems.append(f"output 0 (scratch buffer): shape {list(np.shape(actual[0]))}, "
                        f"expected {list(expected[0].shape)}")
    t = ctx.type("input")
    for k in (1, 2, 3):
        m = compare(expected[k], np.asarray(actual[k]), t, relaxed, output=k)
        if m:
            problems.append(str(m))
    return problems


# ---------------------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_LSTM


def _uni_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    _, batch, n_input = _seq_dims(ctx)
    n_cell, n_output = cell_dims(ctx, "", n_input)
    _state_dims(ctx, "output_state_in", (batch, n_output))
    _state_dims(ctx, "cell_state_in", (batch, n_cell))
    d = ctx.dims("input")
    shapes = [(d[0], d[1], n_output)]
    if len(ctx.outputs) == 3:
        shapes += [(batch, n_output), (batch, n_cell)]
    return shapes


def _uni_check(ctx: OpContext) -> None:
    if len(ctx.inputs) != 28:
        raise ShapeError(f"UNIDIRECTIONAL_SEQUENCE_LSTM takes 28 inputs, has {len(ctx.inputs)}")
    check_cell(ctx)
    check_params(ctx)


def _states_min_version(ctx: OpContext) -> Version:
    """The signatures with state outputs are HAL 1.3's."""
    v = ctx.match.version
    return max(v, Version.V1_3) if ctx.signature.name.endswith("states") else v


def _uni_kernel(ctx: OpContext) -> list[np.ndarray]:
    cell = read_cell(ctx)
    out, h, c = sequence(cell, _time_major(ctx, ctx.value("input")), ctx.value("output_state_in"),
                         ctx.value("cell_state_in"), *_params(ctx))
    result = [_time_major(ctx, out)]
    if len(ctx.outputs) == 3:
        result += [h, c]
    return result


# ---------------------------------------------------------------------------------------
# BIDIRECTIONAL_SEQUENCE_LSTM


def _linking(ctx: OpContext) -> str:
    """"none", "cross" (aux input times aux weights) or "parallel" (the aux input is the
    backward cell's input); ShapeError for aux weights without an aux input."""
    weights = any(ctx.has(f"{d}_aux_input_to_{g}_weights") for d in ("fw", "bw") for g in GATES)
    if not ctx.has("aux_input"):
        if weights:
            raise ShapeError("BIDIRECTIONAL_SEQUENCE_LSTM: auxiliary weights without aux_input")
        return "none"
    return "cross" if weights else "parallel"


def _bi_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    _, batch, n_input = _seq_dims(ctx)
    fw_cell, fw_out = cell_dims(ctx, "fw_", n_input)
    link = _linking(ctx)
    n_bw_input = n_input
    if link != "none":
        a = ctx.dims("aux_input")
        if len(a) != 3 or a[:2] != ctx.dims("input")[:2]:
            raise ShapeError(f"aux_input has shape {list(a)}, expected the input's first two "
                             f"dimensions {list(ctx.dims('input')[:2])}")
        if link == "parallel":
            n_bw_input = a[2]
    bw_cell, bw_out = cell_dims(ctx, "bw_", n_bw_input)
    if link == "cross":
        for d, n in (("fw", fw_cell), ("bw", bw_cell)):
            for g in GATES:
                name = f"{d}_aux_input_to_{g}_weights"
                if ctx.has(name) and ctx.dims(name) != (n, ctx.dims("aux_input")[2]):
                    raise ShapeError(f"{name} has shape {list(ctx.dims(name))}, "
                                     f"expected {[n, ctx.dims('aux_input')[2]]}")
    for d, n_cell, n_output in (("fw", fw_cell, fw_out), ("bw", bw_cell, bw_out)):
        _state_dims(ctx, f"{d}_activation_state_in", (batch, n_output))
        _state_dims(ctx, f"{d}_cell_state_in", (batch, n_cell))
    lead = ctx.dims("input")[:2]
    merged = bool(ctx.value("merge_outputs"))
    shapes = [(*lead, fw_out + bw_out if merged else fw_out)]
    if not merged:
        shapes.append((*lead, bw_out))
    if ctx.signature.name.endswith("states"):
        shapes += [(batch, fw_out), (batch, fw_cell), (batch, bw_out), (batch, bw_cell)]
    return shapes


def _bi_check(ctx: OpContext) -> None:
    if len(ctx.inputs) != 61:
        raise ShapeError(f"BIDIRECTIONAL_SEQUENCE_LSTM takes 61 inputs, has {len(ctx.inputs)}")
    merged = bool(ctx.value("merge_outputs"))
    if merged != ctx.signature.name.startswith("merged"):
        raise ShapeError(f"BIDIRECTIONAL_SEQUENCE_LSTM with merge_outputs {merged} has "
                         f"{len(ctx.outputs)} outputs, expected {(1, 5) if merged else (2, 6)}")
    for d in ("fw_", "bw_"):
        check_cell(ctx, d)
    cifg = not ctx.has("fw_input_to_input_weights")
    if cifg != (not ctx.has("bw_input_to_input_weights")):
        raise ShapeError("BIDIRECTIONAL_SEQUENCE_LSTM: CIFG in one direction only")
    for d in ("fw", "bw"):
        gates = GATES[1:] if cifg else GATES
        _all_or_none(ctx, [f"{d}_aux_input_to_{g}_weights" for g in gates], f"{d} auxiliary weights")
        if cifg and ctx.has(f"{d}_aux_input_to_input_weights"):
            raise ShapeError(f"BIDIRECTIONAL_SEQUENCE_LSTM: {d}_aux_input_to_input_weights with CIFG")
    if ctx.has("fw_aux_input_to_forget_weights") != ctx.has("bw_aux_input_to_forget_weights"):
        raise ShapeError("BIDIRECTIONAL_SEQUENCE_LSTM: auxiliary weights in one direction only")
    _linking(ctx)
    check_params(ctx)


def _bi_min_version(ctx: OpContext) -> Version:
    v = _states_min_version(ctx)
    if ctx.has("aux_input") and not ctx.has("fw_aux_input_to_forget_weights"):
        v = max(v, Version.V1_3)  # parallel linking
    return v


def _bi_kernel(ctx: OpContext) -> list[np.ndarray]:
    params = _params(ctx)
    x = _time_major(ctx, ctx.value("input"))
    link = _linking(ctx)
    aux = _time_major(ctx, ctx.value("aux_input")) if link != "none" else None
    fw, bw = read_cell(ctx, "fw_"), read_cell(ctx, "bw_")
    fw_seq, fw_h, fw_c = sequence(fw, x, ctx.value("fw_activation_state_in"), ctx.value("fw_cell_state_in"),
                                  *params, aux if link == "cross" else None)
    bw_seq, bw_h, bw_c = sequence(bw, aux if link == "parallel" else x, ctx.value("bw_activation_state_in"),
                                  ctx.value("bw_cell_state_in"), *params, aux if link == "cross" else None,
                                  reverse=True)
    if ctx.value("merge_outputs"):
        result = [_time_major(ctx, np.concatenate([fw_seq, bw_seq], axis=-1))]
    else:
        result = [_time_major(ctx, fw_seq), _time_major(ctx, bw_seq)]
    if ctx.signature.name.endswith("states"):
        result += [fw_h, fw_c, bw_h, bw_c]
    return result


# ---------------------------------------------------------------------------------------
# Sampling


#: Weights and biases draw from this range, so that gates stay in sigmoid's sensitive part.
WEIGHTS = 0.5
#: With layer normalisation, each gate's pre-activations must spread at least this much
#: across the units (a standard deviation), or a float32 driver's rounding is amplified.
MIN_SPREAD = 0.1


@dataclass
class CellChoice:
    """The optional groups and sizes one drawn cell uses."""

    n_cell: int
    n_output: int
    cifg: bool
    peephole: bool
    projection: bool
    projection_bias: bool
    layer_norm: bool


def choose_cell(s: SampleContext, layer_norm_allowed: bool) -> CellChoice:
    d = s.draw
    n_cell = d.int(1, 4)
    projection = d.bool(0.35)
    norm = layer_norm_allowed and d.bool(0.35)
    if norm:
        n_cell = d.int(2, 4)  # one unit normalises to 0
    return CellChoice(n_cell, d.int(1, 4) if projection else n_cell, d.bool(0.3), d.bool(0.4),
                      projection, projection and d.bool(0.5), norm)


def cell_values(s: SampleContext, ch: CellChoice, n_input: int, n_aux: int = 0,
                cifg: bool | None = None) -> dict[str, np.ndarray | None]:
    """Weights for a chosen cell (None: omitted), by arg name without the direction prefix."""
    d = s.draw
    cifg = ch.cifg if cifg is None else cifg
    n, o = ch.n_cell, ch.n_output
    v: dict[str, np.ndarray | None] = {}
    for g in GATES:
        skip = cifg and g == "input"
        v[f"input_to_{g}_weights"] = None if skip else d.array((n, n_input), -WEIGHTS, WEIGHTS)
        v[f"recurrent_to_{g}_weights"] = None if skip else d.array((n, o), -WEIGHTS, WEIGHTS)
        v[f"aux_input_to_{g}_weights"] = None if skip or not n_aux else d.array((n, n_aux), -WEIGHTS, WEIGHTS)
        peep = ch.peephole and not skip and g != "cell"
        v[f"cell_to_{g}_weights"] = d.array((n,), -WEIGHTS, WEIGHTS) if peep else None
        v[f"{g}_layer_norm_weights"] = d.array((n,), 0.5, 1.5) if ch.layer_norm and not skip else None
    for g, name in (("input", "input_gate_bias"), ("forget", "forget_gate_bias"), ("cell", "cell_bias"),
                    ("output", "output_gate_bias")):
        v[name] = None if cifg and g == "input" else d.array((n,), -WEIGHTS, WEIGHTS)
    v["projection_weights"] = d.array((o, n), -WEIGHTS, WEIGHTS) if ch.projection else None
    v["projection_bias"] = d.array((o,), -WEIGHTS, WEIGHTS) if ch.projection_bias else None
    return v


def spread_ok(v: dict[str, np.ndarray | None], x: np.ndarray, h: np.ndarray, c: np.ndarray,
              aux: np.ndarray | None = None) -> bool:
    """Whether every normalised gate's pre-activations spread enough on (x, h, C)."""
    if v.get("forget_layer_norm_weights") is None:
        return True
    for g in GATES:
        if v[f"input_to_{g}_weights"] is None:
            continue
        z = x @ v[f"input_to_{g}_weights"].T + h @ v[f"recurrent_to_{g}_weights"].T
        if aux is not None and v.get(f"aux_input_to_{g}_weights") is not None:
            z = z + aux @ v[f"aux_input_to_{g}_weights"].T
        if v.get(f"cell_to_{g}_weights") is not None and g != "output":
            z = z + c * v[f"cell_to_{g}_weights"]
        if np.min(np.std(z, axis=-1)) < MIN_SPREAD:
            return False
    return True


def set_cell(s: SampleContext, v: dict[str, np.ndarray | None], p: str = "") -> None:
    """The cell's weights into the case: constants (as in a trained model), omitted when None."""
    for name, value in v.items():
        full = p + name
        if not _sig_has(s.signature, full):
            continue
        if value is None:
            s.omit(full)
        else:
            s.tensor(full, value.shape, value, const=True)


def _sig_has(sig: Signature, name: str) -> bool:
    try:
        sig.arg(name)
    except KeyError:
        return False
    return True


def set_params(s: SampleContext, projection: bool, *, act: int | None = None, cell_clip: float | None = None,
               proj_clip: float | None = None) -> None:
    d = s.draw
    if act is None:
        act = d.choice((4, 4, 4, 0, 1, 3, 6))
    if cell_clip is None:
        cell_clip = d.float(0.5, 2.0) if d.bool(0.3) else 0.0
    if proj_clip is None:
        proj_clip = d.float(0.3, 1.5) if projection and d.bool(0.4) else 0.0
    s.scalar("activation", act)
    s.scalar("cell_clip", cell_clip)
    s.scalar("proj_clip", proj_clip)


def _draw_until_spread(s: SampleContext, draw: Callable[[], tuple]) -> tuple:
    """``draw()`` again until its cell values are well conditioned (``spread_ok``)."""
    for _ in range(20):
        got = draw()
        if got[-1]:
            return got
    return got


def _lstm_sample(s: SampleContext, *, edge: str = "") -> None:
    d = s.draw
    batch, n_input = d.int(1, 2), d.int(1, 4)
    long_form = s.variant.version >= Version.V1_2 or d.bool(0.5)

    def draw() -> tuple:
        ch = _forced(choose_cell(s, long_form), _force(s, edge), d)
        v = cell_values(s, ch, n_input)
        x = d.array((batch, n_input), -1, 1)
        h = d.array((batch, ch.n_output), -1, 1)
        c = d.array((batch, ch.n_cell), -1.5, 1.5)
        return ch, v, x, h, c, spread_ok(v, x, h, c)

    ch, v, x, h, c, _ = _draw_until_spread(s, draw)
    x, h, c, v, clips = _apply_edge(s, edge, ch, v, x, h, c)
    s.tensor("input", x.shape, x)
    set_cell(s, {k: w for k, w in v.items() if not k.startswith("aux_")})
    s.tensor("output_state_in", h.shape, h)
    s.tensor("cell_state_in", c.shape, c)
    set_params(s, ch.projection, **clips)
    if not long_form:
        for g in GATES:
            s.inputs.pop(f"{g}_layer_norm_weights", None)


def _apply_edge(s: SampleContext, edge: str, ch: CellChoice, v: dict, x: np.ndarray, h: np.ndarray,
                c: np.ndarray) -> tuple:
    """Edge cases (``EDGES``) adjust a drawn cell: returns (x, h, c, weights, clip kwargs)."""
    d = s.draw
    clips: dict = {}
    if edge == "cell_clip":
        # A cell state of 1.5..3 in magnitude kept by a forget gate of sigmoid(6): with tanh
        # (|i g| <= 1) the new state is at least 0.49 from zero, past a clip of 0.25.
        c = d.array(c.shape, 1.5, 3.0) * np.where(d.integers(c.shape, 0, 1) == 1, 1.0, -1.0)
        v = dict(v, forget_gate_bias=np.full(ch.n_cell, 6.0), cell_to_forget_weights=None,
                 cell_to_input_weights=None, cell_to_output_weights=None)
        v["input_to_forget_weights"] = np.zeros_like(v["input_to_forget_weights"])
        v["recurrent_to_forget_weights"] = np.zeros_like(v["recurrent_to_forget_weights"])
        clips = dict(cell_clip=0.25, act=4)
    elif edge == "proj_clip":
        # A projection bias of 2..3 in magnitude and |W_proj m| <= 1 (at most 4 units,
        # weights under 0.25, |m| <= 1 with tanh): every output is at least 1 from zero, in
        # its bias's sign, past a clip of 0.2.
        o = ch.n_output
        v = dict(v, projection_weights=v["projection_weights"] * 0.5,
                 projection_bias=d.array((o,), 2.0, 3.0) * np.where(d.integers((o,), 0, 1) == 1, 1.0, -1.0))
        clips = dict(proj_clip=0.2, act=4)
    elif edge == "gate_saturation":
        # Biases of 12..24 in magnitude: every gate saturates (sigmoid at 0 or 1, tanh at
        # +-1), where a float16 exp overflows.
        for name in ("input_gate_bias", "forget_gate_bias", "cell_bias", "output_gate_bias"):
            if v[name] is not None:
                n = v[name].shape
                v[name] = d.array(n, 12.0, 24.0) * np.where(d.integers(n, 0, 1) == 1, 1.0, -1.0)
        clips = dict(act=4)
    return x, h, c, v, clips


def _edge_sampler(sample: Callable[..., None], edge: str) -> Callable[[SampleContext], None]:
    def run(s: SampleContext) -> None:
        sample(s, edge=edge)

    return run


def _edges(sample: Callable[..., None]) -> tuple[edges.Edge, ...]:
    return (
        edges.Edge("cell_clip", "lstm",
                   "a cell state of 1.5..3 kept by a forget gate near 1, clipped at 0.25",
                   sample=_edge_sampler(sample, "cell_clip")),
        edges.Edge("proj_clip", "lstm", "a projection with biases of 2..3, clipped at 0.2",
                   sample=_edge_sampler(sample, "proj_clip")),
        edges.Edge("gate_saturation", "lstm", "gate biases of 12..24: every sigmoid and tanh saturated",
                   sample=_edge_sampler(sample, "gate_saturation")),
    )


def _force(s: SampleContext, edge: str) -> dict:
    """The choices an edge needs (a projection for proj_clip; no layer norm for the others,
    which must set pre-activations through the bias)."""
    if edge == "proj_clip":
        return dict(projection=True)
    if edge:
        return dict(layer_norm=False)
    return {}


def _seq_sample(s: SampleContext, *, edge: str = "", steps: int | None = None) -> None:
    d = s.draw
    time, batch, n_input = d.int(1, 3), d.int(1, 2), d.int(1, 4)
    time = time if steps is None else steps
    major = d.bool()

    def draw() -> tuple:
        ch = choose_cell(s, True)
        ch = _forced(ch, _force(s, edge), d)
        v = cell_values(s, ch, n_input)
        xs = d.array((time, batch, n_input), -1, 1)
        h = d.array((batch, ch.n_output), -1, 1)
        c = d.array((batch, ch.n_cell), -1.5, 1.5)
        return ch, v, xs, h, c, spread_ok(v, xs[0], h, c)

    ch, v, xs, h, c, _ = _draw_until_spread(s, draw)
    xs, h, c, v, clips = _apply_edge(s, edge, ch, v, xs, h, c)
    seq = xs if major else np.swapaxes(xs, 0, 1)
    s.tensor("input", seq.shape, seq)
    set_cell(s, {k: w for k, w in v.items() if not k.startswith("aux_")})
    s.tensor("output_state_in", h.shape, h)
    s.tensor("cell_state_in", c.shape, c)
    set_params(s, ch.projection, **clips)
    s.scalar("time_major", major)


def _forced(ch: CellChoice, force: dict, d) -> CellChoice:
    if force.get("projection") and not ch.projection:
        ch = CellChoice(ch.n_cell, d.int(1, 4), ch.cifg, ch.peephole, True, True, ch.layer_norm)
    if force.get("projection"):
        ch.projection_bias = True
    if force.get("layer_norm") is False:
        ch.layer_norm = False
    return ch


def _bi_sample(s: SampleContext, *, edge: str = "", steps: int | None = None, twins: bool = False) -> None:
    """``twins``: batch-major, 2..3 batches, both cells of one size without layer
    normalisation, activation tanh (the form a runtime takes as one bidirectional kernel, not
    two)."""
    d = s.draw
    time, batch, n_input = d.int(1, 3), d.int(1, 2), d.int(1, 3)
    time = time if steps is None else steps
    major = d.bool()
    if twins:
        batch, major = d.int(2, 3), False
    link = d.choice(("none", "none", "cross", "parallel") if s.signature.name.endswith("states")
                    or s.variant.version >= Version.V1_3 else ("none", "none", "cross"))
    n_aux = n_input if link == "cross" or twins else d.int(1, 3)

    def draw() -> tuple:
        fw = _forced(choose_cell(s, not twins), _force(s, edge), d)
        bw = _forced(choose_cell(s, not twins), _force(s, edge), d)
        if twins:
            bw = replace(bw, n_cell=fw.n_cell, n_output=fw.n_output, projection=fw.projection,
                                     projection_bias=fw.projection and bw.projection_bias)
        bw.cifg = fw.cifg
        bw.layer_norm = fw.layer_norm and bw.n_cell > 1
        fw.layer_norm = bw.layer_norm
        xs = d.array((time, batch, n_input), -1, 1)
        aux = d.array((time, batch, n_aux), -1, 1) if link != "none" else None
        fv = cell_values(s, fw, n_input, n_input if link == "cross" else 0)
        bv = cell_values(s, bw, n_aux if link == "parallel" else n_input, n_input if link == "cross" else 0)
        states = [d.array((batch, fw.n_output), -1, 1), d.array((batch, fw.n_cell), -1.5, 1.5),
                  d.array((batch, bw.n_output), -1, 1), d.array((batch, bw.n_cell), -1.5, 1.5)]
        bw_x = aux if link == "parallel" else xs
        cross = aux if link == "cross" else None
        ok = spread_ok(fv, xs[0], states[0], states[1], None if cross is None else cross[0]) and \
            spread_ok(bv, bw_x[-1], states[2], states[3], None if cross is None else cross[-1])
        return fw, bw, fv, bv, xs, aux, states, ok

    fw, bw, fv, bv, xs, aux, states, _ = _draw_until_spread(s, draw)
    xs, states[0], states[1], fv, clips = _apply_edge(s, edge, fw, fv, xs, states[0], states[1])
    _, states[2], states[3], bv, _ = _apply_edge(s, edge, bw, bv, xs, states[2], states[3])

    def layout(a: np.ndarray) -> np.ndarray:
        return a if major else np.swapaxes(a, 0, 1)

    s.tensor("input", layout(xs).shape, layout(xs))
    for p, v in (("fw_", fv), ("bw_", bv)):
        set_cell(s, {k: w for k, w in v.items() if not k.startswith("aux_")}, p)
    for (p, st), value in zip((("fw", "activation"), ("fw", "cell"), ("bw", "activation"), ("bw", "cell")),
                              states, strict=True):
        s.tensor(f"{p}_{st}_state_in", value.shape, value)
    if link == "none":
        s.omit("aux_input")
    else:
        s.tensor("aux_input", layout(aux).shape, layout(aux))
    for p, v in (("fw", fv), ("bw", bv)):
        for g in GATES:
            w = v[f"aux_input_to_{g}_weights"]
            if w is None:
                s.omit(f"{p}_aux_input_to_{g}_weights")
            else:
                s.tensor(f"{p}_aux_input_to_{g}_weights", w.shape, w, const=True)
    if twins:  # tanh, the activation every runtime maps: the case is about the batches' state rows
        clips = {"act": 4, **clips}
    set_params(s, fw.projection and bw.projection, **clips)
    s.scalar("merge_outputs", s.signature.name.startswith("merged"))
    s.scalar("time_major", major)


# ---------------------------------------------------------------------------------------

_RECURRENT_GRAPHS = ("its state inputs and outputs are a recurrent loop the random-graph generator does not "
                     "close; the per-operation state chain (test_operation_state) carries them instead")

_STATE = (("output_state_in", "output_state_out"), ("cell_state_in", "cell_state_out"))

RECORDS = [
    OpRecord(Op.LSTM, (_LSTM_SIG,), (*variants(Version.V1_0, _F32), *variants(Version.V1_2, _F16)),
             _lstm_kernel, _lstm_shape, _lstm_sample, criterion="relaxed", check=_lstm_check,
             min_version=_lstm_min_version, compare=_lstm_compare, edges=_edges(_lstm_sample),
             state=_STATE, graphs=_RECURRENT_GRAPHS,
             doc="one LSTM time step: gates from input and output state, new cell and output state; "
                 "optional CIFG, peephole, projection, clipping, layer normalisation"),
    OpRecord(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, _UNI_SIGS, tuple(variants(Version.V1_2, _F32, _F16)),
             _uni_kernel, _uni_shape, _seq_sample, criterion="relaxed", check=_uni_check,
             min_version=_states_min_version,
             edges=(*_edges(_seq_sample), edges.long_sequence(lambda s, t: _seq_sample(s, steps=t))),
             state=_STATE, graphs=_RECURRENT_GRAPHS,
             doc="an LSTM over a sequence (time- or batch-major): the output of every step; the last "
                 "output and cell states too (signature states, HAL 1.3)"),
    OpRecord(Op.BIDIRECTIONAL_SEQUENCE_LSTM, _BI_SIGS, tuple(variants(Version.V1_2, _F32, _F16)),
             _bi_kernel, _bi_shape, _bi_sample, criterion="relaxed", check=_bi_check,
             min_version=_bi_min_version,
             edges=(*_edges(_bi_sample), edges.long_sequence(lambda s, t: _bi_sample(s, steps=t)),
                    edges.Edge("batch_major_twins", "lstm", "batch-major, 2..3 batches, both cells of one "
                               "size: one bidirectional kernel run batch by batch, each batch from its own "
                               "state rows", sample=lambda s: _bi_sample(s, twins=True))),
             state=tuple((f"{d}_{s}_state_in", f"{d}_{s}_state_out")
                         for d in ("fw", "bw") for s in ("activation", "cell")),
             graphs="61 inputs, most of them weights, and a recurrent state: " + _RECURRENT_GRAPHS,
             doc="a forward and a backward LSTM over a sequence, outputs separate or merged; optional "
                 "auxiliary input (cross or parallel linking) and final states (HAL 1.3)"),
]
