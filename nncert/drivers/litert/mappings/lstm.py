"""LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM as TFLite's builtins of
the same names.

TFLite keeps an LSTM's output and cell state in variable tensors that the operator reads and
overwrites in place; HAL passes the state in as inputs and out as outputs, fresh at every
execution. The export makes each HAL state input a variable tensor that the runtime writes
before the operator runs: a model input is itself that variable (the driver sets it before
every invocation), any other state (a constant, another operation's result) is copied into it
by an ADD of zero, which runs before the LSTM at every invocation. The updated variable is the
HAL state output (``output_state_out``, ``cell_state_out``): after the operator has run it
holds the last step's state. LSTM's scratch buffer, implementation-defined, is zeros (FILL).

Declined: activation 6 (sigmoid), which TFLite's ActivationFunctionType lacks; layer
normalisation in BIDIRECTIONAL_SEQUENCE_LSTM, whose TFLite operator has no such inputs;
parallel linking (an auxiliary input without auxiliary weights), which TFLite's operator
does not implement; float16 (the exporter has no float16 tensors).
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
    var = g.like(t)
    g.tensors[var].isVariable = True
    g.op("ADD", [t, g.const(np.zeros(1, np.float32), np.float32)], [var], "Add")
    return var


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


def _bidirectional(n: Any) -> None:
    g = n.g
    if any(n.has(f"{d}_{gate}_layer_norm_weights") for d in ("fw_", "bw_") for gate in GATES):
        raise Unmappable("TFLite's BIDIRECTIONAL_SEQUENCE_LSTM has no layer normalisation inputs")
    aux = n.has("aux_input")
    if aux and not n.has("fw_aux_input_to_forget_weights"):
        raise Unmappable("TFLite's BIDIRECTIONAL_SEQUENCE_LSTM has no parallel linking (an auxiliary "
                         "input without auxiliary weights)")
    opts = _options(n)
    merged = bool(n.scalar("merge_outputs"))
    states = [_state(n, f"{d}_{s}_state_in") for d in ("fw", "bw") for s in ("activation", "cell")]
    aux_w = [_opt(n, f"{d}_aux_input_to_{gate}_weights") for d in ("fw", "bw") for gate in GATES]
    ins = [n.t("input"), *_cell(n, "fw_"), *_cell(n, "bw_"), *states, _opt(n, "aux_input"), *aux_w]
    outs = [n.out(0)] if merged else [n.out(0), n.out(1)]
    g.op("BIDIRECTIONAL_SEQUENCE_LSTM", ins, outs, "BidirectionalSequenceLSTM",
         mergeOutputs=merged, timeMajor=bool(n.scalar("time_major")), **opts)
    first = len(outs)
    if len(n.outputs) > first:
        for k, t in enumerate(states):
            _as_output(n, first + k, t)


MAPPINGS = {Op.LSTM: _lstm, Op.UNIDIRECTIONAL_SEQUENCE_LSTM: _unidirectional,
            Op.BIDIRECTIONAL_SEQUENCE_LSTM: _bidirectional}
