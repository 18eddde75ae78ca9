"""validate_model / validate_request (VAL-1): one test per rule, each breaking exactly that
rule in an otherwise valid model or request; the VTS mutation kinds over the catalogue's
sample cases; and the catalogue's own cases, which must all be valid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.hal.builder import ModelBuilder, build_request
from nncert.hal.errors import ValidationError
from nncert.hal.memory import Memory
from nncert.hal.model import (
    DataLocation,
    Model,
    Operand,
    Operation,
    RequestArgument,
    Subgraph,
    SymmPerChannelQuantParams,
)
from nncert.hal.types import (
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
    Version,
)
from nncert.hal.validation import (
    validate_execution_preference,
    validate_model,
    validate_priority,
    validate_request,
)
from nncert.ops import get, records
from nncert.testing.cases import VARIATIONS, enumerate_cases, sample_case
from nncert.testing.mutations import (
    KINDS,
    bad_preferences,
    bad_priorities,
    kind_of,
    model_mutations,
    request_mutations,
)

T = OperandType
L = OperandLifeTime
Op = OperationType

pytestmark = pytest.mark.req("VAL-1")


# ---------------------------------------------------------------------------------------
# Helpers


def expect(model: Model, rule: str, where: str, version: Version | None = None) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        if version is None:
            validate_model(model)
        else:
            validate_model(model, version)
    err = info.value
    assert (err.rule, err.where) == (rule, where), str(err)
    assert err.status is ErrorStatus.INVALID_ARGUMENT
    return err


def expect_request(request, model: Model, rule: str, where: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_request(request, model)
    assert (info.value.rule, info.value.where) == (rule, where), str(info.value)


def add_model(t: T = T.TENSOR_FLOAT32, dims=(2, 3), act: int = 0, scale: float = 0.0, zp: int = 0,
              op: Op = Op.ADD) -> Model:
    """operands: 0 in0, 1 in1, 2 act (CONSTANT_COPY), 3 out; operation 0 = op(0, 1, 2) -> 3."""
    b = ModelBuilder()
    a = b.operand(t, dims, scale, zp)
    c = b.operand(t, dims, scale, zp)
    k = b.constant(T.INT32, act)
    out = b.operand(t, dims, scale * 2 if op is Op.MUL else scale, zp)
    b.operation(op, [a, c, k], [out])
    return b.build([a, c], [out])


def chain_model() -> Model:
    """x -> ADD(x, w) -> t0 -> MUL(t0, x) -> t1 -> SUB(t1, x) -> out, with w a 64-element
    constant in a pool (CONSTANT_REFERENCE).

    operands: 0 x, 1 w, 2 act, 3 t0, 4 t1, 5 out; operations: 0 ADD, 1 MUL, 2 SUB."""
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (4, 16))
    w = b.constant(T.TENSOR_FLOAT32, np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16))
    act = b.constant(T.INT32, 0)
    t0 = b.operand(T.TENSOR_FLOAT32, (4, 16))
    t1 = b.operand(T.TENSOR_FLOAT32, (4, 16))
    out = b.operand(T.TENSOR_FLOAT32, (4, 16))
    b.operation(Op.ADD, [x, w, act], [t0])
    b.operation(Op.MUL, [t0, x, act], [t1])
    b.operation(Op.SUB, [t1, x, act], [out])
    return b.build([x], [out])


def with_extra_input(model: Model, operand: Operand) -> tuple[Model, int]:
    """``model`` plus an unused model input (an unused input is valid)."""
    model.main.operands.append(dataclasses.replace(operand, lifetime=L.SUBGRAPH_INPUT))
    idx = len(model.main.operands) - 1
    model.main.input_indexes.append(idx)
    return model, idx


def if_model() -> Model:
    """IF(cond, then=subgraph 0, else=subgraph 1, x) -> y; both branches are ADD(a, a, 0)."""
    def branch(act_offset: int) -> Subgraph:
        return Subgraph(
            [Operand(T.TENSOR_FLOAT32, (2,), lifetime=L.SUBGRAPH_INPUT),
             Operand(T.INT32, (), lifetime=L.CONSTANT_COPY, location=DataLocation(0, act_offset, 4)),
             Operand(T.TENSOR_FLOAT32, (2,), lifetime=L.SUBGRAPH_OUTPUT)],
            [Operation(Op.ADD, [0, 0, 1], [2])], [0], [2])

    main = Subgraph(
        [Operand(T.TENSOR_BOOL8, (1,), lifetime=L.SUBGRAPH_INPUT),
         Operand(T.SUBGRAPH, (), lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0)),
         Operand(T.SUBGRAPH, (), lifetime=L.SUBGRAPH, location=DataLocation(0, 1, 0)),
         Operand(T.TENSOR_FLOAT32, (2,), lifetime=L.SUBGRAPH_INPUT),
         Operand(T.TENSOR_FLOAT32, (2,), lifetime=L.SUBGRAPH_OUTPUT)],
        [Operation(Op.IF, [0, 1, 2, 3], [4])], [0, 3], [4])
    return Model(main, [branch(0), branch(4)], bytes(8))


def find_case(predicate, quantised: bool = True):
    """A sample case of the first record/signature/variant that ``predicate`` accepts."""
    for record in records():
        for sig in record.signatures:
            for var_ in record.variants:
                if quantised and not var_.primary.is_quant:
                    continue
                if predicate(record, sig, var_):
                    return sample_case(record, sig, var_, True if record.layout else None,
                                       0 if record.activation else None, 0)
    pytest.skip("no catalogue record of that kind yet")


# ---------------------------------------------------------------------------------------
# Valid models


def test_valid_models_accepted():
    validate_model(add_model())
    validate_model(add_model(T.TENSOR_QUANT8_ASYMM, scale=0.5, zp=3))
    validate_model(add_model(T.TENSOR_INT32))
    validate_model(chain_model())
    validate_model(chain_model(), Version.V1_1)
    m = chain_model()
    assert m.main.operands[1].lifetime is L.CONSTANT_REFERENCE
    if get(Op.IF) is None:
        validate_model(if_model())


def test_raw_ints_for_valid_codes_are_accepted():
    m = add_model()
    m.main.operands[0].type = 3  # TENSOR_FLOAT32 as a plain int
    m.main.operands[0].lifetime = 1
    m.main.operations[0].type = 0
    validate_model(m)


# ---------------------------------------------------------------------------------------
# Pools and subgraphs


def test_pool():
    m = chain_model()
    m.pools.append(7)  # tokens are for requests only
    expect(m, "pool", "pool 1")


def test_subgraph_empty():
    m = add_model()
    m.main.operations = []
    expect(m, "subgraph-empty", "main subgraph")


def test_subgraph_cycle():
    m = if_model()
    for k, other in ((0, 1), (1, 0)):
        sg = m.referenced[k]
        sg.operands.append(Operand(T.SUBGRAPH, (), lifetime=L.SUBGRAPH, location=DataLocation(0, other, 0)))
    expect(m, "subgraph-cycle", "subgraph 0")


def test_subgraph_reference():
    m = if_model()
    m.main.operands[2].location = DataLocation(0, 2, 0)
    expect(m, "subgraph-reference", "operand 2")


def test_referenced_subgraph_is_validated():
    m = if_model()
    m.referenced[1].operands[1].location = DataLocation(0, 6, 4)  # beyond operand_values
    expect(m, "constant-location", "subgraph 1 operand 1")


@pytest.mark.skipif(get(Op.IF) is not None, reason="IF is validated by its catalogue record")
def test_control_flow():
    m = if_model()
    m.main.operands[0].dimensions = (2,)  # the condition must be a single boolean
    expect(m, "control-flow", "operation 0 (IF)")
    m = if_model()
    m.referenced[0].operands[0].dimensions = (3,)  # then-branch input incompatible with x
    m.referenced[0].operands[2].dimensions = (3,)
    expect(m, "control-flow", "operation 0 (IF)")
    m = if_model()
    m.main.operations[0].inputs.pop()  # one input short of what the branches take
    expect(m, "control-flow", "operation 0 (IF)")


# ---------------------------------------------------------------------------------------
# Operands


@pytest.mark.parametrize("bad", [-1, 16, T.OEM, T.TENSOR_OEM_BYTE, "TENSOR_FLOAT32", 3.0])
def test_operand_type(bad):
    m = add_model()
    m.main.operands[1].type = bad
    expect(m, "operand-type", "operand 1")


@pytest.mark.parametrize("bad", [-1, 7, None])
def test_operand_lifetime(bad):
    m = add_model()
    m.main.operands[3].lifetime = bad
    expect(m, "operand-lifetime", "operand 3")


def test_operand_lifetime_subgraph_goes_with_type():
    m = add_model()
    m.main.operands[3].lifetime = L.SUBGRAPH
    expect(m, "operand-lifetime", "operand 3")
    m = if_model()
    m.main.operands[1].type = T.TENSOR_FLOAT32
    expect(m, "operand-lifetime", "operand 1")


def test_operand_rank():
    m = add_model()
    m.main.operands[2].dimensions = (1,)  # the INT32 scalar activation
    expect(m, "operand-rank", "operand 2")
    m = chain_model()
    m.main.operands[1].dimensions = ()  # a constant tensor must have a known rank
    expect(m, "operand-rank", "operand 1")


def test_operand_dimensions():
    m = add_model()
    m.main.operands[0].dimensions = (2, -3)
    expect(m, "operand-dimensions", "operand 0")
    m = chain_model()
    m.main.operands[1].dimensions = (4, 0)  # a constant with an unknown dimension
    expect(m, "operand-dimensions", "operand 1")


def test_unknown_dimensions_of_non_constants_are_valid():
    m = add_model(dims=(0, 3))
    validate_model(m)
    m = add_model()
    m.main.operands[3].dimensions = ()
    validate_model(m)


_QP = SymmPerChannelQuantParams((0.5, 0.25), 0)


@pytest.mark.parametrize("t,dims,scale,zp,cq,ok", [
    (T.TENSOR_FLOAT32, (2,), 0.0, 0, None, True),
    (T.TENSOR_FLOAT32, (2,), 1.0, 0, None, False),
    (T.FLOAT32, (), 0.5, 0, None, False),
    (T.BOOL, (), 1.0, 0, None, False),
    (T.TENSOR_BOOL8, (2,), 1.0, 0, None, False),
    (T.TENSOR_FLOAT16, (2,), 1.0, 0, None, False),
    (T.INT32, (), 1.0, 0, None, False),
    (T.TENSOR_INT32, (2,), 0.25, 0, None, True),  # a bias's scale
    (T.TENSOR_INT32, (2,), -1.0, 0, None, False),
    (T.TENSOR_QUANT8_ASYMM, (2,), 0.0, 0, None, False),
    (T.TENSOR_QUANT8_ASYMM, (2,), -0.5, 0, None, False),
    (T.TENSOR_QUANT8_ASYMM, (2,), float("nan"), 0, None, False),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, (2,), 0.0, 0, None, False),
    (T.TENSOR_QUANT8_SYMM, (2,), 0.0, 0, None, False),
    (T.TENSOR_QUANT16_ASYMM, (2,), 0.0, 0, None, False),
    (T.TENSOR_QUANT16_SYMM, (2,), 0.0, 0, None, False),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), 1.0, 0, _QP, False),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), 0.0, 0, _QP, True),
])
def test_operand_scale(t, dims, scale, zp, cq, ok):
    m, idx = with_extra_input(add_model(), Operand(t, dims, scale, zp, channel_quant=cq))
    if ok:
        validate_model(m)
    else:
        expect(m, "operand-scale", f"operand {idx}")


@pytest.mark.parametrize("t,zp,ok", [
    (T.TENSOR_QUANT8_ASYMM, 0, True), (T.TENSOR_QUANT8_ASYMM, 255, True),
    (T.TENSOR_QUANT8_ASYMM, -1, False), (T.TENSOR_QUANT8_ASYMM, 256, False),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, -128, True), (T.TENSOR_QUANT8_ASYMM_SIGNED, 127, True),
    (T.TENSOR_QUANT8_ASYMM_SIGNED, -129, False), (T.TENSOR_QUANT8_ASYMM_SIGNED, 128, False),
    (T.TENSOR_QUANT8_SYMM, 1, False), (T.TENSOR_QUANT8_SYMM, -1, False),
    (T.TENSOR_QUANT16_ASYMM, 65535, True), (T.TENSOR_QUANT16_ASYMM, 65536, False),
    (T.TENSOR_QUANT16_ASYMM, -1, False),
    (T.TENSOR_QUANT16_SYMM, 1, False), (T.TENSOR_QUANT16_SYMM, -32769, False),
    (T.TENSOR_FLOAT32, 1, False), (T.TENSOR_INT32, 1, False), (T.INT32, 1, False),
    (T.TENSOR_QUANT8_ASYMM, 3.0, False),
])
def test_operand_zero_point(t, zp, ok):
    scale = 0.5 if t.is_quant else 0.0
    m, idx = with_extra_input(add_model(), Operand(t, () if t.is_scalar else (2,), scale, zp))
    if ok:
        validate_model(m)
    else:
        expect(m, "operand-zero-point", f"operand {idx}")


@pytest.mark.parametrize("t,dims,cq", [
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), None),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), SymmPerChannelQuantParams((0.5, 0.25), 2)),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), SymmPerChannelQuantParams((0.5, 0.25), -1)),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), SymmPerChannelQuantParams((0.5, 0.25, 1.0), 0)),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (2, 3), SymmPerChannelQuantParams((0.5, 0.0), 0)),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (0, 3), SymmPerChannelQuantParams((), 0)),
    (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, (), SymmPerChannelQuantParams((0.5,), 0)),
    (T.TENSOR_QUANT8_SYMM, (2, 3), SymmPerChannelQuantParams((0.5, 0.25), 0)),
    (T.TENSOR_FLOAT32, (2, 3), SymmPerChannelQuantParams((0.5, 0.25), 0)),
])
def test_operand_channel_quant(t, dims, cq):
    scale = 0.5 if t is T.TENSOR_QUANT8_SYMM else 0.0
    m, idx = with_extra_input(add_model(), Operand(t, dims, scale, 0, channel_quant=cq))
    expect(m, "operand-channel-quant", f"operand {idx}")


def test_constant_location_copy():
    m = add_model()
    m.main.operands[2].location = DataLocation(0, 4, 4)  # operand_values holds 4 bytes
    expect(m, "constant-location", "operand 2")
    m = add_model()
    m.main.operands[2].location = DataLocation(1, 0, 4)  # CONSTANT_COPY must use pool 0
    expect(m, "constant-location", "operand 2")
    m = add_model()
    m.main.operands[2].location = DataLocation(0, 0, 2)  # an INT32 is 4 bytes
    expect(m, "constant-location", "operand 2")
    m = add_model()
    m.main.operands[2].location = DataLocation(0, 0, 4, padding=4)
    expect(m, "constant-location", "operand 2")


def test_constant_location_reference():
    m = chain_model()
    loc = m.main.operands[1].location
    m.main.operands[1].location = DataLocation(1, loc.offset, loc.length)  # one pool only
    expect(m, "constant-location", "operand 1")
    m = chain_model()
    m.main.operands[1].location = DataLocation(0, m.pools[0].size - 8, loc.length)
    expect(m, "constant-location", "operand 1")
    m = chain_model()
    m.main.operands[1].location = DataLocation(0, 0, loc.length - 4)
    expect(m, "constant-location", "operand 1")
    m = chain_model()
    m.main.operands[1].location = DataLocation(0, -4, loc.length)
    expect(m, "constant-location", "operand 1")


def test_operand_location():
    m = add_model()
    m.main.operands[3].location = DataLocation(0, 0, 24)  # an output has no location
    expect(m, "operand-location", "operand 3")
    m = add_model()
    m.main.operands[0].location = DataLocation(1, 0, 0)
    expect(m, "operand-location", "operand 0")


# ---------------------------------------------------------------------------------------
# Versions


def test_version_operand_type():
    m = add_model(T.TENSOR_FLOAT16)
    validate_model(m, Version.V1_2)
    expect(m, "version", "operand 0", Version.V1_1)


def test_version_operation():
    m = add_model(op=Op.SUB)
    validate_model(m, Version.V1_1)
    expect(m, "version", "operation 0 (SUB)", Version.V1_0)
    m = add_model(T.TENSOR_INT32)  # ADD of TENSOR_INT32 is a 1.3 variant of a 1.0 operation
    validate_model(m, Version.V1_3)
    expect(m, "version", "operation 0 (ADD)", Version.V1_2)


def test_version_relaxed():
    m = add_model()
    m.relax_computation_float32_to_float16 = True
    validate_model(m, Version.V1_1)
    expect(m, "version", "model", Version.V1_0)


def test_version_unknown_rank_and_dynamic_output():
    m = add_model()
    m.main.operands[3].dimensions = (0, 3)  # a model output of unknown dimensions
    validate_model(m, Version.V1_2)
    expect(m, "version", "operand 3", Version.V1_1)
    m = chain_model()
    m.main.operands[3].dimensions = ()  # an internal operand of unknown rank
    validate_model(m, Version.V1_2)
    expect(m, "version", "operand 3", Version.V1_1)
    m = chain_model()
    m.main.operands[3].dimensions = (4, 0)  # internal unknown dimensions predate 1.2
    validate_model(m, Version.V1_1)


def test_version_referenced_subgraphs():
    m = if_model()
    expect(m, "version", "model", Version.V1_2)


# ---------------------------------------------------------------------------------------
# Operations


@pytest.mark.parametrize("bad", [-1, 106, Op.OEM_OPERATION, None])
def test_operation_type(bad):
    m = add_model()
    m.main.operations[0].type = bad
    expect(m, "operation-type", "operation 0")


def test_operation_type_unknown_to_the_catalogue_is_not_invalid():
    missing = [t for t in Op if t not in (Op.OEM_OPERATION, Op.IF, Op.WHILE) and get(t) is None]
    if not missing:
        pytest.skip("the catalogue has every operation")
    m = add_model()
    m.main.operations[0].type = missing[0]
    validate_model(m)


def test_operation_operand_index():
    m = add_model()
    m.main.operations[0].inputs[1] = 4
    expect(m, "operation-operand-index", "operation 0 (ADD)")
    m = add_model()
    m.main.operations[0].outputs[0] = 4
    expect(m, "operation-operand-index", "operation 0 (ADD)")
    m = add_model()
    m.main.operations[0].inputs[0] = -1
    expect(m, "operation-operand-index", "operation 0 (ADD)")


def test_operation_output_lifetime():
    m = add_model()
    m.main.operations[0].outputs[0] = 0  # writes a model input
    expect(m, "operation-output-lifetime", "operation 0 (ADD)")
    m = add_model()
    m.main.operands[3].lifetime = L.NO_VALUE  # NO_VALUE only as an operation input
    m.main.output_indexes = []
    expect(m, "operation-output-lifetime", "operation 0 (ADD)")


def test_operation_signature():
    m = add_model()
    m.main.operations[0].inputs.pop()  # no activation
    expect(m, "operation-signature", "operation 0 (ADD)")
    m = add_model()
    m.main.operands[1].type = T.TENSOR_FLOAT16  # inputs of different types
    expect(m, "operation-signature", "operation 0 (ADD)")
    m = add_model()
    m.main.operands[1].lifetime = L.NO_VALUE  # a required input omitted
    m.main.input_indexes = [0]
    expect(m, "operation-signature", "operation 0 (ADD)")
    m = add_model()
    m.main.operands.append(Operand(T.TENSOR_FLOAT32, (2, 3)))
    m.main.operations[0].outputs.append(4)  # one output too many
    expect(m, "operation-signature", "operation 0 (ADD)")


def test_operation_layout():
    case = find_case(lambda r, s, v: bool(r.layout) and r.layout in [a.name for a in s.inputs],
                     quantised=False)
    m, _ = case.model()
    op = m.main.operations[0]
    names = [a.name for a in case.signature.inputs]
    pos = names.index(case.record.layout)
    if pos >= len(op.inputs):
        pytest.skip("the sampled case has no layout input")
    m.main.operands.append(Operand(T.INT32, lifetime=L.SUBGRAPH_INPUT))
    m.main.input_indexes.append(len(m.main.operands) - 1)
    op.inputs[pos] = len(m.main.operands) - 1
    expect(m, "operation-layout", f"operation 0 ({case.record.name})")


def test_operation_rank():
    m = add_model(dims=(1, 1, 1, 2, 3))  # ADD takes ranks 1..4
    expect(m, "operation-rank", "operation 0 (ADD)")


@pytest.mark.parametrize("act", [-1, 4, 100])
def test_operation_activation(act):
    expect(add_model(act=act), "operation-activation", "operation 0 (ADD)")


def test_operation_activation_none_for_int32():
    validate_model(add_model(T.TENSOR_INT32, act=0))
    expect(add_model(T.TENSOR_INT32, act=1), "operation-activation", "operation 0 (ADD)")


def test_operation_quant_same():
    case = find_case(lambda r, s, v: s.outputs[0].quant.kind == "same")
    m, _ = case.model()
    validate_model(m)
    out = m.main.operands[m.main.output_indexes[0]]
    out.scale *= 2
    expect(m, "operation-quant", f"operation 0 ({case.record.name})")


def test_operation_quant_fixed():
    case = find_case(lambda r, s, v: s.outputs[0].quant.kind == "fixed")
    m, _ = case.model()
    validate_model(m)
    out = m.main.operands[m.main.output_indexes[0]]
    out.zero_point = out.zero_point + 1
    expect(m, "operation-quant", f"operation 0 ({case.record.name})")


def test_operation_quant_bias():
    def has_bias(r, s, v):
        return any(a.quant.kind == "bias" for a in s.inputs) and \
            all(t is not T.TENSOR_QUANT8_SYMM_PER_CHANNEL for _, t in v.bindings)

    case = find_case(has_bias)
    m, _ = case.model()
    validate_model(m)
    names = [ci.arg.name for ci in case.inputs]
    bias_name = next(a.name for a in case.signature.inputs if a.quant.kind == "bias")
    bias = m.main.operands[m.main.operations[0].inputs[names.index(bias_name)]]
    bias.scale *= 1 + 1e-5  # beyond the 1e-6 relative tolerance
    expect(m, "operation-quant", f"operation 0 ({case.record.name})")
    bias.scale /= 1 + 1e-5
    bias.scale *= 1 + 1e-7  # within it
    validate_model(m)


def test_operation_parameters():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2, 3))
    y = b.operand(T.TENSOR_FLOAT32, (4, 3))  # cannot be broadcast against (2, 3)
    k = b.constant(T.INT32, 0)
    out = b.operand(T.TENSOR_FLOAT32, (2, 3))
    b.operation(Op.ADD, [x, y, k], [out])
    expect(b.build([x, y], [out]), "operation-parameters", "operation 0 (ADD)")
    # MUL's record check: the quantised output scale must exceed the product of the inputs'.
    m = add_model(T.TENSOR_QUANT8_ASYMM, scale=0.5, op=Op.MUL)
    validate_model(m)
    m.main.operands[3].scale = 0.125
    expect(m, "operation-parameters", "operation 0 (MUL)")


def test_operation_parameters_from_constant_tensors():
    case = find_case(lambda r, s, v: r.type is Op.RESHAPE, quantised=False)
    m, _ = case.model()
    validate_model(m)
    out = m.main.operands[m.main.output_indexes[0]]
    out.dimensions = tuple(d + 1 for d in out.dimensions)  # RESHAPE's shape is a constant tensor
    expect(m, "operation-output-shape", "operation 0 (RESHAPE)")


def test_operation_output_shape():
    m = add_model()
    m.main.operands[3].dimensions = (2, 4)
    expect(m, "operation-output-shape", "operation 0 (ADD)")
    m = add_model()
    m.main.operands[3].dimensions = (2, 3, 1)
    expect(m, "operation-output-shape", "operation 0 (ADD)")
    m = add_model()
    m.main.operands[3].dimensions = (0, 3)  # partly known and consistent: fine
    validate_model(m)


# ---------------------------------------------------------------------------------------
# Model input / output lists


def test_model_inputs():
    m = add_model()
    m.main.input_indexes = [0, 9]
    expect(m, "model-inputs", "model input 1")
    m = add_model()
    m.main.input_indexes = [0, 1, 1]
    expect(m, "model-inputs", "operand 1")
    m = add_model()
    m.main.input_indexes = [0]  # operand 1 is SUBGRAPH_INPUT but not listed
    expect(m, "model-inputs", "operand 1")
    m = add_model()
    m.main.input_indexes = [0, 1, 2]  # operand 2 is a constant
    expect(m, "model-inputs", "operand 2")


def test_model_outputs():
    m = add_model()
    m.main.output_indexes = [3, 3]
    expect(m, "model-outputs", "operand 3")
    m = add_model()
    m.main.output_indexes = []
    expect(m, "model-outputs", "operand 3")
    m = add_model()
    m.main.output_indexes = [3, 0]
    expect(m, "model-outputs", "operand 0")
    m = add_model()
    m.main.output_indexes = [4]
    expect(m, "model-outputs", "model output 0")


# ---------------------------------------------------------------------------------------
# Data flow


def test_duplicate_writer():
    m = chain_model()
    m.main.operations[1].outputs = [3]  # MUL writes t0 too (and reads it: ADD wrote it first)
    m.main.operations[2].inputs[0] = 3
    expect(m, "duplicate-writer", "operand 3")


def test_unwritten_operand():
    m = add_model()
    m.main.operands.append(Operand(T.TENSOR_FLOAT32, (2, 3)))  # a temporary nobody writes
    expect(m, "unwritten-operand", "operand 4")
    m = chain_model()
    m.main.operations[1].outputs = [len(m.main.operands)]  # MUL writes a new operand...
    m.main.operands.append(Operand(T.TENSOR_FLOAT32, (4, 16)))
    expect(m, "unwritten-operand", "operand 4")  # ... so t1 (read by SUB) has no writer


def test_execution_order():
    m = chain_model()
    m.main.operations.reverse()  # SUB, MUL, ADD: each reads before its input is written
    expect(m, "execution-order", "operation 0 (SUB)")


def test_cycle():
    """The VTS CycleTest: three ADDs each reading the next one's output."""
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (1,))
    act = b.constant(T.INT32, 0)
    t = [b.operand(T.TENSOR_FLOAT32, (1,)) for _ in range(3)]
    out = b.operand(T.TENSOR_FLOAT32, (1,))
    b.operation(Op.ADD, [x, t[2], act], [t[0]])
    b.operation(Op.ADD, [t[0], x, act], [t[1]])
    b.operation(Op.ADD, [t[1], x, act], [t[2]])
    b.operation(Op.ADD, [t[2], x, act], [out])
    err = expect(b.build([x], [out]), "cycle", "operation 0 (ADD)")
    assert "0 -> 1 -> 2 -> 0" in err.message


def test_self_loop_is_a_cycle():
    m = add_model()
    m.main.operations[0].inputs[1] = 3  # ADD reads its own output
    expect(m, "cycle", "operation 0 (ADD)")


# ---------------------------------------------------------------------------------------
# Execution preference and priority


def test_preference_and_priority():
    for p in ExecutionPreference:
        validate_execution_preference(p)
    for p in Priority:
        validate_priority(p)
    assert bad_preferences() == [-1, 3] and bad_priorities() == [-1, 3]
    for p in [*bad_preferences(), None, "FAST"]:
        with pytest.raises(ValidationError) as info:
            validate_execution_preference(p)
        assert info.value.rule == "execution-preference"
    for p in [*bad_priorities(), None]:
        with pytest.raises(ValidationError) as info:
            validate_priority(p)
        assert info.value.rule == "priority"


@pytest.mark.parametrize("spec", ["reference", "litert"])
def test_an_execution_with_a_bad_measure_is_invalid_before_it_runs(spec):
    """MeasureTiming 2 (or -1, or None) is INVALID_ARGUMENT, not an exception of the driver's
    own after the run has written its outputs."""
    if spec == "litert":
        pytest.importorskip("ai_edge_litert")
    driver = load_driver(spec)
    model, request = _request()
    prepared = driver.prepare_model(model)
    for measure in (2, -1, None):
        with pytest.raises(ValidationError) as info:
            prepared.execute_synchronously(request, measure)
        assert info.value.rule == "measure-timing" and info.value.status is ErrorStatus.INVALID_ARGUMENT
    for measure in MeasureTiming:
        prepared.execute_synchronously(request, measure)


# ---------------------------------------------------------------------------------------
# Mutations (the VTS's ValidateModel)


def _mutation_models(record):
    """A few valid single-operation models of ``record``: two seeds, up to three variants."""
    for sig in record.signatures:
        picked = list(record.variants)
        picked = picked[:1] + [v for v in picked[1:] if v.primary.is_quant][:1] + picked[-1:]
        for var_ in dict.fromkeys(picked):
            act = None
            if record.activation:
                act = 0 if sig.outputs[0].resolve(var_.types) is T.TENSOR_INT32 else 1
            for seed in (0, 1):
                case = sample_case(record, sig, var_, (seed == 1) if record.layout else None, act, seed)
                for variation in ("base", "all_tensors_as_inputs", "inputs_as_internal"):
                    if case.supports(variation) and (variation == "base" or seed == 0):
                        yield f"{case.id}/{variation}", case.model(variation)[0]


@pytest.mark.parametrize("record", records(), ids=lambda r: r.name)
def test_every_mutation_is_rejected(record):
    seen = set()
    for name, model in _mutation_models(record):
        validate_model(model)
        labels = []
        for label, mutated in model_mutations(model):
            labels.append(label)
            seen.add(kind_of(label))
            try:
                validate_model(mutated)
            except ValidationError as e:
                assert "record error" not in e.message, f"{name}: {label}: {e}"
            else:
                pytest.fail(f"{name}: mutation {label} was accepted")
        validate_model(model)  # the original is untouched
        # Labels name one mutation each, the same every time (suites regenerate by label).
        assert len(set(labels)) == len(labels), f"{name}: duplicate labels"
        assert labels == [label for label, _ in model_mutations(model)]
    assert {"operand_type", "operand_scale", "operation_type", "remove_operation"} <= seen


def test_mutation_kinds_on_a_chain():
    model = chain_model()
    by_kind: dict[str, set[str]] = {}
    for label, mutated in model_mutations(model):
        with pytest.raises(ValidationError) as info:
            validate_model(mutated)
        by_kind.setdefault(kind_of(label), set()).add(info.value.rule)
    assert set(by_kind) == set(KINDS)
    assert by_kind["execution_order"] == {"execution-order"}
    assert "cycle" in by_kind["cycle"]
    assert by_kind["add_writer"] == {"duplicate-writer"}
    assert by_kind["remove_write"] == {"unwritten-operand"}
    assert by_kind["operand_type"] == {"operand-type"}
    assert by_kind["operation_type"] == {"operation-type"}
    validate_model(model)


def test_mutation_skips_still_valid_changes():
    # ADD's three inputs are all required: every input removal is produced...
    labels = [label for label, _ in model_mutations(add_model())]
    assert {f"remove_operation_input[0.{j}]" for j in range(3)} <= set(labels)
    # ...but an optional trailing input is not (a layout flag, an axis, ...).
    case = find_case(lambda r, s, v: any(a.optional for a in s.inputs), quantised=False)
    m, _ = case.model()
    n = len(m.main.operations[0].inputs)
    labels = {label for label, _ in model_mutations(m)}
    last = case.signature.inputs[n - 1] if n <= len(case.signature.inputs) else None
    if last is not None and last.optional and not last.variadic:
        assert f"remove_operation_input[0.{n - 1}]" not in labels


def test_request_mutations_rejected():
    model = chain_model()
    request = build_request(model, [np.ones((4, 16), np.float32)])
    validate_request(request, model)
    labels = []
    for label, mutated in request_mutations(request):
        labels.append(label)
        expect_request(mutated, model, "request-arguments",
                       "request inputs" if label.startswith("remove_input") else "request outputs")
    assert labels == ["remove_input[0]", "remove_output[0]"]
    validate_request(request, model)


# ---------------------------------------------------------------------------------------
# Requests


def _request(model: Model | None = None, **kw):
    model = model or add_model()
    feeds = [np.ones(tuple(d or 2 for d in model.main.operands[i].dimensions) or (2, 3), np.float32)
             for i in model.main.input_indexes]
    return model, build_request(model, feeds, **kw)


def test_valid_requests_accepted():
    model, request = _request()
    validate_request(request, model)
    model, request = _request(output_shrink={0: 4})  # too small: a run-time error, not invalid
    validate_request(request, model)
    dyn = add_model(dims=(0, 3))
    model, request = _request(dyn, output_dims=[(2, 3)])
    assert request.inputs[0].dimensions == (2, 3)
    validate_request(request, model)
    request.outputs[0].dimensions = ()  # a dynamic output needs no dimensions
    validate_request(request, model)


def test_request_arguments():
    model, request = _request()
    request.inputs.pop()
    expect_request(request, model, "request-arguments", "request inputs")
    model, request = _request()
    request.outputs.append(RequestArgument())
    expect_request(request, model, "request-arguments", "request outputs")


def test_request_pool():
    model, request = _request()
    request.pools.append(-3)
    expect_request(request, model, "pool", "request pool 2")
    model, request = _request()
    request.pools[1] = "buffer"
    expect_request(request, model, "pool", "request pool 1")


def test_request_token_pool():
    model, request = _request()
    request.pools.append(5)  # a driver-managed buffer: its bounds are the driver's to check
    request.outputs[0].location = DataLocation(2, 0, 0)
    validate_request(request, model)
    request.outputs[0].location = DataLocation(2, 0, 24)
    validate_request(request, model)


def test_request_location():
    model, request = _request()
    request.inputs[1].location.pool_index = 5
    expect_request(request, model, "request-location", "request input 1")
    model, request = _request()
    request.outputs[0].location.offset = request.pools[1].size - 8
    expect_request(request, model, "request-location", "request output 0")
    model, request = _request()
    request.inputs[0].location.padding = request.pools[0].size
    expect_request(request, model, "request-location", "request input 0")
    model, request = _request()
    request.outputs[0].location.length = 0
    expect_request(request, model, "request-location", "request output 0")
    model, request = _request()
    request.inputs[0].location.offset = -8
    expect_request(request, model, "request-location", "request input 0")


def test_request_no_value():
    model, request = _request(omitted_inputs=[1])
    expect_request(request, model, "request-omitted", "request input 1")  # ADD needs both inputs
    request.inputs[1].location = DataLocation(0, 8, 0)
    expect_request(request, model, "request-location", "request input 1")
    model, request = _request(omitted_inputs=[1])
    request.inputs[1].dimensions = (2, 3)
    expect_request(request, model, "request-dimensions", "request input 1")


def test_request_dimensions():
    model, request = _request()
    request.inputs[0].dimensions = (2, 3, 1)
    expect_request(request, model, "request-dimensions", "request input 0")
    model, request = _request()
    request.inputs[0].dimensions = (3, 2)
    expect_request(request, model, "request-dimensions", "request input 0")
    model, request = _request()
    request.outputs[0].dimensions = (2, -3)
    expect_request(request, model, "request-dimensions", "request output 0")
    dyn = add_model(dims=(0, 3))
    model, request = _request(dyn, output_dims=[(2, 3)])
    request.inputs[0].dimensions = ()  # the model leaves dimension 0 open: must be given
    expect_request(request, model, "request-dimensions", "request input 0")
    model, request = _request(dyn, output_dims=[(2, 3)])
    request.inputs[0].dimensions = (0, 3)
    expect_request(request, model, "request-dimensions", "request input 0")


def test_request_dimensions_scalar():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2,))
    k = b.operand(T.INT32)  # the activation as a model input
    out = b.operand(T.TENSOR_FLOAT32, (2,))
    b.operation(Op.ADD, [x, x, k], [out])
    model = b.build([x, k], [out])
    validate_model(model)
    request = build_request(model, [np.ones(2, np.float32), np.int32(0)])
    validate_request(request, model)
    request.inputs[1].dimensions = (1,)
    expect_request(request, model, "request-dimensions", "request input 1")


def test_request_length():
    model, request = _request()
    request.inputs[0].location.length = 20  # a float32 [2, 3] is 24 bytes
    expect_request(request, model, "request-length", "request input 0")
    model, request = _request()
    request.pools[1] = Memory.create(64)
    request.outputs[0].location.length = 32  # an output buffer may be smaller, not larger
    expect_request(request, model, "request-length", "request output 0")


# ---------------------------------------------------------------------------------------
# The catalogue's own cases are valid, at their declared version and not below it
# (a catalogue bug shows here: a sampler producing an invalid case, or a variant version
# that disagrees with the types it uses)


_PREVIOUS = {Version.V1_1: Version.V1_0, Version.V1_2: Version.V1_1, Version.V1_3: Version.V1_2,
             Version.FL5: Version.V1_3, Version.FL6: Version.FL5, Version.FL7: Version.FL6}


@pytest.mark.parametrize("record", records(), ids=lambda r: r.name)
def test_catalogue_cases_are_valid(record):
    for key in enumerate_cases(seeds=(0,)):
        if key[0] is not record:
            continue
        case = sample_case(*key)
        for variation in VARIATIONS:
            if not case.supports(variation):
                continue
            model, _ = case.model(variation)
            version = case.variation_version(variation)
            validate_model(model)
            validate_model(model, version)
            # A min_version rule reading a value that is an input here cannot raise the version.
            if version in _PREVIOUS and variation != "all_tensors_as_inputs":
                with pytest.raises(ValidationError) as info:
                    validate_model(model, _PREVIOUS[version])
                assert info.value.rule == "version", f"{case.id}/{variation}: {info.value}"
