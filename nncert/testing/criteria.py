"""Accuracy criteria: the one comparison module every suite uses.

- ``compare``: the per-operation tolerances of ACC-1..4 (generated tests).
- ``GRAPH_CRITERIA`` / ``compare_graph``: the random-graph criteria of ACC-5 (bias, mse,
  atol, rtol per type and per class of operation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nncert.hal.model import Model
from nncert.hal.types import OperandType

T = OperandType

FP32_ATOL = 1e-5
FP32_RTOL = 5 * 1.1920928955078125e-7
FP16_TOL = 5 * 0.0009765625


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float = 0.0
    requirement: str = "ACC-1"


def tolerance(type_: OperandType, relaxed: bool = False) -> Tolerance:
    """The per-element tolerance of an output type (ACC-1..3).

    fp32 run relaxed (relaxComputationFloat32toFloat16) and fp16 use the fp16 tolerance;
    quantised types allow one step (ACC-2); TENSOR_INT32 and BOOL8 results are exact: their
    arithmetic is integer and fully specified (ACC-3 for booleans).
    """
    if type_ in (T.TENSOR_FLOAT16, T.FLOAT16) or (relaxed and type_ in (T.TENSOR_FLOAT32, T.FLOAT32)):
        return Tolerance(FP16_TOL, FP16_TOL, "ACC-1")
    if type_ in (T.TENSOR_FLOAT32, T.FLOAT32):
        return Tolerance(FP32_ATOL, FP32_RTOL, "ACC-1")
    if type_.is_quant:
        return Tolerance(1, 0, "ACC-2")
    return Tolerance(0, 0, "ACC-3")


@dataclass
class Mismatch:
    """Why an output is outside its tolerance: enough to act on in one line."""

    output: int
    count: int
    total: int
    index: tuple[int, ...]
    expected: float
    actual: float
    tolerance: Tolerance
    shape_expected: tuple[int, ...] | None = None
    shape_actual: tuple[int, ...] | None = None

    def __str__(self) -> str:
        if self.shape_expected is not None:
            return (f"output {self.output}: shape {list(self.shape_actual or ())}, "
                    f"expected {list(self.shape_expected)}")
        return (f"output {self.output}: {self.count}/{self.total} elements outside "
                f"atol={self.tolerance.atol:g} rtol={self.tolerance.rtol:g} ({self.tolerance.requirement}); "
                f"first at {list(self.index)}: got {self.actual!r}, expected {self.expected!r}")


def compare(expected: np.ndarray, actual: np.ndarray, type_: OperandType, relaxed: bool = False,
            output: int = 0, atol: float | None = None) -> Mismatch | None:
    """None when ``actual`` is within tolerance of ``expected``, else the first mismatch.

    Both are arrays of the operand's stored type. ``atol`` overrides the quantised
    tolerance (ACC-2 allows 3 for a quantised MobileNet).
    """
    tol = tolerance(type_, relaxed)
    if atol is not None:
        tol = Tolerance(atol, tol.rtol, tol.requirement)
    if tuple(expected.shape) != tuple(actual.shape):
        return Mismatch(output, 0, 0, (), math.nan, math.nan, tol, tuple(expected.shape), tuple(actual.shape))
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(a - e) <= tol.atol + tol.rtol * np.abs(e))
    # Equal infinities / NaN in both count as a match.
    bad &= ~((e == a) | (np.isnan(e) & np.isnan(a)))
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return Mismatch(output, int(bad.sum()), int(bad.size), first, expected[first].item(),
                    actual[first].item(), tol)


def output_mismatches(model: Model, expected: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                      relaxed: bool = False) -> list[Mismatch]:
    """Every output of ``model`` outside the tolerance of its operand type, in output order."""
    found = []
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        operand = model.main.operands[model.main.output_indexes[i]]
        mismatch = compare(e, a, operand.type, relaxed, output=i)
        if mismatch:
            found.append(mismatch)
    return found


# ---------------------------------------------------------------------------------------
# ACC-5: random-graph criteria


@dataclass(frozen=True)
class GraphCriterion:
    bias: float
    mse: float
    atol: float
    rtol: float = 0.0


_INT32 = GraphCriterion(math.inf, math.inf, 1)  # integers: atol 1 in every class

#: class -> {"float32" | "float16" | "quant8" | "int32": criterion}: the table of the notes on
#: ACC-5 in docs/requirements.md.
GRAPH_CRITERIA: dict[str, dict[str, GraphCriterion]] = {
    "strict": {"float32": GraphCriterion(1e-7, 1e-10, 1e-6, 1e-6),
               "float16": GraphCriterion(1e-4, 1e-8, 1e-3, 1e-3),
               "quant8": GraphCriterion(0.1, 0.1, 1), "int32": _INT32},
    "medium": {"float32": GraphCriterion(1e-6, 1e-8, 1e-5, 1e-5),
               "float16": GraphCriterion(1e-3, 1e-5, 1e-2, 1e-2),
               "quant8": GraphCriterion(1.2, 1.2, 2), "int32": _INT32},
    "relaxed": {"float32": GraphCriterion(3e-5, 1e-6, 1e-3, 1e-3),
                "float16": GraphCriterion(5e-3, 1e-3, 1, 1),
                "quant8": GraphCriterion(1.5, 1.5, 10), "int32": _INT32},
    "conv": {"float32": GraphCriterion(4e-4, 1e-5, 2e-2, 2e-2),
             "float16": GraphCriterion(5e-2, 1e-2, 1, 1),
             "quant8": GraphCriterion(1.5, 1.5, 10), "int32": _INT32},
    "small_graph": {"float32": GraphCriterion(4e-4, 1e-5, 1e-2, 1e-2),
                    "float16": GraphCriterion(5e-2, 1e-2, 1, 1),
                    "quant8": GraphCriterion(2, 2, 12), "int32": _INT32},
    "large_graph": {"float32": GraphCriterion(1e-2, 1e-4, 1e-1, 1e-1),
                    "float16": GraphCriterion(1e-1, 5e-2, 1, 1),
                    "quant8": GraphCriterion(2, 2, 12), "int32": _INT32},
}

#: Expected magnitudes above this are skipped (the CTS skips |e| > 1e3; we keep 100 < |e| <= 1e3).
SKIP_ABOVE = 1e3


def type_class(type_: OperandType) -> str:
    if type_ in (T.TENSOR_FLOAT32, T.FLOAT32):
        return "float32"
    if type_ in (T.TENSOR_FLOAT16, T.FLOAT16):
        return "float16"
    if type_.is_quant:
        return "quant8"
    return "int32"


def compare_graph(expected: np.ndarray, actual: np.ndarray, type_: OperandType,
                  criterion: GraphCriterion, output: int = 0) -> str | None:
    """ACC-5 check of one output: None when within the criterion, else a one-line reason."""
    if tuple(expected.shape) != tuple(actual.shape):
        return f"output {output}: shape {list(actual.shape)}, expected {list(expected.shape)}"
    if type_ in (T.TENSOR_BOOL8, T.BOOL):
        wrong = int(np.count_nonzero(expected != actual))
        allowed = math.ceil(0.1 * expected.size)
        return None if wrong <= allowed else f"output {output}: {wrong} boolean mismatches > {allowed}"
    e = expected.astype(np.float64).ravel()
    a = actual.astype(np.float64).ravel()
    keep = np.isfinite(e) & (np.abs(e) <= SKIP_ABOVE)
    e, a = e[keep], a[keep]
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(a - e) <= criterion.atol + criterion.rtol * np.abs(e))
    if bad.any():
        i = int(np.argmax(bad))
        return (f"output {output}: {int(bad.sum())}/{e.size} elements outside atol={criterion.atol:g} "
                f"rtol={criterion.rtol:g}; e.g. got {float(a[i])!r}, expected {float(e[i])!r}")
    if e.size >= 10:
        diff = (a - e) / np.maximum(1.0, np.abs(e)) if type_.is_float else a - e
        bias, mse = float(diff.mean()), float((diff ** 2).mean())
        if abs(bias) > criterion.bias:
            return f"output {output}: bias {bias:.3g} exceeds {criterion.bias:g}"
        if mse > criterion.mse:
            return f"output {output}: mse {mse:.3g} exceeds {criterion.mse:g}"
    return None
