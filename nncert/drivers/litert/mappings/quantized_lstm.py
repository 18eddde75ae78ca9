"""QUANTIZED_LSTM and QUANTIZED_16BIT_LSTM as TFLite's LSTM builtin.

QUANTIZED_LSTM is TFLite's fully integer LSTM (int8 input, int16 cell state, kernel FULL):
the first 24 HAL inputs are TFLite's 24 in the same order; the cell and projection clips
are options; the four gate intermediate scales and the hidden state's scale and zero point
are the operator's five intermediate tensors. TFLite keeps the output and cell state in
variable tensors that the operator overwrites: a HAL state input that is a model input
becomes that variable (the driver writes it before every invocation, as for the float LSTM,
``mappings/lstm.py``), and the HAL state outputs are those variables after the operator
has run. Declined: a state that is not a model input (a constant, another operation's
result: the int8 / int16 copy into a variable that the float LSTM makes with ADD has no
exact quantised form here), and intermediate scales other than 2^-12 without layer
normalisation (TFLite then ignores them and reads the gate pre-activations as Q3.12).

QUANTIZED_16BIT_LSTM is TFLite's basic LSTM kernel (kernel_type BASIC: input, previous
output, one concatenated weight matrix, one bias vector, previous cell state in; output,
cell state and two scratch tensors out), which Android's CPU implementation calls: the
weights are concatenated as it does (``nncert.ops.quantized_lstm.basic_concatenate``:
[recurrent | input] columns, gate rows input, cell, forget, output), the biases in that gate
order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import hal_quant
from nncert.drivers.litert.mappings.lstm import _as_output
from nncert.hal.transform import CONSTANT
from nncert.hal.types import OperandLifeTime
from nncert.hal.types import OperationType as Op
from nncert.ops.quantized_lstm import basic_concatenate

try:
    from ai_edge_litert import schema_py_generated as fb
except ImportError:  # pragma: no cover - exercised only without ai-edge-litert
    fb = None  # type: ignore[assignment]

_GATES = ("input", "forget", "cell", "output")
#: QUANTIZED_LSTM inputs that TFLite's Prepare reads (row sums, effective biases).
_CONSTANT = (*(f"{k}_to_{x}_weights" for k in ("input", "recurrent") for x in _GATES),
             "projection_weights", "projection_bias", *(f"{x}_gate_bias" for x in _GATES))


def _opt(n: Any, name: str) -> int:
    return n.t(name) if n.has(name) else -1


def _clip(n: Any, name: str) -> float:
    """A clip as TFLite takes it: Android reads a negative or NaN clip as no clipping, which
    TFLite's Prepare rejects."""
    v = float(n.scalar(name))
    return v if v > 0 else 0.0


def _state(n: Any, name: str) -> int:
    operand = n.operand(name)
    if operand.lifetime is not OperandLifeTime.SUBGRAPH_INPUT or n.ex.sg is not n.ex.model.main:
        raise Unmappable(f"TFLite's quantised LSTM updates its state in place (a variable tensor); "
                         f"the exporter maps {name} only as a model input")
    t = n.t(name)
    n.g.tensors[t].isVariable = True
    return t


def _quantized_lstm(n: Any) -> None:
    g = n.g
    norm = n.has("forget_layer_norm_weights")
    inter = [float(n.scalar(f"{gate}_intermediate_scale")) for gate in _GATES]
    if not norm and any(s != 2.0**-12 for s in inter[0 if n.has("input_to_input_weights") else 1:]):
        raise Unmappable("without layer normalisation TFLite's integer LSTM reads the gate "
                         "pre-activations as Q3.12 and ignores the intermediate scales, which "
                         f"are {inter} here, not 2^-12")
    for name in _CONSTANT:
        if n.has(name) and n.operand(name).lifetime not in CONSTANT:
            raise Unmappable(f"TFLite's integer LSTM folds the weights into precomputed biases when it "
                             f"is prepared (LiteRT crashes, SIGSEGV, on a variable one): {name} must be "
                             f"a constant")
    h, c = _state(n, "output_state_in"), _state(n, "cell_state_in")
    names = [*(f"input_to_{x}_weights" for x in _GATES), *(f"recurrent_to_{x}_weights" for x in _GATES),
             *(f"cell_to_{x}_weights" for x in ("input", "forget", "output")),
             *(f"{x}_gate_bias" for x in _GATES), "projection_weights", "projection_bias"]
    ins = [n.t("input"), *(_opt(n, x) for x in names), h, c,
           *(_opt(n, f"{x}_layer_norm_weights") for x in _GATES)]
    b, units = n.operand("cell_state_in").dimensions
    intermediates = [g.tensor([b, units], "INT16", ((s,), (0,), 0)) for s in inter]
    hidden = g.tensor([b, units], "INT8", ((float(n.scalar("hidden_state_scale")),),
                                            (int(n.scalar("hidden_state_zero_point")),), 0))
    out = n.out(2)
    g.op("LSTM", ins, [out], "LSTM", fusedActivationFunction=fb.ActivationFunctionType.TANH,
         cellClip=_clip(n, "cell_clip"), projClip=_clip(n, "projection_clip"),
         kernelType=fb.LSTMKernelType.FULL)
    g.operators[-1].intermediates = [*intermediates, hidden]
    _as_output(n, 0, h)
    _as_output(n, 1, c)


def _quantized_16bit_lstm(n: Any) -> None:
    g = n.g
    try:
        w, bias = basic_concatenate(n.value)
    except Unmappable:
        raise Unmappable("the exporter concatenates QUANTIZED_16BIT_LSTM's weights and biases into "
                         "TFLite's one matrix at export time: they must be constants") from None
    weights = g.tensor(w.shape, "UINT8", hal_quant(n.operand("input_to_input_weights")), w.astype(np.uint8))
    bias_t = g.tensor(bias.shape, "INT32", hal_quant(n.operand("input_gate_bias")), bias.astype(np.int32))
    b, out_size = n.operand("prev_output").dimensions
    in_size = n.operand("input").dimensions[1]
    concat = g.tensor([b, in_size + out_size], "UINT8", ((1 / 128,), (128,), 0))
    activ = g.tensor([b, 4 * out_size], "INT16", ((2.0**-12,), (0,), 0))
    g.op("LSTM", [n.t("input"), n.t("prev_output"), weights, bias_t, n.t("prev_cell_state")],
         [n.out(1), n.out(0), concat, activ], "LSTM",
         fusedActivationFunction=fb.ActivationFunctionType.TANH, kernelType=fb.LSTMKernelType.BASIC)


MAPPINGS = {Op.QUANTIZED_LSTM: _quantized_lstm, Op.QUANTIZED_16BIT_LSTM: _quantized_16bit_lstm}
