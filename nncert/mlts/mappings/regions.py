"""TFLite importer mappings of the regions family: MULTINOMIAL becomes RANDOM_MULTINOMIAL
(TFLite has no builtin for HEATMAP_MAX_KEYPOINT, ROI_ALIGN or ROI_POOLING). The
RandomOptions seed and seed2 become the constant seeds input; int64 samples have no HAL
type, and seeds beyond int32 no HAL value: both are unmapped with the reason."""

from __future__ import annotations

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import I32, Node, Unmapped


def _multinomial(n: Node) -> None:
    if n.out_spec(0).type is not T.TENSOR_INT32:
        raise Unmapped(f"MULTINOMIAL with {n.out_spec(0).type.name} samples: NNAPI's are TENSOR_INT32")
    seeds = [int(n.opt("seed", 0)), int(n.opt("seed2", 0))]
    if any(not -2**31 <= s < 2**31 for s in seeds):
        raise Unmapped(f"MULTINOMIAL seeds {seeds} do not fit NNAPI's int32 seeds")
    count = n.ints(1, "the sample count")[0]
    n.emit(Op.RANDOM_MULTINOMIAL, [n.x(0), n.g.i32(count), n.g.const(I32, np.array(seeds, np.int32))])


MAPPINGS = {"MULTINOMIAL": _multinomial}
