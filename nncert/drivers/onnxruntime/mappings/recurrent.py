"""ONNX Runtime mappings of the recurrent family: RNN, UNIDIRECTIONAL_SEQUENCE_RNN,
BIDIRECTIONAL_SEQUENCE_RNN and SVDF.

Every cell runs time-major (sequences are Transposed in and out where the HAL layout is
batch-major). A cell whose activation is NONE or RELU is one ONNX ``RNN`` node (activation
``Affine`` with alpha 1, beta 0, or ``Relu``; W, R and B built from the HAL weights by
Unsqueeze / Concat, the recurrence bias zero); the backward cell of a
BIDIRECTIONAL_SEQUENCE_RNN is a ``direction="reverse"`` RNN of its own (the two cells may
differ in units and inputs). ONNX's RNN activations have no clamp to [-1, 1] or [0, 6], so
a RELU1 or RELU6 cell is unrolled: per step MatMul + MatMul + Add and a Clip (every cell is,
in an export with ``unroll_rnn``, for a runtime without ONNX RNN). Cross-linking
concatenates aux_input to the input and fw/bw_aux_weights to the weights along the input
dimension (the same sum); parallel linking feeds aux_input to the backward cell. A state
output is the cell's output at its last step (time T-1 forwards, 0 backwards).

SVDF is a composition: Gemm of the input and weights_feature gives the new activations;
the memory is the state (as [batch, filters, memory_size]) with its newest slot replaced by
them (Slice + Concat); ReduceSum of memory x weights_time over the memory, then over the
rank filters of each unit, plus the bias, then Relu / Clip; the state output is the memory
shifted one slot towards the oldest with a zero slot (Slice + Concat).
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.onnxruntime.export import Emit, Mapping, activate
from nncert.hal.types import OperationType as Op

_ONNX_ACT = {0: ("Affine", {"activation_alpha": [1.0], "activation_beta": [0.0]}), 1: ("Relu", {})}


def _time_major(e: Emit, name: str, major: bool) -> str:
    x = e.val(name)
    return x if major else e.node("Transpose", [x], perm=[1, 0, 2])


def _step(e: Emit, y: str, t: int) -> str:
    """Time step ``t`` of time-major ``y``: [batch, units]."""
    return e.node("Gather", [y, e.const(t)], axis=0)


def _cell(e: Emit, xs: str, time: int, units: int, w: str, r: str, b: str, h: str, act: int,
          reverse: bool = False) -> str:
    """One RNN cell over time-major ``xs`` (W [units, size], R [units, units], b, h [batch,
    units]): its time-major outputs [time, batch, units]."""
    if act in _ONNX_ACT and not e.g.unroll_rnn:
        name, attrs = _ONNX_ACT[act]
        axis0 = e.const([0])
        bias = e.node("Concat", [b, e.node("Mul", [b, e.const(0.0, np.float32)])], axis=0)
        y = e.node("RNN", [xs, e.node("Unsqueeze", [w, axis0]), e.node("Unsqueeze", [r, axis0]),
                           e.node("Unsqueeze", [bias, axis0]), "", e.node("Unsqueeze", [h, axis0])],
                   hidden_size=units,
                   direction="reverse" if reverse else "forward", activations=[name], **attrs)
        return e.node("Squeeze", [y, e.const([1])])
    wt, rt = e.node("Transpose", [w], perm=[1, 0]), e.node("Transpose", [r], perm=[1, 0])
    steps: list[str] = [""] * time
    for t in (range(time - 1, -1, -1) if reverse else range(time)):
        pre = e.node("Add", [e.node("Add", [e.node("MatMul", [_step(e, xs, t), wt]),
                                            e.node("MatMul", [h, rt])]), b])
        h = activate(e.g, pre, act)
        steps[t] = e.node("Unsqueeze", [h, e.const([0])])
    return e.node("Concat", steps, axis=0) if time > 1 else steps[0]


def _rnn_cell(e: Emit, prefix: str, xs: str, time: int, aux: str | None = None, reverse: bool = False) -> str:
    """The cell ``prefix`` of the operation over ``xs`` (with cross-linked ``aux``)."""
    w = e.val(f"{prefix}weights")
    if aux is not None:
        w = e.node("Concat", [w, e.val(f"{prefix}aux_weights")], axis=1)
        xs = e.node("Concat", [xs, aux], axis=2)
    return _cell(e, xs, time, e.dims(f"{prefix}weights")[0], w, e.val(f"{prefix}recurrent_weights"),
                 e.val(f"{prefix}bias"), e.val(f"{prefix}hidden_state"), int(e.value("act")), reverse)


def _emit_all(e: Emit, values: list[str]) -> None:
    """Output k from values[k], once every value is computed (emitting renames the node that
    made a value to the output's name)."""
    for k, v in enumerate(values):
        e.emit(v, k=k, activation=False)


def _rnn(e: Emit) -> None:
    xs = e.node("Unsqueeze", [e.val("input"), e.const([0])])
    h = _step(e, _rnn_cell(e, "", xs, 1), 0)
    _emit_all(e, [h, e.node("Identity", [h])])


def _batch_layout(e: Emit, y: str, major: bool) -> str:
    return y if major else e.node("Transpose", [y], perm=[1, 0, 2])


def _uni(e: Emit) -> None:
    major = bool(e.value("time_major"))
    time = e.dims("input")[0 if major else 1]
    y = _rnn_cell(e, "", _time_major(e, "input", major), time)
    outs = [_batch_layout(e, y, major)]
    if len(e.outs) == 2:
        outs.append(_step(e, y, time - 1))
    _emit_all(e, outs)


def _bidi(e: Emit) -> None:
    major, merge = bool(e.value("time_major")), bool(e.value("merge_outputs"))
    time = e.dims("input")[0 if major else 1]
    xs = _time_major(e, "input", major)
    aux = _time_major(e, "aux_input", major) if e.has("aux_input") else None
    cross = e.has("fw_aux_weights")
    fw = _rnn_cell(e, "fw_", xs, time, aux=aux if cross else None)
    bw_in = aux if aux is not None and not cross else xs
    bw = _rnn_cell(e, "bw_", bw_in, time, aux=aux if cross else None, reverse=True)
    if merge:
        outs = [_batch_layout(e, e.node("Concat", [fw, bw], axis=2), major)]
    else:
        outs = [_batch_layout(e, fw, major), _batch_layout(e, bw, major)]
    if len(e.outs) > len(outs):
        outs += [_step(e, fw, time - 1), _step(e, bw, 0)]
    _emit_all(e, outs)


def _svdf(e: Emit) -> None:
    batch = e.dims("input")[0]
    filters, memory = e.dims("weights_time")
    rank = int(e.value("rank"))
    units = filters // rank
    new = e.node("Unsqueeze", [e.node("Gemm", [e.val("input"), e.val("weights_feature")], transB=1),
                               e.const([2])])
    state = e.reshape(e.val("state_in"), (batch, filters, memory))
    axis2 = e.const([2])
    if memory > 1:
        older = e.node("Slice", [state, e.const([0]), e.const([memory - 1]), axis2])
        mem = e.node("Concat", [older, new], axis=2)
    else:
        mem = new
    per_filter = e.node("ReduceSum", [e.node("Mul", [mem, e.val("weights_time")]), axis2], keepdims=0)
    out = e.node("ReduceSum", [e.reshape(per_filter, (batch, units, rank)), axis2], keepdims=0)
    if e.has("bias"):
        out = e.node("Add", [out, e.val("bias")])
    out = activate(e.g, out, int(e.value("act")))
    zeros = e.const(np.zeros((batch, filters, 1)), np.float32)
    shifted = zeros if memory == 1 else \
        e.node("Concat", [e.node("Slice", [mem, e.const([1]), e.const([memory]), axis2]), zeros], axis=2)
    _emit_all(e, [e.reshape(shifted, (batch, filters * memory)), out])


MAPPINGS = {
    Op.RNN: Mapping(_rnn),
    Op.UNIDIRECTIONAL_SEQUENCE_RNN: Mapping(_uni),
    Op.BIDIRECTIONAL_SEQUENCE_RNN: Mapping(_bidi),
    Op.SVDF: Mapping(_svdf),
}
