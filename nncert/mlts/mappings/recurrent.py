"""TFLite importer mappings of the recurrent family: the builtins RNN,
UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN and SVDF, each the catalogue
operation of the same name.

State: TFLite keeps these operators' state in variable tensors (zero when the interpreter
is allocated, overwritten in place by each invocation). A variable state tensor of the main
subgraph becomes streaming state, as a resource variable does (``tflite_import``): a state
input of the HAL model (initial value zeros, ``ImportReport.state``) and the operation's
state output as the matching state output, so that a caller feeding each execution's state
back runs the file as LiteRT does, invocation after invocation. The sequence operations then
use their 1.3 form with state outputs. A state tensor that is not a variable (a model input
or another operator's output, the LiteRT exporter's form of a copy) is read as it is.

SVDF's variable holds the memory before the shift in TFLite and after it in NNAPI (TFLite
shifts, then pushes the new activation; NNAPI pushes, then shifts): both start at zero and
the outputs agree at every invocation, so the HAL state stands in for TFLite's (only the
state's own values differ, and the file cannot read them but through the operator). A
state tensor that is not a variable is TFLite's memory as it is, and is shifted into
NNAPI's (SLICE and PAD).

Hybrid operators (int8 weights, float input) are declined: NNAPI's forms are float only and
the quantised weights would be dequantised into float ones, a different computation from
TFLite's hybrid kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import I32, Node, Unmapped, tensor_dims, tensor_name


def _float(n: Node, k: int) -> int:
    x = n.x(k)
    if n.g.spec(x).type is not T.TENSOR_FLOAT32:
        raise Unmapped(f"{n.code} input {k} is {n.g.spec(x).type.name}: NNAPI's {n.code} is float only "
                       f"(hybrid int8 weights are not mapped)")
    return x


def _state(n: Node, k: int) -> tuple[int, Any]:
    """Input ``k`` (a state): (its HAL operand, the streaming variable it is, or None)."""
    tensor = n.tensor(k)
    if n.inputs[k] in n.sub.hal or not getattr(tensor, "isVariable", False):
        return _float(n, k), None
    imp = n.sub.imp
    if n.sub.index != imp.main_index:
        raise Unmapped(f"{n.code}'s state is a variable tensor outside the main subgraph")
    from nncert.mlts.tflite_import import _Variable  # here: the importer imports this module

    name = f"{n.code} state {tensor_name(tensor)}"
    var = imp.variables.setdefault(name, _Variable(name))
    if var.current is None:
        var.spec, var.dims = n.sub.spec_of(tensor), tensor_dims(tensor)
        if var.spec.type is not T.TENSOR_FLOAT32:
            raise Unmapped(f"{n.code}'s state variable is {var.spec.type.name}, not float32")
        var.state_in = var.current = n.g.operand(var.spec, var.dims)
    return var.current, var


def _updated(variables: list[Any], outs: list[int]) -> None:
    for var, out in zip(variables, outs, strict=True):
        if var is not None:
            var.current = out


def _cell(n: Node, first: int) -> list[int]:
    return [_float(n, first + i) for i in range(3)]


def _rnn(n: Node) -> None:
    h, var = _state(n, 4)
    spec = n.out_spec(0)
    state, out = n.g.op(Op.RNN, [_float(n, 0), *_cell(n, 1), h, n.act()], [spec, spec])
    n.bind(0, out)
    _updated([var], [state])


def _uni(n: Node) -> None:
    h, var = _state(n, 4)
    spec = n.out_spec(0)
    ins = [_float(n, 0), *_cell(n, 1), h, n.act(), n.g.i32(int(bool(n.opt("timeMajor", False))))]
    outs = n.g.op(Op.UNIDIRECTIONAL_SEQUENCE_RNN, ins, [spec] * (2 if var is not None else 1))
    n.bind(0, outs[0])
    if var is not None:
        _updated([var], [outs[1]])


def _bidi(n: Node) -> None:
    merge = bool(n.opt("mergeOutputs", False))
    fw_h, fw_var = _state(n, 4)
    bw_h, bw_var = _state(n, 8)
    g = n.g
    aux = []
    for k in (9, 10, 11):
        aux.append(_float(n, k) if n.present(k) else g.no_value(T.TENSOR_FLOAT32))
    ins = [_float(n, 0), *_cell(n, 1), fw_h, *_cell(n, 5), bw_h, *aux, n.act(),
           g.flag(bool(n.opt("timeMajor", False))), g.flag(merge)]
    spec = n.out_spec(0)
    count = 1 if merge else 2
    states = fw_var is not None or bw_var is not None
    outs = g.op(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [spec] * (count + (2 if states else 0)))
    for k in range(count):
        n.bind(k, outs[k])
    if states:
        _updated([fw_var, bw_var], outs[count:])


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
    state, var = _state(n, 4)
    if var is None:
        state = _tflite_svdf_state(n, state)
    spec = n.out_spec(0)
    bias = _float(n, 3) if n.present(3) else n.g.no_value(T.TENSOR_FLOAT32)
    ins = [_float(n, 0), _float(n, 1), _float(n, 2), bias, state, n.g.i32(int(n.opt("rank", 1))), n.act()]
    state_out, out = n.g.op(Op.SVDF, ins, [n.g.spec(state), spec])
    n.bind(0, out)
    _updated([var], [state_out])


MAPPINGS: dict[str, Callable[[Node], None]] = {
    "RNN": _rnn,
    "UNIDIRECTIONAL_SEQUENCE_RNN": _uni,
    "BIDIRECTIONAL_SEQUENCE_RNN": _bidi,
    "SVDF": _svdf,
}
