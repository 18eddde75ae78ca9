"""TFLite importer mappings of TFLite's quantised LSTM kernels (the LSTM builtin's mapping,
``mappings/lstm.py``, hands them over; this module maps no key of its own).

- The fully integer LSTM (int8 input, int16 cell state, kernel FULL, five intermediate
  tensors) becomes QUANTIZED_LSTM: TFLite's 24 inputs are its first 24; the cell and
  projection clips come from the options; the four gate intermediate tensors give the
  intermediate scales when the cell has layer normalisation (without it TFLite reads the
  gate pre-activations as Q3.12 whatever they say, so the scales are 2^-12), the fifth the
  hidden state's scale and zero point. Weights must be constants with one scale (int8 with
  zero point 0: QUANT8_SYMM; int16: QUANT16_SYMM). The 12-intermediate form (TFLite's 8x8_8
  kernel, another arithmetic) is declined.
- The basic kernel (kernel_type BASIC: input, previous output, one weight matrix, one bias,
  previous cell state; output, cell state and two scratch tensors) becomes
  QUANTIZED_16BIT_LSTM, its matrix split back into the eight HAL matrices
  (``nncert.ops.quantized_lstm.basic_split``, the inverse of what the LiteRT exporter does).
  Its fixed-point arithmetic takes the NNAPI operation's fixed quantisation (1/128 and 128,
  2^-11); other declared parameters are declined. A model that reads the scratch tensors is
  declined (NNAPI's operation has no such outputs).

State: the integer LSTM's state tensors are mapped by ``mappings/state.py``, as every
recurrent operator's: a variable tensor of the main subgraph (the converter's form) becomes
streaming state, a state input of the HAL model whose initial value is what TFLite resets
the variable to (the zero point for int8, 0 for int16) and the operation's state output as
its state output; a state tensor that is a model input or another operator's output is used
as it is (the LiteRT exporter's form). The outputs keep the file's quantisation: TFLite copies
the output state's stored values into the output, as NNAPI's QUANTIZED_LSTM does whatever
its outputs declare.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.mappings import state
from nncert.mlts.tflite_graph import Node, Spec, Unmapped
from nncert.ops.quantized_lstm import _GATES, basic_split

Q8SYMM, Q16SYMM, I32 = T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_INT32

#: The integer LSTM's inputs 1..17 and 20..23 (TFLite's order is NNAPI's) and their types.
_WEIGHTS = (*((k, f"input_to_{g}_weights", Q8SYMM) for k, g in enumerate(_GATES, 1)),
            *((k, f"recurrent_to_{g}_weights", Q8SYMM) for k, g in enumerate(_GATES, 5)),
            *((k, f"cell_to_{g}_weights", Q16SYMM) for k, g in enumerate(("input", "forget", "output"), 9)),
            *((k, f"{g}_gate_bias", I32) for k, g in enumerate(_GATES, 12)),
            (16, "projection_weights", Q8SYMM), (17, "projection_bias", I32))
_NORMS = tuple((k, f"{g}_layer_norm_weights", Q16SYMM) for k, g in enumerate(_GATES, 20))


def _quant(tensor: Any) -> tuple[list[float], list[int]]:
    q = tensor.quantization
    scales = [float(s) for s in (q.scale if q is not None and q.scale is not None else [])]
    zps = [int(z) for z in (q.zeroPoint if q is not None and q.zeroPoint is not None else [])]
    return scales, zps


def _constant(n: Node, k: int, name: str, type_: T) -> int:
    """Input ``k`` as a constant of ``type_`` (its file quantisation), or an omitted input."""
    if not n.present(k):
        return n.g.no_value(type_)
    value = n.value(k)
    if value is None:
        raise Unmapped(f"the integer LSTM's {name} (input {k}) must be a constant: TFLite folds it "
                       f"into precomputed biases when the model is prepared")
    scales, zps = _quant(n.tensor(k))
    if len(scales) > 1:
        raise Unmapped(f"the integer LSTM's {name} is quantised per channel ({len(scales)} scales); "
                       f"NNAPI's QUANTIZED_LSTM takes one scale")
    if type_ is not I32 and any(zps):
        raise Unmapped(f"the integer LSTM's {name} has zero point {zps[0]}; NNAPI's QUANTIZED_LSTM "
                       f"takes symmetric weights")
    want = np.int32 if type_ is I32 else np.int8 if type_ is Q8SYMM else np.int16
    if np.asarray(value).dtype != want:
        raise Unmapped(f"the integer LSTM's {name} is {np.asarray(value).dtype}, not {np.dtype(want)}")
    return n.g.const(Spec(type_, scales[0] if scales else (0.0 if type_ is I32 else 1.0), 0), value)


def integer_lstm(n: Node) -> None:
    """TFLite's fully integer (8x8_16) LSTM as QUANTIZED_LSTM."""
    inter = [int(i) for i in (n.op.intermediates if n.op.intermediates is not None else [])]
    if len(inter) != 5:
        raise Unmapped(f"an integer LSTM with {len(inter)} intermediate tensors (QUANTIZED_LSTM is "
                       f"TFLite's 8x8_16 kernel, which has 5)")
    x = n.x(0)
    norm = n.present(21)
    scales = []
    for k, i in enumerate(inter):
        s, z = _quant(n.sub.tensor(i))
        if len(s) != 1:
            raise Unmapped(f"the integer LSTM's intermediate tensor {k} has {len(s)} scales, not 1")
        scales.append((s[0], z[0] if z else 0))
    gate_scales = [s for s, _ in scales[:4]] if norm else [2.0**-12] * 4
    h, _ = state.state_input(n, 18, T.TENSOR_QUANT8_ASYMM_SIGNED)
    c, _ = state.state_input(n, 19, Q16SYMM)
    g = n.g
    f32 = T.FLOAT32
    ins = [x, *(_constant(n, k, name, t) for k, name, t in _WEIGHTS), h, c,
           *(_constant(n, k, name, t) for k, name, t in _NORMS),
           g.scalar(f32, float(np.float32(n.opt("cellClip", 0.0)))),
           g.scalar(f32, float(np.float32(n.opt("projClip", 0.0)))),
           *(g.scalar(f32, float(np.float32(s))) for s in gate_scales),
           g.i32(scales[4][1]), g.scalar(f32, float(np.float32(scales[4][0])))]
    h_out, c_out, out = g.op(Op.QUANTIZED_LSTM, ins, [g.spec(h), g.spec(c), n.out_spec(0)], reinterpret=True)
    n.bind(0, out)
    state.updated(n, (18, 19), (h_out, c_out))


def basic_lstm(n: Node) -> None:
    """TFLite's basic quantised LSTM kernel as QUANTIZED_16BIT_LSTM."""
    if len(n.inputs) != 5 or len(n.outputs) != 4:
        raise Unmapped(f"a basic LSTM kernel with {len(n.inputs)} inputs and {len(n.outputs)} outputs "
                       f"(it has 5 and 4)")
    x, prev_out, prev_cell = n.x(0), n.x(1), n.x(4)
    u8 = (T.TENSOR_QUANT8_ASYMM, 1 / 128, 128)
    for k, idx, want in ((0, x, u8), (1, prev_out, u8), (4, prev_cell, (Q16SYMM, 2.0**-11, 0))):
        have = n.g.spec(idx)
        if (have.type, np.float32(have.scale), have.zero_point) != (want[0], np.float32(want[1]), want[2]):
            raise Unmapped(f"the basic LSTM kernel's input {k} is {have.type.name} with scale {have.scale:g} "
                           f"and zero point {have.zero_point}; its fixed-point arithmetic is "
                           f"{want[0].name} ({want[1]:g}, {want[2]})")
    w, bias = n.value(2), n.value(3)
    if w is None or bias is None:
        raise Unmapped("the basic LSTM kernel's weights and bias must be constants (NNAPI's "
                       "QUANTIZED_16BIT_LSTM takes them as eight matrices and four vectors)")
    out_size = n.g.dims(prev_out)[-1]
    in_size = n.g.dims(x)[-1]
    if np.shape(w) != (4 * out_size, in_size + out_size) or np.shape(bias) != (4 * out_size,):
        raise Unmapped(f"the basic LSTM kernel's weights {list(np.shape(w))} and bias "
                       f"{list(np.shape(bias))} do not fit input size {in_size} and output size "
                       f"{out_size}")
    w_spec, b_spec = n.sub.spec_of(n.tensor(2)), n.sub.spec_of(n.tensor(3))
    if w_spec.type is not T.TENSOR_QUANT8_ASYMM:
        raise Unmapped(f"the basic LSTM kernel's weights are {w_spec.type.name}, not uint8")
    parts = basic_split(np.asarray(w), np.asarray(bias), out_size)
    names = [f"{kind}_to_{gate}_weights" for kind in ("input", "recurrent") for gate in _GATES]
    ins = [x, *(n.g.const(w_spec, parts[name]) for name in names),
           *(n.g.const(b_spec, parts[f"{gate}_gate_bias"]) for gate in _GATES), prev_cell, prev_out]
    cell, out = n.g.op(Op.QUANTIZED_16BIT_LSTM, ins, [n.out_spec(1), n.out_spec(0)], reinterpret=True)
    n.bind(0, out)
    n.bind(1, cell)
    _scratch(n, [2, 3])


def _scratch(n: Node, ks: list[int]) -> None:
    """Outputs ``ks`` are the kernel's scratch tensors, which NNAPI's operation does not
    give: declined if anything reads them; else held by an omitted operand (no value), so
    that nothing can read a wrong one."""
    read = {int(t) for t in (n.sub.sg.outputs if n.sub.sg.outputs is not None else [])}
    for op in n.sub.sg.operators or []:
        read.update(int(t) for t in (op.inputs if op.inputs is not None else []))
    for k in ks:
        if k < len(n.outputs) and n.outputs[k] >= 0:
            if n.outputs[k] in read:
                raise Unmapped(f"the model reads the basic LSTM kernel's scratch output {k}, which "
                               f"NNAPI's QUANTIZED_16BIT_LSTM does not give")
            n.sub.hal[n.outputs[k]] = n.g.no_value(n.out_spec(k).type)


MAPPINGS: dict = {}
