"""The LSTM family's kernels against values worked out by hand (nncert/ops/lstm.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nncert.hal.types import OperationType as Op
from nncert.ops import get, lstm
from nncert.ops.base import ShapeError
from nncert.testing.cases import context_for, enumerate_cases, enumerate_edge_cases, sample_case

GATES = lstm.GATES


def _cell(n_cell: int = 1, n_input: int = 1, n_output: int | None = None, *, wx: float = 0.0, wh: float = 0.0,
          cifg: bool = False, **extra) -> lstm.Cell:
    n_output = n_cell if n_output is None else n_output
    skip = {"input"} if cifg else set()
    x = {g: None if g in skip else np.full((n_cell, n_input), wx) for g in GATES}
    h = {g: None if g in skip else np.full((n_cell, n_output), wh) for g in GATES}
    b = {g: None if g in skip else np.zeros(n_cell) for g in GATES}
    cell = lstm.Cell(n_input, n_cell, n_output, x, h, {"input": None, "forget": None, "output": None}, b,
                     dict.fromkeys(GATES), dict.fromkeys(GATES), None, None)
    for k, v in extra.items():
        setattr(cell, k, v)
    return cell


def test_one_step_by_hand():
    # Only the cell gate sees the input (weight 1): i = f = o = sigmoid(0) = 1/2, g = tanh(1).
    cell = _cell()
    cell.x = {g: np.array([[1.0 if g == "cell" else 0.0]]) for g in GATES}
    h, c = lstm.step(cell, np.array([[1.0]]), np.zeros((1, 1)), np.zeros((1, 1)), 4, 0.0, 0.0)
    assert c[0, 0] == pytest.approx(0.5 * math.tanh(1.0), abs=1e-15)
    assert h[0, 0] == pytest.approx(0.5 * math.tanh(0.5 * math.tanh(1.0)), abs=1e-15)


def test_forget_gate_keeps_old_cell_state():
    # C = f C_prev + i g with g = tanh(0) = 0: f = 1/2 halves the old state.
    h, c = lstm.step(_cell(), np.array([[0.3]]), np.zeros((1, 1)), np.array([[2.0]]), 4, 0.0, 0.0)
    assert c[0, 0] == pytest.approx(1.0, abs=1e-15)
    assert h[0, 0] == pytest.approx(0.5 * math.tanh(1.0), abs=1e-15)


def test_cifg_input_gate_is_one_minus_forget():
    # forget bias ln(3): f = 3/4, i = 1/4; cell bias atanh(0.8): g = 0.8.
    cell = _cell(cifg=True)
    cell.b["forget"] = np.array([math.log(3.0)])
    cell.b["cell"] = np.array([math.atanh(0.8)])
    _, c = lstm.step(cell, np.zeros((1, 1)), np.zeros((1, 1)), np.array([[1.0]]), 4, 0.0, 0.0)
    assert c[0, 0] == pytest.approx(0.75 * 1.0 + 0.25 * 0.8, abs=1e-15)


def test_peephole_and_cell_clip():
    # Peephole weights 2 on a cell state of 1: f = sigmoid(2); then the clip at 0.5.
    cell = _cell(cifg=True)
    cell.c = {"input": None, "forget": np.array([2.0]), "output": np.array([0.0])}
    _, c = lstm.step(cell, np.zeros((1, 1)), np.zeros((1, 1)), np.array([[1.0]]), 4, 0.0, 0.0)
    f = 1 / (1 + math.exp(-2.0))
    assert c[0, 0] == pytest.approx(f, abs=1e-15)
    _, clipped = lstm.step(cell, np.zeros((1, 1)), np.zeros((1, 1)), np.array([[1.0]]), 4, 0.5, 0.0)
    assert clipped[0, 0] == 0.5


def test_projection_bias_and_clip():
    # Zero weights: C = f C_prev = 1/2, m = o tanh(C) = tanh(1/2) / 2; projection 2 m + 1,
    # then clipped at 1.2.
    cell = _cell()
    cell.proj, cell.proj_bias = np.array([[2.0]]), np.array([1.0])
    h, _ = lstm.step(cell, np.zeros((1, 1)), np.zeros((1, 1)), np.array([[1.0]]), 4, 0.0, 0.0)
    assert h[0, 0] == pytest.approx(2 * 0.5 * math.tanh(0.5) + 1.0, abs=1e-15)
    h, _ = lstm.step(cell, np.zeros((1, 1)), np.zeros((1, 1)), np.array([[1.0]]), 4, 0.0, 1.2)
    assert h[0, 0] == 1.2


def test_layer_norm_rescales_then_adds_bias():
    # Two units, pre-activations [1, -1]: normalised [1, -1] / sqrt(1 + 1e-8), times the
    # weights [1, 2], plus the bias (after the norm) [0.5, 0].
    v = lstm.layer_norm(np.array([[1.0, -1.0]]))
    assert v[0] == pytest.approx([1 / math.sqrt(1 + 1e-8), -1 / math.sqrt(1 + 1e-8)], abs=1e-15)
    cell = _cell(2, 1)
    cell.x = {g: np.array([[1.0], [-1.0]]) for g in GATES}
    cell.ln = {g: np.array([1.0, 2.0]) for g in GATES}
    cell.b = {g: np.array([0.5, 0.0]) for g in GATES}
    _, c = lstm.step(cell, np.array([[1.0]]), np.zeros((1, 2)), np.zeros((1, 2)), 0, 0.0, 0.0)
    z = np.array([1.0, -2.0]) / math.sqrt(1 + 1e-8) + np.array([0.5, 0.0])
    i = 1 / (1 + np.exp(-z))
    assert c[0] == pytest.approx(i * z, abs=1e-15)  # activation none: g = z


@pytest.mark.parametrize(("act", "want"), [(0, -2.0), (1, 0.0), (3, 6.0), (4, math.tanh(-2.0)),
                                           (6, 1 / (1 + math.exp(2.0)))])
def test_activations(act, want):
    z = np.array([-2.0 if act != 3 else 7.0])
    assert lstm.activation(z, act)[0] == pytest.approx(want, abs=1e-15)


def test_sequence_time_major_and_reverse():
    # A sequence is the step repeated with the state carried; reversed, the last input first.
    cell = _cell(1, 1, wx=1.0, wh=0.5)
    xs = np.array([[[0.2]], [[-0.7]]])
    h0, c0 = np.array([[0.1]]), np.array([[0.3]])
    out, h, c = lstm.sequence(cell, xs, h0, c0, 4, 0.0, 0.0)
    h1, c1 = lstm.step(cell, xs[0], h0, c0, 4, 0.0, 0.0)
    h2, c2 = lstm.step(cell, xs[1], h1, c1, 4, 0.0, 0.0)
    assert out[:, 0, 0].tolist() == [h1[0, 0], h2[0, 0]] and h[0, 0] == h2[0, 0] and c[0, 0] == c2[0, 0]
    back, _, _ = lstm.sequence(cell, xs, h0, c0, 4, 0.0, 0.0, reverse=True)
    b1, s1 = lstm.step(cell, xs[1], h0, c0, 4, 0.0, 0.0)
    b0, _ = lstm.step(cell, xs[0], b1, s1, 4, 0.0, 0.0)
    assert back[:, 0, 0].tolist() == [b0[0, 0], b1[0, 0]]


def _cases(name):
    record = get(getattr(Op, name))
    return [sample_case(*k) for k in enumerate_cases() if k[0] is record]


def test_lstm_scratch_buffer_shape_follows_cifg():
    for case in _cases("LSTM"):
        ctx = context_for(case)
        n_cell = ctx.dims("input_to_output_weights")[0]
        gates = 3 if not ctx.has("input_to_input_weights") else 4
        assert case.outputs[0].dimensions == (ctx.dims("input")[0], gates * n_cell)
        np.testing.assert_array_equal(case.expected[1], case.expected[3])  # output = output state


def test_lstm_compare_ignores_scratch_contents_not_the_states():
    case = _cases("LSTM")[0]
    ctx = context_for(case)
    actual = [a.copy() for a in case.expected]
    actual[0][...] = 7  # implementation-defined
    assert case.record.compare(ctx, case.expected, actual, False) == []
    actual[2] = actual[2] + np.float32(0.01)
    assert case.record.compare(ctx, case.expected, actual, False)


def test_sequence_ops_match_stepped_lstm():
    # UNIDIRECTIONAL_SEQUENCE_LSTM's last output is the state output; the forward half of a
    # merged BIDIRECTIONAL_SEQUENCE_LSTM output is the forward sequence.
    for case in _cases("UNIDIRECTIONAL_SEQUENCE_LSTM"):
        if case.signature.name == "states":
            ctx = context_for(case)
            last = case.expected[0][-1] if ctx.value("time_major") else case.expected[0][:, -1]
            np.testing.assert_array_equal(last, case.expected[1])


def test_sampler_draws_every_optional_group():
    seen = set()
    for name in ("LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"):
        for case in _cases(name):
            ctx = context_for(case)
            p = "fw_" if name.startswith("BI") else ""
            seen |= {("cifg", not ctx.has(p + "input_to_input_weights")),
                     ("peephole", ctx.has(p + "cell_to_forget_weights")),
                     ("projection", ctx.has(p + "projection_weights")),
                     ("layer_norm", ctx.has(p + "forget_layer_norm_weights"))}
    assert {(g, v) for g in ("cifg", "peephole", "projection", "layer_norm") for v in (True, False)} <= seen


def test_edges_are_at_their_edge():
    for key in enumerate_edge_cases():
        if key[0].type not in (Op.LSTM, Op.UNIDIRECTIONAL_SEQUENCE_LSTM):
            continue
        case = sample_case(*key)
        ctx = context_for(case)
        if key[6] == "cell_clip":
            c = case.expected[2] if key[0].type is Op.LSTM else None
            if c is not None:
                assert np.all(np.abs(c.astype(np.float64)) == np.float64(np.asarray(0.25, c.dtype)))
        elif key[6] == "proj_clip":
            h = case.expected[1] if key[0].type is Op.LSTM else case.expected[0]
            assert np.all(np.abs(h.astype(np.float64)) == np.float64(np.asarray(0.2, h.dtype)))
        assert float(ctx.value("cell_clip")) >= 0


@pytest.mark.parametrize(("drop", "message"), [
    ("cell_to_output_weights", "peephole"),
    ("recurrent_to_input_weights", "input gate"),
])
def test_partial_groups_are_invalid(drop, message):
    full = [c for c in _cases("UNIDIRECTIONAL_SEQUENCE_LSTM") if context_for(c).has("cell_to_forget_weights")
            and context_for(c).has("input_to_input_weights")]
    case = full[0]
    ctx = context_for(case)
    pos = ctx.positions(drop)[0]
    ctx.inputs[pos] = None
    with pytest.raises(ShapeError, match=message):
        case.record.check(ctx)


def test_activation_2_is_invalid():
    case = _cases("LSTM")[0]
    ctx = context_for(case)
    ctx._values[ctx.positions("activation")[0]] = 2
    with pytest.raises(ShapeError, match="activation 2"):
        case.record.check(ctx)


# ---------------------------------------------------------------------------------------
# Exports (nncert/drivers/onnxruntime/mappings/lstm.py, nncert/drivers/litert/mappings/lstm.py)


def _float32_cases(name, seeds=range(12)):
    """float32 cases of every signature of ``name`` over ``seeds``, with their contexts."""
    record = get(getattr(Op, name))
    var = next(v for v in record.variants if v.label == "float32")
    for sig in record.signatures:
        for seed in seeds:
            case = sample_case(record, sig, var, seed=seed)
            yield case, context_for(case)


def _sizes(ctx, p):
    return ctx.dims(p + "input_to_output_weights"), ctx.dims(p + "recurrent_to_output_weights")


def _features(name, ctx):
    p = "fw_" if name.startswith("BI") else ""
    got = {"cifg": not ctx.has(p + "input_to_input_weights"),
           "peephole": ctx.has(p + "cell_to_forget_weights"),
           "projection": ctx.has(p + "projection_weights"),
           "layer_norm": ctx.has(p + "forget_layer_norm_weights"),
           "sigmoid": int(ctx.value("activation")) == 6, "cell_clip": float(ctx.value("cell_clip")) > 0}
    if name != "LSTM":
        got["batch_major"] = not ctx.value("time_major")
    if p:
        link = "none" if not ctx.has("aux_input") else \
            "cross" if ctx.has("fw_aux_input_to_forget_weights") else "parallel"
        got[link] = True
        got["merged"] = bool(ctx.value("merge_outputs"))
        got["unequal_cells"] = _sizes(ctx, "fw_") != _sizes(ctx, "bw_")
    return {k for k, v in got.items() if v}


@pytest.mark.parametrize("name", ["LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"])
def test_onnx_export_matches_reference_for_every_option(name):
    """The unrolled ONNX composition on ONNX Runtime agrees with the float64 kernel to float32
    rounding on float32 cases covering every option group (checked to be covered)."""
    ort = pytest.importorskip("onnxruntime")
    from nncert.drivers.onnxruntime.export import export as to_onnx

    seen = set()
    for case, ctx in _float32_cases(name, range(20 if name == "LSTM" else 12)):
        seen |= _features(name, ctx)
        model, feeds = case.model()
        session = ort.InferenceSession(to_onnx(model).SerializeToString(), providers=["CPUExecutionProvider"])
        got = session.run(None, {i.name: f for i, f in zip(session.get_inputs(), feeds, strict=True)})
        for k, (want, have) in enumerate(zip(case.expected, got, strict=True)):
            assert have.shape == want.shape, (case.id, k)
            if name == "LSTM" and k == 0:
                continue  # the scratch buffer: implementation-defined content
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5, err_msg=f"{case.id} output {k}")
    want = {"cifg", "peephole", "projection", "layer_norm", "sigmoid", "cell_clip"}
    if name != "LSTM":
        want.add("batch_major")
    if name.startswith("BI"):
        want |= {"cross", "parallel", "merged", "unequal_cells"}
    assert want <= seen, f"not drawn: {sorted(want - seen)}"


def test_litert_bidirectional_native_and_two_cells_match_reference():
    """BIDIRECTIONAL_SEQUENCE_LSTM on LiteRT: TFLite's own operator where it takes the
    instance (equal cells, no layer norm), two UNIDIRECTIONAL_SEQUENCE_LSTMs otherwise; both
    agree with the kernel (activations other than NONE, where LiteRT has a known defect, and
    sigmoid, which TFLite lacks); and the TFLite importer brings either form back to the same
    results."""
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert.interpreter import Interpreter

    from nncert.drivers.litert.export import export as to_tflite
    from nncert.mlts.tflite_import import import_tflite
    from nncert.ops.interpreter import run_model

    forms = set()
    for case, ctx in _float32_cases("BIDIRECTIONAL_SEQUENCE_LSTM"):
        if int(ctx.value("activation")) in (0, 6):
            continue
        model, feeds = case.model()
        data = to_tflite(model)
        it = Interpreter(model_content=data)
        it.allocate_tensors()
        ops = {d["op_name"] for d in it._get_ops_details()}
        native = "BIDIRECTIONAL_SEQUENCE_LSTM" in ops
        assert native or ops >= {"UNIDIRECTIONAL_SEQUENCE_LSTM", "REVERSE_V2"}, ops
        same = _sizes(ctx, "fw_") == _sizes(ctx, "bw_")
        assert native == (not ctx.has("fw_forget_layer_norm_weights") and same
                          and (not ctx.has("aux_input") or ctx.has("fw_aux_input_to_forget_weights")
                               or ctx.dims("aux_input") == ctx.dims("input")))
        forms.add(native)
        for d, f in zip(it.get_input_details(), feeds, strict=True):
            it.set_tensor(d["index"], f)
        it.invoke()
        got = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        back = run_model(import_tflite(data), feeds)
        for k, want in enumerate(case.expected):
            np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-5, err_msg=f"{case.id} output {k}")
            np.testing.assert_allclose(back[k], want, rtol=1e-4, atol=1e-5, err_msg=f"{case.id} imported {k}")
    assert forms == {True, False}
