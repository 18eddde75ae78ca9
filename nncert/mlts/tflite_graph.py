"""The TFLite side of the importer (``tflite_import``): the flatbuffer read with the schema that
ships with ai-edge-litert (``File``: operator codes, constant buffers, sparse constants
densified), the HAL graph under construction (``Graph``: shapes by the catalogue's rules,
constant folding, the requantisation NNAPI's fixed output scales need) and one TFLite
operator as a mapping sees it (``Node``)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import fb, tflite_type
from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Operand, OperandSpec, dtype_of
from nncert.hal.types import FusedActivationFunc
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.ops import get
from nncert.ops.base import MAX_OUTPUT_ELEMENTS, ShapeError, match, to_real
from nncert.ops.evaluate import evaluate, output_shapes

if TYPE_CHECKING:
    from nncert.mlts.tflite_import import _Subgraph

#: What the importer reads: a .tflite file's bytes or its path.
Source = bytes | bytearray | memoryview | str | os.PathLike


class MalformedModel(ValueError):  # noqa: N818 - named like UnsupportedModel
    """The bytes are not a well-formed TFLite flatbuffer."""


class Unmapped(Exception):  # noqa: N818 - a signal caught per operator
    """This operator instance cannot be mapped; the message says why."""


NO_EQUIVALENT = "no NNAPI equivalent in the catalogue"


# ---------------------------------------------------------------------------------------
# Reading the flatbuffer


_BUILTIN_NAMES = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")} \
    if fb is not None else {}
TENSOR_TYPE_NAMES = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")} \
    if fb is not None else {}
_NP_OF_TFLITE = {"FLOAT32": np.float32, "FLOAT16": np.float16, "FLOAT64": np.float64,
                 "INT32": np.int32, "INT64": np.int64, "INT16": np.int16, "INT8": np.int8,
                 "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "BOOL": np.bool_}


def _hal_types() -> dict[str, T]:
    """TFLite tensor type name -> HAL type, inverted from the exporter's table (INT8 is the
    asymmetric signed type here; per-channel filters are told apart by their scales)."""
    table: dict[str, T] = {}
    for t in T:
        if t.is_tensor and t is not T.TENSOR_OEM_BYTE:
            try:
                table.setdefault(tflite_type(t), t)
            except Unmappable:
                continue
    table["INT8"] = T.TENSOR_QUANT8_ASYMM_SIGNED
    table["FLOAT16"] = T.TENSOR_FLOAT16
    return table


HAL_TYPE = _hal_types() if fb is not None else {}


def read_bytes(data: Source) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    try:
        with open(data, "rb") as f:
            return f.read()
    except OSError as e:
        raise MalformedModel(f"cannot read the TFLite model {os.fspath(data)!r}: {e.strerror}") from None


def _parse(raw: bytes) -> Any:
    if fb is None:
        raise ImportError("reading .tflite files needs ai-edge-litert's flatbuffer schema "
                          "(pip install nncert[litert])")
    if len(raw) < 8 or raw[4:8] != b"TFL3":
        raise MalformedModel(f"not a TFLite model: {len(raw)} bytes without the 'TFL3' file "
                             f"identifier at offset 4")
    try:
        model = fb.ModelT.InitFromPackedBuf(raw, 0)
    except Exception as e:  # any decoding failure means a corrupt file
        raise MalformedModel(f"corrupt TFLite flatbuffer: {type(e).__name__}: {e}"
                             .replace("\n", " ")) from None
    if not model.subgraphs:
        raise MalformedModel("corrupt TFLite flatbuffer: the model has no subgraph")
    return model


#: A HAL operand's type and quantisation, without dimensions (the importer's short name).
Spec = OperandSpec

F32 = Spec(T.TENSOR_FLOAT32)
I32 = Spec(T.TENSOR_INT32)
BOOL8 = Spec(T.TENSOR_BOOL8)


class File:
    """The parsed model and what every subgraph reads of it."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.model = _parse(raw)
        self.codes: list[str] = []
        for oc in self.model.operatorCodes or []:
            code = max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))
            name = _BUILTIN_NAMES.get(code, f"BUILTIN_{code}")
            if name == "CUSTOM":
                custom = oc.customCode.decode("utf-8", "replace") if oc.customCode else "?"
                name = f"CUSTOM({custom})"
            self.codes.append(name)

    def subgraph(self, index: int) -> Any:
        if not 0 <= index < len(self.model.subgraphs):
            raise MalformedModel(f"corrupt TFLite model: subgraph {index} does not exist "
                                 f"(the model has {len(self.model.subgraphs)})")
        return self.model.subgraphs[index]

    def tensor_value(self, t: Any) -> np.ndarray | None:
        """The constant value of a tensor (densified when sparse), or None."""
        buffers = self.model.buffers or []
        if not 0 <= t.buffer < len(buffers):
            raise MalformedModel(f"corrupt TFLite model: tensor {tensor_name(t)} names buffer {t.buffer}, "
                                 f"the model has {len(buffers)}")
        buf = buffers[t.buffer]
        data = buf.data
        if data is None and buf.offset > 1:  # a model over 2 GB keeps buffers after the flatbuffer
            data = np.frombuffer(self.raw, np.uint8, int(buf.size), int(buf.offset))
        shape = tensor_dims(t)
        if shape and 0 in shape and t.sparsity is None:  # an empty constant (a scalar's shape)
            return np.zeros(shape, _NP_OF_TFLITE.get(TENSOR_TYPE_NAMES.get(t.type), np.float32))
        if data is None or len(data) == 0:
            return None
        tname = TENSOR_TYPE_NAMES.get(t.type, str(t.type))
        if tname not in _NP_OF_TFLITE:
            raise Unmapped(f"constant of type {tname}")
        dtype = np.dtype(_NP_OF_TFLITE[tname])
        raw = np.asarray(data, np.uint8)
        if raw.size % dtype.itemsize:
            raise MalformedModel(f"corrupt TFLite model: tensor {tensor_name(t)}'s buffer has {raw.size} "
                                 f"bytes, not a whole number of {tname}")
        values = raw.view(dtype)
        if t.sparsity is not None:
            return _densify(values, shape, t.sparsity, tensor_name(t))
        if values.size != math.prod(shape):
            raise MalformedModel(f"corrupt TFLite model: tensor {tensor_name(t)} of shape {list(shape)} has "
                                 f"{values.size} values")
        return values.reshape(shape)


def tensor_dims(t: Any) -> tuple[int, ...]:
    """A tensor's declared dimensions (-1 belongs in the shape signature only)."""
    d = tuple(int(v) for v in (t.shape if t.shape is not None else ()))
    if any(v < 0 for v in d):
        raise MalformedModel(f"corrupt TFLite model: tensor {tensor_name(t)} has shape {list(d)}")
    return d


def tensor_name(t: Any) -> str:
    return repr(t.name.decode("utf-8", "replace") if isinstance(t.name, bytes) else t.name)


def _densify(values: np.ndarray, shape: tuple[int, ...], sp: Any, name: str) -> np.ndarray:
    """The dense array of a sparse constant (TFLite's SparsityParameters: a traversal order
    over the dimensions and block dimensions, each level DENSE or SPARSE_CSR), level by
    level: every path through the levels is one stored value, in storage order."""
    order = [int(d) for d in sp.traversalOrder]
    block_map = [int(d) for d in (sp.blockMap if sp.blockMap is not None else [])]
    levels = sp.dimMetadata or []
    rank = len(shape)
    if len(order) != len(levels) or len(order) != rank + len(block_map):
        raise MalformedModel(f"corrupt TFLite model: sparse tensor {name} has {len(levels)} levels "
                             f"for {rank} dimensions and {len(block_map)} block dimensions")
    block_size = [int(levels[rank + k].denseSize) for k in range(len(block_map))]
    prev = np.zeros(1, np.int64)  # per path: its position at the previous level
    idx: list[np.ndarray] = []
    for d in levels:
        if d.format == fb.DimensionType.DENSE:
            size = int(d.denseSize)
            idx = [np.repeat(col, size) for col in idx] + [np.tile(np.arange(size), len(prev))]
            prev = (prev[:, None] * size + np.arange(size)[None, :]).reshape(-1)
        else:
            seg = np.asarray(d.arraySegments.values, np.int64)
            ind = np.asarray(d.arrayIndices.values, np.int64)
            if prev.size and (prev.max() + 1 >= seg.size or seg[-1] > ind.size):
                raise MalformedModel(f"corrupt TFLite model: sparse tensor {name}'s segments do "
                                     f"not fit its indices")
            counts = seg[prev + 1] - seg[prev]
            starts = np.repeat(seg[prev], counts)
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            prev = starts + within
            idx = [np.repeat(col, counts) for col in idx] + [ind[prev]]
    if len(prev) != values.size:
        raise MalformedModel(f"corrupt TFLite model: sparse tensor {name} has {values.size} values "
                             f"for {len(prev)} positions")
    coords = [np.zeros(len(prev), np.int64) for _ in range(rank)]
    for level in range(rank):
        coords[order[level]] = idx[level]
    for level in range(rank, len(order)):
        k = order[level] - rank
        dim = block_map[k]
        coords[dim] = coords[dim] * block_size[k] + idx[level]
    dense = np.zeros(shape, values.dtype)
    dense[tuple(coords)] = values
    return dense


# ---------------------------------------------------------------------------------------
# The HAL model under construction

#: The types NNAPI's RESHAPE takes.
_RESHAPE_TYPES = frozenset(b for v in get(Op.RESHAPE).variants for _, b in v.bindings)


class Graph:
    """A ModelBuilder that knows its constants' values and computes every new operand's
    dimensions with the catalogue's shape rules."""

    def __init__(self) -> None:
        self.b = ModelBuilder()
        self.values: dict[int, np.ndarray] = {}
        self._scalars: dict[tuple[T, Any], int] = {}
        self.log: list[str] = []
        self.omitted: set[int] = set()  # NO_VALUE operands (``no_value``)

    # -- operands --
    def spec(self, idx: int) -> Spec:
        return Spec.of(self.b.operands[idx])

    def dims(self, idx: int) -> tuple[int, ...]:
        return self.b.operands[idx].dimensions

    def is_const(self, idx: int) -> bool:
        return idx in self.values

    def no_value(self, type_: T) -> int:
        """An omitted optional input (NO_VALUE) of ``type_``."""
        idx = self.b.no_value(type_)
        self.omitted.add(idx)
        return idx

    def operand(self, spec: Spec, dims: Sequence[int]) -> int:
        return self.b.operand(spec.type, dims, spec.scale, spec.zero_point, spec.channel_quant)

    def const(self, spec: Spec, value: Any) -> int:
        arr = np.asarray(value, dtype=dtype_of(spec.type))
        if arr.ndim == 0:
            arr = arr.reshape(1)
        idx = self.b.constant(spec.type, arr, spec.scale, spec.zero_point, spec.channel_quant)
        self.values[idx] = arr
        return idx

    def scalar(self, type_: T, value: Any) -> int:
        key = (type_, value)
        if key not in self._scalars:
            self._scalars[key] = self.b.constant(type_, value)
            self.values[self._scalars[key]] = np.asarray(value, dtype_of(type_))
        return self._scalars[key]

    def i32(self, value: int) -> int:
        return self.scalar(T.INT32, int(value))

    def flag(self, value: bool) -> int:
        return self.scalar(T.BOOL, bool(value))

    def real(self, value: float, like: int) -> int:
        """A float scalar parameter of the type that goes with tensor ``like``."""
        t = T.FLOAT16 if self.spec(like).type is T.TENSOR_FLOAT16 else T.FLOAT32
        return self.scalar(t, float(value))

    def ints(self, values: Sequence[int]) -> int:
        return self.const(I32, np.asarray(values, np.int32).reshape(-1))

    # -- operations --
    def op(self, type_: Op, ins: Sequence[int], outs: Sequence[Spec], reinterpret: bool = False) -> list[int]:
        """Add ``type_`` on ``ins``; new output operands of ``outs`` types, shaped by the
        catalogue. An output whose quantisation NNAPI prescribes (same as an input, or
        fixed) and that differs from the wanted one is requantised into it afterwards, or
        with ``reinterpret`` (TFLite operators that move stored values, whatever the
        quantisation) given the wanted parameters unchanged. An operation whose inputs are
        all constant is computed now (folded)."""
        record = get(type_)
        in_ops = [None if i in self.omitted else self.b.operands[i] for i in ins]
        try:
            m = match(record, [o and o.type for o in in_ops], [s.type for s in outs])
        except ShapeError as e:
            raise Unmapped(str(e)) from None
        required = [self._required(record, m, in_ops, a, s)
                    for a, s in zip(m.signature.output_args(len(outs)), outs, strict=True)]
        vals = [self._known(record, i) for i in ins]
        probe = [Operand(s.type, (), s.scale, s.zero_point, channel_quant=s.channel_quant) for s in required]
        try:
            shapes = output_shapes(record, in_ops, vals, probe, m)
        except ShapeError as e:
            raise Unmapped(f"{type_.name}: {e}") from None
        if shapes is None:
            raise Unmapped(f"{type_.name}'s output shape depends on values known only at run time")
        out_ops = [dataclasses.replace(p, dimensions=tuple(d)) for p, d in zip(probe, shapes, strict=True)]
        if any(math.prod(d) > MAX_OUTPUT_ELEMENTS for d in shapes):
            raise Unmapped(f"{type_.name} output of shape {[list(d) for d in shapes]} is beyond the "
                              f"{MAX_OUTPUT_ELEMENTS:,} elements the reference kernels compute")
        if all(i in self.values for i in ins):
            try:
                results = evaluate(record, in_ops, [self.values[i] for i in ins], out_ops, m)
            except ShapeError as e:
                raise Unmapped(f"{type_.name}: {e}") from None
            made = [self.const(s, r) for s, r in zip(required, results, strict=True)]
        else:
            made = [self.operand(s, d) for s, d in zip(required, shapes, strict=True)]
            self.b.operation(type_, ins, made)
            self.log.append(type_.name)
        convert = self.reinterpret if reinterpret else self.requantize
        return [convert(i, want) if got != want else i
                for i, got, want in zip(made, required, outs, strict=True)]

    def raw_op(self, type_: Op, ins: Sequence[int], outs: Sequence[int]) -> None:
        """An operation the catalogue does not describe (IF): outputs made by the caller."""
        self.b.operation(type_, ins, outs)
        self.log.append(type_.name)

    def _known(self, record: Any, idx: int) -> Any:
        if idx not in self.values:
            return None
        o = self.b.operands[idx]
        raw = self.values[idx]
        if o.type.is_scalar:
            return raw.item()
        return to_real(raw, o) if record.dequantize else raw

    @staticmethod
    def _required(record: Any, m: Any, ins: list[Operand], arg: Any, want: Spec) -> Spec:
        q = arg.quant
        if not want.type.is_quant or want.channel_quant is not None:
            return want
        if q.kind in ("same", "follows"):
            pos = m.positions.get(q.ref)
            ref = ins[pos[0]] if pos else None
            if ref is not None and ref.type is want.type:
                return dataclasses.replace(want, scale=ref.scale, zero_point=ref.zero_point)
        elif q.kind == "fixed":
            zp = q.zero_point - (128 if want.type is T.TENSOR_QUANT8_ASYMM_SIGNED else 0)
            return dataclasses.replace(want, scale=q.scale, zero_point=zp)
        return want

    def requantize(self, src: int, want: Spec) -> int:
        """``src`` in ``want``'s quantisation (or type: a float source is quantised)."""
        have = self.spec(src)
        if have == want:
            return src
        if not have.type.is_quant:
            return self.op(Op.QUANTIZE, [src], [want])[0]
        real = self.op(Op.DEQUANTIZE, [src], [F32])[0]
        return self.op(Op.QUANTIZE, [real], [want])[0] if want.type.is_quant else real

    def reinterpret(self, src: int, want: Spec) -> int:
        """``src``'s stored values under ``want``'s quantisation (CAST to the same type)."""
        return self.op(Op.CAST, [src], [want])[0]

    def reshape(self, src: int, dims: Sequence[int], spec: Spec | None = None,
                reinterpret: bool = False) -> int:
        """``src`` with dimensions ``dims`` (a copy when they are its own)."""
        have = self.spec(src)
        if tuple(dims) == self.dims(src) and have.type not in _RESHAPE_TYPES:
            return self.op(Op.CAST, [src], [spec or have])[0]  # CAST to the same type copies
        if have.type is T.TENSOR_BOOL8:
            # NNAPI has no BOOL8 RESHAPE: through int32 and back, exactly.
            as_int = self.op(Op.SELECT, [src, self.const(I32, np.ones(self.dims(src), np.int32)),
                                         self.const(I32, np.zeros(self.dims(src), np.int32))], [I32])[0]
            moved = self.op(Op.RESHAPE, [as_int, self.ints(dims)], [I32])[0]
            return self.op(Op.NOT_EQUAL, [moved, self.const(I32, np.zeros(dims, np.int32))], [BOOL8])[0]
        return self.op(Op.RESHAPE, [src, self.ints(dims)], [spec or have], reinterpret)[0]


# ---------------------------------------------------------------------------------------
# One TFLite operator, read by position


#: TFLite operators that move stored values without looking at their quantisation.
RAW_MOVES = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE",
                        "GATHER", "TILE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "BATCH_TO_SPACE_ND",
                        "SPACE_TO_BATCH_ND", "MAX_POOL_2D", "SPLIT", "SPLIT_V", "UNPACK", "PACK",
                        "BROADCAST_TO"})

ACT_OPS = {int(FusedActivationFunc.RELU): Op.RELU, int(FusedActivationFunc.RELU1): Op.RELU1,
            int(FusedActivationFunc.RELU6): Op.RELU6}


class Node:
    """One TFLite operator as its mapping sees it: inputs by position (as HAL operands or
    constant values), options by name, outputs bound to the HAL operands that hold them."""

    def __init__(self, sub: _Subgraph, op: Any, code: str) -> None:
        self.sub, self.g, self.op, self.code = sub, sub.g, op, code
        self.inputs = [int(i) for i in (op.inputs if op.inputs is not None else [])]
        self.outputs = [int(i) for i in (op.outputs if op.outputs is not None else [])]
        self.opts = op.builtinOptions

    # -- inputs --
    def present(self, k: int) -> bool:
        return k < len(self.inputs) and self.inputs[k] >= 0

    def tensor(self, k: int) -> Any:
        return self.sub.tensor(self.inputs[k])

    def x(self, k: int) -> int:
        """The HAL operand of input ``k``."""
        if not self.present(k):
            raise Unmapped(f"input {k} is missing")
        return self.sub.operand(self.inputs[k])

    def value(self, k: int) -> np.ndarray | None:
        """Input ``k``'s constant value, or None: the HAL constant's stored values where the
        tensor is mapped already (folded), else the file's."""
        if not self.present(k):
            return None
        t = self.inputs[k]
        if t in self.sub.hal and self.g.is_const(self.sub.hal[t]):
            return self.g.values[self.sub.hal[t]]
        if t in self.sub.hal:
            return None
        return self.sub.file.tensor_value(self.tensor(k))

    def ints(self, k: int, what: str) -> list[int]:
        v = self.value(k)
        if v is None:
            raise Unmapped(f"{what} must be constant")
        return [int(a) for a in np.asarray(v).reshape(-1)]

    def dims(self, k: int) -> tuple[int, ...]:
        return self.g.dims(self.x(k))

    def opt(self, name: str, default: Any = None) -> Any:
        return getattr(self.opts, name, default) if self.opts is not None else default

    def act(self) -> int:
        """The fused activation as NNAPI's act input."""
        code = int(self.opt("fusedActivationFunction", 0))
        if code not in (0, *ACT_OPS):
            name = {v: k for k, v in vars(fb.ActivationFunctionType).items()}.get(code, code)
            raise Unmapped(f"fused activation {name}")
        return self.g.i32(code)

    # -- outputs --
    def out_spec(self, k: int = 0) -> Spec:
        return self.sub.spec_of(self.sub.tensor(self.outputs[k]))

    def emit(self, type_: Op, ins: Sequence[int], k: int = 0, fused: int = 0) -> int:
        """``type_`` writing output ``k``; ``fused``: a TFLite activation the HAL operation
        has no input for, applied after it."""
        spec = self.out_spec(k)
        y = self.g.op(type_, ins, [spec], self.code in RAW_MOVES)[0]
        if fused:
            if fused not in ACT_OPS:
                raise Unmapped(f"fused activation {fused}")
            y = self.g.op(ACT_OPS[fused], [y], [spec])[0]
        self.bind(k, y)
        return y

    def bind(self, k: int, idx: int) -> None:
        """Output ``k`` is HAL operand ``idx``; its shape must be the file's, where static."""
        t = self.sub.tensor(self.outputs[k])
        want = self.sub.declared_dims(t)
        if want is not None and tuple(self.g.dims(idx)) != want:
            raise Unmapped(f"output {k} computes to shape {list(self.g.dims(idx))}, the file "
                              f"declares {list(want)}")
        self.sub.hal[self.outputs[k]] = idx

    def out_dims(self, k: int = 0) -> tuple[int, ...]:
        """Output ``k``'s dimensions as the file declares them (rank 0 read as [1])."""
        t = self.sub.tensor(self.outputs[k])
        return tensor_dims(t) or (1,)
