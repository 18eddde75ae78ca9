"""RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN and SVDF: the reference
kernels against values worked out by hand, the validity rules, and round trips through the
LiteRT and ONNX Runtime exporters and the TFLite importer (a file whose RNN state is a
variable tensor imports as streaming state)."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import ValidationError, validate_model
from nncert.ops import get
from nncert.ops.interpreter import run_model
from nncert.testing.cases import sample_case

F32 = T.TENSOR_FLOAT32


def _run(op: Op, inputs: list, out_dims: list[tuple[int, ...]], out_type: T = F32) -> list[np.ndarray]:
    """One ``op`` on constant inputs (arrays: float32 tensors; ints: INT32; bools: BOOL;
    None: omitted), through the model validator and the reference interpreter."""
    b = ModelBuilder()
    idx = []
    for v in inputs:
        if v is None:
            idx.append(b.no_value(F32))
        elif isinstance(v, bool):
            idx.append(b.constant(T.BOOL, v))
        elif isinstance(v, int):
            idx.append(b.constant(T.INT32, v))
        else:
            arr = np.asarray(v, np.float32 if out_type is F32 else np.float16)
            idx.append(b.constant(out_type, arr))
    outs = [b.operand(out_type, d) for d in out_dims]
    b.operation(op, idx, outs)
    model = b.build([], outs)
    validate_model(model)
    return [np.asarray(r, np.float64) for r in run_model(model, [])]


# ---------------------------------------------------------------------------------------
# RNN: h' = act(x W^T + h R^T + b)

_W = [[1.0, 2.0], [0.5, -1.0]]  # 2 units x 2 inputs
_R = [[0.5, 0.0], [1.0, 0.25]]
_B = [0.25, -0.5]


def test_rnn_one_step_by_hand():
    # x = [1, -1]: x W^T = [1 - 2, 0.5 + 1] = [-1, 1.5]; h = [2, 4]: h R^T = [1, 2 + 1] = [1, 3]
    # pre = [-1 + 1 + 0.25, 1.5 + 3 - 0.5] = [0.25, 4]
    state, out = _run(Op.RNN, [[[1.0, -1.0]], _W, _R, _B, [[2.0, 4.0]], 0], [(1, 2), (1, 2)])
    np.testing.assert_array_equal(state, [[0.25, 4.0]])
    np.testing.assert_array_equal(out, state)
    (relu1, _) = _run(Op.RNN, [[[1.0, -1.0]], _W, _R, _B, [[2.0, 4.0]], 2], [(1, 2), (1, 2)])
    np.testing.assert_array_equal(relu1, [[0.25, 1.0]])


def test_rnn_float16():
    state, _ = _run(Op.RNN, [[[1.0, -1.0]], _W, _R, _B, [[2.0, 4.0]], 3], [(1, 2), (1, 2)], T.TENSOR_FLOAT16)
    np.testing.assert_array_equal(state, [[0.25, 4.0]])


def test_rnn_rejects_an_activation_outside_0_to_3():
    with pytest.raises(ValidationError, match="act"):
        _run(Op.RNN, [[[1.0, -1.0]], _W, _R, _B, [[2.0, 4.0]], 4], [(1, 2), (1, 2)])


def test_rnn_rejects_a_state_of_the_wrong_shape():
    with pytest.raises(ValidationError, match="hidden_state"):
        _run(Op.RNN, [[[1.0, -1.0]], _W, _R, _B, [[2.0, 4.0, 1.0]], 0], [(1, 2), (1, 2)])


# ---------------------------------------------------------------------------------------
# UNIDIRECTIONAL_SEQUENCE_RNN: the cell along time


def _seq_by_hand() -> tuple[np.ndarray, np.ndarray]:
    """Two steps from h = 0 with RELU: x0 = [1, -1] -> pre [-1 + 0.25, 1.5 - 0.5] = [-0.75, 1]
    -> h1 = [0, 1]; x1 = [0, 1] -> x W^T = [2, -1], h1 R^T = [0, 0.25] -> pre [2.25, -1.25]
    -> h2 = [2.25, 0]."""
    return np.array([[0.0, 1.0], [2.25, 0.0]]), np.array([2.25, 0.0])


def test_unidirectional_two_steps_by_hand_both_layouts():
    steps, last = _seq_by_hand()
    x = [[[1.0, -1.0], [0.0, 1.0]]]  # [batch 1, time 2, input 2]
    out, state = _run(Op.UNIDIRECTIONAL_SEQUENCE_RNN, [x, _W, _R, _B, [[0.0, 0.0]], 1, 0],
                      [(1, 2, 2), (1, 2)])
    np.testing.assert_array_equal(out[0], steps)
    np.testing.assert_array_equal(state[0], last)
    xt = np.swapaxes(np.asarray(x), 0, 1)  # time-major [2, 1, 2]
    (out_t,) = _run(Op.UNIDIRECTIONAL_SEQUENCE_RNN, [xt, _W, _R, _B, [[0.0, 0.0]], 1, 1], [(2, 1, 2)])
    np.testing.assert_array_equal(out_t[:, 0], steps)


def test_unidirectional_time_major_must_be_0_or_1():
    x = [[[1.0, -1.0]]]
    with pytest.raises(ValidationError, match="time_major"):
        _run(Op.UNIDIRECTIONAL_SEQUENCE_RNN, [x, _W, _R, _B, [[0.0, 0.0]], 1, 2], [(1, 1, 2)])


def test_unidirectional_state_output_needs_1_3():
    r = get(Op.UNIDIRECTIONAL_SEQUENCE_RNN)
    plain, state = r.signatures
    assert sample_case(r, plain, r.variants[0]).version.label == "1.2"
    assert sample_case(r, state, r.variants[0]).version.label == "1.3"
    assert r.state_pairs(plain) == [] and r.state_pairs(state) == [("hidden_state", 1)]


# ---------------------------------------------------------------------------------------
# BIDIRECTIONAL_SEQUENCE_RNN


def _bidi(x, aux=None, fw_aux=None, bw_aux=None, merge=False, outputs=2, act=1):
    units = 2
    time = np.shape(x)[1]
    dims = [(1, time, 2 * units)] if merge else [(1, time, units), (1, time, units)]
    if outputs > len(dims):
        dims += [(1, units), (1, units)]
    zero = [[0.0, 0.0]]
    return _run(Op.BIDIRECTIONAL_SEQUENCE_RNN,
                [x, _W, _R, _B, zero, _W, _R, _B, zero, aux, fw_aux, bw_aux, act, False, merge], dims)


def test_bidirectional_backward_cell_runs_backwards():
    # forwards: the two steps above; backwards from x1 = [0, 1]: pre [2 + 0.25, -1 - 0.5]
    # -> [2.25, 0]; then x0 = [1, -1] with h = [2.25, 0]: x W^T = [-1, 1.5], h R^T =
    # [1.125, 2.25], pre [0.375, 3.25]
    steps, last = _seq_by_hand()
    fw, bw, fw_state, bw_state = _bidi([[[1.0, -1.0], [0.0, 1.0]]], outputs=4)
    np.testing.assert_array_equal(fw[0], steps)
    np.testing.assert_array_equal(bw[0], [[0.375, 3.25], [2.25, 0.0]])
    np.testing.assert_array_equal(fw_state[0], last)
    np.testing.assert_array_equal(bw_state[0], [0.375, 3.25])  # after its last step, at time 0
    (merged,) = _bidi([[[1.0, -1.0], [0.0, 1.0]]], merge=True, outputs=1)
    np.testing.assert_array_equal(merged[0], np.concatenate([fw[0], bw[0]], axis=1))


def test_bidirectional_linking_modes():
    x = [[[1.0, -1.0], [0.0, 1.0]]]
    aux = [[[0.0, 1.0], [1.0, -1.0]]]  # x reversed in time
    # parallel linking: the backward cell reads aux_input, so it sees x1 first... then x0
    # in reverse order: the backward outputs are the forward ones reversed
    fw, bw, _, _ = _bidi(x, aux=aux, outputs=4)
    np.testing.assert_array_equal(bw[0], fw[0][::-1])
    # cross-linking with zero aux weights changes nothing
    zeros = np.zeros((2, 2))
    fw2, _ = _bidi(x, aux=aux, fw_aux=zeros, bw_aux=zeros)
    np.testing.assert_array_equal(fw2, fw)
    # and with aux weights W, aux adds aux W^T: at step 0 forwards, pre = x0 W^T + aux0 W^T + b
    (fw3, _) = _bidi(x, aux=aux, fw_aux=_W, bw_aux=_W, act=0)
    np.testing.assert_allclose(fw3[0, 0], [-1.0 + 2.0 + 0.25, 1.5 - 1.0 - 0.5])


def test_bidirectional_rules():
    x = [[[1.0, -1.0]]]
    with pytest.raises(ValidationError, match="merge_outputs"):  # merged, but two outputs
        _run(Op.BIDIRECTIONAL_SEQUENCE_RNN,
             [x, _W, _R, _B, [[0.0, 0.0]], _W, _R, _B, [[0.0, 0.0]], None, None, None, 0, False, True],
             [(1, 1, 2), (1, 1, 2)])
    with pytest.raises(ValidationError, match="aux"):  # aux weights without aux_input
        _bidi(x, fw_aux=_W, bw_aux=_W)


# ---------------------------------------------------------------------------------------
# SVDF


def test_svdf_by_hand():
    # 1 batch, 2 inputs, 2 units, rank 1 (2 filters), memory 3
    x = [[1.0, 2.0]]
    wf = [[1.0, 0.0], [1.0, -1.0]]  # new activations: [1, -1]
    wt = [[1.0, 2.0, 3.0], [0.5, 0.5, 1.0]]
    # state, per filter oldest first; the newest slot (9s) is never read
    state = [[4.0, 5.0, 9.0, -2.0, 2.0, 9.0]]
    # memory f0 = [4, 5, 1] . [1, 2, 3] = 17; f1 = [-2, 2, -1] . [0.5, 0.5, 1] = -1
    new_state, out = _run(Op.SVDF, [x, wf, wt, [0.5, 0.25], state, 1, 0], [(1, 6), (1, 2)])
    np.testing.assert_array_equal(out, [[17.5, -0.75]])
    np.testing.assert_array_equal(new_state, [[5.0, 1.0, 0.0, 2.0, -1.0, 0.0]])
    # rank 2: the two filters are one unit's, summed; no bias; RELU6
    _, out2 = _run(Op.SVDF, [x, wf, wt, None, state, 2, 3], [(1, 6), (1, 1)])
    np.testing.assert_array_equal(out2, [[6.0]])


def test_svdf_rank_must_divide_the_filters():
    with pytest.raises(ValidationError, match="rank"):
        _run(Op.SVDF, [[[1.0, 2.0]], [[1.0, 0.0], [1.0, -1.0]], [[1.0], [1.0]], None, [[0.0, 0.0]], 3, 0],
             [(1, 2), (1, 1)])


# ---------------------------------------------------------------------------------------
# Exporters and importer


_RECURRENT = (Op.RNN, Op.UNIDIRECTIONAL_SEQUENCE_RNN, Op.BIDIRECTIONAL_SEQUENCE_RNN, Op.SVDF)


@pytest.mark.parametrize("op", _RECURRENT, ids=lambda op: op.name)
def test_exporters_and_importer_round_trip(op):
    """One case of each operation (its form with the most outputs) through the LiteRT and
    ONNX Runtime exports, and the LiteRT export back through the TFLite importer: all agree
    with the golden."""
    pytest.importorskip("ai_edge_litert")
    ort = pytest.importorskip("onnxruntime")
    from ai_edge_litert.interpreter import Interpreter

    from nncert.drivers.litert.export import export as to_tflite
    from nncert.drivers.onnxruntime.export import export as to_onnx
    from nncert.mlts.tflite_import import import_tflite

    r = get(op)
    case = sample_case(r, r.signatures[-1], r.variants[0], seed=1)
    model, feeds = case.model("base")
    data = to_tflite(model)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    for d, f in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], f)
    it.invoke()
    results = {"litert": [it.get_tensor(d["index"]) for d in it.get_output_details()]}
    session = ort.InferenceSession(to_onnx(model).SerializeToString(), providers=["CPUExecutionProvider"])
    results["onnxruntime"] = session.run(None, {i.name: f for i, f in zip(session.get_inputs(), feeds,
                                                                            strict=True)})
    results["imported"] = run_model(import_tflite(data), feeds)
    for name, got in results.items():
        for want, have in zip(case.expected, got, strict=True):
            np.testing.assert_allclose(np.asarray(have, np.float64).reshape(want.shape), want,
                                       rtol=1e-5, atol=1e-5, err_msg=name)


def test_importer_streams_a_variable_rnn_state():
    """A file whose RNN reads its hidden state from a variable tensor (as converters write
    it) imports with that state as a HAL state input and output, and two chained executions
    match two LiteRT invocations."""
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert.interpreter import Interpreter

    from nncert.drivers.litert.export import Graph
    from nncert.mlts.tflite_import import import_report, import_tflite

    g = Graph()
    x = g.tensor([1, 2], "FLOAT32")
    h = g.tensor([1, 2], "FLOAT32", name="rnn_state")
    g.tensors[h].isVariable = True
    y = g.tensor([1, 2], "FLOAT32")
    f32 = np.float32
    g.op("RNN", [x, g.const(_W, f32), g.const(_R, f32), g.const(_B, f32), h], [y], "RNN",
         fusedActivationFunction=1)
    data = g.build([x], [y])
    (state,) = import_report(data).state
    model = import_tflite(data)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    carried = state.initial
    for xv in ([[1.0, -1.0]], [[0.0, 1.0]]):
        xv = np.asarray(xv, f32)
        it.set_tensor(it.get_input_details()[0]["index"], xv)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        out, carried = run_model(model, [xv, carried])
        np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_array_equal(out, [_seq_by_hand()[1]])
