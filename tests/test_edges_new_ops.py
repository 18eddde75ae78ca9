"""The rules the edges of FILL, RANK, BATCH_MATMUL, PACK, MIRROR_PAD, REVERSE and
AXIS_ALIGNED_BBOX_TRANSFORM pin, by hand, and that each edge's draws really are at it
(tests/test_catalogue.py checks them all for validity and reproducibility)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.ops import get
from nncert.ops.base import to_real
from nncert.ops.detection import DETECTRON_DELTA_CLIP
from nncert.ops.evaluate import evaluate, output_shapes
from nncert.ops.tensor import LONG_INNER
from nncert.testing.cases import enumerate_edge_cases, sample_case

F32 = T.TENSOR_FLOAT32


def _run(op, inputs, out_type):
    ops = [Operand(t, np.shape(v)) if t.is_tensor else Operand(t) for t, v in inputs]
    raw = [np.asarray(v, dtype=dtype_of(t)) for t, v in inputs]
    (shape,) = output_shapes(get(op), ops, raw, [Operand(out_type)])
    return evaluate(get(op), ops, raw, [Operand(out_type, shape)])[0]


def _cases(op: str, edge: str) -> list:
    return [sample_case(*k) for k in enumerate_edge_cases() if k[0].name == op and k[6] == edge]


def _inputs(case) -> dict[str, np.ndarray]:
    """Real values of a case's tensors (quantised ones dequantised), by argument name."""
    return {ci.arg.name: to_real(ci.value, ci.operand) if ci.operand.type.is_quant else np.asarray(ci.value)
            for ci in case.inputs if ci.operand is not None}


# ---------------------------------------------------------------------------------------
# AXIS_ALIGNED_BBOX_TRANSFORM: Android's kernel does not clamp dw / dh (Detectron does)


def test_aabt_applies_no_delta_clamp():
    """A 2 x 2 box at the centre of a 400 x 400 image, dw = 5, dh = -5: exp(5) = 148.41 times
    wider (Detectron's clamp at log(1000 / 16) would stop at 62.5 times), exp(-5) as high."""
    got = _run(Op.AXIS_ALIGNED_BBOX_TRANSFORM,
               [(F32, [[199, 199, 201, 201]]), (F32, [[0, 0, 5, 0, 0, 0, 0, -5]]),
                (T.TENSOR_INT32, [0]), (F32, [[400, 400]])], F32)
    half_w, half_h = math.exp(5), math.exp(-5)
    np.testing.assert_allclose(got, [[200 - half_w, 199, 200 + half_w, 201,
                                      199, 200 - half_h, 201, 200 + half_h]], rtol=1e-6)


def test_aabt_large_deltas_edge_is_past_the_clamp_and_inside_the_image():
    cases = _cases("AXIS_ALIGNED_BBOX_TRANSFORM", "large_deltas")
    assert len(cases) == 4
    for case in cases:
        x, out = _inputs(case), case.expected[0]
        o = case.outputs[0]
        real = to_real(out, o) if o.type.is_quant else out.astype(np.float64)
        rois, d = x["rois"], x["deltas"].reshape(len(x["rois"]), -1, 4)
        box = real.reshape(d.shape)
        assert (d[..., 2] > DETECTRON_DELTA_CLIP + 0.3).all(), case.id
        # unclipped by the image: the width is exp(dw) times the roi's, > 62.5 times
        w_in = (rois[:, 2] - rois[:, 0])[:, None]
        ratio = (box[..., 2] - box[..., 0]) / w_in
        np.testing.assert_allclose(ratio, np.exp(d[..., 2]), rtol=0.03, err_msg=case.id)
        assert (ratio > 1.4 * math.exp(DETECTRON_DELTA_CLIP)).all(), case.id
        assert (box[..., 0] > 0).all() and (box[..., 2] < 160).all(), case.id


def test_aabt_past_border_edge_clips_at_every_border():
    cases = _cases("AXIS_ALIGNED_BBOX_TRANSFORM", "past_border")
    assert len(cases) == 4
    for case in cases:
        x, out, o = _inputs(case), case.expected[0], case.outputs[0]
        box = (to_real(out, o) if o.type.is_quant else out.astype(np.float64)).reshape(-1, 3, 4)
        hw = x["image_info"][x["batches"].astype(int)]
        assert (box[:, 0, :2] == 0).all() and (box[:, 0, 2:] > 0).all(), case.id  # top-left, half in
        np.testing.assert_array_equal(box[:, 1, 2:], hw[:, ::-1], err_msg=case.id)  # bottom-right
        assert (box[:, 1, :2] < hw[:, ::-1]).all(), case.id
        # wholly right of and above the image: the zero-size box [width, 0, width, 0]
        want = np.stack([hw[:, 1], 0 * hw[:, 0], hw[:, 1], 0 * hw[:, 0]], axis=1)
        np.testing.assert_array_equal(box[:, 2], want, err_msg=case.id)


def test_aabt_zero_size_boxes_stay_zero_size():
    """A zero side times exp(dw) is zero (a "+1" width convention would make it exp(dw))."""
    got = _run(Op.AXIS_ALIGNED_BBOX_TRANSFORM,
               [(F32, [[3, 2, 3, 2], [1, 1, 1, 4]]), (F32, [[0.5, -0.5, 2.0, 2.0], [0.5, 0.5, 1.0, 0.0]]),
                (T.TENSOR_INT32, [0, 0]), (F32, [[8, 8]])], F32)
    np.testing.assert_allclose(got, [[3, 2, 3, 2], [1, 2.5, 1, 5.5]])
    cases = _cases("AXIS_ALIGNED_BBOX_TRANSFORM", "zero_size_boxes")
    assert len(cases) == 4
    for case in cases:
        x, out, o = _inputs(case), case.expected[0], case.outputs[0]
        box = (to_real(out, o) if o.type.is_quant else out.astype(np.float64)).reshape(len(x["rois"]), -1, 4)
        rois = x["rois"]
        flat_w, flat_h = rois[:, 2] == rois[:, 0], rois[:, 3] == rois[:, 1]
        assert (flat_w & flat_h).any(), case.id
        assert (box[flat_w, :, 2] == box[flat_w, :, 0]).all(), case.id
        assert (box[flat_h, :, 3] == box[flat_h, :, 1]).all(), case.id
        # the boxes lie inside their images: nothing here is a border clip
        hw = x["image_info"][x["batches"].astype(int)]
        assert (rois[:, 2] <= hw[:, 1]).all() and (rois[:, 3] <= hw[:, 0]).all(), case.id


# ---------------------------------------------------------------------------------------
# The tensor records


FLT_MAX = 3.4028234663852886e38


@pytest.mark.parametrize("edge, want", [
    ("value_max", {"float16": 65504.0, "float32": FLT_MAX, "int32": 2**31 - 1}),
    ("value_lowest", {"float16": -65504.0, "float32": -FLT_MAX, "int32": -(2**31)})])
def test_fill_value_edges_are_the_type_extremes(edge, want):
    cases = _cases("FILL", edge)
    assert {c.variant.label for c in cases} == set(want)
    for case in cases:
        out = case.expected[0]
        assert np.isfinite(out.astype(np.float64)).all() and (out == want[case.variant.label]).all(), case.id


def test_rank_edges():
    for edge, rank in (("rank_1_one_element", 1), ("rank_4_ones", 4), ("rank_6", 6)):
        for case in _cases("RANK", edge):
            assert int(case.expected[0]) == rank == len(case.inputs[0].operand.dimensions), case.id


def test_batch_matmul_edges():
    for case in _cases("BATCH_MATMUL", "adj_both"):
        assert [bool(ci.value) for ci in case.inputs[2:]] == [True, True], case.id
    for case in _cases("BATCH_MATMUL", "long_inner"):
        a = case.inputs[0]
        k = a.operand.dimensions[-2 if bool(case.inputs[2].value) else -1]
        assert k == LONG_INNER, case.id
        if case.variant.label == "float32":  # on the 1/8 grid: the float32 golden is exact
            x, y = (np.asarray(ci.value, np.float64) for ci in case.inputs[:2])
            assert (x * 8 == np.round(x * 8)).all() and (y * 8 == np.round(y * 8)).all()


def test_mirror_pad_widest_paddings():
    x = (F32, [1, 2, 3])
    reflect = _run(Op.MIRROR_PAD, [x, (T.TENSOR_INT32, [[2, 2]]), (T.INT32, 0)], F32)
    np.testing.assert_array_equal(reflect, [3, 2, 1, 2, 3, 2, 1])
    symmetric = _run(Op.MIRROR_PAD, [x, (T.TENSOR_INT32, [[3, 3]]), (T.INT32, 1)], F32)
    np.testing.assert_array_equal(symmetric, [3, 2, 1, 1, 2, 3, 3, 2, 1])
    one = _run(Op.MIRROR_PAD, [(F32, [[5, 6]]), (T.TENSOR_INT32, [[1, 1], [0, 0]]), (T.INT32, 1)], F32)
    np.testing.assert_array_equal(one, [[5, 6], [5, 6], [5, 6]])
    for mode, edge in ((0, "reflect_widest"), (1, "symmetric_widest")):
        for case in _cases("MIRROR_PAD", edge):
            dims = np.array(case.inputs[0].operand.dimensions)
            pads = np.asarray(case.inputs[1].value)
            np.testing.assert_array_equal(pads, np.stack([dims - (1 - mode)] * 2, axis=1), err_msg=case.id)
    for case in _cases("MIRROR_PAD", "zero_some_axes"):
        unpadded = (np.asarray(case.inputs[1].value) == 0).all(axis=1)
        assert unpadded.any() and not unpadded.all(), case.id


def test_pack_and_reverse_edges():
    for case in _cases("PACK", "axis_after_last"):
        assert int(case.inputs[0].value) == len(case.inputs[1].operand.dimensions), case.id
    assert all(len(c.inputs) == 2 for c in _cases("PACK", "single_input"))
    for edge in ("first_axis", "last_axis", "axis_of_1"):
        for case in _cases("REVERSE", edge):
            dims = case.inputs[0].operand.dimensions
            axis = int(case.inputs[1].value[0])
            assert axis == {"first_axis": 0, "last_axis": len(dims) - 1}.get(edge, axis), case.id
            assert (dims[axis] == 1) == (edge == "axis_of_1"), case.id
