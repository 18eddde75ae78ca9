"""Run a whole HAL model with the catalogue's reference kernels (the golden path)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from nncert.hal.errors import HalError
from nncert.hal.model import Model, Operand, Operation, Subgraph
from nncert.hal.types import ErrorStatus, OperandLifeTime
from nncert.ops import get
from nncert.ops.base import ShapeError, Unknown
from nncert.ops.evaluate import evaluate

#: (operation index, operation, its input operands (None: omitted) and values, its output
#: operands, its results) -> results.
AfterOperation = Callable[[int, Operation, list, list, list[Operand], list[np.ndarray]], list[np.ndarray]]


def run_subgraph(model: Model, subgraph: Subgraph, inputs: Sequence[np.ndarray],
                 after: AfterOperation | None = None) -> list[np.ndarray]:
    """Execute ``subgraph`` on ``inputs`` (raw arrays, one per subgraph input) and return the
    raw output arrays. Shapes unknown in the model are taken from the actual values (EXE-4).
    ``after`` sees (and may replace) each operation's results: the mutants' hook.

    Raises HalError: INVALID_ARGUMENT for an operation the catalogue rejects at run time
    (e.g. incompatible dynamic shapes), GENERAL_FAILURE for an operation it lacks.
    """
    values: list[np.ndarray | None] = [None] * len(subgraph.operands)
    for idx, value in zip(subgraph.input_indexes, inputs, strict=True):
        values[idx] = None if value is None else np.asarray(value)
    for idx, operand in enumerate(subgraph.operands):
        if operand.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
            values[idx] = model.constant_value(operand)
    for n, op in enumerate(subgraph.operations):
        record = get(op.type)
        if record is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE,
                           f"operation {n} ({op.type.name}) has no reference kernel")
        in_ops: list[Operand | None] = []
        for idx in op.inputs:
            operand = subgraph.operands[idx]
            if operand.lifetime is OperandLifeTime.NO_VALUE or values[idx] is None:
                in_ops.append(None)
            else:
                in_ops.append(_with_actual_shape(operand, values[idx]))
        out_ops = [subgraph.operands[idx] for idx in op.outputs]
        try:
            outs = evaluate(record, in_ops, [values[i] for i in op.inputs], out_ops)
        except (ShapeError, Unknown) as e:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"operation {n} ({op.type.name}): {e}") from None
        if after is not None:
            outs = after(n, op, in_ops, [values[i] for i in op.inputs], out_ops, outs)
        for idx, arr, operand in zip(op.outputs, outs, out_ops, strict=True):
            declared = operand.dimensions
            if (declared and any(d and d != a for d, a in zip(declared, arr.shape, strict=False))) \
                    or (declared and len(declared) != arr.ndim):
                raise HalError(ErrorStatus.INVALID_ARGUMENT,
                               f"operation {n} ({op.type.name}) output operand {idx} is declared "
                               f"{list(declared)} but computes to {list(arr.shape)}")
            values[idx] = arr
    return [values[idx] for idx in subgraph.output_indexes]


def run_model(model: Model, inputs: Sequence[np.ndarray],
              after: AfterOperation | None = None) -> list[np.ndarray]:
    return run_subgraph(model, model.main, inputs, after)


def _with_actual_shape(operand: Operand, value: np.ndarray) -> Operand:
    if operand.type.is_scalar or tuple(operand.dimensions) == tuple(value.shape):
        return operand
    return dataclasses.replace(operand, dimensions=tuple(value.shape))
