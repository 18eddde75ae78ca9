"""The operation catalogue: one ``OpRecord`` per operation, grouped by family.

To add an operation, declare its record in the family module's ``RECORDS`` list (or a new
module listed in ``_FAMILIES``); every suite, generator and exporter picks it up.
"""

from __future__ import annotations

import importlib

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
