"""ONNX Runtime mappings of the detection family (nncert/ops/detection.py).

- AXIS_ALIGNED_BBOX_TRANSFORM is elementwise arithmetic, Android's formula in float32: each
  roi's image [height, width] gathered by its batch index, size = corner2 - corner1, centre =
  (corner1 + corner2) / 2 moved by delta * size, size * Exp(delta), the corners clipped to
  [0, width] x [0, height] (Max, then Min, as Android clips). QUANT16 boxes and image sizes
  are their stored values times 0.125 (Cast and Mul, exact); the QUANT8 deltas are
  dequantised, the output quantised (QDQ).
- BOX_WITH_NMS_LIMIT, hard kernel (nms_kernel 0) with nms_score_threshold > 0: around ONNX
  NonMaxSuppression, whose "batch" axis is given the classes (each class has boxes of its
  own; ONNX shares one box set across its classes) and whose "class" axis the runs of equal
  batch index (Android's images: consecutive rois of one batch value), each roi's score
  masked out of every run but its own. Android drops a box at IoU >= iou_threshold, ONNX
  at IoU > its threshold: ONNX is given the next float32 below iou_threshold, which is the
  same test on float32 IoUs. Android's hard kernel multiplies a suppressed score by 0 and
  drops the pending boxes under nms_score_threshold after each selection (so every box but
  the best of its class and image must reach nms_score_threshold): boxes under it are masked
  out unless they are their class's and image's best (ArgMax, first index). The per-class
  cap is max_detections (Android uses it for both caps; < 0 unlimited), at most the boxes a
  class has (a runtime may size NMS's output by the cap). Then per image the
  max_detections best by score (stable TopK sorts by score, then by run, a rank within the
  run from the runs' exclusive cumulative counts, Compress), and the output in Android's
  order: by run, class, then score (a stable TopK on run * classes + class). Scores and
  boxes are gathered from the stored inputs (QUANT16 boxes and the scores keep their
  stored values: the output shares the input's quantisation; otherwise requantised).
  The output length is the runtime's count, whatever the model declared: the harness
  judges the shapes the execution reports.
  Declined: the linear and gaussian kernels (soft NMS rescales the remaining scores after
  each selection, which NonMaxSuppression cannot), and nms_score_threshold <= 0 with the
  hard kernel unless iou_threshold > 1 (Android then keeps suppressed boxes with score 0,
  to be selected after every positive score: not a suppression NonMaxSuppression makes).
- GENERATE_PROPOSALS: the anchors tiled by a constant shift grid (x * width_stride, y *
  height_stride) plus the anchors input, decoded and clipped per image as
  AXIS_ALIGNED_BBOX_TRANSFORM, the pre_nms_max best scores per image (TopK marked by
  ScatterElements), Android's filter (width and height > min_size, centre inside the
  image), and one NonMaxSuppression per image (ONNX batch = image, one class) with
  post_nms_max (non-positive: unlimited; at most the image's proposals, since a runtime may
  size NMS's output by it) and the same float32 threshold shift as above; the
  filtered-out proposals get score -inf and a score threshold of the lowest finite float32,
  so a proposal whose own score is -inf (or NaN) is never output, where Android would.
  Output in Android's order: by image, then selection order (best first).
- DETECTION_POSTPROCESSING: declined (see ``_NMS``).

Tensors whose quantisation ORT's QDQ propagation would carry through a Reshape, Slice or
Transpose are moved as stored and dequantised afterwards (ORT otherwise gives an int8
QuantizeLinear a uint8 zero point, and the model fails to load).
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.onnxruntime.export import NCHW_TO_NHWC, Emit, Mapping, _tensor_proto_type
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op

_F32 = np.float32
_I64 = np.int64

_NMS = ("ONNX NonMaxSuppression returns selected indices of a per-class hard NMS that "
        "suppresses at IoU > threshold; {what} is not expressed as a composition (yet)")


def _decline(reason: str) -> Mapping:
    def fn(e: Emit) -> None:
        raise Unmappable(reason)

    return Mapping(fn)


def _cast(e: Emit, x: str, dtype) -> str:
    return e.node("Cast", [x], to=_tensor_proto_type(np.dtype(dtype)))


def _real(e: Emit, name: str) -> str:
    """Input ``name`` as float32 real values: QUANT16 as (stored - zero point) * scale by
    Cast and Mul (exact for the 0.125 scale boxes use), other quantised types dequantised."""
    o = e.operand(name)
    if o.type in (T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM):
        x = _cast(e, e.raw(name), _F32)
        if o.zero_point:
            x = e.node("Sub", [x, e.const(o.zero_point, _F32)])
        return e.node("Mul", [x, e.const(o.scale, _F32)])
    return e.real(name)


def _slice(e: Emit, x: str, start: int, end: int, axis: int) -> str:
    return e.node("Slice", [x, e.const([start]), e.const([end]), e.const([axis])])


# ---------------------------------------------------------------------------------------
# AXIS_ALIGNED_BBOX_TRANSFORM


def _aabt(e: Emit) -> None:
    r, dc = e.dims("deltas")
    c = dc // 4
    rois = e.reshape(_real(e, "rois"), (r, 1, 4))
    # sliced as stored, then dequantised (see the module's note on QDQ propagation)
    deltas_raw = e.reshape(e.raw("deltas"), (r, c, 4))
    d_op = e.operand("deltas")
    d_xy, d_wh = (e.g.dequantize(_slice(e, deltas_raw, a, b, 2), d_op) for a, b in ((0, 2), (2, 4)))
    info = e.node("Gather", [_real(e, "image_info"), e.raw("batches")], axis=0)  # [R, 2]
    boxes = _decode_clip(e, rois, d_xy, d_wh, e.reshape(info, (r, 1, 2)))
    _emit_boxes(e, e.reshape(boxes, (r, dc)), 0)


def _decode_clip(e: Emit, boxes: str, d_xy: str, d_wh: str, info: str) -> str:
    """Corner boxes [..., 4] moved by deltas (d_xy, d_wh [..., 2]) as Android computes it,
    clipped to [0, width] x [0, height] of ``info`` [..., 2] ([height, width], broadcast)."""
    lo, hi = _slice(e, boxes, 0, 2, -1), _slice(e, boxes, 2, 4, -1)  # (x1, y1), (x2, y2)
    size = e.node("Sub", [hi, lo])
    centre = e.node("Div", [e.node("Add", [lo, hi]), e.const(2, _F32)])
    centre = e.node("Add", [centre, e.node("Mul", [d_xy, size])])
    half = e.node("Div", [e.node("Mul", [e.node("Exp", [d_wh]), size]), e.const(2, _F32)])
    out = e.node("Concat", [e.node("Sub", [centre, half]), e.node("Add", [centre, half])], axis=-1)
    wh = e.node("Concat", [_slice(e, info, 1, 2, -1), _slice(e, info, 0, 1, -1)], axis=-1)
    upper = e.node("Concat", [wh, wh], axis=-1)  # [width, height, width, height]
    return e.node("Min", [e.node("Max", [out, e.const(0, _F32)]), upper])


def _emit_boxes(e: Emit, value: str, k: int) -> None:
    """Real box coordinates as output ``k``: QUANT16 as Android stores them, x / scale + zero
    point rounded half away from zero (Sign * Floor(Abs + 0.5); ONNX's Round and
    QuantizeLinear round half to even), clipped to [0, 65535] and Cast."""
    o = e.outs[k]
    if o.type is not T.TENSOR_QUANT16_ASYMM:
        return e.emit(value, k=k, activation=False)
    q = e.node("Div", [value, e.const(o.scale, _F32)])
    if o.zero_point:
        q = e.node("Add", [q, e.const(o.zero_point, _F32)])
    q = e.node("Mul", [e.node("Sign", [q]),
                       e.node("Floor", [e.node("Add", [e.node("Abs", [q]), e.const(0.5, _F32)])])])
    q = e.node("Clip", [q, e.const(0, _F32), e.const(65535, _F32)])
    e.g.bind_output(_cast(e, q, np.uint16), e.op.outputs[k])


# ---------------------------------------------------------------------------------------
# BOX_WITH_NMS_LIMIT


def _scalar_f32(e: Emit, name: str) -> float:
    return float(np.float32(e.value(name)))


def _bwn(e: Emit) -> None:
    kernel = int(e.value("nms_kernel"))
    if kernel != 0:
        raise Unmappable(f"BOX_WITH_NMS_LIMIT: the {'linear' if kernel == 1 else 'gaussian'} kernel "
                         f"(nms_kernel {kernel}) is soft NMS, which rescales the remaining scores after "
                         f"each selection; ONNX NonMaxSuppression only drops boxes")
    score_thr = _scalar_f32(e, "score_threshold")
    nms_thr = _scalar_f32(e, "nms_score_threshold")
    iou_thr = _scalar_f32(e, "iou_threshold")
    limit = int(e.value("max_detections"))
    if not nms_thr > 0 and not iou_thr > 1:
        raise Unmappable(f"BOX_WITH_NMS_LIMIT: nms_score_threshold {nms_thr:g} <= 0 with the hard kernel "
                         f"and iou_threshold {iou_thr:g} <= 1 keeps suppressed boxes with score 0 (Android "
                         f"multiplies their score by 0 and drops only scores below the threshold); ONNX "
                         f"NonMaxSuppression cannot keep them")
    r, c = e.dims("scores")
    # scores moved as stored, then dequantised (see the module's note on QDQ propagation)
    s_op = e.operand("scores")
    flat_scores = e.g.dequantize(e.reshape(e.raw("scores"), (r * c,)), s_op)  # [R * C]
    per_class = e.reshape(e.node("Transpose", [e.raw("scores")], perm=[1, 0]), (c, 1, r))
    per_class = e.g.dequantize(per_class, s_op)  # [C, 1, R]
    boxes = _real(e, "boxes")  # [R, 4C]

    # Runs of equal batch index: run[i] = number of changes of batches up to roi i.
    batches = e.raw("batches")
    if r > 1:
        same = e.node("Equal", [_slice(e, batches, 1, r, 0), _slice(e, batches, 0, r - 1, 0)])
        changes = e.node("CumSum", [_cast(e, e.node("Not", [same]), _I64), e.const(0)])
        run = e.node("Concat", [e.const([0]), changes], axis=0)
    else:
        run = e.const([0])
    groups = e.node("Add", [_slice(e, run, r - 1, r, 0), e.const([1])])  # [1]: number of runs G
    group_ids = e.node("Range", [e.const(0), e.reshape(groups, ()), e.const(1)])  # [G]
    mine = e.node("Equal", [e.reshape(group_ids, (-1, 1)), e.reshape(run, (1, r))])  # [G, R]

    # NonMaxSuppression input: boxes [C, R, 4], scores [C, G, R] (a roi's score in its run only).
    nms_boxes = e.node("Transpose", [e.reshape(boxes, (r, c, 4))], perm=[1, 0, 2])
    low = e.const(-np.inf, _F32)
    masked = e.node("Where", [e.reshape(mine, (1, -1, r)), per_class, low])
    if nms_thr > score_thr:
        # Android drops the pending boxes under nms_score_threshold after the first selection:
        # only the best of a class and image (the first, among equal ones) may be under it.
        best = e.node("ArgMax", [masked], axis=2, keepdims=1)  # [C, G, 1]
        is_best = e.node("Equal", [e.const(np.arange(r, dtype=_I64).reshape(1, 1, r)), best])
        keep = e.node("Or", [is_best, e.node("GreaterOrEqual", [masked, e.const(nms_thr, _F32)])])
        masked = e.node("Where", [keep, masked, low])
    # the background class takes no part
    background = np.zeros((c, 1, 1), bool)
    background[0] = True
    masked = e.node("Where", [e.const(background, np.bool_), low, masked])
    per_class_cap = min(limit, r) if limit >= 0 else r  # no class keeps more than its R boxes
    below = float(np.nextafter(np.float32(iou_thr), np.float32(-np.inf)))  # IoU > below <=> IoU >= thr
    selected = e.node("NonMaxSuppression", [nms_boxes, masked, e.const([per_class_cap]),
                                            e.const([below], _F32), e.const([score_thr], _F32)])
    cls = e.node("Gather", [selected, e.const(0)], axis=1)  # [N]
    grp = e.node("Gather", [selected, e.const(1)], axis=1)
    roi = e.node("Gather", [selected, e.const(2)], axis=1)
    flat = e.node("Add", [e.node("Mul", [roi, e.const(c)]), cls])  # index into scores [R * C]
    sel_scores = e.node("Gather", [flat_scores, flat], axis=0)

    if limit >= 0:
        # Per image the `limit` best by score: stable sorts by score (descending), then by run
        # (ascending), rank = position - the run's first position.
        n = e.node("Shape", [flat])
        order = _stable_sort(e, sel_scores, n, largest=True)
        grp_s = e.node("Gather", [grp, order], axis=0)
        by_run = _stable_sort(e, _cast(e, grp_s, _F32), n, largest=False)
        order = e.node("Gather", [order, by_run], axis=0)
        grp_s = e.node("Gather", [grp_s, by_run], axis=0)
        counts = e.node("ReduceSum", [_cast(e, e.node("Equal", [e.reshape(grp_s, (-1, 1)),
                                                                e.reshape(group_ids, (1, -1))]), _I64),
                                      e.const([0])], keepdims=0)  # [G]
        first = e.node("CumSum", [counts, e.const(0)], exclusive=1)
        position = e.node("Range", [e.const(0), e.reshape(n, ()), e.const(1)])
        rank = e.node("Sub", [position, e.node("Gather", [first, grp_s], axis=0)])
        order = e.node("Compress", [order, e.node("Less", [rank, e.const(limit)])], axis=0)
        cls, grp, flat, roi, sel_scores = (e.node("Gather", [v, order], axis=0)
                                           for v in (cls, grp, flat, roi, sel_scores))
    # Android's order: by run, then class, then score (NonMaxSuppression gives each class's and
    # run's selections best first, which the stable sorts keep).
    key = e.node("Add", [e.node("Mul", [grp, e.const(c)]), cls])
    order = _stable_sort(e, _cast(e, key, _F32), e.node("Shape", [key]), largest=False)
    cls, flat, roi, sel_scores = (e.node("Gather", [v, order], axis=0) for v in (cls, flat, roi, sel_scores))

    # outputs: scores, boxes (from the stored inputs where the quantisation is shared),
    # classes, batch indices
    s_in, s_out = e.operand("scores"), e.outs[0]
    if s_in.type.is_quant and (s_in.scale, s_in.zero_point) == (s_out.scale, s_out.zero_point):
        stored = e.reshape(e.raw("scores"), (r * c,))
        e.g.bind_output(e.node("Gather", [stored, flat], axis=0), e.op.outputs[0])
    else:
        e.emit(sel_scores, k=0, activation=False)
    b_in, b_out = e.operand("boxes"), e.outs[1]
    if b_in.type.is_quant and (b_in.scale, b_in.zero_point) == (b_out.scale, b_out.zero_point):
        stored = e.reshape(e.raw("boxes"), (r * c, 4))
        e.g.bind_output(e.node("Gather", [stored, flat], axis=0), e.op.outputs[1])
    else:
        _emit_boxes(e, e.node("Gather", [e.reshape(boxes, (r * c, 4)), flat], axis=0), 1)
    e.g.bind_output(_cast(e, cls, np.int32), e.op.outputs[2])
    e.g.bind_output(e.node("Gather", [batches, roi], axis=0), e.op.outputs[3])


# ---------------------------------------------------------------------------------------
# GENERATE_PROPOSALS


def _gp(e: Emit) -> None:
    b, h, w, a = e.dims("scores")
    n = h * w * a
    to_nhwc = NCHW_TO_NHWC if e.nchw else None
    s_op, d_op = e.operand("scores"), e.operand("deltas")
    # moved as stored, then dequantised (see the module's note on QDQ propagation)
    scores_raw = e.reshape(e.g.raw(e.index("scores"), to_nhwc), (b, n))
    scores = e.g.dequantize(scores_raw, s_op)  # [B, N], anchors fastest, then x, then y
    deltas_raw = e.reshape(e.g.raw(e.index("deltas"), to_nhwc), (b, n, 4))
    d_xy, d_wh = (e.g.dequantize(_slice(e, deltas_raw, lo, hi, 2), d_op) for lo, hi in ((0, 2), (2, 4)))
    hs, ws = _scalar_f32(e, "height_stride"), _scalar_f32(e, "width_stride")
    shift = np.zeros((h, w, 1, 4), _F32)
    shift[..., 0::2] = (np.arange(w, dtype=_F32) * np.float32(ws))[None, :, None, None]
    shift[..., 1::2] = (np.arange(h, dtype=_F32) * np.float32(hs))[:, None, None, None]
    anchors = e.node("Add", [e.const(shift, _F32), e.reshape(_real(e, "anchors"), (1, 1, a, 4))])
    anchors = e.reshape(anchors, (1, n, 4))
    info = e.reshape(_real(e, "image_info"), (b, 1, 2))
    boxes = _decode_clip(e, anchors, d_xy, d_wh, info)  # [B, N, 4]

    # Android's filter: width and height > min_size, centre inside the image
    min_size = e.const(_scalar_f32(e, "min_size"), _F32)
    x1, y1 = _slice(e, boxes, 0, 1, 2), _slice(e, boxes, 1, 2, 2)
    bw = e.node("Sub", [_slice(e, boxes, 2, 3, 2), x1])
    bh = e.node("Sub", [_slice(e, boxes, 3, 4, 2), y1])
    half = e.const(2, _F32)
    xc = e.node("Add", [x1, e.node("Div", [bw, half])])
    yc = e.node("Add", [y1, e.node("Div", [bh, half])])
    tests = [e.node("Greater", [bw, min_size]), e.node("Greater", [bh, min_size]),
             e.node("Less", [xc, _slice(e, info, 1, 2, 2)]), e.node("Less", [yc, _slice(e, info, 0, 1, 2)])]
    keep = tests[0]
    for t in tests[1:]:
        keep = e.node("And", [keep, t])
    keep = e.reshape(keep, (b, n))
    pre = int(e.value("pre_nms_max"))
    if 0 < pre < n:  # the pre_nms_max best scores of each image (TopK: equal ones by index)
        _, best = _topk(e, scores, e.const([pre]), largest=True, axis=1)
        mark = e.node("ScatterElements", [e.const(np.zeros((b, n)), _F32), best,
                                          e.const(np.ones((b, pre)), _F32)], axis=1)
        keep = e.node("And", [keep, e.node("Greater", [mark, e.const(0, _F32)])])
    masked = e.reshape(e.node("Where", [keep, scores, e.const(-np.inf, _F32)]), (b, 1, n))
    post = int(e.value("post_nms_max"))
    iou_thr = _scalar_f32(e, "iou_threshold")
    below = float(np.nextafter(np.float32(iou_thr), np.float32(-np.inf)))
    lowest = float(np.finfo(_F32).min)  # every finite score takes part, the masked -inf ones not
    # The bound as tight as it can be (no image has more than n proposals): a runtime that sizes
    # NMS's output by the bound (TVM) would otherwise take memory and time in proportion to a
    # post_nms_max of up to 2^31 (the fuzzer's 788,489,727: 19 GB).
    selected = e.node("NonMaxSuppression", [boxes, masked, e.const([min(post, n) if post > 0 else n]),
                                            e.const([below], _F32), e.const([lowest], _F32)])
    where = e.node("Gather", [selected, e.const([0, 2])], axis=1)  # [M, 2]: image, box

    if s_op.type.is_quant and (s_op.scale, s_op.zero_point) == (e.outs[0].scale, e.outs[0].zero_point):
        e.g.bind_output(e.node("GatherND", [scores_raw, where]), e.op.outputs[0])
    else:
        e.emit(e.node("GatherND", [scores, where]), k=0, activation=False)
    _emit_boxes(e, e.node("GatherND", [boxes, where]), 1)
    image = e.node("Gather", [selected, e.const(0)], axis=1)
    e.g.bind_output(_cast(e, image, np.int32), e.op.outputs[2])


def _stable_sort(e: Emit, key: str, n: str, largest: bool) -> str:
    """Indices sorting float ``key`` [N] (``n``: its shape), equal keys in their order (ONNX
    TopK breaks ties by the lower index)."""
    _, idx = _topk(e, key, n, largest)
    return idx


def _topk(e: Emit, key: str, k: str, largest: bool, axis: int = 0) -> tuple[str, str]:
    """ONNX TopK (two outputs): the ``k`` largest / smallest along ``axis``, sorted, equal
    values by their index."""
    from onnx import helper

    values, indices = e.g.fresh("topk_values"), e.g.fresh("topk_indices")
    e.g.nodes.append(helper.make_node("TopK", [key, k], [values, indices], axis=axis, largest=int(largest),
                                      sorted=1))
    return values, indices


MAPPINGS = {
    Op.DETECTION_POSTPROCESSING: _decline(_NMS.format(
        what="box decoding, fixed-size padded outputs with counts and fast (best-class) NMS")),
    Op.BOX_WITH_NMS_LIMIT: Mapping(_bwn),
    Op.GENERATE_PROPOSALS: Mapping(_gp),
    Op.AXIS_ALIGNED_BBOX_TRANSFORM: Mapping(_aabt),
}
