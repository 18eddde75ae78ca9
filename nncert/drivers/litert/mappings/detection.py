"""LiteRT mappings of the detection family.

DETECTION_POSTPROCESSING is TFLite's custom operator "TFLite_Detection_PostProcess" (the
SSD post-processing LiteRT's interpreter registers), with its parameters as flexbuffer
custom options. What differs from the HAL operation:

- inputs are (box encodings, class predictions, anchors); outputs (boxes, classes, scores,
  count), classes and count as float32: they are CAST to the HAL's int32 outputs, classes
  after adding 1 when the HAL includes the background class in the labels (TFLite's start
  at 0 with the first non-background class);
- one batch only (the kernel checks batch size 1): more is declined;
- the output size is max_detections x max_classes_per_detection in both modes, so regular
  NMS (where the HAL output has max_num_detections entries) exports with
  max_classes_per_detection 1, which regular NMS does not read otherwise;
- TFLite keeps scores >= the threshold and suppresses IoU > the threshold, NNAPI keeps
  scores > and suppresses IoU >=: the same on every value not exactly at a threshold (the
  conformance samplers keep away from them).

AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT and GENERATE_PROPOSALS have no TFLite
operator (builtin or registered custom) and are declined as unmapped.
"""

from __future__ import annotations

import numpy as np
from flatbuffers import flexbuffers

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import Node, fb
from nncert.hal.types import OperationType as Op

CUSTOM_CODE = "TFLite_Detection_PostProcess"


def detection_options(*, max_detections: int, max_classes_per_detection: int, detections_per_class: int,
                      use_regular_nms: bool, score_threshold: float, iou_threshold: float, num_classes: int,
                      scale_y: float, scale_x: float, scale_h: float, scale_w: float) -> bytes:
    """The flexbuffer map TFLite_Detection_PostProcess reads its parameters from."""
    b = flexbuffers.Builder()
    with b.Map():
        b.Int("max_detections", int(max_detections))
        b.Int("max_classes_per_detection", int(max_classes_per_detection))
        b.Int("detections_per_class", int(detections_per_class))
        b.Bool("use_regular_nms", bool(use_regular_nms))
        b.Float("nms_score_threshold", float(score_threshold))
        b.Float("nms_iou_threshold", float(iou_threshold))
        b.Int("num_classes", int(num_classes))
        b.Float("y_scale", float(scale_y))
        b.Float("x_scale", float(scale_x))
        b.Float("h_scale", float(scale_h))
        b.Float("w_scale", float(scale_w))
    return bytes(b.Finish())


def _detection_postprocessing(n: Node) -> None:
    g = n.g
    batches, _, classes = n.in_shape("scores")
    if batches != 1:
        raise Unmappable(f"TFLite_Detection_PostProcess takes one batch, this has {batches}")
    regular = bool(n.scalar("use_regular_nms"))
    per = 1 if regular else int(n.scalar("max_classes_per_detection"))
    max_det = int(n.scalar("max_num_detections"))
    options = detection_options(
        max_detections=max_det, max_classes_per_detection=per,
        detections_per_class=int(n.scalar("max_detections_per_class")), use_regular_nms=regular,
        score_threshold=n.scalar("score_threshold"), iou_threshold=n.scalar("iou_threshold"),
        num_classes=classes - 1, scale_y=n.scalar("scale_y"), scale_x=n.scalar("scale_x"),
        scale_h=n.scalar("scale_h"), scale_w=n.scalar("scale_w"))
    d = max_det * per
    boxes, scores = n.out(1), n.out(0)
    labels = g.tensor((1, d), "FLOAT32")
    count = g.tensor((1,), "FLOAT32")
    g.custom(CUSTOM_CODE, [n.t("deltas"), n.t("scores"), n.t("anchors")], [boxes, labels, scores, count],
             options)
    if n.scalar("include_background"):
        labels = g.unary("ADD", labels, extra=[g.const(1.0, np.float32)], options="Add")
    float32, int32 = fb.TensorType.FLOAT32, fb.TensorType.INT32
    g.op("CAST", [labels], [n.out(2)], "Cast", inDataType=float32, outDataType=int32)
    g.op("CAST", [count], [n.out(3)], "Cast", inDataType=float32, outDataType=int32)


MAPPINGS = {Op.DETECTION_POSTPROCESSING: _detection_postprocessing}
