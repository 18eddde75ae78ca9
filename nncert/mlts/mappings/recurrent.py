"""TFLite importer mappings of the recurrent family: the builtins RNN,
UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN and SVDF, each the catalogue
operation of the same name.

State: TFLite keeps these operators' state in variable tensors; ``mappings/state.py``
maps them as it does every recurrent operator's (a variable of the main subgraph becomes
streaming state: a state input of the HAL model, initial value zeros, and the operation's
state output as the matching state output; a state tensor that is a model input or another
operator's output is read as it is). The sequence operations use their 1.3 form with state
outputs where the new state is wanted.

SVDF's variable holds the memory before the shift in TFLite and after it in NNAPI (TFLite
shifts, then pushes the new activation; NNAPI pushes, then shifts): both start at zero and
the outputs agree at every invocation, so the HAL state stands in for TFLite's (only the
state's own values differ). A
state tensor that is not streamed is TFLite's memory as it is, and is shifted into NNAPI's
(SLICE and PAD). A model that reads the variable after the operator is declined (it would
see NNAPI's memory, not TFLite's).

Hybrid operators (int8 weights, float input) are declined: NNAPI's forms are float only and
the quantised weights would be dequantised into float ones, a different computation from
TFLite's hybrid kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.mappings import state
from nncert.mlts.tflite_graph import I32, Node, Unmapped


def _float(n: Node, k: int) -> int:
    x = n.x(k)
    if n.g.spec(x).type is not T.TENSOR_FLOAT32:
        raise Unmapped(f"{n.code} input {k} is {n.g.spec(x).type.name}: NNAPI's {n.code} is float only "
                       f"(hybrid int8 weights are not mapped)")
    return x


def _state(n: Node, k: int) -> tuple[int, Any]:
    return state.state_input(n, k, T.TENSOR_FLOAT32)


def _cell(n: Node, first: int) -> list[int]:
    return [_float(n, first + i) for i in range(3)]


def _rnn(n: Node) -> None:
    h, _ = _state(n, 4)
    spec = n.out_spec(0)
    new, out = n.g.op(Op.RNN, [_float(n, 0), *_cell(n, 1), h, n.act()], [spec, spec])
    n.bind(0, out)
    state.updated(n, [4], [new])


def _uni(n: Node) -> None:
    h, _ = _state(n, 4)
    spec = n.out_spec(0)
    ins = [_float(n, 0), *_cell(n, 1), h, n.act(), n.g.i32(int(bool(n.opt("timeMajor", False))))]
    states = state.state_outputs(n, [4])
    outs = n.g.op(Op.UNIDIRECTIONAL_SEQUENCE_RNN, ins, [spec] * (2 if states else 1))
    n.bind(0, outs[0])
    if states:
        state.updated(n, [4], outs[1:])


def _bidi(n: Node) -> None:
    merge = bool(n.opt("mergeOutputs", False))
    fw_h, _ = _state(n, 4)
    bw_h, _ = _state(n, 8)
    g = n.g
    aux = []
    for k in (9, 10, 11):
        aux.append(_float(n, k) if n.present(k) else g.no_value(T.TENSOR_FLOAT32))
    ins = [_float(n, 0), *_cell(n, 1), fw_h, *_cell(n, 5), bw_h, *aux, n.act(),
           g.flag(bool(n.opt("timeMajor", False))), g.flag(merge)]
    spec = n.out_spec(0)
    count = 1 if merge else 2
    states = state.state_outputs(n, [4, 8])
    outs = g.op(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [spec] * (count + (2 if states else 0)))
    for k in range(count):
        n.bind(k, outs[k])
    if states:
        state.updated(n, [4, 8], outs[count:])


def _tflite_svdf_state(n: Node, state: int) -> int:
    """NNAPI's state for a TFLite SVDF state tensor that is not a variable (read as it is):
    TFLite's memory is its slots 1..memory_size-1 before the new activation, NNAPI's its
    slots 0..memory_size-2, so the state is shifted one slot towards the oldest (SLICE, PAD)."""
    g = n.g
    filters, memory = g.dims(n.x(2))
    batch = g.dims(state)[0]
    if memory == 1:
        return state
    spec = g.spec(state)
    per_filter = g.op(Op.RESHAPE, [state, g.const(I32, [batch, filters, memory])], [spec])[0]
    older = g.op(Op.SLICE, [per_filter, g.const(I32, [0, 0, 1]), g.const(I32, [batch, filters, memory - 1])],
                 [spec])[0]
    padded = g.op(Op.PAD, [older, g.const(I32, [[0, 0], [0, 0], [0, 1]])], [spec])[0]
    return g.op(Op.RESHAPE, [padded, g.const(I32, [batch, filters * memory])], [spec])[0]


def _svdf(n: Node) -> None:
    memory, var = _state(n, 4)
    if state.read_after(n, [4]):
        raise Unmapped("the model reads SVDF's variable state after the operator: NNAPI's state is "
                       "TFLite's memory shifted by one slot")
    if var is None:
        memory = _tflite_svdf_state(n, memory)
    spec = n.out_spec(0)
    bias = _float(n, 3) if n.present(3) else n.g.no_value(T.TENSOR_FLOAT32)
    ins = [_float(n, 0), _float(n, 1), _float(n, 2), bias, memory, n.g.i32(int(n.opt("rank", 1))), n.act()]
    new, out = n.g.op(Op.SVDF, ins, [n.g.spec(memory), spec])
    n.bind(0, out)
    if var is not None:
        state.updated(n, [4], [new])


MAPPINGS: dict[str, Callable[[Node], None]] = {
    "RNN": _rnn,
    "UNIDIRECTIONAL_SEQUENCE_RNN": _uni,
    "BIDIRECTIONAL_SEQUENCE_RNN": _bidi,
    "SVDF": _svdf,
}
