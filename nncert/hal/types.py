"""The HAL 1.3 vocabulary (plus the later NNAPI feature levels), Python-cased.

Numeric codes are the HAL's own so that a model built here means the same
thing to a driver written against the C/C++ headers.
"""

from __future__ import annotations

import enum


class Version(enum.IntEnum):
    """HAL versions / NNAPI feature levels, ordered."""

    V1_0 = 10
    V1_1 = 11
    V1_2 = 12
    V1_3 = 13
    FL5 = 15  # Android S (AIDL V1)
    FL6 = 16  # Android T (AIDL V2)
    FL7 = 17  # Android U (AIDL V3)

    @property
    def label(self) -> str:
        return {10: "1.0", 11: "1.1", 12: "1.2", 13: "1.3"}.get(self.value, f"FL{self.value - 10}")

    @classmethod
    def parse(cls, text: str) -> Version:
        for v in cls:
            if text in (v.name, v.label, v.label.lower(), f"V{v.label}"):
                return v
        raise ValueError(f"unknown HAL version {text!r} (known: {', '.join(v.label for v in cls)})")


LATEST = Version.FL7


class OperandType(enum.IntEnum):
    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    BOOL = 6
    TENSOR_QUANT16_SYMM = 7
    TENSOR_FLOAT16 = 8
    TENSOR_BOOL8 = 9
    FLOAT16 = 10
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11
    TENSOR_QUANT16_ASYMM = 12
    TENSOR_QUANT8_SYMM = 13
    TENSOR_QUANT8_ASYMM_SIGNED = 14
    SUBGRAPH = 15
    OEM = 10000
    TENSOR_OEM_BYTE = 10001

    @property
    def version(self) -> Version:
        return _OPERAND_TYPE_VERSION.get(self, Version.V1_0)

    @property
    def is_scalar(self) -> bool:
        return self in _SCALARS

    @property
    def is_tensor(self) -> bool:
        return not self.is_scalar and self is not OperandType.SUBGRAPH

    @property
    def is_quant(self) -> bool:
        return self in _QUANT_RANGE

    @property
    def is_float(self) -> bool:
        return self in (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16,
                        OperandType.FLOAT32, OperandType.FLOAT16)

    @property
    def quant_range(self) -> tuple[int, int]:
        """(min, max) of the stored integers of a quantised type."""
        return _QUANT_RANGE[self]

    @property
    def short(self) -> str:
        return _SHORT.get(self, self.name.lower())


_SCALARS = frozenset({OperandType.FLOAT32, OperandType.INT32, OperandType.UINT32, OperandType.BOOL,
                      OperandType.FLOAT16, OperandType.OEM})

_OPERAND_TYPE_VERSION = {
    OperandType.BOOL: Version.V1_2,
    OperandType.TENSOR_QUANT16_SYMM: Version.V1_2,
    OperandType.TENSOR_FLOAT16: Version.V1_2,
    OperandType.TENSOR_BOOL8: Version.V1_2,
    OperandType.FLOAT16: Version.V1_2,
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: Version.V1_2,
    OperandType.TENSOR_QUANT16_ASYMM: Version.V1_2,
    OperandType.TENSOR_QUANT8_SYMM: Version.V1_2,
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: Version.V1_3,
    OperandType.SUBGRAPH: Version.V1_3,
}

_QUANT_RANGE = {
    OperandType.TENSOR_QUANT8_ASYMM: (0, 255),
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: (-128, 127),
    OperandType.TENSOR_QUANT8_SYMM: (-127, 127),
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: (-127, 127),
    OperandType.TENSOR_QUANT16_ASYMM: (0, 65535),
    OperandType.TENSOR_QUANT16_SYMM: (-32768, 32767),
}

_SHORT = {
    OperandType.TENSOR_FLOAT32: "float32",
    OperandType.TENSOR_FLOAT16: "float16",
    OperandType.TENSOR_INT32: "int32",
    OperandType.TENSOR_QUANT8_ASYMM: "quant8_asymm",
    OperandType.TENSOR_QUANT8_ASYMM_SIGNED: "quant8_asymm_signed",
    OperandType.TENSOR_QUANT8_SYMM: "quant8_symm",
    OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL: "quant8_symm_per_channel",
    OperandType.TENSOR_QUANT16_ASYMM: "quant16_asymm",
    OperandType.TENSOR_QUANT16_SYMM: "quant16_symm",
    OperandType.TENSOR_BOOL8: "bool8",
}


class OperationType(enum.IntEnum):
    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FLOOR = 8
    FULLY_CONNECTED = 9
    HASHTABLE_LOOKUP = 10
    L2_NORMALIZATION = 11
    L2_POOL_2D = 12
    LOCAL_RESPONSE_NORMALIZATION = 13
    LOGISTIC = 14
    LSH_PROJECTION = 15
    LSTM = 16
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    RNN = 24
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    SVDF = 27
    TANH = 28
    BATCH_TO_SPACE_ND = 29
    DIV = 30
    MEAN = 31
    PAD = 32
    SPACE_TO_BATCH_ND = 33
    SQUEEZE = 34
    STRIDED_SLICE = 35
    SUB = 36
    TRANSPOSE = 37
    ABS = 38
    ARGMAX = 39
    ARGMIN = 40
    AXIS_ALIGNED_BBOX_TRANSFORM = 41
    BIDIRECTIONAL_SEQUENCE_LSTM = 42
    BIDIRECTIONAL_SEQUENCE_RNN = 43
    BOX_WITH_NMS_LIMIT = 44
    CAST = 45
    CHANNEL_SHUFFLE = 46
    DETECTION_POSTPROCESSING = 47
    EQUAL = 48
    EXP = 49
    EXPAND_DIMS = 50
    GATHER = 51
    GENERATE_PROPOSALS = 52
    GREATER = 53
    GREATER_EQUAL = 54
    GROUPED_CONV_2D = 55
    HEATMAP_MAX_KEYPOINT = 56
    INSTANCE_NORMALIZATION = 57
    LESS = 58
    LESS_EQUAL = 59
    LOG = 60
    LOGICAL_AND = 61
    LOGICAL_NOT = 62
    LOGICAL_OR = 63
    LOG_SOFTMAX = 64
    MAXIMUM = 65
    MINIMUM = 66
    NEG = 67
    NOT_EQUAL = 68
    PAD_V2 = 69
    POW = 70
    PRELU = 71
    QUANTIZE = 72
    QUANTIZED_16BIT_LSTM = 73
    RANDOM_MULTINOMIAL = 74
    REDUCE_ALL = 75
    REDUCE_ANY = 76
    REDUCE_MAX = 77
    REDUCE_MIN = 78
    REDUCE_PROD = 79
    REDUCE_SUM = 80
    ROI_ALIGN = 81
    ROI_POOLING = 82
    RSQRT = 83
    SELECT = 84
    SIN = 85
    SLICE = 86
    SPLIT = 87
    SQRT = 88
    TILE = 89
    TOPK_V2 = 90
    TRANSPOSE_CONV_2D = 91
    UNIDIRECTIONAL_SEQUENCE_LSTM = 92
    UNIDIRECTIONAL_SEQUENCE_RNN = 93
    RESIZE_NEAREST_NEIGHBOR = 94
    QUANTIZED_LSTM = 95
    IF = 96
    WHILE = 97
    ELU = 98
    HARD_SWISH = 99
    FILL = 100
    RANK = 101
    BATCH_MATMUL = 102
    PACK = 103
    MIRROR_PAD = 104
    REVERSE = 105
    OEM_OPERATION = 10000

    @property
    def version(self) -> Version:
        """The HAL version (or feature level) that introduced the operation."""
        v = self.value
        if v <= 28:
            return Version.V1_0
        if v <= 37:
            return Version.V1_1
        if v <= 94:
            return Version.V1_2
        if v <= 101:
            return Version.V1_3
        if v <= 103:
            return Version.FL6
        if v <= 105:
            return Version.FL7
        return Version.V1_0  # OEM_OPERATION


class OperandLifeTime(enum.IntEnum):
    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6


class ErrorStatus(enum.IntEnum):
    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8


class ExecutionPreference(enum.IntEnum):
    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


class Priority(enum.IntEnum):
    LOW = 0
    MEDIUM = 1
    HIGH = 2


class MeasureTiming(enum.IntEnum):
    NO = 0
    YES = 1


class FusedActivationFunc(enum.IntEnum):
    NONE = 0
    RELU = 1
    RELU1 = 2
    RELU6 = 3


class DeviceType(enum.IntEnum):
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


#: "not available" for Timing fields (EXE-7).
NO_TIMING = 2**64 - 1
#: A WHILE loop's time limit per execution when the request names none, and the most it may
#: name, in nanoseconds (EXE-9).
LOOP_TIMEOUT_DEFAULT_NS = 2_000_000_000
LOOP_TIMEOUT_MAXIMUM_NS = 15_000_000_000
#: Bytes of a compilation-cache token (CACHE-1).
BYTE_SIZE_OF_CACHE_TOKEN = 32
#: Constants of at most this many bytes travel in operandValues (MEM-1).
MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES = 128
