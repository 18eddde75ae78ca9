"""The operation catalogue: one ``OpRecord`` per operation, grouped by family.

To add an operation, declare its record in the family module's ``RECORDS`` list (or a new
module listed in ``_FAMILIES``); every suite, generator and exporter picks it up.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from nncert.hal.types import OperationType
from nncert.ops.base import OpRecord

_FAMILIES = (
    "elementwise",  # ADD SUB MUL DIV MAXIMUM MINIMUM and unary math
    "logical",  # comparisons, LOGICAL_*, SELECT
    "activation",  # RELU.. LOGISTIC TANH HARD_SWISH ELU PRELU
    "normalization",  # SOFTMAX LOG_SOFTMAX L2_NORMALIZATION LOCAL_RESPONSE_NORMALIZATION
    "conv",  # CONV_2D DEPTHWISE GROUPED TRANSPOSE_CONV FULLY_CONNECTED
    "pool",  # AVERAGE MAX L2 pooling
    "shape",  # RESHAPE CONCATENATION PAD SQUEEZE TRANSPOSE SLICE TILE GATHER ...
    "reduce",  # MEAN REDUCE_* ARGMAX ARGMIN
    "quant",  # QUANTIZE DEQUANTIZE CAST
    "spatial",  # RESIZE_* DEPTH_TO_SPACE SPACE_TO_DEPTH BATCH_TO_SPACE_ND SPACE_TO_BATCH_ND
    "recurrent",  # RNN UNIDIRECTIONAL_SEQUENCE_RNN BIDIRECTIONAL_SEQUENCE_RNN SVDF
    "lstm",  # LSTM UNIDIRECTIONAL_SEQUENCE_LSTM BIDIRECTIONAL_SEQUENCE_LSTM
    "quantized_lstm",  # QUANTIZED_16BIT_LSTM QUANTIZED_LSTM
    "lookup",  # EMBEDDING_LOOKUP HASHTABLE_LOOKUP LSH_PROJECTION TOPK_V2
    "layers",  # CHANNEL_SHUFFLE INSTANCE_NORMALIZATION POW SPLIT
    "detection",  # AXIS_ALIGNED_BBOX_TRANSFORM BOX_WITH_NMS_LIMIT GENERATE_PROPOSALS DETECTION_POSTPROCESSING
    "regions",  # HEATMAP_MAX_KEYPOINT ROI_ALIGN ROI_POOLING RANDOM_MULTINOMIAL
    "tensor",  # FILL RANK BATCH_MATMUL PACK MIRROR_PAD REVERSE
)

CATALOGUE: dict[OperationType, OpRecord] = {}
for _name in _FAMILIES:
    for _record in importlib.import_module(f"nncert.ops.{_name}").RECORDS:
        if _record.type in CATALOGUE:
            raise RuntimeError(f"{_record.type.name} is declared twice in the catalogue")
        CATALOGUE[_record.type] = _record


def get(op: OperationType) -> OpRecord | None:
    """The record of ``op``, or None when the catalogue does not have it."""
    return CATALOGUE.get(op)


def records() -> list[OpRecord]:
    """All records, in OperationType order."""
    return [CATALOGUE[k] for k in sorted(CATALOGUE)]


def add_family_mappings(package: str, mappings: dict) -> None:
    """Add to ``mappings`` the ``MAPPINGS`` of every module of ``package``: an exporter's or
    importer's mappings of one operation family live beside its others, in a module of their
    own (``nncert/drivers/litert/mappings/recurrent.py``). A key mapped twice is an error."""
    pkg = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        module: Any = importlib.import_module(f"{package}.{info.name}")
        for key, value in module.MAPPINGS.items():
            if key in mappings:
                raise RuntimeError(f"{package}.{info.name} maps {getattr(key, 'name', key)}, "
                                   f"which is already mapped")
            mappings[key] = value
