"""HAL model -> .tflite flatbuffer (schema version 3).

One mapping per catalogue operation (``MAPPINGS``), written against a small builder
(``Graph``) and a per-operation view (``Node``) that reads inputs by their catalogue names.
Concerns shared by many operations are handled once, in ``Node``:

- **Layout.** NCHW operations (``layout`` true) get TRANSPOSE operators NCHW->NHWC before
  their layout inputs and NHWC->NCHW after their outputs; mappings only see NHWC.
- **Fused activation.** A mapping that passes ``node.fused()`` to an option consumes the
  activation; otherwise an explicit RELU / RELU_N1_TO_1 / RELU6 follows the operator.
- **Quantisation.** HAL scale / zero point become TFLite per-tensor quantisation,
  per-channel filters per-channel quantisation (``quantized_dimension`` = channel_dim), an
  INT32 bias the scale input_scale x filter_scale(s). Where TFLite needs inputs in the
  output's quantisation (MAXIMUM, MINIMUM, CONCATENATION) they are requantised with QUANTIZE
  first, which is exact arithmetic because requantisation is monotonic (LiteRT's QUANTIZE
  rounds some values a step the wrong way: see expectations.toml).
- **Parameters.** Scalars become operator options (or constant tensors where TFLite takes a
  tensor: axis of ARG_MAX, EXPAND_DIMS, sizes of RESIZE); parameter tensors (shape,
  paddings, perm, begin/end, axes, block shapes, indices) pass through as int32 tensors,
  constant buffers when the HAL operand is constant.

Compositions (documented, exact up to float rounding): explicit padding that is neither SAME
nor VALID is a PAD (PADV2 with the lowest value for MAX_POOL_2D) before a VALID window; for
float AVERAGE_POOL_2D / L2_POOL_2D, where padded taps must not count, the zero-padded pool
is then multiplied by window area / taps inside (its square root for L2); the quantised
average pool with such padding is declined; GROUPED_CONV_2D is a
SPLIT, one CONV_2D per group and a CONCATENATION; TRANSPOSE_CONV_2D whose head padding is
neither VALID's nor SAME's computes a larger output and SLICEs it; SOFTMAX / LOG_SOFTMAX /
L2_NORMALIZATION / LOCAL_RESPONSE_NORMALIZATION on another axis than the last transpose it
last and back; LOG_SOFTMAX's beta is a MUL first; ELU's alpha is RELU(x) + alpha x
MIN(ELU(x), 0); a uint8 convolution with a per-channel int8 filter runs in int8 between two
exact QUANTIZEs (uint8 <-> int8 with zero point shifted by 128); int32 DIV (floor
division) is FLOOR_DIV; CAST to TENSOR_QUANT8_ASYMM saturates with MAXIMUM / MINIMUM first.

**Control flow.** Subgraph 0 is the main subgraph; every referenced subgraph an IF / WHILE
calls becomes a TFLite subgraph of the same model (buffers and operator codes shared),
exported once per role and input shapes, with its dimensions filled in from the call's
input shapes (``specialize_subgraph``: a branch may leave them unknown). HAL IF is TFLite
IF (the condition, then the branch inputs); where the branches give outputs of different
shapes, the IF output is a dynamic tensor. HAL WHILE is TFLite WHILE over all m + k + n
operands: TFLite feeds every input back, so the body also gives its n input-only inputs
back unchanged, and only the first m outputs are the HAL outputs. Each condition subgraph
ends with ``AND NOT stop``, a variable flag the driver sets to stop loops at the loop
timeout or the deadline (``_stoppable``). A loop whose carried shapes change every
iteration is taken only when its TFLite form is the same at the shapes of its first
iterations (``_check_shape_generic``).

What cannot be expressed raises ``Unmappable`` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import flatbuffers
import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.fastbuild import FastBuilder, pack_model
from nncert.hal.model import Model, Operand, Operation, Subgraph
from nncert.hal.transform import CONSTANT, ShapeUnknown, specialize_subgraph
from nncert.hal.types import OperandLifeTime
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.ops import add_family_mappings

try:  # the schema ships with ai-edge-litert; tflite-runtime has none, so export needs it
    from ai_edge_litert import schema_py_generated as fb
except ImportError:  # pragma: no cover - exercised only without ai-edge-litert
    fb = None  # type: ignore[assignment]

#: The flatbuffer builder ``export`` writes with: the same bytes as flatbuffers.Builder, faster
#: (nncert.drivers.litert.fastbuild).
BUILDER: type[flatbuffers.Builder] = FastBuilder

_NHWC = (0, 2, 3, 1)  # NCHW -> NHWC
_NCHW = (0, 3, 1, 2)  # NHWC -> NCHW

#: The most elements an exported tensor may have (1 GiB of float32): a model asking for more
#: (a fuzzed padding of 10^9) is declined, not materialised while exporting.
MAX_TENSOR_ELEMENTS = 1 << 28

#: Quantisation scales LiteRT's kernels take: found by `nncert fuzz prepare_model --driver
#: litert`, a quantised ADD with an input scale of 1e38 aborts (SIGABRT) and a per-channel
#: TRANSPOSE_CONV_2D with an input scale of 1e-45 segfaults, in the kernels' Prepare.
QUANT_SCALE_RANGE = (2.0**-32, 2.0**32)

#: HAL tensor type -> (TFLite TensorType name, numpy dtype)
_TYPES = {
    T.TENSOR_FLOAT32: ("FLOAT32", np.float32),
    T.TENSOR_INT32: ("INT32", np.int32),
    T.TENSOR_BOOL8: ("BOOL", np.bool_),
    T.TENSOR_QUANT8_ASYMM: ("UINT8", np.uint8),
    T.TENSOR_QUANT8_ASYMM_SIGNED: ("INT8", np.int8),
    T.TENSOR_QUANT8_SYMM: ("INT8", np.int8),
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: ("INT8", np.int8),
    T.TENSOR_QUANT16_ASYMM: ("UINT16", np.uint16),
    T.TENSOR_QUANT16_SYMM: ("INT16", np.int16),
}
_NP_TO_TFL = {np.dtype(d): n for n, d in _TYPES.values()}

#: Operator versions where version 1 is not registered by the runtime.
_OP_VERSION = {fb.BuiltinOperator.BROADCAST_TO: 2} if fb is not None else {}

#: Quantisation of one tensor: (scales, zero points, quantized dimension) or None.
Quant = tuple[tuple[float, ...], tuple[int, ...], int] | None


def tflite_type(operand_type: T) -> str:
    try:
        return _TYPES[operand_type][0]
    except KeyError:
        raise Unmappable(f"TFLite has no tensor type for {operand_type.name}") from None


def hal_quant(o: Operand) -> Quant:
    if o.channel_quant is not None:
        cq = o.channel_quant
        return tuple(cq.scales), (0,) * len(cq.scales), cq.channel_dim
    if o.type.is_quant:
        return (o.scale,), (o.zero_point,), 0
    if o.type is T.TENSOR_INT32 and o.scale > 0:  # a quantised bias
        return (o.scale,), (0,), 0
    return None


# ---------------------------------------------------------------------------------------
# The flatbuffer under construction


class Graph:
    """Tensors and operators of one subgraph; buffers and operator codes, which the
    subgraphs of a model share, are the ``shared`` graph's (its own when None)."""

    def __init__(self, shared: Graph | None = None) -> None:
        self.tensors: list[Any] = []
        self.shapes: list[tuple[int, ...]] = []
        self.dtypes: list[str] = []
        self.quants: list[Quant] = []
        self.buffers: list[Any] = [fb.BufferT()] if shared is None else shared.buffers  # 0: empty
        self.operators: list[Any] = []
        self.codes: dict[int, int] = {} if shared is None else shared.codes

    def tensor(self, shape: Sequence[int], ttype: str, quant: Quant = None,
               data: np.ndarray | None = None, name: str = "",
               signature: Sequence[int] | None = None) -> int:
        """A new tensor; ``signature``: its shape with -1 where a dimension is known only when
        the model runs (an IF / WHILE output), ``shape`` then a placeholder."""
        if math.prod(int(d) for d in shape) > MAX_TENSOR_ELEMENTS:
            raise Unmappable(f"a {ttype} tensor of shape {list(shape)} is beyond the "
                             f"{MAX_TENSOR_ELEMENTS:,} elements the exporter maps")
        t = fb.TensorT()
        t.shape = [int(d) for d in shape]
        if signature is not None:
            t.shapeSignature = [int(d) for d in signature]
        t.type = getattr(fb.TensorType, ttype)
        t.name = name or f"t{len(self.tensors)}"
        t.buffer = 0
        if data is not None:
            buf = fb.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
            self.buffers.append(buf)
            t.buffer = len(self.buffers) - 1
        self.set_quant(len(self.tensors), quant, t)
        self.tensors.append(t)
        self.shapes.append(tuple(int(d) for d in shape))
        self.dtypes.append(ttype)
        self.quants.append(quant)
        return len(self.tensors) - 1

    def set_quant(self, index: int, quant: Quant, t: Any = None) -> None:
        t = t if t is not None else self.tensors[index]
        if index < len(self.quants):
            self.quants[index] = quant
        if quant is None:
            t.quantization = None
            return
        q = fb.QuantizationParametersT()
        q.scale = [float(s) for s in quant[0]]
        q.zeroPoint = [int(z) for z in quant[1]]
        q.quantizedDimension = int(quant[2])
        t.quantization = q

    def const(self, value: Any, dtype: Any = np.int32, quant: Quant = None) -> int:
        arr = np.asarray(value, dtype=dtype)
        return self.tensor(arr.shape, _NP_TO_TFL[arr.dtype], quant, arr)

    def like(self, src: int, shape: Sequence[int] | None = None, quant: Any = "same",
             ttype: str | None = None) -> int:
        """A new intermediate tensor with ``src``'s type and quantisation."""
        return self.tensor(self.shapes[src] if shape is None else shape,
                           ttype or self.dtypes[src], self.quants[src] if quant == "same" else quant)

    def op(self, code: str, inputs: Sequence[int], outputs: Sequence[int],
           options: str | None = None, **fields: Any) -> None:
        builtin = getattr(fb.BuiltinOperator, code)
        self.codes.setdefault(builtin, len(self.codes))
        o = fb.OperatorT()
        o.opcodeIndex = self.codes[builtin]
        o.inputs = [int(i) for i in inputs]
        o.outputs = [int(i) for i in outputs]
        if options:
            opts = getattr(fb, f"{options}OptionsT")()
            for k, v in fields.items():
                if not hasattr(opts, k):
                    raise AttributeError(f"{options}Options has no field {k}")
                setattr(opts, k, v)
            o.builtinOptionsType = getattr(fb.BuiltinOptions, f"{options}Options")
            o.builtinOptions = opts
        self.operators.append(o)

    def custom(self, name: str, inputs: Sequence[int], outputs: Sequence[int], options: bytes = b"") -> None:
        """A custom operator (builtin code CUSTOM, ``name`` its custom code) with its
        ``options`` bytes (flexbuffers, as the kernel that registers ``name`` reads them)."""
        key = f"custom:{name}"
        self.codes.setdefault(key, len(self.codes))  # type: ignore[call-overload]
        o = fb.OperatorT()
        o.opcodeIndex = self.codes[key]  # type: ignore[index]
        o.inputs = [int(i) for i in inputs]
        o.outputs = [int(i) for i in outputs]
        o.customOptions = list(options)
        o.customOptionsFormat = fb.CustomOptionsFormat.FLEXBUFFERS
        self.operators.append(o)

    def unary(self, code: str, src: int, shape: Sequence[int] | None = None, quant: Any = "same",
              ttype: str | None = None, extra: Sequence[int] = (), options: str | None = None,
              **fields: Any) -> int:
        """A one-output operator on ``src`` into a new tensor; returns the new tensor."""
        out = self.like(src, shape, quant, ttype)
        self.op(code, [src, *extra], [out], options, **fields)
        return out

    def transpose(self, src: int, perm: Sequence[int]) -> int:
        if list(perm) == list(range(len(perm))):
            return src
        shape = [self.shapes[src][p] for p in perm]
        return self.unary("TRANSPOSE", src, shape, extra=[self.const(list(perm))])

    def requantize(self, src: int, quant: Quant) -> int:
        if self.quants[src] == quant or quant is None:
            return src
        return self.unary("QUANTIZE", src, quant=quant)

    def variable_copy(self, src: int, shape: Sequence[int] | None = None) -> int:
        """A fresh variable tensor holding ``src``'s elements in ``shape`` (default: its own).
        It is written by a SLICE of the whole tensor, never by an operator LiteRT may run in
        place (RESHAPE, ADD, MUL, ...): LiteRT's ArenaPlanner lets such an operator's variable
        output share its non-variable input's buffer (InputTensorCanBeShared checks only the
        input's allocation type), then gives the variable no buffer at all (not allocated in
        the persistent arena, not pointed at the shared one since the two are in different
        arenas), so its reader fails with "Input tensor N lacks data", or an ADD into it
        segfaults. The default XNNPACK delegate takes such copies and hides this; the builtin
        and reference kernels show it."""
        shape = list(self.shapes[src]) if shape is None else [int(d) for d in shape]
        if shape != list(self.shapes[src]):
            src = self.unary("RESHAPE", src, shape, extra=[self.const(shape)])
        var = self.like(src)
        self.tensors[var].isVariable = True
        self.op("SLICE", [src, self.const([0] * len(shape)), self.const(shape)], [var])
        return var

    def rewire(self, old: int, new: int) -> None:
        """Make every operator read and write ``new`` where it used ``old``."""
        for o in self.operators:
            o.inputs = [new if i == old else i for i in o.inputs]
            o.outputs = [new if i == old else i for i in o.outputs]

    def subgraph(self, inputs: Sequence[int], outputs: Sequence[int], name: str = "main") -> Any:
        sg = fb.SubGraphT()
        sg.tensors = self.tensors
        sg.inputs = list(inputs)
        sg.outputs = list(outputs)
        sg.operators = self.operators
        sg.name = name
        return sg

    def build(self, inputs: Sequence[int], outputs: Sequence[int], others: Sequence[Any] = ()) -> bytes:
        """The model: this graph as subgraph 0, then ``others`` (SubGraphT of graphs that
        share this one's buffers and operator codes)."""
        m = fb.ModelT()
        m.version = 3
        m.description = "nncert"
        m.subgraphs = [self.subgraph(inputs, outputs), *others]
        m.buffers = self.buffers
        codes = [None] * len(self.codes)
        for builtin, i in self.codes.items():
            oc = fb.OperatorCodeT()
            if isinstance(builtin, str):  # a custom operator ("custom:NAME", see custom())
                oc.builtinCode = oc.deprecatedBuiltinCode = fb.BuiltinOperator.CUSTOM
                oc.customCode = builtin.removeprefix("custom:")
                oc.version = 1
                codes[i] = oc
                continue
            oc.builtinCode = builtin
            oc.deprecatedBuiltinCode = min(builtin, 127)
            oc.version = _OP_VERSION.get(builtin, 1)
            codes[i] = oc
        m.operatorCodes = codes
        b = BUILDER(1024)
        b.Finish(pack_model(b, m) if isinstance(b, FastBuilder) else m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())


# ---------------------------------------------------------------------------------------
# One HAL operation, read by catalogue names


_ACT_OPS = {1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6"}
#: The catalogue's match of each (operation, input types, output types) exported (read only):
#: a probe exports every operation of every graph alone.
_MATCHES: dict[tuple, Any] = {}


class Node:
    def __init__(self, ex: Exporter, op: Operation) -> None:
        from nncert.ops import get
        from nncert.ops.base import match

        self.ex, self.g, self.op = ex, ex.g, op
        self.record = get(op.type)
        sg = ex.sg
        self.inputs = [None if sg.operands[i].lifetime is OperandLifeTime.NO_VALUE
                       else sg.operands[i] for i in op.inputs]
        self.outputs = [sg.operands[i] for i in op.outputs]
        key = (op.type, tuple(o and o.type for o in self.inputs), tuple(o.type for o in self.outputs))
        found = _MATCHES.get(key)
        if found is None:
            if len(_MATCHES) >= 4096:
                _MATCHES.clear()
            found = _MATCHES[key] = match(self.record, list(key[1]), list(key[2]))
        self.match = found
        self.signature = self.match.signature.name
        self.nchw = bool(self.record.layout and self.scalar(self.record.layout))
        self.act = int(self.scalar(self.record.activation)) if self.record.activation else 0
        self._act_done = self.act == 0
        self._post: list[tuple[int, int]] = []  # (staging tensor, HAL output tensor)

    # -- inputs --
    def positions(self, name: str) -> list[int]:
        return [p for p in self.match.positions.get(name, []) if self.inputs[p] is not None]

    def has(self, name: str) -> bool:
        return bool(self.positions(name))

    def operand(self, name: str, k: int = 0) -> Operand:
        return self.inputs[self.positions(name)[k]]

    def value(self, name: str) -> np.ndarray:
        """A constant input's value (its dtype); Unmappable when it is not constant."""
        pos = self.positions(name)
        v = self.ex.model.constant_value(self.inputs[pos[0]]) if pos else None
        if v is None:
            raise Unmappable(f"the exporter needs {self.record.name}'s {name} as a constant")
        return v

    def scalar(self, name: str) -> Any:
        """A scalar parameter's value (the arg's default when omitted)."""
        if not self.has(name):
            return self.match.signature.arg(name).default
        return self.value(name).item()

    def t(self, name: str, k: int = 0) -> int:
        """The TFLite tensor of input ``name`` (NHWC for a layout input of an NCHW op)."""
        idx = self.op.inputs[self.positions(name)[k]]
        t = self.ex.hal_tensor(idx)
        if self.nchw and name in self.record.layout_inputs:
            t = self.g.transpose(t, _NHWC)
        return t

    def ts(self, name: str) -> list[int]:
        return [self.t(name, k) for k in range(len(self.positions(name)))]

    # -- outputs --
    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        d = self.outputs[k].dimensions
        return tuple(d[p] for p in _NHWC) if self.nchw and k in self.record.layout_outputs else d

    def in_shape(self, name: str, k: int = 0) -> tuple[int, ...]:
        d = self.operand(name, k).dimensions
        return tuple(d[p] for p in _NHWC) if self.nchw and name in self.record.layout_inputs else d

    def out(self, k: int = 0) -> int:
        """The tensor the mapping writes output ``k`` into (NHWC; before any activation)."""
        final = self.ex.hal_tensor(self.op.outputs[k])
        if not (self.nchw and k in self.record.layout_outputs) and (self.act == 0 or k):
            return final
        staging = self.g.like(final, self.out_shape(k))
        self._post.append((staging, final))
        return staging

    def out_quant(self, k: int = 0) -> Quant:
        return hal_quant(self.outputs[k])

    def fused(self) -> int:
        """The fused activation code, for an options field; the mapping takes it over."""
        self._act_done = True
        return self.act

    def finish(self) -> None:
        """Explicit activation (unless fused) and the NHWC -> NCHW transpose, into the HAL
        outputs; a staging tensor that needs neither is replaced by the output itself."""
        g = self.g
        for staging, final in self._post:
            t = staging
            if self.nchw:
                if not self._act_done:
                    t = g.unary(_ACT_OPS[self.act], t)
                g.op("TRANSPOSE", [t, g.const(list(_NCHW))], [final])
            elif not self._act_done:
                g.op(_ACT_OPS[self.act], [t], [final])
            else:
                g.rewire(staging, final)


# ---------------------------------------------------------------------------------------
# The exporter


class Exporter:
    """One HAL subgraph into one TFLite subgraph. The root (the main subgraph, TFLite subgraph
    0) also collects the model's other TFLite subgraphs: each referenced subgraph an IF /
    WHILE calls, exported once per role and input shapes (``call``)."""

    def __init__(self, model: Model, subgraph: Subgraph | None = None, root: Exporter | None = None) -> None:
        self.model = model
        self.sg = model.main if subgraph is None else subgraph
        self.root = self if root is None else root
        self.g = Graph(None if root is None else root.g)
        self._tensors: dict[int, int] = {}
        if root is None:
            self.subgraphs: list[Any] = []  # TFLite subgraphs 1, 2, ...
            self._called: dict[tuple, int] = {}

    def hal_tensor(self, idx: int, after_run: bool = False) -> int:
        """The TFLite tensor of HAL operand ``idx``; ``after_run``: an IF / WHILE output,
        whose dimensions may be known only when it has run (a dynamic TFLite tensor)."""
        if idx in self._tensors:
            return self._tensors[idx]
        o = self.sg.operands[idx]
        if not o.type.is_tensor:
            raise Unmappable(f"operand {idx} ({o.type.name}) is not a tensor")
        data = None
        if o.lifetime in CONSTANT:
            data = self.model.constant_value(o)
        shape, signature = o.dimensions, None
        if any(d <= 0 for d in o.dimensions) or not o.dimensions:
            if not after_run:
                raise Unmappable(f"operand {idx} has unknown dimensions {list(o.dimensions)}")
            shape, signature = [max(d, 1) for d in o.dimensions], [d if d > 0 else -1 for d in o.dimensions]
        t = self.g.tensor(shape, tflite_type(o.type), hal_quant(o), data, f"hal{idx}", signature)
        self._tensors[idx] = t
        return t

    def emit(self) -> tuple[list[int], list[int]]:
        """Map the subgraph's operations; returns its TFLite input and output tensors."""
        sg = self.sg
        ins = [self.hal_tensor(i) for i in sg.input_indexes]
        for op in sg.operations:
            control = _CONTROL_FLOW.get(op.type)
            if control is not None:
                control(self, op)
                continue
            mapping = MAPPINGS.get(op.type)
            if mapping is None:
                raise Unmappable(f"TFLite has no {op.type.name}")
            node = Node(self, op)
            mapping(node)
            node.finish()
        outs = [self.hal_tensor(i, after_run=True) for i in sg.output_indexes]
        return ins, outs

    def run(self) -> bytes:
        ins, outs = self.emit()
        return self.g.build(ins, outs, self.subgraphs)

    def referenced(self, op: Operation, position: int) -> int:
        """The referenced subgraph (its index) that input ``position`` of ``op`` names."""
        return self.sg.operands[op.inputs[position]].location.offset

    def call(self, ref: int, input_dims: Sequence[Sequence[int]], role: str) -> tuple[int, Subgraph]:
        """(TFLite subgraph index, the HAL subgraph with its shapes filled in) of referenced
        subgraph ``ref`` run on inputs of ``input_dims`` as ``role``: "branch" (an IF's),
        "cond" or "body" (a WHILE's; a body also passes its input-only values through, as
        TFLite's WHILE feeds every input back)."""
        try:
            special = specialize_subgraph(self.model, self.model.referenced[ref], input_dims)
        except (ShapeUnknown, ValueError) as e:
            raise Unmappable(f"subgraph {ref}: {e}") from None
        root = self.root
        key = (ref, role, tuple(tuple(d) for d in input_dims))
        if key not in root._called:
            index = root._called[key] = len(root.subgraphs) + 1
            root.subgraphs.append(None)  # the index is taken before nested calls take theirs
            sub = Exporter(self.model, special, root)
            ins, outs = sub.emit()
            if role == "body":
                outs += ins[len(outs):]
            elif role == "cond":
                outs = [_stoppable(sub.g, outs[0])]
            root.subgraphs[index - 1] = sub.g.subgraph(ins, outs, f"{role} {ref}")
        return root._called[key], special


def export(model: Model) -> bytes:
    """The .tflite flatbuffer of ``model`` (known dimensions, no float16)."""
    if fb is None:
        raise Unmappable("exporting to TFLite needs ai-edge-litert's flatbuffer schema")
    return Exporter(model).run()


# ---------------------------------------------------------------------------------------
# Control flow: IF and WHILE, whose subgraphs become TFLite subgraphs


def _if(ex: Exporter, op: Operation) -> None:
    """TFLite IF: the condition tensor, then the branch inputs (NNAPI's order without the two
    subgraph operands). Each branch is exported at the IF's input shapes; where the branches
    give outputs of different shapes, the output is dynamic (its shape the taken branch's)."""
    sg = ex.sg
    dims = [sg.operands[i].dimensions for i in op.inputs[3:]]
    indexes = []
    for position, what in ((1, "then"), (2, "else")):
        index, branch = ex.call(ex.referenced(op, position), dims, "branch")
        for k, (i, j) in enumerate(zip(branch.output_indexes, op.outputs, strict=True)):
            got, declared = branch.operands[i], sg.operands[j]
            if got.fully_specified and declared.fully_specified and got.dimensions != declared.dimensions:
                raise Unmappable(f"the {what} branch gives output {k} of shape {list(got.dimensions)}, "
                                 f"the IF declares {list(declared.dimensions)}")
        indexes.append(index)
    ins = [ex.hal_tensor(i) for i in (op.inputs[0], *op.inputs[3:])]
    outs = [ex.hal_tensor(i, after_run=True) for i in op.outputs]
    ex.g.op("IF", ins, outs, "If", thenSubgraphIndex=indexes[0], elseSubgraphIndex=indexes[1])


#: The name of the variable tensor by which a WHILE loop is stopped (``_stoppable``).
STOP = "nncert_loop_stop"


def _stoppable(g: Graph, condition: int) -> int:
    """A WHILE condition subgraph's output that the driver can turn false from outside, since
    LiteRT cannot be cancelled otherwise (the loop timeout and the deadline, EXE-9, EXE-10):
    ``condition AND NOT stop``, ``stop`` a variable tensor (persistent, zero until written)
    that the driver sets."""
    stop = g.tensor([1], "BOOL", name=STOP)
    g.tensors[stop].isVariable = True
    keep = g.like(condition)
    g.op("LOGICAL_AND", [condition, g.unary("LOGICAL_NOT", stop)], [keep])
    return keep


def stop_flags(content: bytes) -> list[tuple[int, int]]:
    """(subgraph, ``stop`` tensor) of every WHILE condition subgraph of an exported model."""
    model = fb.Model.GetRootAs(content, 0)
    flags = []
    for k in range(1, model.SubgraphsLength()):
        sg = model.Subgraphs(k)
        for i in range(sg.TensorsLength()):
            if sg.Tensors(i).Name() == STOP.encode():
                flags.append((k, i))
    return flags


#: Loop iterations whose shapes a WHILE body with changing shapes is exported at and compared.
SHAPE_CHECK_ITERATIONS = 3


def _while(ex: Exporter, op: Operation) -> None:
    """TFLite WHILE takes N tensors, feeds all N back and gives all N; NNAPI's takes m
    input-output, k state-only and n input-only operands, its body gives m + k and the
    WHILE m. So the TFLite body also gives its last n inputs back unchanged, and the
    WHILE's last k + n TFLite outputs are left unused."""
    sg = ex.sg
    carried = op.inputs[2:]
    dims = [sg.operands[i].dimensions for i in carried]
    cond, _ = ex.call(ex.referenced(op, 0), dims, "cond")
    body, special = ex.call(ex.referenced(op, 1), dims, "body")
    after = [special.operands[i].dimensions for i in special.output_indexes]
    if after != dims[:len(after)]:
        _check_shape_generic(ex, op, dims)
    ins = [ex.hal_tensor(i) for i in carried]
    outs = [ex.hal_tensor(i, after_run=True) for i in op.outputs]
    outs += [ex.g.like(t) for t in ins[len(outs):]]
    ex.g.op("WHILE", ins, outs, "While", condSubgraphIndex=cond, bodySubgraphIndex=body)


def _check_shape_generic(ex: Exporter, op: Operation, dims: list[tuple[int, ...]]) -> None:
    """A loop whose carried shapes change from one iteration to the next runs one TFLite body
    at every shape (TFLite's kernels resize their outputs), but the exporter derives some
    constants and options from shapes (RESHAPE targets, SAME or VALID padding, slice sizes).
    So the condition and body are exported at the shapes of the first iterations and must
    come out the same at each: a loop whose TFLite form depends on its shapes is declined."""
    cond_ref, body_ref = ex.referenced(op, 0), ex.referenced(op, 1)
    forms = []
    for _ in range(SHAPE_CHECK_ITERATIONS):
        scratch = Exporter(ex.model)
        scratch.call(cond_ref, dims, "cond")
        _, special = scratch.call(body_ref, dims, "body")
        forms.append(_form(scratch))
        outs = [special.operands[i] for i in special.output_indexes]
        if not all(o.fully_specified for o in outs):
            raise Unmappable("a WHILE body whose output shapes are known only when it runs")
        dims = [o.dimensions for o in outs] + dims[len(outs):]
    if any(f != forms[0] for f in forms[1:]):
        raise Unmappable("the WHILE's carried shapes change every iteration and its TFLite form "
                         "(constants or options derived from shapes) changes with them")


def _form(root: Exporter) -> list:
    """The exported subgraphs (1, 2, ...) of ``root`` without their tensors' shapes: operators,
    options, tensor types, quantisation and constant data."""
    def data(t: Any) -> bytes | None:
        buf = root.g.buffers[t.buffer].data if t.buffer else None
        return None if buf is None else bytes(np.asarray(buf, np.uint8))

    codes = {i: b for b, i in root.g.codes.items()}
    return [([(t.type, repr(t.quantization and vars(t.quantization)), t.isVariable, data(t))
              for t in sg.tensors],
             [(codes[o.opcodeIndex], list(o.inputs), list(o.outputs), o.builtinOptionsType,
               repr(o.builtinOptions and vars(o.builtinOptions))) for o in sg.operators],
             list(sg.inputs), list(sg.outputs)) for sg in root.subgraphs]


_CONTROL_FLOW: dict[Op, Callable[[Exporter, Operation], None]] = {Op.IF: _if, Op.WHILE: _while}


# ---------------------------------------------------------------------------------------
# Mappings: one function (or table entry) per operation


def _direct(code: str, options: str | None = None, fused: bool = False,
            names: Sequence[str] = ("input",), requant: bool = False,
            **fields: Any) -> Callable[[Node], None]:
    """Operator ``code`` on the inputs ``names`` in order (variadic names expand), with
    fixed option fields and maybe the fused activation."""

    def emit(n: Node) -> None:
        ins = [t for name in names for t in n.ts(name)]
        if requant:
            ins = [n.g.requantize(t, n.out_quant()) for t in ins]
        extra = {"fusedActivationFunction": n.fused()} if fused else {}
        n.g.op(code, ins, [n.out()], options, **fields, **extra)

    return emit


_BINARY = ("input0", "input1")
_TERNARY = ("input0", "input1", "input2")


def _div(n: Node) -> None:
    if n.outputs[0].type is T.TENSOR_INT32:  # NNAPI int32 DIV is floor division
        # TFLite's FLOOR_DIV fails the invocation on a zero divisor, where NNAPI leaves the
        # value unspecified and the execution succeeds: divide by 1 there, and give 0.
        g = n.g
        a, b = n.ts("input0") + n.ts("input1")
        zero = g.unary("EQUAL", b, quant=None, ttype="BOOL", extra=[g.const(0)])
        safe = g.unary("SELECT_V2", zero, quant=None, ttype="INT32", extra=[g.const(1), b])
        safe_shape = g.shapes[b]
        g.shapes[safe] = safe_shape
        g.tensors[safe].shape = list(safe_shape)
        q = g.like(n.ex.hal_tensor(n.op.outputs[0]), quant=None)
        g.op("FLOOR_DIV", [a, safe], [q])
        g.op("SELECT_V2", [zero, g.const(0), q], [n.out()])
    else:
        _direct("DIV", "Div", fused=True, names=_BINARY)(n)


def _elu(n: Node) -> None:
    g = n.g
    alpha = float(n.scalar("alpha"))
    x = n.t("input")
    if alpha == 1.0:
        g.op("ELU", [x], [n.out()])
        return
    e = g.unary("ELU", x)
    neg = g.unary("MINIMUM", e, extra=[g.const(0.0, np.float32)])
    scaled = g.unary("MUL", neg, extra=[g.const(alpha, np.float32)], options="Mul")
    pos = g.unary("RELU", x)
    g.op("ADD", [pos, scaled], [n.out()], "Add")


def _axis_last(n: Node, name: str = "axis") -> tuple[int, int, Callable[[int], None] | None]:
    """(input tensor moved so that ``axis`` is last, rank, finisher writing the output)."""
    rank = n.operand("input").rank
    axis = int(n.scalar(name)) % rank
    x = n.t("input")
    if axis == rank - 1:
        return x, rank, None
    perm = [i for i in range(rank) if i != axis] + [axis]
    back = list(np.argsort(perm))
    xt = n.g.transpose(x, perm)

    def finish(result: int) -> None:
        n.g.op("TRANSPOSE", [result, n.g.const(back)], [n.out()])

    return xt, rank, finish


def _along_axis(code: str, options: str | None = None,
                fields: Callable[[Node], dict] = lambda n: {},
                pre: Callable[[Node, int], int] | None = None,
                rank4: bool = False) -> Callable[[Node], None]:
    """``code`` works on the last axis: move ``axis`` last and back with TRANSPOSEs; with
    ``rank4`` (a kernel that takes only 4-D input) view the input as [1, 1, rows, depth]."""

    def emit(n: Node) -> None:
        g = n.g
        x, _, finish = _axis_last(n)
        if pre is not None:
            x = pre(n, x)
        shape = g.shapes[x]
        if rank4 and len(shape) != 4:
            x = g.unary("RESHAPE", x, [1, 1, -1, shape[-1]], extra=[g.const([1, 1, -1, shape[-1]])])
            g.shapes[x] = (1, 1, int(np.prod(shape[:-1])), shape[-1])
            g.tensors[x].shape = list(g.shapes[x])
        if finish is None and g.shapes[x] == shape:
            g.op(code, [x], [n.out()], options, **fields(n))
            return
        y = g.like(x, quant=n.out_quant())
        g.op(code, [x], [y], options, **fields(n))
        if g.shapes[y] != shape:
            y = g.unary("RESHAPE", y, shape, extra=[g.const(list(shape))])
        if finish is None:
            g.rewire(y, n.out())
        else:
            finish(y)

    return emit


def _ordered(code: str) -> Callable[[Node], None]:
    """An ordering comparison; TFLite's kernels have no bool case, so booleans are compared
    as int32 (CAST is exact: false 0, true 1)."""

    def emit(n: Node) -> None:
        ins = n.ts("input0") + n.ts("input1")
        if n.g.dtypes[ins[0]] == "BOOL":
            ins = [n.g.unary("CAST", t, ttype="INT32", options="Cast",
                             inDataType=fb.TensorType.BOOL, outDataType=fb.TensorType.INT32)
                   for t in ins]
        n.g.op(code, ins, [n.out()])

    return emit


def _select(n: Node) -> None:
    """SELECT_V2 (broadcasting); quantised choices are requantised to the output's
    parameters first (exact: requantising the chosen value is the same)."""
    g = n.g
    q = n.out_quant()
    g.op("SELECT_V2", n.ts("input0") + [g.requantize(t, q) for t in n.ts("input1") + n.ts("input2")],
         [n.out()])


def _prelu(n: Node) -> None:
    """TFLite's PRELU output has the input's shape: broadcast the input first if alpha
    broadcasts it to a larger one."""
    g = n.g
    x = n.t("input")
    shape = tuple(n.outputs[0].dimensions)
    if g.shapes[x] != shape:
        x = g.unary("BROADCAST_TO", x, shape, extra=[g.const(list(shape))])
    g.op("PRELU", [x, n.t("alpha")], [n.out()])


def _beta_mul(n: Node, x: int) -> int:
    beta = float(n.scalar("beta"))
    if beta == 1.0:
        return x
    return n.g.unary("MUL", x, extra=[n.g.const(beta, np.float32)], options="Mul")


# -- windows (convolutions and pools) --

def _pads(n: Node, fh: int, fw: int, dil: tuple[int, int]) -> tuple[str, tuple[int, int, int, int]]:
    """('SAME' | 'VALID', explicit (top, bottom, left, right) still to apply by PAD)."""
    from nncert.ops.window import PADDING_SAME, implicit_padding

    _, h, w, _ = n.in_shape("input")
    sh, sw = int(n.scalar("stride_h")), int(n.scalar("stride_w"))
    if n.signature == "implicit":
        return ("SAME" if int(n.scalar("padding")) == PADDING_SAME else "VALID"), (0, 0, 0, 0)
    pads = tuple(int(n.scalar(k)) for k in ("pad_top", "pad_bottom", "pad_left", "pad_right"))
    if not any(pads):
        return "VALID", pads
    same = implicit_padding(h, sh, fh, PADDING_SAME, dil[0]) + \
        implicit_padding(w, sw, fw, PADDING_SAME, dil[1])
    if pads == same:
        return "SAME", (0, 0, 0, 0)
    return "VALID", pads


def _padded(n: Node, x: int, pads: tuple[int, int, int, int], fill: str = "zero") -> int:
    if not any(pads):
        return x
    g = n.g
    top, bottom, left, right = pads
    shape = list(g.shapes[x])
    shape[1] += top + bottom
    shape[2] += left + right
    p = g.const([[0, 0], [top, bottom], [left, right], [0, 0]])
    if fill == "zero":
        return g.unary("PAD", x, shape, extra=[p])
    # the lowest value of the type: padded taps never win a max
    dtype = {"FLOAT32": np.float32, "UINT8": np.uint8, "INT8": np.int8}[g.dtypes[x]]
    low = -np.inf if dtype == np.float32 else np.iinfo(dtype).min
    return g.unary("PADV2", x, shape, extra=[p, g.const([low], dtype, g.quants[x])])


def _dilation(n: Node) -> tuple[int, int]:
    names = {a.name for a in n.match.signature.inputs}
    if "dilation_h" not in names:
        return 1, 1
    return int(n.scalar("dilation_h")), int(n.scalar("dilation_w"))


def _conv_common(n: Node, code: str, options: str, x: int, filt: int, bias: int, out: int,
                 fh: int, fw: int, dil: tuple[int, int] = (1, 1), **fields: Any) -> None:
    padding, pads = _pads(n, fh, fw, dil)
    n.g.op(code, [_padded(n, x, pads), filt, bias], [out], options,
           padding=getattr(fb.Padding, padding), strideW=int(n.scalar("stride_w")),
           strideH=int(n.scalar("stride_h")), fusedActivationFunction=n.fused(),
           dilationWFactor=dil[1], dilationHFactor=dil[0], **fields)


def _bias_quant(in_quant: Quant, filter_quant: Quant) -> Quant:
    """What TFLite expects of an int32 bias: scale input_scale x filter_scale(s), zp 0."""
    scales = tuple(float(np.float32(in_quant[0][0]) * np.float32(s)) for s in filter_quant[0])
    return scales, (0,) * len(scales), 0


def _shift(q: Quant, ttype: str) -> Quant:
    """The same real values in the other 8-bit type (zero point moved by 128)."""
    delta = 128 if ttype == "UINT8" else -128
    return q[0], tuple(z + delta for z in q[1]), q[2]


def _filtered(n: Node, emit: Callable[[int, int, int, int], None],
              filter_name: str = "filter", int8_zero_point_ok: bool = False) -> None:
    """Call ``emit(input, filter, bias, output)`` in a domain TFLite has kernels for.

    TFLite has no uint8 kernel with a per-channel int8 filter, and its int8 kernels assume a
    filter zero point of 0. Such operations run in the other 8-bit type: QUANTIZE between
    uint8 and int8 of equal scale (zero point +-128) is exact, for input, filter and output.
    """
    g = n.g
    x, f, b = n.t("input"), n.t(filter_name), n.t("bias")
    y = n.out()
    fo = n.operand(filter_name)
    target = None
    if g.dtypes[x] == "UINT8" and fo.channel_quant is not None:
        target = "INT8"
    elif g.dtypes[x] == "INT8" and fo.channel_quant is None and fo.zero_point != 0 \
            and not int8_zero_point_ok:
        target = "UINT8"
    if target and fo.channel_quant is None:
        f = g.unary("QUANTIZE", f, ttype=target, quant=_shift(g.quants[f], target))
    if target:
        x = g.unary("QUANTIZE", x, ttype=target, quant=_shift(g.quants[x], target))
    if g.dtypes[b] == "INT32":
        g.set_quant(b, _bias_quant(g.quants[x], g.quants[f]))
    if not target:
        emit(x, f, b, y)
        return
    inner = g.like(y, ttype=target, quant=_shift(g.quants[y], target))
    emit(x, f, b, inner)
    g.op("QUANTIZE", [inner], [y])


def _conv(n: Node) -> None:
    _, fh, fw, _ = n.operand("filter").dimensions
    _filtered(n, lambda x, f, b, y: _conv_common(n, "CONV_2D", "Conv2D", x, f, b, y, fh, fw,
                                                 _dilation(n)))


def _depthwise(n: Node) -> None:
    _, fh, fw, _ = n.operand("filter").dimensions
    _filtered(n, lambda x, f, b, y: _conv_common(
        n, "DEPTHWISE_CONV_2D", "DepthwiseConv2D", x, f, b, y, fh, fw, _dilation(n),
        depthMultiplier=int(n.scalar("multiplier"))))


def _split(g: Graph, t: int, axis: int, parts: int, quants: Sequence[Quant] | None = None) -> list[int]:
    shape = list(g.shapes[t])
    shape[axis] //= parts
    outs = [g.like(t, shape, quant="same" if quants is None else quants[k]) for k in range(parts)]
    g.op("SPLIT", [g.const(axis), t], outs, "Split", numSplits=parts)
    return outs


def _grouped(n: Node) -> None:
    """SPLIT input, filter and bias into the groups, one CONV_2D per group, CONCATENATION
    of the results along depth. A per-channel filter keeps its scales per group."""
    groups = int(n.scalar("groups"))
    _, fh, fw, _ = n.operand("filter").dimensions
    g = n.g

    def emit(x: int, f: int, b: int, y: int) -> None:
        if groups == 1:
            _conv_common(n, "CONV_2D", "Conv2D", x, f, b, y, fh, fw)
            return
        fq, bq = g.quants[f], g.quants[b]
        per_channel = fq is not None and len(fq[0]) > 1

        def piece(q: Quant, k: int) -> Quant:
            if q is None or len(q[0]) == 1:
                return q
            m = len(q[0]) // groups
            return q[0][k * m:(k + 1) * m], q[1][k * m:(k + 1) * m], q[2]

        xs = _split(g, x, 3, groups)
        fs = _split(g, f, 0, groups, [piece(fq, k) for k in range(groups)] if per_channel else None)
        bs = _split(g, b, 0, groups, [piece(bq, k) for k in range(groups)] if per_channel else None)
        shape = list(g.shapes[y])
        shape[3] //= groups
        ys = [g.like(y, shape) for _ in range(groups)]
        for xk, fk, bk, yk in zip(xs, fs, bs, ys, strict=True):
            _conv_common(n, "CONV_2D", "Conv2D", xk, fk, bk, yk, fh, fw)
        g.op("CONCATENATION", ys, [y], "Concatenation", axis=3, fusedActivationFunction=0)

    _filtered(n, emit)


def _transpose_conv(n: Node) -> None:
    """TFLite TRANSPOSE_CONV places the full result at an offset of -head (0 for VALID, the
    convolution-style head for SAME) and crops it to output_shape; other heads (and outputs
    other than the full one under VALID, which XNNPACK does not crop) compute a larger
    output and SLICE it."""
    from nncert.ops.window import PADDING_SAME, implicit_padding, transpose_implicit_padding

    g = n.g
    _, fh, fw, _ = n.operand("filter").dimensions
    nb, oh, ow, oc = n.out_shape()
    _, h, w, _ = n.in_shape("input")
    sh, sw = int(n.scalar("stride_h")), int(n.scalar("stride_w"))
    if n.signature == "implicit":
        scheme = int(n.scalar("padding"))
        head = (transpose_implicit_padding(oh, sh, fh, scheme)[0],
                transpose_implicit_padding(ow, sw, fw, scheme)[0])
    else:
        head = (int(n.scalar("pad_top")), int(n.scalar("pad_left")))
    same = (implicit_padding(oh, sh, fh, PADDING_SAME)[0], implicit_padding(ow, sw, fw, PADDING_SAME)[0])
    full = (sh * (h - 1) + fh, sw * (w - 1) + fw)

    def emit(x: int, f: int, b: int, y: int) -> None:
        opts = dict(strideW=sw, strideH=sh)
        same_fits = (h, w) == (-(-oh // sh), -(-ow // sw))  # TFLite checks this for SAME
        if (head == (0, 0) and (oh, ow) == full) or (head == same != (0, 0) and same_fits):
            padding = "VALID" if head == (0, 0) else "SAME"
            g.op("TRANSPOSE_CONV", [g.const([nb, oh, ow, oc]), f, x, b], [y], "TransposeConv",
                 padding=getattr(fb.Padding, padding), **opts)
            return
        big = [nb, max(oh + head[0], full[0]), max(ow + head[1], full[1]), oc]
        whole = g.like(y, big)
        g.op("TRANSPOSE_CONV", [g.const(big), f, x, b], [whole], "TransposeConv",
             padding=fb.Padding.VALID, **opts)
        g.op("SLICE", [whole, g.const([0, head[0], head[1], 0]), g.const([nb, oh, ow, oc])], [y])

    _filtered(n, emit)


def _fully_connected(n: Node) -> None:
    _filtered(n, lambda x, f, b, y: n.g.op("FULLY_CONNECTED", [x, f, b], [y], "FullyConnected",
                                           fusedActivationFunction=n.fused(), keepNumDims=False),
              "weights", int8_zero_point_ok=True)


def _pool(code: str) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        g = n.g
        fh, fw = int(n.scalar("filter_h")), int(n.scalar("filter_w"))
        padding, pads = _pads(n, fh, fw, (1, 1))
        x = n.t("input")
        fields = dict(padding=getattr(fb.Padding, padding), strideW=int(n.scalar("stride_w")),
                      strideH=int(n.scalar("stride_h")), filterWidth=fw, filterHeight=fh)
        if not any(pads):
            g.op(code, [x], [n.out()], "Pool2D", fusedActivationFunction=n.fused(), **fields)
        elif code == "MAX_POOL_2D":
            g.op(code, [_padded(n, x, pads, fill="lowest")], [n.out()], "Pool2D",
                 fusedActivationFunction=n.fused(), **fields)
        elif g.dtypes[x] == "FLOAT32":
            # Padded taps must not count: pool the zero-padded input over the whole window,
            # then rescale each position by window area / taps inside the input.
            from nncert.ops.window import Window, valid_counts

            padded = _padded(n, x, pads)  # first: a padding too large to map stops here
            _, h, w, _ = n.in_shape("input")
            win = Window((fh, fw), (int(n.scalar("stride_h")), int(n.scalar("stride_w"))), (1, 1),
                         pads[:2], pads[2:])
            counts = valid_counts(win, h, w).astype(np.float64)
            ratio = fh * fw / counts
            if code == "L2_POOL_2D":
                ratio = np.sqrt(ratio)
            pooled = g.unary(code, padded, n.out_shape(), options="Pool2D",
                             fusedActivationFunction=0, **fields)
            g.op("MUL", [pooled, g.const(ratio[None, :, :, None], np.float32)], [n.out()], "Mul",
                 fusedActivationFunction=n.fused())
        else:
            raise Unmappable(f"TFLite's quantised {code} has only SAME and VALID padding and "
                             f"padded taps must not count: explicit padding {list(pads)} (top, "
                             f"bottom, left, right) is neither")

    return emit


# -- shapes --

def _with_const(code: str, value: Callable[[Node], Any], options: str | None = None,
                fields: Callable[[Node], dict] = lambda n: {}) -> Callable[[Node], None]:
    """``code`` on the input and a constant int32 tensor computed from parameters."""

    def emit(n: Node) -> None:
        n.g.op(code, [n.t("input"), n.g.const(value(n))], [n.out()], options, **fields(n))

    return emit


def _transpose(n: Node) -> None:
    perm = n.t("perm") if n.has("perm") else n.g.const(list(range(n.operand("input").rank))[::-1])
    n.g.op("TRANSPOSE", [n.t("input"), perm], [n.out()])


def _squeeze(n: Node) -> None:
    shape = n.operand("input").dimensions
    dims = n.value("squeeze_dims").reshape(-1).tolist() if n.has("squeeze_dims") else []
    if not dims:  # NNAPI: all dimensions of size 1
        dims = [i for i, d in enumerate(shape) if d == 1]
    if len({int(d) % len(shape) for d in dims}) == len(shape):
        # Every dimension squeezed: NNAPI keeps [1], TFLite a scalar (see _reduce).
        n.g.op("RESHAPE", [n.t("input"), n.g.const([1])], [n.out()])
        return
    n.g.op("SQUEEZE", [n.t("input")], [n.out()], "Squeeze", squeezeDims=[int(d) for d in dims])


def _strided_slice(n: Node) -> None:
    rank = n.operand("input").rank
    shrink = int(n.scalar("shrink_axis_mask"))
    fields = dict(beginMask=int(n.scalar("begin_mask")), endMask=int(n.scalar("end_mask")),
                  shrinkAxisMask=shrink)
    ins = [n.t("input"), n.t("begin"), n.t("end"), n.t("strides")]
    if shrink & ((1 << rank) - 1) != (1 << rank) - 1:
        n.g.op("STRIDED_SLICE", ins, [n.out()], "StridedSlice", **fields)
        return
    # Every axis shrunk: NNAPI gives [1], TFLite a scalar (see _reduce).
    one = n.g.unary("STRIDED_SLICE", ins[0], [], extra=ins[1:], options="StridedSlice", **fields)
    n.g.op("RESHAPE", [one, n.g.const([1])], [n.out()])


def _reshape(n: Node) -> None:
    n.g.op("RESHAPE", [n.t("input"), n.g.const(list(n.outputs[0].dimensions))], [n.out()])


def _reduce(code: str, options: str = "Reducer") -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        keep = bool(n.scalar("keep_dims") > 0)
        x = n.t("input")
        if code in ("REDUCE_MAX", "REDUCE_MIN"):
            x = n.g.requantize(x, n.out_quant())
        if keep or not _reduces_every_axis(n):
            n.g.op(code, [x, n.t("axes")], [n.out()], options, keepDims=keep)
            return
        # NNAPI gives [1] where every axis is reduced without keep_dims, TFLite a scalar,
        # which a consumer of the result (PAD, CONCATENATION) then reads as rank 0.
        kept = n.g.unary(code, x, [1] * n.operand("input").rank, quant=n.g.quants[x],
                         extra=[n.t("axes")], options=options, keepDims=True)
        n.g.op("RESHAPE", [kept, n.g.const([1])], [n.out()])

    return emit


def _reduces_every_axis(n: Node) -> bool:
    rank = n.operand("input").rank
    try:
        axes = n.value("axes").reshape(-1)
    except Unmappable:
        return False
    return len({int(a) % rank for a in axes}) == rank


def _arg(code: str, options: str) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        axis = n.g.const([int(n.scalar("axis"))])
        if n.operand("input").rank > 1:
            n.g.op(code, [n.t("input"), axis], [n.out()], options, outputType=fb.TensorType.INT32)
            return
        # A rank-1 input: NNAPI gives [1], TFLite a scalar (see _reduce).
        index = n.g.unary(code, n.t("input"), [], quant=None, ttype="INT32", extra=[axis],
                          options=options, outputType=fb.TensorType.INT32)
        n.g.op("RESHAPE", [index, n.g.const([1])], [n.out()])

    return emit


def _pad_v2(n: Node) -> None:
    g = n.g
    x = n.t("input")
    v = n.scalar("pad_value")
    dtype = {"FLOAT32": np.float32, "UINT8": np.uint8, "INT8": np.int8}[g.dtypes[x]]
    g.op("PADV2", [x, n.t("paddings"), g.const([v], dtype, g.quants[x])], [n.out()])


def _resize(code: str, options: str) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        _, oh, ow, _ = n.out_shape()
        align, half = bool(n.scalar("align_corners")), bool(n.scalar("half_pixel_centers"))
        n.g.op(code, [n.t("input"), n.g.const([oh, ow])], [n.out()], options,
               alignCorners=align, halfPixelCenters=half)

    return emit


def _cast(n: Node) -> None:
    g = n.g
    x = n.t("input")
    src, dst = n.operand("input").type, n.outputs[0].type
    if src == dst:  # identity (scale and zero point ignored): a copy
        g.op("RESHAPE", [x, g.const(list(n.outputs[0].dimensions))], [n.out()])
        return
    if dst is T.TENSOR_QUANT8_ASYMM and src is not T.TENSOR_QUANT8_ASYMM:  # saturate to 0..255
        dt = np.float32 if g.dtypes[x] == "FLOAT32" else np.int32
        x = g.unary("MAXIMUM", x, quant=None, extra=[g.const(0, dt)])
        x = g.unary("MINIMUM", x, quant=None, extra=[g.const(255, dt)])
    g.op("CAST", [x], [n.out()], "Cast", inDataType=getattr(fb.TensorType, g.dtypes[x]),
         outDataType=getattr(fb.TensorType, tflite_type(dst)))


def _batch_to_space(n: Node) -> None:
    n.g.op("BATCH_TO_SPACE_ND", [n.t("input"), n.t("block_shape"), n.g.const([[0, 0], [0, 0]])],
           [n.out()], "BatchToSpaceND")


def _lrn_fields(n: Node) -> dict:
    return dict(radius=int(n.scalar("radius")), bias=float(n.scalar("bias")),
                alpha=float(n.scalar("alpha")), beta=float(n.scalar("beta")))


MAPPINGS: dict[Op, Callable[[Node], None]] = {
    Op.ADD: _direct("ADD", "Add", fused=True, names=_BINARY),
    Op.SUB: _direct("SUB", "Sub", fused=True, names=_BINARY),
    Op.MUL: _direct("MUL", "Mul", fused=True, names=_BINARY),
    Op.DIV: _div,
    Op.MAXIMUM: _direct("MAXIMUM", names=_BINARY, requant=True),
    Op.MINIMUM: _direct("MINIMUM", names=_BINARY, requant=True),
    Op.ABS: _direct("ABS"),
    Op.NEG: _direct("NEG"),
    Op.EXP: _direct("EXP"),
    Op.LOG: _direct("LOG"),
    Op.SIN: _direct("SIN"),
    Op.SQRT: _direct("SQRT"),
    Op.RSQRT: _direct("RSQRT"),
    Op.FLOOR: _direct("FLOOR"),
    Op.EQUAL: _direct("EQUAL", names=_BINARY),
    Op.NOT_EQUAL: _direct("NOT_EQUAL", names=_BINARY),
    Op.GREATER: _ordered("GREATER"),
    Op.GREATER_EQUAL: _ordered("GREATER_EQUAL"),
    Op.LESS: _ordered("LESS"),
    Op.LESS_EQUAL: _ordered("LESS_EQUAL"),
    Op.LOGICAL_AND: _direct("LOGICAL_AND", names=_BINARY),
    Op.LOGICAL_OR: _direct("LOGICAL_OR", names=_BINARY),
    Op.LOGICAL_NOT: _direct("LOGICAL_NOT"),
    Op.SELECT: _select,
    Op.RELU: _direct("RELU"),
    Op.RELU1: _direct("RELU_N1_TO_1"),
    Op.RELU6: _direct("RELU6"),
    Op.LOGISTIC: _direct("LOGISTIC"),
    Op.TANH: _direct("TANH"),
    Op.HARD_SWISH: _direct("HARD_SWISH"),
    Op.ELU: _elu,
    Op.PRELU: _prelu,
    Op.SOFTMAX: _along_axis("SOFTMAX", "Softmax", lambda n: {"beta": float(n.scalar("beta"))}),
    Op.LOG_SOFTMAX: _along_axis("LOG_SOFTMAX", pre=_beta_mul),
    Op.L2_NORMALIZATION: _along_axis("L2_NORMALIZATION", "L2Norm",
                                     lambda n: {"fusedActivationFunction": 0}),
    Op.LOCAL_RESPONSE_NORMALIZATION: _along_axis("LOCAL_RESPONSE_NORMALIZATION",
                                                 "LocalResponseNormalization", _lrn_fields,
                                                 rank4=True),
    Op.CONV_2D: _conv,
    Op.DEPTHWISE_CONV_2D: _depthwise,
    Op.GROUPED_CONV_2D: _grouped,
    Op.TRANSPOSE_CONV_2D: _transpose_conv,
    Op.FULLY_CONNECTED: _fully_connected,
    Op.AVERAGE_POOL_2D: _pool("AVERAGE_POOL_2D"),
    Op.MAX_POOL_2D: _pool("MAX_POOL_2D"),
    Op.L2_POOL_2D: _pool("L2_POOL_2D"),
    Op.RESHAPE: _reshape,
    Op.CONCATENATION: lambda n: _direct("CONCATENATION", "Concatenation", names=("input",),
                                        requant=True, fused=True,
                                        axis=int(n.scalar("axis")))(n),
    Op.PAD: _direct("PAD", names=("input", "paddings")),
    Op.PAD_V2: _pad_v2,
    Op.SQUEEZE: _squeeze,
    Op.TRANSPOSE: _transpose,
    Op.SLICE: _direct("SLICE", names=("input", "begin", "size")),
    Op.STRIDED_SLICE: _strided_slice,
    Op.TILE: _direct("TILE", names=("input", "multiples")),
    Op.GATHER: lambda n: _direct("GATHER", "Gather", names=("input", "indices"),
                                 axis=int(n.scalar("axis")))(n),
    Op.EXPAND_DIMS: _with_const("EXPAND_DIMS", lambda n: [int(n.scalar("axis"))]),
    Op.MEAN: _reduce("MEAN"),
    Op.REDUCE_SUM: _reduce("SUM"),
    Op.REDUCE_PROD: _reduce("REDUCE_PROD"),
    Op.REDUCE_MAX: _reduce("REDUCE_MAX"),
    Op.REDUCE_MIN: _reduce("REDUCE_MIN"),
    Op.REDUCE_ANY: _reduce("REDUCE_ANY"),
    Op.REDUCE_ALL: _reduce("REDUCE_ALL"),
    Op.ARGMAX: _arg("ARG_MAX", "ArgMax"),
    Op.ARGMIN: _arg("ARG_MIN", "ArgMin"),
    Op.QUANTIZE: _direct("QUANTIZE"),
    Op.DEQUANTIZE: _direct("DEQUANTIZE"),
    Op.CAST: _cast,
    Op.RESIZE_BILINEAR: _resize("RESIZE_BILINEAR", "ResizeBilinear"),
    Op.RESIZE_NEAREST_NEIGHBOR: _resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighbor"),
    Op.DEPTH_TO_SPACE: lambda n: _direct("DEPTH_TO_SPACE", "DepthToSpace",
                                         blockSize=int(n.scalar("block_size")))(n),
    Op.SPACE_TO_DEPTH: lambda n: _direct("SPACE_TO_DEPTH", "SpaceToDepth",
                                         blockSize=int(n.scalar("block_size")))(n),
    Op.BATCH_TO_SPACE_ND: _batch_to_space,
    Op.SPACE_TO_BATCH_ND: _direct("SPACE_TO_BATCH_ND", "SpaceToBatchND",
                                  names=("input", "block_shape", "paddings")),
}


def operation_problem(model: Model, index: int, subgraph: Subgraph | None = None) -> str | None:
    """Static reasons operation ``index`` of ``subgraph`` (default: the main one) cannot be
    exported (before any probe); an IF / WHILE is judged with every operation of the
    subgraphs it references."""
    sg = model.main if subgraph is None else subgraph
    op = sg.operations[index]
    if op.type in _CONTROL_FLOW:
        return _control_flow_problem(model, sg, op)
    if op.type not in MAPPINGS:
        return f"TFLite has no {op.type.name} (the LiteRT exporter does not map it)"
    for i in op.inputs:
        o = sg.operands[i]
        if o.type.is_scalar and o.lifetime not in CONSTANT and o.lifetime is not OperandLifeTime.NO_VALUE:
            return (f"{op.type.name}'s scalar parameters become TFLite operator options, so they "
                    f"must be constants (operand {i} is not)")
    for i in list(op.inputs) + list(op.outputs):
        problem = _operand_problem(sg.operands[i], i)
        if problem:
            return problem
    return None


def _operand_problem(o: Operand, i: int) -> str | None:
    if o.type.is_tensor and o.type not in _TYPES and o.lifetime is not OperandLifeTime.NO_VALUE:
        return f"TFLite has no tensor type for {o.type.name}"
    scales = o.channel_quant.scales if o.channel_quant else (o.scale,) if o.type.is_quant else ()
    extreme = [x for x in scales if not QUANT_SCALE_RANGE[0] <= x <= QUANT_SCALE_RANGE[1]]
    if extreme:
        return (f"operand {i} has quantisation scale {extreme[0]:g}: LiteRT's fixed-point "
                f"rescaling aborts or crashes outside [2^-32, 2^32] (found by fuzzing)")
    return None


def _control_flow_problem(model: Model, sg: Subgraph, op: Operation) -> str | None:
    """An IF / WHILE passes tensors only (TFLite subgraphs take no scalars); the operations
    of the subgraphs it references (and theirs, nested) must be exportable."""
    refs = []
    for i in list(op.inputs) + list(op.outputs):
        o = sg.operands[i]
        if o.type is T.SUBGRAPH:
            refs.append(o.location.offset)
            continue
        if o.type.is_scalar:
            return (f"TFLite's {op.type.name} passes tensors only, operand {i} is a scalar "
                    f"{o.type.name}")
        problem = _operand_problem(o, i)
        if problem:
            return problem
    for ref in dict.fromkeys(refs):
        inner = model.referenced[ref]
        for n, inner_op in enumerate(inner.operations):
            problem = operation_problem(model, n, inner)
            if problem:
                return f"subgraph {ref}, operation {n} ({inner_op.type.name}): {problem}"
    return None


# The mappings of the operation families that keep theirs in a module of their own.
add_family_mappings("nncert.drivers.litert.mappings", MAPPINGS)
