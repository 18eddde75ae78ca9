"""LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM as TFLite's builtins of
the same names.

TFLite keeps an LSTM's output and cell state in variable tensors that the operator reads and
overwrites in place; HAL passes the state in as inputs and out as outputs, fresh at every
execution. The export makes each HAL state input a variable tensor that the runtime writes
before the operator runs: a model input is itself that variable (the driver sets it before
every invocation), any other state (a constant, another operation's result) is copied into it
(``Graph.variable_copy``: a SLICE, which runs before the LSTM at every invocation; an ADD of
zero, which LiteRT may run in place, left the variable without a buffer and segfaulted
under the builtin and reference kernels). The updated variable is the
HAL state output (``output_state_out``, ``cell_state_out``): after the operator has run it
holds the last step's state. LSTM's scratch buffer, implementation-defined, is zeros (FILL).

BIDIRECTIONAL_SEQUENCE_LSTM is TFLite's operator of that name where it can take the instance;
its prepare step checks the backward cell's weights against the forward cell's num_units and
output size and against the input's size, and it has no layer-normalisation inputs. Cells of
different sizes, layer normalisation, and parallel linking with an auxiliary input of another
size than the input are two UNIDIRECTIONAL_SEQUENCE_LSTMs instead, the backward one on the
sequence reversed in time (REVERSE_V2). Parallel linking (an auxiliary input without
auxiliary weights) is TFLite's "non-stacking" mode: the auxiliary input feeds the backward cell.

Declined: activation 6 (sigmoid), which TFLite's ActivationFunctionType lacks. (float16 is
widened to float32 by the driver before export.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.hal.types import OperandLifeTime
from nncert.hal.types import OperationType as Op
from nncert.ops.lstm import GATES

try:
    from ai_edge_litert import schema_py_generated as fb
except ImportError:  # pragma: no cover - exercised only without ai-edge-litert
    fb = None  # type: ignore[assignment]

#: HAL activation parameter -> TFLite ActivationFunctionType (no sigmoid there).
_ACTIVATIONS = {0: "NONE", 1: "RELU", 3: "RELU6", 4: "TANH"}


def _cell(n: Any, p: str = "") -> list[int]:
    """The 17 weight and bias tensors of cell ``p`` in TFLite's order (-1: absent), which is
    HAL's."""
    names = [*(f"{p}input_to_{g}_weights" for g in GATES), *(f"{p}recurrent_to_{g}_weights" for g in GATES),
             *(f"{p}cell_to_{g}_weights" for g in ("input", "forget", "output")),
             f"{p}input_gate_bias", f"{p}forget_gate_bias", f"{p}cell_bias", f"{p}output_gate_bias",
             f"{p}projection_weights", f"{p}projection_bias"]
    return [_opt(n, name) for name in names]


def _opt(n: Any, name: str) -> int:
    return n.t(name) if n.has(name) else -1


def _state(n: Any, name: str) -> int:
    """The variable tensor holding state input ``name`` when the operator runs."""
    g = n.g
    operand = n.operand(name)
    t = n.t(name)
    if operand.lifetime is OperandLifeTime.SUBGRAPH_INPUT and n.ex.sg is n.ex.model.main:
        g.tensors[t].isVariable = True
        return t
    return g.variable_copy(t)


def _as_output(n: Any, k: int, tensor: int) -> None:
    """HAL output ``k`` is ``tensor`` (an updated state variable)."""
    idx = n.op.outputs[k]
    if idx in n.ex._tensors:
        raise Unmappable(f"{n.record.name}'s output {k} is already mapped")
    n.ex._tensors[idx] = tensor


def _options(n: Any) -> dict:
    act = int(n.scalar("activation"))
    if act not in _ACTIVATIONS:
        raise Unmappable(f"TFLite's LSTM activations have no {act} (sigmoid)")
    return dict(fusedActivationFunction=getattr(fb.ActivationFunctionType, _ACTIVATIONS[act]),
                cellClip=float(n.scalar("cell_clip")), projClip=float(n.scalar("proj_clip")))


def _layer_norm(n: Any, p: str = "") -> list[int]:
    return [_opt(n, f"{p}{g}_layer_norm_weights") for g in GATES]


def _lstm(n: Any) -> None:
    g = n.g
    opts = _options(n)
    h, c = _state(n, "output_state_in"), _state(n, "cell_state_in")
    ins = [n.t("input"), *_cell(n), h, c, *_layer_norm(n)]
    g.op("LSTM", ins, [n.out(3)], "LSTM", kernelType=fb.LSTMKernelType.FULL, **opts)
    scratch = n.out_shape(0)
    g.op("FILL", [g.const(list(scratch)), g.const(np.float32(0.0), np.float32)], [n.out(0)])
    _as_output(n, 1, h)
    _as_output(n, 2, c)


def _unidirectional(n: Any) -> None:
    g = n.g
    opts = _options(n)
    h, c = _state(n, "output_state_in"), _state(n, "cell_state_in")
    ins = [n.t("input"), *_cell(n), h, c, *_layer_norm(n)]
    g.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [n.out(0)], "UnidirectionalSequenceLSTM",
         timeMajor=bool(n.scalar("time_major")), **opts)
    if len(n.outputs) == 3:
        _as_output(n, 1, h)
        _as_output(n, 2, c)


def _native_problem(n: Any) -> str | None:
    """Why TFLite's BIDIRECTIONAL_SEQUENCE_LSTM cannot take this instance, or None. Its
    operator has no layer-normalisation inputs, and its prepare step checks the backward
    cell's weights against the forward cell's num_units and output size and against the
    input's size (bidirectional_sequence_lstm.cc), so both cells must have the same sizes,
    and with parallel linking the auxiliary input must have the input's."""
    if any(n.has(f"{d}_{gate}_layer_norm_weights") for d in ("fw", "bw") for gate in GATES):
        return "layer normalisation"
    fw_cell, bw_cell = (n.in_shape(f"{d}_input_to_output_weights")[0] for d in ("fw", "bw"))
    fw_out, bw_out = (n.in_shape(f"{d}_recurrent_to_output_weights")[1] for d in ("fw", "bw"))
    if (fw_cell, fw_out) != (bw_cell, bw_out):
        return f"cells of different sizes (num_units {fw_cell} / {bw_cell}, outputs {fw_out} / {bw_out})"
    if n.has("aux_input") and not n.has("fw_aux_input_to_forget_weights") and \
            n.in_shape("aux_input")[2] != n.in_shape("input")[2]:
        return "parallel linking with an aux_input of another size than the input"
    return None


def _bidirectional(n: Any) -> None:
    g = n.g
    opts = _options(n)
    merged, major = bool(n.scalar("merge_outputs")), bool(n.scalar("time_major"))
    states = [_state(n, f"{d}_{s}_state_in") for d in ("fw", "bw") for s in ("activation", "cell")]
    if _native_problem(n) is None:
        aux_w = [_opt(n, f"{d}_aux_input_to_{gate}_weights") for d in ("fw", "bw") for gate in GATES]
        ins = [n.t("input"), *_cell(n, "fw_"), *_cell(n, "bw_"), *states, _opt(n, "aux_input"), *aux_w]
        outs = [n.out(0)] if merged else [n.out(0), n.out(1)]
        g.op("BIDIRECTIONAL_SEQUENCE_LSTM", ins, outs, "BidirectionalSequenceLSTM",
             mergeOutputs=merged, timeMajor=major, **opts)
    else:
        outs = _two_cells(n, states, merged, major, opts)
    first = len(outs)
    if len(n.outputs) > first:
        for k, t in enumerate(states):
            _as_output(n, first + k, t)


def _two_cells(n: Any, states: list[int], merged: bool, major: bool, opts: dict) -> list[int]:
    """What TFLite's bidirectional operator cannot take (``_native_problem``) as two
    UNIDIRECTIONAL_SEQUENCE_LSTMs, which have layer normalisation and size each cell on its
    own: the backward one on the sequence reversed in time (REVERSE_V2), its output reversed
    back; cross-linking as the input and auxiliary input concatenated, and each gate's input
    and auxiliary weights (the same sum); merged outputs concatenated. Returns the HAL
    sequence outputs written."""
    g = n.g
    x = n.t("input")
    link = "none" if not n.has("aux_input") else \
        "cross" if n.has("fw_aux_input_to_forget_weights") else "parallel"
    aux = n.t("aux_input") if link != "none" else -1
    if link == "cross":
        joined = g.like(x, (*g.shapes[x][:2], g.shapes[x][2] + g.shapes[aux][2]))
        g.op("CONCATENATION", [x, aux], [joined], "Concatenation", axis=2, fusedActivationFunction=0)
        x = joined
    time_axis = g.const(np.array([0 if major else 1], np.int32))

    def cell(p: str, xs: int, h: int, c: int, out: int) -> None:
        ins = _cell(n, p)
        if link == "cross":
            for k, gate in enumerate(GATES):
                if ins[k] >= 0:
                    w, aw = ins[k], n.t(f"{p}aux_input_to_{gate}_weights")
                    both = g.like(w, (g.shapes[w][0], g.shapes[w][1] + g.shapes[aw][1]))
                    g.op("CONCATENATION", [w, aw], [both], "Concatenation", axis=1, fusedActivationFunction=0)
                    ins[k] = both
        g.op("UNIDIRECTIONAL_SEQUENCE_LSTM", [xs, *ins, h, c, *_layer_norm(n, p)], [out],
             "UnidirectionalSequenceLSTM", timeMajor=major, **opts)

    def reverse(t: int, out: int | None = None) -> int:
        out = g.like(t) if out is None else out
        g.op("REVERSE_V2", [t, time_axis], [out])
        return out

    lead = g.shapes[x][:2]
    fw_units = n.in_shape("fw_recurrent_to_output_weights")[1]
    bw_units = n.in_shape("bw_recurrent_to_output_weights")[1]
    fw = g.like(x, (*lead, fw_units)) if merged else n.out(0)
    cell("fw_", x, states[0], states[1], fw)
    bw_rev = g.like(x, (*lead, bw_units))
    cell("bw_", reverse(aux if link == "parallel" else x), states[2], states[3], bw_rev)
    if merged:
        bw = reverse(bw_rev)
        g.op("CONCATENATION", [fw, bw], [n.out(0)], "Concatenation", axis=2, fusedActivationFunction=0)
        return [n.out(0)]
    reverse(bw_rev, n.out(1))
    return [n.out(0), n.out(1)]


MAPPINGS = {Op.LSTM: _lstm, Op.UNIDIRECTIONAL_SEQUENCE_LSTM: _unidirectional,
            Op.BIDIRECTIONAL_SEQUENCE_LSTM: _bidirectional}
