"""ONNX mappings of the regions family (nncert/ops/regions.py).

- ROI_ALIGN is RoiAlign (opset 16) with coordinate_transformation_mode "output_half_pixel":
  no half-pixel shift of the box, a box under one cell stretched to one, the adaptive
  sampling count ceil(bin size), points at the centres of a regular grid in each bin, a
  point past the last row read from the last row, the average of all points: Android's
  definition, except that RoiAlign adds 0 for a point past the border where Android reads
  the last row or column: a box start past the last row or column is moved onto it, which
  gives Android's values (see ``_roi_align``). (The default "half_pixel" shifts boxes by half
  a cell and does not stretch small ones.) Different sampling counts per axis are a RoiAlign
  of sh x sw times the bins, one point each, and an AveragePool of sh x sw; an adaptive count
  on one axis only is declined. Batch indices are int64, so they are cast.
- ROI_POOLING is MaxRoiPool, whose boxes are [batch, x1, y1, x2, y2] rows in float: the
  rounding (half away from zero), the inclusive box end, the floor / ceil bin borders and
  the 0 of an empty bin are Android's.
- Both: boxes are multiplied by 1 / ratio per axis before the operator (spatial_scale 1), as
  Android scales them, so the height and width ratios may differ.
- RANDOM_MULTINOMIAL is Multinomial, which samples from unnormalised log-probabilities
  with ONNX Runtime's own generator, seeded by a float attribute made from the two seed
  values (so the seeds must be constants); its output is judged statistically.
- HEATMAP_MAX_KEYPOINT has no ONNX operator: declined.

Quantised data is dequantised (QDQ, the framework's), quant16 boxes are their stored values
times 1/8 (Cast and Mul, exact).
"""

from __future__ import annotations

import numpy as np

from nncert.drivers.compiled import Unmappable
from nncert.drivers.onnxruntime.export import Emit, Mapping, _tensor_proto_type
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op


def _boxes(e: Emit) -> str:
    """The rois as float32 in feature-map coordinates: times 1 / ratio per axis, as Android
    computes them (so spatial_scale is 1); quant16 boxes are their stored values times 1/8."""
    o = e.operand("rois")
    if o.type is T.TENSOR_QUANT16_ASYMM:
        x = e.node("Mul", [e.node("Cast", [e.raw("rois")], to=_tensor_proto_type(np.float32)),
                           e.const(o.scale, np.float32)])
    else:
        x = e.val("rois")
    hr, wr = float(e.value("height_ratio")), float(e.value("width_ratio"))
    scale = np.float32(1) / np.float32([wr, hr, wr, hr])
    return e.node("Mul", [x, e.const(scale.reshape(1, 4), np.float32)])


def _roi_align(e: Emit) -> None:
    sh, sw = int(e.value("height_samples")), int(e.value("width_samples"))
    oh, ow = int(e.value("output_height")), int(e.value("output_width"))
    if sh != sw and 0 in (sh, sw):
        raise Unmappable(f"ROI_ALIGN: ONNX RoiAlign has one sampling_ratio; an adaptive one on one axis "
                         f"only (height_samples {sh}, width_samples {sw}) depends on each box")
    index = e.node("Cast", [e.raw("batch_index")], to=_tensor_proto_type(np.int64))
    # A box narrower than a cell that starts past the last column is stretched past the
    # border: Android reads the last column at every point there, RoiAlign adds 0 for points
    # beyond the border. Starting such a box at the last column gives Android's result (every
    # point reads the last column, the box is still one cell wide); other boxes are unchanged.
    _, h, w, _ = e.dims("input")
    top = np.finfo(np.float32).max
    rois = e.node("Min", [_boxes(e), e.const([[w - 1, h - 1, top, top]], np.float32)])
    x = e.val("input", "nchw")
    attrs = dict(coordinate_transformation_mode="output_half_pixel", mode="avg", spatial_scale=1.0)
    if sh == sw:
        y = e.node("RoiAlign", [x, rois, index], output_height=oh, output_width=ow, sampling_ratio=sh,
                   **attrs)
    else:
        # sh x sw sub-bins of one point each (at Android's points), averaged per bin
        y = e.node("RoiAlign", [x, rois, index], output_height=oh * sh, output_width=ow * sw,
                   sampling_ratio=1, **attrs)
        y = e.node("AveragePool", [y], kernel_shape=[sh, sw], strides=[sh, sw])
    e.emit(y, "nchw")


def _roi_pooling(e: Emit) -> None:
    index = e.node("Cast", [e.raw("batch_index")], to=_tensor_proto_type(np.float32))
    index = e.node("Unsqueeze", [index, e.const([1])])
    rois = e.node("Concat", [index, _boxes(e)], axis=1)
    y = e.node("MaxRoiPool", [e.val("input", "nchw"), rois],
               pooled_shape=[int(e.value("output_height")), int(e.value("output_width"))], spatial_scale=1.0)
    e.emit(y, "nchw")


def _multinomial(e: Emit) -> None:
    seeds = [int(v) & 0xFFFF for v in np.asarray(e.value("seeds")).reshape(-1)]
    # a float attribute: 24 bits of the two seeds, exactly representable
    seed = float((seeds[0] << 8 ^ seeds[1]) & 0xFFFFFF)
    y = e.node("Multinomial", [e.val("input")], dtype=_tensor_proto_type(np.int32),
               sample_size=int(e.value("samples")), seed=seed)
    e.g.bind_output(y, e.op.outputs[0])


def _heatmap(e: Emit) -> None:
    raise Unmappable("HEATMAP_MAX_KEYPOINT: ONNX has no operator for it (arg max, a 3x3 quadratic fit "
                     "and the box mapping would need a composition nncert does not write)")


MAPPINGS = {
    Op.ROI_ALIGN: Mapping(_roi_align),
    Op.ROI_POOLING: Mapping(_roi_pooling),
    Op.RANDOM_MULTINOMIAL: Mapping(_multinomial),
    Op.HEATMAP_MAX_KEYPOINT: Mapping(_heatmap),
}
