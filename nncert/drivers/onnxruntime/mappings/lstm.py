"""ONNX Runtime mappings of LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM
(nncert/ops/lstm.py): every cell unrolled over its time steps, one gate at a time.

ONNX's own LSTM operator is not used: it has no projection and no layer normalisation, and
its ``clip`` bounds the gates' pre-activations where HAL's cell_clip bounds the cell state,
so it is a different operation wherever those options are on; one composition serves
every case instead. Per step and gate: MatMul of the input and of the output state with the
transposed weights (and of the auxiliary input, cross-linked), Add; the peephole term a Mul
by the old cell state (the new one for the output gate); then either Add of the bias or,
with layer normalisation, ONNX's LayerNormalization over the units (epsilon 1e-8, the
layer-norm weights its scale, the gate bias its bias: the same formula); Sigmoid. CIFG's
input gate is 1 - f. The cell gate and the output use the activation parameter (Relu,
Clip to [0, 6], Tanh, Sigmoid or none); cell_clip and proj_clip are Clips when non-zero;
the projection a MatMul and Add. Sequences run time-major (Transposed in and out for
batch-major layouts); the backward cell of BIDIRECTIONAL_SEQUENCE_LSTM runs from the last
step to the first, each output at its step's place, on the auxiliary input with parallel
linking. A state output is the last step's state. LSTM's scratch buffer, whose content is
implementation-defined, is zeros of its shape.

Every dimension is known at export, so sequences are unrolled; nothing here is declined
(float16 is widened to float32 by the driver before export).
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.onnxruntime.export import Emit, Mapping
from nncert.hal.types import OperationType as Op
from nncert.ops.lstm import GATES, LAYER_NORM_EPSILON


class _Cell:
    """The ONNX names of one cell's weights (None where absent), 2-D ones transposed so that
    a row vector times them is the gate's contribution."""

    def __init__(self, e: Emit, p: str, aux: bool) -> None:
        def get(name: str, perm: tuple[int, ...] | None = None) -> str | None:
            return e.real(name, perm) if e.has(name) else None

        t = (1, 0)
        self.x = {g: get(f"{p}input_to_{g}_weights", t) for g in GATES}
        self.h = {g: get(f"{p}recurrent_to_{g}_weights", t) for g in GATES}
        self.c = {g: get(f"{p}cell_to_{g}_weights") for g in ("input", "forget", "output")}
        self.b = {"input": get(f"{p}input_gate_bias"), "forget": get(f"{p}forget_gate_bias"),
                  "cell": get(f"{p}cell_bias"), "output": get(f"{p}output_gate_bias")}
        self.ln = {g: get(f"{p}{g}_layer_norm_weights") for g in GATES}
        self.aux = {g: get(f"{p}aux_input_to_{g}_weights", t) if aux else None for g in GATES}
        self.proj = get(f"{p}projection_weights", t)
        self.proj_bias = get(f"{p}projection_bias")
        self.n_cell = e.dims(f"{p}input_to_output_weights")[0]

    @property
    def cifg(self) -> bool:
        return self.x["input"] is None


def _act(e: Emit, v: str, act: int) -> str:
    """The activation parameter (0 none, 1 RELU, 3 RELU6, 4 tanh, 6 sigmoid)."""
    if act == 0:
        return v
    if act == 1:
        return e.node("Relu", [v])
    if act == 3:
        return e.node("Clip", [v, e.const(0.0, np.float32), e.const(6.0, np.float32)])
    return e.node("Tanh" if act == 4 else "Sigmoid", [v])


def _clip(e: Emit, v: str, bound: float) -> str:
    if bound <= 0:
        return v
    return e.node("Clip", [v, e.const(-bound, np.float32), e.const(bound, np.float32)])


class _Params:
    def __init__(self, e: Emit) -> None:
        self.act = int(e.value("activation"))
        self.cell_clip = float(e.value("cell_clip"))
        self.proj_clip = float(e.value("proj_clip"))


def _step(e: Emit, cell: _Cell, prm: _Params, x: str, h: str, c: str, aux: str | None) -> tuple[str, str]:
    """One time step: x [batch, n_input], h [batch, n_output], c [batch, n_cell] -> (h', C')."""

    def gate(g: str, state: str | None, fn: str | None) -> str:
        z = e.node("Add", [e.node("MatMul", [x, cell.x[g]]), e.node("MatMul", [h, cell.h[g]])])
        if aux is not None and cell.aux[g] is not None:
            z = e.node("Add", [z, e.node("MatMul", [aux, cell.aux[g]])])
        if state is not None and cell.c.get(g) is not None:
            z = e.node("Add", [z, e.node("Mul", [state, cell.c[g]])])
        if cell.ln[g] is not None:
            z = e.node("LayerNormalization", [z, cell.ln[g], cell.b[g]], axis=-1,
                       epsilon=LAYER_NORM_EPSILON)
        else:
            z = e.node("Add", [z, cell.b[g]])
        return e.node(fn, [z]) if fn else z

    f = gate("forget", c, "Sigmoid")
    i = e.node("Sub", [e.const(1.0, np.float32), f]) if cell.cifg else gate("input", c, "Sigmoid")
    g = _act(e, gate("cell", None, None), prm.act)
    c_new = _clip(e, e.node("Add", [e.node("Mul", [f, c]), e.node("Mul", [i, g])]), prm.cell_clip)
    o = gate("output", c_new, "Sigmoid")
    m = e.node("Mul", [o, _act(e, c_new, prm.act)])
    if cell.proj is None:
        return m, c_new
    out = e.node("MatMul", [m, cell.proj])
    if cell.proj_bias is not None:
        out = e.node("Add", [out, cell.proj_bias])
    return _clip(e, out, prm.proj_clip), c_new


def _at(e: Emit, seq: str, t: int) -> str:
    """Step ``t`` of time-major ``seq``: [batch, size]."""
    return e.node("Gather", [seq, e.const(t)], axis=0)


def _sequence(e: Emit, cell: _Cell, prm: _Params, xs: str, time: int, h: str, c: str,
              aux: str | None = None, reverse: bool = False) -> tuple[str, str, str]:
    """A cell over time-major ``xs``: (outputs [time, batch, n_output], last h, last C)."""
    steps = [""] * time
    for t in (range(time - 1, -1, -1) if reverse else range(time)):
        h, c = _step(e, cell, prm, _at(e, xs, t), h, c, None if aux is None else _at(e, aux, t))
        steps[t] = e.node("Unsqueeze", [h, e.const([0])])
    out = e.node("Concat", steps, axis=0) if time > 1 else steps[0]
    return out, h, c


def _layout(e: Emit, seq: str, major: bool) -> str:
    """Time-major <-> batch-major (its own inverse)."""
    return seq if major else e.node("Transpose", [seq], perm=[1, 0, 2])


def _emit_all(e: Emit, values: list[str]) -> None:
    """Output k from values[k], once all are computed (emitting renames the node that made a
    value); a value given twice is bound through an Identity the second time."""
    seen: set[str] = set()
    bound = []
    for v in values:
        bound.append(e.node("Identity", [v]) if v in seen else v)
        seen.add(v)
    for k, v in enumerate(bound):
        e.emit(v, k=k, activation=False)


def _lstm(e: Emit) -> None:
    cell = _Cell(e, "", aux=False)
    h, c = _step(e, cell, _Params(e), e.val("input"), e.val("output_state_in"), e.val("cell_state_in"), None)
    batch = e.dims("input")[0]
    scratch = e.const(np.zeros((batch, cell.n_cell * (3 if cell.cifg else 4))), np.float32)
    _emit_all(e, [scratch, h, c, h])


def _uni(e: Emit) -> None:
    major = bool(e.value("time_major"))
    time = e.dims("input")[0 if major else 1]
    out, h, c = _sequence(e, _Cell(e, "", aux=False), _Params(e), _layout(e, e.val("input"), major), time,
                          e.val("output_state_in"), e.val("cell_state_in"))
    values = [_layout(e, out, major)]
    if len(e.outs) == 3:
        values += [h, c]
    _emit_all(e, values)


def _bidi(e: Emit) -> None:
    major, merge = bool(e.value("time_major")), bool(e.value("merge_outputs"))
    time = e.dims("input")[0 if major else 1]
    prm = _Params(e)
    xs = _layout(e, e.val("input"), major)
    aux = _layout(e, e.val("aux_input"), major) if e.has("aux_input") else None
    cross = aux is not None and e.has("fw_aux_input_to_forget_weights")
    fw_cell, bw_cell = _Cell(e, "fw_", cross), _Cell(e, "bw_", cross)
    fw, fw_h, fw_c = _sequence(e, fw_cell, prm, xs, time, e.val("fw_activation_state_in"),
                               e.val("fw_cell_state_in"), aux if cross else None)
    bw_xs = aux if aux is not None and not cross else xs  # parallel linking: aux feeds the backward cell
    bw, bw_h, bw_c = _sequence(e, bw_cell, prm, bw_xs, time, e.val("bw_activation_state_in"),
                               e.val("bw_cell_state_in"), aux if cross else None, reverse=True)
    if merge:
        values = [_layout(e, e.node("Concat", [fw, bw], axis=2), major)]
    else:
        values = [_layout(e, fw, major), _layout(e, bw, major)]
    if len(e.outs) > len(values):
        values += [fw_h, fw_c, bw_h, bw_c]
    _emit_all(e, values)


MAPPINGS = {
    Op.LSTM: Mapping(_lstm),
    Op.UNIDIRECTIONAL_SEQUENCE_LSTM: Mapping(_uni),
    Op.BIDIRECTIONAL_SEQUENCE_LSTM: Mapping(_bidi),
}
