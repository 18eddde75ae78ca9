"""ONNX mappings of the quantized_lstm family (nncert/ops/quantized_lstm.py): both declined.

ONNX has no integer LSTM: its LSTM operator is float only, and the QDQ form the exporter
uses elsewhere (dequantise, float operator, quantise) is not these operations. Their result
is defined by fixed-point steps (int16 accumulators saturated after each matrix product,
gemmlowp's polynomial tanh and logistic, rounding shifts, an integer layer normalisation),
which differ from the float functions by several output steps; ACC-2 allows one. A
composition of integer ONNX operators (MatMulInteger, bit shifts, a polynomial in int32)
could be exact, but would be hundreds of nodes per cell; not done.
"""

from __future__ import annotations

from nncert.drivers.compiled import Unmappable
from nncert.drivers.onnxruntime.export import Emit, Mapping
from nncert.hal.types import OperationType as Op


def _decline(e: Emit) -> None:
    raise Unmappable(f"{e.op.type.name}: ONNX has no integer LSTM, and a float LSTM between QDQ pairs is not "
                     "the fixed-point arithmetic that defines it (saturating int16 gate "
                     "accumulators, gemmlowp's polynomial tanh and logistic): off by several steps")


MAPPINGS = {Op.QUANTIZED_16BIT_LSTM: Mapping(_decline), Op.QUANTIZED_LSTM: Mapping(_decline)}
