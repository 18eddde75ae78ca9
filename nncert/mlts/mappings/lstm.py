"""TFLite importer mappings of the LSTM family: LSTM (full kernel), UNIDIRECTIONAL_SEQUENCE_LSTM
and BIDIRECTIONAL_SEQUENCE_LSTM become the NNAPI operations of the same names, whose inputs
are in TFLite's order (NNAPI adds the scalar parameters, and BIDIRECTIONAL_SEQUENCE_LSTM's
eight layer-normalisation inputs, which TFLite's operator lacks).

State: TFLite keeps an LSTM's output and cell state in variable tensors (zero at the start,
overwritten by every invocation); ``mappings/state.py`` maps them as it does every recurrent
operator's: a variable of the main subgraph becomes streaming state (a state input of the
HAL model, initial value zeros, and the operation's state output as the matching state
output), a state tensor that is a model input or another operator's output is read as it
is (the LiteRT exporter's form). LSTM's state outputs are its outputs 1 and 2; the sequence
operations take their HAL 1.3 form with state outputs where the new state is wanted
(streamed, or read after the operator). Hybrid models (int8 weights of a float LSTM) get
their weights dequantised into float constants, as FULLY_CONNECTED does.

The quantised kernels are ``mappings/quantized_lstm.py``'s: the basic kernel (kernel_type
BASIC) becomes QUANTIZED_16BIT_LSTM, the fully integer one (int8 input) QUANTIZED_LSTM.

Declined: other quantised LSTMs, activations other than none, RELU, RELU6 and tanh.
"""

from __future__ import annotations

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.mappings import quantized_lstm, state
from nncert.mlts.tflite_graph import Node, Unmapped

_ACTIVATIONS = (0, 1, 3, 4)  # TFLite's codes of none, RELU, RELU6, tanh are NNAPI's


def _float_type(n: Node) -> T:
    t = n.g.spec(n.x(0)).type
    if t not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        raise Unmapped(f"a {t.name} LSTM (quantised LSTMs are QUANTIZED_LSTM's)")
    return t


def _input(n: Node, k: int, t: T) -> int:
    """Input ``k`` as an operand of type ``t`` (hybrid int8 weights dequantised), or an
    omitted input."""
    if not n.present(k):
        return n.g.no_value(t)
    from nncert.mlts.tflite_mappings import _float_weights

    return _float_weights(n, k, n.x(0))


def _states(n: Node, ks: range, t: T) -> list[int]:
    return [state.state_input(n, k, t)[0] for k in ks]


def _params(n: Node, t: T) -> list[int]:
    act = int(n.opt("fusedActivationFunction", 0))
    if act not in _ACTIVATIONS:
        raise Unmapped(f"LSTM activation {act}")
    scalar = T.FLOAT32 if t is T.TENSOR_FLOAT32 else T.FLOAT16
    return [n.g.i32(act), n.g.scalar(scalar, float(n.opt("cellClip", 0.0))),
            n.g.scalar(scalar, float(n.opt("projClip", 0.0)))]


def _cell(n: Node, first: int, t: T) -> list[int]:
    """The 17 weight and bias inputs of one cell starting at TFLite input ``first``."""
    return [_input(n, first + k, t) for k in range(17)]


def _layer_norm(n: Node, first: int, t: T) -> list[int]:
    return [_input(n, k, t) if n.present(k) else n.g.no_value(t) for k in range(first, first + 4)]


def _lstm(n: Node) -> None:
    if int(n.opt("kernelType", 0)) != 0:
        return quantized_lstm.basic_lstm(n)
    if n.g.spec(n.x(0)).type is T.TENSOR_QUANT8_ASYMM_SIGNED:
        return quantized_lstm.integer_lstm(n)
    t = _float_type(n)
    ins = [n.x(0), *_cell(n, 1, t), *_states(n, range(18, 20), t), *_params(n, t)]
    if any(n.present(k) for k in range(20, 24)):
        ins += _layer_norm(n, 20, t)
    spec = n.out_spec(0)
    outs = n.g.op(Op.LSTM, ins, [spec] * 4)
    n.bind(0, outs[3])
    state.updated(n, range(18, 20), outs[1:3])


def _unidirectional(n: Node) -> None:
    t = _float_type(n)
    ins = [n.x(0), *_cell(n, 1, t), *_states(n, range(18, 20), t), *_params(n, t),
           n.g.flag(bool(n.opt("timeMajor", False))), *_layer_norm(n, 20, t)]
    spec = n.out_spec(0)
    states = state.state_outputs(n, range(18, 20))
    outs = n.g.op(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [spec] * (3 if states else 1))
    n.bind(0, outs[0])
    if states:
        state.updated(n, range(18, 20), outs[1:])


def _bidirectional(n: Node) -> None:
    t = _float_type(n)
    merged = bool(n.opt("mergeOutputs", False))
    ins = [n.x(0), *_cell(n, 1, t), *_cell(n, 18, t), *_states(n, range(35, 39), t),
           n.x(39) if n.present(39) else n.g.no_value(t), *(_input(n, k, t) for k in range(40, 48)),
           *_params(n, t), n.g.flag(merged), n.g.flag(bool(n.opt("timeMajor", False))),
           *(n.g.no_value(t) for _ in range(8))]
    specs = [n.out_spec(0)] if merged else [n.out_spec(0), n.out_spec(1)]
    states = state.state_outputs(n, range(35, 39))
    outs = n.g.op(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, specs + [specs[0]] * (4 if states else 0))
    for k in range(len(specs)):
        n.bind(k, outs[k])
    if states:
        state.updated(n, range(35, 39), outs[len(specs):])


MAPPINGS = {"LSTM": _lstm, "UNIDIRECTIONAL_SEQUENCE_LSTM": _unidirectional,
            "BIDIRECTIONAL_SEQUENCE_LSTM": _bidirectional}
