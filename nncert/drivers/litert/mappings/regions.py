"""LiteRT mappings of the regions family (nncert/ops/regions.py).

RANDOM_MULTINOMIAL is TFLite's MULTINOMIAL: float32 logits, the sample count as a scalar
int32 tensor, the two seeds as the RandomOptions seed and seed2 (so the HAL seeds must be a
constant), int32 samples drawn with TFLite's own generator; the output is judged
statistically. TFLite has no builtin for HEATMAP_MAX_KEYPOINT, ROI_ALIGN or ROI_POOLING, and
no composition of its builtins gathers per-box windows of data-dependent position (boxes
are run-time values): they are declined with that reason.
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import Node
from nncert.hal.types import OperationType as Op


def _multinomial(n: Node) -> None:
    seeds = [int(v) for v in np.asarray(n.value("seeds")).reshape(-1)]
    if len(seeds) != 2:
        raise Unmappable(f"RANDOM_MULTINOMIAL: seeds must hold 2 values, has {len(seeds)}")
    samples = n.g.const(np.asarray(int(n.scalar("samples")), np.int32))
    n.g.op("MULTINOMIAL", [n.t("input"), samples], [n.out()], "Random", seed=seeds[0], seed2=seeds[1])


def _declined(what: str):
    def fn(n: Node) -> None:
        raise Unmappable(f"{n.record.name}: TFLite has no {what} builtin, and boxes given at run time "
                         f"select windows no composition of its builtins can gather")
    return fn


MAPPINGS = {
    Op.RANDOM_MULTINOMIAL: _multinomial,
    Op.ROI_ALIGN: _declined("ROI align"),
    Op.ROI_POOLING: _declined("ROI pooling"),
    Op.HEATMAP_MAX_KEYPOINT: _declined("heatmap keypoint"),
}
