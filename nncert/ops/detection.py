"""Operation records of the detection family (see nncert/ops/README.md):
AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS and
DETECTION_POSTPROCESSING.

Semantics (from the NNAPI operation documentation, the CPU implementation read for the
facts the documentation leaves open):

- **Boxes.** [x1, y1, x2, y2] corners (DETECTION_POSTPROCESSING: [y1, x1, y2, x2] out,
  centre-size [ctr_y, ctr_x, h, w] anchors). Decoding a box with deltas [dx, dy, dw, dh]:
  centre += d * size, size *= exp(d) (DETECTION_POSTPROCESSING divides each delta by its
  scale factor first). AXIS_ALIGNED_BBOX_TRANSFORM and GENERATE_PROPOSALS clip to
  [0, image width] x [0, image height].
- **IoU** = intersection / union of two corner boxes.
- **Hard NMS** (GENERATE_PROPOSALS, DETECTION_POSTPROCESSING): repeatedly take the highest
  score left, drop every remaining box whose IoU with it is >= the threshold; at most
  ``max`` selections (non-positive / negative: unlimited).
- **BOX_WITH_NMS_LIMIT** runs one NMS per class but background class 0, on the boxes with
  score > score_threshold, with a kernel that scales the remaining scores by a factor of
  the IoU (hard: 0 at IoU >= threshold; linear: 1 - IoU there; gaussian: exp(-IoU^2 /
  sigma)) and drops those left below nms_score_threshold; each class keeps at most
  max_detections, the batch keeps the max_detections highest (updated) scores. Outputs are
  grouped by batch (in input order), ordered by class then score within a batch.
- **DETECTION_POSTPROCESSING** regular NMS: the same per-class hard NMS (score >
  score_threshold, max_detections_per_class per class), then the max_num_detections best,
  by score; fast NMS: one hard NMS on each anchor's best non-background score (at most
  max_num_detections anchors), each selected anchor then reporting its
  min(num_classes - 1, max_classes_per_detection) best classes. Outputs are fixed size
  ([batches, max_num_detections], times max_classes_per_detection in fast mode), the
  count output says how many entries of each batch are valid (the rest is zero).

Data-dependent outputs: BOX_WITH_NMS_LIMIT and GENERATE_PROPOSALS output as many boxes as
survive, so their shape rules raise Unknown until every input value is known (then they run
the kernel); DETECTION_POSTPROCESSING's shapes follow from its constant parameters. All four
are judged by ``compare`` hooks rather than element-wise: counts exact; detections matched as
a set per batch (scores within the score type's tolerance, boxes within the box type's,
classes exact), the order among them unspecified; where scores tie, either tie-break is
accepted (the reference is run both ways). Samplers keep every decision away from its
threshold (``_Margins``): scores apart, IoUs away from the IoU threshold, scores away from the
score thresholds, so that a conforming driver has one right answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops import edges
from nncert.ops.base import (
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    fixed,
    from_real,
    quantize,
    scalar_of,
    variants,
)

V = Version
_Q8, _Q8S, _Q16A, _Q16S = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM,
                           T.TENSOR_QUANT16_SYMM)
_F32, _F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
_BOX_QUANT = fixed(0.125, 0)  # QUANT16 boxes and image sizes: scale 0.125, zero point 0
_GRAPHS = ("its output sizes depend on the input values (data-dependent, EXE-4), so no "
           "random graph can give its consumers a fixed shape")
_NO_QUANT_EDGES = tuple(
    edges.Without(name, "scores are drawn on a grid with every selection decision several "
                        "quantisation steps from its threshold; extreme zero points and scales "
                        "would make ties that leave more than one right answer")
    for name in ("quant_zero_point_min", "quant_zero_point_max", "quant_scale_tiny", "quant_scale_ratio"))


# ---------------------------------------------------------------------------------------
# Shared arithmetic: IoU, NMS, and the margins samplers keep from every decision


class _Margins:
    """The closest calls an NMS made: the smallest gap between two scores it compared, and
    between a value and the threshold it was compared with. Samplers redraw until these are
    wide enough for the type's tolerance; None collects nothing (the kernels)."""

    def __init__(self) -> None:
        self.score = math.inf
        self.iou = math.inf
        self.size = math.inf

    def scores(self, a: float, b: float) -> None:
        self.score = min(self.score, abs(a - b))

    def ious(self, a: float, b: float) -> None:
        self.iou = min(self.iou, abs(a - b))

    def sizes(self, a: float, b: float) -> None:
        self.size = min(self.size, abs(a - b))

    def ok(self, score: float = 0.02, iou: float = 0.04, size: float = 0.05) -> bool:
        return self.score > score and self.iou > iou and self.size > size


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two corner boxes (either axis order)."""
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    union = area_a + area_b - inter
    return inter / union if union > 0 else math.nan


def _best(pending: list[int], scores: np.ndarray, tie: int, m: _Margins | None) -> int:
    """The highest score of ``pending``; among equal ones the lowest index (``tie`` 1) or the
    highest (-1): the order is unspecified, so a compare hook accepts either."""
    best = max(pending, key=lambda i: (scores[i], -tie * i))
    if m is not None:
        for i in pending:
            if i != best:
                m.scores(scores[i], scores[best])
    return best


def nms(scores: np.ndarray, boxes: Callable[[int], np.ndarray], candidates: Sequence[int],
        iou_threshold: float, max_out: int, *, kernel: Callable[[float], float] | None = None,
        drop_below: float = -math.inf, tie: int = 1, m: _Margins | None = None) -> list[int]:
    """Greedy NMS over ``candidates`` (indices into ``scores``), best first; ``max_out`` < 1:
    unlimited. Hard (``kernel`` None): drop the boxes with IoU >= ``iou_threshold`` with the
    selected one. Soft: multiply their scores (in place) by ``kernel(IoU)`` and drop those
    then below ``drop_below``."""
    pending = list(candidates)
    selected: list[int] = []
    while pending and (max_out < 1 or len(selected) < max_out):
        best = _best(pending, scores, tie, m)
        pending.remove(best)
        selected.append(best)
        keep = []
        for i in pending:
            overlap = iou(boxes(i), boxes(best))
            if kernel is None:
                if m is not None:
                    m.ious(overlap, iou_threshold)
                if overlap >= iou_threshold:
                    continue
            else:
                scores[i] *= kernel(overlap)
                if m is not None and drop_below > -math.inf:
                    m.scores(scores[i], drop_below)
                if scores[i] < drop_below:
                    continue
            keep.append(i)
        pending = keep
    return selected


def _above(scores: np.ndarray, candidates: Sequence[int], threshold: float, m: _Margins | None) -> list[int]:
    """The candidates with score > threshold."""
    if m is not None:
        for i in candidates:
            m.scores(scores[i], threshold)
    return [i for i in candidates if scores[i] > threshold]


def _by_score(indices: Sequence[int], scores: np.ndarray, tie: int, m: _Margins | None,
              keep: int = -1) -> list[int]:
    """``indices`` by descending score (ties by index, as ``tie`` says), the first ``keep``
    of them (keep < 0: all); margins at the cut, where the order decides what is kept."""
    order = sorted(indices, key=lambda i: (-scores[i], tie * i))
    if 0 <= keep < len(order):
        if m is not None and keep > 0:
            m.scores(scores[order[keep - 1]], scores[order[keep]])
        order = order[:keep]
    return order


def decode(boxes: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Corner boxes [x1, y1, x2, y2] moved by deltas [dx, dy, dw, dh] (any leading shape):
    centre + d * size, size * exp(d)."""
    w = boxes[..., 2] - boxes[..., 0]
    h = boxes[..., 3] - boxes[..., 1]
    cx = boxes[..., 0] + w / 2 + deltas[..., 0] * w
    cy = boxes[..., 1] + h / 2 + deltas[..., 1] * h
    w2 = np.exp(deltas[..., 2]) * w / 2
    h2 = np.exp(deltas[..., 3]) * h / 2
    return np.stack([cx - w2, cy - h2, cx + w2, cy + h2], axis=-1)


def _clip(boxes: np.ndarray, height: float, width: float) -> np.ndarray:
    out = boxes.copy()
    out[..., 0::2] = np.clip(out[..., 0::2], 0.0, width)
    out[..., 1::2] = np.clip(out[..., 1::2], 0.0, height)
    return out


# ---------------------------------------------------------------------------------------
# Judging detections: counts exact, detections matched as a set


def _close(e: np.ndarray, a: np.ndarray, tol: Any) -> bool:
    e = np.asarray(e, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    return bool(np.all(np.abs(a - e) <= tol.atol + tol.rtol * np.abs(e)))


Detection = tuple[Any, np.ndarray, int]  # (raw score, raw box, class)


def _match(expected: Sequence[Detection], actual: Sequence[Detection], score_tol: Any, box_tol: Any,
           where: str) -> list[str]:
    """Each expected detection paired with a distinct actual one of the same class, score
    and box within tolerance; one line for the first that has none."""
    if len(expected) != len(actual):
        return [f"{where}: {len(actual)} detections, expected {len(expected)}"]
    free = list(range(len(actual)))
    for k, (score, box, cls) in enumerate(expected):
        hit = next((j for j in free if actual[j][2] == cls and _close(score, actual[j][0], score_tol)
                    and _close(box, actual[j][1], box_tol)), None)
        if hit is None:
            return [f"{where}: no detection matches expected #{k} (class {cls}, score "
                    f"{float(score):g}, box {[float(x) for x in box]}); got "
                    + ", ".join(f"(class {c}, score {float(s):g}, box {[float(x) for x in b]})"
                                for s, b, c in actual[:6])]
        free.remove(hit)
    return []


def _alternatives(ctx: OpContext, expected: list[np.ndarray],
                  run: Callable[[OpContext, int], list[np.ndarray]]) -> list[list[np.ndarray]]:
    """The golden and the golden with the other tie-break, in the outputs' stored types."""
    other = [from_real(r, o) for r, o in zip(run(ctx, -1), ctx.outputs, strict=True)]
    return [expected, other]


def _tolerances(ctx: OpContext, score_out: int, box_out: int, relaxed: bool) -> tuple[Any, Any]:
    from nncert.testing.criteria import tolerance

    return (tolerance(ctx.outputs[score_out].type, relaxed), tolerance(ctx.outputs[box_out].type, relaxed))


def _first_accepting(candidates: list[list[np.ndarray]],
                     judge: Callable[[list[np.ndarray]], list[str]]) -> list[str]:
    problems: list[str] = []
    for k, cand in enumerate(candidates):
        found = judge(cand)
        if not found:
            return []
        if k == 0:
            problems = found
    return problems


# ---------------------------------------------------------------------------------------
# Sampling helpers


def _stored(x: np.ndarray, t: T, scale: float = 0.0, zero_point: int = 0) -> np.ndarray:
    """``x`` as the type stores it, back in real terms (what the kernel will see)."""
    if t.is_quant:
        o = Operand(t, tuple(np.shape(x)), scale, zero_point)
        return (quantize(x, o).astype(np.float64) - zero_point) * scale
    return np.asarray(x, dtype=dtype_of(t)).astype(np.float64)


def _grid_scores(s: SampleContext, n: int, lo: float = 0.1, hi: float = 0.9) -> tuple[np.ndarray, float]:
    """``n`` distinct scores in [lo, hi], evenly apart (shuffled, a little jitter), and the
    spacing between neighbours."""
    step = (hi - lo) / max(n, 1)
    jitter = np.array([s.draw.float(-step / 8, step / 8) for _ in range(n)])
    values = lo + step * (np.arange(n) + 0.5) + jitter
    return values[s.draw.rng.permutation(n)], step


def _threshold_between(s: SampleContext, values: np.ndarray, lo: float, hi: float) -> float:
    """A threshold in [lo, hi] halfway between two neighbouring ``values`` (or below all)."""
    v = np.sort(values[(values > lo) & (values < hi)])
    if v.size < 2:
        return lo
    k = s.draw.int(0, v.size - 2)
    return float((v[k] + v[k + 1]) / 2)


def _score_quant(s: SampleContext, t: T) -> tuple[float, int]:
    """Scale and zero point of quantised scores in [0, 1]: ~1/256 per step."""
    if not t.is_quant:
        return 0.0, 0
    zp = s.draw.int(0, 10)
    return float(np.float32(1 / 250)), zp - (128 if t is _Q8S else 0)


MAX_TRIES = 60


def _draw_until(what: str, attempt: Callable[[], bool]) -> None:
    for _ in range(MAX_TRIES):
        if attempt():
            return
    raise ShapeError(f"{what}: no draw kept its decisions away from the thresholds in {MAX_TRIES} tries")


def _scalar_value(s: SampleContext, name: str, x: float) -> float:
    """A float parameter as its scalar type stores it."""
    return float(np.float16(x)) if s.type(name) is T.FLOAT16 else float(np.float32(x))


# ---------------------------------------------------------------------------------------
# DETECTION_POSTPROCESSING


def _dp_decode(deltas: np.ndarray, anchors: np.ndarray, sy: float, sx: float, sh: float,
               sw: float) -> np.ndarray:
    """Centre-size anchors [ctr_y, ctr_x, h, w] moved by [dy, dx, dh, dw] / scales, as corner
    boxes [y1, x1, y2, x2]."""
    yc = anchors[:, 0] + anchors[:, 2] * deltas[..., 0] / sy
    xc = anchors[:, 1] + anchors[:, 3] * deltas[..., 1] / sx
    h2 = anchors[:, 2] * np.exp(deltas[..., 2] / sh) / 2
    w2 = anchors[:, 3] * np.exp(deltas[..., 3] / sw) / 2
    return np.stack([yc - h2, xc - w2, yc + h2, xc + w2], axis=-1)


_DP_PARAMS = ("scale_y", "scale_x", "scale_h", "scale_w", "use_regular_nms", "max_num_detections",
              "max_classes_per_detection", "max_detections_per_class", "score_threshold",
              "iou_threshold", "include_background")


def _dp_params(ctx: OpContext) -> dict[str, Any]:
    p = {k: ctx.value(k) for k in _DP_PARAMS}
    for k in ("scale_y", "scale_x", "scale_h", "scale_w"):
        if not p[k] > 0:
            raise ShapeError(f"{k} {p[k]:g} must be positive")
    for k in ("score_threshold", "iou_threshold"):
        if not p[k] >= 0:
            raise ShapeError(f"{k} {p[k]:g} must not be negative")
    if p["max_num_detections"] < 1:
        raise ShapeError(f"max_num_detections {p['max_num_detections']} must be positive")
    if p["use_regular_nms"] and p["max_detections_per_class"] < 1:
        raise ShapeError(f"max_detections_per_class {p['max_detections_per_class']} must be positive "
                         f"with regular NMS")
    if not p["use_regular_nms"] and p["max_classes_per_detection"] < 1:
        raise ShapeError(f"max_classes_per_detection {p['max_classes_per_detection']} must be positive "
                         f"with fast NMS")
    return p


def _dp_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    b, a, c = ctx.dims("scores")
    db, da, length = ctx.dims("deltas")
    na, four = ctx.dims("anchors")
    if (db, da) != (b, a):
        raise ShapeError(f"deltas {[db, da, length]} do not match scores {[b, a, c]}")
    if (na, four) != (a, 4):
        raise ShapeError(f"anchors {[na, four]} must be [{a}, 4]")
    if c < 2:
        raise ShapeError(f"scores need a background and at least one class, have {c} classes")
    if length < 4:
        raise ShapeError(f"the box encoding has {length} values, at least 4 needed")
    p = _dp_params(ctx)
    d = p["max_num_detections"] * (1 if p["use_regular_nms"] else p["max_classes_per_detection"])
    if b * d * 4 > (1 << 24):
        raise ShapeError(f"max_num_detections {p['max_num_detections']} asks for too large outputs")
    return [(b, d), (b, d, 4), (b, d), (b,)]


def dp_reference(scores: np.ndarray, deltas: np.ndarray, anchors: np.ndarray, p: dict[str, Any],
                 tie: int = 1, m: _Margins | None = None) -> list[np.ndarray]:
    """DETECTION_POSTPROCESSING on real arrays: (scores, boxes, classes, counts)."""
    b_n, a_n, c_n = scores.shape
    regular = bool(p["use_regular_nms"])
    d = p["max_num_detections"] * (1 if regular else p["max_classes_per_detection"])
    out_s, out_b = np.zeros((b_n, d)), np.zeros((b_n, d, 4))
    out_c, count = np.zeros((b_n, d), np.int32), np.zeros(b_n, np.int32)
    offset = 0 if p["include_background"] else 1
    for b in range(b_n):
        boxes = _dp_decode(deltas[b, :, :4], anchors, p["scale_y"], p["scale_x"], p["scale_h"], p["scale_w"])
        flat = scores[b].reshape(-1).copy()
        found: list[tuple[float, int, int]] = []  # (score, anchor, class)
        if regular:
            picked: list[int] = []
            for c in range(1, c_n):
                cand = _above(flat, range(c, a_n * c_n, c_n), p["score_threshold"], m)
                picked += nms(flat, lambda i, bx=boxes: bx[i // c_n], cand, p["iou_threshold"],
                              p["max_detections_per_class"], tie=tie, m=m)
            for i in _by_score(picked, flat, tie, m, p["max_num_detections"]):
                found.append((flat[i], i // c_n, i % c_n))
        else:
            best = scores[b, :, 1:].max(axis=1)
            cand = _above(best, range(a_n), p["score_threshold"], m)
            per = min(c_n - 1, p["max_classes_per_detection"])
            for a in nms(best.copy(), lambda i, bx=boxes: bx[i], cand, p["iou_threshold"],
                         p["max_num_detections"], tie=tie, m=m):
                row = scores[b, a]
                for c in _by_score(range(1, c_n), row, tie, m, per):
                    found.append((row[c], a, c))
        for k, (sc, a, c) in enumerate(found):
            out_s[b, k], out_b[b, k], out_c[b, k] = sc, boxes[a], c - offset
        count[b] = len(found)
    return [out_s, out_b, out_c, count]


def _dp_run(ctx: OpContext, tie: int = 1) -> list[np.ndarray]:
    return dp_reference(ctx.value("scores"), ctx.value("deltas"), ctx.value("anchors"), _dp_params(ctx), tie)


def _dp_kernel(ctx: OpContext) -> list[np.ndarray]:
    return _dp_run(ctx)


def _dp_compare(ctx: OpContext, expected: list[np.ndarray], actual: list[np.ndarray],
                relaxed: bool) -> list[str]:
    score_tol, box_tol = _tolerances(ctx, 0, 1, relaxed)

    def judge(exp: list[np.ndarray]) -> list[str]:
        for b in range(exp[3].shape[0]):
            n, got = int(exp[3][b]), int(actual[3][b])
            if got != n:
                return [f"DETECTION_POSTPROCESSING batch {b}: {got} detections reported, expected {n}"]
            problems = _match([(exp[0][b, k], exp[1][b, k], int(exp[2][b, k])) for k in range(n)],
                              [(actual[0][b, k], actual[1][b, k], int(actual[2][b, k])) for k in range(n)],
                              score_tol, box_tol, f"DETECTION_POSTPROCESSING batch {b}")
            if problems:
                return problems
        return []

    return _first_accepting(_alternatives(ctx, expected, _dp_run), judge)


def _dp_sampler(edge: str = ""):
    def sample(s: SampleContext) -> None:
        t = s.variant.primary
        b = 1 if s.draw.bool(0.7) else 2
        a_n, c_n = s.draw.int(3, 6), s.draw.int(3 if edge == "fast_nms_ties" else 2, 4)
        length = 4 if s.draw.bool(0.7) else s.draw.int(5, 6)
        regular = s.draw.bool() if edge != "fast_nms_ties" else False
        scales = [_scalar_value(s, k, s.draw.choice((1.0, 5.0, 10.0))) for k in ("scale_y", "scale_x")] + \
                 [_scalar_value(s, k, s.draw.choice((1.0, 5.0))) for k in ("scale_h", "scale_w")]
        params: dict[str, Any] = dict(zip(("scale_y", "scale_x", "scale_h", "scale_w"), scales, strict=True))
        params.update(use_regular_nms=regular, include_background=s.draw.bool())
        params["max_num_detections"] = s.draw.int(1, a_n + 1) if edge != "one_detection" else 1
        params["max_classes_per_detection"] = 1 if edge == "fast_nms_ties" else s.draw.int(1, c_n)
        params["max_detections_per_class"] = s.draw.int(1, a_n)

        def attempt() -> bool:
            anchors = np.stack([s.draw.array((a_n,), 0.5, 3.0), s.draw.array((a_n,), 0.5, 3.0),
                                s.draw.array((a_n,), 0.5, 1.5), s.draw.array((a_n,), 0.5, 1.5)], axis=1)
            deltas = s.draw.array((b, a_n, length), -0.5, 0.5) * np.array(scales + [1.0] * (length - 4))
            raw, _ = _grid_scores(s, b * a_n * c_n, 0.05, 0.95)
            scores = _stored(raw.reshape(b, a_n, c_n), t)
            judged = scores  # the decisions whose margins are checked
            if edge == "fast_nms_ties":
                # every class of an anchor scores its best: which is reported (first, or at
                # all when fewer are) is unspecified; the anchors' NMS is as without the tie
                scores = np.repeat(scores[:, :, 1:].max(axis=2, keepdims=True), c_n - 1, axis=2)
                scores = np.concatenate([judged[:, :, :1], scores], axis=2)
            anchors_s, deltas_s = _stored(anchors, t), _stored(deltas, t)
            if edge == "all_below_threshold":
                thr = float(scores.max()) + 0.02
            else:
                thr = _threshold_between(s, scores[:, :, 1:].reshape(-1), 0.05, 0.5)
            params["score_threshold"] = _scalar_value(s, "score_threshold", thr)
            params["iou_threshold"] = _scalar_value(s, "iou_threshold", s.draw.float(0.2, 0.7))
            m = _Margins()
            out = dp_reference(judged, deltas_s, anchors_s, params, 1, m)
            if not m.ok(iou=0.04):
                return False
            if edge in ("all_below_threshold",) and out[3].any():
                return False
            if edge == "one_detection" and not out[3].all():
                return False
            s.tensor("scores", (b, a_n, c_n), scores.astype(dtype_of(t)))
            s.tensor("deltas", (b, a_n, length), deltas_s.astype(dtype_of(t)))
            s.tensor("anchors", (a_n, 4), anchors_s.astype(dtype_of(t)))
            return True

        _draw_until("DETECTION_POSTPROCESSING", attempt)
        for k, v in params.items():
            s.scalar(k, v)

    return sample


_DP_SCALAR = scalar_of("T")
_DP_SIG = Signature(
    inputs=(Arg("scores", ranks=(3,)), Arg("deltas", ranks=(3,)), Arg("anchors", ranks=(2,)),
            Arg("scale_y", _DP_SCALAR), Arg("scale_x", _DP_SCALAR), Arg("scale_h", _DP_SCALAR),
            Arg("scale_w", _DP_SCALAR), Arg("use_regular_nms", T.BOOL), Arg("max_num_detections", T.INT32),
            Arg("max_classes_per_detection", T.INT32), Arg("max_detections_per_class", T.INT32),
            Arg("score_threshold", _DP_SCALAR), Arg("iou_threshold", _DP_SCALAR),
            Arg("include_background", T.BOOL)),
    outputs=(Arg("scores_out"), Arg("boxes_out"), Arg("classes_out", T.TENSOR_INT32),
             Arg("count", T.TENSOR_INT32)))


def _edge(name: str, doc: str, sample: Callable[[SampleContext], None]) -> edges.Edge:
    return edges.Edge(name, "detection", doc, sample=sample)


DETECTION_POSTPROCESSING = OpRecord(
    Op.DETECTION_POSTPROCESSING, (_DP_SIG,), tuple(variants(V.V1_2, _F32, _F16)),
    _dp_kernel, _dp_shape, _dp_sampler(), criterion="relaxed", compare=_dp_compare, graphs=_GRAPHS,
    edges=(_edge("all_below_threshold", "every score below score_threshold: no detection, count 0",
                 _dp_sampler("all_below_threshold")),
           _edge("one_detection", "max_num_detections 1: only the best detection survives",
                 _dp_sampler("one_detection")),
           _edge("fast_nms_ties", "fast NMS with every non-background class of an anchor scoring the "
                                  "same: which of them is reported is unspecified",
                 _dp_sampler("fast_nms_ties"))),
    doc="Decode centre-size anchors with scaled deltas, then regular (per-class) or fast hard NMS; "
        "fixed-size outputs with a count per batch.")


RECORDS: list[OpRecord] = [DETECTION_POSTPROCESSING]
