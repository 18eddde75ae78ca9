"""Model, Operand, Operation, Subgraph, Request and the result types of the HAL."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from nncert.hal.memory import Memory
from nncert.hal.types import (
    NO_TIMING,
    OperandLifeTime,
    OperandType,
    OperationType,
)

_DTYPES = {
    OperandType.FLOAT32: np.float32,
    OperandType.INT32: np.int32,
    OperandType.UINT32: np.uint32,
    OperandType.BOOL: np.bool_,
    OperandType.FLOAT16: np.float16,
    OperandType.TENSOR_FLOAT32: np.float32,
    OperandType.TENSOR_FLOAT16: np.float16,
    OperandType.TENSOR_INT32: np.int32,
    OperandType.TENSOR_BOOL8: np.bool_,
    OperandType.TENSOR_QUANT8_ASYMM: np.uint8,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
    OperandType.TENSOR_QUANT8_SYMM: np.int8,
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8,
    OperandType.TENSOR_QUANT16_ASYMM: np.uint16,
    OperandType.TENSOR_QUANT16_SYMM: np.int16,
    OperandType.TENSOR_OEM_BYTE: np.uint8,
    OperandType.OEM: np.uint8,
}


_DTYPE_OBJECTS = {t: np.dtype(v) for t, v in _DTYPES.items()}


def dtype_of(type_: OperandType) -> np.dtype:
    """The numpy dtype holding one element of an operand type (row-major, EXE-2)."""
    try:
        return _DTYPE_OBJECTS[type_]
    except KeyError:
        raise ValueError(f"operand type {type_!r} has no element type") from None


@dataclass
class DataLocation:
    pool_index: int = 0
    offset: int = 0
    length: int = 0
    padding: int = 0


@dataclass
class SymmPerChannelQuantParams:
    scales: tuple[float, ...]
    channel_dim: int


@dataclass
class Operand:
    type: OperandType
    dimensions: tuple[int, ...] = ()
    scale: float = 0.0
    zero_point: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = field(default_factory=DataLocation)
    channel_quant: SymmPerChannelQuantParams | None = None

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    @property
    def fully_specified(self) -> bool:
        """Known rank (or a scalar) and no unknown (0) dimension."""
        if self.type.is_scalar:
            return True
        return bool(self.dimensions) and all(d > 0 for d in self.dimensions)

    def byte_size(self) -> int:
        """Bytes of the operand's data; 0 when its shape is not fully known."""
        if self.type is OperandType.SUBGRAPH:
            return 0
        if self.type.is_scalar:
            return dtype_of(self.type).itemsize
        if not self.dimensions:
            return 0
        return int(np.prod(self.dimensions)) * dtype_of(self.type).itemsize

    def describe(self) -> str:
        q = f", scale={self.scale:g}, zp={self.zero_point}" if self.type.is_quant else ""
        return f"{self.type.name}{list(self.dimensions)}{q}"


@dataclass(frozen=True)
class OperandSpec:
    """An operand's type and quantisation, without dimensions (what a model transformation
    decides for an operand before it has a shape, or for an operand it rebuilds)."""

    type: OperandType
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: SymmPerChannelQuantParams | None = None

    @classmethod
    def of(cls, o: Operand) -> OperandSpec:
        return cls(o.type, o.scale, o.zero_point, o.channel_quant)


@dataclass
class Operation:
    type: OperationType
    inputs: list[int]
    outputs: list[int]


@dataclass
class Subgraph:
    operands: list[Operand] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    input_indexes: list[int] = field(default_factory=list)
    output_indexes: list[int] = field(default_factory=list)


@dataclass
class Model:
    main: Subgraph
    referenced: list[Subgraph] = field(default_factory=list)
    operand_values: bytes = b""
    pools: list[Memory] = field(default_factory=list)
    relax_computation_float32_to_float16: bool = False

    def constant_bytes(self, operand: Operand) -> bytes | None:
        """The raw bytes of a constant operand, or None for a non-constant."""
        loc = operand.location
        if operand.lifetime is OperandLifeTime.CONSTANT_COPY:
            return bytes(self.operand_values[loc.offset:loc.offset + loc.length])
        if operand.lifetime is OperandLifeTime.CONSTANT_REFERENCE:
            return bytes(self.pools[loc.pool_index].view()[loc.offset:loc.offset + loc.length])
        return None

    def constant_value(self, operand: Operand) -> np.ndarray | None:
        """A constant operand's value as an array of its dtype (a 0-d array for a scalar)."""
        data = self.constant_bytes(operand)
        if data is None:
            return None
        dtype = dtype_of(operand.type)
        # TENSOR_BOOL8: any non-zero byte is true; kernels and exporters get canonical 0 / 1.
        if dtype == np.bool_:
            arr = np.frombuffer(data, dtype=np.uint8) != 0
        else:
            arr = np.frombuffer(data, dtype=dtype)
        return arr.reshape(operand.dimensions) if operand.type.is_tensor else arr.reshape(())

    def copy(self) -> Model:
        """A deep copy that shares the memory pools."""
        return dataclasses.replace(
            self,
            main=_copy_subgraph(self.main),
            referenced=[_copy_subgraph(s) for s in self.referenced],
        )


def _enum(cls: type, value: object) -> object:
    """``value`` as a member of ``cls`` where it is one (a mutated or decoded model may hold
    raw ints, which a valid model's copy should not pass on to kernels and exporters)."""
    if value.__class__ is cls:
        return value
    try:
        return cls(value)
    except (ValueError, TypeError):
        return value


def _copy_operand(o: Operand) -> Operand:
    cq = o.channel_quant
    return Operand(_enum(OperandType, o.type), o.dimensions, o.scale, o.zero_point,
                   _enum(OperandLifeTime, o.lifetime),
                   DataLocation(o.location.pool_index, o.location.offset, o.location.length,
                                o.location.padding),
                   None if cq is None else SymmPerChannelQuantParams(cq.scales, cq.channel_dim))


def _copy_subgraph(sg: Subgraph) -> Subgraph:
    # By hand: copy.deepcopy is ten times slower, and validation suites copy models a lot.
    return Subgraph([_copy_operand(o) for o in sg.operands],
                    [Operation(_enum(OperationType, op.type), list(op.inputs), list(op.outputs))
                     for op in sg.operations],
                    list(sg.input_indexes), list(sg.output_indexes))


@dataclass
class RequestArgument:
    has_no_value: bool = False
    location: DataLocation = field(default_factory=DataLocation)
    dimensions: tuple[int, ...] = ()


@dataclass
class Request:
    inputs: list[RequestArgument]
    outputs: list[RequestArgument]
    #: Memory pools, or an int token of a driver-managed buffer (memory domains, MEM-4).
    pools: list[Memory | int]


@dataclass(frozen=True)
class BufferDesc:
    """What an app asks of a driver-managed buffer (MEM-4): its dimensions, which may be
    left empty or hold zeros; the roles then decide them (MEM-6)."""

    dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class BufferRole:
    """One use a driver-managed buffer is allocated for (MEM-4): input or output
    ``io_index`` of prepared model ``model_index`` (an index into the list of prepared
    models given to ``allocate``), used with ``probability`` in (0, 1]."""

    model_index: int
    io_index: int
    probability: float = 1.0


@dataclass(frozen=True)
class Timing:
    """Microseconds; NO_TIMING where not measured (EXE-7)."""

    time_on_device: int = NO_TIMING
    time_in_driver: int = NO_TIMING


NO_TIMING_INFO = Timing()


@dataclass
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool = True


@dataclass(frozen=True)
class PerformanceInfo:
    """Relative cost against the CPU: lower is better (DRV-1)."""

    exec_time: float = 1.0
    power_usage: float = 1.0


@dataclass
class Capabilities:
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: dict[OperandType, PerformanceInfo] = field(default_factory=dict)
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()
