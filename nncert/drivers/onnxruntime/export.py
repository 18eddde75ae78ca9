"""HAL model -> ONNX model (onnx.helper), for the ONNX Runtime driver.

One entry in ``MAPPINGS`` per catalogue operation; the shared machinery is here:

- every HAL operand ``i`` is the ONNX tensor ``t{i}`` in its stored type (uint8 / int8 for
  quantised tensors, int32, bool, float32: float16 was widened by the caller); constants
  are initializers;
- **layout**: ONNX's Conv / Pool / Resize / DepthToSpace are NCHW. An operation asks for
  its inputs in the layout it computes in (``Emit.val(name, "nchw")``) and hands its result
  back in that layout; Transpose nodes are added only where the HAL operand is in the
  other one (NHWC by default, NCHW when the ``layout`` input is true);
- **quantisation**: a quantised input is read in the real domain by DequantizeLinear
  (per-axis for per-channel filters; an int32 bias with scale input_scale x filter_scale);
  the result gets the fused activation (Relu / Clip) and QuantizeLinear into the output's
  scale and zero point (QDQ, which ORT fuses into quantised kernels at its higher
  optimisation levels where its CPU kernels allow: QLinearAdd, QLinearConv for uint8
  activations, ...). Pure data movement whose quantised operands all share one scale
  and zero point works on the stored integers directly. With ``quant="qlinear"`` the
  convolutions and fully connected layers are QLinearConv (fused activation as an integer
  Clip, which is exact), ADD / MUL / AVERAGE_POOL_2D / LOGISTIC the com.microsoft QLinear*
  kernels; everything else stays QDQ;
- parameters (scalars, shape vectors) are read by argument name through the catalogue's
  signatures (``nncert.ops.base.match`` / ``evaluate.bind``); one that is not a constant
  where ONNX needs an attribute or a fixed shape makes the operation ``Unmappable``.

The model's tensors all have known dimensions here: output dimensions are used directly
for Reshape targets.

Control flow: IF is an If whose branch graphs read the IF's inputs from the enclosing graph
(Identity nodes give them the branch's names); WHILE is a Loop without trip count over all
m + k + n operands, the condition subgraph inlined before it (on the initial values) and
at the end of its body (on the new ones, giving the Loop's condition), the input-only
values passed through. Referenced subgraphs are exported per call, their dimensions filled
in from the call's input shapes (``specialize_subgraph``); an If / Loop output whose shape
the branch or the loop decides has unknown dimensions. A loop whose carried shapes change
every iteration is taken only when its body comes out the same at the shapes of its first
iterations (the constants derived from shapes would otherwise be wrong later).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.hal.model import Model, Operand, Operation, Subgraph, dtype_of
from nncert.hal.transform import ShapeUnknown, specialize_subgraph
from nncert.hal.types import FusedActivationFunc, OperandLifeTime, OperationType
from nncert.hal.types import OperandType as T
from nncert.ops import add_family_mappings
from nncert.ops import get as get_record
from nncert.ops.base import ShapeError, Unknown, match
from nncert.ops.evaluate import bind, known_inputs

Op = OperationType
OPSET = 21
MS_DOMAIN = "com.microsoft"
NHWC_TO_NCHW = (0, 3, 1, 2)
NCHW_TO_NHWC = (0, 2, 3, 1)
CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)
_MISSING = object()


def _tensor_proto_type(dtype: np.dtype) -> int:
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


# ---------------------------------------------------------------------------------------
# The graph under construction


class Graph:
    """The nodes and initializers of one ONNX graph: the model's, or a subgraph of an If /
    Loop (``sg`` a referenced subgraph, ``parent`` the graph it is nested in), whose HAL
    operand names carry a prefix of their own: ONNX names are unique across nested graphs."""

    def __init__(self, model: Model, quant: str, sg: Subgraph | None = None,
                 parent: Graph | None = None, prefix: str = "", unroll_rnn: bool = False) -> None:
        self.model = model
        self.sg = model.main if sg is None else sg
        self.quant = quant
        #: Every recurrent cell unrolled (mappings/recurrent.py), none written as an ONNX RNN
        #: node: for a runtime whose importer has no RNN (TVM's Relax frontend).
        self.unroll_rnn = unroll_rnn if parent is None else parent.unroll_rnn
        self.prefix = prefix
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._consts: dict[tuple, str] = {}
        self._made: set[int] = set()  # HAL constants already made initializers
        self._dq: dict[tuple, str] = {}
        self._raw: dict[tuple, str] = {}
        self._producer: dict[str, Any] = {}
        self._root: Graph = self if parent is None else parent._root
        self._n = 0  # the root's counts every graph's fresh names
        self.uses_ms = False  # the root's says whether any graph does

    def fresh(self, hint: str = "v") -> str:
        self._root._n += 1
        return f"_{hint}{self._root._n}"

    def name(self, index: int) -> str:
        """The ONNX name of HAL operand ``index``."""
        return f"{self.prefix}t{index}"

    def const(self, value: Any, dtype: Any) -> str:
        from onnx import numpy_helper
        arr = np.array(value, dtype=dtype, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        name = self._consts.get(key)
        if name is None:
            name = self.fresh("c")
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return name

    def node(self, op_type: str, inputs: list[str], out: str | None = None, domain: str = "",
             **attrs: Any) -> str:
        from onnx import helper
        out = out or self.fresh(op_type.lower())
        n = helper.make_node(op_type, inputs, [out], domain=domain or None, **attrs)
        if domain == MS_DOMAIN:
            self._root.uses_ms = True
        self.nodes.append(n)
        self._producer[out] = n
        return out

    def bind_output(self, value: str, index: int) -> None:
        """Make ``value`` HAL operand ``index``'s tensor t{index}: the node producing a fresh
        intermediate is renamed, anything else gets an Identity."""
        target = self.name(index)
        n = self._producer.get(value)
        if n is not None and value.startswith("_") and value not in self._dq.values() and \
                value not in self._raw.values():
            n.output[0] = target
            del self._producer[value]
            self._producer[target] = n
            self._renamed(value, target)
        else:
            self.node("Identity", [value], target)

    def _renamed(self, old: str, new: str) -> None:
        for n in self.nodes:
            for k, name in enumerate(n.input):
                if name == old:
                    n.input[k] = new

    # -- HAL operands --
    def operand(self, index: int) -> Operand:
        return self.sg.operands[index]

    def raw(self, index: int, perm: tuple[int, ...] | None = None) -> str:
        """HAL operand ``index`` in its stored type, dimensions permuted by ``perm`` (a
        constant is permuted here, once; anything else by a Transpose node)."""
        o = self.operand(index)
        const = o.lifetime in CONSTANT
        if perm is not None and list(perm) != list(range(len(perm))):
            key = (index, tuple(perm))
            if key not in self._raw:
                if const:
                    self._raw[key] = self.const(np.transpose(self.model.constant_value(o), perm),
                                                dtype_of(o.type))
                else:
                    self._raw[key] = self.node("Transpose", [self.raw(index)], perm=list(perm))
            return self._raw[key]
        name = self.name(index)
        if const and index not in self._made:
            from onnx import numpy_helper
            self.initializers.append(numpy_helper.from_array(
                np.array(self.model.constant_value(o), order="C"), name))
            self._made.add(index)
        return name

    def real(self, index: int, perm: tuple[int, ...] | None = None) -> str:
        """HAL operand ``index`` in the real domain: quantised tensors dequantised to float32,
        other types as stored."""
        o = self.operand(index)
        name = self.raw(index, perm)
        if not o.type.is_quant:
            return name
        key = (index, tuple(perm or ()))
        if key not in self._dq:
            self._dq[key] = self.dequantize(name, o, perm)
        return self._dq[key]

    def dequantize(self, name: str, o: Operand, perm: tuple[int, ...] | None = None) -> str:
        """DequantizeLinear of ``name``, stored integers of ``o`` (dimensions permuted by
        ``perm``); other types pass through."""
        if not o.type.is_quant:
            return name
        scale, zp, axis = self.qparams(o, perm)
        return self.node("DequantizeLinear", [name, scale, zp], **({} if axis is None else {"axis": axis}))

    def qparams(self, o: Operand, perm: tuple[int, ...] | None = None) -> tuple[str, str, int | None]:
        """(scale, zero point, axis or None) initializers of a quantised operand."""
        dt = dtype_of(o.type)
        if o.channel_quant is not None:
            scales = np.asarray(o.channel_quant.scales, np.float32)
            axis = o.channel_quant.channel_dim
            if perm is not None:
                axis = list(perm).index(axis)
            return self.const(scales, np.float32), self.const(np.zeros(len(scales), dt), dt), axis
        return self.const(o.scale, np.float32), self.const(o.zero_point, dt), None

    def quantize(self, value: str, o: Operand, out: str | None = None) -> str:
        scale, zp, axis = self.qparams(o)
        return self.node("QuantizeLinear", [value, scale, zp], out,
                         **({} if axis is None else {"axis": axis}))


# ---------------------------------------------------------------------------------------
# One operation instance


class Emit:
    """Named access to one operation's operands and parameters, and its output."""

    def __init__(self, g: Graph, index: int, spec: Mapping) -> None:
        self.g = g
        op = g.sg.operations[index]
        self.op = op
        self.record = get_record(op.type)
        self.spec = spec
        ins, vals = known_inputs(self.record, g.model, g.sg.operands, op.inputs)
        outs = [g.operand(i) for i in op.outputs]
        try:
            m = match(self.record, [None if o is None else o.type for o in ins], [o.type for o in outs])
        except ShapeError as e:
            raise Unmappable(str(e)) from None
        self.ctx = bind(self.record, ins, vals, outs, m)  # NHWC view of shapes and values
        self.ins = ins
        self.outs = outs
        self.nchw = self.ctx.nchw if self.record.layout else False
        # Raw mode: data movement whose quantised operands share one scale and zero point.
        self.raw_mode = False
        if spec.move:
            q = [o for o in ins + outs if o is not None and o.type.is_tensor and o.type.is_quant]
            self.raw_mode = all((o.scale, o.zero_point) == (q[0].scale, q[0].zero_point)
                                and o.channel_quant is None for o in q)

    # -- parameters --
    def index(self, name: str) -> int | None:
        pos = self.ctx.positions(name)
        return self.op.inputs[pos[0]] if pos else None

    def indexes(self, name: str) -> list[int]:
        return [self.op.inputs[p] for p in self.ctx.positions(name)]

    def has(self, name: str) -> bool:
        return self.ctx.has(name)

    def operand(self, name: str) -> Operand:
        return self.ctx.operand(name)

    def value(self, name: str, default: Any = _MISSING) -> Any:
        """A constant parameter's value (real for quantised tensors, raw for int/bool ones;
        the signature's default for an absent optional input)."""
        try:
            if default is _MISSING:
                return self.ctx.value(name)
            return self.ctx.value(name, default)
        except Unknown:
            raise Unmappable(f"{self.record.name}: {name} must be a constant for ONNX") from None

    def ints(self, name: str) -> list[int]:
        return [int(v) for v in np.asarray(self.value(name)).reshape(-1)]

    def int64(self, name: str) -> str:
        """An integer tensor parameter as int64 for ONNX: a constant, or a Cast of the
        run-time value."""
        if self.operand(name).lifetime in CONSTANT:
            return self.const(np.asarray(self.value(name), np.int64))
        return self.node("Cast", [self.raw(name)], to=_tensor_proto_type(np.int64))

    def dims(self, name: str) -> tuple[int, ...]:
        """NHWC dimensions of an input."""
        try:
            return self.ctx.dims(name)
        except Unknown:
            raise Unmappable(f"{name} has unknown dimensions") from None

    @property
    def out(self) -> Operand:
        return self.outs[0]

    @property
    def out_dims(self) -> tuple[int, ...]:
        """The output's dimensions as ONNX computes them (NHWC view)."""
        return tuple(self.ctx.outputs[0].dimensions)

    def act(self) -> int:
        return int(self.value(self.record.activation, 0)) if self.record.activation else 0

    # -- tensors --
    def _perm(self, name_layout: bool, want: str | None) -> tuple[int, ...] | None:
        if want is None or not name_layout:
            return None
        if want == "nchw" and not self.nchw:
            return NHWC_TO_NCHW
        if want == "nhwc" and self.nchw:
            return NCHW_TO_NHWC
        return None

    def val(self, name: str, layout: str | None = None, i: int = 0) -> str:
        """Input ``name`` (the i-th of a variadic one) in the real domain (stored integers in
        raw mode), in ``layout`` ("nchw" / "nhwc") for the record's layout inputs."""
        idx = self.indexes(name)
        if not idx:
            raise Unmappable(f"{self.record.name}: input {name} is omitted")
        perm = self._perm(name in self.record.layout_inputs and self.record.layout is not None, layout)
        return self.g.raw(idx[i], perm) if self.raw_mode else self.g.real(idx[i], perm)

    def real(self, name: str, perm: tuple[int, ...] | None = None) -> str:
        return self.g.real(self.index(name), perm)

    def raw(self, name: str, perm: tuple[int, ...] | None = None) -> str:
        return self.g.raw(self.index(name), perm)

    def zero(self) -> str:
        """Logical zero in the type ``val`` gives for input "input"."""
        o = self.operand("input")
        if self.raw_mode and o.type.is_quant:
            return self.g.const(o.zero_point, dtype_of(o.type))
        return self.g.const(0, dtype_of(o.type) if not o.type.is_quant else np.float32)

    def const(self, value: Any, dtype: Any = np.int64) -> str:
        return self.g.const(value, dtype)

    def node(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        return self.g.node(op_type, inputs, **attrs)

    def emit(self, value: str, layout: str | None = None, k: int = 0, activation: bool = True) -> None:
        """Output ``k`` from ``value`` (real, or stored integers in raw mode) computed in
        ``layout``: fused activation, quantisation, transpose back to the HAL layout."""
        o = self.outs[k]
        act = self.act() if activation else 0
        if self.raw_mode and o.type.is_quant:
            value = clip_stored(self.g, value, act, o)
        else:
            value = activate(self.g, value, act)
            if o.type.is_quant:
                value = self.g.quantize(value, o)
        perm = self._perm(self.record.layout is not None and k in self.record.layout_outputs, layout)
        if perm is not None:  # the inverse: from the computed layout back to the HAL one
            value = self.node("Transpose", [value], perm=[perm.index(i) for i in range(4)])
        self.g.bind_output(value, self.op.outputs[k])

    def reshape(self, value: str, dims: tuple[int, ...]) -> str:
        return self.node("Reshape", [value, self.const(list(dims))])


def activate(g: Graph, value: str, act: int) -> str:
    """The fused activation on real values."""
    if act == FusedActivationFunc.NONE:
        return value
    if act == FusedActivationFunc.RELU:
        return g.node("Relu", [value])
    lo, hi = _ACT_RANGE[act]
    return g.node("Clip", [value, g.const(lo, np.float32), g.const(hi, np.float32)])


_ACT_RANGE = {1: (0.0, math.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


def clip_stored(g: Graph, value: str, act: int, o: Operand) -> str:
    """The fused activation on stored integers of ``o``'s quantisation: a Clip at the
    quantised bounds, exact since quantisation is monotonic."""
    if act == FusedActivationFunc.NONE:
        return value
    qmin, qmax = o.type.quant_range
    bounds = []
    for b in _ACT_RANGE[act]:
        if math.isinf(b):
            bounds.append(qmax)
        else:
            q = np.sign(b / o.scale) * np.floor(abs(b / o.scale) + 0.5) + o.zero_point
            bounds.append(int(np.clip(q, qmin, qmax)))
    dt = dtype_of(o.type)
    return g.node("Clip", [value, g.const(bounds[0], dt), g.const(bounds[1], dt)])


# ---------------------------------------------------------------------------------------
# Shared pieces: windows, padding


def same_padding(size: int, stride: int, eff: int) -> tuple[int, int]:
    """SAME: ceil(size / stride) outputs, the needed padding split smaller half first."""
    total = max(0, (-(-size // stride) - 1) * stride + eff - size)
    return total // 2, total - total // 2


def window(e: Emit, fh: int, fw: int) -> dict[str, Any]:
    """Conv / pool attributes (strides, dilations, pads) of a window operation."""
    _, h, w, _ = e.dims("input")
    stride = (int(e.value("stride_h")), int(e.value("stride_w")))
    dil = (1, 1)
    if any(a.name == "dilation_w" for a in e.ctx.signature.inputs):
        dil = (int(e.value("dilation_h")), int(e.value("dilation_w")))
    if e.has("padding"):
        scheme = int(e.value("padding"))
        if scheme == 1:
            ph = same_padding(h, stride[0], (fh - 1) * dil[0] + 1)
            pw = same_padding(w, stride[1], (fw - 1) * dil[1] + 1)
        else:
            ph = pw = (0, 0)
    else:
        ph = (int(e.value("pad_top")), int(e.value("pad_bottom")))
        pw = (int(e.value("pad_left")), int(e.value("pad_right")))
    return {"strides": list(stride), "dilations": list(dil), "pads": [ph[0], pw[0], ph[1], pw[1]]}


# ---------------------------------------------------------------------------------------
# Mappings


class Mapping:
    """How one operation is exported: ``fn`` emits its nodes; ``move`` marks pure data
    movement, done on stored integers when all its quantised operands share parameters."""

    def __init__(self, fn: Callable[[Emit], None], move: bool = False) -> None:
        self.fn = fn
        self.move = move


def _binary(onnx_op: str) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        if e.g.quant == "qlinear" and onnx_op in ("Add", "Mul") and e.out.type.is_quant:
            return _qlinear_binary(e, onnx_op)
        e.emit(e.node(onnx_op, [e.val("input0"), e.val("input1")]))
    return fn


def _qlinear_binary(e: Emit, onnx_op: str) -> None:
    g = e.g
    args = []
    for name in ("input0", "input1"):
        s, z, _ = g.qparams(e.operand(name))
        args += [e.raw(name), s, z]
    s, z, _ = g.qparams(e.out)
    y = g.node(f"QLinear{onnx_op}", [*args, s, z], domain=MS_DOMAIN)
    _emit_int(e, y)


def _emit_int(e: Emit, y: str, layout: str | None = None) -> None:
    """Output from a quantised result already in the output's stored type."""
    raw_mode, e.raw_mode = e.raw_mode, True
    e.emit(y, layout)
    e.raw_mode = raw_mode


def _div(e: Emit) -> None:
    a, b = e.val("input0"), e.val("input1")
    if e.out.type is T.TENSOR_INT32:  # floor division: (a - mod(a, b)) / b is exact
        # A zero divisor fails ORT's Mod; NNAPI leaves the value unspecified and the
        # execution succeeds: divide by 1 there, and give 0.
        zero = e.node("Equal", [b, e.const(0, np.int32)])
        b = e.node("Where", [zero, e.const(1, np.int32), b])
        a = e.node("Sub", [a, e.node("Mod", [a, b], fmod=0)])
        e.emit(e.node("Where", [zero, e.const(0, np.int32), e.node("Div", [a, b])]))
        return
    e.emit(e.node("Div", [a, b]))


def _unary(onnx_op: str, **attrs: Any) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        e.emit(e.node(onnx_op, [e.val("input")], **attrs))
    return fn


def _clip(lo: float, hi: float) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        e.emit(e.node("Clip", [e.val("input"), e.const(lo, np.float32), e.const(hi, np.float32)]))
    return fn


def _rsqrt(e: Emit) -> None:
    e.emit(e.node("Reciprocal", [e.node("Sqrt", [e.val("input")])]))


def _logistic(e: Emit) -> None:
    if e.g.quant == "qlinear" and e.out.type.is_quant:
        g = e.g
        xs, xz, _ = g.qparams(e.operand("input"))
        ys, yz, _ = g.qparams(e.out)
        return _emit_int(e, g.node("QLinearSigmoid", [e.raw("input"), xs, xz, ys, yz], domain=MS_DOMAIN))
    e.emit(e.node("Sigmoid", [e.val("input")]))


def _elu(e: Emit) -> None:
    e.emit(e.node("Elu", [e.val("input")], alpha=float(e.value("alpha"))))


def _prelu(e: Emit) -> None:
    x = e.val("input")
    out = e.out_dims
    if tuple(e.dims("input")) != out:  # ONNX PRelu broadcasts alpha to input only
        x = e.node("Expand", [x, e.const(list(out))])
    e.emit(e.node("PRelu", [x, e.val("alpha")]))


def _softmax(onnx_op: str) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        x = e.val("input")
        beta = float(e.value("beta"))
        if beta != 1.0:
            x = e.node("Mul", [x, e.const(beta, np.float32)])
        e.emit(e.node(onnx_op, [x], axis=int(e.value("axis"))))
    return fn


def _l2_norm(e: Emit) -> None:
    e.emit(e.node("LpNormalization", [e.val("input")], p=2, axis=int(e.value("axis"))))


def _lrn(e: Emit) -> None:
    """NNAPI: x / (bias + alpha * sum over |j - i| <= radius of x_j^2) ** beta along axis.
    ONNX LRN divides alpha by its size (2 radius + 1) and works on axis 1 of N x C x ...:
    the axis is moved last and the tensor viewed as [M, C, 1, 1]."""
    dims = e.dims("input")
    rank = len(dims)
    axis = int(e.value("axis")) % rank
    radius = int(e.value("radius"))
    size = 2 * radius + 1
    x = e.val("input")
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = tuple(dims[i] for i in perm)
    if axis != rank - 1:
        x = e.node("Transpose", [x], perm=perm)
    x = e.reshape(x, (int(np.prod(moved[:-1])), dims[axis], 1, 1))
    y = e.node("LRN", [x], size=size, alpha=float(e.value("alpha")) * size,
               beta=float(e.value("beta")), bias=float(e.value("bias")))
    y = e.reshape(y, moved)
    if axis != rank - 1:
        y = e.node("Transpose", [y], perm=[perm.index(i) for i in range(rank)])
    e.emit(y)


def _pool(kind: str) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        fh, fw = int(e.value("filter_h")), int(e.value("filter_w"))
        attrs = window(e, fh, fw)
        del attrs["dilations"]
        attrs["kernel_shape"] = [fh, fw]
        if kind == "max":
            y = e.node("MaxPool", [e.val("input", "nchw")], **attrs)
        elif kind == "avg" and e.g.quant == "qlinear" and e.out.type.is_quant:
            g = e.g
            xs, xz, _ = g.qparams(e.operand("input"))
            ys, yz, _ = g.qparams(e.out)
            y = g.node("QLinearAveragePool", [e.raw("input", None if e.nchw else NHWC_TO_NCHW),
                                              xs, xz, ys, yz], domain=MS_DOMAIN,
                       count_include_pad=0, **attrs)
            return _emit_int(e, y, "nchw")
        elif kind == "avg":
            y = e.node("AveragePool", [e.val("input", "nchw")], count_include_pad=0, **attrs)
        else:  # L2: sqrt of the mean square over the taps inside the input
            x = e.val("input", "nchw")
            y = e.node("Sqrt", [e.node("AveragePool", [e.node("Mul", [x, x])],
                                       count_include_pad=0, **attrs)])
        e.emit(y, "nchw")
    return fn


# -- convolutions --

#: Filter permutation HAL -> ONNX weight layout, per operation.
_FILTER_PERM = {
    Op.CONV_2D: (0, 3, 1, 2),  # [O, H, W, I] -> [O, I, H, W]
    Op.GROUPED_CONV_2D: (0, 3, 1, 2),  # [O, H, W, I/g] -> [O, I/g, H, W]
    Op.DEPTHWISE_CONV_2D: (3, 0, 1, 2),  # [1, H, W, C*M] -> [C*M, 1, H, W]
    Op.TRANSPOSE_CONV_2D: (3, 0, 1, 2),  # [O, H, W, I] -> [I, O, H, W]
}


def _bias(e: Emit, filter_name: str) -> str:
    """The bias in the real domain: an int32 bias has scale input_scale x filter_scale (per
    output channel for a per-channel filter) and zero point 0."""
    b = e.operand("bias")
    if b.type is not T.TENSOR_INT32:
        return e.real("bias")
    f, x = e.operand(filter_name), e.operand("input")
    if f.channel_quant is not None:
        scale = np.asarray(f.channel_quant.scales, np.float64) * x.scale
        zp = np.zeros(len(scale), np.int32)
        return e.node("DequantizeLinear", [e.raw("bias"), e.const(scale, np.float32), e.const(zp, np.int32)],
                      axis=0)
    return e.node("DequantizeLinear", [e.raw("bias"), e.const(x.scale * f.scale, np.float32),
                                       e.const(0, np.int32)])


def _conv(e: Emit) -> None:
    kind = e.op.type
    _, fh, fw, _ = e.dims("filter")
    c = e.dims("input")[3]
    attrs = window(e, fh, fw)
    attrs["kernel_shape"] = [fh, fw]
    attrs["group"] = {Op.CONV_2D: 1, Op.DEPTHWISE_CONV_2D: c,
                      Op.GROUPED_CONV_2D: int(e.value("groups")) if kind is Op.GROUPED_CONV_2D else 1}[kind]
    perm = _FILTER_PERM[kind]
    if e.g.quant == "qlinear" and e.out.type.is_quant:
        return _emit_int(e, _qlinear_conv(e, perm, attrs), "nchw")
    y = e.node("Conv", [e.val("input", "nchw"), e.real("filter", perm), _bias(e, "filter")], **attrs)
    e.emit(y, "nchw")


def _qlinear_conv(e: Emit, perm: tuple[int, ...], attrs: dict, x: str | None = None,
                  w: str | None = None, filter_name: str = "filter") -> str:
    """QLinearConv of the stored integers (int32 bias as is); returns the quantised result."""
    g = e.g
    xs, xz, _ = g.qparams(e.operand("input"))
    ws, wz, _ = g.qparams(e.operand(filter_name))
    ys, yz, _ = g.qparams(e.out)
    x = x or e.raw("input", None if e.nchw else NHWC_TO_NCHW)
    w = w or e.raw(filter_name, perm)
    return g.node("QLinearConv", [x, xs, xz, w, ws, wz, ys, yz, e.raw("bias")], **attrs)


def _transpose_conv(e: Emit) -> None:
    """ConvTranspose; a negative padding tail (NNAPI allows it) is ONNX's output_padding."""
    _, h, w, _ = e.dims("input")
    _, fh, fw, _ = e.dims("filter")
    stride = (int(e.value("stride_h")), int(e.value("stride_w")))
    _, oh, ow, _ = e.out_dims
    pads = []
    for size, f, s, out, names in ((h, fh, stride[0], oh, ("pad_top", "pad_bottom")),
                                   (w, fw, stride[1], ow, ("pad_left", "pad_right"))):
        if e.has("padding"):
            head = 0
            if int(e.value("padding")) == 1:
                total = (-(-out // s) - 1) * s + f - out
                head = total // 2 if total > 0 else 0
            tail = s * (size - 1) + f - head - out
        else:
            head, tail = (int(e.value(nm)) for nm in names)
        pads.append((head, tail))
    attrs = {"strides": list(stride), "kernel_shape": [fh, fw],
             "pads": [pads[0][0], pads[1][0], max(pads[0][1], 0), max(pads[1][1], 0)]}
    if min(pads[0][1], pads[1][1]) < 0:
        attrs["output_padding"] = [max(-pads[0][1], 0), max(-pads[1][1], 0)]
    y = e.node("ConvTranspose", [e.val("input", "nchw"), e.real("filter", _FILTER_PERM[Op.TRANSPOSE_CONV_2D]),
                                 _bias(e, "filter")], **attrs)
    e.emit(y, "nchw")


def _fully_connected(e: Emit) -> None:
    units, size = e.dims("weights")
    rows = int(np.prod(e.dims("input"))) // size
    if e.g.quant == "qlinear" and e.out.type.is_quant:  # as a 1x1 QLinearConv
        x = e.reshape(e.raw("input"), (rows, size, 1, 1))
        w = e.reshape(e.raw("weights"), (units, size, 1, 1))
        y = _qlinear_conv(e, (), {}, x, w, "weights")
        return _emit_int(e, e.reshape(y, (rows, units)))
    # Reshape the stored integers, then dequantise: DequantizeLinear feeds Gemm directly.
    x = e.g.dequantize(e.reshape(e.raw("input"), (rows, size)), e.operand("input"))
    e.emit(e.node("Gemm", [x, e.real("weights"), _bias(e, "weights")], transB=1))


# -- shapes and data movement --

def _reshape(e: Emit) -> None:
    e.emit(e.reshape(e.val("input"), e.out_dims))


def _concat(e: Emit) -> None:
    xs = [e.val("input", i=i) for i in range(len(e.indexes("input")))]
    e.emit(e.node("Concat", xs, axis=int(e.value("axis"))))


def _pad(e: Emit) -> None:
    # [rank, 2] (before, after) pairs -> ONNX's [begins..., ends...]
    if e.operand("paddings").lifetime in CONSTANT:
        pads = e.const(np.asarray(e.ints("paddings")).reshape(-1, 2).T.reshape(-1))
    else:
        pads = e.reshape(e.node("Transpose", [e.int64("paddings")], perm=[1, 0]), (-1,))
    value = e.zero()
    if e.has("pad_value"):
        v = e.value("pad_value")
        o = e.operand("input")
        if o.type.is_quant:
            if e.raw_mode:
                value = e.const(int(v), dtype_of(o.type))
            else:
                value = e.const((int(v) - o.zero_point) * o.scale, np.float32)
        else:
            value = e.const(float(v), np.float32)
    e.emit(e.node("Pad", [e.val("input"), pads, value], mode="constant"))


def _transpose(e: Emit) -> None:
    rank = len(e.dims("input"))
    perm = e.ints("perm") if e.has("perm") else list(range(rank - 1, -1, -1))
    e.emit(e.node("Transpose", [e.val("input")], perm=perm))


def _strided_slice(e: Emit) -> None:
    """ONNX Slice clamps begin and end exactly as NNAPI does (negative values count from
    the end; out-of-range values clamp to [0, d] for a positive stride, to [-1, d - 1],
    -1 meaning "before 0", for a negative one). A masked begin or end becomes the extreme
    that clamps to the full range for the stride's sign; shrunk axes are reshaped away."""
    rank = len(e.dims("input"))
    big = e.const(2 ** 62)
    small = e.const(-(2 ** 62))
    steps = e.int64("strides")
    positive = e.node("Greater", [steps, e.const(0)])
    bounds = []
    for name, mask_name, (if_pos, if_neg) in (("begin", "begin_mask", (small, big)),
                                             ("end", "end_mask", (big, small))):
        v = e.int64(name)
        mask = int(e.value(mask_name))
        bits = [bool(mask >> i & 1) for i in range(rank)]
        if any(bits):
            full = e.node("Where", [positive, if_pos, if_neg])
            v = e.node("Where", [e.const(bits, np.bool_), full, v])
        bounds.append(v)
    y = e.node("Slice", [e.val("input"), bounds[0], bounds[1], e.const(list(range(rank))), steps])
    e.emit(e.reshape(y, e.out_dims))


def _slice(e: Emit) -> None:
    begin = e.int64("begin")  # the sizes are the (known) output dimensions
    ends = e.node("Add", [begin, e.const(list(e.out_dims))])
    e.emit(e.node("Slice", [e.val("input"), begin, ends]))


def _tile(e: Emit) -> None:
    # The output dimensions are known: multiples = output / input (no need for the value).
    reps = [o // i for o, i in zip(e.out_dims, e.dims("input"), strict=True)]
    e.emit(e.node("Tile", [e.val("input"), e.const(reps)]))


def _gather(e: Emit) -> None:
    e.emit(e.node("Gather", [e.val("input"), e.raw("indices")], axis=int(e.value("axis"))))


def _d2s(onnx_op: str) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        attrs = {"mode": "DCR"} if onnx_op == "DepthToSpace" else {}
        e.emit(e.node(onnx_op, [e.val("input", "nchw")], blocksize=int(e.value("block_size")), **attrs),
               "nchw")
    return fn


def _batch_to_space(e: Emit) -> None:
    n, h, w, c = e.dims("input")
    _, oh, ow, _ = e.out_dims  # the block shape follows from the known dimensions
    bh, bw = oh // h, ow // w
    no = n // (bh * bw)
    x = e.reshape(e.val("input", "nhwc"), (bh, bw, no, h, w, c))
    x = e.node("Transpose", [x], perm=[2, 3, 0, 4, 1, 5])
    e.emit(e.reshape(x, (no, h * bh, w * bw, c)), "nhwc")


def _space_to_batch(e: Emit) -> None:
    n, h, w, c = e.dims("input")
    _, oh, ow, _ = e.out_dims
    # paddings [[top, bottom], [left, right]] -> ONNX pads [0, top, left, 0, 0, bottom, right, 0].
    # Constant paddings give constant pads and, with the known dimensions, the block: a graph of
    # static shapes (TVM's Pad takes no computed pads).
    if e.operand("paddings").lifetime in CONSTANT:
        (top, bottom), (left, right) = np.asarray(e.ints("paddings")).reshape(2, 2).tolist()
        pads = e.const([0, top, left, 0, 0, bottom, right, 0])
        x = e.node("Pad", [e.val("input", "nhwc"), pads, e.zero()], mode="constant")
        x = e.reshape(x, (n, oh, (h + top + bottom) // oh, ow, (w + left + right) // ow, c))
    else:
        pads = e.node("Pad", [e.node("Transpose", [e.int64("paddings")], perm=[1, 0]), e.const([0, 1, 0, 1])])
        x = e.node("Pad", [e.val("input", "nhwc"), e.reshape(pads, (-1,)), e.zero()], mode="constant")
        block = e.int64("block_shape")
        bh, bw = (e.node("Slice", [block, e.const([k]), e.const([k + 1])]) for k in (0, 1))
        shape = e.node("Concat", [e.const([n, oh]), bh, e.const([ow]), bw, e.const([c])], axis=0)
        x = e.node("Reshape", [x, shape])
    x = e.node("Transpose", [x], perm=[2, 4, 0, 1, 3, 5])
    e.emit(e.reshape(x, e.out_dims), "nhwc")


def _resize(mode: str) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        align = bool(e.value("align_corners"))
        half = bool(e.value("half_pixel_centers"))
        if align and half:
            raise Unmappable("align_corners and half_pixel_centers together")
        n, oh, ow, c = e.out_dims
        if align:
            coord = "align_corners"
        elif half:
            coord = "half_pixel" if mode == "linear" else "tf_half_pixel_for_nn"
        else:
            coord = "asymmetric"
        attrs = {"mode": mode, "coordinate_transformation_mode": coord}
        if mode == "nearest":
            attrs["nearest_mode"] = "round_prefer_ceil" if align else "floor"
        y = e.node("Resize", [e.val("input", "nchw"), "", "", e.const([n, c, oh, ow])], **attrs)
        e.emit(y, "nchw")
    return fn


# -- reductions --

def _reduce(onnx_op: str, via: Any = None) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        x = e.val("input")
        if via is not None:  # bool reductions as max / min of 0 / 1
            x = e.node("Cast", [x], to=_tensor_proto_type(via))
        y = e.node(onnx_op, [x, e.int64("axes")], keepdims=1)
        if via is not None:
            y = e.node("Cast", [y], to=_tensor_proto_type(np.bool_))
        e.emit(e.reshape(y, e.out_dims))
    return fn


def _arg(onnx_op: str) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        y = e.node(onnx_op, [e.val("input")], axis=int(e.value("axis")), keepdims=1)
        y = e.node("Cast", [y], to=_tensor_proto_type(np.int32))
        e.emit(e.reshape(y, e.out_dims))
    return fn


# -- comparisons and logic --

def _compare(onnx_op: str, negate: bool = False) -> Callable[[Emit], None]:
    def fn(e: Emit) -> None:
        a, b = e.val("input0"), e.val("input1")
        if e.operand("input0").type is T.TENSOR_BOOL8 and onnx_op != "Equal":
            a, b = (e.node("Cast", [v], to=_tensor_proto_type(np.int32)) for v in (a, b))
        y = e.node(onnx_op, [a, b])
        if negate:
            y = e.node("Not", [y])
        e.emit(y)
    return fn


def _select(e: Emit) -> None:
    e.emit(e.node("Where", [e.raw("input0"), e.val("input1"), e.val("input2")]))


# -- type conversions --

def _quantize(e: Emit) -> None:
    e.emit(e.val("input"))  # emit quantises into the output type


def _dequantize(e: Emit) -> None:
    e.emit(e.real("input"))


def _cast(e: Emit) -> None:
    """Stored numbers to stored numbers (scale and zero point ignored): floats truncate
    toward zero (ONNX Cast does), a TENSOR_QUANT8_ASYMM output saturates to [0, 255]
    (ONNX Cast would wrap: clipped first)."""
    i, o = e.operand("input"), e.out
    x = e.raw("input")
    if i.type == o.type:
        return e.g.bind_output(e.node("Identity", [x]), e.op.outputs[0])
    if o.type is T.TENSOR_QUANT8_ASYMM and i.type is not T.TENSOR_QUANT8_ASYMM:
        dt = dtype_of(i.type)
        x = e.node("Clip", [x, e.const(0, dt), e.const(255, dt)])
    e.g.bind_output(e.node("Cast", [x], to=_tensor_proto_type(dtype_of(o.type))), e.op.outputs[0])


M = Mapping
MAPPINGS: dict[OperationType, Mapping] = {
    # element-wise arithmetic
    Op.ADD: M(_binary("Add")), Op.SUB: M(_binary("Sub")), Op.MUL: M(_binary("Mul")),
    Op.DIV: M(_div), Op.MAXIMUM: M(_binary("Max")), Op.MINIMUM: M(_binary("Min")),
    Op.ABS: M(_unary("Abs")), Op.NEG: M(_unary("Neg")), Op.FLOOR: M(_unary("Floor")),
    Op.EXP: M(_unary("Exp")), Op.LOG: M(_unary("Log")), Op.SIN: M(_unary("Sin")),
    Op.SQRT: M(_unary("Sqrt")), Op.RSQRT: M(_rsqrt),
    # activations
    Op.RELU: M(_unary("Relu")), Op.RELU1: M(_clip(-1.0, 1.0)), Op.RELU6: M(_clip(0.0, 6.0)),
    Op.LOGISTIC: M(_logistic), Op.TANH: M(_unary("Tanh")), Op.HARD_SWISH: M(_unary("HardSwish")),
    Op.ELU: M(_elu), Op.PRELU: M(_prelu),
    # normalisation
    Op.SOFTMAX: M(_softmax("Softmax")), Op.LOG_SOFTMAX: M(_softmax("LogSoftmax")),
    Op.L2_NORMALIZATION: M(_l2_norm), Op.LOCAL_RESPONSE_NORMALIZATION: M(_lrn),
    # windows
    Op.CONV_2D: M(_conv), Op.DEPTHWISE_CONV_2D: M(_conv), Op.GROUPED_CONV_2D: M(_conv),
    Op.TRANSPOSE_CONV_2D: M(_transpose_conv), Op.FULLY_CONNECTED: M(_fully_connected),
    Op.AVERAGE_POOL_2D: M(_pool("avg")), Op.MAX_POOL_2D: M(_pool("max"), move=True),
    Op.L2_POOL_2D: M(_pool("l2")),
    # shapes and data movement
    Op.RESHAPE: M(_reshape, move=True), Op.SQUEEZE: M(_reshape, move=True),
    Op.EXPAND_DIMS: M(_reshape, move=True), Op.CONCATENATION: M(_concat, move=True),
    Op.PAD: M(_pad, move=True), Op.PAD_V2: M(_pad, move=True),
    Op.TRANSPOSE: M(_transpose, move=True), Op.STRIDED_SLICE: M(_strided_slice, move=True),
    Op.SLICE: M(_slice, move=True), Op.TILE: M(_tile, move=True), Op.GATHER: M(_gather, move=True),
    Op.DEPTH_TO_SPACE: M(_d2s("DepthToSpace"), move=True),
    Op.SPACE_TO_DEPTH: M(_d2s("SpaceToDepth"), move=True),
    Op.BATCH_TO_SPACE_ND: M(_batch_to_space, move=True),
    Op.SPACE_TO_BATCH_ND: M(_space_to_batch, move=True),
    Op.RESIZE_BILINEAR: M(_resize("linear")), Op.RESIZE_NEAREST_NEIGHBOR: M(_resize("nearest"), move=True),
    # reductions
    Op.MEAN: M(_reduce("ReduceMean")), Op.REDUCE_SUM: M(_reduce("ReduceSum")),
    Op.REDUCE_PROD: M(_reduce("ReduceProd")), Op.REDUCE_MAX: M(_reduce("ReduceMax"), move=True),
    Op.REDUCE_MIN: M(_reduce("ReduceMin"), move=True),
    Op.REDUCE_ANY: M(_reduce("ReduceMax", np.int32)), Op.REDUCE_ALL: M(_reduce("ReduceMin", np.int32)),
    Op.ARGMAX: M(_arg("ArgMax")), Op.ARGMIN: M(_arg("ArgMin")),
    # comparisons and logic
    Op.EQUAL: M(_compare("Equal")), Op.NOT_EQUAL: M(_compare("Equal", True)),
    Op.LESS: M(_compare("Less")), Op.LESS_EQUAL: M(_compare("LessOrEqual")),
    Op.GREATER: M(_compare("Greater")), Op.GREATER_EQUAL: M(_compare("GreaterOrEqual")),
    Op.LOGICAL_AND: M(_binary("And")), Op.LOGICAL_OR: M(_binary("Or")), Op.LOGICAL_NOT: M(_unary("Not")),
    Op.SELECT: M(_select, move=True),
    # conversions
    Op.QUANTIZE: M(_quantize), Op.DEQUANTIZE: M(_dequantize), Op.CAST: M(_cast),
}


# ---------------------------------------------------------------------------------------
# The whole model


def operation_problem(model: Model, index: int, sg: Subgraph | None = None) -> str | None:
    """Why operation ``index`` (of ``sg``, default the main subgraph) cannot be expressed in
    ONNX (type, parameter), or None; an If / Loop with the operations of its subgraphs."""
    sg = model.main if sg is None else sg
    op = sg.operations[index]
    if op.type in _CONTROL_FLOW:
        for i in op.inputs:
            o = sg.operands[i]
            if o.type.is_scalar:
                return f"ONNX's {_CONTROL_FLOW_NAMES[op.type]} passes tensors only, operand {i} is a scalar"
            if o.type is T.SUBGRAPH:
                inner = model.referenced[o.location.offset]
                for n, inner_op in enumerate(inner.operations):
                    problem = operation_problem(model, n, inner)
                    if problem:
                        return (f"subgraph {o.location.offset}, operation {n} ({inner_op.type.name}): "
                                f"{problem}")
        return None
    if op.type not in MAPPINGS:
        return f"{op.type.name} has no ONNX mapping"
    return None


def exported_operation(model: Model, index: int, quant: str = "qdq",
                       unroll_rnn: bool = False) -> tuple[str | None, Any]:
    """Why operation ``index`` of ``model`` cannot be exported (the static rules, then an
    export of the operation alone), or (None, the operation alone as ONNX): for the drivers
    that take this exporter's models. The model is None where the operation's dimensions are
    known only when it runs (decided then). ``unroll_rnn``: as ``export``'s."""
    from nncert.hal.transform import isolate_operation

    problem = operation_problem(model, index)
    if problem:
        return problem, None
    single = isolate_operation(model, index)
    if not all(o.fully_specified for o in single.main.operands if o.type.is_tensor):
        return None, None
    try:
        return None, export(single, quant, unroll_rnn)
    except Unmappable as e:
        return str(e), None


def canonical_bytes(model: Model, quant: str = "qdq", unroll_rnn: bool = False) -> bytes:
    """``export(model)`` with ``canonical_names``, serialised: the bytes a compiler driver
    compiles and keys its compile cache with."""
    proto = export(model, quant, unroll_rnn)
    canonical_names(proto.graph)
    return proto.SerializeToString()


def canonical_names(graph: Any) -> None:
    """Rename the values of an exported ONNX graph (nested If / Loop bodies included, one
    numbering across them, as names must stay unique) n0, n1, ... by order of first use, graph
    inputs first (model input k is n{k}). The exporter names values after HAL operand indexes,
    which ``isolate_operation`` renumbers: renamed, the supported-operations probe's model and
    a test's own model of the same computation are the same bytes, one entry in a compiler
    driver's compile cache."""
    order: dict[str, str] = {"": ""}  # "" is an omitted optional input

    def new(name: str) -> str:
        return order.setdefault(name, f"n{len(order) - 1}")

    def visit(g: Any) -> None:
        for value in (*g.input, *g.initializer, *g.output, *g.value_info):
            value.name = new(value.name)
        for node in g.node:
            node.name = ""
            node.input[:] = [new(n) for n in node.input]
            for attribute in node.attribute:
                for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                    visit(sub)
            node.output[:] = [new(n) for n in node.output]

    visit(graph)


def export(model: Model, quant: str = "qdq", unroll_rnn: bool = False) -> Any:
    """The ONNX ModelProto of ``model`` (main subgraph, every dimension known);
    ``unroll_rnn``: every recurrent cell unrolled, none an ONNX RNN node."""
    from onnx import helper

    sg = model.main
    g = Graph(model, quant, unroll_rnn=unroll_rnn)
    _emit_operations(g)
    graph = helper.make_graph(g.nodes, "nncert", [_info(g, i) for i in sg.input_indexes],
                              [_info(g, i) for i in sg.output_indexes], g.initializers)
    opsets = [helper.make_opsetid("", OPSET)]
    if g.uses_ms:
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=10, producer_name="nncert")


def _emit_operations(g: Graph) -> None:
    for n, op in enumerate(g.sg.operations):
        control = _CONTROL_FLOW.get(op.type)
        if control is not None:
            control(g, op)
            continue
        spec = MAPPINGS.get(op.type)
        if spec is None:
            raise Unmappable(f"{op.type.name} has no ONNX mapping")
        spec.fn(Emit(g, n, spec))


def _info(g: Graph, i: int, name: str | None = None, dims: Any = _MISSING) -> Any:
    """The value info of HAL operand ``i`` of ``g``: unknown dimensions (an If / Loop output
    the branch or the loop decides) as unnamed dimensions, an unknown rank as no shape."""
    from onnx import helper

    o = g.sg.operands[i]
    if o.type is T.INT32 and dims is _MISSING:  # RANK's scalar output: a rank-0 int32 tensor
        return helper.make_tensor_value_info(name or g.name(i), _tensor_proto_type(np.int32), [])
    if not o.type.is_tensor:
        raise Unmappable(f"operand {i} ({o.type.name}): scalar model inputs and outputs are not mapped")
    if dims is _MISSING:
        dims = [d if d > 0 else None for d in o.dimensions] if o.dimensions else None
    return helper.make_tensor_value_info(name or g.name(i), _tensor_proto_type(dtype_of(o.type)), dims)


# ---------------------------------------------------------------------------------------
# Control flow: IF as If, WHILE as Loop, referenced subgraphs as their graph attributes


def _subgraph(g: Graph, ref: int, dims: list[tuple[int, ...]],
              inputs: list[str] | None) -> tuple[Graph, Subgraph]:
    """Referenced subgraph ``ref`` as a graph nested in ``g``, its dimensions filled in from
    the call's input shapes ``dims``; ``inputs``: outer names its inputs are bound to (by
    Identity nodes), None where they are the graph's own inputs (a Loop body)."""
    try:
        special = specialize_subgraph(g.model, g.model.referenced[ref], dims)
    except (ShapeUnknown, ValueError) as e:
        raise Unmappable(f"subgraph {ref}: {e}") from None
    sub = Graph(g.model, g.quant, special, g, g.fresh(f"s{ref}_") + "_")
    for idx, outer in zip(special.input_indexes, inputs or (), strict=False):
        sub.node("Identity", [outer], sub.name(idx))
    _emit_operations(sub)
    return sub, special


def _inline(g: Graph, sub: Graph) -> None:
    g.nodes.extend(sub.nodes)
    g.initializers.extend(sub.initializers)


def _if(g: Graph, op: Operation) -> None:
    """If: the condition (bool[1]) and two branch graphs, which read the IF's inputs from
    the enclosing graph; branches of different output shapes give the If output the taken
    branch's shape."""
    from onnx import helper

    sg = g.sg
    xs = op.inputs[3:]
    outer = [g.raw(i) for i in xs]
    dims = [sg.operands[i].dimensions for i in xs]
    branches = {}
    for position, what in ((1, "then"), (2, "else")):
        sub, special = _subgraph(g, sg.operands[op.inputs[position]].location.offset, dims, outer)
        for k, (i, j) in enumerate(zip(special.output_indexes, op.outputs, strict=True)):
            got, declared = special.operands[i], sg.operands[j]
            if got.fully_specified and declared.fully_specified and got.dimensions != declared.dimensions:
                raise Unmappable(f"the {what} branch gives output {k} of shape {list(got.dimensions)}, "
                                 f"the IF declares {list(declared.dimensions)}")
        branches[f"{what}_branch"] = helper.make_graph(
            sub.nodes, sub.prefix + what, [], [_info(sub, i) for i in special.output_indexes],
            sub.initializers)
    g.nodes.append(helper.make_node("If", [g.raw(op.inputs[0])], [g.name(i) for i in op.outputs],
                                    **branches))


#: Loop iterations whose shapes a WHILE body with changing shapes is exported at and compared.
SHAPE_CHECK_ITERATIONS = 3


def _while(g: Graph, op: Operation) -> None:
    """Loop (no trip count) over all m + k + n operands: the condition subgraph runs once
    on the initial values (inlined before the Loop) and at the end of each iteration on the
    new ones (inlined in the body, whose condition output it gives); the body gives its
    input-only inputs back unchanged, and the first m Loop outputs are the WHILE's."""
    from onnx import helper

    sg = g.sg
    carried = op.inputs[2:]
    dims = [sg.operands[i].dimensions for i in carried]
    refs = (sg.operands[op.inputs[0]].location.offset, sg.operands[op.inputs[1]].location.offset)
    forms = []
    for _ in range(SHAPE_CHECK_ITERATIONS):  # see _check_shape_generic in the LiteRT exporter
        scratch = Graph(g.model, g.quant, unroll_rnn=g.unroll_rnn)
        body, special = _loop_body(scratch, refs, dims, steady=True)
        forms.append(([n.SerializeToString() for n in body.node],
                      [t.SerializeToString() for t in body.initializer]))
        after = [special.operands[i].dimensions for i in special.output_indexes]
        if after == dims[:len(after)]:
            break
        if not all(special.operands[i].fully_specified for i in special.output_indexes):
            raise Unmappable("a WHILE body whose output shapes are known only when it runs")
        dims = after + dims[len(after):]
    if any(f != forms[0] for f in forms[1:]):
        raise Unmappable("the WHILE's carried shapes change every iteration and its ONNX form "
                         "(constants or attributes derived from shapes) changes with them")
    dims = [sg.operands[i].dimensions for i in carried]
    outer = [g.raw(i) for i in carried]
    cond, cond_special = _subgraph(g, refs[0], dims, outer)
    _inline(g, cond)
    body, _ = _loop_body(g, refs, dims, steady=len(forms) == 1)
    outs = [g.name(i) for i in op.outputs] + [g.fresh("unused") for _ in carried[len(op.outputs):]]
    g.nodes.append(helper.make_node("Loop", ["", cond.name(cond_special.output_indexes[0]), *outer],
                                    outs, body=body))


def _loop_body(g: Graph, refs: tuple[int, int], dims: list[tuple[int, ...]],
               steady: bool) -> tuple[Any, Subgraph]:
    """The Loop body graph (iteration, condition, v_1..v_N) -> (condition, v_1'..v_N') and
    the HAL body with its dimensions filled in; ``steady``: the carried shapes are the same
    every iteration (else they are left unknown in the graph's inputs and outputs)."""
    from onnx import TensorProto, helper

    cond_ref, body_ref = refs
    sub, special = _subgraph(g, body_ref, dims, None)
    news = [sub.name(i) for i in special.output_indexes]
    ins = [sub.name(i) for i in special.input_indexes]
    news += [sub.node("Identity", [x]) for x in ins[len(news):]]
    after = [special.operands[i].dimensions for i in special.output_indexes]
    after += dims[len(after):]
    cond, cond_special = _subgraph(sub, cond_ref, after, news)
    _inline(sub, cond)
    iteration, condition = sub.fresh("iteration"), sub.fresh("condition")
    inputs = [helper.make_tensor_value_info(iteration, TensorProto.INT64, []),
              helper.make_tensor_value_info(condition, TensorProto.BOOL, [1])]
    shapes = [list(d) if steady else None for d in dims]
    inputs += [_info(sub, i, dims=d) for i, d in zip(special.input_indexes, shapes, strict=True)]
    outputs = [_info(cond, cond_special.output_indexes[0])]
    outputs += [_info(sub, i, name, dims=d)
                for i, name, d in zip(special.input_indexes, news, shapes, strict=True)]
    return helper.make_graph(sub.nodes, sub.prefix + "body", inputs, outputs, sub.initializers), special


_CONTROL_FLOW: dict[Op, Callable[[Graph, Operation], None]] = {Op.IF: _if, Op.WHILE: _while}
_CONTROL_FLOW_NAMES = {Op.IF: "If", Op.WHILE: "Loop"}


# The mappings of the operation families that keep theirs in a module of their own.
add_family_mappings("nncert.drivers.onnxruntime.mappings", MAPPINGS)
