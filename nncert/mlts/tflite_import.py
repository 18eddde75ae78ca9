"""TFLite flatbuffer -> HAL model: the inverse of the LiteRT exporter, so that MLTS can run
real ``.tflite`` models on any driver.

``import_tflite`` reads the flatbuffer with the schema that ships with ai-edge-litert and
maps each builtin operator to catalogue operations (``tflite_mappings.MAPPINGS``, one function
per TFLite operator, on the graph under construction of ``tflite_graph``), computing every
operand's shape with the catalogue's shape rules. Layout stays NHWC. What the mapping does
once for all operators:

- **Types and quantisation.** FLOAT32 / FLOAT16 / INT32 / BOOL tensors become the HAL
  tensor types; UINT8 and INT8 become TENSOR_QUANT8_ASYMM and TENSOR_QUANT8_ASYMM_SIGNED
  with their scale and zero point (an unquantised one gets scale 1, zero point 0), an INT8
  filter with one scale per output channel TENSOR_QUANT8_SYMM_PER_CHANNEL (``channel_dim`` =
  the TFLite quantized dimension), INT16 / UINT16 TENSOR_QUANT16_SYMM / _ASYMM. An INT32
  bias gets the scale NNAPI implies (input scale x filter scale, 0 with a per-channel
  filter). INT64 constants are narrowed to INT32 where the values fit.
- **Constants.** Buffers become model constants; a rank-0 tensor becomes shape [1] (NNAPI
  has no scalar tensors and broadcasts [1] the same way). DEQUANTIZE of a constant (float16
  or quantised weights) and DENSIFY of a sparse constant are folded into float / dense
  constants, as is any operator whose inputs are all constant (with the reference kernels).
- **Padding.** SAME / VALID become NNAPI's implicit padding schemes (the same arithmetic);
  TRANSPOSE_CONV gets explicit padding (its output shape is given).
- **Fused activations** NONE / RELU / RELU_N1_TO_1 / RELU6 have the same codes in NNAPI;
  operators without NNAPI's activation input get an explicit RELU* after them.
- **Quantisation rules NNAPI adds.** Where NNAPI requires an output's scale and zero point
  to equal the input's (RELU, MEAN, RESHAPE, ...) or fixes them (LOGISTIC, SOFTMAX, TANH)
  and the file has others, the operation writes the required ones and a DEQUANTIZE +
  QUANTIZE pair requantises (within a quantisation step of the direct result); operators
  that TFLite runs on stored values whatever the parameters (RESHAPE, TRANSPOSE, SLICE,
  MAX_POOL_2D, ...) keep the stored values instead (a CAST to the same type).
- **Compositions** for operators NNAPI lacks: SPLIT_V / UNPACK are SLICEs (and RESHAPEs;
  SPLIT is NNAPI's SPLIT, constant weights are cut at import), PACK is EXPAND_DIMS +
  CONCATENATION, LEAKY_RELU is PRELU with a constant alpha,
  BATCH_MATMUL with a constant right-hand side is FULLY_CONNECTED between RESHAPEs,
  SQUARE / SQUARED_DIFFERENCE are MUL (and SUB), ADD_N a chain of ADDs, FLOOR_DIV (int32)
  is NNAPI's flooring int32 DIV, a requantising QUANTIZE is DEQUANTIZE + QUANTIZE, a
  FULLY_CONNECTED with per-channel weights a 1x1 CONV_2D, BROADCAST_TO is RESHAPE + TILE,
  a BOOL RESHAPE goes through int32 (SELECT, RESHAPE, NOT_EQUAL), CAST from / to BOOL is
  SELECT / NOT_EQUAL, SHAPE is a constant, RELU_0_TO_1 is RELU + MINIMUM.
- **Control flow.** IF becomes a HAL IF with referenced subgraphs; an IF input that is a
  constant in the caller becomes a constant inside both branches.
- **Streaming state.** Resource variables (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE,
  initialised by a CALL_ONCE subgraph of constant assignments) become extra model inputs
  and outputs: after the file's inputs, one "state in" input per variable that is read
  before it is assigned; after the file's outputs, one "state out" output per variable
  that is assigned, in the order of the variables' VAR_HANDLEs. The HAL model is then
  stateless: feed the initial values (``ImportReport.state``) in, and each execution's
  state outputs back into the next one.

What cannot be mapped raises ``UnsupportedModel``, whose one-line message names every
unsupported operator with its count (and the reason where the operator exists but this
instance cannot be mapped); ``import_report`` lists the status of every operator instead
of raising. Input dimensions that the file leaves dynamic (-1) take the file's default
shape unless ``input_shapes`` gives them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model, SymmPerChannelQuantParams, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import (
    F32,
    HAL_TYPE,
    I32,
    NO_EQUIVALENT,
    TENSOR_TYPE_NAMES,
    File,
    Graph,
    MalformedModel,
    Node,
    Source,
    Spec,
    Unmapped,
    read_bytes,
    tensor_dims,
    tensor_name,
)
from nncert.mlts.tflite_mappings import MAPPINGS

__all__ = ["ImportReport", "MalformedModel", "OperatorStatus", "StateVariable", "UnsupportedModel",
           "import_report", "import_tflite"]


class UnsupportedModel(ValueError):  # noqa: N818 - the name the MLTS API gives it
    """The model uses operators or features that NNAPI (the catalogue) cannot express. The
    message names them all with counts; ``report`` has the per-operator detail."""

    def __init__(self, report: ImportReport) -> None:
        super().__init__(report.message())
        self.report = report


# ---------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True)
class OperatorStatus:
    """How one TFLite operator was imported.

    ``status``: ``mapped`` (HAL operations emitted), ``folded`` (computed at import into a
    constant), ``state`` (a resource-variable operator turned into model inputs / outputs),
    ``unsupported`` (``reason`` says why).
    """

    subgraph: int
    index: int
    code: str
    status: str
    hal: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class StateVariable:
    """A resource variable turned into a model input (state in) and / or output (state out).

    ``input_index`` / ``output_index`` are positions in the HAL model's input and output
    lists (None where the variable is not read before it is assigned / never assigned);
    ``initial`` is the value (the operand's stored type) the first execution must be given.
    """

    name: str
    type: T
    dimensions: tuple[int, ...]
    scale: float
    zero_point: int
    input_index: int | None
    output_index: int | None
    initial: np.ndarray


@dataclass
class ImportReport:
    """What importing a model did: every operator's status, model-level problems, the
    streaming state variables and where each TFLite tensor went."""

    operators: list[OperatorStatus] = field(default_factory=list)
    #: Problems outside any operator (a model input of an unsupported type, ...).
    problems: list[str] = field(default_factory=list)
    state: list[StateVariable] = field(default_factory=list)
    #: Main-subgraph TFLite tensor index -> the HAL operand holding it (for tracing
    #: accuracy layer by layer; constants folded at import included).
    tensors: dict[int, int] = field(default_factory=dict)

    @property
    def importable(self) -> bool:
        return not self.problems and all(o.status != "unsupported" for o in self.operators)

    def unsupported(self) -> Counter:
        """Label -> count of the operators that cannot be mapped: the operator's name, with
        the reason in parentheses where the operator maps in general."""
        labels = Counter()
        for o in self.operators:
            if o.status == "unsupported":
                labels[o.code if o.reason == NO_EQUIVALENT else f"{o.code} ({o.reason})"] += 1
        return labels

    def counts(self) -> dict[str, dict[str, int]]:
        """Operator name -> status -> count (for the MLTS report)."""
        out: dict[str, dict[str, int]] = {}
        for o in self.operators:
            out.setdefault(o.code, Counter())[o.status] += 1
        return {k: dict(v) for k, v in sorted(out.items())}

    def message(self) -> str:
        parts = []
        if self.unsupported():
            parts.append("unsupported TFLite operators: " +
                         ", ".join(f"{k} x{n}" for k, n in self.unsupported().items()))
        if self.problems:
            parts.append("unsupported TFLite features: " + ", ".join(dict.fromkeys(self.problems)))
        return "; ".join(parts).replace("\n", " ") or "the model imports"


# ---------------------------------------------------------------------------------------
# One subgraph


@dataclass
class _Variable:
    name: str
    spec: Spec | None = None
    dims: tuple[int, ...] = ()
    state_in: int | None = None
    current: int | None = None


class _Subgraph:
    def __init__(self, imp: _Importer, index: int, g: Graph, exact_shapes: bool) -> None:
        self.imp, self.file, self.index, self.g = imp, imp.file, index, g
        self.sg = self.file.subgraph(index)
        self.tensors = self.sg.tensors or []
        self.hal: dict[int, int] = {}
        self._exact_shapes = exact_shapes
        self.inputs: list[int] = []

    def tensor(self, t: int) -> Any:
        if not 0 <= t < len(self.tensors):
            raise MalformedModel(f"corrupt TFLite model: subgraph {self.index} has no tensor {t} "
                                 f"(it has {len(self.tensors)})")
        return self.tensors[t]

    def declared_dims(self, t: Any, always: bool = False) -> tuple[int, ...] | None:
        """A tensor's dimensions as the file declares them, when they are static (and the
        subgraph checks them, or ``always``)."""
        if not (self._exact_shapes or always):
            return None
        sig = t.shapeSignature
        if sig is not None and any(int(d) < 0 for d in sig):
            return None
        return tensor_dims(t) or (1,)

    def spec_of(self, t: Any) -> Spec:
        """The HAL type and quantisation of a TFLite tensor."""
        tname = TENSOR_TYPE_NAMES.get(t.type, str(t.type))
        hal = HAL_TYPE.get(tname)
        if hal is None:
            raise Unmapped(f"{tname} tensors")
        q = t.quantization
        scales = list(q.scale) if q is not None and q.scale is not None else []
        if hal is T.TENSOR_INT32 and len(scales) == 1 and scales[0] > 0:
            return Spec(hal, float(scales[0]))  # a bias: scale input x filter scale
        if not hal.is_quant:
            return Spec(hal)
        zps = list(q.zeroPoint) if q is not None and q.zeroPoint is not None else []
        if len(scales) > 1:
            if tname != "INT8" or any(int(z) for z in zps):
                raise Unmapped(f"per-channel {tname} quantisation with non-zero zero points")
            dim = int(q.quantizedDimension) if q is not None else 0
            return Spec(T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                        channel_quant=SymmPerChannelQuantParams(tuple(float(s) for s in scales), dim))
        if not scales:
            return Spec(hal, 1.0, 0)
        zp = int(zps[0]) if zps else 0
        if hal is T.TENSOR_QUANT16_SYMM and zp:
            raise Unmapped("INT16 quantisation with a non-zero zero point")
        return Spec(hal, float(scales[0]), zp)

    def operand(self, t: int) -> int:
        """The HAL operand of TFLite tensor ``t``: the one mapped so far, or a new constant."""
        if t in self.hal:
            return self.hal[t]
        tensor = self.tensor(t)
        value = self.file.tensor_value(tensor)
        if value is None:
            raise Unmapped(f"tensor {tensor_name(tensor)} is read before anything writes it")
        self.hal[t] = self.constant(tensor, value)
        return self.hal[t]

    def constant(self, tensor: Any, value: np.ndarray, spec: Spec | None = None) -> int:
        if value.dtype == np.int64:
            if value.size and (value.min() < -2**31 or value.max() >= 2**31):
                raise Unmapped("INT64 constants beyond the int32 range")
            return self.g.const(I32, value.astype(np.int32))
        return self.g.const(spec or self.spec_of(tensor), value)

    def run(self, inputs: Sequence[int | None],
            consts: dict[int, tuple[Spec, np.ndarray]] | None = None) -> None:
        """Map the operators; ``inputs``: HAL operands for the subgraph's inputs, None where
        ``consts`` gives the input (by position) as a constant of that type and value."""
        sg_inputs = [int(i) for i in (self.sg.inputs if self.sg.inputs is not None else [])]
        if len(sg_inputs) != len(inputs):
            raise Unmapped(f"subgraph {self.index} takes {len(sg_inputs)} inputs, is given {len(inputs)}")
        for pos, t in enumerate(sg_inputs):
            if inputs[pos] is None:
                spec, value = (consts or {})[pos]
                self.hal[t] = self.g.const(spec, value)
            else:
                self.hal[t] = inputs[pos]
        for n, op in enumerate(self.sg.operators or []):
            if not 0 <= op.opcodeIndex < len(self.file.codes):
                raise MalformedModel(f"corrupt TFLite model: operator {n} of subgraph {self.index} has "
                                     f"opcode index {op.opcodeIndex}")
            code = self.file.codes[op.opcodeIndex]
            node = Node(self, op, code)
            start = len(self.g.log)
            try:
                status = self.map(node)
            except (Unmapped, ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
                if isinstance(e, MalformedModel):
                    raise
                reason = str(e) if isinstance(e, Unmapped) else f"importer error {type(e).__name__}: {e}"
                self.imp.report.operators.append(
                    OperatorStatus(self.index, n, code, "unsupported", reason=reason.replace("\n", " ")))
                self._placeholders(node)
                continue
            self.imp.report.operators.append(
                OperatorStatus(self.index, n, code, status, tuple(self.g.log[start:])))

    def map(self, node: Node) -> str:
        if node.code in _STATE_OPS:
            if self.index != self.imp.main_index:
                raise Unmapped("resource variables inside a control-flow subgraph")
            return self.imp.state_op(self, node)
        mapping = MAPPINGS.get(node.code)
        if mapping is None:
            raise Unmapped(NO_EQUIVALENT)
        before = len(self.g.log)
        mapping(node)
        missing = [k for k, t in enumerate(node.outputs) if t >= 0 and t not in self.hal]
        if missing:
            raise Unmapped(f"the mapping wrote no output {missing[0]}")
        return "mapped" if len(self.g.log) > before else "folded"

    def _placeholders(self, node: Node) -> None:
        """Stand-ins for an unmapped operator's outputs, so that the rest can be reported."""
        for t in node.outputs:
            if t < 0 or t in self.hal:
                continue
            tensor = self.tensor(t)
            try:
                spec = self.spec_of(tensor)
            except Unmapped:
                spec = F32
            dims = tuple(max(1, d) for d in tensor_dims(tensor)) or (1,)
            self.hal[t] = self.g.operand(spec, dims)

    def output_operands(self) -> list[int]:
        """HAL operands for the subgraph's outputs: copies where an output is a constant, an
        input, or listed twice (a HAL operand is one of these only)."""
        taken: set[int] = set(self.inputs)
        outs = []
        for t in (self.sg.outputs if self.sg.outputs is not None else []):
            idx = self.operand(int(t))
            if idx in taken or self.g.is_const(idx):
                idx = self.copy(idx)
            taken.add(idx)
            outs.append(idx)
        return outs

    def copy(self, idx: int) -> int:
        """A new operand holding ``idx``'s value (CAST to the same type is a copy)."""
        out = self.g.operand(self.g.spec(idx), self.g.dims(idx))
        self.g.b.operation(Op.CAST, [idx], [out])
        return out


_STATE_OPS = ("VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE")


class _Importer:
    def __init__(self, raw: bytes, input_shapes: Sequence[Sequence[int] | None] | None) -> None:
        self.file = File(raw)
        self.input_shapes = input_shapes
        self.report = ImportReport()
        self.main_index = 0
        self.handles: dict[int, str] = {}  # main-subgraph resource tensor -> variable name
        self.variables: dict[str, _Variable] = {}
        self.initial: dict[str, np.ndarray] = {}  # variable -> value its CALL_ONCE assigns

    def run(self) -> Model | None:
        g = Graph()
        main = _Subgraph(self, self.main_index, g, exact_shapes=not self.input_shapes)
        inputs = []
        sg_inputs = [int(i) for i in (main.sg.inputs if main.sg.inputs is not None else [])]
        shapes = list(self.input_shapes or [])
        if len(shapes) > len(sg_inputs):
            raise ValueError(f"input_shapes gives {len(shapes)} shapes, the model has "
                             f"{len(sg_inputs)} inputs")
        shapes += [None] * (len(sg_inputs) - len(shapes))
        for pos, t in enumerate(sg_inputs):
            tensor = main.tensor(t)
            dims = tensor_dims(tensor) if shapes[pos] is None else shapes[pos]
            try:
                spec = main.spec_of(tensor)
            except Unmapped as e:
                self.report.problems.append(f"input {pos} ({e})")
                spec = F32
            inputs.append(g.operand(spec, tuple(int(d) for d in dims) or (1,)))
        main.inputs = inputs
        main.run(inputs)
        try:
            outputs = main.output_operands()
        except Unmapped as e:
            self.report.problems.append(f"model outputs ({e})")
            outputs = []
        state_in, state_out = self._state(main, inputs, outputs)
        self.report.tensors = dict(main.hal)
        defaulted = [pos for pos, t in enumerate(sg_inputs)
                     if shapes[pos] is None and main.declared_dims(main.tensor(t), always=True) is None]
        if defaulted and not self.report.importable:
            self.report.problems.append(f"dynamic dimensions of inputs {defaulted} taken from the file's "
                                        f"default shape (give input_shapes)")
        if not self.report.importable:
            return None
        return g.b.build(inputs + state_in, outputs + state_out)

    # -- resource variables --
    def state_op(self, sub: _Subgraph, node: Node) -> str:
        g = sub.g
        if node.code == "CALL_ONCE":
            self._initialise(int(node.opt("initSubgraphIndex", -1)))
        elif node.code == "VAR_HANDLE":
            name = self._variable_name(node)
            self.handles[node.outputs[0]] = name
            self.variables.setdefault(name, _Variable(name))
        else:
            handle = node.inputs[0] if node.inputs else -1
            if handle not in self.handles:
                raise Unmapped("a resource that no VAR_HANDLE of the main subgraph makes")
            var = self.variables[self.handles[handle]]
            if node.code == "READ_VARIABLE":
                if var.current is None:
                    spec, dims = node.out_spec(0), node.out_dims(0)
                    var.spec, var.dims = var.spec or spec, var.dims or dims
                    var.state_in = var.current = g.operand(spec, dims)
                node.bind(0, var.current)
            else:  # ASSIGN_VARIABLE
                value = node.x(1)
                spec = g.spec(value)
                if var.spec is None:
                    var.spec, var.dims = spec, g.dims(value)
                elif spec != var.spec:
                    value = g.requantize(value, var.spec)
                var.current = value
        return "state"

    def _variable_name(self, node: Node) -> str:
        container = node.opt("container") or b""
        shared = node.opt("sharedName") or b""
        text = [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s) for s in (container, shared)]
        return "/".join(p for p in text if p) or f"variable{len(self.variables)}"

    def _initialise(self, index: int) -> None:
        """Initial values from a CALL_ONCE subgraph of VAR_HANDLEs and constant assignments."""
        sg = self.file.subgraph(index)
        sub = _Subgraph(self, index, Graph(), exact_shapes=False)
        names: dict[int, str] = {}
        for op in sg.operators or []:
            node = Node(sub, op, self.file.codes[op.opcodeIndex])
            if node.code == "VAR_HANDLE":
                names[node.outputs[0]] = self._variable_name(node)
            elif node.code == "ASSIGN_VARIABLE" and node.inputs and node.inputs[0] in names:
                value = node.value(1)
                if value is None:
                    raise Unmapped("CALL_ONCE initialiser assigns a computed value")
                self.initial[names[node.inputs[0]]] = np.asarray(value)
            else:
                raise Unmapped(f"CALL_ONCE initialiser runs {node.code}")

    def _state(self, main: _Subgraph, inputs: list[int], outputs: list[int]) -> tuple[list[int], list[int]]:
        """The state inputs and outputs, in VAR_HANDLE order (a state output that is also a
        model output, an input or a constant gets a copy of its own)."""
        state_in: list[int] = []
        state_out: list[int] = []
        n_in, n_out = len(inputs), len(outputs)
        for var in self.variables.values():
            if var.spec is None:
                continue
            in_pos = out_pos = None
            if var.state_in is not None:
                in_pos = n_in + len(state_in)
                state_in.append(var.state_in)
            if var.current is not None and var.current != var.state_in:
                idx = var.current
                if main.g.is_const(idx) or idx in inputs or idx in outputs or idx in state_in \
                        or idx in state_out:
                    idx = main.copy(idx)
                out_pos = n_out + len(state_out)
                state_out.append(idx)
            dtype = dtype_of(var.spec.type)
            initial = self.initial.get(var.name)
            if initial is not None and initial.size != math.prod(var.dims):
                self.report.problems.append(f"variable {var.name!r} initialised with {initial.size} "
                                            f"values for shape {list(var.dims)}")
                continue
            initial = np.zeros(var.dims, dtype) if initial is None else \
                initial.astype(dtype).reshape(var.dims)
            self.report.state.append(StateVariable(var.name, var.spec.type, var.dims, var.spec.scale,
                                                   var.spec.zero_point, in_pos, out_pos, initial))
        return state_in, state_out

    # -- control flow --
    def branch(self, index: int, specs: list[tuple[Spec, tuple[int, ...]]],
               consts: dict[int, tuple[Spec, np.ndarray]]) -> tuple[ModelBuilder, list[int], list[int]]:
        """A referenced subgraph built from TFLite subgraph ``index``: its builder, inputs
        and outputs. Its inputs have ``specs`` (type, dimensions) except those ``consts``
        gives, which are constants inside it."""
        g = Graph()
        sub = _Subgraph(self, index, g, exact_shapes=False)
        ins = [None if pos in consts else g.operand(spec, dims) for pos, (spec, dims) in enumerate(specs)]
        sub.inputs = [i for i in ins if i is not None]
        sub.run(ins, consts)
        if any(o.status == "unsupported" for o in self.report.operators if o.subgraph == index):
            raise Unmapped(f"subgraph {index} has unsupported operators")
        return g.b, sub.inputs, sub.output_operands()


# ---------------------------------------------------------------------------------------
# Entry points


def import_report(data: Source, input_shapes: Sequence[Sequence[int] | None] | None = None) -> ImportReport:
    """The mapping status of every operator of a .tflite model (``data``: its bytes or a
    path), without raising for unsupported ones; MalformedModel for a corrupt file."""
    imp = _Importer(read_bytes(data), input_shapes)
    imp.run()
    return imp.report


def import_tflite(data: Source, input_shapes: Sequence[Sequence[int] | None] | None = None) -> Model:
    """The HAL model of a .tflite model (``data``: its bytes or a path).

    ``input_shapes``: dimensions for the main subgraph's inputs, by position (None keeps the
    file's), for models whose inputs are dynamic. Resource variables become extra inputs
    and outputs (see the module docstring; ``import_report(data).state`` lists them with
    their initial values). Raises UnsupportedModel naming everything that cannot be mapped,
    MalformedModel for a corrupt file.
    """
    imp = _Importer(read_bytes(data), input_shapes)
    model = imp.run()
    if model is None:
        raise UnsupportedModel(imp.report)
    return model
