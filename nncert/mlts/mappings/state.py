"""TFLite importer: the state of recurrent operators (RNNs, SVDF, the LSTMs, the integer
LSTM), one way for all of them. This module maps no key of its own.

TFLite keeps these operators' state in variable tensors: reset when the interpreter is
allocated (to the zero point for int8, to 0 otherwise), read by the operator and overwritten
in place by each invocation. A variable state tensor of the main subgraph that nothing
before the operator writes (the converter's form) becomes streaming state, as a resource
variable does (``tflite_import``): a state input of the HAL model, with TFLite's reset value
as its initial value (``ImportReport.state``), and the operation's state output as the
matching state output. A caller that feeds each execution's state outputs back (MLTS's
streaming models, ``mlts/run.py``) runs the file as LiteRT does, invocation after
invocation. A state tensor that is a model input or another operator's output (the LiteRT
exporter's form: the caller writes the variable before each invocation) is read as it is.

Either way, once the operator has run the variable holds the new state: later readers and
model outputs of the variable tensor see the state output (``updated``), and the sequence
operations use their HAL 1.3 form with state outputs where someone reads it
(``state_outputs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.mlts.tflite_graph import Node, Unmapped, tensor_dims, tensor_name

MAPPINGS: dict = {}


def _variable(n: Node, k: int) -> bool:
    return n.present(k) and bool(getattr(n.tensor(k), "isVariable", False))


def _name(n: Node, k: int) -> str:
    return f"variable tensor {n.inputs[k]} {tensor_name(n.tensor(k))}"


def streamed(n: Node, k: int) -> Any:
    """The streaming variable (``tflite_import._Variable``) input ``k`` is, or None."""
    imp = n.sub.imp
    if not _variable(n, k) or n.sub.index != imp.main_index:
        return None
    return imp.variables.get(_name(n, k))


def state_input(n: Node, k: int, type_: T) -> tuple[int, Any]:
    """State input ``k`` of type ``type_``: (its HAL operand, the streaming variable it is,
    or None where it is read as it is)."""
    var = streamed(n, k)
    if var is None and _variable(n, k) and n.inputs[k] not in n.sub.hal:
        imp = n.sub.imp
        if n.sub.index != imp.main_index:
            raise Unmapped(f"{n.code}'s state is a variable tensor outside the main subgraph")
        spec = n.sub.spec_of(n.tensor(k))
        if spec.type is not type_:
            raise Unmapped(f"{n.code}'s state variable (input {k}) is {spec.type.name}, not {type_.name}")
        from nncert.mlts.tflite_import import _Variable  # here: the importer imports this module

        name = _name(n, k)
        var = imp.variables[name] = _Variable(name, spec, tensor_dims(n.tensor(k)))
        if type_ is T.TENSOR_QUANT8_ASYMM_SIGNED:
            # TFLite resets an int8 variable to its zero point, any other to 0 (the default).
            imp.initial[name] = np.full(var.dims, spec.zero_point, np.int8)
        var.state_in = var.current = n.g.operand(spec, var.dims)
        n.sub.hal[n.inputs[k]] = var.current
    x = var.current if var is not None else n.x(k)
    have = n.g.spec(x).type
    if have is not type_:
        raise Unmapped(f"{n.code}'s state input {k} is {have.name}, not {type_.name}")
    return x, var


def read_after(n: Node, ks: Sequence[int]) -> bool:
    """Whether a model output or a later operator reads a variable at inputs ``ks`` (which
    the operator overwrites)."""
    ts = {n.inputs[k] for k in ks if _variable(n, k)}
    read = {int(i) for i in (n.sub.sg.outputs if n.sub.sg.outputs is not None else [])}
    ops = list(n.sub.sg.operators or [])
    later = next((pos + 1 for pos, op in enumerate(ops) if op is n.op), len(ops))
    for op in ops[later:]:
        read.update(int(i) for i in (op.inputs if op.inputs is not None else []))
    return bool(ts & read)


def state_outputs(n: Node, ks: Sequence[int]) -> bool:
    """Whether the operator's new state at inputs ``ks`` is wanted: a streamed state, or a
    variable read after the operator. The sequence operations then need their HAL 1.3 form
    with state outputs."""
    return any(streamed(n, k) is not None for k in ks) or read_after(n, ks)


def updated(n: Node, ks: Sequence[int], outs: Sequence[int]) -> None:
    """The variables at inputs ``ks`` hold outputs ``outs`` once the operator has run: the
    streaming variables' state outputs, and what later readers (and model outputs) see."""
    for k, out in zip(ks, outs, strict=True):
        if not _variable(n, k):
            continue
        var = streamed(n, k)
        if var is not None:
            var.current = out
        n.sub.hal[n.inputs[k]] = out
