"""Invalid models and requests made from valid ones: the mutation kinds of the VTS (VAL-1).

``model_mutations(model)`` yields ``(label, mutated_model)`` pairs, each mutated model a fresh
copy (``Model.copy()``; memory pools are shared, never written). The label starts with the
kind (``KINDS``) followed by what was changed, e.g. ``operand_type[3]=-1``.

Like the VTS, a mutation that would leave the model valid is not produced. The decision is
made statically, as the VTS's skip lists do, but from the catalogue rather than from a
hand-written list: a mutation that changes an operation's operand types or counts is only
produced when the catalogue's ``match`` rejects the changed operation (so optional trailing
inputs, alternative type variants and variadic inputs are skipped automatically), and not
at all for operations the catalogue does not describe. Every produced mutation is therefore
invalid by construction, and ``validate_model`` must say so (tests/test_validation.py checks
it over the catalogue's sample cases).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

from nncert.hal.errors import ValidationError
from nncert.hal.memory import Memory
from nncert.hal.model import (
    DataLocation,
    Model,
    Operand,
    Operation,
    Request,
    RequestArgument,
    SymmPerChannelQuantParams,
)
from nncert.hal.types import (
    ExecutionPreference,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
)
from nncert.hal.validation import input_may_be_omitted, validate_model
from nncert.ops import get
from nncert.ops.base import ShapeError, match

T = OperandType
L = OperandLifeTime

#: Bytes of guard pattern the suites put around every request argument
#: (``build_request(guard=GUARD)``): not a multiple of 8, so every argument is unaligned too.
GUARD = 5

#: The request mutation kinds, in the order they are produced (per argument: location, then
#: dimensions; then the omitted inputs, then the pools).
REQUEST_KINDS = ("remove_input", "remove_output", "extra_input", "extra_output", "location_pool",
                 "location_offset", "location_padding", "location_length", "dimensions_rank",
                 "dimensions_value", "no_value", "pool_empty", "pool_short", "remove_pool")

#: Operand types a model may use (the OEM types are not part of the AIDL HAL).
VALID_OPERAND_TYPES = tuple(t for t in OperandType if t not in (T.OEM, T.TENSOR_OEM_BYTE))
INVALID_OPERAND_TYPES = (-1, max(VALID_OPERAND_TYPES) + 1)
INVALID_OPERATION_TYPES = (-1, max(t for t in OperationType if t is not OperationType.OEM_OPERATION) + 1)

#: The VTS skips turning an operand into CONSTANT_COPY when its value would be this large.
MAX_CONSTANT_COPY_BYTES = 32 * 1024

_SCALARS = (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL)
_ITEMSIZE = {T.FLOAT32: 4, T.INT32: 4, T.UINT32: 4, T.BOOL: 1, T.FLOAT16: 2, T.TENSOR_FLOAT32: 4,
             T.TENSOR_FLOAT16: 2, T.TENSOR_INT32: 4, T.TENSOR_BOOL8: 1, T.TENSOR_QUANT8_ASYMM: 1,
             T.TENSOR_QUANT8_ASYMM_SIGNED: 1, T.TENSOR_QUANT8_SYMM: 1,
             T.TENSOR_QUANT8_SYMM_PER_CHANNEL: 1, T.TENSOR_QUANT16_ASYMM: 2, T.TENSOR_QUANT16_SYMM: 2}


def kind_of(label: str) -> str:
    """The mutation kind of a label (``"operand_type[3]=-1"`` -> ``"operand_type"``)."""
    return label.split("[", 1)[0]


def bad_preferences() -> list[int]:
    """Execution preferences just outside the enum (LOW_POWER - 1, SUSTAINED_SPEED + 1)."""
    return [ExecutionPreference.LOW_POWER - 1, ExecutionPreference.SUSTAINED_SPEED + 1]


def bad_priorities() -> list[int]:
    """Priorities just outside the enum (LOW - 1, HIGH + 1)."""
    return [Priority.LOW - 1, Priority.HIGH + 1]


# ---------------------------------------------------------------------------------------
# Helpers


def _size(o: Operand) -> int:
    """Bytes of an operand's value; 0 when unknown."""
    n = _ITEMSIZE.get(o.type, 0)
    if o.type in _SCALARS:
        return n
    if not o.dimensions or not all(d > 0 for d in o.dimensions):
        return 0
    for d in o.dimensions:
        n *= d
    return n


def _consumers(model: Model) -> list[int]:
    counts = [0] * len(model.main.operands)
    for op in model.main.operations:
        for k in op.inputs:
            counts[k] += 1
    return counts


def _types(model: Model, indexes: Sequence[int], override: dict[int, OperandType] | None = None,
           inputs: bool = True) -> list:
    ops = model.main.operands
    out = []
    for k in indexes:
        o = ops[k]
        if inputs and o.lifetime == L.NO_VALUE:
            out.append(None)
        else:
            out.append((override or {}).get(k, o.type))
    return out


def _rejects(op_type: OperationType, in_types: list, out_types: list) -> bool | None:
    """Whether the catalogue rejects these operand types for ``op_type`` (None: no record)."""
    record = get(op_type)
    if record is None:
        return None
    try:
        match(record, in_types, out_types)
    except ShapeError:
        return True
    return False


def _become_constant_copy(model: Model, operand: Operand) -> Model:
    """Make ``operand`` a CONSTANT_COPY whose value starts operand_values (padded as needed)."""
    size = _size(operand)
    operand.location = DataLocation(0, 0, size)
    if len(model.operand_values) < size:
        model = dataclasses.replace(model, operand_values=bytes(model.operand_values)
                                    + bytes(size - len(model.operand_values)))
    return model


def _retyped(o: Operand, t: OperandType) -> Operand:
    """``o`` given type ``t`` with the other fields adjusted as the VTS does."""
    dims = tuple(o.dimensions) if o.dimensions else (1,)
    if t in _SCALARS:
        return dataclasses.replace(o, type=t, dimensions=(), scale=0.0, zero_point=0, channel_quant=None)
    if t in (T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32):
        return dataclasses.replace(o, type=t, dimensions=dims, scale=0.0, zero_point=0, channel_quant=None)
    if t is T.TENSOR_INT32:
        return dataclasses.replace(o, type=t, dimensions=dims, zero_point=0, channel_quant=None)
    if t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM,
             T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM):
        return dataclasses.replace(o, type=t, dimensions=dims, scale=o.scale or 1.0, channel_quant=None)
    if t is T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        n = o.dimensions[0] if o.dimensions else 0
        return dataclasses.replace(o, type=t, dimensions=dims, scale=0.0, zero_point=0,
                                   channel_quant=SymmPerChannelQuantParams((1.0,) * n, 0))
    return dataclasses.replace(o, type=t)


def _invalid_scale(t: OperandType) -> float:
    if t is T.TENSOR_INT32:
        return -1.0
    if t.is_quant and t is not T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        return 0.0
    return 1.0


_INVALID_ZERO_POINTS = {
    T.TENSOR_QUANT8_ASYMM: (-1, 256),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (-129, 128),
    T.TENSOR_QUANT8_SYMM: (-129, -1, 1, 128),
    T.TENSOR_QUANT16_ASYMM: (-1, 65536),
    T.TENSOR_QUANT16_SYMM: (-32769, -1, 1, 32768),
}


def _new_operand(m: Model, lifetime: OperandLifeTime) -> int:
    m.main.operands.append(Operand(T.INT32, (), 0.0, 0, lifetime, DataLocation()))
    return len(m.main.operands) - 1


# ---------------------------------------------------------------------------------------
# Model mutations


def model_mutations(model: Model, kind: str | None = None) -> Iterator[tuple[str, Model]]:
    """Every VTS mutation of ``model`` (assumed valid) that makes it invalid; with ``kind`` (one
    of KINDS), only the mutations of that kind (``kind_of``), made by its generator alone (a
    suite's test of one kind need not build every other kind's models)."""
    consumers: list[int] | None = None
    for prefixes, generate, needs_consumers in _GENERATORS:
        if kind is not None and kind not in prefixes:
            continue
        if needs_consumers and consumers is None:
            consumers = _consumers(model)
        made = generate(model, consumers) if needs_consumers else generate(model)
        for label, m in made:
            if kind is None or kind_of(label) == kind:
                yield label, m


def _execution_order(model: Model, consumers: list[int]) -> Iterator[tuple[str, Model]]:
    ops = model.main.operations
    operands = model.main.operands
    for n, op in enumerate(ops):
        if any(operands[k].lifetime in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT) for k in op.inputs):
            m = model.copy()
            m.main.operations.insert(0, m.main.operations.pop(n))
            yield f"execution_order[operation {n} (a reader) moved first]", m
        if any(consumers[k] for k in op.outputs):
            m = model.copy()
            m.main.operations.append(m.main.operations.pop(n))
            yield f"execution_order[operation {n} (a writer) moved last]", m


def _operand_type(model: Model) -> Iterator[tuple[str, Model]]:
    for i in range(len(model.main.operands)):
        for bad in INVALID_OPERAND_TYPES:
            m = model.copy()
            m.main.operands[i].type = bad  # a raw int outside the enum
            yield f"operand_type[{i}]={bad}", m


def _operand_rank(model: Model) -> Iterator[tuple[str, Model]]:
    for i, o in enumerate(model.main.operands):
        if o.type in _SCALARS:
            m = model.copy()
            m.main.operands[i].dimensions = (0,)
            yield f"operand_rank[{i}]=1", m


def _operand_scale(model: Model) -> Iterator[tuple[str, Model]]:
    for i, o in enumerate(model.main.operands):
        bad = _invalid_scale(o.type)
        m = model.copy()
        m.main.operands[i].scale = bad
        yield f"operand_scale[{i}]={bad:g}", m


def _operand_zero_point(model: Model) -> Iterator[tuple[str, Model]]:
    for i, o in enumerate(model.main.operands):
        for bad in _INVALID_ZERO_POINTS.get(o.type, (1,)):
            m = model.copy()
            m.main.operands[i].zero_point = bad
            yield f"operand_zero_point[{i}]={bad}", m


def _set_lifetime(model: Model, i: int, lifetime: OperandLifeTime, lists: bool) -> Model:
    m = model.copy()
    sg = m.main
    o = sg.operands[i]
    if lists:
        if o.lifetime == L.SUBGRAPH_INPUT:
            sg.input_indexes = [k for k in sg.input_indexes if k != i]
        elif o.lifetime == L.SUBGRAPH_OUTPUT:
            sg.output_indexes = [k for k in sg.output_indexes if k != i]
    o.lifetime = lifetime
    o.location = DataLocation()
    if lifetime == L.CONSTANT_COPY:
        m = _become_constant_copy(m, o)
    if lists:
        if lifetime == L.SUBGRAPH_INPUT:
            sg.input_indexes.append(i)
        elif lifetime == L.SUBGRAPH_OUTPUT:
            sg.output_indexes.append(i)
    return m


def _copyable(o: Operand) -> bool:
    return 0 < _size(o) <= MAX_CONSTANT_COPY_BYTES


def _operand_lifetime(model: Model) -> Iterator[tuple[str, Model]]:
    """Flip whether an operand needs a writer (keeping the input/output lists consistent)."""
    for i, o in enumerate(model.main.operands):
        if o.lifetime in (L.SUBGRAPH_OUTPUT, L.TEMPORARY_VARIABLE):
            new = [L.SUBGRAPH_INPUT] + ([L.CONSTANT_COPY] if _copyable(o) else [])
        elif o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH_INPUT):
            new = [L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT]
        else:
            continue  # NO_VALUE, SUBGRAPH: no way to tell which lifetime would be invalid
        for lt in new:
            yield f"operand_lifetime[{i}]={lt.name}", _set_lifetime(model, i, lt, lists=True)


def _operand_input_output(model: Model) -> Iterator[tuple[str, Model]]:
    """Change whether an operand is a model input/output, but not whether it needs a writer
    (so that only the input/output lists disagree)."""
    for i, o in enumerate(model.main.operands):
        if o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            lt = L.SUBGRAPH_INPUT
        elif o.lifetime == L.SUBGRAPH_INPUT:
            if not _copyable(o):
                continue
            lt = L.CONSTANT_COPY
        elif o.lifetime == L.SUBGRAPH_OUTPUT:
            lt = L.TEMPORARY_VARIABLE
        elif o.lifetime == L.TEMPORARY_VARIABLE:
            lt = L.SUBGRAPH_OUTPUT
        else:
            continue
        yield f"operand_input_output[{i}]={lt.name}", _set_lifetime(model, i, lt, lists=False)


def _add_writer(model: Model) -> Iterator[tuple[str, Model]]:
    """A copy of an operation, appended, that writes one of its outputs a second time."""
    for n, op in enumerate(model.main.operations):
        for j, k in enumerate(op.outputs):
            m = model.copy()
            sg = m.main
            new = Operation(op.type, list(op.inputs), list(op.outputs))
            for jj, kk in enumerate(op.outputs):
                if jj == j:
                    continue
                extra = dataclasses.replace(sg.operands[kk], lifetime=L.TEMPORARY_VARIABLE)
                sg.operands.append(extra)
                new.outputs[jj] = len(sg.operands) - 1
            sg.operations.append(new)
            yield f"add_writer[operation {n} output {j} (operand {k})]", m


def _operation_operand_type(model: Model) -> Iterator[tuple[str, Model]]:
    """An operand given every other type, where some operation using it then has no matching
    signature (a type its operations also accept is skipped, as the VTS's skip list does)."""
    ops = model.main.operations
    users = [[] for _ in model.main.operands]
    for op in ops:
        for k in set(op.inputs) | set(op.outputs):
            users[k].append(op)
    for i, o in enumerate(model.main.operands):
        for t in VALID_OPERAND_TYPES:
            if t == o.type:
                continue
            rejected = any(_rejects(op.type, _types(model, op.inputs, {i: t}),
                                    _types(model, op.outputs, {i: t}, inputs=False)) for op in users[i])
            if not rejected:
                continue
            m = model.copy()
            m.main.operands[i] = _retyped(m.main.operands[i], t)
            yield f"operation_operand_type[{i}]={t.name}", m


def _operation_type(model: Model) -> Iterator[tuple[str, Model]]:
    for n in range(len(model.main.operations)):
        for bad in INVALID_OPERATION_TYPES:
            m = model.copy()
            m.main.operations[n].type = bad  # a raw int outside the enum
            yield f"operation_type[{n}]={bad}", m


def _operation_index(model: Model) -> Iterator[tuple[str, Model]]:
    count = len(model.main.operands)
    for n, op in enumerate(model.main.operations):
        for j in range(len(op.inputs)):
            m = model.copy()
            m.main.operations[n].inputs[j] = count
            yield f"operation_input_index[{n}.{j}]={count}", m
    for n, op in enumerate(model.main.operations):
        for j in range(len(op.outputs)):
            m = model.copy()
            m.main.operations[n].outputs[j] = count
            yield f"operation_output_index[{n}.{j}]={count}", m


def _remove_write(model: Model, consumers: list[int]) -> Iterator[tuple[str, Model]]:
    """An operation writes a new operand instead of one that is read or is a model output."""
    for n, op in enumerate(model.main.operations):
        for j, k in enumerate(op.outputs):
            if not consumers[k] and model.main.operands[k].lifetime != L.SUBGRAPH_OUTPUT:
                continue
            m = model.copy()
            sg = m.main
            sg.operands.append(dataclasses.replace(sg.operands[k], lifetime=L.TEMPORARY_VARIABLE))
            sg.operations[n].outputs[j] = len(sg.operands) - 1
            yield f"remove_write[operation {n} output {j} (operand {k})]", m


def _without_operand(model: Model, index: int) -> Model:
    m = model.copy()
    sg = m.main
    del sg.operands[index]

    def fix(lst: list[int]) -> list[int]:
        return [k - 1 if k > index else k for k in lst if k != index]

    for op in sg.operations:
        op.inputs = fix(op.inputs)
        op.outputs = fix(op.outputs)
    sg.input_indexes = fix(sg.input_indexes)
    sg.output_indexes = fix(sg.output_indexes)
    return m


def _remove_operand(model: Model, consumers: list[int]) -> Iterator[tuple[str, Model]]:
    """An operand deleted from everything (later indexes shift down), where some operation
    that used it then has no matching signature."""
    for i in range(len(model.main.operands)):
        if not consumers[i]:
            continue  # removing an unused operand changes nothing
        rejected = False
        for op in model.main.operations:
            if i not in op.inputs and i not in op.outputs:
                continue
            ins = [k for k in op.inputs if k != i]
            outs = [k for k in op.outputs if k != i]
            if _rejects(op.type, _types(model, ins), _types(model, outs, inputs=False)):
                rejected = True
        if rejected:
            yield f"remove_operand[{i}]", _without_operand(model, i)


def _remove_operation(model: Model) -> Iterator[tuple[str, Model]]:
    for n, op in enumerate(model.main.operations):
        if not op.outputs:
            continue
        m = model.copy()
        del m.main.operations[n]
        yield f"remove_operation[{n}]", m


def _remove_operation_input(model: Model) -> Iterator[tuple[str, Model]]:
    """An input dropped from an operation (skipped where the rest still matches a signature:
    optional trailing inputs)."""
    for n, op in enumerate(model.main.operations):
        for j in range(len(op.inputs)):
            ins = op.inputs[:j] + op.inputs[j + 1:]
            if not _rejects(op.type, _types(model, ins), _types(model, op.outputs, inputs=False)):
                continue
            m = model.copy()
            del m.main.operations[n].inputs[j]
            yield f"remove_operation_input[{n}.{j}]", m


def _remove_operation_output(model: Model) -> Iterator[tuple[str, Model]]:
    """An output dropped from an operation. Output lists are fixed per signature, but for a
    variadic output (SPLIT's): there the shorter list still matches, and the operation's own
    rule rejects it (SPLIT's outputs must number its constant num_splits)."""
    for n, op in enumerate(model.main.operations):
        for j in range(len(op.outputs)):
            m = model.copy()
            del m.main.operations[n].outputs[j]
            yield f"remove_operation_output[{n}.{j}]", m


def _add_operation_input(model: Model) -> Iterator[tuple[str, Model]]:
    """A new INT32 model input appended to an operation's inputs (skipped where it then fits an
    optional trailing INT32 input)."""
    for n, op in enumerate(model.main.operations):
        if not _rejects(op.type, [*_types(model, op.inputs), T.INT32],
                        _types(model, op.outputs, inputs=False)):
            continue
        m = model.copy()
        k = _new_operand(m, L.SUBGRAPH_INPUT)
        m.main.operations[n].inputs.append(k)
        m.main.input_indexes.append(k)
        yield f"add_operation_input[{n}]", m


def _add_operation_output(model: Model) -> Iterator[tuple[str, Model]]:
    for n, op in enumerate(model.main.operations):
        if not _rejects(op.type, _types(model, op.inputs),
                        [*_types(model, op.outputs, inputs=False), T.INT32]):
            continue
        m = model.copy()
        k = _new_operand(m, L.SUBGRAPH_OUTPUT)
        m.main.operations[n].outputs.append(k)
        m.main.output_indexes.append(k)
        yield f"add_operation_output[{n}]", m


def _cycle(model: Model) -> Iterator[tuple[str, Model]]:
    """An operation made to read an output of itself or of an operation that reads its output,
    preferring an output of the same type, shape and quantisation so that only the data flow
    is wrong (else any output: still invalid, though another rule may report it first)."""
    ops = model.main.operations
    operands = model.main.operands
    writer = {k: n for n, op in enumerate(ops) for k in op.outputs}

    def pick(a: int, outputs: list[int]) -> tuple[int, int] | None:
        fallback = None
        for j, k_in in enumerate(ops[a].inputs):
            if operands[k_in].lifetime == L.NO_VALUE:
                continue
            for k_out in outputs:
                fallback = fallback or (j, k_out)
                x, y = operands[k_in], operands[k_out]
                if x.type == y.type and tuple(x.dimensions) == tuple(y.dimensions) \
                        and x.scale == y.scale and x.zero_point == y.zero_point:
                    return j, k_out
        return fallback

    for a, op in enumerate(ops):
        targets = [(a, list(op.outputs))]
        for b, other in enumerate(ops):
            if b != a and any(writer.get(k) == a for k in other.inputs):
                targets.append((b, list(other.outputs)))
        for b, outs in targets:
            got = pick(a, outs)
            if got is None:
                continue
            j, k = got
            m = model.copy()
            m.main.operations[a].inputs[j] = k
            via = "itself" if b == a else f"operation {b}"
            yield f"cycle[operation {a} input {j} reads operand {k} of {via}]", m


#: (the label prefixes a generator makes, the generator, whether it takes the consumer counts),
#: in the order model_mutations yields them.
_GENERATORS = (
    (("execution_order",), _execution_order, True),
    (("operand_type",), _operand_type, False),
    (("operand_rank",), _operand_rank, False),
    (("operand_scale",), _operand_scale, False),
    (("operand_zero_point",), _operand_zero_point, False),
    (("operand_lifetime",), _operand_lifetime, False),
    (("operand_input_output",), _operand_input_output, False),
    (("add_writer",), _add_writer, False),
    (("operation_operand_type",), _operation_operand_type, False),
    (("operation_type",), _operation_type, False),
    (("operation_input_index", "operation_output_index"), _operation_index, False),
    (("remove_write",), _remove_write, True),
    (("remove_operand",), _remove_operand, True),
    (("remove_operation",), _remove_operation, False),
    (("remove_operation_input",), _remove_operation_input, False),
    (("remove_operation_output",), _remove_operation_output, False),
    (("add_operation_input",), _add_operation_input, False),
    (("add_operation_output",), _add_operation_output, False),
    (("cycle",), _cycle, False),
)

#: The model mutation kinds, in the order they are produced (the VTS's order).
KINDS = tuple(prefix for prefixes, _, _ in _GENERATORS for prefix in prefixes)


# ---------------------------------------------------------------------------------------
# Parameter values (VAL-1: what the CTS's expected-failure tests cover)

_PARAMETER_DTYPES = {T.INT32: np.int32, T.FLOAT32: np.float32, T.FLOAT16: np.float16,
                     T.TENSOR_INT32: np.int32}
#: A constant INT32 tensor parameter is mutated element by element up to this size (paddings,
#: axes, permutations, block sizes, shapes); a longer one is data, not a parameter.
_PARAMETER_ELEMENTS = 16


def _parameter_values(t: OperandType, rank: int) -> tuple:
    """What a parameter may be set to: zero and negative counts, axes just outside
    [-rank, rank), the integer extremes; for floats zero, negative, NaN and infinity."""
    if t in (T.INT32, T.TENSOR_INT32):
        return 0, -1, rank, -rank - 1, 2**31 - 1, -2**31
    return 0.0, -1.0, float("nan"), float("inf")


def parameter_mutations(model: Model) -> Iterator[tuple[str, Model]]:
    """``model`` (valid) with one constant parameter of an operation (a scalar, or an element of a
    short INT32 tensor: paddings, axes, a permutation, a shape) set to a value the catalogue's
    rules reject: a stride or block size of 0, an axis out of range, a negative padding, a beta
    that is not positive, a NaN threshold. The validity of each is the reference validator's
    (``validate_model``), so only invalid ones are made. NNAPI does not require every one of
    them to be caught at validation: a driver may equally fail at preparation or execution,
    but never run the model as if it were valid."""
    sg = model.main
    for n, op in enumerate(sg.operations):
        first = sg.operands[op.inputs[0]] if op.inputs else None
        rank = len(first.dimensions) if first is not None and first.dimensions else 4
        for position, k in enumerate(op.inputs):
            o = sg.operands[k]
            if o.lifetime is not L.CONSTANT_COPY or o.type not in _PARAMETER_DTYPES:
                continue
            loc = o.location
            value = np.frombuffer(bytes(model.operand_values[loc.offset:loc.offset + loc.length]),
                                  _PARAMETER_DTYPES[o.type]).copy()
            if not 0 < value.size <= _PARAMETER_ELEMENTS:
                continue
            for element in range(value.size):
                for v in _parameter_values(o.type, rank):
                    new = value.copy()
                    with np.errstate(over="ignore", invalid="ignore"):
                        new[element] = v
                    if new.tobytes() == value.tobytes():
                        continue
                    m = model.copy()
                    data = bytes(m.operand_values)
                    data += bytes(-len(data) % 8)
                    m = dataclasses.replace(m, operand_values=data + new.tobytes())
                    m.main.operands[k].location = DataLocation(0, len(data), new.nbytes)
                    try:
                        validate_model(m)
                    except ValidationError:
                        where = f"[{element}]" if o.type is T.TENSOR_INT32 else ""
                        yield f"operation {n} ({op.type.name}) input {position}{where} = {v!r}", m


# ---------------------------------------------------------------------------------------
# Request mutations (VAL-1, VAL-2)
#
# Each is invalid under validate_request's rules (as Android's validateRequest): a location
# inside its pool (pool index, offset + length + padding), a length equal to the operand's
# byte size where that is known (an output's may be smaller: that is OUTPUT_INSUFFICIENT_SIZE at
# run time, a valid request, so a short output is no mutation), dimensions of the model's rank
# agreeing with each dimension the model knows, no dimensions on a scalar, no value only for an
# input every reader takes as optional (``input_may_be_omitted``), and pools that are mapped
# (size > 0) and hold their arguments. An unaligned offset is valid (NNAPI has only a preferred
# alignment): guarded requests (``build_request(guard=...)``) use them on purpose.


def _copy_request(request: Request) -> Request:
    def arg(a: RequestArgument) -> RequestArgument:
        return RequestArgument(a.has_no_value, dataclasses.replace(a.location), tuple(a.dimensions))

    return Request([arg(a) for a in request.inputs], [arg(a) for a in request.outputs],
                   list(request.pools))


def _arguments(request: Request) -> Iterator[tuple[str, int, RequestArgument]]:
    for i, a in enumerate(request.inputs):
        yield "input", i, a
    for i, a in enumerate(request.outputs):
        yield "output", i, a


def _pick(r: Request, what: str, i: int) -> RequestArgument:
    return (r.inputs if what == "input" else r.outputs)[i]


def _merged(operand: Operand, arg: RequestArgument) -> tuple[int, ...]:
    return tuple(arg.dimensions) or tuple(operand.dimensions)


def _conflicts(model_dims: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether request ``dims`` break a dimension the model knows (same rank)."""
    return any(m and d != m for m, d in zip(model_dims, dims, strict=True))


def request_mutations(request: Request, model: Model | None = None) -> Iterator[tuple[str, Request]]:
    """Invalid variants of a valid ``request`` (fresh copies sharing its pools, or new pools
    holding the same bytes), labelled ``kind[where]=change``: each input removed, then each
    output removed; given the ``model``, then one input and one output too many (a copy of
    the last, valid for its operand: only the count is wrong), every argument mutation of
    ``REQUEST_KINDS`` on every input and output, and the pool mutations."""
    for i in range(len(request.inputs)):
        r = _copy_request(request)
        del r.inputs[i]
        yield f"remove_input[{i}]", r
    for i in range(len(request.outputs)):
        r = _copy_request(request)
        del r.outputs[i]
        yield f"remove_output[{i}]", r
    if model is None:
        return
    for what in ("input", "output"):
        r = _copy_request(request)
        args = r.inputs if what == "input" else r.outputs
        if args:
            last = args[-1]
            args.append(RequestArgument(last.has_no_value, dataclasses.replace(last.location),
                                        tuple(last.dimensions)))
            yield f"extra_{what}[{what} {len(args) - 1}]", r
    sg = model.main
    for what, i, arg in _arguments(request):
        if arg.has_no_value:
            continue
        operand = sg.operands[(sg.input_indexes if what == "input" else sg.output_indexes)[i]]
        yield from _location_mutations(request, what, i, arg, operand)
        yield from _dimension_mutations(request, what, i, arg, operand)
    for i in range(len(request.inputs)):
        if not request.inputs[i].has_no_value and not input_may_be_omitted(model, i):
            r = _copy_request(request)
            r.inputs[i] = RequestArgument(has_no_value=True)
            yield f"no_value[input {i}]", r
    yield from _pool_mutations(request)


def _location_mutations(request: Request, what: str, i: int, arg: RequestArgument,
                        operand: Operand) -> Iterator[tuple[str, Request]]:
    where = f"{what} {i}"

    def mutated(kind: str, change: str, **fields: int) -> tuple[str, Request]:
        r = _copy_request(request)
        loc = _pick(r, what, i).location
        for name, value in fields.items():
            setattr(loc, name, value)
        return f"{kind}[{where}]={change}", r

    yield mutated("location_pool", f"{len(request.pools)} (no such pool)", pool_index=len(request.pools))
    yield mutated("location_pool", "-1", pool_index=-1)
    loc = arg.location
    pool = request.pools[loc.pool_index]
    if not isinstance(pool, Memory):
        return  # a driver-managed buffer: its bounds are the driver's (MEM-4)
    size, length = pool.size, loc.length
    yield mutated("location_offset", f"{size} (the pool's end)", offset=size)
    yield mutated("location_offset", f"{size - length + 1} (straddles the end)", offset=size - length + 1)
    yield mutated("location_offset", f"{2**32 - 1} (wraps in 32 bits)", offset=2**32 - 1)
    yield mutated("location_offset", "-1", offset=-1)
    yield mutated("location_padding", f"{size - loc.offset - length + 1} (past the end)",
                  padding=size - loc.offset - length + 1)
    yield mutated("location_length", "0", length=0)
    yield mutated("location_length", f"{size - loc.offset + 1} (past the end)", length=size - loc.offset + 1)
    dims = _merged(operand, arg)
    if operand.type in _SCALARS or (dims and all(dims)):
        # The operand's size is known: the length must be it (an output's may be smaller).
        yield mutated("location_length", f"{length + 1} (one byte more than the operand)", length=length + 1)
        if what == "input":
            yield mutated("location_length", f"{length - 1} (one byte less than the operand)",
                          length=length - 1)


def _dimension_mutations(request: Request, what: str, i: int, arg: RequestArgument,
                         operand: Operand) -> Iterator[tuple[str, Request]]:
    where = f"{what} {i}"

    def mutated(kind: str, dims: tuple[int, ...]) -> tuple[str, Request]:
        r = _copy_request(request)
        _pick(r, what, i).dimensions = dims
        return f"{kind}[{where}]={list(dims)}", r

    if operand.type in _SCALARS:
        yield mutated("dimensions_rank", (1,))
        return
    mdims = tuple(operand.dimensions)
    if not mdims:
        return  # unknown rank: any dimensions of the right size are valid
    dims = _merged(operand, arg)
    # A rank one higher keeps the size: a driver that checks only the length passes it.
    yield mutated("dimensions_rank", (*dims, 1))
    if len(dims) > 1:
        yield mutated("dimensions_rank", dims[:-1])
    known = [j for j, m in enumerate(mdims) if m]
    if not known:
        return
    swapped = dims[::-1]  # the same size in another shape
    if _conflicts(mdims, swapped):
        yield mutated("dimensions_value", swapped)
    j = known[0]
    yield mutated("dimensions_value", (*dims[:j], dims[j] + 1, *dims[j + 1:]))
    yield mutated("dimensions_value", (*dims[:j], 0, *dims[j + 1:]))


def _pool_mutations(request: Request) -> Iterator[tuple[str, Request]]:
    """A pool that holds nothing (size 0: nothing is mapped), one a byte too short for its
    last argument, and the last pool dropped: each only where an argument lies in it."""
    ends: dict[int, int] = {}
    for _, _, a in _arguments(request):
        if not a.has_no_value:
            loc = a.location
            ends[loc.pool_index] = max(ends.get(loc.pool_index, 0), loc.offset + loc.length + loc.padding)
    for p, pool in enumerate(request.pools):
        if p not in ends or not isinstance(pool, Memory):
            continue
        r = _copy_request(request)
        r.pools[p] = Memory.create(0, pool.kind)
        yield f"pool_empty[pool {p}]", r
        if ends[p] > 1:
            r = _copy_request(request)
            r.pools[p] = Memory.from_bytes(bytes(pool.view()[:ends[p] - 1]), pool.kind)
            yield f"pool_short[pool {p}]={ends[p] - 1} bytes", r
    if len(request.pools) - 1 in ends:
        r = _copy_request(request)
        r.pools.pop()
        yield f"remove_pool[pool {len(request.pools) - 1}]", r


# ---------------------------------------------------------------------------------------
# Guard bytes (VAL-2): what a call wrote in the caller's pools


def pool_bytes(request: Request) -> list[bytes | None]:
    """A copy of every shared-memory pool of ``request`` (None for a driver-managed buffer)."""
    return [bytes(p.view()) if isinstance(p, Memory) else None for p in request.pools]


def stray_writes(request: Request, before: Sequence[bytes | None],
                 allowed: Sequence[RequestArgument] = ()) -> list[str]:
    """The byte ranges of ``request``'s pools that differ from ``before`` outside the
    ``allowed`` arguments' locations, as "pool P [start, stop)" (empty: nothing stray)."""
    found = []
    for p, (pool, old) in enumerate(zip(request.pools, before, strict=True)):
        if old is None:
            continue
        new = np.frombuffer(pool.view(), np.uint8)
        changed = new != np.frombuffer(old, np.uint8)
        for a in allowed:
            loc = a.location
            if not a.has_no_value and loc.pool_index == p:
                changed[max(0, loc.offset):max(0, loc.offset + loc.length)] = False
        where = np.flatnonzero(changed)
        if where.size:
            found.append(f"pool {p} [{where[0]}, {where[-1] + 1})")
    return found
