"""The catalogue's own consistency: every record samples valid cases whose kernel output
agrees with the shape rule, in every variant, layout and activation; and every edge case it
declares is valid, reproducible and really at its edge."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from nncert.hal.types import FusedActivationFunc, OperandType, OperationType
from nncert.hal.validation import validate_model
from nncert.ops import edges, records
from nncert.ops.base import ACTIVATION_RANGE
from nncert.ops.elementwise import broadcast_pair_shape
from nncert.ops.interpreter import run_model
from nncert.testing.cases import case_id, context_for, enumerate_cases, enumerate_edge_cases, sample_case

T = OperandType
QUANT8 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM)

KEYS = list(enumerate_cases(seeds=(0,)))


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("key", KEYS, ids=lambda k: sample_case.__name__ and
                         "-".join(str(x) for x in (k[0].name, k[1].name, k[2].label, k[3], k[4])))
def test_record_samples_valid_cases(key):
    case = sample_case(*key)
    for variation in ("base", "all_tensors_as_inputs", "inputs_as_internal", "dynamic_output"):
        if not case.supports(variation):
            continue
        model, feeds = case.model(variation)
        validate_model(model)
        got = run_model(model, feeds)
        for g, e in zip(got, case.expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("record", records(), ids=lambda r: r.name)
def test_record_declares_versions_and_docs(record):
    assert record.doc, f"{record.name} needs a one-line doc"
    for v in record.variants:
        assert v.version >= record.type.version, f"{record.name} {v.label} predates the operation"


# ---------------------------------------------------------------------------------------
# Edge cases (nncert/ops/edges.py): valid, reproducible, really at their edge, and declared
# by every record the families are for.

EDGE_KEYS = list(enumerate_edge_cases())


@functools.cache
def _edge_case(key):
    return sample_case(*key)


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("record", [r for r in records() if any(k[0] is r for k in EDGE_KEYS)],
                         ids=lambda r: r.name)
def test_edge_cases_are_valid_and_reproducible(record):
    for key in (k for k in EDGE_KEYS if k[0] is record):
        case = _edge_case(key)
        assert case.id == case_id(*key) and f"-edge_{key[6]}-s{key[5]}" in case.id
        model, feeds = case.model()
        validate_model(model)
        for got, want in zip(run_model(model, feeds), case.expected, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape, case.id
            np.testing.assert_array_equal(got, want, err_msg=case.id)
        again = sample_case(*key)
        for a, b in zip(again.inputs, case.inputs, strict=True):
            assert a.operand == b.operand, case.id
            if a.operand is not None:
                np.testing.assert_array_equal(a.value, b.value, err_msg=case.id)


def _edge_names(record, sig, var_) -> set[str]:
    return {e.name for e in edges.edges_of(record, sig, var_)}


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("record", records(), ids=lambda r: r.name)
def test_edge_families_cover_their_records(record):
    """Saturation for every fused activation, extreme quantisation for every quantised
    variant, long reductions for the reductions and accumulating operations, length-1 axes
    and broadcast corners where there is an axis or a broadcast, window borders for every
    windowed operation."""
    for sig in record.signatures:
        for var_ in record.variants:
            names = _edge_names(record, sig, var_)
            out = sig.outputs[0].resolve(var_.types)
            if record.activation and out is not T.TENSOR_INT32:
                want = {"saturate_relu1", "saturate_relu6"}
                assert want <= names, f"{record.name} {var_.label}: {sorted(want - names)}"
            quant_in = [a.resolve(var_.types) for a in sig.inputs if a.resolve(var_.types) in QUANT8]
            if record.dequantize and quant_in:
                want = {"quant_scale_tiny", "quant_scale_ratio", "quant_scale_one", "quant_scale_large"}
                if record.type is OperationType.MUL:
                    want.remove("quant_scale_one")  # its output scale must exceed the inputs' product
                if record.type is OperationType.GENERATE_PROPOSALS:
                    want -= {"quant_scale_one", "quant_scale_large"}  # box sizes are exponents of deltas
                if any(t is not T.TENSOR_QUANT8_SYMM for t in quant_in):
                    want.add("quant_zero_point_min")
                assert want <= names, f"{record.name} {var_.label}: {sorted(want - names)}"
            if record.shape is broadcast_pair_shape or record.type is OperationType.PRELU:
                assert {e.name for e in edges.BROADCAST} <= names
            if record.layout and record.activation and record.type is not OperationType.TRANSPOSE_CONV_2D:
                assert {"window_stride_over_filter", "window_filter_covers_input", "window_same_odd"} <= names
    if record.type in LONG:
        assert any("long_reduction" in _edge_names(record, sig, v)
                   for sig in record.signatures for v in record.variants)


LONG = {OperationType.MEAN, OperationType.REDUCE_SUM, OperationType.REDUCE_MAX, OperationType.REDUCE_MIN,
        OperationType.REDUCE_ANY, OperationType.REDUCE_ALL, OperationType.ARGMAX, OperationType.ARGMIN,
        OperationType.SOFTMAX, OperationType.LOG_SOFTMAX, OperationType.L2_NORMALIZATION,
        OperationType.FULLY_CONNECTED, OperationType.CONV_2D}


def _cases_of(edge: str) -> list:
    return [_edge_case(k) for k in EDGE_KEYS if k[6] == edge]


@pytest.mark.req("ACC-6")
@pytest.mark.parametrize("act", ["relu", "relu1", "relu6"])
def test_saturating_edges_cross_the_bounds(act):
    lo, hi = ACTIVATION_RANGE[FusedActivationFunc[act.upper()]]
    both = 0
    cases = _cases_of(f"saturate_{act}")
    for case in cases:
        pre = case.notes["pre_activation"]
        assert (pre > hi).any() if hi != math.inf else (pre < lo).any(), case.id
        both += bool((pre < lo).any() and ((pre > hi).any() or hi == math.inf))
        out = case.outputs[0]
        if out.type.is_quant:  # the output can hold what the clamp removes
            qlo, qhi = out.type.quant_range
            if (pre > hi).any():
                assert (qhi - out.zero_point) * out.scale > hi, case.id
            if (pre < lo).any():
                assert (qlo - out.zero_point) * out.scale < lo, case.id
    assert both >= 0.9 * len(cases)


@pytest.mark.req("ACC-6")
def test_long_reductions_are_long():
    for case in _cases_of("long_reduction"):
        assert max(int(np.prod(ci.operand.dimensions)) for ci in case.inputs
                   if ci.operand is not None and ci.operand.type.is_tensor) >= 4096, case.id


@pytest.mark.req("ACC-2")
@pytest.mark.parametrize("edge", ["quant_zero_point_min", "quant_zero_point_max"])
def test_quant_edges_put_zero_points_at_the_extremes(edge):
    for case in _cases_of(edge):
        extremes = [ci.operand for ci in case.inputs if ci.operand is not None and ci.operand.type in QUANT8
                    and ci.operand.channel_quant is None]
        for o in extremes:
            lo, hi = o.type.quant_range
            assert o.zero_point == (lo if edge.endswith("min") else hi), case.id


@pytest.mark.req("ACC-2")
def test_quant_scale_edges_reach_scales_and_ratios():
    for case in _cases_of("quant_scale_tiny"):
        for ci in case.inputs:
            if ci.operand is not None and ci.operand.type in QUANT8 and ci.operand.channel_quant is None:
                assert ci.operand.scale < 6.1e-5, case.id  # below float16's normal range
    ratios = [ci.operand.scale / case.outputs[0].scale for case in _cases_of("quant_scale_ratio")
              for ci in case.inputs if ci.operand is not None and ci.operand.type in QUANT8
              and ci.operand.channel_quant is None and case.outputs[0].type.is_quant]
    assert max(ratios) > 50 and min(ratios) < 0.02
    ones = _cases_of("quant_scale_one")
    for case in ones:
        for ci in case.inputs:
            if ci.operand is not None and ci.operand.type in QUANT8 and ci.operand.channel_quant is None:
                assert ci.operand.scale == 1.0, case.id
    # free outputs too (a fixed one, as LOGISTIC's 1/256, keeps its own)
    assert sum(o.scale == 1.0 for case in ones for o in case.outputs if o.type in QUANT8) > 0.8 * len(ones)
    for case in _cases_of("quant_scale_large"):
        for ci in case.inputs:
            if ci.operand is not None and ci.operand.type in QUANT8 and ci.operand.channel_quant is None:
                assert 64 <= ci.operand.scale <= 1024, case.id


@pytest.mark.req("ACC-2")
def test_scale_over_output_edge_keeps_the_large_ratio_to_cancel():
    """ADD and SUB, each 8-bit type: one input's scale 2**16..2**18.5 times the output's (below
    the 2**19 Android's rescaling takes), its values at or one step off a zero point near the
    top, the other's scale 4/3 of the output's; and the output not saturated everywhere."""
    cases = _cases_of("quant_scale_over_output")
    assert sorted(f"{c.record.name}-{c.variant.label}" for c in cases) == [
        "ADD-quant8_asymm", "ADD-quant8_asymm_signed", "SUB-quant8_asymm", "SUB-quant8_asymm_signed"]
    for case in cases:
        out = case.outputs[0]
        small, big = sorted((ci for ci in case.inputs[:2]), key=lambda ci: ci.operand.scale)
        assert 2.0**16 * 0.999 <= big.operand.scale / out.scale <= 2.0**18.5 * 1.001, case.id
        assert small.operand.scale / out.scale == pytest.approx(4 / 3, rel=1e-6), case.id
        hi = big.operand.type.quant_range[1]
        assert hi - 24 <= big.operand.zero_point < hi, case.id
        step = np.asarray(big.value, np.int64) - big.operand.zero_point
        assert set(np.unique(step)) <= {-1, 0, 1} and (step == 0).mean() > 0.5, case.id
        expected = np.asarray(case.expected[0], np.int64)
        inside = (expected > out.type.quant_range[0]) & (expected < out.type.quant_range[1])
        assert inside.sum() >= 2, case.id


@pytest.mark.req("ACC-6")
def test_broadcast_corners():
    for case in _cases_of("broadcast_complementary"):
        shapes = [ci.operand.dimensions for ci in case.inputs[:2]]
        assert all(s != case.outputs[0].dimensions for s in shapes), case.id
    for case in _cases_of("broadcast_one_element"):
        assert (1,) in [ci.operand.dimensions for ci in case.inputs[:2]], case.id


@pytest.mark.req("ACC-6")
def test_window_edges_reach_the_border():
    for case in _cases_of("window_stride_over_filter"):
        ctx = context_for(case)
        assert min(int(ctx.value("stride_h")), int(ctx.value("stride_w"))) >= 4, case.id
    for case in _cases_of("window_filter_covers_input"):
        assert case.outputs[0].dimensions[1:3] == (1, 1), case.id


@pytest.mark.req("ACC-6")
def test_length_1_axes():
    for case in _cases_of("axis_of_1"):
        ctx = context_for(case)
        dims = ctx.dims("input")
        axes = ctx.value("axes") if ctx.has("axes") else ctx.value("axis")
        assert all(dims[int(a) % len(dims)] == 1 for a in np.asarray(axes).reshape(-1)), case.id


def _data_inputs(case, kind=None):
    return [ci for ci in case.inputs if ci.operand is not None and ci.operand.type.is_tensor
            and (kind is None or ci.operand.type is kind)]


@pytest.mark.req("ACC-3")
def test_int32_wide_edge_passes_float32s_significand():
    """Every int32_wide case holds data past 2^24 (where float32 stops holding every integer),
    and its golden stays within int32 (no overflow, which NNAPI leaves open)."""
    cases = _cases_of("int32_wide")
    assert len({c.record.name for c in cases}) >= 29
    for case in cases:
        data = [ci.value for ci in case.inputs if ci.arg.type == "T" and ci.value is not None]
        assert max(int(np.abs(np.asarray(v, np.int64)).max()) for v in data) > 2**24, case.id
        assert all(np.asarray(v).dtype == np.int32 for v in data), case.id


@pytest.mark.req("ACC-2")
def test_multiplier_and_bias_edges_reach_their_ranges():
    for case in _cases_of("quant_multiplier_above_one"):
        ins = {ci.arg.name: ci.operand for ci in case.inputs}
        f = ins.get("filter") or ins["weights"]
        fs = min(f.channel_quant.scales) if f.channel_quant else f.scale
        assert ins["input"].scale * fs / case.outputs[0].scale > 2, case.id
    for case in _cases_of("quant_bias_wide"):
        bias = next(ci.value for ci in case.inputs if ci.arg.name == "bias")
        assert np.abs(np.asarray(bias, np.int64)).min() >= 2**16, case.id


@pytest.mark.req("ACC-1")
def test_float16_wide_edge_overflows_float16_on_the_way():
    """Squares pass 65504 (for MEAN and AVERAGE_POOL_2D, sums of four); the golden does not."""
    cases = _cases_of("float16_wide")
    assert {c.record.name for c in cases} >= {"L2_NORMALIZATION", "INSTANCE_NORMALIZATION", "MEAN",
                                              "AVERAGE_POOL_2D", "L2_POOL_2D", "LOCAL_RESPONSE_NORMALIZATION"}
    for case in cases:
        x = np.abs(np.asarray(case.inputs[0].value, np.float64))
        summed = case.record.name in ("MEAN", "AVERAGE_POOL_2D")
        assert (4 * x.min() if summed else x.max() ** 2) > 65504, case.id
        assert np.isfinite(case.expected[0]).all() and np.abs(case.expected[0]).max() <= 65504, case.id


@pytest.mark.req("ACC-1")
def test_own_range_edges_reach_their_ranges():
    imax, imin = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    for case in _cases_of("int32_bounds"):
        bounds = np.concatenate([np.asarray(ci.value).reshape(-1) for ci in case.inputs
                                 if ci.arg.name in ("begin", "end")])
        assert ((bounds == imax) | (bounds == imin)).any(), case.id
    for case in _cases_of("wide_keys"):
        keys = np.asarray(next(ci.value for ci in case.inputs if ci.arg.name == "keys"))
        assert len(set(keys.tolist())) == keys.size > len(set(keys.astype(np.float32).tolist())), case.id
    for case in _cases_of("wide_output"):
        assert case.outputs[0].dimensions[2] > 2048 or case.outputs[0].dimensions[3] > 2048, case.id
    for case in _cases_of("long_table"):
        lookups = np.asarray(next(ci.value for ci in case.inputs if ci.arg.name == "lookups"))
        assert (lookups >= 2**16).sum() >= 3, case.id
    cases = _cases_of("long_axis")
    assert {c.record.name for c in cases} == {"GATHER", "TOPK_V2", "CONCATENATION"}
    for case in cases:
        if case.record.name == "TOPK_V2":  # all but one returned index past 16 bits
            idx = np.asarray(case.expected[1])
            assert ((idx >= 2**16).sum(axis=-1) == idx.shape[-1] - 1).all(), case.id
        elif case.record.name == "CONCATENATION":  # inputs after the first start past 16 bits
            axis = int(next(ci.value for ci in case.inputs if ci.arg.name == "axis"))
            first = next(ci for ci in case.inputs if ci.arg.name == "input")
            assert first.operand.dimensions[axis] > 2**16, case.id


@pytest.mark.req("ACC-1")
def test_float_wide_edge_reaches_past_the_narrow_ranges():
    """Every float_wide case holds a value at its type's largest finite magnitude or past 2^31
    (float16: 32768), and nothing within 1e5 (float16: 100) of zero; the golden is finite.
    A row that is all one sign stays so (REDUCE_MAX, MAX_POOL_2D, ARGMAX all negative)."""
    cases = _cases_of("float_wide")
    assert {c.record.name for c in cases} >= {"REDUCE_MAX", "REDUCE_MIN", "MAX_POOL_2D", "ARGMAX", "ARGMIN",
                                              "MAXIMUM", "MINIMUM", "ABS", "NEG", "FLOOR", "RELU"}
    for case in cases:
        data = [ci for ci in _data_inputs(case) if ci.operand.type.is_float]
        half = data[0].operand.type is OperandType.TENSOR_FLOAT16
        lo, past = (100.0, 32768.0) if half else (1e5, 2.0**31)
        x = np.concatenate([np.abs(np.asarray(ci.value, np.float64)).reshape(-1) for ci in data])
        assert x.min() >= lo * (1 - 1e-3) and x.max() >= past, case.id
        assert np.isfinite(np.asarray(case.expected[0], np.float64)).all(), case.id
        if case.record.name in ("REDUCE_MAX", "MAX_POOL_2D", "ARGMAX"):
            assert (np.asarray(data[0].value) < 0).all(), case.id
        if case.record.name in ("REDUCE_MIN", "ARGMIN"):
            assert (np.asarray(data[0].value) > 0).all(), case.id


@pytest.mark.req("ACC-1")
def test_long_sequence_edge_passes_8_bits():
    """Every long_sequence case runs 257..300 time steps (the axis time_major names), on all
    four sequence operations, and its last steps' outputs are not all zero (the recurrence
    still moves there, so steps a driver never wrote show)."""
    cases = _cases_of("long_sequence")
    assert {c.record.name for c in cases} == {"UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN",
                                              "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"}
    lo, hi = edges.LONG_SEQUENCE
    for case in cases:
        ins = {ci.arg.name: ci for ci in case.inputs}
        axis = 0 if int(np.asarray(ins["time_major"].value)) else 1
        steps = ins["input"].operand.dimensions[axis]
        assert 256 < lo <= steps <= hi, case.id
        out = np.asarray(case.expected[0], np.float64)
        assert np.abs(np.take(out, range(256, steps), axis=axis)).max() > 0, case.id


@pytest.mark.req("ACC-1")
def test_batch_major_twins_edge_is_one_kernel_over_several_batches():
    """Every batch_major_twins case is batch-major with 2 or 3 batches, both cells of one size
    and no layer normalisation (what a runtime runs as one bidirectional kernel), activation
    tanh, and batch 1's outputs differ from batch 0's (the rows a misplaced state would mix)."""
    cases = _cases_of("batch_major_twins")
    assert {c.signature.name for c in cases} == {"", "merged", "states", "merged_states"}
    for case in cases:
        ins = {ci.arg.name: ci for ci in case.inputs}
        assert not int(np.asarray(ins["time_major"].value)) and int(np.asarray(ins["activation"].value)) == 4
        assert 2 <= ins["input"].operand.dimensions[0] <= 3, case.id
        for w in ("input_to_output_weights", "recurrent_to_output_weights"):
            assert ins[f"fw_{w}"].operand.dimensions == ins[f"bw_{w}"].operand.dimensions, case.id
        norms = [ins.get(f"{d}_forget_layer_norm_weights") for d in ("fw", "bw")]
        assert all(ci is None or ci.value is None for ci in norms), case.id
        out = np.asarray(case.expected[0], np.float64)
        assert not np.allclose(out[0], out[1]), case.id


_BATCHED = {"CONV_2D", "DEPTHWISE_CONV_2D", "GROUPED_CONV_2D", "TRANSPOSE_CONV_2D", "FULLY_CONNECTED",
            "BATCH_MATMUL", "AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"}


@pytest.mark.req("ACC-1")
def test_count_past_255_edge_passes_8_bits():
    """TILE's multiple, PAD's leading padding, SLICE's begin and TOPK_V2's returned index each
    reach 256 or more in every count_past_255 case (the samplers' stay below 8); the batched
    operations' batch does, and the filtered ones' output channels (each per-channel filter
    with a scale per channel, not all equal)."""
    cases = _cases_of("count_past_255")
    assert {c.record.name for c in cases} == {"TILE", "PAD", "PAD_V2", "SLICE", "TOPK_V2"} | _BATCHED
    for case in cases:
        ins = {ci.arg.name: np.asarray(ci.value) for ci in case.inputs if ci.value is not None}
        name = case.record.name
        if name in _BATCHED:
            dims = case.outputs[0].dimensions
            assert dims[0] > 256, case.id
            if name != "BATCH_MATMUL" and "POOL" not in name:  # NHWC or NCHW
                assert max(dims[1:]) > 256, case.id
            f = next((ci.operand for ci in case.inputs if ci.operand is not None and
                      ci.operand.channel_quant is not None), None)
            if f is not None:
                scales = np.asarray(f.channel_quant.scales)
                assert scales.size > 256 and np.unique(scales).size > 256, case.id
        elif name == "TILE":
            assert ins["multiples"].max() >= 256, case.id
        elif name in ("PAD", "PAD_V2"):
            assert ins["paddings"][:, 0].max() >= 256, case.id
        elif name == "SLICE":
            assert ins["begin"].max() >= 256, case.id
        else:
            assert np.asarray(case.expected[1]).max() >= 256, case.id
