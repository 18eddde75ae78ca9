"""TFLite importer mappings of the detection family: the SSD post-processing custom operator
"TFLite_Detection_PostProcess" becomes DETECTION_POSTPROCESSING.

Its flexbuffer options name the parameters (scales, thresholds, limits, use_regular_nms,
num_classes without the background); its outputs are (boxes, classes, scores, count) with
classes and count as float32, so the HAL int32 outputs are CAST to float32. TFLite labels
start at 0 with the first non-background class: include_background is false. What the HAL
operation cannot express is declined: quantised inputs (the HAL takes float only), class
predictions without a background column (the HAL's class 0 is always background), regular
NMS with max_classes_per_detection other than 1 (TFLite's outputs are then longer than the
HAL's max_num_detections).
"""

from __future__ import annotations

from typing import Any

from flatbuffers import flexbuffers

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import F32, I32, Node, Spec, Unmapped


def _options(n: Node) -> dict[str, Any]:
    raw = getattr(n.op, "customOptions", None)
    if raw is None or len(raw) == 0:
        raise Unmapped("TFLite_Detection_PostProcess without custom options")
    try:
        opts = flexbuffers.Loads(bytes(bytearray(raw)))
    except Exception as e:  # a malformed file: one line naming what is wrong, no traceback
        raise Unmapped(f"TFLite_Detection_PostProcess options are not a flexbuffer map: {e}") from None
    if not isinstance(opts, dict):
        raise Unmapped("TFLite_Detection_PostProcess options are not a flexbuffer map")
    return opts


def _detection_postprocess(n: Node) -> None:
    g = n.g
    opts = _options(n)
    try:
        max_det = int(opts["max_detections"])
        per = int(opts["max_classes_per_detection"])
        num_classes = int(opts["num_classes"])
        iou, score = float(opts["nms_iou_threshold"]), float(opts["nms_score_threshold"])
        scales = [float(opts[k]) for k in ("y_scale", "x_scale", "h_scale", "w_scale")]
    except (KeyError, TypeError, ValueError) as e:
        raise Unmapped(f"TFLite_Detection_PostProcess option missing or malformed: {e}") from None
    regular = bool(opts.get("use_regular_nms", False))
    per_class = int(opts.get("detections_per_class", 100))
    boxes, scores, anchors = n.x(0), n.x(1), n.x(2)
    for k, x in enumerate((boxes, scores, anchors)):
        if g.spec(x).type is not T.TENSOR_FLOAT32:
            raise Unmapped(f"input {k} is {g.spec(x).type.name}: DETECTION_POSTPROCESSING takes float only")
    classes = g.dims(scores)[-1]
    if classes != num_classes + 1:
        raise Unmapped(f"class predictions have {classes} columns for num_classes {num_classes}: the HAL "
                       f"needs exactly one background column first")
    if regular and per != 1:
        raise Unmapped(f"regular NMS with max_classes_per_detection {per}: TFLite's outputs then have "
                       f"{max_det * per} rows, the HAL's {max_det}")
    ins = [scores, boxes, anchors, *(g.real(s, scores) for s in scales), g.flag(regular), g.i32(max_det),
           g.i32(per), g.i32(per_class), g.real(score, scores), g.real(iou, scores), g.flag(False)]
    out_scores, out_boxes, out_classes, count = g.op(Op.DETECTION_POSTPROCESSING, ins, [F32, F32, I32, I32])
    n.bind(0, out_boxes)
    n.bind(1, g.op(Op.CAST, [out_classes], [Spec(T.TENSOR_FLOAT32)])[0])
    n.bind(2, out_scores)
    n.bind(3, g.op(Op.CAST, [count], [Spec(T.TENSOR_FLOAT32)])[0])


MAPPINGS = {"CUSTOM(TFLite_Detection_PostProcess)": _detection_postprocess}
