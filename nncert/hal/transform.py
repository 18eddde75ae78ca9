"""Model rewrites that drivers compiling to another runtime share.

- ``widen_float16``: every FLOAT16 operand as FLOAT32 (constants converted exactly), the
  explicit float16 strategy of the compiled drivers (docs/drivers.md);
- ``isolate_operation``: one operation as a model of its own (its non-constant inputs become
  model inputs), to probe whether a runtime accepts it;
- ``specialize_shapes``: a model whose unknown dimensions are filled in from actual input
  shapes with the catalogue's shape rules (dynamic shapes, EXE-4);
- ``omit_inputs``: a model whose given inputs are omitted operands (NO_VALUE), what a request
  that gives them no value means.

The results are plain in-memory models: constants are packed into ``operand_values``
(CONSTANT_COPY, whatever their size) and they are not meant for validation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from nncert.hal.model import DataLocation, Model, Operand, Operation, Subgraph, dtype_of
from nncert.hal.types import OperandLifeTime, OperandType, OperationType

T = OperandType
CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)

_WIDE = {T.TENSOR_FLOAT16: T.TENSOR_FLOAT32, T.FLOAT16: T.FLOAT32}


def _pack(model: Model, operands: list[Operand], values: dict[int, np.ndarray],
          operations: list[Operation], inputs: Sequence[int], outputs: Sequence[int],
          referenced: Sequence[tuple[Subgraph, dict[int, np.ndarray]]] = ()) -> Model:
    """A model of ``operands`` whose constants are ``values`` (index -> array), all copied;
    ``referenced``: its referenced subgraphs (IF / WHILE), each with its constants."""
    blob = bytearray()

    def place(operands: Sequence[Operand], values: dict[int, np.ndarray]) -> list[Operand]:
        out = []
        for i, o in enumerate(operands):
            if o.lifetime is not OperandLifeTime.SUBGRAPH:  # its offset names the subgraph
                o = dataclasses.replace(o, location=DataLocation())
            else:
                o = dataclasses.replace(o, location=dataclasses.replace(o.location))
            if i in values:
                data = np.ascontiguousarray(np.asarray(values[i], dtype=dtype_of(o.type))).tobytes()
                pad = (-len(blob)) % 8
                blob.extend(b"\0" * pad)
                o.lifetime = OperandLifeTime.CONSTANT_COPY
                o.location = DataLocation(0, len(blob), len(data))
                blob.extend(data)
            out.append(o)
        return out

    def copy_ops(ops: Sequence[Operation]) -> list[Operation]:
        return [Operation(op.type, list(op.inputs), list(op.outputs)) for op in ops]

    main = Subgraph(place(operands, values), copy_ops(operations), list(inputs), list(outputs))
    refs = [Subgraph(place(sg.operands, vals), copy_ops(sg.operations), list(sg.input_indexes),
                     list(sg.output_indexes)) for sg, vals in referenced]
    return Model(main, refs, bytes(blob), [], model.relax_computation_float32_to_float16)


def _constants(model: Model, sg: Subgraph) -> dict[int, np.ndarray]:
    return {i: model.constant_value(o) for i, o in enumerate(sg.operands) if o.lifetime in CONSTANT}


def map_operands(model: Model, fn: Callable[[Operand], Operand]) -> Model:
    """``model`` with every operand (of the main and the referenced subgraphs) replaced by
    ``fn(operand)``; constants are converted to the new operand's type."""
    def mapped(sg: Subgraph) -> tuple[list[Operand], dict[int, np.ndarray]]:
        operands = [fn(o) for o in sg.operands]
        return operands, {i: v.astype(dtype_of(operands[i].type)) for i, v in _constants(model, sg).items()}

    sg = model.main
    operands, values = mapped(sg)
    refs = []
    for ref in model.referenced:
        ref_operands, ref_values = mapped(ref)
        refs.append((dataclasses.replace(ref, operands=ref_operands), ref_values))
    return _pack(model, operands, values, sg.operations, sg.input_indexes, sg.output_indexes, refs)


def has_float16(model: Model) -> bool:
    return any(o.type in _WIDE for sg in (model.main, *model.referenced) for o in sg.operands)


def widen_float16(model: Model) -> Model:
    """Every TENSOR_FLOAT16 / FLOAT16 operand as its float32 counterpart (exact widening)."""
    if not has_float16(model):
        return model
    return map_operands(model, lambda o: dataclasses.replace(o, type=_WIDE.get(o.type, o.type)))


def isolate_operation(model: Model, index: int) -> Model:
    """Operation ``index`` of the main subgraph as a model of its own: its constants stay
    constants, its other inputs become model inputs and its outputs model outputs; an IF /
    WHILE keeps the model's referenced subgraphs."""
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
        elif o.lifetime in (OperandLifeTime.NO_VALUE, OperandLifeTime.SUBGRAPH):
            pass
        elif idx in op.inputs:
            operands[-1].lifetime = OperandLifeTime.SUBGRAPH_INPUT
            inputs.append(remap[idx])
    outputs = [remap[i] for i in op.outputs]
    for i in outputs:
        operands[i].lifetime = OperandLifeTime.SUBGRAPH_OUTPUT
    new_op = Operation(op.type, [remap[i] for i in op.inputs], outputs)
    calls = any(sg.operands[i].lifetime is OperandLifeTime.SUBGRAPH for i in op.inputs)
    referenced = [(ref, _constants(model, ref)) for ref in model.referenced] if calls else []
    return _pack(model, operands, values, [new_op], inputs, outputs, referenced)


def omit_inputs(model: Model, positions: Sequence[int]) -> Model:
    """``model`` with main-subgraph inputs ``positions`` given no value, as a request that omits
    them (``has_no_value``) means: their operands become omitted optional inputs (NO_VALUE) of
    the operations that read them, and leave the input list. ``model`` itself is unchanged."""
    if not positions:
        return model
    gone = set(positions)
    copy = model.copy()
    sg = copy.main
    for p in gone:
        idx = sg.input_indexes[p]
        sg.operands[idx] = dataclasses.replace(sg.operands[idx], lifetime=OperandLifeTime.NO_VALUE,
                                               location=DataLocation())
    sg.input_indexes = [idx for p, idx in enumerate(sg.input_indexes) if p not in gone]
    return copy


def fully_specified(model: Model) -> bool:
    """Every tensor of the main subgraph has known dimensions (omitted optional inputs have
    none to know; the outputs of an IF / WHILE may have them only once it has run)."""
    return all(o.fully_specified for o in model.main.operands
               if o.type.is_tensor and o.lifetime is not OperandLifeTime.NO_VALUE)


class ShapeUnknown(Exception):  # noqa: N818 - a condition, reported by the caller
    """A dimension that depends on a non-constant value, not only on input shapes."""


def specialize_shapes(model: Model, input_dims: Sequence[Sequence[int] | None]) -> Model:
    """``model`` with the actual input dimensions and every other dimension computed from
    them by the catalogue's shape rules, in operation order (``specialize_subgraph``).
    Raises ShapeUnknown for an output whose shape depends on a non-constant input value,
    ValueError for shapes the operation rejects (INVALID_ARGUMENT at run time)."""
    sg = model.main
    operands = specialize_subgraph(model, sg, input_dims).operands
    refs = [(ref, _constants(model, ref)) for ref in model.referenced]
    return _pack(model, operands, _constants(model, sg), sg.operations, sg.input_indexes,
                 sg.output_indexes, refs)


def specialize_subgraph(model: Model, sg: Subgraph, input_dims: Sequence[Sequence[int] | None],
                        values: Mapping[int, np.ndarray] | None = None) -> Subgraph:
    """``sg`` (of ``model``: its constants and referenced subgraphs) with the actual input
    dimensions and every dimension that follows from them; operands are copies, their
    locations unchanged. An IF / WHILE output whose shape depends on the values (branches
    of different output shapes, a loop whose carried shapes change from one iteration to the
    next) stays unknown, and so may only be an output of ``sg``: an operation reading it
    raises ShapeUnknown, as does an output shape that depends on a non-constant value not
    in ``values`` (operand index of ``sg`` -> its raw value: a run's inputs, known before
    it runs)."""
    from nncert.ops import get  # the catalogue imports the HAL; import late
    from nncert.ops.base import ShapeError
    from nncert.ops.evaluate import known_inputs, output_shapes

    operands = [dataclasses.replace(o) for o in sg.operands]
    for idx, dims in zip(sg.input_indexes, input_dims, strict=True):
        if dims is not None and operands[idx].type.is_tensor:
            operands[idx].dimensions = tuple(int(d) for d in dims)
    after_run: set[int] = set()  # operands whose shape is known only once their IF / WHILE ran
    for n, op in enumerate(sg.operations):
        late = [i for i in op.inputs if i in after_run]
        if late:
            raise ShapeUnknown(f"operation {n} ({op.type.name}) reads operand {late[0]}, whose "
                               f"shape an IF / WHILE decides only when it runs")
        if all(operands[i].fully_specified for i in op.outputs):
            continue
        record = get(op.type)
        if record is None and op.type in _CONTROL_FLOW:
            shapes = _control_flow_shapes(model, sg, operands, op)
            for i, dims in zip(op.outputs, shapes, strict=True):
                if dims is None:
                    after_run.add(i)
                elif not operands[i].fully_specified:
                    operands[i].dimensions = dims
            continue
        if record is None:
            raise ShapeUnknown(f"operation {n} ({op.type.name}) has no shape rule")
        ins, vals = known_inputs(record, model, operands, op.inputs, values)  # original locations
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
    return dataclasses.replace(sg, operands=operands)


_CONTROL_FLOW = (OperationType.IF, OperationType.WHILE)


def _control_flow_shapes(model: Model, sg: Subgraph, operands: list[Operand],
                         op: Operation) -> list[tuple[int, ...] | None]:
    """The output shapes of an IF / WHILE whose input shapes are known: those that do not
    depend on the values (None where they do)."""
    def ref(position: int) -> Subgraph:
        return model.referenced[operands[op.inputs[position]].location.offset]

    def output_dims(sub: Subgraph, dims: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        special = specialize_subgraph(model, sub, dims)
        return [special.operands[i].dimensions if special.operands[i].fully_specified else ()
                for i in special.output_indexes]

    if op.type is OperationType.IF:
        dims = [operands[i].dimensions for i in op.inputs[3:]]
        then, other = output_dims(ref(1), dims), output_dims(ref(2), dims)
        return [a if a and a == b else None for a, b in zip(then, other, strict=True)]
    dims = [operands[i].dimensions for i in op.inputs[2:]]
    after_one = output_dims(ref(1), dims)
    steady = after_one == dims[:len(after_one)]  # every carried shape the same each iteration
    return [dims[k] if steady else None for k in range(len(op.outputs))]
