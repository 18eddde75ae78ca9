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
    same_as,
    scalar_of,
    var,
    variant,
    variants,
)

V = Version
_Q8, _Q8S, _Q16A, _Q16S = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM,
                           T.TENSOR_QUANT16_SYMM)
_F32, _F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
_BOX_QUANT = fixed(0.125, 0)  # QUANT16 boxes and image sizes: scale 0.125, zero point 0
_GRAPHS = ("its output sizes depend on the input values (data-dependent, EXE-4), so no "
           "random graph can give its consumers a fixed shape")


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
        iou_threshold: float, max_out: int | None, *, kernel: Callable[[float], float] | None = None,
        drop_below: float = -math.inf, iou_decides: bool = True, tie: int = 1,
        m: _Margins | None = None) -> list[int]:
    """Greedy NMS over ``candidates`` (indices into ``scores``), best first, at most
    ``max_out`` (None: unlimited). Hard (``kernel`` None): drop the boxes with IoU >=
    ``iou_threshold`` with the selected one. Soft: multiply their scores (in place) by
    ``kernel(IoU)`` and drop those then below ``drop_below`` (``iou_decides``: the kernel
    steps at ``iou_threshold``, so IoUs near it are close calls)."""
    pending = list(candidates)
    selected: list[int] = []
    while pending and (max_out is None or len(selected) < max_out):
        best = _best(pending, scores, tie, m)
        pending.remove(best)
        selected.append(best)
        keep = []
        for i in pending:
            overlap = iou(boxes(i), boxes(best))
            if m is not None and iou_decides:
                m.ious(overlap, iou_threshold)
            if kernel is None:
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


def _v(ctx: OpContext, name: str) -> Any:
    """An input as the kernels here read it, whichever form the caller bound: scalars as
    numbers, quantised tensors as real values, float tensors as float64 (a shape rule may be
    handed stored values)."""
    v = ctx.value(name)
    o = ctx.operand(name)
    if o.type.is_scalar:
        return np.asarray(v).item()
    arr = np.asarray(v)
    if o.type.is_quant and arr.dtype.kind in "iu":
        return (arr.astype(np.float64) - o.zero_point) * o.scale
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


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


def _quant_mode(s: SampleContext) -> str:
    """For a shared quantisation edge (``edges.QUANT``), which: "min" / "max" (zero points
    at the type's extremes, set before the draw so that its margins hold) or "scale" (scales
    the edge draws after the sampler, 1e-7..1: only what is scale-invariant may decide)."""
    e = s.edge
    if e is None or e.family != "quant":
        return ""
    return {"quant_zero_point_min": "min", "quant_zero_point_max": "max"}.get(e.name, "scale")


def _raw_scores(s: SampleContext, t: T, n: int, mode: str, scale: float, zp: int) -> tuple[np.ndarray, int]:
    """Under a quantisation edge: ``n`` distinct stored scores several steps apart, never at
    the zero point (their order holds whatever scale the edge picks), and the zero point."""
    lo, hi = t.quant_range
    zp = lo if mode == "min" else hi if mode == "max" else zp
    step = (hi - lo) // (n + 1)
    raw = lo + step * (1 + s.draw.rng.permutation(n))
    raw = np.where(raw == zp, raw + 1, raw)
    return raw.astype(dtype_of(t)), zp


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
    p = {k: _v(ctx, k) for k in _DP_PARAMS}
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
    return dp_reference(_v(ctx, "scores"), _v(ctx, "deltas"), _v(ctx, "anchors"), _dp_params(ctx), tie)


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
                thr = float(scores.max()) + 0.03
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




# ---------------------------------------------------------------------------------------
# AXIS_ALIGNED_BBOX_TRANSFORM


def _batch_index(batches: np.ndarray, n_images: int) -> None:
    bad = [int(x) for x in np.asarray(batches).reshape(-1) if not 0 <= int(x) < n_images]
    if bad:
        raise ShapeError(f"batch index {bad[0]} is outside the {n_images} images of image_info")


def _valid_boxes(boxes: np.ndarray, name: str) -> None:
    b = boxes.reshape(-1, 4)
    bad = np.nonzero((b[:, 0] > b[:, 2]) | (b[:, 1] > b[:, 3]))[0]
    if bad.size:
        raise ShapeError(f"{name} box {int(bad[0])} has x1 > x2 or y1 > y2: {b[bad[0]].tolist()}")


def _aabt_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    r, four = ctx.dims("rois")
    dr, dc = ctx.dims("deltas")
    (br,) = ctx.dims("batches")
    images, two = ctx.dims("image_info")
    if four != 4 or dc % 4 or dc == 0 or dr != r or br != r:
        raise ShapeError(f"rois {[r, four]}, deltas {[dr, dc]} and batches {[br]} must be [n, 4], "
                         f"[n, 4 * classes] and [n]")
    if two != 2 or images < 1:
        raise ShapeError(f"image_info {[images, two]} must be [images >= 1, 2]")
    return [(r, dc)]


def aabt_reference(rois: np.ndarray, deltas: np.ndarray, batches: np.ndarray, info: np.ndarray) -> np.ndarray:
    """AXIS_ALIGNED_BBOX_TRANSFORM on real arrays."""
    r = rois.shape[0]
    out = decode(rois[:, None, :], deltas.reshape(r, -1, 4))
    idx = np.asarray(batches, dtype=np.intp)
    h, w = info[idx, 0][:, None], info[idx, 1][:, None]
    out[..., 0::2] = np.clip(out[..., 0::2], 0.0, w[..., None])
    out[..., 1::2] = np.clip(out[..., 1::2], 0.0, h[..., None])
    return out.reshape(r, -1)


def _aabt_kernel(ctx: OpContext) -> list[np.ndarray]:
    rois, batches, info = _v(ctx, "rois"), _v(ctx, "batches"), _v(ctx, "image_info")
    _batch_index(batches, info.shape[0])
    _valid_boxes(rois, "rois")
    return [aabt_reference(rois, _v(ctx, "deltas"), batches, info)]


def _random_boxes(s: SampleContext, n: int, extent: float, lo: float = 0.5, hi: float = 4.0) -> np.ndarray:
    """``n`` corner boxes [x1, y1, x2, y2] of sides in [lo, hi] inside [0, extent]^2."""
    w, h = s.draw.array((n,), lo, hi), s.draw.array((n,), lo, hi)
    x = s.draw.array((n,), 0, 1) * np.maximum(extent - w, 0)
    y = s.draw.array((n,), 0, 1) * np.maximum(extent - h, 0)
    return np.stack([x, y, x + w, y + h], axis=1)


def _delta_quant(t: T) -> tuple[float, int]:
    """Scale and zero point of quantised deltas in about [-2, 2]."""
    return 1 / 64, (0 if t is _Q8S else 128)


#: Detectron's (and Caffe2's) clamp of dw and dh before exp: log(1000 / 16). Android's CPU
#: kernel (bboxTransformFloat32 in GenerateProposals.cpp) has no such clamp: exp(dw) as it
#: is, the box then clipped to its image. The large_deltas edge draws dw past it.
DETECTRON_DELTA_CLIP = math.log(1000.0 / 16.0)


def _aabt_deltas(s: SampleContext, rois: np.ndarray, info: np.ndarray, batches: np.ndarray,
                 c: int, edge: str) -> np.ndarray:
    """Real deltas [r, 4 * c] for ``edge`` (see _aabt_sample)."""
    r = rois.shape[0]
    deltas = s.draw.array((r, c, 4), -0.6, 0.6)
    if edge == "large_deltas":  # dw well past the clamp, dh past it either way
        deltas[..., 2] = s.draw.array((r, c), 4.5, 5.0)
        deltas[..., 3] = s.draw.array((r, c), 4.5, 5.0) * np.where(s.draw.integers((r, c), 0, 1), 1, -1)
        deltas[..., :2] = s.draw.array((r, c, 2), -0.1, 0.1)
    elif edge == "past_border":
        # Class 0 centred on the top-left corner, class 1 on the bottom-right one (both clipped
        # in half), class 2 wholly right of and above the image (clipped to a zero-size box).
        w, h = rois[:, 2] - rois[:, 0], rois[:, 3] - rois[:, 1]
        cx, cy = rois[:, 0] + w / 2, rois[:, 1] + h / 2
        ih, iw = info[batches, 0], info[batches, 1]
        deltas[..., 2:] = s.draw.array((r, c, 2), -0.3, 0.3)
        w2, h2 = w[:, None] * np.exp(deltas[..., 2]), h[:, None] * np.exp(deltas[..., 3])
        to_x = np.stack([np.zeros(r), iw, iw], axis=1) + np.array([0.0, 0.0, 0.75]) * w2
        to_y = np.stack([np.zeros(r), ih, np.zeros(r)], axis=1) - np.array([0.0, 0.0, 0.75]) * h2
        deltas[..., 0] = (to_x - cx[:, None]) / w[:, None]
        deltas[..., 1] = (to_y - cy[:, None]) / h[:, None]
    return deltas.reshape(r, 4 * c)


def _aabt_sample(s: SampleContext, edge: str = "") -> None:
    """``edge``: "large_deltas" (dw, |dh| in [4.5, 5] on boxes of side 0.5..1 in the middle of
    a 160 x 160 image: exp(dw) makes them 90..148 times wider, still inside the image, where
    the Detectron clamp would stop at 62.5); "past_border" (three classes of deltas that move
    each box onto the top-left corner, onto the bottom-right one and wholly past the right
    and top borders); "zero_size_boxes" (rois with x1 = x2, y1 = y2 or both: zero stays zero
    whatever dw, dh, a "+1" width convention does not)."""
    rt, dt = s.type("rois"), s.type("deltas")
    r, c, images = s.draw.int(1, 4), s.draw.int(1, 3), s.draw.int(1, 2)
    if edge == "past_border":
        c = 3
    info = np.array([[s.draw.int(4, 10), s.draw.int(4, 10)] for _ in range(images)], dtype=np.float64)
    batches = np.sort(np.array([s.draw.int(0, images - 1) for _ in range(r)]))
    if edge == "large_deltas":
        info[:] = 160.0
        boxes = _random_boxes(s, r, 8.0, 0.5, 1.0) + 76.0
    elif edge == "past_border":
        boxes = _random_boxes(s, r, 4.0, 1.5, 3.0)
    else:  # zero-size boxes inside every image (4 x 4 at least): none clipped
        boxes = _random_boxes(s, r, 4.0 if edge == "zero_size_boxes" else 8.0)
    if edge == "zero_size_boxes":
        which = s.draw.integers((r,), 0, 2)  # 0: no width, 1: no height, 2: neither side
        which[0] = 2
        boxes[which != 1, 2] = boxes[which != 1, 0]
        boxes[which != 0, 3] = boxes[which != 0, 1]
    rois = _stored(boxes, rt, 0.125)
    # Deltas of the edges run to about 8: a quantised type then needs a step of 1/16.
    dscale, dzp = _delta_quant(dt) if not edge else (1 / 16, 0 if dt is _Q8S else 128)
    deltas = _stored(_aabt_deltas(s, rois, info, batches, c, edge), dt, dscale, dzp)
    for name, value in (("rois", rois), ("image_info", info)):
        s.tensor(name, value.shape, value, scale=0.125 if rt.is_quant else None,
                 zero_point=0 if rt.is_quant else None)
    s.tensor("deltas", deltas.shape, deltas, scale=dscale if dt.is_quant else None,
             zero_point=dzp if dt.is_quant else None)
    s.tensor("batches", (r,), batches.astype(np.int32))


_AABT_SIG = Signature(
    inputs=(Arg("rois", ranks=(2,), quant=_BOX_QUANT), Arg("deltas", var("D"), ranks=(2,)),
            Arg("batches", T.TENSOR_INT32, ranks=(1,)), Arg("image_info", ranks=(2,), quant=_BOX_QUANT)),
    outputs=(Arg("output", quant=_BOX_QUANT),))

AXIS_ALIGNED_BBOX_TRANSFORM = OpRecord(
    Op.AXIS_ALIGNED_BBOX_TRANSFORM, (_AABT_SIG,),
    (*variants(V.V1_2, _F32, _F16), variant(V.V1_2, T=_Q16A, D=_Q8), variant(V.V1_3, T=_Q16A, D=_Q8S)),
    _aabt_kernel, _aabt_shape, _aabt_sample, criterion="relaxed",
    edges=tuple(edges.Edge(name, "detection", doc, sample=lambda s, name=name: _aabt_sample(s, name))
                for name, doc in (
                    ("large_deltas", "dw and |dh| of 4.5..5, past Detectron's clamp at log(1000/16), "
                                     "which Android does not apply: boxes 90..148 times larger"),
                    ("past_border", "boxes decoded onto the top-left and bottom-right corners and "
                                    "wholly outside the image: clipped, the last to zero size"),
                    ("zero_size_boxes", "rois of zero width, zero height or both: they stay so"))),
    graphs="its boxes must have x1 <= x2 and y1 <= y2 and its batch indices must name an image: "
           "values other operations compute do not keep either",
    doc="Move each box by per-class deltas [dx, dy, dw, dh] (centre-size, log-scale sizes) and "
        "clip it to its image.")


# ---------------------------------------------------------------------------------------
# BOX_WITH_NMS_LIMIT


_KERNELS = {0: "hard", 1: "linear", 2: "gaussian"}


def _bwn_params(ctx: OpContext) -> dict[str, Any]:
    p = {k: _v(ctx, k) for k in ("score_threshold", "max_detections", "nms_kernel", "iou_threshold",
                                   "sigma", "nms_score_threshold")}
    if p["nms_kernel"] not in _KERNELS:
        raise ShapeError(f"nms_kernel {p['nms_kernel']} is not 0 (hard), 1 (linear) or 2 (gaussian)")
    if p["nms_kernel"] == 2 and not p["sigma"] > 0:
        raise ShapeError(f"sigma {p['sigma']:g} must be positive for the gaussian kernel")
    return p


def bwn_reference(scores: np.ndarray, boxes: np.ndarray, batches: np.ndarray, p: dict[str, Any],
                  tie: int = 1, m: _Margins | None = None) -> list[np.ndarray]:
    """BOX_WITH_NMS_LIMIT on real arrays: (scores, boxes, classes, batch indices)."""
    r, c_n = scores.shape
    thr, sigma, kind = p["iou_threshold"], p["sigma"], p["nms_kernel"]
    factor = {0: lambda o: 1.0 if o < thr else 0.0, 1: lambda o: 1.0 if o < thr else 1.0 - o,
              2: lambda o: math.exp(-o * o / sigma)}[kind]
    limit = None if p["max_detections"] < 0 else p["max_detections"]
    flat = scores.reshape(-1).copy()
    box = boxes.reshape(r * c_n, 4)
    out: list[tuple[float, np.ndarray, int, int]] = []
    start = 0
    while start < r:  # runs of equal batch index, in input order
        end = start
        while end < r and batches[end] == batches[start]:
            end += 1
        picked: list[int] = []
        for c in range(1, c_n):
            cand = _above(flat, range(start * c_n + c, end * c_n, c_n), p["score_threshold"], m)
            picked += nms(flat, lambda i: box[i], cand, thr, limit, kernel=factor,
                          drop_below=p["nms_score_threshold"], iou_decides=kind != 2, tie=tie, m=m)
        kept = _by_score(picked, flat, tie, m, -1 if limit is None else limit)
        kept.sort(key=lambda i: (i % c_n, -flat[i], tie * i))
        out += [(flat[i], box[i], i % c_n, int(batches[start])) for i in kept]
        start = end
    n = len(out)
    return [np.array([o[0] for o in out], dtype=np.float64).reshape(n),
            np.array([o[1] for o in out], dtype=np.float64).reshape(n, 4),
            np.array([o[2] for o in out], dtype=np.int32).reshape(n),
            np.array([o[3] for o in out], dtype=np.int32).reshape(n)]


def _bwn_run(ctx: OpContext, tie: int = 1) -> list[np.ndarray]:
    scores, boxes = _v(ctx, "scores"), _v(ctx, "boxes")
    _valid_boxes(boxes, "boxes")
    return bwn_reference(scores, boxes, _v(ctx, "batches"), _bwn_params(ctx), tie)


def _bwn_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    r, c = ctx.dims("scores")
    br, bc = ctx.dims("boxes")
    (nb,) = ctx.dims("batches")
    if (br, bc, nb) != (r, 4 * c, r):
        raise ShapeError(f"boxes {[br, bc]} and batches {[nb]} must be [{r}, {4 * c}] and [{r}] "
                         f"for scores {[r, c]}")
    if c < 2:
        raise ShapeError(f"scores need a background and at least one class, have {c} classes")
    _bwn_params(ctx)
    n = _bwn_run(ctx)[0].shape[0]  # Unknown until every value is known
    return [(n,), (n, 4), (n,), (n,)]


def _grouped(batches: np.ndarray) -> bool:
    """Whether equal batch indices are consecutive."""
    seen: list[int] = []
    for b in batches.tolist():
        if seen and seen[-1] == b:
            continue
        if b in seen:
            return False
        seen.append(b)
    return True


def _per_batch(name: str, n_batch_out: int, score_out: int, box_out: int, class_out: int | None):
    """A compare hook for outputs of data-dependent length grouped by a batch-index output."""

    def compare(ctx: OpContext, expected: list[np.ndarray], actual: list[np.ndarray],
                relaxed: bool) -> list[str]:
        score_tol, box_tol = _tolerances(ctx, score_out, box_out, relaxed)
        if not _grouped(np.asarray(actual[n_batch_out])):
            return [f"{name}: output boxes are not grouped by batch: {actual[n_batch_out].tolist()}"]

        def judge(exp: list[np.ndarray]) -> list[str]:
            if exp[n_batch_out].shape != actual[n_batch_out].shape:
                return [f"{name}: {actual[n_batch_out].shape[0]} boxes, expected {exp[n_batch_out].shape[0]}"]
            for b in dict.fromkeys(exp[n_batch_out].tolist()):
                def dets(o: list[np.ndarray], b: int = b) -> list[Detection]:
                    rows = np.nonzero(np.asarray(o[n_batch_out]) == b)[0]
                    cls = [-1 if class_out is None else int(o[class_out][k]) for k in rows]
                    return [(o[score_out][k], o[box_out][k], c) for k, c in zip(rows, cls, strict=True)]
                problems = _match(dets(exp), dets(actual), score_tol, box_tol, f"{name} batch {b}")
                if problems:
                    return problems
            return []

        run = _bwn_run if name == "BOX_WITH_NMS_LIMIT" else _gp_run
        return _first_accepting(_alternatives(ctx, expected, run), judge)

    return compare


def _bwn_sampler(edge: str = ""):
    def sample(s: SampleContext) -> None:
        t, bt = s.type("scores"), s.type("boxes")
        groups = 2 if edge == "empty_image" or not s.draw.bool(0.6) else 1
        sizes = [s.draw.int(2, 4) for _ in range(groups)]
        r, c_n = sum(sizes), s.draw.int(2, 3)
        batches = np.repeat(np.arange(groups) * s.draw.int(1, 2), sizes)
        kind = s.draw.int(0, 2) if edge != "ties" else 0
        sscale, szp = _score_quant(s, t)
        params: dict[str, Any] = {"nms_kernel": kind,
                                  "max_detections": -1 if s.draw.bool(0.4) else s.draw.int(1, r * (c_n - 1))}
        if edge == "max_detections_1":
            params["max_detections"] = 1

        mode = _quant_mode(s)
        if mode:  # no thresholds the edge's scale could move scores across: every box is kept
            params.update(nms_kernel=0, score_threshold=-1e9, nms_score_threshold=-1e9, iou_threshold=1.0)

        def attempt() -> bool:
            nonlocal szp
            raw, _ = _grid_scores(s, r * c_n, 0.05, 0.95)
            scores = _stored(raw.reshape(r, c_n), t, sscale, szp)
            stored = None
            if mode:
                stored, szp = _raw_scores(s, t, r * c_n, mode, sscale, szp)
                stored = stored.reshape(r, c_n)
                scores = (stored.astype(np.float64) - szp) * sscale
            boxes = _stored(_random_boxes(s, r * c_n, 6.0, 1.0, 4.0).reshape(r, 4 * c_n), bt, 0.125)
            if edge == "ties":
                # two overlapping boxes of class 1 (IoU >= 0.78) with the same score: which one
                # survives hard NMS is unspecified
                boxes[1, 4:8] = boxes[0, 4:8] + np.array([0.125, 0.0, 0.125, 0.0])
                scores[1, 1] = scores[0, 1]
            thr = 0.0
            if mode:
                pass
            elif edge == "empty_image":
                # every score of the first image below the threshold (an empty output for the
                # whole model is not a request the HAL can express: zero-length outputs)
                scores[:sizes[0]] *= 0.25
                thr = _threshold_between(s, scores[sizes[0]:, 1:].reshape(-1), 0.25, 0.6)
                if thr < float(scores[:sizes[0]].max()) + 0.03:
                    return False
            else:
                thr = _threshold_between(s, scores[:, 1:].reshape(-1), 0.05, 0.4) if s.draw.bool(0.6) else 0.0
            params["sigma"] = _scalar_value(s, "sigma", s.draw.float(0.3, 1.0))
            if not mode:
                params["score_threshold"] = _scalar_value(s, "score_threshold", thr)
                params["iou_threshold"] = _scalar_value(s, "iou_threshold", s.draw.float(0.2, 0.7))
                nms_thr = s.draw.float(0.02, 0.2) if kind else s.draw.float(0.02, 0.04)
                params["nms_score_threshold"] = _scalar_value(s, "nms_score_threshold", nms_thr)
            m = _Margins()
            judged = scores.copy()
            if edge == "ties":
                judged[1, 1] += 0.05  # the margins of the draw without the tie
            out = bwn_reference(judged, boxes, batches, params, 1, m)
            if not m.ok():
                return False
            if edge == "empty_image" and (out[3] == batches[0]).any():
                return False
            if edge == "ties" and not scores[0, 1] > params["score_threshold"]:
                return False
            s.tensor("scores", scores.shape, scores if stored is None else stored, scale=sscale or None,
                     zero_point=szp if t.is_quant else None)
            s.tensor("boxes", boxes.shape, boxes, scale=0.125 if bt.is_quant else None,
                     zero_point=0 if bt.is_quant else None)
            s.tensor("batches", (r,), batches.astype(np.int32))
            return True

        _draw_until("BOX_WITH_NMS_LIMIT", attempt)
        for k, v in params.items():
            s.scalar(k, v)

    return sample


_BWN_SCALAR = scalar_of("T")
_BWN_SIG = Signature(
    inputs=(Arg("scores", ranks=(2,)), Arg("boxes", var("B"), ranks=(2,), quant=_BOX_QUANT),
            Arg("batches", T.TENSOR_INT32, ranks=(1,)), Arg("score_threshold", _BWN_SCALAR),
            Arg("max_detections", T.INT32), Arg("nms_kernel", T.INT32), Arg("iou_threshold", _BWN_SCALAR),
            Arg("sigma", _BWN_SCALAR), Arg("nms_score_threshold", _BWN_SCALAR)),
    outputs=(Arg("scores_out", quant=same_as("scores")), Arg("boxes_out", var("B"), quant=_BOX_QUANT),
             Arg("classes_out", T.TENSOR_INT32), Arg("batches_out", T.TENSOR_INT32)))

BOX_WITH_NMS_LIMIT = OpRecord(
    Op.BOX_WITH_NMS_LIMIT, (_BWN_SIG,),
    (*variants(V.V1_2, _F32, _F16), variant(V.V1_2, T=_Q8, B=_Q16A), variant(V.V1_3, T=_Q8S, B=_Q16A)),
    lambda ctx: _bwn_run(ctx), _bwn_shape, _bwn_sampler(), criterion="relaxed",
    compare=_per_batch("BOX_WITH_NMS_LIMIT", 3, 0, 1, 2), graphs=_GRAPHS,
    edges=(
           _edge("empty_image", "every score of one image below score_threshold: it contributes no box",
                 _bwn_sampler("empty_image")),
           _edge("max_detections_1", "max_detections 1: one box per image",
                 _bwn_sampler("max_detections_1")),
           _edge("ties", "two identical boxes of a class with the same score under hard NMS: either "
                         "may be the one kept", _bwn_sampler("ties"))),
    doc="Per-class hard / linear / gaussian NMS of scored boxes, per batch, with score "
        "thresholds and a detection limit.")


# ---------------------------------------------------------------------------------------
# GENERATE_PROPOSALS


def _gp_params(ctx: OpContext) -> dict[str, Any]:
    p = {k: _v(ctx, k) for k in ("height_stride", "width_stride", "pre_nms_max", "post_nms_max",
                                   "iou_threshold", "min_size")}
    if not (p["height_stride"] > 0 and p["width_stride"] > 0):
        raise ShapeError(f"height_stride {p['height_stride']:g} and width_stride {p['width_stride']:g} "
                         f"must be positive")
    if not p["iou_threshold"] > 0:
        raise ShapeError(f"iou_threshold {p['iou_threshold']:g} must be positive")
    if not p["min_size"] >= 0:
        raise ShapeError(f"min_size {p['min_size']:g} must not be negative")
    return p


def gp_reference(scores: np.ndarray, deltas: np.ndarray, anchors: np.ndarray, info: np.ndarray,
                 p: dict[str, Any], tie: int = 1, m: _Margins | None = None) -> list[np.ndarray]:
    """GENERATE_PROPOSALS on real NHWC arrays: (scores, boxes, batch indices)."""
    b_n, h_n, w_n, _ = scores.shape
    ys, xs = np.arange(h_n) * p["height_stride"], np.arange(w_n) * p["width_stride"]
    shift = np.stack(np.broadcast_arrays(xs[None, :], ys[:, None], xs[None, :], ys[:, None]), axis=-1)
    base = (shift[:, :, None, :] + anchors[None, None, :, :]).reshape(-1, 4)
    pre = p["pre_nms_max"]
    post = p["post_nms_max"] if p["post_nms_max"] > 0 else None
    out: list[tuple[float, np.ndarray, int]] = []
    for b in range(b_n):
        flat = scores[b].reshape(-1).copy()
        ih, iw = info[b]
        boxes = _clip(decode(base, deltas[b].reshape(-1, 4)), ih, iw)
        cand = list(range(flat.size))
        if 0 < pre < flat.size:
            cand = _by_score(cand, flat, tie, m, pre)
        kept = []
        for i in cand:
            x1, y1, x2, y2 = boxes[i]
            w, h, xc, yc = x2 - x1, y2 - y1, x1 + (x2 - x1) / 2, y1 + (y2 - y1) / 2
            if m is not None:  # the centre test decides only for boxes large enough
                big = w > p["min_size"] and h > p["min_size"]
                checks = [(w, p["min_size"]), (h, p["min_size"])] + ([(xc, iw), (yc, ih)] if big else [])
                for v, edge_ in checks:
                    m.sizes(v, edge_)
            if w > p["min_size"] and h > p["min_size"] and xc < iw and yc < ih:
                kept.append(i)
        for i in nms(flat, lambda i, bx=boxes: bx[i], kept, p["iou_threshold"], post, tie=tie, m=m):
            out.append((flat[i], boxes[i], b))
    n = len(out)
    return [np.array([o[0] for o in out], dtype=np.float64).reshape(n),
            np.array([o[1] for o in out], dtype=np.float64).reshape(n, 4),
            np.array([o[2] for o in out], dtype=np.int32).reshape(n)]


def _gp_run(ctx: OpContext, tie: int = 1) -> list[np.ndarray]:
    return gp_reference(_v(ctx, "scores"), _v(ctx, "deltas"), _v(ctx, "anchors"),
                        _v(ctx, "image_info"), _gp_params(ctx), tie)


def _gp_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    b, h, w, a = ctx.dims("scores")
    if ctx.dims("deltas") != (b, h, w, 4 * a):
        raise ShapeError(f"deltas {list(ctx.dims('deltas'))} must be {[b, h, w, 4 * a]} (NHWC) for "
                         f"scores {[b, h, w, a]}")
    if ctx.dims("anchors") != (a, 4):
        raise ShapeError(f"anchors {list(ctx.dims('anchors'))} must be [{a}, 4]")
    if ctx.dims("image_info") != (b, 2):
        raise ShapeError(f"image_info {list(ctx.dims('image_info'))} must be [{b}, 2]")
    _gp_params(ctx)
    n = _gp_run(ctx)[0].shape[0]
    return [(n,), (n, 4), (n,)]


def _gp_sampler(edge: str = ""):
    def sample(s: SampleContext) -> None:
        t, at = s.type("scores"), s.type("anchors")
        b = 2 if edge == "empty_image" else s.draw.int(1, 2)
        h, w, a = s.draw.int(1, 2), s.draw.int(1, 3), s.draw.int(1, 3)
        n = h * w * a
        hs, ws = float(s.draw.choice((1.0, 2.0))), float(s.draw.choice((1.0, 2.0)))
        sscale, szp = _score_quant(s, t)
        dscale, dzp = _delta_quant(t)
        params: dict[str, Any] = {
            "height_stride": _scalar_value(s, "height_stride", hs),
            "width_stride": _scalar_value(s, "width_stride", ws),
            "pre_nms_max": s.draw.choice((0, -1, s.draw.int(1, n))),
            "post_nms_max": 1 if edge == "post_nms_1" else s.draw.choice((0, s.draw.int(1, n)))}

        mode = _quant_mode(s)

        def attempt() -> bool:
            nonlocal szp, dzp
            raw, _ = _grid_scores(s, b * n, 0.05, 0.95)
            scores = _stored(raw.reshape(b, h, w, a), t, sscale, szp)
            stored_scores = stored_deltas = None
            half = s.draw.array((a, 2), 0.5, 2.0)
            ctr = s.draw.array((a, 2), 0.0, 1.5) + (8.0 if mode else 0.0)
            anchors = _stored(np.concatenate([ctr - half, ctr + half], axis=1), at, 0.125)
            lo, hi = (0.0, 0.4) if mode == "min" else (-0.4, 0.0) if mode == "max" else (-0.4, 0.4)
            if mode in ("min", "max"):
                dzp = t.quant_range[0 if mode == "min" else 1]
            deltas = _stored(s.draw.array((b, h, w, 4 * a), lo, hi), t, dscale, dzp)
            info = np.array([[h * hs + s.draw.int(1, 3), w * ws + s.draw.int(1, 3)] for _ in range(b)], float)
            if mode:
                # far from every filter: no clipping, min_size 0, no suppression (IoU threshold 1);
                # the edge's scales then move nothing that decides
                stored_scores, szp = _raw_scores(s, t, b * n, mode, sscale, szp)
                stored_scores = stored_scores.reshape(b, h, w, a)
                scores = (stored_scores.astype(np.float64) - szp) * sscale
                stored_deltas = np.round(deltas / dscale + dzp).astype(dtype_of(t))
                if mode == "scale":
                    deltas = np.zeros_like(deltas)
                info[:] = 64.0
            if edge == "empty_image":  # the first image a corner: every proposal clipped below min_size
                info[0] = (0.125, 0.125)
            iou_thr = 1.0 if mode else s.draw.float(0.2, 0.7)
            params["iou_threshold"] = _scalar_value(s, "iou_threshold", iou_thr)
            size = 0.0 if mode else s.draw.float(0.25 if edge == "empty_image" else 0.0, 0.5)
            params["min_size"] = _scalar_value(s, "min_size", size)
            m = _Margins()
            out = gp_reference(scores, deltas, anchors, info, params, 1, m)
            if not (m.ok(iou=0.1, size=0.3) if mode == "scale" else m.ok(size=0.06)):
                return False
            if edge == "empty_image" and ((out[2] == 0).any() or not out[2].size):
                return False
            qs = dict(scale=sscale or None, zero_point=szp if t.is_quant else None)
            s.tensor("scores", scores.shape, scores if stored_scores is None else stored_scores, **qs)
            s.tensor("deltas", deltas.shape, deltas if stored_deltas is None else stored_deltas,
                     scale=dscale if t.is_quant else None,
                     zero_point=dzp if t.is_quant else None)
            s.tensor("anchors", anchors.shape, anchors, scale=0.125 if at.is_quant else None,
                     zero_point=0 if at.is_quant else None)
            s.tensor("image_info", info.shape, info, scale=0.125 if at.is_quant else None,
                     zero_point=0 if at.is_quant else None)
            return True

        _draw_until("GENERATE_PROPOSALS", attempt)
        s.scalar("layout", False)  # NHWC here; the case builder sets NCHW cases
        for k, v in params.items():
            s.scalar(k, v)

    return sample


def _gp_info_type(b: dict[str, T]) -> T:
    return _Q16A if b["T"].is_quant else b["T"]


def _gp_anchor_type(b: dict[str, T]) -> T:
    return _Q16S if b["T"].is_quant else b["T"]


_GP_SCALAR = scalar_of("T")
_GP_SIG = Signature(
    inputs=(Arg("scores", ranks=(4,)), Arg("deltas", ranks=(4,)),
            Arg("anchors", _gp_anchor_type, ranks=(2,), quant=_BOX_QUANT),
            Arg("image_info", _gp_info_type, ranks=(2,), quant=_BOX_QUANT),
            Arg("height_stride", _GP_SCALAR), Arg("width_stride", _GP_SCALAR),
            Arg("pre_nms_max", T.INT32), Arg("post_nms_max", T.INT32), Arg("iou_threshold", _GP_SCALAR),
            Arg("min_size", _GP_SCALAR), Arg("layout", T.BOOL)),
    outputs=(Arg("scores_out", quant=same_as("scores")), Arg("boxes_out", _gp_info_type, quant=_BOX_QUANT),
             Arg("batches_out", T.TENSOR_INT32)))

GENERATE_PROPOSALS = OpRecord(
    Op.GENERATE_PROPOSALS, (_GP_SIG,), (*variants(V.V1_2, _F32, _F16, _Q8), *variants(V.V1_3, _Q8S)),
    lambda ctx: _gp_run(ctx), _gp_shape, _gp_sampler(), criterion="relaxed", layout="layout",
    layout_inputs=("scores", "deltas"), layout_outputs=(),
    compare=_per_batch("GENERATE_PROPOSALS", 2, 0, 1, None), graphs=_GRAPHS,
    edges=(
           _edge("empty_image", "one image of 0.125 x 0.125: every proposal of it clipped below "
                                "min_size, it contributes none", _gp_sampler("empty_image")),
           _edge("post_nms_1", "post_nms_max 1: one proposal per image", _gp_sampler("post_nms_1")),
           *(edges.Without(name, "deltas are exponents of box sizes: at whole-number deltas (scale 1) "
                                 "and beyond, proposals' sizes overflow to infinity")
             for name in ("quant_scale_one", "quant_scale_large"))),
    doc="Anchors tiled over the feature map, moved by deltas, clipped, filtered by min_size, "
        "then hard NMS per image.")


RECORDS: list[OpRecord] = [AXIS_ALIGNED_BBOX_TRANSFORM, BOX_WITH_NMS_LIMIT, DETECTION_POSTPROCESSING,
                           GENERATE_PROPOSALS]
