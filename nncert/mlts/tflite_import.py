"""TFLite flatbuffer -> HAL model: the inverse of the LiteRT exporter, so that MLTS can run
real ``.tflite`` models on any driver.

``import_tflite`` reads the flatbuffer with the schema that ships with ai-edge-litert and
maps each builtin operator to catalogue operations (``MAPPINGS``, one function per TFLite
operator), computing every operand's shape with the catalogue's shape rules. Layout stays
NHWC. What the mapping does once for all operators:

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
- **Compositions** for operators NNAPI lacks: SPLIT / SPLIT_V / UNPACK are SLICEs (and
  RESHAPEs), PACK is EXPAND_DIMS + CONCATENATION, LEAKY_RELU is PRELU with a constant alpha,
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

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import fb, tflite_type
from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model, Operand, SymmPerChannelQuantParams, dtype_of
from nncert.hal.types import FusedActivationFunc
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.ops import get
from nncert.ops.base import MAX_OUTPUT_ELEMENTS, ShapeError, match, to_real
from nncert.ops.evaluate import evaluate, output_shapes
from nncert.ops.window import PADDING_SAME, PADDING_VALID, implicit_padding

__all__ = ["ImportReport", "MalformedModel", "OperatorStatus", "StateVariable", "UnsupportedModel",
           "import_report", "import_tflite"]

Source = bytes | bytearray | memoryview | str | os.PathLike


class UnsupportedModel(ValueError):  # noqa: N818 - the name the MLTS API gives it
    """The model uses operators or features that NNAPI (the catalogue) cannot express. The
    message names them all with counts; ``report`` has the per-operator detail."""

    def __init__(self, report: ImportReport) -> None:
        super().__init__(report.message())
        self.report = report


class MalformedModel(ValueError):  # noqa: N818 - named like UnsupportedModel
    """The bytes are not a well-formed TFLite flatbuffer."""


class _Unmappable(Exception):  # noqa: N818 - a signal caught per operator
    """This operator instance cannot be mapped; the message says why."""


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
                labels[o.code if o.reason == _NO_EQUIVALENT else f"{o.code} ({o.reason})"] += 1
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


_NO_EQUIVALENT = "no NNAPI equivalent in the catalogue"


# ---------------------------------------------------------------------------------------
# Reading the flatbuffer


_BUILTIN_NAMES = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")} \
    if fb is not None else {}
_TENSOR_TYPE_NAMES = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")} \
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


_HAL_TYPE = _hal_types() if fb is not None else {}


def _read_bytes(data: Source) -> bytes:
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


@dataclass(frozen=True)
class Spec:
    """A HAL operand's type and quantisation, without dimensions."""

    type: T
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: SymmPerChannelQuantParams | None = None

    @classmethod
    def of(cls, o: Operand) -> Spec:
        return cls(o.type, o.scale, o.zero_point, o.channel_quant)


F32 = Spec(T.TENSOR_FLOAT32)
I32 = Spec(T.TENSOR_INT32)
BOOL8 = Spec(T.TENSOR_BOOL8)


class _File:
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
            raise MalformedModel(f"corrupt TFLite model: tensor {_name(t)} names buffer {t.buffer}, "
                                 f"the model has {len(buffers)}")
        buf = buffers[t.buffer]
        data = buf.data
        if data is None and buf.offset > 1:  # a model over 2 GB keeps buffers after the flatbuffer
            data = np.frombuffer(self.raw, np.uint8, int(buf.size), int(buf.offset))
        shape = _dims(t)
        if shape and 0 in shape and t.sparsity is None:  # an empty constant (a scalar's shape)
            return np.zeros(shape, _NP_OF_TFLITE.get(_TENSOR_TYPE_NAMES.get(t.type), np.float32))
        if data is None or len(data) == 0:
            return None
        tname = _TENSOR_TYPE_NAMES.get(t.type, str(t.type))
        if tname not in _NP_OF_TFLITE:
            raise _Unmappable(f"constant of type {tname}")
        dtype = np.dtype(_NP_OF_TFLITE[tname])
        raw = np.asarray(data, np.uint8)
        if raw.size % dtype.itemsize:
            raise MalformedModel(f"corrupt TFLite model: tensor {_name(t)}'s buffer has {raw.size} bytes, "
                                 f"not a whole number of {tname}")
        values = raw.view(dtype)
        if t.sparsity is not None:
            return _densify(values, shape, t.sparsity, _name(t))
        if values.size != math.prod(shape):
            raise MalformedModel(f"corrupt TFLite model: tensor {_name(t)} of shape {list(shape)} has "
                                 f"{values.size} values")
        return values.reshape(shape)


def _dims(t: Any) -> tuple[int, ...]:
    """A tensor's declared dimensions (-1 belongs in the shape signature only)."""
    d = tuple(int(v) for v in (t.shape if t.shape is not None else ()))
    if any(v < 0 for v in d):
        raise MalformedModel(f"corrupt TFLite model: tensor {_name(t)} has shape {list(d)}")
    return d


def _name(t: Any) -> str:
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


class _Graph:
    """A ModelBuilder that knows its constants' values and computes every new operand's
    dimensions with the catalogue's shape rules."""

    def __init__(self) -> None:
        self.b = ModelBuilder()
        self.values: dict[int, np.ndarray] = {}
        self._scalars: dict[tuple[T, Any], int] = {}
        self.log: list[str] = []

    # -- operands --
    def spec(self, idx: int) -> Spec:
        return Spec.of(self.b.operands[idx])

    def dims(self, idx: int) -> tuple[int, ...]:
        return self.b.operands[idx].dimensions

    def is_const(self, idx: int) -> bool:
        return idx in self.values

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
        in_ops = [self.b.operands[i] for i in ins]
        try:
            m = match(record, [o.type for o in in_ops], [s.type for s in outs])
        except ShapeError as e:
            raise _Unmappable(str(e)) from None
        required = [self._required(record, m, in_ops, k, s) for k, s in enumerate(outs)]
        vals = [self._known(record, i) for i in ins]
        probe = [Operand(s.type, (), s.scale, s.zero_point, channel_quant=s.channel_quant) for s in required]
        try:
            shapes = output_shapes(record, in_ops, vals, probe, m)
        except ShapeError as e:
            raise _Unmappable(f"{type_.name}: {e}") from None
        if shapes is None:
            raise _Unmappable(f"{type_.name}'s output shape depends on values known only at run time")
        out_ops = [dataclasses.replace(p, dimensions=tuple(d)) for p, d in zip(probe, shapes, strict=True)]
        if any(math.prod(d) > MAX_OUTPUT_ELEMENTS for d in shapes):
            raise _Unmappable(f"{type_.name} output of shape {[list(d) for d in shapes]} is beyond the "
                              f"{MAX_OUTPUT_ELEMENTS:,} elements the reference kernels compute")
        if all(i in self.values for i in ins):
            try:
                results = evaluate(record, in_ops, [self.values[i] for i in ins], out_ops, m)
            except ShapeError as e:
                raise _Unmappable(f"{type_.name}: {e}") from None
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
    def _required(record: Any, m: Any, ins: list[Operand], k: int, want: Spec) -> Spec:
        q = m.signature.outputs[k].quant
        if not want.type.is_quant or want.channel_quant is not None:
            return want
        if q.kind == "same":
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
_RAW_MOVES = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE",
                        "GATHER", "TILE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "BATCH_TO_SPACE_ND",
                        "SPACE_TO_BATCH_ND", "MAX_POOL_2D", "SPLIT", "SPLIT_V", "UNPACK", "PACK",
                        "BROADCAST_TO"})

_ACT_OPS = {int(FusedActivationFunc.RELU): Op.RELU, int(FusedActivationFunc.RELU1): Op.RELU1,
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
            raise _Unmappable(f"input {k} is missing")
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
            raise _Unmappable(f"{what} must be constant")
        return [int(a) for a in np.asarray(v).reshape(-1)]

    def dims(self, k: int) -> tuple[int, ...]:
        return self.g.dims(self.x(k))

    def opt(self, name: str, default: Any = None) -> Any:
        return getattr(self.opts, name, default) if self.opts is not None else default

    def act(self) -> int:
        """The fused activation as NNAPI's act input."""
        code = int(self.opt("fusedActivationFunction", 0))
        if code not in (0, *_ACT_OPS):
            name = {v: k for k, v in vars(fb.ActivationFunctionType).items()}.get(code, code)
            raise _Unmappable(f"fused activation {name}")
        return self.g.i32(code)

    # -- outputs --
    def out_spec(self, k: int = 0) -> Spec:
        return self.sub.spec_of(self.sub.tensor(self.outputs[k]))

    def emit(self, type_: Op, ins: Sequence[int], k: int = 0, fused: int = 0) -> int:
        """``type_`` writing output ``k``; ``fused``: a TFLite activation the HAL operation
        has no input for, applied after it."""
        spec = self.out_spec(k)
        y = self.g.op(type_, ins, [spec], self.code in _RAW_MOVES)[0]
        if fused:
            if fused not in _ACT_OPS:
                raise _Unmappable(f"fused activation {fused}")
            y = self.g.op(_ACT_OPS[fused], [y], [spec])[0]
        self.bind(k, y)
        return y

    def bind(self, k: int, idx: int) -> None:
        """Output ``k`` is HAL operand ``idx``; its shape must be the file's, where static."""
        t = self.sub.tensor(self.outputs[k])
        want = self.sub.declared_dims(t)
        if want is not None and tuple(self.g.dims(idx)) != want:
            raise _Unmappable(f"output {k} computes to shape {list(self.g.dims(idx))}, the file "
                              f"declares {list(want)}")
        self.sub.hal[self.outputs[k]] = idx

    def out_dims(self, k: int = 0) -> tuple[int, ...]:
        """Output ``k``'s dimensions as the file declares them (rank 0 read as [1])."""
        t = self.sub.tensor(self.outputs[k])
        return _dims(t) or (1,)


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
    def __init__(self, imp: _Importer, index: int, g: _Graph, exact_shapes: bool) -> None:
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
        return _dims(t) or (1,)

    def spec_of(self, t: Any) -> Spec:
        """The HAL type and quantisation of a TFLite tensor."""
        tname = _TENSOR_TYPE_NAMES.get(t.type, str(t.type))
        hal = _HAL_TYPE.get(tname)
        if hal is None:
            raise _Unmappable(f"{tname} tensors")
        q = t.quantization
        scales = list(q.scale) if q is not None and q.scale is not None else []
        if hal is T.TENSOR_INT32 and len(scales) == 1 and scales[0] > 0:
            return Spec(hal, float(scales[0]))  # a bias: scale input x filter scale
        if not hal.is_quant:
            return Spec(hal)
        zps = list(q.zeroPoint) if q is not None and q.zeroPoint is not None else []
        if len(scales) > 1:
            if tname != "INT8" or any(int(z) for z in zps):
                raise _Unmappable(f"per-channel {tname} quantisation with non-zero zero points")
            dim = int(q.quantizedDimension) if q is not None else 0
            return Spec(T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                        channel_quant=SymmPerChannelQuantParams(tuple(float(s) for s in scales), dim))
        if not scales:
            return Spec(hal, 1.0, 0)
        zp = int(zps[0]) if zps else 0
        if hal is T.TENSOR_QUANT16_SYMM and zp:
            raise _Unmappable("INT16 quantisation with a non-zero zero point")
        return Spec(hal, float(scales[0]), zp)

    def operand(self, t: int) -> int:
        """The HAL operand of TFLite tensor ``t``: the one mapped so far, or a new constant."""
        if t in self.hal:
            return self.hal[t]
        tensor = self.tensor(t)
        value = self.file.tensor_value(tensor)
        if value is None:
            raise _Unmappable(f"tensor {_name(tensor)} is read before anything writes it")
        self.hal[t] = self.constant(tensor, value)
        return self.hal[t]

    def constant(self, tensor: Any, value: np.ndarray, spec: Spec | None = None) -> int:
        if value.dtype == np.int64:
            if value.size and (value.min() < -2**31 or value.max() >= 2**31):
                raise _Unmappable("INT64 constants beyond the int32 range")
            return self.g.const(I32, value.astype(np.int32))
        return self.g.const(spec or self.spec_of(tensor), value)

    def run(self, inputs: Sequence[int | None],
            consts: dict[int, tuple[Spec, np.ndarray]] | None = None) -> None:
        """Map the operators; ``inputs``: HAL operands for the subgraph's inputs, None where
        ``consts`` gives the input (by position) as a constant of that type and value."""
        sg_inputs = [int(i) for i in (self.sg.inputs if self.sg.inputs is not None else [])]
        if len(sg_inputs) != len(inputs):
            raise _Unmappable(f"subgraph {self.index} takes {len(sg_inputs)} inputs, is given {len(inputs)}")
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
            except (_Unmappable, ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
                if isinstance(e, MalformedModel):
                    raise
                reason = str(e) if isinstance(e, _Unmappable) else f"importer error {type(e).__name__}: {e}"
                self.imp.report.operators.append(
                    OperatorStatus(self.index, n, code, "unsupported", reason=reason.replace("\n", " ")))
                self._placeholders(node)
                continue
            self.imp.report.operators.append(
                OperatorStatus(self.index, n, code, status, tuple(self.g.log[start:])))

    def map(self, node: Node) -> str:
        if node.code in _STATE_OPS:
            if self.index != self.imp.main_index:
                raise _Unmappable("resource variables inside a control-flow subgraph")
            return self.imp.state_op(self, node)
        mapping = MAPPINGS.get(node.code)
        if mapping is None:
            raise _Unmappable(_NO_EQUIVALENT)
        before = len(self.g.log)
        mapping(node)
        missing = [k for k, t in enumerate(node.outputs) if t >= 0 and t not in self.hal]
        if missing:
            raise _Unmappable(f"the mapping wrote no output {missing[0]}")
        return "mapped" if len(self.g.log) > before else "folded"

    def _placeholders(self, node: Node) -> None:
        """Stand-ins for an unmapped operator's outputs, so that the rest can be reported."""
        for t in node.outputs:
            if t < 0 or t in self.hal:
                continue
            tensor = self.tensor(t)
            try:
                spec = self.spec_of(tensor)
            except _Unmappable:
                spec = F32
            dims = tuple(max(1, d) for d in _dims(tensor)) or (1,)
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
        self.file = _File(raw)
        self.input_shapes = input_shapes
        self.report = ImportReport()
        self.main_index = 0
        self.handles: dict[int, str] = {}  # main-subgraph resource tensor -> variable name
        self.variables: dict[str, _Variable] = {}
        self.initial: dict[str, np.ndarray] = {}  # variable -> value its CALL_ONCE assigns

    def run(self) -> Model | None:
        g = _Graph()
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
            dims = _dims(tensor) if shapes[pos] is None else shapes[pos]
            try:
                spec = main.spec_of(tensor)
            except _Unmappable as e:
                self.report.problems.append(f"input {pos} ({e})")
                spec = F32
            inputs.append(g.operand(spec, tuple(int(d) for d in dims) or (1,)))
        main.inputs = inputs
        main.run(inputs)
        try:
            outputs = main.output_operands()
        except _Unmappable as e:
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
                raise _Unmappable("a resource that no VAR_HANDLE of the main subgraph makes")
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
        sub = _Subgraph(self, index, _Graph(), exact_shapes=False)
        names: dict[int, str] = {}
        for op in sg.operators or []:
            node = Node(sub, op, self.file.codes[op.opcodeIndex])
            if node.code == "VAR_HANDLE":
                names[node.outputs[0]] = self._variable_name(node)
            elif node.code == "ASSIGN_VARIABLE" and node.inputs and node.inputs[0] in names:
                value = node.value(1)
                if value is None:
                    raise _Unmappable("CALL_ONCE initialiser assigns a computed value")
                self.initial[names[node.inputs[0]]] = np.asarray(value)
            else:
                raise _Unmappable(f"CALL_ONCE initialiser runs {node.code}")

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
        g = _Graph()
        sub = _Subgraph(self, index, g, exact_shapes=False)
        ins = [None if pos in consts else g.operand(spec, dims) for pos, (spec, dims) in enumerate(specs)]
        sub.inputs = [i for i in ins if i is not None]
        sub.run(ins, consts)
        if any(o.status == "unsupported" for o in self.report.operators if o.subgraph == index):
            raise _Unmappable(f"subgraph {index} has unsupported operators")
        return g.b, sub.inputs, sub.output_operands()


# ---------------------------------------------------------------------------------------
# Mappings: one function per TFLite builtin operator


def _padding(n: Node) -> int:
    scheme = int(n.opt("padding", fb.Padding.SAME))
    if scheme == fb.Padding.SAME:
        return n.g.i32(PADDING_SAME)
    if scheme == fb.Padding.VALID:
        return n.g.i32(PADDING_VALID)
    raise _Unmappable(f"padding scheme {scheme}")


def _float_weights(n: Node, k: int, x: int) -> int:
    """Input ``k`` (weights); quantised constant weights of a float operation (hybrid
    quantisation) are dequantised into float constants."""
    w = n.x(k)
    if n.g.spec(x).type.is_quant or not n.g.spec(w).type.is_quant:
        return w
    if not n.g.is_const(w):
        raise _Unmappable("quantised weights of a float operation must be constant")
    o = n.g.b.operands[w]
    return n.g.const(Spec(n.g.spec(x).type), to_real(n.g.values[w], o))


def _filter(n: Node, k: int, x: int, channel_dim: int) -> int:
    """A convolution filter: int8 with one scale per output channel, or any int8 filter of a
    uint8 input (NNAPI's only mixed case), becomes TENSOR_QUANT8_SYMM_PER_CHANNEL."""
    t = n.tensor(k)
    spec = n.sub.spec_of(t)
    xt = n.g.spec(x).type
    if spec.type is T.TENSOR_QUANT8_SYMM_PER_CHANNEL and spec.channel_quant.channel_dim != channel_dim:
        raise _Unmappable(f"per-channel filter quantised along dimension "
                          f"{spec.channel_quant.channel_dim}, NNAPI needs {channel_dim}")
    if spec.type is T.TENSOR_QUANT8_ASYMM_SIGNED and xt is T.TENSOR_QUANT8_ASYMM:
        if spec.zero_point:
            raise _Unmappable("an int8 filter with a non-zero zero point for a uint8 input")
        value = n.value(k)
        if value is None:
            raise _Unmappable("a per-channel filter must be constant")
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
            raise _Unmappable(f"bias scale {n.g.spec(b).scale:g}, NNAPI needs {want.scale:g}")
        return b
    if value.dtype != np.int32:
        raise _Unmappable(f"{value.dtype} bias")
    return n.g.const(want, value)


def _bias_spec(g: _Graph, x: int, w: int) -> Spec:
    xs, ws = g.spec(x), g.spec(w)
    if not xs.type.is_quant:
        return Spec(xs.type)
    return Spec(T.TENSOR_INT32, 0.0 if ws.channel_quant is not None else float(xs.scale) * float(ws.scale))


def _zero_bias(g: _Graph, x: int, w: int, count: int) -> int:
    return g.const(_bias_spec(g, x, w), np.zeros(count))


def _dilation(n: Node) -> tuple[int, int]:
    return int(n.opt("dilationHFactor", 1) or 1), int(n.opt("dilationWFactor", 1) or 1)


def _rank4(n: Node, *idx: int) -> None:
    for i in idx:
        if len(n.g.dims(i)) != 4:
            raise _Unmappable(f"{n.code} on a tensor of shape {list(n.g.dims(i))} (rank 4 needed)")


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
            raise _Unmappable("a grouped convolution with dilation")
        if fin == 0 or cin % fin:
            raise _Unmappable(f"filter depth {fin} does not divide the input depth {cin}")
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
        raise _Unmappable(f"filter depth {depth} is not a multiple of the input depth {cin}")
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
        raise _Unmappable("shuffled weights format")
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
            raise _Unmappable("per-channel weights must be constant")
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


def _batch_matmul(n: Node) -> None:
    """x @ rhs with a constant rhs: FULLY_CONNECTED (weights rhs transposed) on x's rows."""
    g = n.g
    rhs = n.value(1)
    if rhs is None:
        raise _Unmappable("a non-constant right-hand side")
    if rhs.ndim < 2 or math.prod(rhs.shape[:-2]) != 1:
        raise _Unmappable("a batched right-hand side")
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
        raise _Unmappable("per-channel quantised right-hand side")
    if xs.type.is_quant:
        if not spec.type.is_quant:
            raise _Unmappable("a float right-hand side for a quantised input")
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
        raise _Unmappable("int32 DIV truncates toward zero, NNAPI's int32 DIV floors")
    n.emit(Op.DIV, [n.x(0), n.x(1), n.act()])


def _floor_div(n: Node) -> None:
    if n.g.spec(n.x(0)).type is not T.TENSOR_INT32:
        raise _Unmappable("FLOOR_DIV of non-int32 tensors")
    n.emit(Op.DIV, [n.x(0), n.x(1), n.g.i32(0)])


def _square(n: Node) -> None:
    n.emit(Op.MUL, [n.x(0), n.x(0), n.g.i32(0)])


def _squared_difference(n: Node) -> None:
    g = n.g
    spec = n.out_spec()
    if spec.type.is_quant:
        raise _Unmappable("quantised SQUARED_DIFFERENCE")
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
    if not _dims(n.tensor(0)):  # a scalar: [] becomes [1], which the HAL operand already is
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
        raise _Unmappable(f"{what} of type {n.g.spec(x).type.name}")
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
        raise _Unmappable("a non-constant pad value")
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
            raise _Unmappable(f"STRIDED_SLICE with {mask}")
    if n.opt("offset", False):
        raise _Unmappable("STRIDED_SLICE with offset")
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
        raise _Unmappable(f"{total} does not split into {parts} parts")
    _slices(n, x, axis, [total // parts] * parts)


def _split_v(n: Node) -> None:
    x = n.x(0)
    sizes = n.ints(1, "the split sizes")
    axis = n.ints(2, "the axis")[0]
    total = n.g.dims(x)[axis % len(n.g.dims(x))]
    if -1 in sizes:
        sizes[sizes.index(-1)] = total - (sum(sizes) + 1)
    _slices(n, x, axis, sizes)


def _pack(n: Node) -> None:
    g = n.g
    axis = int(n.opt("axis", 0))
    ins = [n.x(k) for k in range(len(n.inputs))]
    rank = len(g.dims(ins[0])) + 1
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
        raise _Unmappable("GATHER with batch_dims")
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
        raise _Unmappable(f"shape {list(g.dims(x))} does not broadcast to {shape}")
    n.emit(Op.TILE, [x, g.ints([s // d for d, s in zip(dims, shape, strict=True)])])


def _select(n: Node) -> None:
    g = n.g
    cond, a, b = n.x(0), n.x(1), n.x(2)
    if not g.dims(cond) == g.dims(a) == g.dims(b):
        raise _Unmappable("SELECT with broadcasting")
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
        raise _Unmappable("DENSIFY of a non-constant tensor")
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
        raise _Unmappable("quantised RELU_0_TO_1")
    y = g.op(Op.RELU, [x], [g.spec(x)])[0]
    n.emit(Op.MINIMUM, [y, g.const(g.spec(x), [1.0])])


def _if(n: Node) -> None:
    """HAL IF; the branches are referenced subgraphs, constants passed in are inlined."""
    g = n.g
    imp = n.sub.imp
    cond = n.x(0)
    if g.spec(cond).type is not T.TENSOR_BOOL8:
        raise _Unmappable(f"an IF condition of type {g.spec(cond).type.name}")
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
            raise _Unmappable(f"IF branches give output {k} shapes {list(da)} and {list(db)}")
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


# ---------------------------------------------------------------------------------------
# Entry points


def import_report(data: Source, input_shapes: Sequence[Sequence[int] | None] | None = None) -> ImportReport:
    """The mapping status of every operator of a .tflite model (``data``: its bytes or a
    path), without raising for unsupported ones; MalformedModel for a corrupt file."""
    imp = _Importer(_read_bytes(data), input_shapes)
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
    imp = _Importer(_read_bytes(data), input_shapes)
    model = imp.run()
    if model is None:
        raise UnsupportedModel(imp.report)
    return model
