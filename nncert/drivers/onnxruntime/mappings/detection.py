"""ONNX Runtime mappings of the detection family: declined, each with the reason.

- DETECTION_POSTPROCESSING, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS: ONNX's only suppression
  operator, NonMaxSuppression, returns [batch, class, box] index triples of a
  class-agnostic-per-class hard NMS; it has no soft (linear / gaussian) kernel, no score
  update, no "suppress at IoU >= threshold" (it suppresses at IoU > threshold), and no
  per-batch cap across classes. A composition around it (TopK, GatherND, Concat, padding to
  a fixed size for DETECTION_POSTPROCESSING) would change the tie and threshold semantics
  and need data-dependent shapes through several operators; it is not written yet, so they
  are declined rather than approximated.
- AXIS_ALIGNED_BBOX_TRANSFORM is expressible as elementwise arithmetic (Exp, Mul, Add,
  Gather of each box's image size by batch index, Min/Max clipping), but the composition is
  not written yet: declined.
"""

from __future__ import annotations

from nncert.drivers.compiled import Unmappable
from nncert.drivers.onnxruntime.export import Emit, Mapping
from nncert.hal.types import OperationType as Op

_NMS = ("ONNX NonMaxSuppression returns selected indices of a per-class hard NMS that "
        "suppresses at IoU > threshold; {what} is not expressed as a composition (yet)")


def _decline(reason: str) -> Mapping:
    def fn(e: Emit) -> None:
        raise Unmappable(reason)

    return Mapping(fn)


MAPPINGS = {
    Op.DETECTION_POSTPROCESSING: _decline(_NMS.format(
        what="box decoding, fixed-size padded outputs with counts and fast (best-class) NMS")),
    Op.BOX_WITH_NMS_LIMIT: _decline(_NMS.format(
        what="soft (linear / gaussian) score updates, the per-image cap across classes and outputs "
             "grouped by batch")),
    Op.GENERATE_PROPOSALS: _decline(_NMS.format(
        what="anchor tiling, decoding, clipping, min_size filtering and per-image proposals")),
    Op.AXIS_ALIGNED_BBOX_TRANSFORM: _decline(
        "the elementwise composition (Exp, Mul, Add, Gather of image sizes by batch index, clipping) "
        "is not written yet"),
}
