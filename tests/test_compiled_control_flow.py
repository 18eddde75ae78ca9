"""IF and WHILE in the compiled drivers: the .tflite and the ONNX model their exporters
write (subgraphs, their order and connections, the loop stop flag), what
supported_operations declines and why, and runs that conformance/test_control_flow.py does
not cover (quantised and float16 branches, shapes specialised per call, a loop stopped
inside a loop), on LiteRT and ONNX Runtime."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("onnxruntime")

from nncert.drivers.litert import LiteRTDriver
from nncert.drivers.litert.export import STOP, Unmappable, export, fb
from nncert.drivers.onnxruntime import OnnxRuntimeDriver
from nncert.drivers.onnxruntime.export import export as export_onnx
from nncert.drivers.reference import ReferenceDriver
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import Model
from nncert.hal.transform import specialize_shapes
from nncert.hal.types import ErrorStatus, OperandType, OperationType
from nncert.testing.control_flow_models import (
    _counter_body,
    _counter_condition,
    counting_feeds,
    counting_while_model,
    if_model,
)

T = OperandType
Op = OperationType


@pytest.fixture(scope="module")
def litert():
    return LiteRTDriver()


DRIVERS = {"litert": LiteRTDriver, "onnxruntime": OnnxRuntimeDriver}


@pytest.fixture(scope="module", params=list(DRIVERS))
def driver(request):
    return DRIVERS[request.param]()


def _parsed(content: bytes):
    return fb.ModelT.InitFromObj(fb.Model.GetRootAs(content, 0))


def _operators(model, k: int) -> list[str]:
    names = {v: n for n, v in vars(fb.BuiltinOperator).items() if not n.startswith("_")}
    return [names[model.operatorCodes[o.opcodeIndex].builtinCode] for o in model.subgraphs[k].operators]


def _run(driver, model: Model, feeds, dims, **kwargs) -> list[np.ndarray]:
    request = build_request(model, feeds, dims)
    driver.prepare_model(model).execute_synchronously(request, **kwargs)
    return read_outputs(model, request, dims)


# --- the exported flatbuffer


def test_if_exports_its_branches_as_subgraphs():
    m = _parsed(export(if_model()))
    assert len(m.subgraphs) == 3
    assert _operators(m, 0) == ["IF"] and _operators(m, 1) == ["ADD"] and _operators(m, 2) == ["SUB"]
    (op,) = m.subgraphs[0].operators
    assert (op.builtinOptions.thenSubgraphIndex, op.builtinOptions.elseSubgraphIndex) == (1, 2)
    assert list(op.inputs) == list(m.subgraphs[0].inputs)  # condition, then a and b: NNAPI's order
    cond = m.subgraphs[0].tensors[op.inputs[0]]
    assert cond.type == fb.TensorType.BOOL and list(cond.shape) == [1]
    # operator codes are the model's, shared by its subgraphs
    assert sorted(c.builtinCode for c in m.operatorCodes) == sorted(
        [fb.BuiltinOperator.IF, fb.BuiltinOperator.ADD, fb.BuiltinOperator.SUB])


def test_while_body_passes_its_input_only_operands_back():
    """NNAPI's body gives m + k outputs, TFLite's all N: the input-only bound goes back as it
    came; the condition reads the stop flag."""
    m = _parsed(export(counting_while_model()))
    (loop,) = m.subgraphs[0].operators
    assert _operators(m, 0) == ["WHILE"] and len(loop.inputs) == len(loop.outputs) == 3
    cond = m.subgraphs[loop.builtinOptions.condSubgraphIndex]
    body = m.subgraphs[loop.builtinOptions.bodySubgraphIndex]
    assert len(cond.inputs) == 3 and len(cond.outputs) == 1
    assert [t.isVariable for t in cond.tensors if t.name == STOP.encode()] == [True]
    assert len(body.inputs) == len(body.outputs) == 3
    assert body.outputs[2] == body.inputs[2] and body.outputs[0] != body.inputs[0]
    assert list(loop.outputs[:1]) == list(m.subgraphs[0].outputs)


def test_nested_if_is_a_subgraph_of_the_body():
    m = _parsed(export(counting_while_model(nested_if=True)))
    assert len(m.subgraphs) == 5
    (loop,) = m.subgraphs[0].operators
    body = loop.builtinOptions.bodySubgraphIndex
    inner = m.subgraphs[body].operators[_operators(m, body).index("IF")]
    branches = {inner.builtinOptions.thenSubgraphIndex, inner.builtinOptions.elseSubgraphIndex}
    assert {tuple(_operators(m, k)) for k in branches} == {("ADD",), ("SUB",)}


def _unknown_branch_if() -> Model:
    """IF(c, then: x * 2, else: x) with branch operands of unknown dimensions, on x [2, 5]."""
    branches = []
    for doubled in (True, False):
        s = ModelBuilder()
        x, y = s.operand(T.TENSOR_FLOAT32, (0, 0)), s.operand(T.TENSOR_FLOAT32, (0, 0))
        other = s.constant(T.TENSOR_FLOAT32, [2.0 if doubled else 1.0])
        s.operation(Op.MUL, [x, other, s.constant(T.INT32, 0)], [y])
        branches.append((s, [x], [y]))
    m = ModelBuilder()
    c = m.operand(T.TENSOR_BOOL8, (1,))
    x, out = m.operand(T.TENSOR_FLOAT32, (2, 5)), m.operand(T.TENSOR_FLOAT32, (2, 5))
    m.operation(Op.IF, [c, *(m.subgraph(*b) for b in branches), x], [out])
    return m.build([c, x], [out])


def test_branches_are_exported_at_the_if_input_shapes(driver):
    model = _unknown_branch_if()
    if driver.name == "litert":
        m = _parsed(export(model))
        for k in (1, 2):
            assert {tuple(t.shape) for t in m.subgraphs[k].tensors if len(t.shape) == 2} == {(2, 5)}
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    for c in (True, False):
        got = _run(driver, model, [np.array([c]), x], [(2, 5)])[0]
        np.testing.assert_array_equal(got, x * (2 if c else 1))


def _reshaping_loop() -> Model:
    """WHILE n < 3: x = RESHAPE(CONCATENATION(x, x), [-1]); n += 1. The reshape's target
    follows x's length, which doubles every turn."""
    c = ModelBuilder()
    cx, cn = c.operand(T.TENSOR_FLOAT32, (0,)), c.operand(T.TENSOR_INT32, (1,))
    go = c.operand(T.TENSOR_BOOL8, (1,))
    c.operation(Op.LESS, [cn, c.constant(T.TENSOR_INT32, [3])], [go])
    b = ModelBuilder()
    bx, bn = b.operand(T.TENSOR_FLOAT32, (0,)), b.operand(T.TENSOR_INT32, (1,))
    both, flat = b.operand(T.TENSOR_FLOAT32, (0,)), b.operand(T.TENSOR_FLOAT32, (0,))
    b.operation(Op.CONCATENATION, [bx, bx, b.constant(T.INT32, 0)], [both])
    b.operation(Op.RESHAPE, [both, b.constant(T.TENSOR_INT32, [-1])], [flat])
    nn = b.operand(T.TENSOR_INT32, (1,))
    b.operation(Op.ADD, [bn, b.constant(T.TENSOR_INT32, [1]), b.constant(T.INT32, 0)], [nn])
    m = ModelBuilder()
    x, n = m.operand(T.TENSOR_FLOAT32, (0,)), m.operand(T.TENSOR_INT32, (1,))
    ox, on = m.operand(T.TENSOR_FLOAT32, (0,)), m.operand(T.TENSOR_INT32, (1,))
    m.operation(Op.WHILE, [m.subgraph(c, [cx, cn], [go]), m.subgraph(b, [bx, bn], [flat, nn]), x, n],
                [ox, on])
    return m.build([x, n], [ox, on])


def test_a_loop_whose_tflite_form_follows_its_changing_shapes_is_declined():
    with pytest.raises(Unmappable, match="carried shapes change every iteration"):
        export(specialize_shapes(_reshaping_loop(), [(3,), (1,)]))


def test_onnx_if_and_loop_carry_their_subgraphs_as_graphs():
    if_node, = export_onnx(if_model()).graph.node
    assert if_node.op_type == "If"
    branches = {a.name: [n.op_type for n in a.g.node] for a in if_node.attribute}
    # each branch reads the IF's inputs from the enclosing graph through Identity nodes
    assert branches == {"then_branch": ["Identity", "Identity", "Add"],
                        "else_branch": ["Identity", "Identity", "Sub"]}
    nodes = export_onnx(counting_while_model()).graph.node
    assert [n.op_type for n in nodes][-1] == "Loop" and "Less" in [n.op_type for n in nodes]
    loop = nodes[-1]
    body = loop.attribute[0].g
    assert len(loop.input) == 2 + 3 and len(loop.output) == 3  # no trip count, condition, N values
    assert len(body.input) == 2 + 3 and len(body.output) == 1 + 3
    assert [n.op_type for n in body.node].count("Less") == 1  # the condition, after the body


def test_onnx_declines_a_loop_whose_form_follows_its_changing_shapes():
    from nncert.drivers.compiled import Unmappable as Declined

    with pytest.raises(Declined, match="carried shapes change every iteration"):
        export_onnx(specialize_shapes(_reshaping_loop(), [(3,), (1,)]))


# --- supported operations: an IF / WHILE is judged with its subgraphs


def _one_branch_if(branch_type: T, op: Op, scale: float = 0.0, zero_point: int = 0) -> Model:
    """IF(c, then: op(x), else: op(x)) on a [4] tensor of ``branch_type``."""
    def branch():
        s = ModelBuilder()
        x, y = (s.operand(branch_type, (4,), scale, zero_point) for _ in range(2))
        s.operation(op, [x], [y])
        return s, [x], [y]

    m = ModelBuilder()
    c = m.operand(T.TENSOR_BOOL8, (1,))
    x, out = (m.operand(branch_type, (4,), scale, zero_point) for _ in range(2))
    m.operation(Op.IF, [c, m.subgraph(*branch()), m.subgraph(*branch()), x], [out])
    return m.build([c, x], [out])


def _runtime_transpose_if() -> Model:
    """IF whose branches TRANSPOSE by a permutation fed at run time (ONNX takes it as an
    attribute)."""
    def branch():
        s = ModelBuilder()
        x, perm = s.operand(T.TENSOR_FLOAT32, (2, 3)), s.operand(T.TENSOR_INT32, (2,))
        y = s.operand(T.TENSOR_FLOAT32, (3, 2))
        s.operation(Op.TRANSPOSE, [x, perm], [y])
        return s, [x, perm], [y]

    m = ModelBuilder()
    c, x = m.operand(T.TENSOR_BOOL8, (1,)), m.operand(T.TENSOR_FLOAT32, (2, 3))
    perm = m.operand(T.TENSOR_INT32, (2,))
    out = m.operand(T.TENSOR_FLOAT32, (3, 2))
    m.operation(Op.IF, [c, m.subgraph(*branch()), m.subgraph(*branch()), x, perm], [out])
    return m.build([c, x, perm], [out])


#: An IF whose branches hold what each runtime declines, and the word its reason must name.
DECLINED_BRANCH = {
    "litert": (lambda: _one_branch_if(T.TENSOR_QUANT8_ASYMM, Op.RSQRT, 0.5, 128), "RSQRT"),  # no kernel
    "onnxruntime": (_runtime_transpose_if, "perm"),
}


def test_if_is_declined_with_the_branch_operation_the_runtime_declines(driver):
    """Same IF signature, different branch contents: the probe must tell them apart."""
    taken = _one_branch_if(T.TENSOR_QUANT8_ASYMM, Op.RELU, 0.5, 128)
    refused, word = DECLINED_BRANCH[driver.name]
    refused = refused()
    assert driver.supported_operations(taken) == [True]
    assert driver.supported_operations(refused) == [False]
    assert word in driver.why_unsupported(refused, 0)


def test_if_is_declined_statically_for_a_branch_operand_litert_cannot_take(litert):
    model = _one_branch_if(T.TENSOR_QUANT8_ASYMM, Op.RELU, 1e-40, 0)
    assert litert.supported_operations(model) == [False]
    reason = litert.why_unsupported(model, 0)
    assert "quantisation scale" in reason


def test_if_passing_a_scalar_is_declined(driver):
    s = ModelBuilder()
    a, k, y = s.operand(T.TENSOR_INT32, (2,)), s.operand(T.INT32), s.operand(T.TENSOR_INT32, (2,))
    s.operation(Op.ADD, [a, a, k], [y])
    m = ModelBuilder()
    c, x, act, out = (m.operand(T.TENSOR_BOOL8, (1,)), m.operand(T.TENSOR_INT32, (2,)), m.operand(T.INT32),
                      m.operand(T.TENSOR_INT32, (2,)))
    sub = m.subgraph(s, [a, k], [y])
    m.operation(Op.IF, [c, sub, sub, x, act], [out])
    model = m.build([c, x, act], [out])
    assert driver.supported_operations(model) == [False]
    assert "passes tensors only" in driver.why_unsupported(model, 0)


# --- runs


@pytest.mark.parametrize("condition", [True, False])
def test_quantised_branches_match_the_reference(driver, condition):
    model = _one_branch_if(T.TENSOR_QUANT8_ASYMM, Op.RELU, 0.5, 128)
    feeds = [np.array([condition]), np.array([0, 100, 128, 255], np.uint8)]
    want = _run(ReferenceDriver(), model, feeds, [(4,)])
    got = _run(driver, model, feeds, [(4,)])
    np.testing.assert_array_equal(got[0], want[0])


def test_float16_branches_are_computed_in_float32(driver):
    model = if_model()
    for o in (model.main, *model.referenced):
        for operand in o.operands:
            if operand.type is T.TENSOR_FLOAT32:
                operand.type = T.TENSOR_FLOAT16
    a = np.array([[1.5, -2.25, 3.0], [0.5, 0.25, 1000.0]], np.float16)
    got = _run(driver, model, [np.array([False]), a, a / 2], [(2, 3)])[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, a - a / 2)


def _loop_in_a_loop() -> Model:
    """WHILE i < bound: total = WHILE(endless)(total, i, bound); i += 1: the inner loop never
    ends."""
    inner_cond, inner_body = _counter_condition(infinite=True), _counter_body()
    s = ModelBuilder()
    total, i, bound = (s.operand(T.TENSOR_INT32, (1,)) for _ in range(3))
    new_total = s.operand(T.TENSOR_INT32, (1,))
    s.operation(Op.WHILE, [s.subgraph(*inner_cond), s.subgraph(*inner_body), total, i, bound], [new_total])
    next_i = s.operand(T.TENSOR_INT32, (1,))
    s.operation(Op.ADD, [i, s.constant(T.TENSOR_INT32, [1]), s.constant(T.INT32, 0)], [next_i])
    m = ModelBuilder()
    mt, mi, mb, out = (m.operand(T.TENSOR_INT32, (1,)) for _ in range(4))
    body = m.subgraph(s, [total, i, bound], [new_total, next_i])
    m.operation(Op.WHILE, [m.subgraph(*_counter_condition()), body, mt, mi, mb], [out])
    return m.build([mt, mi, mb], [out])


def test_an_endless_loop_inside_a_loop_is_stopped_at_the_loop_timeout(driver):
    model = _loop_in_a_loop()
    assert driver.supported_operations(model) == [True]
    prepared = driver.prepare_model(model)
    request = build_request(model, counting_feeds(0, 0, 3))
    started = time.monotonic()
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(request, loop_timeout=1_000_000)
    assert e.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert time.monotonic() - started < 1.0
    # Stopped, not broken: the flags are cleared and a finite loop runs to its end after it.
    finite = counting_while_model()
    got = _run(driver, finite, counting_feeds(100, 0, 10), [(1,)], loop_timeout=1_000_000_000)
    assert got[0].tolist() == [145]
    with pytest.raises(HalError):  # and the same prepared model is stopped again
        prepared.execute_synchronously(request, loop_timeout=1_000_000)


def test_a_loop_ended_before_the_loop_timeout_keeps_its_results(driver):
    model = counting_while_model()
    prepared = driver.prepare_model(model)
    for _ in range(3):
        request = build_request(model, counting_feeds(0, 0, 1000))
        prepared.execute_synchronously(request, loop_timeout=2_000_000_000)
        assert read_outputs(model, request, [(1,)])[0].tolist() == [sum(range(1000))]
