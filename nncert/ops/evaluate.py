"""Running one operation instance through its record: matching, layout, activation, quantisation.

This is the only place that knows how NCHW, fused activations and (de)quantisation wrap a
kernel; records only describe NHWC, real-valued computation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import Version
from nncert.ops.base import (
    MAX_OUTPUT_ELEMENTS,
    Match,
    OpContext,
    OpRecord,
    ShapeError,
    TooLarge,
    Unknown,
    apply_activation,
    from_real,
    match,
    to_real,
)

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _types(operands: Sequence[Operand | None]) -> list:
    return [None if o is None else o.type for o in operands]


def bind(record: OpRecord, inputs: Sequence[Operand | None], values: Sequence[Any],
         outputs: Sequence[Operand], m: Match | None = None) -> OpContext:
    """An OpContext in NHWC terms: NCHW operands and values are transposed here."""
    m = m or match(record, _types(inputs), [o.type for o in outputs])
    ctx = OpContext(record, m, inputs, values, outputs)
    if not ctx.nchw:
        return ctx
    inputs, values = list(inputs), list(values)
    for name in record.layout_inputs:
        for p in ctx.positions(name):
            op = inputs[p]
            if op.rank != 4:
                if op.dimensions:
                    raise ShapeError(f"{name} must have rank 4 for the NCHW layout, has {op.rank}")
                continue
            inputs[p] = dataclasses.replace(op, dimensions=tuple(op.dimensions[i] for i in TO_NHWC))
            if values[p] is not None:
                values[p] = np.transpose(values[p], TO_NHWC)
    outputs = list(outputs)
    for i in record.layout_outputs:
        if outputs[i].rank == 4:
            outputs[i] = dataclasses.replace(
                outputs[i], dimensions=tuple(outputs[i].dimensions[j] for j in TO_NHWC))
    return OpContext(record, m, inputs, values, outputs)


def known_inputs(record: OpRecord, model: Any, operands: Sequence[Operand], inputs: Sequence[int],
                 given: Mapping[int, Any] | None = None) -> tuple[list[Operand | None], list[Any]]:
    """An operation's input operands (None where omitted) and what its shape rule and kernel
    would see of them before it runs: constants' values (scalars as numbers, tensors real
    when the record dequantizes), None for everything else. ``model`` holds the constants;
    ``given``: operand index -> raw value of non-constant operands known as well (a run's
    input values)."""
    from nncert.hal.types import OperandLifeTime

    ins: list[Operand | None] = []
    vals: list[Any] = []
    for i in inputs:
        o = operands[i]
        if o.lifetime is OperandLifeTime.NO_VALUE:
            ins.append(None)
            vals.append(None)
            continue
        ins.append(o)
        raw = given[i] if given is not None and i in given else model.constant_value(o)
        if raw is None:
            vals.append(None)
        elif o.type.is_scalar:
            vals.append(raw.item())
        else:
            vals.append(to_real(raw, o) if record.dequantize else raw)
    return ins, vals


def instance_version(ctx: OpContext) -> Version:
    """The HAL version an operation instance needs: its variant's and newer optional inputs'
    (``match``), raised by the record's ``min_version`` rule where it has one."""
    if ctx.record.min_version is None:
        return ctx.match.version
    return max(ctx.match.version, ctx.record.min_version(ctx))


def output_shapes(record: OpRecord, inputs: Sequence[Operand | None], values: Sequence[Any],
                  outputs: Sequence[Operand], m: Match | None = None) -> list[tuple[int, ...]] | None:
    """The output shapes the record's rule gives, in the operation's layout; None when some
    needed shape or value is not known (yet). Raises ShapeError for invalid parameters."""
    try:
        ctx = bind(record, inputs, values, outputs, m)
    except Unknown:
        return None
    return bound_output_shapes(ctx)


def bound_output_shapes(ctx: OpContext) -> list[tuple[int, ...]] | None:
    """``output_shapes`` of a context ``bind`` made (the validator binds once for the shape
    rule and the checks)."""
    record = ctx.record
    try:
        shapes = [tuple(map(int, s)) for s in record.shape(ctx)]
    except Unknown:
        return None
    if ctx.nchw:
        for i in record.layout_outputs:
            if len(shapes[i]) == 4:
                shapes[i] = tuple(shapes[i][j] for j in TO_NCHW)
    return shapes


def evaluate_real(record: OpRecord, inputs: Sequence[Operand | None], raw: Sequence[Any],
                  outputs: Sequence[Operand], m: Match | None = None,
                  real: Sequence[Any] | None = None) -> list[np.ndarray]:
    """Kernel outputs after the fused activation, before conversion to the output types
    (real values for float and quantised outputs), in the operation's layout. ``real``: inputs
    already converted to what the kernel sees (``to_real``), None where not (the interpreter
    keeps those of constants, read-only)."""
    if record.dequantize:
        if real is None:
            real = [None] * len(raw)
        values = [None if o is None else to_real(v, o) if r is None else r
                  for o, v, r in zip(inputs, raw, real, strict=True)]
    else:
        values = [None if o is None else (np.asarray(v).item() if o.type.is_scalar else np.asarray(v))
                  for o, v in zip(inputs, raw, strict=True)]
    ctx = bind(record, inputs, values, outputs, m)
    _check_output_shapes(record, ctx)
    result = [np.asarray(r) for r in record.kernel(ctx)]
    if record.activation:
        act = int(ctx.value(record.activation, 0))
        if act:
            result[0] = apply_activation(result[0], act)
    if ctx.nchw:
        for i in record.layout_outputs:
            if result[i].ndim == 4:
                result[i] = np.transpose(result[i], TO_NCHW)
    return result


def _check_output_shapes(record: OpRecord, ctx: Any) -> None:
    """The record's shape rule on the run-time values, before the kernel: a ShapeError for
    parameters that make the operation invalid (a block shape given as a model input that
    does not divide the padded size), TooLarge for an output beyond MAX_OUTPUT_ELEMENTS.
    A shape the rule cannot tell before the kernel runs (data-dependent) is not checked."""
    try:
        shapes = record.shape(ctx)
    except Unknown:
        return
    for i, s in enumerate(shapes):
        n = 1
        for d in s:
            n *= int(d)
        if n > MAX_OUTPUT_ELEMENTS:
            raise TooLarge(f"output {i} would have shape {[int(d) for d in s]}: {n:,} elements, more "
                           f"than the reference kernels' {MAX_OUTPUT_ELEMENTS:,}")


def evaluate(record: OpRecord, inputs: Sequence[Operand | None], raw: Sequence[Any],
             outputs: Sequence[Operand], m: Match | None = None,
             real: Sequence[Any] | None = None) -> list[np.ndarray]:
    """Run the reference kernel: raw input arrays in, raw output arrays (stored types) out;
    ``real`` as for evaluate_real."""
    real = evaluate_real(record, inputs, raw, outputs, m, real)
    if not record.dequantize:
        return [np.asarray(r).astype(dtype_of(o.type)) for r, o in zip(real, outputs, strict=True)]
    return [from_real(r, o) for r, o in zip(real, outputs, strict=True)]

