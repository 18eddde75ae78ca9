"""One function per TFLite builtin operator (``MAPPINGS``, read by ``tflite_import``): each
reads its ``Node``'s inputs and options and emits catalogue operations on the ``Graph``; what
it cannot express raises ``Unmapped`` with the reason."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from nncert.drivers.litert.export import fb
from nncert.hal.model import Operand, SymmPerChannelQuantParams
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import I32, Graph, Node, Spec, Unmapped, tensor_dims
from nncert.ops import add_family_mappings
from nncert.ops.base import to_real
from nncert.ops.window import PADDING_SAME, PADDING_VALID, implicit_padding


def _padding(n: Node) -> int:
    scheme = int(n.opt("padding", fb.Padding.SAME))
    if scheme == fb.Padding.SAME:
        return n.g.i32(PADDING_SAME)
    if scheme == fb.Padding.VALID:
        return n.g.i32(PADDING_VALID)
    raise Unmapped(f"padding scheme {scheme}")


def _float_weights(n: Node, k: int, x: int) -> int:
    """Input ``k`` (weights); quantised constant weights of a float operation (hybrid
    quantisation) are dequantised into float constants."""
    w = n.x(k)
    if n.g.spec(x).type.is_quant or not n.g.spec(w).type.is_quant:
        return w
    if not n.g.is_const(w):
        raise Unmapped("quantised weights of a float operation must be constant")
    o = n.g.b.operands[w]
    return n.g.const(Spec(n.g.spec(x).type), to_real(n.g.values[w], o))


def _filter(n: Node, k: int, x: int, channel_dim: int) -> int:
    """A convolution filter: int8 with one scale per output channel, or any int8 filter of a
    uint8 input (NNAPI's only mixed case), becomes TENSOR_QUANT8_SYMM_PER_CHANNEL."""
    t = n.tensor(k)
    spec = n.sub.spec_of(t)
    xt = n.g.spec(x).type
    if spec.type is T.TENSOR_QUANT8_SYMM_PER_CHANNEL and spec.channel_quant.channel_dim != channel_dim:
        raise Unmapped(f"per-channel filter quantised along dimension "
                          f"{spec.channel_quant.channel_dim}, NNAPI needs {channel_dim}")
    if spec.type is T.TENSOR_QUANT8_ASYMM_SIGNED and xt is T.TENSOR_QUANT8_ASYMM:
        if spec.zero_point:
            raise Unmapped("an int8 filter with a non-zero zero point for a uint8 input")
        value = n.value(k)
        if value is None:
            raise Unmapped("a per-channel filter must be constant")
        count = value.shape[channel_dim]
        return n.g.const(Spec(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, channel_quant=SymmPerChannelQuantParams(
            (spec.scale,) * count, channel_dim)), value)
    return _float_weights(n, k, x)


def _bias(n: Node, k: int, x: int, w: int, count: int) -> int:
    """The bias: float for float operations, INT32 with NNAPI's implied scale otherwise; a
    missing bias is zeros."""
    if not n.present(k):
        return _zero_bias(n.g, x, w, count)
    value = n.value(k)
    if not n.g.spec(x).type.is_quant:
        return n.x(k) if value is None else n.g.const(Spec(n.g.spec(x).type), np.asarray(value, np.float64))
    want = _bias_spec(n.g, x, w)
    if value is None:
        b = n.x(k)
        if not math.isclose(n.g.spec(b).scale, want.scale, rel_tol=1e-6):
            raise Unmapped(f"bias scale {n.g.spec(b).scale:g}, NNAPI needs {want.scale:g}")
        return b
    if value.dtype != np.int32:
        raise Unmapped(f"{value.dtype} bias")
    return n.g.const(want, value)


def _bias_spec(g: Graph, x: int, w: int) -> Spec:
    xs, ws = g.spec(x), g.spec(w)
    if not xs.type.is_quant:
        return Spec(xs.type)
    return Spec(T.TENSOR_INT32, 0.0 if ws.channel_quant is not None else float(xs.scale) * float(ws.scale))


def _zero_bias(g: Graph, x: int, w: int, count: int) -> int:
    return g.const(_bias_spec(g, x, w), np.zeros(count))


def _dilation(n: Node) -> tuple[int, int]:
    return int(n.opt("dilationHFactor", 1) or 1), int(n.opt("dilationWFactor", 1) or 1)


def _rank4(n: Node, *idx: int) -> None:
    for i in idx:
        if len(n.g.dims(i)) != 4:
            raise Unmapped(f"{n.code} on a tensor of shape {list(n.g.dims(i))} (rank 4 needed)")


def _conv(n: Node) -> None:
    g = n.g
    x = n.x(0)
    w = _filter(n, 1, x, 0)
    _rank4(n, x, w)
    o, _, _, fin = g.dims(w)
    cin = g.dims(x)[3]
    b = _bias(n, 2, x, w, o)
    common = [_padding(n), g.i32(n.opt("strideW", 1)), g.i32(n.opt("strideH", 1))]
    dh, dw = _dilation(n)
    if fin != cin:  # a grouped convolution
        if (dh, dw) != (1, 1):
            raise Unmapped("a grouped convolution with dilation")
        if fin == 0 or cin % fin:
            raise Unmapped(f"filter depth {fin} does not divide the input depth {cin}")
        n.emit(Op.GROUPED_CONV_2D, [x, w, b, *common, g.i32(cin // fin), n.act(), g.flag(False)])
        return
    tail = [g.flag(False), g.i32(dw), g.i32(dh)] if (dh, dw) != (1, 1) else []
    n.emit(Op.CONV_2D, [x, w, b, *common, n.act(), *tail])


def _depthwise(n: Node) -> None:
    g = n.g
    x = n.x(0)
    w = _filter(n, 1, x, 3)
    _rank4(n, x, w)
    depth = g.dims(w)[3]
    cin = g.dims(x)[3]
    if cin == 0 or depth % cin:
        raise Unmapped(f"filter depth {depth} is not a multiple of the input depth {cin}")
    b = _bias(n, 2, x, w, depth)
    dh, dw = _dilation(n)
    tail = [g.flag(False), g.i32(dw), g.i32(dh)] if (dh, dw) != (1, 1) else []
    n.emit(Op.DEPTHWISE_CONV_2D, [x, w, b, _padding(n), g.i32(n.opt("strideW", 1)),
                                  g.i32(n.opt("strideH", 1)), g.i32(depth // cin), n.act(), *tail])


def _transpose_conv(n: Node) -> None:
    """Explicit padding: the head TFLite crops (0 for VALID, the convolution-style head of
    the output size for SAME) and whatever tail gives the requested output size."""
    g = n.g
    x = n.x(2)
    w = _filter(n, 1, x, 0)
    _rank4(n, x, w)
    o, fh, fw, _ = g.dims(w)
    shape = n.ints(0, "TRANSPOSE_CONV's output shape")
    _, h, wd, _ = g.dims(x)
    sh, sw = int(n.opt("strideH", 1)), int(n.opt("strideW", 1))
    pads = []
    for out, inp, f, s in ((shape[1], h, fh, sh), (shape[2], wd, fw, sw)):
        head = implicit_padding(out, s, f, PADDING_SAME)[0] if int(n.opt("padding")) == fb.Padding.SAME else 0
        pads += [head, s * (inp - 1) + f - out - head]
    b = _bias(n, 3, x, w, o)
    n.emit(Op.TRANSPOSE_CONV_2D, [x, w, b, g.i32(pads[2]), g.i32(pads[3]), g.i32(pads[0]), g.i32(pads[1]),
                                  g.i32(sw), g.i32(sh), n.act(), g.flag(False)])


def _fully_connected(n: Node) -> None:
    g = n.g
    if int(n.opt("weightsFormat", 0)) != 0:
        raise Unmapped("shuffled weights format")
    x = n.x(0)
    wspec = n.sub.spec_of(n.tensor(1))
    units, size = g.dims(n.x(1)) if wspec.channel_quant is None else n.value(1).shape
    dims = g.dims(x)
    rows = math.prod(dims) // size if size else 0
    if len(dims) not in (2, 3, 4):  # NNAPI's input ranks; it flattens to rows of input_size too
        x = g.reshape(x, (rows, size))
    spec = n.out_spec()
    if wspec.channel_quant is not None:
        # NNAPI's FULLY_CONNECTED has no per-channel weights: a 1x1 CONV_2D has.
        value = n.value(1)
        if value is None:
            raise Unmapped("per-channel weights must be constant")
        w = g.const(dataclasses.replace(wspec, channel_quant=SymmPerChannelQuantParams(
            wspec.channel_quant.scales, 0)), value.reshape(units, 1, 1, size))
        b = _bias(n, 2, x, w, units)
        y = g.op(Op.CONV_2D, [g.reshape(x, (rows, 1, 1, size)), w, b, g.i32(PADDING_VALID), g.i32(1),
                              g.i32(1), n.act()], [spec])[0]
    else:
        w = _float_weights(n, 1, x)
        b = _bias(n, 2, x, w, units)
        y = g.op(Op.FULLY_CONNECTED, [x, w, b, n.act()], [spec])[0]
    want = (*dims[:-1], units) if int(n.opt("keepNumDims", False)) else (rows, units)
    n.bind(0, y if g.dims(y) == want else g.reshape(y, want))


_BATCH_MATMUL_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED)


def _batch_matmul(n: Node) -> None:
    """NNAPI's BATCH_MATMUL where its rules allow (operands of one type, per-tensor
    quantisation, equal ranks and batch dimensions: NNAPI does not broadcast them); else,
    with a constant rhs, FULLY_CONNECTED (weights rhs transposed) on x's rows."""
    g = n.g
    a, b = n.x(0), n.x(1)
    sa, sb = g.spec(a), g.spec(b)
    da, db = g.dims(a), g.dims(b)
    if sa.type is sb.type and sa.type in _BATCH_MATMUL_TYPES and sb.channel_quant is None \
            and len(da) == len(db) and 2 <= len(da) <= 4 and da[:-2] == db[:-2]:
        n.emit(Op.BATCH_MATMUL, [a, b, g.flag(bool(n.opt("adjX", False))),
                                 g.flag(bool(n.opt("adjY", False)))])
        return
    rhs = n.value(1)
    if rhs is None:
        raise Unmapped("a non-constant right-hand side")
    if rhs.ndim < 2 or math.prod(rhs.shape[:-2]) != 1:
        raise Unmapped("a batched right-hand side")
    x = n.x(0)
    dims = g.dims(x)
    if n.opt("adjX", False):
        perm = [*range(len(dims) - 2), len(dims) - 1, len(dims) - 2]
        x = g.op(Op.TRANSPOSE, [x, g.ints(perm)], [g.spec(x)])[0]
        dims = g.dims(x)
    mat = rhs.reshape(rhs.shape[-2:])
    weights = mat if n.opt("adjY", False) else mat.T  # [N, K]
    spec, xs = n.sub.spec_of(n.tensor(1)), g.spec(x)
    if spec.channel_quant is not None:
        raise Unmapped("per-channel quantised right-hand side")
    if xs.type.is_quant:
        if not spec.type.is_quant:
            raise Unmapped("a float right-hand side for a quantised input")
        w = g.const(spec, weights)
    elif spec.type.is_quant:  # hybrid: quantised constant weights of a float product
        w = g.const(Spec(xs.type), to_real(weights, Operand(spec.type, weights.shape, spec.scale,
                                                            spec.zero_point)))
    else:
        w = g.const(Spec(xs.type), weights)
    units, k = weights.shape
    rows = math.prod(dims) // k
    flat = x if len(dims) == 2 else g.reshape(x, (rows, k))
    b = _zero_bias(g, x, w, units)
    y = g.op(Op.FULLY_CONNECTED, [flat, w, b, g.i32(0)], [n.out_spec()])[0]
    n.bind(0, g.reshape(y, (*dims[:-1], units)) if len(dims) != 2 else y)


def _pool(type_: Op) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        g = n.g
        n.emit(type_, [n.x(0), _padding(n), g.i32(n.opt("strideW", 1)), g.i32(n.opt("strideH", 1)),
                       g.i32(n.opt("filterWidth", 1)), g.i32(n.opt("filterHeight", 1)), n.act()])

    return emit


def _binary(type_: Op, fused: bool = False) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        ins = [n.x(0), n.x(1)]
        n.emit(type_, [*ins, n.act()] if fused else ins)

    return emit


def _unary(type_: Op) -> Callable[[Node], None]:
    return lambda n: n.emit(type_, [n.x(0)])


def _div(n: Node) -> None:
    if n.g.spec(n.x(0)).type is T.TENSOR_INT32:
        raise Unmapped("int32 DIV truncates toward zero, NNAPI's int32 DIV floors")
    n.emit(Op.DIV, [n.x(0), n.x(1), n.act()])


def _floor_div(n: Node) -> None:
    if n.g.spec(n.x(0)).type is not T.TENSOR_INT32:
        raise Unmapped("FLOOR_DIV of non-int32 tensors")
    n.emit(Op.DIV, [n.x(0), n.x(1), n.g.i32(0)])


def _square(n: Node) -> None:
    n.emit(Op.MUL, [n.x(0), n.x(0), n.g.i32(0)])


def _squared_difference(n: Node) -> None:
    g = n.g
    spec = n.out_spec()
    if spec.type.is_quant:
        raise Unmapped("quantised SQUARED_DIFFERENCE")
    d = g.op(Op.SUB, [n.x(0), n.x(1), g.i32(0)], [spec])[0]
    n.emit(Op.MUL, [d, d, g.i32(0)])


def _add_n(n: Node) -> None:
    g = n.g
    acc = n.x(0)
    for k in range(1, len(n.inputs)):
        acc = g.op(Op.ADD, [acc, n.x(k), g.i32(0)], [n.out_spec()])[0]
    n.bind(0, acc)


def _leaky_relu(n: Node) -> None:
    """PRELU with a constant alpha of shape [1]; a quantised alpha is exact (scale |alpha|)."""
    g = n.g
    x = n.x(0)
    alpha = float(n.opt("alpha", 0.2))
    spec = g.spec(x)
    if not spec.type.is_quant:
        a = g.const(Spec(spec.type), [alpha])
    elif alpha == 0:
        n.emit(Op.RELU, [x])
        return
    else:
        signed = spec.type is T.TENSOR_QUANT8_ASYMM_SIGNED
        zp = 0 if signed or alpha > 0 else 1
        a = g.const(Spec(spec.type, abs(alpha), zp), [(1 if alpha > 0 else -1) + zp])
    n.emit(Op.PRELU, [x, a])


def _softmax(n: Node) -> None:
    x = n.x(0)
    n.emit(Op.SOFTMAX, [x, n.g.real(n.opt("beta", 1.0), x)])


def _log_softmax(n: Node) -> None:
    x = n.x(0)
    n.emit(Op.LOG_SOFTMAX, [x, n.g.real(1.0, x), n.g.i32(-1)])


def _l2_normalization(n: Node) -> None:
    n.emit(Op.L2_NORMALIZATION, [n.x(0)], fused=int(n.opt("fusedActivationFunction", 0)))


def _lrn(n: Node) -> None:
    x = n.x(0)
    g = n.g
    n.emit(Op.LOCAL_RESPONSE_NORMALIZATION, [x, g.i32(n.opt("radius", 5)), g.real(n.opt("bias", 1.0), x),
                                             g.real(n.opt("alpha", 1.0), x), g.real(n.opt("beta", 0.5), x)])


def _elu(n: Node) -> None:
    x = n.x(0)
    n.emit(Op.ELU, [x, n.g.real(1.0, x)])


def _concatenation(n: Node) -> None:
    ins = [n.x(k) for k in range(len(n.inputs))]
    axis = int(n.opt("axis", 0)) % len(n.g.dims(ins[0]))  # NNAPI takes no negative axis
    n.emit(Op.CONCATENATION, [*ins, n.g.i32(axis)],
           fused=int(n.opt("fusedActivationFunction", 0)))


def _reshape(n: Node) -> None:
    x = n.x(0)
    dims = n.g.dims(x)
    if n.present(1):
        shape = n.ints(1, "the new shape")
    elif n.opt("newShape") is not None:
        shape = [int(d) for d in n.opt("newShape")]
    else:
        shape = list(n.out_dims())
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = math.prod(dims) // known if known else 0
    n.bind(0, n.g.reshape(x, tuple(shape) or (1,), n.out_spec(), reinterpret=True))


def _squeeze(n: Node) -> None:
    x = n.x(0)
    squeeze = [int(d) for d in (n.opt("squeezeDims") if n.opt("squeezeDims") is not None else [])]
    ins = [x, n.g.ints(squeeze)] if squeeze else [x]
    n.emit(Op.SQUEEZE, ins)


def _expand_dims(n: Node) -> None:
    if not tensor_dims(n.tensor(0)):  # a scalar: [] becomes [1], which the HAL operand already is
        n.bind(0, n.x(0))
        return
    axis = n.ints(1, "the axis")
    n.emit(Op.EXPAND_DIMS, [n.x(0), n.g.i32(axis[0])])


def _transpose(n: Node) -> None:
    n.emit(Op.TRANSPOSE, [n.x(0), n.g.ints(n.ints(1, "the permutation"))])


def _int_tensor(n: Node, k: int, what: str) -> int:
    """An index-like input as TENSOR_INT32 (a constant narrowed from int64)."""
    value = n.value(k)
    if value is not None:
        return n.g.ints(np.asarray(value).reshape(-1)) if value.ndim <= 1 else \
            n.g.const(I32, np.asarray(value, np.int64).astype(np.int32))
    x = n.x(k)
    if n.g.spec(x).type is not T.TENSOR_INT32:
        raise Unmapped(f"{what} of type {n.g.spec(x).type.name}")
    return x


def _pad(n: Node) -> None:
    g = n.g
    x = n.x(0)
    pads = _int_tensor(n, 1, "paddings")
    if n.code == "PAD" or not n.present(2):
        n.emit(Op.PAD, [x, pads])
        return
    value = n.value(2)
    if value is None:
        raise Unmapped("a non-constant pad value")
    spec = g.spec(x)
    v = np.asarray(value).reshape(-1)[0]
    pad_value = g.scalar(T.INT32, int(v)) if spec.type.is_quant else g.real(float(v), x)
    n.emit(Op.PAD_V2, [x, pads, pad_value])


def _reduce(type_: Op) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        g = n.g
        keep = bool(n.opt("keepDims", False))
        axes = n.ints(1, "the axes")
        if not axes:  # nothing reduced: a copy
            n.bind(0, g.reshape(n.x(0), g.dims(n.x(0)), n.out_spec()))
            return
        flag = g.i32(int(keep)) if type_ is Op.MEAN else g.flag(keep)
        n.emit(type_, [n.x(0), g.ints(axes), flag])

    return emit


def _arg(type_: Op) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        n.emit(type_, [n.x(0), n.g.i32(n.ints(1, "the axis")[0])])

    return emit


def _strided_slice(n: Node) -> None:
    g = n.g
    for mask in ("ellipsisMask", "newAxisMask"):
        if int(n.opt(mask, 0)):
            raise Unmapped(f"STRIDED_SLICE with {mask}")
    if n.opt("offset", False):
        raise Unmapped("STRIDED_SLICE with offset")
    n.emit(Op.STRIDED_SLICE, [n.x(0), _int_tensor(n, 1, "begin"), _int_tensor(n, 2, "end"),
                              _int_tensor(n, 3, "strides"), g.i32(n.opt("beginMask", 0)),
                              g.i32(n.opt("endMask", 0)), g.i32(n.opt("shrinkAxisMask", 0))])


def _slice(n: Node) -> None:
    n.emit(Op.SLICE, [n.x(0), _int_tensor(n, 1, "begin"), _int_tensor(n, 2, "size")])


def _slices(n: Node, x: int, axis: int, sizes: Sequence[int]) -> None:
    """Outputs k = consecutive slices of ``sizes`` along ``axis``."""
    g = n.g
    dims = g.dims(x)
    axis %= len(dims)
    start = 0
    if g.is_const(x):  # weights split at import (also per-channel ones, which SLICE lacks)
        for k, size in enumerate(sizes):
            part = np.take(g.values[x], range(start, start + size), axis=axis)
            n.bind(k, g.const(n.out_spec(k), part))
            start += size
        return
    for k, size in enumerate(sizes):
        begin = [0] * len(dims)
        begin[axis] = start
        extent = list(dims)
        extent[axis] = size
        n.emit(Op.SLICE, [x, g.ints(begin), g.ints(extent)], k=k)
        start += size


def _split(n: Node) -> None:
    x = n.x(1)
    axis = n.ints(0, "the axis")[0]
    parts = len(n.outputs)
    total = n.g.dims(x)[axis % len(n.g.dims(x))]
    if total % parts:
        raise Unmapped(f"{total} does not split into {parts} parts")
    if n.g.is_const(x):  # weights are split at import
        _slices(n, x, axis, [total // parts] * parts)
        return
    outs = n.g.op(Op.SPLIT, [x, n.g.i32(axis), n.g.i32(parts)], [n.out_spec(k) for k in range(parts)],
                  reinterpret=True)
    for k, y in enumerate(outs):
        n.bind(k, y)


def _split_v(n: Node) -> None:
    x = n.x(0)
    sizes = n.ints(1, "the split sizes")
    axis = n.ints(2, "the axis")[0]
    total = n.g.dims(x)[axis % len(n.g.dims(x))]
    if -1 in sizes:
        sizes[sizes.index(-1)] = total - (sum(sizes) + 1)
    _slices(n, x, axis, sizes)


def _pack(n: Node) -> None:
    """NNAPI's PACK where its inputs share the output's quantisation; else EXPAND_DIMS and
    CONCATENATION, which requantises."""
    g = n.g
    axis = int(n.opt("axis", 0))
    ins = [n.x(k) for k in range(len(n.inputs))]
    rank = len(g.dims(ins[0])) + 1
    if all(g.spec(x) == n.out_spec() for x in ins):
        n.emit(Op.PACK, [g.i32(axis % rank), *ins])
        return
    expanded = [g.op(Op.EXPAND_DIMS, [x, g.i32(axis % rank)], [g.spec(x)])[0] for x in ins]
    if len(expanded) == 1:
        n.bind(0, g.reshape(expanded[0], g.dims(expanded[0]), n.out_spec()))
        return
    n.emit(Op.CONCATENATION, [*expanded, g.i32(axis % rank)])


def _unpack(n: Node) -> None:
    g = n.g
    x = n.x(0)
    dims = g.dims(x)
    axis = int(n.opt("axis", 0)) % len(dims)
    for k in range(len(n.outputs)):
        begin = [0] * len(dims)
        begin[axis] = k
        size = list(dims)
        size[axis] = 1
        piece = g.op(Op.SLICE, [x, g.ints(begin), g.ints(size)], [n.out_spec(k)])[0]
        rest = tuple(d for i, d in enumerate(dims) if i != axis) or (1,)
        n.bind(k, g.reshape(piece, rest))


def _gather(n: Node) -> None:
    if int(n.opt("batchDims", 0)):
        raise Unmapped("GATHER with batch_dims")
    n.emit(Op.GATHER, [n.x(0), n.g.i32(n.opt("axis", 0)), _int_tensor(n, 1, "indices")])


def _tile(n: Node) -> None:
    n.emit(Op.TILE, [n.x(0), _int_tensor(n, 1, "multiples")])


def _broadcast_to(n: Node) -> None:
    g = n.g
    x = n.x(0)
    shape = n.ints(1, "the shape")
    dims = g.dims(x)
    if len(dims) < len(shape):
        dims = (1,) * (len(shape) - len(dims)) + tuple(dims)
        x = g.reshape(x, dims)
    if any(d not in (1, s) for d, s in zip(dims, shape, strict=True)):
        raise Unmapped(f"shape {list(g.dims(x))} does not broadcast to {shape}")
    n.emit(Op.TILE, [x, g.ints([s // d for d, s in zip(dims, shape, strict=True)])])


def _select(n: Node) -> None:
    g = n.g
    cond, a, b = n.x(0), n.x(1), n.x(2)
    if not g.dims(cond) == g.dims(a) == g.dims(b):
        raise Unmapped("SELECT with broadcasting")
    n.emit(Op.SELECT, [cond, a, b])


def _quantize(n: Node) -> None:
    x = n.x(0)
    if not n.g.spec(x).type.is_quant:
        n.emit(Op.QUANTIZE, [x])
        return
    n.bind(0, n.g.requantize(x, n.out_spec()))


def _dequantize(n: Node) -> None:
    g = n.g
    value = n.value(0)
    spec = n.sub.spec_of(n.tensor(0))
    if value is not None:  # constant weights (float16 or quantised): folded
        real = np.asarray(value, np.float32) if not spec.type.is_quant else \
            to_real(value, Operand(spec.type, value.shape, spec.scale, spec.zero_point,
                                   channel_quant=spec.channel_quant))
        n.bind(0, g.const(n.out_spec(), np.asarray(real, np.float32)))
        return
    x = n.x(0)
    if g.spec(x).type is T.TENSOR_FLOAT16:
        n.emit(Op.CAST, [x])
    else:
        n.emit(Op.DEQUANTIZE, [x])


def _densify_op(n: Node) -> None:
    value = n.value(0)
    if value is None:
        raise Unmapped("DENSIFY of a non-constant tensor")
    n.bind(0, n.sub.constant(n.tensor(0), value, n.out_spec()))


def _shape(n: Node) -> None:
    n.bind(0, n.g.ints(n.g.dims(n.x(0))))


def _cast(n: Node) -> None:
    """CAST; NNAPI's casts from and to BOOL8 are SELECT and NOT_EQUAL (true is 1)."""
    g = n.g
    x = n.x(0)
    have, want = g.spec(x), n.out_spec()
    if have.type is T.TENSOR_BOOL8 and want.type is not T.TENSOR_BOOL8:
        dims = g.dims(x)
        n.emit(Op.SELECT, [x, g.const(want, np.ones(dims)), g.const(want, np.zeros(dims))])
    elif want.type is T.TENSOR_BOOL8 and have.type is not T.TENSOR_BOOL8:
        n.emit(Op.NOT_EQUAL, [x, g.const(have, np.zeros(g.dims(x)))])
    else:
        n.emit(Op.CAST, [x])


def _resize(type_: Op) -> Callable[[Node], None]:
    def emit(n: Node) -> None:
        g = n.g
        h, w = n.ints(1, "the size")
        n.emit(type_, [n.x(0), g.i32(w), g.i32(h), g.flag(False), g.flag(n.opt("alignCorners", False)),
                       g.flag(n.opt("halfPixelCenters", False))])

    return emit


def _block(type_: Op) -> Callable[[Node], None]:
    return lambda n: n.emit(type_, [n.x(0), n.g.i32(n.opt("blockSize", 1))])


def _batch_to_space(n: Node) -> None:
    g = n.g
    crops = np.asarray(n.ints(2, "the crops")).reshape(-1, 2)
    y = g.op(Op.BATCH_TO_SPACE_ND, [n.x(0), _int_tensor(n, 1, "block_shape")], [n.out_spec()])[0]
    if crops.any():
        dims = g.dims(y)
        begin = [0, int(crops[0, 0]), int(crops[1, 0]), 0]
        size = [dims[0], dims[1] - int(crops[0].sum()), dims[2] - int(crops[1].sum()), dims[3]]
        y = g.op(Op.SLICE, [y, g.ints(begin), g.ints(size)], [n.out_spec()])[0]
    n.bind(0, y)


def _space_to_batch(n: Node) -> None:
    n.emit(Op.SPACE_TO_BATCH_ND, [n.x(0), _int_tensor(n, 1, "block_shape"), _int_tensor(n, 2, "paddings")])


def _relu_0_to_1(n: Node) -> None:
    g = n.g
    x = n.x(0)
    if g.spec(x).type.is_quant:
        raise Unmapped("quantised RELU_0_TO_1")
    y = g.op(Op.RELU, [x], [g.spec(x)])[0]
    n.emit(Op.MINIMUM, [y, g.const(g.spec(x), [1.0])])


def _if(n: Node) -> None:
    """HAL IF; the branches are referenced subgraphs, constants passed in are inlined."""
    g = n.g
    imp = n.sub.imp
    cond = n.x(0)
    if g.spec(cond).type is not T.TENSOR_BOOL8:
        raise Unmapped(f"an IF condition of type {g.spec(cond).type.name}")
    if g.dims(cond) != (1,):
        cond = g.reshape(cond, (1,))
    passed = [n.x(k) for k in range(1, len(n.inputs))]
    specs = [(g.spec(i), g.dims(i)) for i in passed]
    consts = {pos: (g.spec(i), g.values[i]) for pos, i in enumerate(passed) if g.is_const(i)}
    branches = [imp.branch(int(n.opt(which, -1)), specs, consts)
                for which in ("thenSubgraphIndex", "elseSubgraphIndex")]
    outer = [i for pos, i in enumerate(passed) if pos not in consts]
    results = []
    (then_b, _, then_outs), (else_b, _, else_outs) = branches
    for k, (a, b) in enumerate(zip(then_outs, else_outs, strict=True)):
        da, db = then_b.operands[a].dimensions, else_b.operands[b].dimensions
        if da != db:
            raise Unmapped(f"IF branches give output {k} shapes {list(da)} and {list(db)}")
        results.append(g.operand(n.out_spec(k), da))
    subgraphs = [g.b.subgraph(builder, ins, outs) for builder, ins, outs in branches]
    g.raw_op(Op.IF, [cond, *subgraphs, *outer], results)
    for k, idx in enumerate(results):
        n.bind(k, idx)


MAPPINGS: dict[str, Callable[[Node], None]] = {
    "ADD": _binary(Op.ADD, fused=True),
    "SUB": _binary(Op.SUB, fused=True),
    "MUL": _binary(Op.MUL, fused=True),
    "DIV": _div,
    "FLOOR_DIV": _floor_div,
    "SQUARE": _square,
    "SQUARED_DIFFERENCE": _squared_difference,
    "ADD_N": _add_n,
    "MAXIMUM": _binary(Op.MAXIMUM),
    "MINIMUM": _binary(Op.MINIMUM),
    "ABS": _unary(Op.ABS),
    "NEG": _unary(Op.NEG),
    "EXP": _unary(Op.EXP),
    "LOG": _unary(Op.LOG),
    "SIN": _unary(Op.SIN),
    "SQRT": _unary(Op.SQRT),
    "RSQRT": _unary(Op.RSQRT),
    "FLOOR": _unary(Op.FLOOR),
    "EQUAL": _binary(Op.EQUAL),
    "NOT_EQUAL": _binary(Op.NOT_EQUAL),
    "GREATER": _binary(Op.GREATER),
    "GREATER_EQUAL": _binary(Op.GREATER_EQUAL),
    "LESS": _binary(Op.LESS),
    "LESS_EQUAL": _binary(Op.LESS_EQUAL),
    "LOGICAL_AND": _binary(Op.LOGICAL_AND),
    "LOGICAL_OR": _binary(Op.LOGICAL_OR),
    "LOGICAL_NOT": _unary(Op.LOGICAL_NOT),
    "SELECT": _select,
    "SELECT_V2": _select,
    "RELU": _unary(Op.RELU),
    "RELU_N1_TO_1": _unary(Op.RELU1),
    "RELU6": _unary(Op.RELU6),
    "RELU_0_TO_1": _relu_0_to_1,
    "LOGISTIC": _unary(Op.LOGISTIC),
    "TANH": _unary(Op.TANH),
    "HARD_SWISH": _unary(Op.HARD_SWISH),
    "ELU": _elu,
    "PRELU": _binary(Op.PRELU),
    "LEAKY_RELU": _leaky_relu,
    "SOFTMAX": _softmax,
    "LOG_SOFTMAX": _log_softmax,
    "L2_NORMALIZATION": _l2_normalization,
    "LOCAL_RESPONSE_NORMALIZATION": _lrn,
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _depthwise,
    "TRANSPOSE_CONV": _transpose_conv,
    "FULLY_CONNECTED": _fully_connected,
    "BATCH_MATMUL": _batch_matmul,
    "AVERAGE_POOL_2D": _pool(Op.AVERAGE_POOL_2D),
    "MAX_POOL_2D": _pool(Op.MAX_POOL_2D),
    "L2_POOL_2D": _pool(Op.L2_POOL_2D),
    "RESHAPE": _reshape,
    "SQUEEZE": _squeeze,
    "EXPAND_DIMS": _expand_dims,
    "TRANSPOSE": _transpose,
    "CONCATENATION": _concatenation,
    "PACK": _pack,
    "UNPACK": _unpack,
    "SPLIT": _split,
    "SPLIT_V": _split_v,
    "PAD": _pad,
    "PADV2": _pad,
    "STRIDED_SLICE": _strided_slice,
    "SLICE": _slice,
    "TILE": _tile,
    "BROADCAST_TO": _broadcast_to,
    "GATHER": _gather,
    "MEAN": _reduce(Op.MEAN),
    "SUM": _reduce(Op.REDUCE_SUM),
    "REDUCE_PROD": _reduce(Op.REDUCE_PROD),
    "REDUCE_MAX": _reduce(Op.REDUCE_MAX),
    "REDUCE_MIN": _reduce(Op.REDUCE_MIN),
    "REDUCE_ANY": _reduce(Op.REDUCE_ANY),
    "REDUCE_ALL": _reduce(Op.REDUCE_ALL),
    "ARG_MAX": _arg(Op.ARGMAX),
    "ARG_MIN": _arg(Op.ARGMIN),
    "QUANTIZE": _quantize,
    "DEQUANTIZE": _dequantize,
    "DENSIFY": _densify_op,
    "SHAPE": _shape,
    "CAST": _cast,
    "RESIZE_BILINEAR": _resize(Op.RESIZE_BILINEAR),
    "RESIZE_NEAREST_NEIGHBOR": _resize(Op.RESIZE_NEAREST_NEIGHBOR),
    "DEPTH_TO_SPACE": _block(Op.DEPTH_TO_SPACE),
    "SPACE_TO_DEPTH": _block(Op.SPACE_TO_DEPTH),
    "BATCH_TO_SPACE_ND": _batch_to_space,
    "SPACE_TO_BATCH_ND": _space_to_batch,
    "IF": _if,
}

# The mappings of the operation families that keep theirs in a module of their own.
add_family_mappings("nncert.mlts.mappings", MAPPINGS)
