"""MLTS accuracy (MLTS-1, ACC-2): a driver's outputs on real data against the LiteRT CPU
baseline's, and both against the labels where the data has them.

Per output, over every sample: the mean and the largest absolute error and the mean squared
error of the driver's real values (quantised outputs dequantised) against the baseline's.
A quantised output must be within ``steps`` quantisation steps of the baseline on every
element (ACC-2: 1, 3 for a MobileNet-family quantised model); a float output within the
ACC-5 large-graph criterion (a whole network: accumulation order differs between runtimes).
A classifier also gets top-1 / top-5 accuracy against the labels (driver and baseline) and
the driver's top-1 agreement with the baseline (reported, not judged: a driver as accurate
as the baseline may still pick differently where both are unsure); the driver fails when its
accuracy is below the baseline's by more than ``margin``.

A model whose outputs are rows up to a count (DETECTION_POSTPROCESSING: scores, boxes and
classes, then the number of detections) is compared on the valid rows only (``valid_rows``):
what lies past the count is unspecified (LiteRT leaves there whatever its arena held). Its
integer outputs, the count and the classes, must then equal the baseline's (``exact``); its
scores and boxes are float outputs like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from nncert.hal.model import Operand
from nncert.hal.types import OperandType
from nncert.ops.base import dequantize
from nncert.testing.criteria import GRAPH_CRITERIA, compare_graph

#: How far below the baseline's top-1 / top-5 accuracy a driver may be (a fraction).
ACCURACY_MARGIN = 0.01
#: The ACC-5 criterion a float output of a whole model is judged by.
FLOAT_CRITERION = GRAPH_CRITERIA["large_graph"]["float32"]


def real(values: np.ndarray, operand: Operand) -> np.ndarray:
    """An output's real values (float64): quantised ones dequantised as the catalogue does."""
    return dequantize(values, operand) if operand.type.is_quant else values.astype(np.float64)


@dataclass
class OutputStats:
    """Driver against baseline on one output, accumulated over the samples."""

    index: int
    operand: Operand
    steps: int  # the ACC-2 allowance for a quantised output
    n: int = 0
    abs_sum: float = 0.0
    sq_sum: float = 0.0
    max_abs: float = 0.0
    max_steps: int = 0  # the largest difference in quantisation steps (quantised outputs)
    over_steps: int = 0  # elements beyond the allowance
    float_failure: str | None = None  # the first sample's ACC-5 failure of a float output
    exact: bool = False  # every element must equal the baseline's (a detection's count and classes)
    mismatches: int = 0  # elements of an exact output that differ

    def add(self, baseline: np.ndarray, driver: np.ndarray) -> None:
        b, d = np.asarray(baseline), np.asarray(driver)
        if b.shape != d.shape:
            if b.size == d.size:  # rank 0 against [1]: the same values
                d = d.reshape(b.shape)
            else:
                self.float_failure = self.float_failure or f"shape {list(d.shape)}, baseline {list(b.shape)}"
                return
        err = real(d, self.operand) - real(b, self.operand)
        finite = np.isfinite(err)
        err = np.where(finite, err, 0.0)
        self.n += err.size
        self.abs_sum += float(np.abs(err).sum())
        self.sq_sum += float((err ** 2).sum())
        self.max_abs = max(self.max_abs, float(np.abs(err).max(initial=0.0)))
        if self.exact:
            self.mismatches += int(np.count_nonzero(b.astype(np.float64) != d.astype(np.float64)))
        elif self.operand.type.is_quant:
            diff = np.abs(d.astype(np.int64) - b.astype(np.int64))
            self.max_steps = max(self.max_steps, int(diff.max(initial=0)))
            self.over_steps += int((diff > self.steps).sum())
        elif self.float_failure is None:
            self.float_failure = compare_graph(b, d, self.operand.type, FLOAT_CRITERION, self.index)
        if not finite.all() and self.float_failure is None:
            self.float_failure = f"output {self.index}: {int((~finite).sum())} non-finite differences"

    @property
    def mean_abs(self) -> float:
        return self.abs_sum / self.n if self.n else 0.0

    @property
    def mse(self) -> float:
        return self.sq_sum / self.n if self.n else 0.0

    def failure(self) -> str | None:
        if self.exact:
            return (f"output {self.index}: {self.mismatches} of {self.n} values differ from the baseline's "
                    "(it must match exactly)") if self.mismatches else None
        if self.operand.type.is_quant:
            if self.over_steps:
                return (f"output {self.index}: {self.over_steps} elements more than {self.steps} "
                        f"quantisation step(s) from the baseline (largest {self.max_steps}; ACC-2)")
            return None
        return self.float_failure

    def row(self) -> dict:
        return {"output": self.index, "type": self.operand.type.name, "elements": self.n,
                "mean_abs_err": self.mean_abs, "max_abs_err": self.max_abs, "mse": self.mse,
                "max_steps": self.max_steps if self.operand.type.is_quant else None,
                "over_steps": self.over_steps if self.operand.type.is_quant else None}


@dataclass
class ClassStats:
    """Top-k accuracy against labels (driver and baseline) and agreement with the baseline."""

    labelled: int = 0
    samples: int = 0
    top1: dict[str, int] = field(default_factory=lambda: {"driver": 0, "baseline": 0})
    top5: dict[str, int] = field(default_factory=lambda: {"driver": 0, "baseline": 0})
    agree: int = 0

    def add(self, baseline: np.ndarray, driver: np.ndarray, labels: frozenset[int] | None,
            offset: int = 0) -> None:
        """``offset``: what to subtract from an output index to get a label (1 for a model
        with a background class first)."""
        b, d = np.ravel(baseline).astype(np.float64), np.ravel(driver).astype(np.float64)
        self.samples += 1
        self.agree += int(np.argmax(b) == np.argmax(d))
        if labels:
            self.labelled += 1
            for who, scores in (("baseline", b), ("driver", d)):
                top = [int(i) - offset for i in np.argsort(-scores, kind="stable")[:5]]
                self.top1[who] += top[0] in labels
                self.top5[who] += bool(labels.intersection(top))

    def rate(self, table: dict[str, int], who: str) -> float | None:
        return table[who] / self.labelled if self.labelled else None

    @property
    def agreement(self) -> float | None:
        return self.agree / self.samples if self.samples else None

    def failure(self, margin: float = ACCURACY_MARGIN) -> str | None:
        for k, table in (("top-1", self.top1), ("top-5", self.top5)):
            d, b = self.rate(table, "driver"), self.rate(table, "baseline")
            if d is not None and b is not None and d < b - margin:
                return f"{k} accuracy {d:.3f} is below the baseline's {b:.3f} by more than {margin:g}"
        return None


def valid_rows(baseline: Sequence[np.ndarray], driver: Sequence[np.ndarray],
               count_output: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The outputs with only their valid rows: output ``count_output`` holds, per batch, how
    many rows (axis 1) of each other output are valid; the rows past it are dropped, batch by
    batch (the fewer of the two counts where baseline and driver differ: the count output
    then fails on its own). The count output is kept whole."""
    counts_b = np.ravel(baseline[count_output]).astype(np.int64)
    counts_d = np.ravel(driver[count_output]).astype(np.int64)
    out_b, out_d = list(baseline), list(driver)
    if counts_b.shape != counts_d.shape:
        return out_b, out_d  # a shape mismatch: the count output fails on it
    for k, (b, d) in enumerate(zip(baseline, driver, strict=True)):
        b, d = np.asarray(b), np.asarray(d)
        if k == count_output or b.ndim < 2 or b.shape != d.shape or b.shape[0] != len(counts_b):
            continue  # not rows per batch (a shape mismatch fails in OutputStats.add)
        keep = [int(np.clip(min(nb, nd), 0, b.shape[1])) for nb, nd in zip(counts_b, counts_d, strict=True)]
        out_b[k] = np.concatenate([b[i, :n] for i, n in enumerate(keep)])
        out_d[k] = np.concatenate([d[i, :n] for i, n in enumerate(keep)])
    return out_b, out_d


def mark(driver: float | None, baseline: float | None, margin: float, higher_is_better: bool = True) -> str:
    """same / better / worse of a driver's figure against the baseline's, within ``margin``."""
    if driver is None or baseline is None:
        return ""
    delta = (driver - baseline) if higher_is_better else (baseline - driver)
    return "better" if delta > margin else "worse" if delta < -margin else "same"


def output_stats(operands: Sequence[Operand], steps: int, exact_integers: bool = False) -> list[OutputStats]:
    """Per output, its statistics; ``exact_integers``: TENSOR_INT32 outputs must match exactly
    (a detection model's count and classes)."""
    return [OutputStats(i, o, steps, exact=exact_integers and o.type is OperandType.TENSOR_INT32)
            for i, o in enumerate(operands)]
