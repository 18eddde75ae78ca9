"""The detection family's kernels against hand-computed values, and the teeth of its compare
hooks (counts, boxes, classes, order, ties)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.ops import get
from nncert.ops.base import from_real
from nncert.ops.detection import (
    _bwn_run,
    _dp_run,
    aabt_reference,
    bwn_reference,
    decode,
    dp_reference,
    gp_reference,
    iou,
    nms,
)
from nncert.ops.evaluate import output_shapes
from nncert.testing.cases import context_for, sample_case

A, B, C = [0, 0, 2, 2], [0.1, 0, 2.1, 2], [5, 5, 6, 6]
IOU_AB = 3.8 / 4.2  # intersection 1.9 x 2, union 4 + 4 - 3.8


def close(actual, expected) -> bool:
    return bool(np.allclose(np.asarray(actual, float), np.asarray(expected, float), rtol=1e-12, atol=1e-12))


def test_iou_and_decode():
    assert iou(np.array([0, 0, 2, 2.0]), np.array([1, 1, 3, 3.0])) == pytest.approx(1 / 7)
    assert iou(np.array(A, float), np.array(C, float)) == 0.0
    # centre (1, 1) moves by 0.5 x width 2; the width doubles
    assert decode(np.array([0, 0, 2, 2.0]), np.array([0.5, 0, math.log(2), 0])).tolist() == \
        pytest.approx([0, 0, 4, 2])


def test_hard_nms_drops_overlaps_at_the_threshold():
    boxes = np.array([A, B, C], float)
    scores = np.array([0.9, 0.8, 0.7])
    assert nms(scores.copy(), lambda i: boxes[i], [0, 1, 2], 0.5, None) == [0, 2]
    assert nms(scores.copy(), lambda i: boxes[i], [0, 1, 2], IOU_AB, None) == [0, 2]  # IoU >= threshold
    assert nms(scores.copy(), lambda i: boxes[i], [0, 1, 2], 0.95, None) == [0, 1, 2]
    assert nms(scores.copy(), lambda i: boxes[i], [0, 1, 2], 0.95, 2) == [0, 1]


def test_axis_aligned_bbox_transform_clips_to_its_image():
    rois = np.array([[1, 1, 3, 3.0], [0, 0, 1, 1]])
    deltas = np.array([[0, 0, math.log(2), math.log(2)], [1, 0, 0, 0]])
    info = np.array([[3, 5.0], [10, 10]])  # [height, width] per image
    out = aabt_reference(rois, deltas, np.array([0, 1]), info)
    assert close(out, [[0, 0, 4, 3], [1, 0, 2, 1]])


def _bwn(kernel, **kw):
    scores = np.array([[0.0, 0.9], [0.0, 0.8], [0.0, 0.7]])
    boxes = np.zeros((3, 8))
    boxes[:, 4:] = [A, B, C]
    p = dict(score_threshold=0.0, max_detections=-1, nms_kernel=kernel, iou_threshold=0.5, sigma=0.5,
             nms_score_threshold=0.05)
    p.update(kw)
    return bwn_reference(scores, boxes, np.array([0, 0, 0]), p)


def test_box_with_nms_limit_kernels():
    s, b, c, batch = _bwn(0)
    assert s.tolist() == pytest.approx([0.9, 0.7]) and c.tolist() == [1, 1] and batch.tolist() == [0, 0]
    assert b.tolist() == [A, C]
    s, _, _, _ = _bwn(1)  # linear: B keeps 0.8 x (1 - IoU) = 0.0762 > 0.05
    assert s.tolist() == pytest.approx([0.9, 0.7, 0.8 * (1 - IOU_AB)])
    s, _, _, _ = _bwn(1, nms_score_threshold=0.1)  # ... and is dropped below 0.1
    assert s.tolist() == pytest.approx([0.9, 0.7])
    s, _, _, _ = _bwn(2)  # gaussian: 0.8 exp(-IoU^2 / sigma)
    assert sorted(s.tolist(), reverse=True) == pytest.approx([0.9, 0.7, 0.8 * math.exp(-IOU_AB ** 2 / 0.5)])
    s, _, _, _ = _bwn(0, max_detections=1)
    assert s.tolist() == pytest.approx([0.9])
    s, _, _, _ = _bwn(0, score_threshold=0.75)  # strictly above the threshold
    assert s.tolist() == pytest.approx([0.9])


def test_box_with_nms_limit_orders_by_class_then_score_per_batch():
    scores = np.array([[0, 0.3, 0.9], [0, 0.8, 0.1], [0, 0.5, 0.6]])
    boxes = np.tile(np.array([C], float), (3, 3))
    boxes[1, 4:8] = A
    s, _, c, batch = bwn_reference(scores, boxes, np.array([0, 0, 4]), dict(
        score_threshold=0.2, max_detections=-1, nms_kernel=0, iou_threshold=0.5, sigma=1.0,
        nms_score_threshold=0.01))
    # image 0: class 1 keeps 0.8 (box A) and 0.3 (box C); class 2 keeps 0.9; image 4: 0.5, 0.6
    assert c.tolist() == [1, 1, 2, 1, 2] and batch.tolist() == [0, 0, 0, 4, 4]
    assert s.tolist() == pytest.approx([0.8, 0.3, 0.9, 0.5, 0.6])


def _dp_params(**kw):
    p = dict(scale_y=1.0, scale_x=1.0, scale_h=1.0, scale_w=1.0, use_regular_nms=True, max_num_detections=3,
             max_classes_per_detection=1, max_detections_per_class=3, score_threshold=0.5, iou_threshold=0.5,
             include_background=False)
    p.update(kw)
    return p


ANCHORS = np.array([[1, 1, 2, 2], [5, 5, 2, 2.0]])  # [ctr_y, ctr_x, h, w]


def test_detection_postprocessing_regular():
    scores = np.array([[[0.1, 0.9], [0.2, 0.6]]])
    s, b, c, n = dp_reference(scores, np.zeros((1, 2, 4)), ANCHORS, _dp_params())
    assert n.tolist() == [2] and c.tolist() == [[0, 0, 0]]
    assert close(s, [[0.9, 0.6, 0]])
    assert close(b[0], [[0, 0, 2, 2], [4, 4, 6, 6], [0, 0, 0, 0]])  # [y1, x1, y2, x2]
    # deltas are divided by their scales: dy 10 / 10 moves the centre by one height (2)
    deltas = np.array([[[10, 0, 0, 0], [0, 0, 0, 0]]], float)
    _, b, _, _ = dp_reference(scores, deltas, ANCHORS, _dp_params(scale_y=10.0, max_num_detections=1))
    assert b[0, 0].tolist() == pytest.approx([2, 0, 4, 2])


def test_detection_postprocessing_fast_reports_best_classes_per_anchor():
    scores = np.array([[[0, 0.9, 0.3], [0, 0.2, 0.7]]])
    s, _, c, n = dp_reference(scores, np.zeros((1, 2, 4)), ANCHORS, _dp_params(
        use_regular_nms=False, max_num_detections=2, max_classes_per_detection=2, include_background=True))
    assert n.tolist() == [4] and c.tolist() == [[1, 2, 2, 1]]
    assert close(s, [[0.9, 0.3, 0.7, 0.2]])


def test_generate_proposals_tiles_filters_and_suppresses():
    scores = np.array([0.6, 0.9]).reshape(1, 1, 2, 1)  # [batch, h, w, anchors]
    p = dict(height_stride=4.0, width_stride=4.0, pre_nms_max=0, post_nms_max=0, iou_threshold=0.5,
             min_size=0.5)
    s, b, batch = gp_reference(scores, np.zeros((1, 1, 2, 4)), np.array([[0, 0, 2, 2.0]]),
                               np.array([[10, 10.0]]), p)
    assert s.tolist() == pytest.approx([0.9, 0.6]) and batch.tolist() == [0, 0]
    assert close(b, [[4, 0, 6, 2], [0, 0, 2, 2]])
    # an image 4 wide: the second box, clipped to it, has width 0
    anchors, no_deltas = np.array([[0, 0, 2, 2.0]]), np.zeros((1, 1, 2, 4))
    s, _, _ = gp_reference(scores, no_deltas, anchors, np.array([[10, 4.0]]), p)
    assert s.tolist() == pytest.approx([0.6])
    s, _, _ = gp_reference(scores, np.zeros((1, 1, 2, 4)), np.array([[0, 0, 2, 2.0]]), np.array([[10, 10.0]]),
                           dict(p, min_size=2.0))  # sizes must exceed min_size
    assert s.size == 0


def _case(op, edge=None, seed=0):
    r = get(op)
    nchw = False if r.layout else None
    return sample_case(r, r.signatures[0], r.variants[0], nchw=nchw, seed=seed, edge=edge)


def test_data_dependent_shapes_are_unknown_until_values_are():
    c = _case(Op.BOX_WITH_NMS_LIMIT)
    in_ops = [ci.operand for ci in c.inputs]
    values = [None if ci.operand is not None and ci.operand.type.is_tensor else ci.value for ci in c.inputs]
    assert output_shapes(c.record, in_ops, values, c.outputs) is None
    d = _case(Op.DETECTION_POSTPROCESSING)  # fixed-size outputs: known from the parameters
    in_ops = [ci.operand for ci in d.inputs]
    values = [None if ci.operand is not None and ci.operand.type.is_tensor else ci.value for ci in d.inputs]
    assert output_shapes(d.record, in_ops, values, d.outputs) == [tuple(e.shape) for e in d.expected]


def _problems(case, actual):
    return case.record.compare(context_for(case), list(case.expected), actual, False)


def test_detection_compare_has_teeth():
    for seed in range(4):
        c = _case(Op.DETECTION_POSTPROCESSING, seed=seed)
        if int(c.expected[3][0]) >= 2:
            break
    exp = [e.copy() for e in c.expected]
    assert _problems(c, exp) == []
    swapped = [e.copy() for e in exp]
    for k in range(3):
        swapped[k][0, [0, 1]] = swapped[k][0, [1, 0]]
    assert _problems(c, swapped) == []  # order among detections is not judged
    moved = [e.copy() for e in exp]
    moved[1][0, 0, 0] += 0.1
    assert _problems(c, moved)
    relabelled = [e.copy() for e in exp]
    relabelled[2][0, 0] += 1
    assert _problems(c, relabelled)
    counted = [e.copy() for e in exp]
    counted[3][0] -= 1
    assert _problems(c, counted)


def test_box_with_nms_compare_has_teeth():
    c = next(c for c in (_case(Op.BOX_WITH_NMS_LIMIT, seed=k) for k in range(8)) if c.expected[0].size >= 2)
    exp = [e.copy() for e in c.expected]
    assert exp[0].size >= 2 and _problems(c, exp) == []
    scored = [e.copy() for e in exp]
    scored[0][0] += 0.01
    assert _problems(c, scored)
    fewer = [e[1:].copy() for e in exp]
    assert _problems(c, fewer)


@pytest.mark.parametrize(("op", "edge", "run"), [(Op.BOX_WITH_NMS_LIMIT, "ties", _bwn_run),
                                                 (Op.DETECTION_POSTPROCESSING, "fast_nms_ties", _dp_run)])
def test_ties_accept_either_choice(op, edge, run):
    c = _case(op, edge)
    ctx = context_for(c)
    other = [from_real(r, o) for r, o in zip(run(ctx, -1), c.outputs, strict=True)]
    assert any(not np.array_equal(a, b) for a, b in zip(other, c.expected, strict=True)), "the tie is visible"
    assert _problems(c, other) == []
    assert _problems(c, list(c.expected)) == []


def test_litert_custom_options_round_trip():
    from flatbuffers import flexbuffers

    from nncert.drivers.litert.mappings.detection import detection_options

    opts = flexbuffers.Loads(detection_options(
        max_detections=3, max_classes_per_detection=1, detections_per_class=2, use_regular_nms=True,
        score_threshold=0.5, iou_threshold=0.25, num_classes=2, scale_y=10, scale_x=10, scale_h=5, scale_w=5))
    assert opts == {"max_detections": 3, "max_classes_per_detection": 1, "detections_per_class": 2,
                    "use_regular_nms": True, "nms_score_threshold": 0.5, "nms_iou_threshold": 0.25,
                    "num_classes": 2, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}


# ---------------------------------------------------------------------------------------
# The ONNX Runtime compositions on hand-picked inputs: every decision the samplers keep away
# from its threshold is met here exactly at it (IoU exactly 0.5 with threshold 0.5, which
# Android suppresses and ONNX's IoU > threshold would not)


def _ort(op, inputs, outs):
    """One ``op`` whose tensor inputs are model inputs (``inputs``: arrays, float32 or int32,
    and Python scalars as constants; ``outs``: (type, dims)), exported to ONNX and run."""
    ort = pytest.importorskip("onnxruntime")
    proto, feeds = _exported(op, inputs, outs)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: f for i, f in zip(session.get_inputs(), feeds, strict=True)})


def _exported(op, inputs, outs):
    """``_ort``'s model as the ONNX exporter writes it, and its feeds."""
    pytest.importorskip("onnx")
    from nncert.drivers.onnxruntime.export import export
    from nncert.hal.builder import ModelBuilder

    b = ModelBuilder()
    idx, feeds, model_inputs = [], [], []
    for v in inputs:
        if isinstance(v, bool):
            idx.append(b.constant(T.BOOL, v))
        elif isinstance(v, int):
            idx.append(b.constant(T.INT32, v))
        elif isinstance(v, float):
            idx.append(b.constant(T.FLOAT32, v))
        else:
            t = T.TENSOR_INT32 if np.asarray(v).dtype.kind == "i" else T.TENSOR_FLOAT32
            idx.append(b.operand(t, np.shape(v)))
            model_inputs.append(idx[-1])
            feeds.append(np.asarray(v, np.int32 if t is T.TENSOR_INT32 else np.float32))
    out = [b.operand(t, d) for t, d in outs]
    b.operation(op, idx, out)
    return export(b.build(model_inputs, out)), feeds


HALF_A, HALF_B = [0, 0, 3, 2], [1, 0, 4, 2]  # IoU exactly 0.5 (intersection 4, union 8)
T_F32, T_I32 = T.TENSOR_FLOAT32, T.TENSOR_INT32


def test_onnx_box_with_nms_limit_hard_kernel_matches_android_at_every_threshold():
    # 5 rois in three runs of batch values 0, 1, 0; classes 0 (background), 1, 2
    scores = np.array([[0.99, 0.9, 0.55], [0.99, 0.8, 0.7], [0.0, 0.05, 0.4], [0.0, 0.95, 0.2],
                       [0.0, 0.3, 0.05]])
    boxes = np.zeros((5, 12))
    boxes[0, 4:8], boxes[1, 4:8] = HALF_A, HALF_B  # class 1: roi 1 suppressed by roi 0 (IoU = 0.5)
    boxes[0, 8:], boxes[1, 8:] = [0, 5, 1, 6], [3, 5, 4, 6]
    boxes[2, 4:8], boxes[3, 4:8] = [0, 0, 2, 2], [5, 5, 7, 7]
    boxes[2, 8:], boxes[3, 8:] = [0, 0, 1, 1], [4, 4, 5, 5]
    boxes[4] = np.tile([1, 1, 2, 2], 3)
    batches = np.array([0, 0, 1, 1, 0])
    p = dict(score_threshold=0.1, max_detections=2, nms_kernel=0, iou_threshold=0.5, sigma=1.0,
             nms_score_threshold=0.5)
    want = bwn_reference(scores, boxes, batches, p)
    # run 0: (class 1, 0.9), (class 2, 0.7) kept, 0.8 suppressed at IoU = threshold, 0.55 over the
    # cap of 2; run 1: class 2's best 0.4 stays under nms_score_threshold, its 0.2 does not;
    # run 2: class 1's 0.3 alone (class 2's 0.05 is under score_threshold)
    assert want[0].tolist() == pytest.approx([0.9, 0.7, 0.95, 0.4, 0.3])
    assert want[3].tolist() == [0, 0, 1, 1, 0]
    got = _ort(Op.BOX_WITH_NMS_LIMIT,
               [scores, boxes, batches, *p.values()],
               [(T_F32, (5,)), (T_F32, (5, 4)), (T_I32, (5,)), (T_I32, (5,))])
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_onnx_box_with_nms_limit_declines_what_it_cannot_express():
    from nncert.drivers.compiled import Unmappable

    scores, boxes, batches = np.full((2, 2), 0.5), np.tile([0, 0, 1, 1.0], (2, 2)), np.array([0, 0])
    for kernel, nms_thr, words in ((1, 0.1, "linear kernel"), (2, 0.1, "gaussian kernel"),
                                   (0, 0.0, "keeps suppressed boxes with score 0")):
        with pytest.raises(Unmappable, match=words):
            _ort(Op.BOX_WITH_NMS_LIMIT, [scores, boxes, batches, 0.1, -1, kernel, 0.5, 1.0, nms_thr],
                 [(T_F32, (2,)), (T_F32, (2, 4)), (T_I32, (2,)), (T_I32, (2,))])


def test_onnx_generate_proposals_pre_nms_min_size_and_suppression_at_the_threshold():
    # two images, 1 x 2 positions, 2 anchors; stride 4; deltas 0: proposals are the anchors
    anchors = np.array([HALF_A, HALF_B], float)
    scores = np.array([[0.8, 0.9, 0.3, 0.95], [0.1, 0.2, 0.6, 0.5]]).reshape(2, 1, 2, 2)
    deltas = np.zeros((2, 1, 2, 8))
    info = np.array([[10, 6.5], [10, 20]])  # image 0: [5, 0, 6.5, 2] is 1.5 wide, not > min_size
    p = dict(height_stride=4.0, width_stride=4.0, pre_nms_max=3, post_nms_max=0, iou_threshold=0.5,
             min_size=1.5)
    want = gp_reference(scores, deltas, anchors, info, p)
    # image 0: 0.3 cut by pre_nms_max, 0.95 by min_size, 0.8 suppressed by 0.9 at IoU = threshold;
    # image 1: 0.1 cut, 0.5 suppressed by 0.6
    assert want[0].tolist() == pytest.approx([0.9, 0.6, 0.2]) and want[2].tolist() == [0, 1, 1]
    got = _ort(Op.GENERATE_PROPOSALS,
               [scores, deltas, anchors, info, *p.values(), False],
               [(T_F32, (3,)), (T_F32, (3, 4)), (T_I32, (3,))])
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_onnx_nms_bounds_are_at_most_the_boxes():
    """A post_nms_max or max_detections of up to 2^31 - 1 is exported as NonMaxSuppression's
    max_output_boxes_per_class no larger than the boxes there are: TVM sizes NMS's output by
    that bound (the fuzzer's post_nms_max of 788,489,727 took 19 GB and hung its probe)."""
    from onnx import numpy_helper

    def bound(proto) -> int:
        (nms,) = [n for n in proto.graph.node if n.op_type == "NonMaxSuppression"]
        consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in proto.graph.node
                       if n.op_type == "Constant"})
        return int(np.asarray(consts[nms.input[2]]).reshape(-1)[0])

    scores, anchors = np.full((1, 1, 2, 2), 0.5), np.array([HALF_A, HALF_B], float)
    gp, _ = _exported(Op.GENERATE_PROPOSALS,
                      [scores, np.zeros((1, 1, 2, 8)), anchors, np.array([[10, 10.0]]),
                       4.0, 4.0, -1, 2**31 - 1, 0.5, 0.0, False],
                      [(T_F32, (4,)), (T_F32, (4, 4)), (T_I32, (4,))])
    assert bound(gp) == 4  # 1 x 2 positions x 2 anchors
    bwn, _ = _exported(Op.BOX_WITH_NMS_LIMIT,
                       [np.full((3, 2), 0.5), np.tile([0, 0, 1, 1.0], (3, 2)), np.array([0, 0, 0]),
                        0.1, 2**31 - 1, 0, 0.5, 1.0, 0.1],
                       [(T_F32, (3,)), (T_F32, (3, 4)), (T_I32, (3,)), (T_I32, (3,))])
    assert bound(bwn) == 3


def test_onnx_axis_aligned_bbox_transform_by_batch_index():
    rois = np.array([[1, 1, 3, 3.0], [0, 0, 1, 1], [2, 2, 4, 4]])
    deltas = np.array([[0, 0, math.log(2), math.log(2)], [1, 0, 0, 0], [0.5, -0.5, 0, 0.25]])
    info = np.array([[3, 5.0], [10, 10]])
    batches = np.array([0, 1, 0])
    got = _ort(Op.AXIS_ALIGNED_BBOX_TRANSFORM, [rois, deltas, batches, info], [(T_F32, (3, 4))])
    np.testing.assert_allclose(got[0], aabt_reference(rois, deltas, batches, info), rtol=1e-6, atol=1e-6)
