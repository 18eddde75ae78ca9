"""Model rewrites that drivers compiling to another runtime share.

- ``widen_float16``: every FLOAT16 operand as FLOAT32 (constants converted exactly), the
  explicit float16 strategy of the compiled drivers (docs/drivers.md);
- ``isolate_operation``: one operation as a model of its own (its non-constant inputs become
  model inputs), to probe whether a runtime accepts it;
- ``specialize_shapes``: a model whose unknown dimensions are filled in from actual input
  shapes with the catalogue's shape rules (dynamic shapes, EXE-4).

The results are plain in-memory models: constants are packed into ``operand_values``
(CONSTANT_COPY, whatever their size) and they are not meant for validation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from nncert.hal.model import DataLocation, Model, Operand, Operation, Subgraph, dtype_of
from nncert.hal.types import OperandLifeTime, OperandType

T = OperandType
CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)

_WIDE = {T.TENSOR_FLOAT16: T.TENSOR_FLOAT32, T.FLOAT16: T.FLOAT32}


def _pack(model: Model, operands: list[Operand], values: dict[int, np.ndarray],
          operations: list[Operation], inputs: Sequence[int], outputs: Sequence[int]) -> Model:
    """A model of ``operands`` whose constants are ``values`` (index -> array), all copied."""
    blob = bytearray()
    out = []
    for i, o in enumerate(operands):
        o = dataclasses.replace(o, location=DataLocation())
        if i in values:
            data = np.ascontiguousarray(np.asarray(values[i], dtype=dtype_of(o.type))).tobytes()
            pad = (-len(blob)) % 8
            blob += b"\0" * pad
            o.lifetime = OperandLifeTime.CONSTANT_COPY
            o.location = DataLocation(0, len(blob), len(data))
            blob += data
        out.append(o)
    main = Subgraph(out, [Operation(op.type, list(op.inputs), list(op.outputs)) for op in operations],
                    list(inputs), list(outputs))
    return Model(main, [], bytes(blob), [], model.relax_computation_float32_to_float16)


def _constants(model: Model, sg: Subgraph) -> dict[int, np.ndarray]:
    return {i: model.constant_value(o) for i, o in enumerate(sg.operands) if o.lifetime in CONSTANT}


def map_operands(model: Model, fn: Callable[[Operand], Operand]) -> Model:
    """``model`` (main subgraph) with every operand replaced by ``fn(operand)``; constants
    are converted to the new operand's type."""
    sg = model.main
    operands = [fn(o) for o in sg.operands]
    values = {i: v.astype(dtype_of(operands[i].type)) for i, v in _constants(model, sg).items()}
    return _pack(model, operands, values, sg.operations, sg.input_indexes, sg.output_indexes)


def has_float16(model: Model) -> bool:
    return any(o.type in _WIDE for o in model.main.operands)


def widen_float16(model: Model) -> Model:
    """Every TENSOR_FLOAT16 / FLOAT16 operand as its float32 counterpart (exact widening)."""
    if not has_float16(model):
        return model
    return map_operands(model, lambda o: dataclasses.replace(o, type=_WIDE.get(o.type, o.type)))


def isolate_operation(model: Model, index: int) -> Model:
    """Operation ``index`` of the main subgraph as a model of its own: its constants stay
    constants, its other inputs become model inputs and its outputs model outputs."""
    sg = model.main
    op = sg.operations[index]
    remap: dict[int, int] = {}
    operands: list[Operand] = []
    values: dict[int, np.ndarray] = {}
    inputs: list[int] = []
    for idx in list(op.inputs) + list(op.outputs):
        if idx in remap:
            continue
        o = sg.operands[idx]
        remap[idx] = len(operands)
        operands.append(dataclasses.replace(o))
        if o.lifetime in CONSTANT:
            values[remap[idx]] = model.constant_value(o)
        elif o.lifetime is OperandLifeTime.NO_VALUE:
            pass
        elif idx in op.inputs:
            operands[-1].lifetime = OperandLifeTime.SUBGRAPH_INPUT
            inputs.append(remap[idx])
    outputs = [remap[i] for i in op.outputs]
    for i in outputs:
        operands[i].lifetime = OperandLifeTime.SUBGRAPH_OUTPUT
    new_op = Operation(op.type, [remap[i] for i in op.inputs], outputs)
    return _pack(model, operands, values, [new_op], inputs, outputs)


def fully_specified(model: Model) -> bool:
    """Every tensor has known dimensions (omitted optional inputs have none to know)."""
    return all(o.fully_specified for o in model.main.operands
               if o.type.is_tensor and o.lifetime is not OperandLifeTime.NO_VALUE)


class ShapeUnknown(Exception):  # noqa: N818 - a condition, reported by the caller
    """A dimension that depends on a non-constant value, not only on input shapes."""


def specialize_shapes(model: Model, input_dims: Sequence[Sequence[int] | None]) -> Model:
    """``model`` with the actual input dimensions and every other dimension computed from
    them by the catalogue's shape rules, in operation order. Raises ShapeUnknown for an
    output whose shape depends on a non-constant input value, ValueError for shapes the
    operation rejects (INVALID_ARGUMENT at run time)."""
    from nncert.ops import get  # the catalogue imports the HAL; import late
    from nncert.ops.base import ShapeError
    from nncert.ops.evaluate import known_inputs, output_shapes

    sg = model.main
    operands = [dataclasses.replace(o) for o in sg.operands]
    for idx, dims in zip(sg.input_indexes, input_dims, strict=True):
        if dims is not None and operands[idx].type.is_tensor:
            operands[idx].dimensions = tuple(int(d) for d in dims)
    consts = _constants(model, sg)
    for n, op in enumerate(sg.operations):
        if all(operands[i].fully_specified for i in op.outputs):
            continue
        record = get(op.type)
        if record is None:
            raise ShapeUnknown(f"operation {n} ({op.type.name}) has no shape rule")
        ins, vals = known_inputs(record, model, operands, op.inputs)  # original locations
        outs = [operands[i] for i in op.outputs]
        try:
            shapes = output_shapes(record, ins, vals, outs)
        except ShapeError as e:
            raise ValueError(f"operation {n} ({op.type.name}): {e}") from None
        if shapes is None:
            raise ShapeUnknown(f"operation {n} ({op.type.name}): output shape depends on a "
                               f"value known only at run time")
        for i, dims in zip(op.outputs, shapes, strict=True):
            operands[i].dimensions = tuple(dims)
    return _pack(model, operands, consts, sg.operations, sg.input_indexes, sg.output_indexes)

