"""Kernel tests of QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM: the fixed-point primitives against
values worked out by hand from their definitions, and whole cells against Android CTS's
examples (data, not code: the spec files' inputs and goldens)."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.ops import quantized_lstm as q
from nncert.ops.base import ShapeError
from nncert.ops.evaluate import evaluate
from nncert.testing.cases import context_for, sample_case


def test_rounding_divide_by_pot_rounds_half_away_from_zero():
    assert q.rdbpot([5, 6, 7, -5, -6, -7, 4, -4], 2).tolist() == [1, 2, 2, -1, -2, -2, 1, -1]
    assert q.rdbpot(np.array([2, -2]), 2).tolist() == [1, -1]  # 0.5 -> 1, -0.5 -> -1


def test_srdhm_int16_and_its_one_overflow():
    # 0.5 * 0.5 in Q0.15 = 0.25; -32768 * -32768 saturates to 32767
    assert q.srdhm(16384, 16384, 16).item() == 8192
    assert q.srdhm(-32768, -32768, 16).item() == 32767
    # 3 * 5 * 2 / 65536 rounds to 0; 181 * 181 = 32761 -> (32761 + 16384) // 32768 = 1
    assert q.srdhm(3, 5, 16).item() == 0
    assert q.srdhm(181, 181, 16).item() == 1
    assert q.srdhm(-181, 181, 16).item() == -1


def test_quantize_multiplier_and_multiply():
    assert q.quantize_multiplier(0.5) == (1 << 30, 0)
    assert q.quantize_multiplier(0.75) == (3 << 29, 0)
    assert q.quantize_multiplier(3.0) == (3 << 29, 2)
    # x * 0.75 = 75 for 100; 0.5 * 7 = 3.5 -> 4, but -3.5 -> -3: the doubling high multiply's
    # nudge for a negative product is 1 - 2^30, just under a half
    assert q.mul_by_multiplier(100, 3 << 29, 0).item() == 75
    assert q.mul_by_multiplier(np.array([7, -7]), 1 << 30, 0).tolist() == [4, -3]
    assert q.mul_by_multiplier(10, 3 << 29, 2).item() == 30


def test_saturating_shift_left():
    assert q.sat_mul_pot([1000, 8191, 8192, -8192, -8193], 2, 16).tolist() == [
        4000,
        32764,
        32767,
        -32768,
        -32768,
    ]


def test_logistic_and_tanh_fixed_points():
    # logistic(0) = 1/2 exactly (16384 in Q0.15), tanh(0) = 0, odd and complementary symmetry
    assert q.logistic(0, 3).item() == 16384
    assert q.tanh(0, 3).item() == 0
    a = np.array([4096, 12288, -4096, 32767])  # 1, 3, -1, ~8 in Q3.12
    lg = q.logistic(a, 3)
    assert lg[0] + lg[2] == 32767  # logistic(-x) = 1 - logistic(x) on the raw scale
    assert np.all(np.abs(lg / 32768 - 1 / (1 + np.exp(-a / 4096))) < 2e-4)
    th = q.tanh(a, 3)
    assert th[0] == -th[2]
    assert np.all(np.abs(th / 32768 - np.tanh(a / 4096)) < 4e-4)


def test_inverse_square_root_multiplier():
    for v in (4, 100, 12345, 1 << 28):
        m, s = q.inv_sqrt_multiplier(v)
        assert abs(m * 2.0 ** (s - 31) * np.sqrt(v) - 1) < 1e-6
    assert q.inv_sqrt_multiplier(1) == ((1 << 31) - 1, 0)


def test_layer_norm_of_constant_row_is_its_bias():
    # zero variance: the guard value; every normalised value is 0, so the output is the bias
    # term alone: round(bias / 1024) * scale * 2^12 -> 2048 * (2^-15 * 2^12) = 256
    out = q.layer_norm(
        np.array([[7, 7, 7, 7]], np.int64), np.full(4, 1000), np.full(4, 2048 * 1024), 2.0**-15
    )
    assert out.tolist() == [[256, 256, 256, 256]]


def _run(record, sig, bindings, vals, quants, dims, scalars):
    ins, raw = [], []
    for a in sig.inputs:
        t = a.resolve(bindings)
        if a.name in scalars:
            ins.append(Operand(t))
            raw.append(np.asarray(scalars[a.name], dtype=dtype_of(t)))
            continue
        v = vals.get(a.name)
        if v is None:
            ins.append(None)
            raw.append(None)
            continue
        ins.append(Operand(t, dims[a.name], *quants[a.name]))
        raw.append(np.asarray(v, dtype=dtype_of(t)).reshape(dims[a.name]))
    outs = [Operand(a.resolve(bindings), dims[a.name], *quants[a.name]) for a in sig.outputs]
    return evaluate(record, ins, raw, outs)


def test_quantized_16bit_lstm_matches_cts_example():
    """CTS quantized_lstm (batch 2, input 2, output 4): holds only with Android's concatenated
    product ([input, prev_output] x [recurrent | input weights])."""
    w = {
        "input_to_input": [146, 250, 235, 171, 10, 218, 171, 108],
        "input_to_forget": [24, 50, 132, 179, 158, 110, 3, 169],
        "input_to_cell": [133, 34, 29, 49, 206, 109, 54, 183],
        "input_to_output": [195, 187, 11, 99, 109, 10, 218, 48],
        "recurrent_to_input": [254, 206, 77, 168, 71, 20, 215, 6, 223, 7, 118, 225, 59, 130, 174, 26],
        "recurrent_to_forget": [137, 240, 103, 52, 68, 51, 237, 112, 0, 220, 89, 23, 69, 4, 207, 253],
        "recurrent_to_cell": [172, 60, 205, 65, 14, 0, 140, 168, 240, 223, 133, 56, 142, 64, 246, 216],
        "recurrent_to_output": [106, 214, 67, 23, 59, 158, 45, 3, 119, 132, 49, 205, 129, 218, 11, 98],
    }
    vals = {f"{k}_weights": v for k, v in w.items()}
    vals.update(
        input_gate_bias=[-7876, 13488, -726, 32839],
        forget_gate_bias=[9206, -46884, -11693, -38724],
        cell_gate_bias=[39481, 48624, 48976, -21419],
        output_gate_bias=[-58999, -17050, -41852, -40538],
        input=[166, 179, 50, 150],
        prev_cell_state=[876, 1034, 955, -909, 761, 1029, 796, -1036],
        prev_output=[136, 150, 140, 115, 135, 152, 138, 112],
    )
    ws = 0.00408021
    quants = {f"{k}_weights": (ws, 100) for k in w}
    quants.update({f"{g}_gate_bias": (ws / 128, 0) for g in q._GATES})
    quants.update(
        input=(1 / 128, 128),
        prev_output=(1 / 128, 128),
        output=(1 / 128, 128),
        prev_cell_state=(2.0**-11, 0),
        cell_state_out=(2.0**-11, 0),
    )
    dims = {f"input_to_{g}_weights": (4, 2) for g in q._GATES}
    dims.update({f"recurrent_to_{g}_weights": (4, 4) for g in q._GATES})
    dims.update({f"{g}_gate_bias": (4,) for g in q._GATES})
    dims.update(
        input=(2, 2), prev_cell_state=(2, 4), prev_output=(2, 4), cell_state_out=(2, 4), output=(2, 4)
    )
    cell, out = _run(q._Q16_RECORD, q._Q16_LSTM, {"T": T.TENSOR_QUANT8_ASYMM}, vals, quants, dims, {})
    assert cell.ravel().tolist() == [1485, 1177, 1373, -1023, 1019, 1355, 1097, -1235]
    assert out.ravel().tolist() == [140, 151, 146, 112, 136, 156, 142, 112]


_QLSTM_COMMON = dict(
    input_to_forget_weights=[
        -77,
        -13,
        38,
        25,
        115,
        -64,
        -25,
        -51,
        38,
        -102,
        -51,
        38,
        -64,
        -51,
        -77,
        38,
        -51,
        -77,
        -64,
        -64,
    ],
    input_to_cell_weights=[
        -51,
        -38,
        -25,
        -13,
        -64,
        64,
        -25,
        -38,
        -25,
        -77,
        77,
        -13,
        -51,
        -38,
        -89,
        89,
        -115,
        -64,
        102,
        77,
    ],
    input_to_output_weights=[
        -102,
        -51,
        -25,
        -115,
        -13,
        -89,
        38,
        -38,
        -102,
        -25,
        77,
        -25,
        51,
        -89,
        -38,
        -64,
        13,
        64,
        -77,
        -51,
    ],
    forget_gate_bias=[2147484, -6442451, -4294968, 2147484],
    cell_gate_bias=[-1073742, 15461883, 5368709, 1717987],
    output_gate_bias=[1073742, -214748, 4294968, 2147484],
    forget_layer_norm_weights=[6553, 6553, 13107, 9830],
    cell_layer_norm_weights=[22937, 6553, 9830, 26214],
    output_layer_norm_weights=[19660, 6553, 6553, 16384],
    input=[90, 102, 13, 26, 38, 102, 13, 26, 51, 64],
)
_QLSTM_SCALARS = dict(
    cell_clip=0.0,
    projection_clip=0.0,
    input_intermediate_scale=0.007059,
    forget_intermediate_scale=0.007812,
    cell_intermediate_scale=0.007059,
    output_intermediate_scale=0.007812,
    hidden_state_zero_point=0,
    hidden_state_scale=0.007,
)


def _qlstm(vals, output_size):
    quants = {f"{k}_to_{g}_weights": (0.00784314, 0) for k in ("input", "recurrent") for g in q._GATES}
    quants.update({f"{g}_gate_bias": (0.0, 0) for g in q._GATES})
    quants.update({f"{g}_layer_norm_weights": (3.05182e-05, 0) for g in q._GATES})
    state = (3.05176e-05, 0)
    quants.update(
        input=(0.0078125, 0),
        output_state_in=state,
        cell_state_in=state,
        output_state_out=state,
        cell_state_out=state,
        output=state,
        projection_weights=(0.00392157, 0),
        projection_bias=(0.0, 0),
    )
    dims = {}
    for g in q._GATES:
        dims.update(
            {
                f"input_to_{g}_weights": (4, 5),
                f"recurrent_to_{g}_weights": (4, output_size),
                f"{g}_gate_bias": (4,),
                f"{g}_layer_norm_weights": (4,),
            }
        )
    dims.update(
        input=(2, 5),
        output_state_in=(2, output_size),
        cell_state_in=(2, 4),
        projection_weights=(output_size, 4),
        projection_bias=(output_size,),
        output_state_out=(2, output_size),
        cell_state_out=(2, 4),
        output=(2, output_size),
    )
    return _run(
        q._QLSTM_RECORD, q._QLSTM, {"T": T.TENSOR_QUANT8_ASYMM_SIGNED}, vals, quants, dims, _QLSTM_SCALARS
    )


def test_quantized_lstm_cifg_layer_norm_matches_cts_example():
    vals = dict(
        _QLSTM_COMMON,
        recurrent_to_forget_weights=[-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25, 25, 38, -13, 51],
        recurrent_to_cell_weights=[-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25, 38, -13, 25, 64],
        recurrent_to_output_weights=[
            38,
            -13,
            13,
            -25,
            -64,
            -89,
            -25,
            -77,
            -13,
            -51,
            -89,
            -25,
            13,
            64,
            25,
            -38,
        ],
        output_state_in=[0] * 8,
        cell_state_in=[0] * 8,
    )
    out_state, cell, out = _qlstm(vals, 4)
    assert out_state.ravel().tolist() == [-15, 21, 14, 20, -15, 15, 5, 27]
    assert cell.ravel().tolist() == [-11692, 9960, 5491, 8861, -9422, 7726, 2056, 13149]
    assert out.tolist() == out_state.tolist()


def test_quantized_lstm_projection_layer_norm_matches_cts_example():
    vals = dict(
        _QLSTM_COMMON,
        input_to_input_weights=[
            64,
            77,
            89,
            -102,
            -115,
            13,
            25,
            38,
            -51,
            64,
            -102,
            89,
            -77,
            64,
            -51,
            -64,
            -51,
            -38,
            -25,
            -13,
        ],
        input_gate_bias=[644245, 3221226, 4724464, 8160438],
        recurrent_to_input_weights=[-25, -38, 51, 13, -64, 115, -25, -38, -89, 6, -25, -77],
        recurrent_to_forget_weights=[-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25],
        recurrent_to_cell_weights=[-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25],
        recurrent_to_output_weights=[38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25],
        projection_weights=[-25, 51, 3, -51, 25, 127, 77, 20, 18, 51, -102, 51],
        projection_bias=[0, 0, 0],
        input_layer_norm_weights=[3277, 6553, 9830, 16384],
        output_state_in=[0] * 6,
        cell_state_in=[0] * 8,
    )
    out_state, cell, _ = _qlstm(vals, 3)
    assert out_state.ravel().tolist() == [127, 127, -108, -67, 127, 127]
    assert cell.ravel().tolist() == [-14650, 8939, 5771, 6715, -11843, 7847, 1508, 12939]


@pytest.mark.parametrize("scale", [3e-5, 2.0**-8, 2.0**-16])
def test_quantized_lstm_cell_scale_must_be_a_power_of_two_in_range(scale):
    class _Ctx:
        def operand(self, name):
            return Operand(T.TENSOR_QUANT16_SYMM, (2, 4), scale, 0)

    with pytest.raises(ShapeError, match="power of two"):
        q._cell_shift(_Ctx())


# ---------------------------------------------------------------------------------------
# Validity as Android's: QLSTM's validate checks only types, its prepare only shapes and
# which optional groups are given; execute never reads the outputs' quantisation.


def _qlstm_case(seed=3):
    r = q._QLSTM_RECORD
    return sample_case(r, r.signatures[0], r.variants[0], seed=seed)


def test_quantized_lstm_outputs_may_declare_other_quantisation():
    """A model whose outputs declare scales and zero points unlike the state inputs' is valid
    (Android does not check them) and gives the same stored values: computed with the
    inputs' parameters, as Android's CPU implementation does."""
    import dataclasses

    from nncert.hal.validation import validate_model
    from nncert.ops.interpreter import run_model

    case = _qlstm_case()
    model, feeds = case.model()
    want = run_model(model, feeds)
    ops = model.main.operands
    out = model.main.operations[0].outputs
    for k, (scale, zp) in zip(out, [(0.5, 7), (2.0**-3, 0), (0.25, -9)], strict=True):
        assert (ops[k].scale, ops[k].zero_point) != (scale, zp)
        ops[k] = dataclasses.replace(ops[k], scale=scale, zero_point=zp)
    validate_model(model)
    got = run_model(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()


def _with_inputs(case, **changes):
    """The case's kernel context with inputs replaced (name: (operand, value) or None)."""
    import dataclasses

    inputs = []
    for ci in case.inputs:
        if ci.arg.name in changes:
            new = changes[ci.arg.name]
            ci = dataclasses.replace(ci, operand=None if new is None else new[0],
                                     value=None if new is None else new[1])
        inputs.append(ci)
    return context_for(dataclasses.replace(case, inputs=inputs))


def test_quantized_lstm_cifg_may_carry_unused_cell_to_input_weights():
    """With CIFG Android accepts cell_to_input_weights next to the other two peepholes (and
    ignores it), but not alone."""
    case = next(c for c in (_qlstm_case(s) for s in range(60))
                if not context_for(c).has("input_to_input_weights")
                and context_for(c).has("cell_to_forget_weights"))
    peep = next(ci for ci in case.inputs if ci.arg.name == "cell_to_forget_weights")
    ctx = _with_inputs(case, cell_to_input_weights=(peep.operand, peep.value))
    q._qlstm_sizes(ctx)
    want = q._qlstm_kernel(context_for(case))
    for g, w in zip(q._qlstm_kernel(ctx), want, strict=True):
        assert g.tolist() == w.tolist()
    alone = _with_inputs(case, cell_to_input_weights=(peep.operand, peep.value),
                         cell_to_forget_weights=None, cell_to_output_weights=None)
    with pytest.raises(ShapeError, match="peephole"):
        q._qlstm_sizes(alone)


@pytest.mark.parametrize("clip", [-1.0, float("nan")])
def test_quantized_lstm_negative_or_nan_clip_means_none(clip):
    """Android clips only when a clip is above 0: a negative or NaN clip is valid and off."""
    case = _qlstm_case()
    scalar = next(ci for ci in case.inputs if ci.arg.name == "cell_clip")
    ctx = _with_inputs(case, cell_clip=(scalar.operand, np.float32(clip)),
                       projection_clip=(scalar.operand, np.float32(clip)))
    q._qlstm_check(ctx)
    off = _with_inputs(case, cell_clip=(scalar.operand, np.float32(0)),
                       projection_clip=(scalar.operand, np.float32(0)))
    for g, w in zip(q._qlstm_kernel(ctx), q._qlstm_kernel(off), strict=True):
        assert g.tolist() == w.tolist()



def test_quantized_lstm_peephole_reaches_every_unit_with_a_projection():
    """The peephole is one weight per unit: with a projection to fewer outputs than units,
    the weights of the units past output_size count too. LiteRT's integer kernel adds only
    the first output_size peephole terms of each batch (nncert/drivers/litert/expectations.toml):
    with one batch, the same as zeroing the others' weights, which must change the cell state
    of this case (the saturating edge's first seed, where LiteRT is 4326 steps off)."""
    r = q._QLSTM_RECORD
    case = sample_case(r, r.signatures[0], r.variants[0], seed=0, edge="saturating")
    ctx = context_for(case)
    batches, _, units, outputs = q._qlstm_sizes(ctx)
    assert (batches, outputs) == (1, 1) and units > outputs and ctx.has("cell_to_forget_weights")
    changes = {}
    for g in ("input", "forget", "output"):
        ci = next(ci for ci in case.inputs if ci.arg.name == f"cell_to_{g}_weights")
        if ci.operand is not None:
            value = np.array(ci.value, copy=True)
            value[outputs:] = 0
            changes[ci.arg.name] = (ci.operand, value)
    full, cut = q._qlstm_kernel(ctx)[1], q._qlstm_kernel(_with_inputs(case, **changes))[1]
    assert full[0, :outputs].tolist() == cut[0, :outputs].tolist()
    assert np.abs(full.astype(int) - cut.astype(int)).max() > 1000
    assert full.tolist() == case.expected[1].tolist()


# ---------------------------------------------------------------------------------------
# TFLite: the LiteRT exporter's file imported back (nncert/mlts/mappings/quantized_lstm.py)


@pytest.mark.parametrize("op,seed", [("QUANTIZED_LSTM", s) for s in range(6)] +
                         [("QUANTIZED_16BIT_LSTM", s) for s in range(3)])
def test_tflite_round_trip(op, seed):
    """HAL -> .tflite (the integer LSTM, or the basic kernel with its one concatenated
    matrix) -> HAL gives the same stored values on the reference interpreter, bit for bit."""
    pytest.importorskip("ai_edge_litert")
    from nncert.drivers.litert.export import export
    from nncert.hal.validation import validate_model
    from nncert.mlts.tflite_import import import_tflite
    from nncert.ops.interpreter import run_model

    r = q._QLSTM_RECORD if op == "QUANTIZED_LSTM" else q._Q16_RECORD
    case = sample_case(r, r.signatures[0], r.variants[0], seed=seed)
    model, feeds = case.model()
    back = import_tflite(export(model))
    validate_model(back)
    assert [o.type.name for o in back.main.operations] == [op]
    for got, want in zip(run_model(back, feeds), run_model(model, feeds), strict=True):
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.reshape(want.shape).tolist() == want.tolist()


def test_basic_lstm_matrix_split_inverts_the_concatenation():
    rng = np.random.default_rng(0)
    n_in, n_out = 3, 2
    value = {f"{k}_to_{g}_weights": rng.integers(0, 255, (n_out, n_in if k == "input" else n_out))
             for k in ("input", "recurrent") for g in q._GATES}
    value.update({f"{g}_gate_bias": rng.integers(-99, 99, n_out) for g in q._GATES})
    w, b = q.basic_concatenate(value.__getitem__)
    assert w.shape == (4 * n_out, n_out + n_in)
    # the cell gate's block is the second, its recurrent weights the first columns
    assert w[n_out:2 * n_out, :n_out].tolist() == value["recurrent_to_cell_weights"].tolist()
    back = q.basic_split(w, b, n_out)
    assert {k: v.tolist() for k, v in back.items()} == {k: v.tolist() for k, v in value.items()}


def test_integer_lstm_with_variable_state_streams_as_litert_runs():
    """The converter's form (state in variable tensors, not model inputs or outputs) imports
    with the state as streaming state, starting where TFLite resets it (the int8 output
    state at its zero point): three executions, each state fed back, match three LiteRT
    invocations bit for bit."""
    pytest.importorskip("ai_edge_litert")
    import flatbuffers
    from ai_edge_litert.interpreter import Interpreter

    from nncert.drivers.litert.export import export, fb
    from nncert.mlts.tflite_import import import_report, import_tflite
    from nncert.ops.interpreter import run_model

    # seed 9: output state zero point -7, no peepholes; starting from 0 instead of the zero
    # point changes the first output by up to 4 steps
    case = _qlstm_case(9)
    assert context_for(case).operand("output_state_in").zero_point == -7
    assert not context_for(case).has("cell_to_forget_weights")
    model, feeds = case.model()
    m = fb.ModelT.InitFromPackedBuf(export(model), 0)
    sg = m.subgraphs[0]
    lstm = sg.operators[0]
    x_t, out_t = int(lstm.inputs[0]), int(lstm.outputs[0])
    sg.inputs, sg.outputs = [x_t], [out_t]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    data = bytes(b.Output())
    report = import_report(data)
    assert report.importable and len(report.state) == 2
    back = import_tflite(data)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    x_pos = next(i for i, ci in enumerate(ci for ci in case.inputs if ci.operand is not None and not ci.const)
                 if ci.arg.name == "input")
    rng = np.random.default_rng(5)
    state = [s.initial for s in sorted(report.state, key=lambda s: s.input_index)]
    assert state[0].tolist() == np.full_like(state[0], report.state[0].zero_point).tolist()
    for step in range(3):
        x = feeds[x_pos] if step == 0 else rng.integers(-128, 127, feeds[x_pos].shape).astype(np.int8)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        got = run_model(back, [x, *state])
        assert got[0].reshape(want.shape).tolist() == want.tolist(), f"execution {step}"
        state = [got[s.output_index] for s in sorted(report.state, key=lambda s: s.input_index)]
