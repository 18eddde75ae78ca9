"""Minimising a wrong-result finding before it is handed over: the smallest input tensors and
the simplest values that keep the driver's result outside the tolerance.

A maintainer reads a 1 x 4 tensor of round numbers at a glance and a 4 x 3 x 2 x 2 tensor of
random floats not at all. ``minimise`` tries, greedily and in a fixed order (so the same
finding minimises the same way every time):

1. smaller inputs: for each model input and each axis longer than 1, a slice of it (one
   element, then the first or last half), taken alike from every input of the same shape (the
   operands of an element-wise operation stay aligned); every other dimension of the model
   follows by the catalogue's shape rules (``specialize_shapes``), and a candidate the
   validator or the shape rules refuse is skipped;
2. simpler values: float inputs rounded to 2, 1 and 0 decimals; each input in turn set to
   one value (its first), which drops inputs that do not matter to the defect.

A candidate is kept when the reference kernels still run it and the driver's outputs are
still outside the tolerance (ACC-1..4, the criteria the standalone script applies). Only the
model's inputs change: operations (a random graph is shrunk to the fewest operations before,
by ``random_graphs.reduce``), constants and parameters stay as found.

Candidates run on the driver in this process: minimise only findings whose driver does not
crash on them (a wrong result, not a crash).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from nncert.drivers.base import Driver
from nncert.hal.model import Model, dtype_of
from nncert.hal.transform import specialize_shapes
from nncert.hal.validation import validate_model

#: Candidates tried at most, and seconds spent at most, on one finding.
MAX_RUNS = 200
MAX_SECONDS = 120.0


def still_wrong(driver: Driver, relaxed: bool) -> Callable[[Model, list[np.ndarray]], bool]:
    """Whether ``driver`` gives outputs of (model, feeds) outside the tolerance of the
    reference's (False when the reference or the driver cannot run it at all)."""
    from nncert.hal.builder import build_request, read_outputs
    from nncert.ops.interpreter import run_model
    from nncert.testing.criteria import output_mismatches

    def fails(model: Model, feeds: list[np.ndarray]) -> bool:
        try:
            validate_model(model, driver.feature_level)
            expected = [np.asarray(a) for a in run_model(model.copy(), feeds)]
            dims = [tuple(e.shape) for e in expected]
            prepared = driver.prepare_model(model)
            request = build_request(model, feeds, dims)
            shapes, _ = prepared.execute_synchronously(request)
            actual = read_outputs(model, request, [s.dimensions for s in shapes] or dims)
        except Exception:  # not the same wrong result: not kept
            return False
        return bool(output_mismatches(model, expected, actual, relaxed))

    return fails


def minimise(model: Model, feeds: Sequence[np.ndarray],
             fails: Callable[[Model, list[np.ndarray]], bool], *, max_runs: int = MAX_RUNS,
             max_seconds: float = MAX_SECONDS) -> tuple[Model, list[np.ndarray], list[str]]:
    """The smallest (model, feeds) found that still ``fails``, and what was done, in words
    (empty when nothing smaller fails)."""
    feeds = [np.asarray(a) for a in feeds]
    steps: list[str] = []
    budget = {"runs": max_runs, "until": time.monotonic() + max_seconds}

    def attempt(candidate: tuple[Model, list[np.ndarray]] | None) -> bool:
        if candidate is None or budget["runs"] <= 0 or time.monotonic() > budget["until"]:
            return False
        budget["runs"] -= 1
        return fails(*candidate)

    before = [tuple(a.shape) for a in feeds]
    changed = True
    while changed:  # shrink until no slice of any axis still fails
        changed = False
        for i, a in enumerate(feeds):
            for axis in range(a.ndim):
                d = feeds[i].shape[axis]
                for start, size in _slices(d):
                    candidate = _sliced(model, feeds, i, axis, start, size)
                    if attempt(candidate):
                        model, feeds = candidate
                        changed = True
                        break
    after = [tuple(a.shape) for a in feeds]
    if after != before:
        steps.append("inputs shrunk from " + ", ".join(_dims(s) for s in before) + " to " +
                     ", ".join(_dims(s) for s in after))
    for decimals in (2, 1, 0):
        candidate = _rounded(model, feeds, decimals)
        if candidate is not None and attempt((model, candidate)):
            feeds = candidate
            steps.append(f"float inputs rounded to {decimals} decimals")
            break
    for i, a in enumerate(feeds):
        if a.size > 1 and not np.all(a == a.flat[0]):
            candidate = [*feeds[:i], np.full_like(a, a.flat[0]), *feeds[i + 1:]]
            if attempt((model, candidate)):
                feeds = candidate
                steps.append(f"input {i} made one value ({a.flat[0].item()!r})")
    return model, feeds, steps


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _slices(d: int) -> list[tuple[int, int]]:
    """Sub-ranges of an axis of length ``d`` to try, smallest first: each single element of a
    short axis (the first, middle and last of a long one), then the two halves."""
    if d <= 1:
        return []
    singles = range(d) if d <= 8 else sorted({0, d // 2, d - 1})
    out = [(s, 1) for s in singles]
    if d >= 4:
        out += [(0, d // 2), (d - d // 2, d // 2)]
    return out


def _sliced(model: Model, feeds: list[np.ndarray], i: int, axis: int, start: int,
            size: int) -> tuple[Model, list[np.ndarray]] | None:
    """The model and feeds with input ``i`` (and every input of its shape) cut to ``size``
    elements from ``start`` along ``axis``, the rest of the shapes recomputed; None when the
    shape rules refuse it."""
    shape = feeds[i].shape
    new = [np.ascontiguousarray(np.take(a, range(start, start + size), axis=axis)) if a.shape == shape else a
           for a in feeds]
    sg = model.main
    unknown = model.copy()
    for op in unknown.main.operations:  # every computed shape follows again from the inputs
        for o in op.outputs:
            operand = unknown.main.operands[o]
            operand.dimensions = tuple(0 for _ in operand.dimensions)
    try:
        specialised = specialize_shapes(unknown, [tuple(a.shape) for a in new])
    except Exception:  # a shape the operation takes no longer
        return None
    if any(not specialised.main.operands[o].fully_specified for o in sg.output_indexes):
        return None
    return specialised, new


def _rounded(model: Model, feeds: list[np.ndarray], decimals: int) -> list[np.ndarray] | None:
    sg = model.main
    out, any_change = [], False
    for idx, a in zip(sg.input_indexes, feeds, strict=True):
        if np.issubdtype(a.dtype, np.floating) and dtype_of(sg.operands[idx].type) == a.dtype:
            r = np.round(a.astype(np.float64), decimals).astype(a.dtype)
            any_change |= not np.array_equal(r, a)
            out.append(r)
        else:
            out.append(a)
    return out if any_change else None
