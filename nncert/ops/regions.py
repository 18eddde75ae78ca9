"""Regions of interest and random sampling: HEATMAP_MAX_KEYPOINT, ROI_ALIGN, ROI_POOLING
(1.2; layout input) and RANDOM_MULTINOMIAL (1.2).

Boxes are [x1, y1, x2, y2] in the original image. For the quantised variants they are
TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0 (also for quant8 asymm signed: the
operation documentation's zero point of -128 for those is outside the type's range, and
Android's implementation requires 0). ROI_ALIGN and ROI_POOLING map a box into the feature
map by dividing by the height and width ratios (original size / feature map size); a box
must lie inside the feature map and each batch index in [0, batches), boxes of one batch
index grouped together.

The samplers draw boxes on the 1/8 grid of the quantised boxes and power-of-two ratios, so
that every coordinate is exact in float16, float32 and the box type; where a result is a
discontinuous function of coordinates (ROI_POOLING's rounding and bin borders, the adaptive
sampling count of ROI_ALIGN, HEATMAP_MAX_KEYPOINT's arg max and its test for a singular
Hessian), they keep away from the discontinuity, so that the golden does not hinge on the
precision a driver computes in.

RANDOM_MULTINOMIAL's reference draws from numpy's PCG64 seeded with the two seed values
(also when both are 0, where a driver may pick its own): a driver's own generator gives
other samples, so its output is judged statistically (``multinomial_problems``).
"""

from __future__ import annotations

import math

import numpy as np

from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.ops.base import (
    FREE,
    Arg,
    OpContext,
    OpRecord,
    SampleContext,
    ShapeError,
    Signature,
    Unknown,
    fixed,
    round_half_away,
    same_as,
    scalar_of,
    var,
    variant,
    variants,
)
from nncert.ops.edges import Edge

V = Version
F32, F16 = T.TENSOR_FLOAT32, T.TENSOR_FLOAT16
Q8, Q8S, Q16 = T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_ASYMM

#: Box coordinates of the quantised variants: TENSOR_QUANT16_ASYMM, scale 1/8, zero point 0.
BOX_QUANT = fixed(0.125, 0)
#: Type variants of the box operations: float boxes of the data type, quant16 boxes (type
#: variable "R") for quantised data.
BOX_VARIANTS = (*variants(V.V1_2, F32, F16), variant(V.V1_2, T=Q8, R=Q16), variant(V.V1_3, T=Q8S, R=Q16))

_BOXES_GRAPHS = ("its boxes must be valid [x1, y1, x2, y2] with x1 <= x2 and y1 <= y2{more}, which "
                 "the random-graph generator's arbitrary tensors are not")


def _layout() -> Arg:
    return Arg("layout", T.BOOL, default=False)


def _box_arg(name: str) -> Arg:
    return Arg(name, var("R"), ranks=(2,), quant=BOX_QUANT)


def _known(ctx: OpContext, name: str):
    """A tensor input's value, or None when it is not known (validation of a model input)."""
    try:
        return ctx.value(name)
    except Unknown:
        return None


def _positive_ratio(ctx: OpContext, name: str) -> float:
    r = float(ctx.value(name))
    if not r > 0:
        raise ShapeError(f"{name} {r:g} must be positive")
    return r


def _at_least(ctx: OpContext, name: str, lo: int) -> int:
    v = int(ctx.value(name))
    if v < lo:
        raise ShapeError(f"{name} {v} must be at least {lo}")
    return v


def _check_boxes(boxes: np.ndarray, what: str = "box") -> None:
    bad = np.flatnonzero((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3]))
    if bad.size:
        i = int(bad[0])
        raise ShapeError(f"{what} {i} {boxes[i].tolist()} must have x1 <= x2 and y1 <= y2")


# ---------------------------------------------------------------------------------------
# ROI_ALIGN / ROI_POOLING


def _roi_signature(align: bool) -> Signature:
    samples = (Arg("height_samples", T.INT32), Arg("width_samples", T.INT32)) if align else ()
    out = Arg("output", ranks=(4,), quant=FREE if align else same_as("input"))
    return Signature((Arg("input", ranks=(4,)), _box_arg("rois"),
                      Arg("batch_index", T.TENSOR_INT32, ranks=(1,)),
                      Arg("output_height", T.INT32), Arg("output_width", T.INT32),
                      Arg("height_ratio", scalar_of("T")), Arg("width_ratio", scalar_of("T")),
                      *samples, _layout()), (out,))



def _roi_params(ctx: OpContext) -> tuple[int, int, float, float]:
    oh, ow = _at_least(ctx, "output_height", 1), _at_least(ctx, "output_width", 1)
    return oh, ow, _positive_ratio(ctx, "height_ratio"), _positive_ratio(ctx, "width_ratio")


def _check_rois(ctx: OpContext, rois: np.ndarray, index: np.ndarray) -> None:
    """Boxes inside the feature map, batch indices in range and grouped together."""
    n, h, w, _ = ctx.dims("input")
    _, _, hr, wr = _roi_params(ctx)
    if rois.shape[0] and (rois < 0).any():
        i = int(np.flatnonzero((rois < 0).any(axis=1))[0])
        raise ShapeError(f"roi {i} {rois[i].tolist()} has a negative coordinate")
    _check_boxes(rois, "roi")
    outside = np.flatnonzero((rois[:, 2] / wr > w) | (rois[:, 3] / hr > h))
    if outside.size:
        i = int(outside[0])
        raise ShapeError(f"roi {i} {rois[i].tolist()} lies outside the {h}x{w} feature map "
                         f"(ratios {hr:g}, {wr:g})")
    bad = np.flatnonzero((index < 0) | (index >= n))
    if bad.size:
        i = int(bad[0])
        raise ShapeError(f"batch_index[{i}] = {int(index[i])} is outside [0, {n})")
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]]) if index.size else index
    if len(set(index[starts].tolist())) != len(starts):
        raise ShapeError(f"batch_index {index.tolist()}: boxes of one batch must be grouped together")


def _roi_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    c = ctx.dims("input")[3]
    r, four = ctx.dims("rois")
    if four != 4:
        raise ShapeError(f"rois must have shape [num_rois, 4], has {[r, four]}")
    if ctx.dims("batch_index") != (r,):
        raise ShapeError(f"batch_index must have shape [{r}] (one per roi), has "
                         f"{list(ctx.dims('batch_index'))}")
    oh, ow, _, _ = _roi_params(ctx)
    if ctx.record.type is Op.ROI_ALIGN:
        for name in ("height_samples", "width_samples"):
            _at_least(ctx, name, 0)
    return [(r, oh, ow, c)]


def _roi_check(ctx: OpContext) -> None:
    """The boxes and batch indices, where known (the kernel checks them at run time)."""
    rois, index = _known(ctx, "rois"), _known(ctx, "batch_index")
    if rois is not None and index is not None:
        _check_rois(ctx, np.asarray(rois, np.float64), np.asarray(index))


def _align_axis(start: float, end: float, out: int, samples: int, size: int) -> np.ndarray:
    """[out, size] weights of one axis: row i averages the linear interpolation at the
    sampling points of bin i (``samples`` of them, 0: ceil(bin size)). A point at or past the
    last row reads the last row."""
    length = max(end - start, 1.0)
    step = length / out
    k = samples if samples > 0 else math.ceil(step)
    pos = start + step * np.arange(out)[:, None] + step / k * (np.arange(k)[None, :] + 0.5)
    low = np.floor(pos).astype(np.intp)
    frac = pos - low
    last = low >= size - 1
    low = np.where(last, size - 1, low)
    high = np.where(last, size - 1, low + 1)
    frac = np.where(last, 0.0, frac)
    weights = np.zeros((out, size))
    rows = np.repeat(np.arange(out), k)
    np.add.at(weights, (rows, low.reshape(-1)), (1 - frac).reshape(-1) / k)
    np.add.at(weights, (rows, high.reshape(-1)), frac.reshape(-1) / k)
    return weights


def _roi_align(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.value("input")
    rois, index = np.asarray(ctx.value("rois"), np.float64), np.asarray(ctx.value("batch_index"))
    _check_rois(ctx, rois, index)
    oh, ow, hr, wr = _roi_params(ctx)
    sh, sw = int(ctx.value("height_samples")), int(ctx.value("width_samples"))
    _, h, w, c = x.shape
    out = np.zeros((rois.shape[0], oh, ow, c))
    for i, (x1, y1, x2, y2) in enumerate(rois):
        wy = _align_axis(y1 / hr, y2 / hr, oh, sh, h)
        wx = _align_axis(x1 / wr, x2 / wr, ow, sw, w)
        out[i] = np.einsum("iy,yxc,jx->ijc", wy, x[int(index[i])], wx)
    return [out]


def _pool_bins(start: int, end: int, out: int, size: int) -> list[tuple[int, int]]:
    """[from, to) rows of each of ``out`` bins over the rounded box rows start..end
    (inclusive, at least one), clamped to the feature map; exact rational arithmetic."""
    length = max(end - start + 1, 1)
    return [(min(start + length * i // out, size), min(start - (-length * (i + 1) // out), size))
            for i in range(out)]


def _roi_pool(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.value("input")
    rois, index = np.asarray(ctx.value("rois"), np.float64), np.asarray(ctx.value("batch_index"))
    _check_rois(ctx, rois, index)
    oh, ow, hr, wr = _roi_params(ctx)
    _, h, w, c = x.shape
    out = np.zeros((rois.shape[0], oh, ow, c))
    for r, box in enumerate(rois):
        x1, y1, x2, y2 = (int(v) for v in round_half_away(box / np.array([wr, hr, wr, hr])))
        feature = x[int(index[r])]
        for i, (top, bottom) in enumerate(_pool_bins(y1, y2, oh, h)):
            for j, (left, right) in enumerate(_pool_bins(x1, x2, ow, w)):
                if bottom > top and right > left:  # an empty bin (past the border) is 0
                    out[r, i, j] = feature[top:bottom, left:right].max(axis=(0, 1))
    return [out]


_RATIOS = (0.5, 1.0, 1.0, 2.0, 4.0)


def _draw_rois(s: SampleContext, n: int, h: int, w: int, hr: float, wr: float, count: int,
               edge: str = "") -> tuple[np.ndarray, np.ndarray]:
    """``count`` boxes on the 1/8 grid inside the feature map (in original coordinates),
    batch indices sorted (grouped). ``edge``: "border" (every box touches the far border),
    "pixel" (every box one pixel of the feature map or less)."""
    boxes = []
    for _ in range(count):
        box = []
        for size, ratio in ((w, wr), (h, hr)):
            top = int(size * ratio * 8)  # the far border in eighths
            if edge == "pixel":
                a = s.draw.int(0, max(0, top - int(ratio * 8)))
                b = a + s.draw.int(0, int(ratio * 8))
            elif edge == "border":
                b = top
                a = s.draw.int(0, top)
            else:
                a, b = sorted((s.draw.int(0, top), s.draw.int(0, top)))
            box.append((a / 8, b / 8))
        (x1, x2), (y1, y2) = box
        boxes.append((x1, y1, x2, y2))
    index = np.sort(np.array([s.draw.int(0, n - 1) for _ in range(count)], np.int32))
    return np.array(boxes), index


def _exact_pool(box: np.ndarray, hr: float, wr: float, oh: int, ow: int, h: int, w: int) -> bool:
    """Whether float16 and float32 arithmetic (Android's: box times the reciprocal ratio,
    rounded; bin edges step * i + start floored and ceiled) find the exact bins, and no
    scaled coordinate lies on a rounding tie (where half-to-even and half-away differ)."""
    scaled = box / np.array([wr, hr, wr, hr])
    if (np.abs(scaled - np.floor(scaled) - 0.5) < 1e-9).any():
        return False
    x1, y1, x2, y2 = (int(v) for v in round_half_away(scaled))
    for dt in (np.float16, np.float32):
        for start, end, out, size in ((y1, y2, oh, h), (x1, x2, ow, w)):
            length = dt(max(end - start + 1, 1))
            step = length / dt(out)
            for i, (lo, hi) in enumerate(_pool_bins(start, end, out, size)):
                got_lo = min(int(np.floor(step * dt(i) + dt(start))), size)
                got_hi = min(int(np.ceil(step * dt(i + 1) + dt(start))), size)
                if (got_lo, got_hi) != (lo, hi):
                    return False
    return True


def _roi_sampler(align: bool, edge: str = ""):
    def sample(s: SampleContext) -> None:
        n, c = s.draw.int(1, 2), s.draw.int(1, 3)
        h, w = s.draw.int(1, 5), s.draw.int(1, 5)
        hr, wr = s.draw.choice(_RATIOS), s.draw.choice(_RATIOS)
        oh, ow = s.draw.int(1, 4), s.draw.int(1, 4)
        if edge == "single_bin":
            oh = ow = 1
        count = s.draw.int(1, 3)
        for _ in range(50):
            rois, index = _draw_rois(s, n, h, w, hr, wr, count, edge)
            if align or all(_exact_pool(b, hr, wr, oh, ow, h, w) for b in rois):
                break
        else:  # whole-pixel boxes at ratio 1 with one bin are always exact
            hr = wr = 1.0
            oh = ow = 1
            rois = np.array([[0.0, 0.0, w - 1.0, h - 1.0]] * count)
        s.tensor("input", (n, h, w, c))
        s.tensor("rois", rois.shape, value=rois)
        s.tensor("batch_index", index.shape, value=index)
        s.scalar("output_height", oh)
        s.scalar("output_width", ow)
        s.scalar("height_ratio", hr)
        s.scalar("width_ratio", wr)
        if align:
            adaptive = edge == "adaptive_samples"
            s.scalar("height_samples", 0 if adaptive else s.draw.int(0, 3))
            s.scalar("width_samples", 0 if adaptive else s.draw.int(0, 3))
        s.scalar("layout", False)

    return sample


def _roi_edges(align: bool) -> tuple[Edge, ...]:
    found = (
        Edge("roi_on_border", "roi", "every box reaches the far border of the feature map (the last "
             "row and column read alone" + ("" if align else "; a box starting there pools empty bins "
                                            "to 0") + ")", sample=_roi_sampler(align, "border")),
        Edge("roi_one_pixel", "roi", "boxes of one feature-map pixel or less, zero-sized ones "
             "included (" + ("stretched to one pixel" if align else "one row and column") + ")",
             sample=_roi_sampler(align, "pixel")),
        Edge("roi_single_bin", "roi", "a 1x1 output: the whole box is one bin",
             sample=_roi_sampler(align, "single_bin")),
    )
    if align:
        found += (Edge("roi_adaptive_samples", "roi", "sampling points 0 on both axes: "
                       "ceil(bin size) points per bin", sample=_roi_sampler(True, "adaptive_samples")),)
    return found


# ---------------------------------------------------------------------------------------
# HEATMAP_MAX_KEYPOINT

_HEATMAP = Signature((Arg("heatmap", ranks=(4,)), _box_arg("boxes"), _layout()),
                     (Arg("score", ranks=(2,)), Arg("keypoints", var("R"), ranks=(3,), quant=BOX_QUANT)))

#: Android's test for a singular Hessian, |det| < atol + rtol * A00 * A11 (float16 uses
#: the looser pair): such a keypoint keeps the grid maximum and position.
SINGULAR_TOL = {F16: (1e-3, 1e-3)}
SINGULAR_TOL_DEFAULT = (1e-5, 1e-5)


def _heatmap_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    n, hh, hw, k = ctx.dims("heatmap")
    if hh != hw:
        raise ShapeError(f"heatmap height {hh} and width {hw} must be equal")
    if hh < 2:
        raise ShapeError(f"heatmap size {hh} must be at least 2")
    if ctx.dims("boxes") != (n, 4):
        raise ShapeError(f"boxes must have shape [{n}, 4] (one per heatmap), has {list(ctx.dims('boxes'))}")
    return [(n, k), (n, k, 2)]


def _heatmap_check(ctx: OpContext) -> None:
    boxes = _known(ctx, "boxes")
    if boxes is not None:
        _check_boxes(np.asarray(boxes, np.float64))


def _local_grid(hm: np.ndarray, y: int, x: int) -> np.ndarray:
    """The 3x3 neighbourhood of (y, x) in a [S, S] map, mirrored at the borders (-1 reads 1,
    S reads S - 2)."""
    size = hm.shape[0]
    idx = [1 if i < 0 else size - 2 if i >= size else i for i in (y - 1, y, y + 1)]
    jdx = [1 if j < 0 else size - 2 if j >= size else j for j in (x - 1, x, x + 1)]
    return hm[np.ix_(idx, jdx)]


def quadratic_fit(g: np.ndarray, atol: float, rtol: float) -> tuple[float, float, float, float]:
    """(delta x, delta y, score, det) of the second-order Taylor expansion of a 3x3 grid
    around its centre: the maximum of g11 + b'd + d'Ad/2 (b the gradient, A the Hessian, by
    central differences), the offset clipped to 1.5 along its larger axis; no refinement
    when the Hessian is singular (|det| < atol + rtol * A00 * A11)."""
    b = np.array([(g[1, 2] - g[1, 0]) / 2, (g[2, 1] - g[0, 1]) / 2])
    a00 = g[1, 0] - 2 * g[1, 1] + g[1, 2]
    a11 = g[0, 1] - 2 * g[1, 1] + g[2, 1]
    a01 = (g[2, 2] - g[2, 0] - g[0, 2] + g[0, 0]) / 4
    det = a00 * a11 - a01 * a01
    if abs(det) < atol + rtol * a00 * a11:
        return 0.0, 0.0, float(g[1, 1]), det
    dx = -(a11 * b[0] - a01 * b[1]) / det
    dy = -(a00 * b[1] - a01 * b[0]) / det
    big = max(abs(dx), abs(dy))
    if big > 1.5:
        dx, dy = dx * 1.5 / big, dy * 1.5 / big
    score = g[1, 1] + b[0] * dx + b[1] * dy + (a00 * dx * dx + 2 * a01 * dx * dy + a11 * dy * dy) / 2
    return float(dx), float(dy), float(score), det


def _heatmap(ctx: OpContext) -> list[np.ndarray]:
    hm = ctx.value("heatmap")
    boxes = np.asarray(ctx.value("boxes"), np.float64)
    _check_boxes(boxes)
    n, size, _, k = hm.shape
    atol, rtol = SINGULAR_TOL.get(ctx.type("heatmap"), SINGULAR_TOL_DEFAULT)
    score = np.zeros((n, k))
    points = np.zeros((n, k, 2))
    for i in range(n):
        x1, y1, x2, y2 = boxes[i]
        for j in range(k):
            m = hm[i, :, :, j]
            y, x = divmod(int(np.argmax(m)), size)  # the first maximum in row-major order
            dx, dy, score[i, j], _ = quadratic_fit(_local_grid(m, y, x), atol, rtol)
            points[i, j] = ((x + dx + 0.5) / size * (x2 - x1) + x1, (y + dy + 0.5) / size * (y2 - y1) + y1)
    return [score, points]


def _conditioned(g: np.ndarray) -> bool:
    """A grid (integer units) whose singularity test is far from its threshold in every
    precision: |det| at least 8 and a fifth of A00 * A11."""
    a00 = g[1, 0] - 2 * g[1, 1] + g[1, 2]
    a11 = g[0, 1] - 2 * g[1, 1] + g[2, 1]
    a01 = (g[2, 2] - g[2, 0] - g[0, 2] + g[0, 0]) / 4
    det = a00 * a11 - a01 * a01
    return abs(det) >= max(8.0, 0.2 * abs(a00 * a11))


def _cone(size: int, y: int, x: int) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    return np.maximum(32 - 4 * (np.abs(yy - y) + np.abs(xx - x)), 0)


#: A neighbourhood with a singular Hessian (A00 = A11 = -8, A01 = 8): det is exactly 0.
_SINGULAR = np.array([[30, 28, 14], [28, 32, 28], [14, 28, 30]])


def _heatmap_map(s: SampleContext, size: int, edge: str) -> np.ndarray:
    """One [S, S] heatmap in integer units (0..40, a unique maximum of 32..40), its
    maximum's neighbourhood well conditioned (or, for an edge, as that edge needs)."""
    corners = [(0, 0), (0, size - 1), (size - 1, 0), (size - 1, size - 1)]
    for _ in range(40):
        m = s.draw.integers((size, size), 0, 24)
        if edge == "corner":
            y, x = s.draw.choice(corners)
        elif edge == "singular":
            y, x = s.draw.int(1, size - 2), s.draw.int(1, size - 2)
            m[y - 1:y + 2, x - 1:x + 2] = _SINGULAR
            return m
        else:
            y, x = s.draw.int(0, size - 1), s.draw.int(0, size - 1)
        m[y, x] = s.draw.int(32, 40)
        g = _local_grid(m.astype(np.float64), y, x)
        if edge == "clipped":
            g[1, 1] = m[y, x] = 32
            dx, dy, _, _ = quadratic_fit(g, 0.0, 0.0)
            if max(abs(dx), abs(dy)) > 1.5 * 1.25 and _conditioned(g):
                return m
        elif _conditioned(g):
            return m
    if edge == "clipped":  # a saddle along the diagonal (found by search, checked in tests)
        m = np.zeros((size, size), np.int64)
        y = x = size // 2
        m[y - 1:y + 2, x - 1:x + 2] = [[0, 31, 0], [31, 32, 30], [0, 0, 24]]
        return m
    return _cone(size, *(corners[0] if edge == "corner" else (size // 2, size // 2)))


def _heatmap_sampler(edge: str = ""):
    def sample(s: SampleContext) -> None:
        n, k = s.draw.int(1, 3), s.draw.int(1, 3)
        lo = {"corner": 2, "singular": 3, "clipped": 3}.get(edge, 2)
        size = 2 if edge == "size_2" else s.draw.int(lo, 5)
        grid = np.stack([np.stack([_heatmap_map(s, size, edge) for _ in range(k)], axis=-1)
                         for _ in range(n)])
        t = s.type("heatmap")
        if t.is_quant:  # stored integers: 6 steps per unit, above the type's minimum
            value = (t.quant_range[0] + s.draw.int(0, 15) + 6 * grid).astype(np.int64)
        else:
            value = (grid - 16) / 8.0
        boxes = []
        for _ in range(n):
            x1, y1 = s.draw.int(0, 64), s.draw.int(0, 64)
            if edge == "degenerate_box":
                boxes.append((x1 / 8, y1 / 8, x1 / 8, y1 / 8))
            else:
                boxes.append((x1 / 8, y1 / 8, (x1 + s.draw.int(0, 96)) / 8, (y1 + s.draw.int(0, 96)) / 8))
        s.tensor("heatmap", (n, size, size, k), value=value)
        s.tensor("boxes", (n, 4), value=np.array(boxes))
        s.scalar("layout", False)

    return sample


_HEATMAP_EDGES = (
    Edge("heatmap_corner_maximum", "heatmap", "every maximum in a corner: its neighbourhood "
         "mirrored on both axes", sample=_heatmap_sampler("corner")),
    Edge("heatmap_size_2", "heatmap", "2x2 heatmaps, the smallest: every neighbour of the "
         "maximum mirrored", sample=_heatmap_sampler("size_2")),
    Edge("heatmap_singular_hessian", "heatmap", "a Hessian with determinant exactly 0: no "
         "refinement, the grid maximum and its cell centre", sample=_heatmap_sampler("singular")),
    Edge("heatmap_clipped_offset", "heatmap", "quadratic fits whose offset exceeds 1.5 cells "
         "and is scaled back", sample=_heatmap_sampler("clipped")),
    Edge("heatmap_degenerate_box", "heatmap", "boxes of zero width and height: every keypoint "
         "at the box's corner", sample=_heatmap_sampler("degenerate_box")),
)


# ---------------------------------------------------------------------------------------
# RANDOM_MULTINOMIAL

_MULTINOMIAL = Signature(
    (Arg("input", ranks=(2,)), Arg("samples", T.INT32), Arg("seeds", T.TENSOR_INT32, ranks=(1,), const=True)),
    (Arg("output", T.TENSOR_INT32, ranks=(2,)),))

#: The false-failure rate of the statistical judgement, per case: an upper bound (see
#: ``multinomial_problems``).
FALSE_FAILURE_RATE = 1e-6
#: Relative error allowed in a driver's class probabilities (float32; float16 data or a
#: relaxed execution computes softmax in half precision).
PROBABILITY_RTOL = {False: 1e-5, True: 4e-3}


def _multinomial_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    b, c = ctx.dims("input")
    if b < 1 or c < 1:
        raise ShapeError(f"input must have at least one batch and one class, has shape {[b, c]}")
    n = _at_least(ctx, "samples", 1)
    if ctx.dims("seeds") != (2,):
        raise ShapeError(f"seeds must have shape [2], has {list(ctx.dims('seeds'))}")
    return [(b, n)]


def class_probabilities(logits: np.ndarray) -> np.ndarray:
    """softmax of each row over its finite logits (Android leaves out non-finite ones: a
    -inf logit has probability 0); a row without a finite logit is all 0."""
    x = np.asarray(logits, np.float64)
    finite = np.isfinite(x)
    top = np.where(finite, x, -np.inf).max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.where(finite, np.exp(np.where(finite, x - np.where(np.isfinite(top), top, 0), 0)), 0.0)
    total = e.sum(axis=1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _multinomial(ctx: OpContext) -> list[np.ndarray]:
    p = class_probabilities(ctx.value("input"))
    n = int(ctx.value("samples"))
    seeds = np.asarray(ctx.value("seeds")).astype(np.int64) & 0xFFFFFFFF
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(v) for v in seeds])))
    out = np.zeros((p.shape[0], n), np.int32)
    for b, row in enumerate(p):
        cdf = np.cumsum(row)
        if cdf[-1] > 0:  # inverse CDF: the first class whose cumulative share exceeds u
            out[b] = np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), len(row) - 1)
    return [out]


def _kl(q: float, p: float) -> float:
    """Kullback-Leibler divergence of Bernoulli(q) from Bernoulli(p), 0 < p < 1."""
    out = 0.0
    if q > 0:
        out += q * math.log(q / p)
    if q < 1:
        out += (1 - q) * math.log((1 - q) / (1 - p))
    return out


def multinomial_problems(probabilities: np.ndarray, samples: np.ndarray, rtol: float,
                         rate: float = FALSE_FAILURE_RATE) -> list[str]:
    """Whether ``samples`` [B, n] are draws from the rows of ``probabilities`` [B, C]: one
    line per row that is not (empty: accepted).

    Every class count k of a row is tested against its probability p, widened to
    [p (1 - rtol), p (1 + rtol)] for the driver's own rounding: by the Chernoff bound, a
    binomial count is at least n q (q above the interval) with probability at most
    exp(-n KL(q || p)), and likewise below; a count whose bound is below rate / (2 B C) is
    rejected. Over both sides of all B C counts, a correct sampler is rejected with
    probability at most ``rate`` (the union bound; the true rate is lower still). A class of
    probability 0 drawn at all, or an index outside [0, C), is always wrong.

    Power (tests/test_ops_regions.py, 1024 samples per row, the suite's fewest): every class
    index off by one, rows swapped, uniform classes and softmax(2 x) are rejected in all or
    nearly all trials; a subtle bias such as softmax(1.25 x) in about a third."""
    b_count, classes = probabilities.shape
    n = samples.shape[1]
    limit = math.log(2 * b_count * classes / rate)
    problems = []
    for b in range(b_count):
        row = samples[b]
        outside = np.flatnonzero((row < 0) | (row >= classes))
        if outside.size:
            j = int(outside[0])
            problems.append(f"row {b}: {outside.size}/{n} samples outside [0, {classes}); first at "
                            f"[{b}, {j}]: {int(row[j])}")
            continue
        p_row = probabilities[b]
        if not p_row.sum() > 0:
            continue  # no finite logit: the distribution is not defined
        counts = np.bincount(row, minlength=classes)
        worst = None
        for j in range(classes):
            p, k = float(p_row[j]), int(counts[j])
            if p == 0.0:
                if k:
                    worst = (math.inf, j, k, p)
                    break
                continue
            q, lo, hi = k / n, p * (1 - rtol), min(p * (1 + rtol), 1.0)
            if lo <= q <= hi or (hi >= 1.0 and q >= lo):
                continue
            stat = n * _kl(q, hi if q > hi else lo)
            if stat > limit and (worst is None or stat > worst[0]):
                worst = (stat, j, k, p)
        if worst is not None:
            stat, j, k, p = worst
            bound = "never (probability 0)" if p == 0 else f"chance <= {math.exp(-stat):.1e}"
            problems.append(f"row {b}: class {j} drawn {k} of {n} times, expected {n * p:.1f} "
                            f"(p = {p:.4g}); {bound} for a correct sampler (this test's false-failure "
                            f"rate <= {rate:g})")
    return problems


def _multinomial_compare(ctx: OpContext, expected: list[np.ndarray], actual: list[np.ndarray],
                         relaxed: bool) -> list[str]:
    want = expected[0].shape
    got = np.asarray(actual[0])
    if got.shape != want:
        return [f"output 0: shape {list(got.shape)}, expected {list(want)}"]
    if got.dtype.kind not in "iu":
        return [f"output 0: {got.dtype} samples, expected int32 class indices"]
    rtol = PROBABILITY_RTOL[relaxed or ctx.type("input") is F16]
    return [f"output 0: {p}" for p in multinomial_problems(class_probabilities(ctx.value("input")),
                                                          got.astype(np.int64), rtol)]


def _multinomial_sampler(edge: str = ""):
    def sample(s: SampleContext) -> None:
        b = s.draw.int(1, 2)
        c = 1 if edge == "one_class" else s.draw.int(2, 8)
        logits = s.draw.array((b, c), -2.0, 2.0)
        if edge == "dominant_class":
            logits[np.arange(b), s.draw.integers((b,), 0, c - 1)] = 12.0
        elif edge == "shifted_logits":
            logits += 100.0
        elif edge == "zero_probability":
            for row in logits:
                row[s.draw.integers((s.draw.int(1, c - 1),), 0, c - 1)] = -np.inf
        seeds = [0, 0] if edge == "zero_seeds" else [s.draw.int(1, 2**31 - 1), s.draw.int(-2**31, 2**31 - 1)]
        s.tensor("input", (b, c), value=logits)
        s.scalar("samples", s.draw.int(1024, 2048))
        s.tensor("seeds", (2,), value=np.array(seeds, np.int32), const=True)

    return sample


_MULTINOMIAL_EDGES = (
    Edge("multinomial_one_class", "random", "one class: every sample is 0",
         sample=_multinomial_sampler("one_class")),
    Edge("multinomial_dominant_class", "random", "one logit 10 or more above the others (p > 0.999): "
         "the other classes almost never drawn", sample=_multinomial_sampler("dominant_class")),
    Edge("multinomial_shifted_logits", "random", "logits near 100, whose exponentials overflow "
         "float16 and are near float32's limit unless the maximum is subtracted first",
         sample=_multinomial_sampler("shifted_logits")),
    Edge("multinomial_zero_probability", "random", "some logits -inf: classes of probability 0, "
         "never to be drawn", sample=_multinomial_sampler("zero_probability")),
    Edge("multinomial_zero_seeds", "random", "both seeds 0: the driver may seed itself",
         sample=_multinomial_sampler("zero_seeds")),
)


# ---------------------------------------------------------------------------------------

RECORDS = [
    OpRecord(Op.HEATMAP_MAX_KEYPOINT, (_HEATMAP,), BOX_VARIANTS, _heatmap, _heatmap_shape,
             _heatmap_sampler(), criterion="relaxed", layout="layout", layout_inputs=("heatmap",),
             layout_outputs=(), check=_heatmap_check, edges=_HEATMAP_EDGES,
             graphs=_BOXES_GRAPHS.format(more="") + "; and its arg max and singular-Hessian test "
             "are discontinuous in the heatmap",
             doc="the maximum of each heatmap refined by a quadratic fit of its 3x3 neighbourhood: "
                 "score and position mapped into the box"),
    OpRecord(Op.ROI_ALIGN, (_roi_signature(True),), BOX_VARIANTS, _roi_align, _roi_shape,
             _roi_sampler(True), criterion="relaxed", layout="layout", check=_roi_check,
             edges=_roi_edges(True),
             graphs=_BOXES_GRAPHS.format(more=" inside the feature map, with batch indices in range"),
             doc="average of bilinearly interpolated sampling points in each bin of each region of "
                 "interest, resized to output_height x output_width"),
    OpRecord(Op.ROI_POOLING, (_roi_signature(False),), BOX_VARIANTS, _roi_pool, _roi_shape,
             _roi_sampler(False), criterion="strict", layout="layout", discrete=True, check=_roi_check,
             edges=_roi_edges(False),
             graphs=_BOXES_GRAPHS.format(more=" inside the feature map, with batch indices in range"),
             doc="maximum over each bin of each region of interest, box and bins rounded to whole "
                 "rows and columns, resized to output_height x output_width"),
    OpRecord(Op.RANDOM_MULTINOMIAL, (_MULTINOMIAL,), tuple(variants(V.V1_2, F32, F16)), _multinomial,
             _multinomial_shape, _multinomial_sampler(), criterion="strict", discrete=True,
             edges=_MULTINOMIAL_EDGES, compare=_multinomial_compare,
             graphs="its samples are random: a driver's own generator gives other ones, judged only "
                    "statistically by the per-operation suite",
             doc="samples class indices from the softmax of each row of logits (a driver's own "
                 "generator; judged statistically)"),
]
