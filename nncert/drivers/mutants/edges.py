"""Mutants that are right in the middle of every range and wrong only at its edges: one per
family of the catalogue's edge cases (nncert/ops/edges.py). The generated per-operation
cases never reach them; conformance/test_operations.py::test_operation_edge must."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np

from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.model import Operand, Operation, dtype_of
from nncert.hal.types import FusedActivationFunc, OperandType, OperationType
from nncert.ops import edges, get
from nncert.ops.base import ACTIVATION_RANGE, OpRecord, from_real, match, normalize_axis, to_real
from nncert.ops.evaluate import TO_NCHW, TO_NHWC, evaluate, evaluate_real
from nncert.ops.window import IMPLICIT, PADDING_SAME

T = OperandType
Op = OperationType
_EIGHT_BIT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)


class _Instance:
    """One operation instance as a mutant sees it: its record, and its inputs by name."""

    def __init__(self, op: Operation, operands: list, inputs: list, outputs: list[Operand]) -> None:
        self.record: OpRecord = get(op.type)
        self.operands, self.inputs, self.outputs = list(operands), list(inputs), outputs
        self.match = match(self.record, [o and o.type for o in operands], [o.type for o in outputs])

    def position(self, name: str) -> int | None:
        pos = [p for p in self.match.positions.get(name, []) if self.operands[p] is not None]
        return pos[0] if pos else None

    def scalar(self, name: str, default: Any = None) -> Any:
        p = self.position(name)
        if p is None:
            arg = self.match.signature.arg(name)
            return arg.default if default is None else default
        return np.asarray(self.inputs[p]).item()

    def with_scalar(self, name: str, value: Any) -> list:
        raw = list(self.inputs)
        p = self.position(name)
        raw[p] = np.asarray(value, dtype=np.asarray(raw[p]).dtype)
        return raw


class QuantActivationFromRange(MutantDriver):
    """Quantised ADD, SUB and MUL with a fused RELU1 or RELU6 take the activation's bounds
    from the output type's range only: the upper bound (1 or 6) is never applied. Right
    whenever the output's scale and zero point end at the bound, as a quantised model's
    do; wrong when the output can hold values beyond it."""

    name = "quant_act_range"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.ADD, Op.SUB, Op.MUL) or outputs[0].type not in _EIGHT_BIT:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        act = FusedActivationFunc(inst.scalar("act", 0))
        if act not in (FusedActivationFunc.RELU1, FusedActivationFunc.RELU6):
            return results
        pre = evaluate_real(inst.record, operands, inst.with_scalar("act", 0), outputs)[0]
        return [from_real(np.maximum(pre, ACTIVATION_RANGE[act][0]), outputs[0])]


class Fp16TilePartials(MutantDriver):
    """float32 REDUCE_SUM and MEAN sum tiles of 256 elements in float32 and add the tiles'
    partial sums in float16 (the combine stage keeps them in half precision): exact for any
    reduction of one tile, wrong for long ones."""

    name = "fp16_tile_partials"
    TILE = 256

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.REDUCE_SUM, Op.MEAN) or outputs[0].type is not T.TENSOR_FLOAT32:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        x = np.asarray(inputs[0], np.float32)
        axes = sorted({normalize_axis(int(a), x.ndim) for a in np.asarray(inst.inputs[1]).reshape(-1)})
        rest = [i for i in range(x.ndim) if i not in axes]
        rows = np.transpose(x, rest + axes).reshape(int(np.prod([x.shape[i] for i in rest])), -1)
        count = rows.shape[1]
        if count <= self.TILE:
            return results
        tiles = -(-count // self.TILE)
        padded = np.zeros((rows.shape[0], tiles * self.TILE), np.float32)
        padded[:, :count] = rows
        partials = padded.reshape(rows.shape[0], tiles, self.TILE).sum(axis=2, dtype=np.float32)
        total = np.cumsum(partials.astype(np.float16), axis=1, dtype=np.float16)[:, -1].astype(np.float32)
        if op.type is Op.MEAN:
            total = total / np.float32(count)
        return [total.reshape(results[0].shape)]


class ScaleFloorFp16(MutantDriver):
    """Keeps the scale of every 8-bit quantised operand in a float16 descriptor field with
    no subnormals, for operations between quantised tensors: a scale below float16's
    smallest normal number (2**-14, about 6.1e-5) is stored as 2**-14. Usual scales are
    exact; tiny ones are thousands of times too large."""

    name = "scale_floor_fp16"
    FLOOR = 2.0 ** -14

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if outputs[0].type not in _EIGHT_BIT or \
                any(o is not None and o.type.is_float and not o.type.is_scalar for o in operands):
            return results

        def floored(o: Operand | None) -> Operand | None:
            if o is None or o.type not in _EIGHT_BIT or o.scale >= self.FLOOR:
                return o
            return dataclasses.replace(o, scale=self.FLOOR)

        if all(floored(o) is o for o in (*operands, *outputs)):
            return results
        return evaluate(get(op.type), [floored(o) for o in operands], inputs, [floored(o) for o in outputs])


class UnitScaleAsRaw(MutantDriver):
    """A fast path for the identity quantisation: an 8-bit input whose scale is exactly 1 is
    taken as its stored integers, as if its zero point were 0 too (the check looks at the
    scale only). Drawn scales are never exactly 1, so only the unit-scale edge meets it."""

    name = "unit_scale_raw"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        record = get(op.type)
        if not record.dequantize:
            return results

        def raw(o: Operand | None) -> Operand | None:
            if o is None or o.type not in _EIGHT_BIT or o.scale != 1.0 or o.zero_point == 0:
                return o
            return dataclasses.replace(o, zero_point=0)

        taken = [raw(o) for o in operands]
        if all(a is b for a, b in zip(taken, operands, strict=True)):
            return results
        return evaluate(record, taken, inputs, outputs)


class QuantInHalfPrecision(MutantDriver):
    """Runs operations between 8-bit quantised tensors in float16, as a GPU delegate does:
    the inputs are dequantised to half precision and the result is computed and kept in it
    before requantisation. Usual scales lose nothing that the requantisation keeps; at large
    scales the real values pass float16's largest (65504) and become infinite."""

    name = "quant_in_half"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        record = get(op.type)
        if not record.dequantize or outputs[0].type not in _EIGHT_BIT:
            return results

        def half(o: Operand | None, v: Any) -> Any:
            if o is None or o.type not in _EIGHT_BIT:
                return None
            with np.errstate(over="ignore"):
                return np.asarray(to_real(v, o)).astype(np.float16).astype(np.float64)

        real = [half(o, v) for o, v in zip(operands, inputs, strict=True)]
        with np.errstate(over="ignore", invalid="ignore"):
            got = evaluate_real(record, operands, inputs, outputs, real=real)
            return [from_real(np.asarray(r, np.float64).astype(np.float16).astype(np.float64), o)
                    if o.type in _EIGHT_BIT else results[i]
                    for i, (r, o) in enumerate(zip(got, outputs, strict=True))]


class ZeroPointsFoldedInFloat32(MutantDriver):
    """Quantised ADD and SUB requantise in one float32 multiply-add per element: qa x (sa/so)
    +/- qb x (sb/so) + c, the zero points folded into the constant c = zo - za x sa/so -/+ zb x
    sb/so, as a fused QLinearAdd kernel does. Exact to a step while the scales are alike; where
    an input's scale is 2**16 and more times the output's, the terms that should cancel are
    millions and each is rounded to a float32 ulp of several steps."""

    name = "zero_points_folded_f32"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.ADD, Op.SUB) or outputs[0].type not in _EIGHT_BIT or \
                any(o is None or o.type not in _EIGHT_BIT for o in operands[:2]):
            return results
        inst = _Instance(op, operands, inputs, outputs)
        if inst.scalar("act", 0) != 0:
            return results
        f = np.float32
        a, b, out = operands[0], operands[1], outputs[0]
        sign = f(1) if op.type is Op.ADD else f(-1)
        ra, rb = f(a.scale) / f(out.scale), sign * f(b.scale) / f(out.scale)
        c = f(out.zero_point) - f(a.zero_point) * ra - f(b.zero_point) * rb
        qa, qb = (np.asarray(v).astype(f) for v in inputs[:2])
        acc = qa * ra + qb * rb + c  # float32 throughout, broadcasting
        lo, hi = out.type.quant_range
        return [np.clip(np.rint(acc), lo, hi).astype(dtype_of(out.type)).reshape(results[0].shape)]


class LogSoftmaxAxisOfOneIsIdentity(MutantDriver):
    """LOG_SOFTMAX over an axis of length 1 is folded away by the graph optimiser as a no-op
    (as it folds reductions over a length-1 axis): the output is the input, not 0."""

    name = "log_softmax_axis1_noop"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.LOG_SOFTMAX:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        x = np.asarray(inputs[0])
        if x.shape[normalize_axis(int(inst.scalar("axis")), x.ndim)] != 1:
            return results
        return [x.astype(dtype_of(outputs[0].type))]


class BroadcastBothCyclic(MutantDriver):
    """A broadcasting binary operation whose operands both need expanding (complementary 1s,
    [2, 1] x [1, 3]): the first is broadcast, the second's buffer is repeated cyclically to
    fill the output. Right whenever one operand already has the output's shape."""

    name = "broadcast_both_cyclic"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        record = get(op.type)
        if record is None or edges.BROADCAST[0] not in record.edges:
            return results
        out_shape = results[0].shape
        pos = [p for p, o in enumerate(operands) if o is not None and o.type.is_tensor][:2]
        if len(pos) < 2 or any(np.shape(inputs[p]) == out_shape for p in pos):
            return results
        ops, raw = list(operands), list(inputs)
        second = pos[1]
        ops[second] = dataclasses.replace(ops[second], dimensions=out_shape)
        raw[second] = np.resize(np.asarray(raw[second]), out_shape)
        return evaluate(record, ops, raw, outputs)


class SamePaddingAtStrideOne(MutantDriver):
    """Windows with SAME padding and a stride beyond 3 (more than the hardware does) run at
    stride 1, with the padding SAME gives at stride 1, and keep every stride-th output: the
    output has the right size, but SAME pads for the real stride differently, so windows
    start one row or column off when the two paddings differ."""

    name = "same_pad_stride1"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        record = get(op.type)
        if record is None or edges.WINDOW[0] not in record.edges:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        if inst.match.signature.name != IMPLICIT or inst.scalar("padding") != PADDING_SAME:
            return results
        sh, sw = int(inst.scalar("stride_h")), int(inst.scalar("stride_w"))
        if max(sh, sw) <= 3:
            return results
        raw = inst.with_scalar("stride_h", 1)
        raw[inst.position("stride_w")] = np.asarray(1, np.int32)
        nchw = bool(inst.scalar("layout", False))
        full = [dataclasses.replace(o, dimensions=()) for o in outputs]
        out = evaluate(record, operands, raw, full)[0]
        if nchw:
            out = np.transpose(out, TO_NHWC)
        out = np.ascontiguousarray(out[:, ::sh, ::sw, :])
        return [np.transpose(out, TO_NCHW) if nchw else out]


class L2ZeroSliceNaN(MutantDriver):
    """L2_NORMALIZATION divides each slice by its norm as it is, with no guard: an all-zero
    slice gives 0 / 0 (NaN), or its zero point for a quantised output, where HAL 1.3 wants
    zeros. Every other slice is right."""

    name = "l2_zero_slice_nan"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.L2_NORMALIZATION:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        x = to_real(np.asarray(inputs[0]), operands[0])
        axis = normalize_axis(int(inst.scalar("axis", -1)), x.ndim, "axis")
        with np.errstate(divide="ignore", invalid="ignore"):
            y = x / np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
        if outputs[0].type.is_quant:  # NaN becomes the type's lowest value, as a cast of it would
            return [from_real(np.nan_to_num(y, nan=-np.inf), outputs[0])]
        return [y.astype(results[0].dtype)]


class EarlySaturatingTable(MutantDriver):
    """Quantised TANH and LOGISTIC look their outputs up in a table whose top entries saturate
    early: any output of 250 or more (of the uint8 type's 255) comes out as 255. Only inputs in
    a narrow band (tanh 0.95..0.99) reach them, which a handful of drawn values seldom do."""

    name = "early_saturating_table"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.TANH, Op.LOGISTIC) or outputs[0].type is not T.TENSOR_QUANT8_ASYMM:
            return results
        return [np.where(results[0] >= 250, 255, results[0]).astype(results[0].dtype)]


class UnshiftedSoftmax(MutantDriver):
    """Float SOFTMAX and LOG_SOFTMAX exponentiate beta * x as it is, without subtracting the
    slice's maximum first: right for ordinary inputs, inf / inf = NaN once exp overflows
    (past 88.7 in float32)."""

    name = "unshifted_softmax"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.SOFTMAX, Op.LOG_SOFTMAX) or outputs[0].type.is_quant:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        x = np.asarray(inputs[0], np.float32) * np.float32(inst.scalar("beta"))
        axis = normalize_axis(int(inst.scalar("axis", -1)), x.ndim, "axis")
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(x)
            y = e / np.sum(e, axis=axis, keepdims=True)
            y = y if op.type is Op.SOFTMAX else np.log(y)
        return [y.astype(results[0].dtype)]


class ExpQuotientOverflow(MutantDriver):
    """Float LOGISTIC and TANH as quotients of exponentials in the input's precision,
    exp(x) / (1 + exp(x)) and (exp(2x) - 1) / (exp(2x) + 1): exact where the generated inputs
    lie (+-6), inf / inf = NaN once exp overflows (LOGISTIC past 88.7 in float32 and 11.1 in
    float16, TANH past half of that)."""

    name = "exp_quotient_overflow"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.LOGISTIC, Op.TANH) or not outputs[0].type.is_float:
            return results
        x = np.asarray(inputs[0])
        with np.errstate(over="ignore", invalid="ignore"):
            if op.type is Op.LOGISTIC:
                e = np.exp(x)
                return [(e / (1 + e)).astype(results[0].dtype)]
            e = np.exp(x + x)
            return [((e - 1) / (e + 1)).astype(results[0].dtype)]


class SqrtViaRsqrt(MutantDriver):
    """SQRT lowered to x * rsqrt(x), as fast-math compilers do: right for every positive input,
    0 * inf = NaN at 0."""

    name = "sqrt_via_rsqrt"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.SQRT:
            return results
        x = np.asarray(inputs[0])
        with np.errstate(divide="ignore", invalid="ignore"):
            return [(x * (1 / np.sqrt(x))).astype(results[0].dtype)]


class SinOnePeriod(MutantDriver):
    """SIN brings its argument into [-pi, pi] by subtracting one period at most, then evaluates
    a polynomial of degree 11 fitted there: right for |x| < 3 pi, growing without bound beyond."""

    name = "sin_one_period"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.SIN:
            return results
        x = np.asarray(inputs[0], np.float64)
        y = np.where(np.abs(x) > np.pi, x - np.sign(x) * 2 * np.pi, x)
        if (np.abs(y) <= np.pi).all():
            return results
        poly = sum((-1) ** k * y ** (2 * k + 1) / math.factorial(2 * k + 1) for k in range(6))
        with np.errstate(over="ignore"):
            return [np.where(np.abs(y) <= np.pi, np.sin(y), poly).astype(results[0].dtype)]


class LogOfSoftmax(MutantDriver):
    """LOG_SOFTMAX lowered to log(softmax(x)), the softmax in float32 with the maximum
    subtracted: right while every probability is a float32, -inf for a logit 104 or more
    below its slice's maximum (the probability underflows)."""

    name = "log_of_softmax"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.LOG_SOFTMAX:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        x = np.asarray(inputs[0], np.float32) * np.float32(inst.scalar("beta"))
        axis = normalize_axis(int(inst.scalar("axis")), x.ndim, "axis")
        with np.errstate(divide="ignore", under="ignore"):
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return [np.log(e / e.sum(axis=axis, keepdims=True)).astype(results[0].dtype)]


class MeanCountsAxesListed(MutantDriver):
    """MEAN divides by the product of the sizes of the axes as listed: an axis named twice
    (1 and 1 - rank) is reduced once but counted twice. Right for distinct axes."""

    name = "mean_counts_axes_listed"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.MEAN:
            return results
        rank = np.ndim(inputs[0])
        listed = [normalize_axis(int(a), rank, "axes") for a in np.asarray(inputs[1]).reshape(-1)]
        if len(set(listed)) == len(listed):
            return results
        dims = np.shape(inputs[0])
        extra = math.prod(dims[a] for a in listed) // math.prod(dims[a] for a in set(listed))
        real = evaluate_real(get(op.type), operands, inputs, outputs)[0]
        return [from_real(np.asarray(real) / extra, outputs[0])]


class ExpTableRange(MutantDriver):
    """Float EXP from a kernel built for [-16, 16] (a table, or a float16 kernel reused for
    float32): inputs beyond are clamped to it. Right for every input of float16's finite
    results and for the generated ones (+-2); exp(20) comes out as exp(16)."""

    name = "exp_table_range"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.EXP:
            return results
        with np.errstate(over="ignore"):
            return [np.exp(np.clip(np.asarray(inputs[0], np.float64), -16.0, 16.0)).astype(results[0].dtype)]


class LogWithoutExponentSplit(MutantDriver):
    """Float LOG from a fit over [2**-8, 2**8] without splitting off the exponent: inputs
    beyond are clamped to it. Right for the generated inputs (0.1..2)."""

    name = "log_without_exponent_split"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.LOG:
            return results
        return [np.log(np.clip(np.asarray(inputs[0], np.float64), 2.0**-8, 2.0**8)).astype(results[0].dtype)]


class OrderedIntCompare(MutantDriver):
    """Float32 comparisons on the monotonic integer key of the bits (a negative's magnitude
    bits flipped), as radix sorts order floats: exact for every pair but -0 and +0, where
    -0 comes just below +0 (EQUAL false, LESS true)."""

    name = "ordered_int_compare"
    OPS: ClassVar[dict] = {Op.EQUAL: np.equal, Op.NOT_EQUAL: np.not_equal, Op.LESS: np.less,
                           Op.LESS_EQUAL: np.less_equal, Op.GREATER: np.greater,
                           Op.GREATER_EQUAL: np.greater_equal}

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in self.OPS or operands[0].type is not T.TENSOR_FLOAT32:
            return results

        def key(v: Any) -> np.ndarray:
            bits = np.asarray(v, np.float32).view(np.int32).astype(np.int64)
            return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)

        return [self.OPS[op.type](key(inputs[0]), key(inputs[1])).astype(results[0].dtype)]


class CastThroughInt16(MutantDriver):
    """CAST between a float type and TENSOR_INT32 through a saturating 16-bit integer (a DSP's
    conversion unit): right for every value the sampler draws (within +-1000), clamped to
    -32768..32767 past it."""

    name = "cast_through_int16"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.CAST or T.TENSOR_INT32 not in (operands[0].type, outputs[0].type) or \
                not (operands[0].type.is_float or outputs[0].type.is_float):
            return results
        x = np.asarray(inputs[0], np.float64)
        return [np.clip(np.trunc(x), -32768, 32767).astype(results[0].dtype)]


class RsqrtFixedSeedNewton(MutantDriver):
    """Float RSQRT, and SQRT as x * rsqrt(x), by eight Newton steps from the seed 1 with no range
    reduction (a DSP routine): exact for 0.05..2, where the domain's values are drawn; the
    iteration collapses to 0 at 3 and diverges beyond."""

    name = "rsqrt_fixed_seed"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in (Op.RSQRT, Op.SQRT) or not outputs[0].type.is_float:
            return results
        x = np.asarray(inputs[0], np.float64)
        y = np.ones_like(x)
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(8):
                y = y * (1.5 - 0.5 * x * y * y)
            out = y if op.type is Op.RSQRT else np.where(x == 0, 0.0, x * y)
        return [out.astype(results[0].dtype)]


class Gather16BitIndices(MutantDriver):
    """GATHER holds its indices in 16 bits (a DMA descriptor's field): an index past 65535 wraps.
    Generated axes have at most 5 elements."""

    name = "gather_16bit_indices"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.GATHER:
            return results
        idx = np.asarray(inputs[2])
        if idx.max(initial=0) < 1 << 16:
            return results
        raw = list(inputs)
        raw[2] = (idx & 0xFFFF).astype(idx.dtype)
        return evaluate(get(op.type), operands, raw, outputs)


class AvgPoolInt16Sum(MutantDriver):
    """Quantised AVERAGE_POOL_2D sums each window's stored values in a wrapping 16-bit register:
    exact for the generated windows (16 taps at most, sums up to 4080), wrong for a uint8 window
    whose sum passes 32767 (global pooling of 144 taps and more near the top of the range)."""

    name = "avg_pool_int16_sum"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.AVERAGE_POOL_2D or operands[0].type not in _EIGHT_BIT:
            return results
        from nncert.ops.pool import _windows

        def kernel(ctx):
            scale, zero_point = ctx.operand("input").scale, ctx.operand("input").zero_point
            taps, counts = _windows(ctx, 0.0)  # padding taps are real 0 and not counted
            counts = counts[None, :, :, None]
            stored = np.rint(taps.sum(axis=(3, 4)) / scale) + counts * zero_point
            wrapped = (stored + 32768) % 65536 - 32768
            return [(wrapped / counts - zero_point) * scale]

        record = dataclasses.replace(get(op.type), kernel=kernel)
        return evaluate(record, operands, inputs, outputs)


class QuantizeThroughInt32(MutantDriver):
    """QUANTIZE converting input / scale to int32 before adding the zero point and clamping, as
    LiteRT's builtin and reference kernels do: right for every value within int32, and past it
    the conversion gives INT_MIN (x86's answer to an out-of-range float), so +1e30 lands on the
    type's lowest value instead of its highest."""

    name = "quantize_through_int32"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not OperationType.QUANTIZE:
            return results
        out = outputs[0]
        scaled = np.round(np.asarray(inputs[0], np.float64) / out.scale)
        wrapped = np.where(np.abs(scaled) < 2.0**31, scaled, -(2.0**31))
        info = np.iinfo(results[0].dtype)
        return [np.clip(wrapped + out.zero_point, info.min, info.max).astype(results[0].dtype)]



def _through_float32(x: np.ndarray) -> np.ndarray:
    wide = np.asarray(x).astype(np.float32).astype(np.float64)
    return np.clip(wide, -(2.0**31), 2.0**31 - 1).astype(np.int64).astype(np.int32)


class Int32ThroughFloat32(MutantDriver):
    """A GPU driver that holds TENSOR_INT32 data in float32 (its textures and ALU have no
    32-bit integers): every operation whose data type is TENSOR_INT32 reads its data inputs
    rounded to float32 and stores its int32 outputs so. Exact for the samplers' values (within
    +-20, as any below 2^24); wrong past 2^24: sums, products, data copied through, and
    comparisons, ARGMAX and TOPK_V2 among distinct values a few units apart."""

    name = "int32_through_float32"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        inst = _Instance(op, operands, inputs, outputs)
        data = [p for a in inst.match.signature.inputs if a.type == "T"
                for p in inst.match.positions.get(a.name, [])
                if operands[p] is not None and operands[p].type is T.TENSOR_INT32]
        if not data:
            return results
        raw = list(inputs)
        for p in data:
            raw[p] = _through_float32(raw[p])
        got = evaluate(inst.record, operands, raw, outputs)
        return [_through_float32(g) if o.type is T.TENSOR_INT32 else g
                for g, o in zip(got, outputs, strict=True)]


_FILTERED = (OperationType.CONV_2D, OperationType.DEPTHWISE_CONV_2D, OperationType.GROUPED_CONV_2D,
             OperationType.TRANSPOSE_CONV_2D, OperationType.FULLY_CONNECTED)


class RequantMultiplierBelowOne(MutantDriver):
    """Quantised convolutions and FULLY_CONNECTED (one filter scale) requantise with a
    fixed-point multiplier that can only shift right: input scale x filter scale / output
    scale of 1 or more is taken as the largest value below 1. Right for every output scale
    above the product (all that HAL 1.0-1.1 allowed, and all that the generated cases draw);
    wrong below it."""

    name = "requant_multiplier_below_one"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in _FILTERED or outputs[0].type not in _EIGHT_BIT or operands[1].channel_quant:
            return results
        multiplier = operands[0].scale * operands[1].scale / outputs[0].scale
        if multiplier < 1:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        lo, hi = ACTIVATION_RANGE[FusedActivationFunc(inst.scalar("act", 0))]
        pre = evaluate_real(inst.record, operands, inst.with_scalar("act", 0), outputs)[0]
        return [from_real(np.clip(pre * ((1 - 2.0**-31) / multiplier), lo, hi), outputs[0])]


class SixteenBitBias(MutantDriver):
    """Quantised convolutions and FULLY_CONNECTED hold the int32 bias in a 16-bit register
    (saturating): right for biases within +-32767 steps, as every generated case's (+-5000)."""

    name = "sixteen_bit_bias"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in _FILTERED or outputs[0].type not in _EIGHT_BIT:
            return results
        bias = np.asarray(inputs[2])
        held = np.clip(bias, -(2**15), 2**15 - 1).astype(bias.dtype)
        if np.array_equal(held, bias):
            return results
        raw = list(inputs)
        raw[2] = held
        return evaluate(get(op.type), operands, raw, outputs)


_HALF_MAX = 65504.0


def _half_sum(a: np.ndarray, axis: int) -> np.ndarray:
    """A sum along ``axis`` (kept) in a float16 accumulator: inf once a partial sum passes
    float16's largest (its rounding, within ACC-1, left out)."""
    partial = np.cumsum(a, axis=axis)
    total = np.take(partial, [-1], axis=axis)
    over = (np.abs(partial) > _HALF_MAX).any(axis=axis, keepdims=True)
    return np.where(over, np.copysign(np.inf, total), total)


def _half_square(a: np.ndarray) -> np.ndarray:
    return np.where(a * a > _HALF_MAX, np.inf, a * a)


def _half_l2_normalization(ctx) -> list[np.ndarray]:
    x = ctx.value("input")
    axis = normalize_axis(int(ctx.value("axis", -1)), x.ndim)
    norm = np.sqrt(_half_sum(_half_square(x), axis))
    return [np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)]


def _half_instance_norm(ctx) -> list[np.ndarray]:
    x = ctx.value("input")
    n, h, w, c = x.shape
    flat = x.reshape(n, h * w, c)
    mean = _half_sum(flat, 1) / (h * w)
    dev = flat - mean
    var = _half_sum(_half_square(dev), 1) / (h * w)
    gamma, beta, eps = (float(ctx.value(name)) for name in ("gamma", "beta", "epsilon"))
    return [(dev * gamma / np.sqrt(var + eps) + beta).reshape(x.shape)]


def _half_mean(ctx) -> list[np.ndarray]:
    x = ctx.value("input")
    axes = sorted({normalize_axis(int(a), x.ndim) for a in np.asarray(ctx.value("axes")).reshape(-1)})
    rest = [d for d in range(x.ndim) if d not in axes]
    flat = np.transpose(x, rest + axes).reshape(*[x.shape[d] for d in rest], -1)
    out = _half_sum(flat, flat.ndim - 1)[..., 0] / flat.shape[-1]
    if ctx.value("keep_dims"):
        out = out.reshape([1 if d in axes else x.shape[d] for d in range(x.ndim)])
    return [out.reshape(1) if out.ndim == 0 else out]


def _half_average_pool(ctx) -> list[np.ndarray]:
    from nncert.ops.pool import _windows
    p, counts = _windows(ctx, 0.0)
    taps = np.moveaxis(p, 5, 3).reshape(*p.shape[:3], p.shape[5], -1)
    return [_half_sum(taps, 4)[..., 0] / counts[None, :, :, None]]


def _half_l2_pool(ctx) -> list[np.ndarray]:
    from nncert.ops.pool import _windows
    p, counts = _windows(ctx, 0.0)
    taps = np.moveaxis(_half_square(p), 5, 3).reshape(*p.shape[:3], p.shape[5], -1)
    return [np.sqrt(_half_sum(taps, 4)[..., 0] / counts[None, :, :, None])]


def _half_local_response(ctx) -> list[np.ndarray]:
    from nncert.ops.normalization import _axis
    axis = _axis(ctx)
    x = np.moveaxis(ctx.value("input"), axis, -1)
    channel = np.arange(x.shape[-1])
    near = np.abs(np.subtract.outer(channel, channel)) <= int(ctx.value("radius"))
    squares = _half_square(x)
    sums = np.stack([_half_sum(squares[..., near[:, k]], -1)[..., 0] for k in range(x.shape[-1])], axis=-1)
    out = x / (ctx.value("bias") + ctx.value("alpha") * sums) ** ctx.value("beta")
    return [np.moveaxis(out, -1, axis)]


class HalfIntermediates(MutantDriver):
    """float16 L2_NORMALIZATION, INSTANCE_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, MEAN,
    AVERAGE_POOL_2D and L2_POOL_2D keep their squares and sums in float16 (the device's
    half-precision ALU): inf, and a result of inf or 0, once an intermediate passes 65504,
    though the result itself is in range. Right for the generated cases (values within +-2,
    sums of a few dozen)."""

    name = "half_intermediates"
    KERNELS: ClassVar[dict] = {
        OperationType.L2_NORMALIZATION: _half_l2_normalization,
        OperationType.INSTANCE_NORMALIZATION: _half_instance_norm,
        OperationType.MEAN: _half_mean,
        OperationType.AVERAGE_POOL_2D: _half_average_pool,
        OperationType.L2_POOL_2D: _half_l2_pool,
        OperationType.LOCAL_RESPONSE_NORMALIZATION: _half_local_response,
    }

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        kernel = self.KERNELS.get(op.type)
        if kernel is None or outputs[0].type is not T.TENSOR_FLOAT16:
            return results
        with np.errstate(all="ignore"):
            return evaluate(dataclasses.replace(get(op.type), kernel=kernel), operands, inputs, outputs)


class SixteenBitSliceBounds(MutantDriver):
    """STRIDED_SLICE holds begin and end in 16-bit registers (wrapping): INT32_MAX, TensorFlow's
    "to the end", is read as -1 (one element short), INT32_MIN as 0. Right for the generated
    bounds (within a few units of the dimensions)."""

    name = "sixteen_bit_slice_bounds"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not OperationType.STRIDED_SLICE:
            return results
        raw = list(inputs)
        for p in (1, 2):
            raw[p] = np.asarray(inputs[p]).astype(np.int16).astype(np.int32)
        if all(np.array_equal(raw[p], inputs[p]) for p in (1, 2)):
            return results
        return evaluate(get(op.type), operands, raw, outputs)


class Float32HashKeys(MutantDriver):
    """HASHTABLE_LOOKUP compares lookups with keys in float32 (a GPU's): keys past 2^24 that
    round to one float32 value all match, the first one wins; a miss one unit off a key hits it.
    Right for the generated keys (within +-40)."""

    name = "float32_hash_keys"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not OperationType.HASHTABLE_LOOKUP:
            return results
        lookups, keys = (np.asarray(inputs[p]).astype(np.float32) for p in (0, 1))
        values = np.asarray(inputs[2])
        out, hits = np.zeros_like(results[0]), np.zeros_like(results[1])
        for i, key in enumerate(lookups):
            match = np.flatnonzero(keys == key)
            if match.size:
                out[i], hits[i] = values[match[0]], 1
        return [out, hits]


def _half_nearest_axis(in_size: int, out_size: int, align: bool, half: bool) -> np.ndarray:
    """Source indices as a float16 shader computes them: x, the step and (x + offset) * step
    in float16, then rounded (align_corners) or floored, clamped."""
    h = np.float16
    step = h((in_size - 1) / (out_size - 1)) if align and out_size > 1 else h(in_size / out_size)
    x = np.arange(out_size).astype(h)
    pos = ((x + h(0.5 if half else 0.0)) * step).astype(np.float64)
    idx = np.floor(pos + 0.5) if align else np.floor(pos)
    return np.clip(idx, 0, in_size - 1).astype(np.intp)


def _half_nearest(ctx) -> list[np.ndarray]:
    from nncert.ops.spatial import _resize_params
    x = ctx.value("input")
    oh, ow, align, half = _resize_params(ctx)
    rows = _half_nearest_axis(x.shape[1], oh, align, half)
    cols = _half_nearest_axis(x.shape[2], ow, align, half)
    return [x[:, rows][:, :, cols]]


class HalfNearestCoordinates(MutantDriver):
    """RESIZE_NEAREST_NEIGHBOR computes source coordinates in float16 (a GPU shader's mediump):
    the right indices for the generated sizes (8 at most; float16's rounding of the step stays
    below the distance to the next integer), off by one here and there past 2048 columns."""

    name = "half_nearest_coordinates"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not OperationType.RESIZE_NEAREST_NEIGHBOR:
            return results
        return evaluate(dataclasses.replace(get(op.type), kernel=_half_nearest), operands, inputs, outputs)


class Embedding16BitLookups(MutantDriver):
    """EMBEDDING_LOOKUP holds each lookup in 16 bits (as gather_16bit_indices does GATHER's
    indices): a row past 65535 wraps. Generated tables have a few rows."""

    name = "embedding_16bit_lookups"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.EMBEDDING_LOOKUP:
            return results
        lookups = np.asarray(inputs[0])
        if lookups.max(initial=0) < 1 << 16:
            return results
        raw = list(inputs)
        raw[0] = (lookups & 0xFFFF).astype(lookups.dtype)
        return evaluate(get(op.type), operands, raw, outputs)

class HalfRangeConstants(MutantDriver):
    """float32 kernels generated from float16 shaders keep the half type's constants: REDUCE_MAX
    and MAX_POOL_2D start their maximum at -65504 (REDUCE_MIN at 65504), ARGMAX / ARGMIN start
    at (0, -+65504) and move on a strict improvement, RELU clamps at 65504 as its "infinity".
    Right for every value the samplers draw (within +-2); wrong once every value of a window
    or row lies beyond 65504."""

    name = "half_range_constants"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if operands[0] is None or operands[0].type is not T.TENSOR_FLOAT32:
            return results
        big = 65504.0
        if op.type in (Op.REDUCE_MAX, Op.MAX_POOL_2D):
            return [np.maximum(np.asarray(results[0]), -big).astype(np.float32)]
        if op.type is Op.REDUCE_MIN:
            return [np.minimum(np.asarray(results[0]), big).astype(np.float32)]
        if op.type is Op.RELU:
            return [np.minimum(np.asarray(results[0]), big).astype(np.float32)]
        if op.type in (Op.ARGMAX, Op.ARGMIN):
            x = np.asarray(inputs[0], np.float64)
            axis = normalize_axis(int(np.asarray(inputs[1]).item()), x.ndim, "axis")
            beyond = x.max(axis=axis) < -big if op.type is Op.ARGMAX else x.min(axis=axis) > big
            got = np.asarray(results[0]).copy()
            got[np.asarray(beyond).reshape(got.shape)] = 0
            return [got]
        return results


class EightBitSequenceSteps(MutantDriver):
    """The sequence RNNs and LSTMs count time steps in an 8-bit register: the loop ends when it
    wraps, so the outputs of steps 256 on are never written (zeros). The generated sequences
    have a few steps."""

    name = "eight_bit_sequence_steps"
    _OPS = (Op.UNIDIRECTIONAL_SEQUENCE_RNN, Op.BIDIRECTIONAL_SEQUENCE_RNN,
            Op.UNIDIRECTIONAL_SEQUENCE_LSTM, Op.BIDIRECTIONAL_SEQUENCE_LSTM)

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type not in self._OPS:
            return results
        axis = 0 if _Instance(op, operands, inputs, outputs).scalar("time_major") else 1
        got = []
        for out, r in zip(outputs, results, strict=True):
            r = np.asarray(r)
            if out.rank == 3 and r.shape[axis] > 256:
                r = r.copy()
                r[(slice(None),) * axis + (slice(256, None),)] = 0
            got.append(r)
        return got


class EightBitCounts(MutantDriver):
    """A DMA engine whose descriptors hold sizes and offsets in 8 bits: TILE's multiples, PAD's
    leading paddings and SLICE's begins wrap at 256, and TOPK_V2 returns its indices in a byte.
    Every generated case stays far below (multiples of 3, paddings of 2, dimensions of 6)."""

    name = "eight_bit_counts"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is Op.TOPK_V2:
            return [results[0], (np.asarray(results[1]) & 0xFF).astype(np.int32)]
        if op.type not in (Op.TILE, Op.PAD, Op.PAD_V2, Op.SLICE):
            return results
        raw = list(inputs)
        v = np.asarray(raw[1])
        if op.type in (Op.PAD, Op.PAD_V2):
            v = v.copy()
            v[:, 0] &= 0xFF
            v[:, 1] += np.asarray(raw[1])[:, 0] - v[:, 0]  # the output keeps its size
        else:
            v = v & 0xFF
        raw[1] = v.astype(np.asarray(raw[1]).dtype)
        if op.type is Op.TILE:
            got = np.tile(np.asarray(inputs[0]), tuple(int(m) for m in raw[1]))
            out = np.zeros_like(np.asarray(results[0]))
            out[tuple(slice(0, d) for d in got.shape)] = got
            return [out]
        try:
            got = evaluate(get(op.type), operands, raw, outputs)
        except ValueError:
            return results
        if any(np.shape(g) != np.shape(r) for g, r in zip(got, results, strict=True)):
            return results
        return got


class SixteenBitTopkIndices(MutantDriver):
    """TOPK_V2 returns its indices through a 16-bit field: an index past 65535 wraps. Generated
    rows have a few elements, count_past_255's a few hundred."""

    name = "sixteen_bit_topk_indices"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.TOPK_V2:
            return results
        return [results[0], (np.asarray(results[1]) & 0xFFFF).astype(np.int32)]


class SixteenBitConcatOffsets(MutantDriver):
    """CONCATENATION holds each input's offset along the axis in 16 bits: an input starting past
    65535 lands at offset & 0xFFFF (over the earlier ones), what lies beyond is never written."""

    name = "sixteen_bit_concat_offsets"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.CONCATENATION:
            return results
        xs = [np.asarray(v) for v in inputs[:-1]]
        axis = int(np.asarray(inputs[-1]).item())
        out = np.asarray(results[0])
        if out.shape[axis] <= 1 << 16:
            return results
        got = np.zeros_like(out)
        start = 0
        for x in xs:
            at = start & 0xFFFF
            got[(slice(None),) * axis + (slice(at, at + x.shape[axis]),)] = \
                np.take(out, range(start, start + x.shape[axis]), axis=axis)
            start += x.shape[axis]
        return [got]


class BatchesFromFirstStateRow(MutantDriver):
    """The one bidirectional LSTM kernel (both cells of one size; other sizes run as two
    unidirectional ones) with merged outputs runs batch-major input one batch at a time and
    starts every batch from batch 0's activation-state rows (it never offsets them by the
    batch), as LiteRT's kernel misplaces them. Time-major input, separate outputs and one
    batch are right; the generated cases rarely have all of batch-major, merged, 2 batches and
    cells of one size."""

    name = "batches_from_first_state_row"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not Op.BIDIRECTIONAL_SEQUENCE_LSTM:
            return results
        inst = _Instance(op, operands, inputs, outputs)
        rows = [inst.position(f"{d}_activation_state_in") for d in ("fw", "bw")]
        sizes = {tuple(operands[inst.position(f"{d}_recurrent_to_output_weights")].dimensions)
                 for d in ("fw", "bw")}
        if inst.scalar("time_major") or not inst.scalar("merge_outputs") or len(sizes) > 1 or \
                any(np.shape(inputs[p])[0] < 2 for p in rows):
            return results
        raw = list(inputs)
        for p in rows:
            first = np.asarray(raw[p])[:1]
            raw[p] = np.repeat(first, np.shape(raw[p])[0], axis=0)
        return evaluate(inst.record, operands, raw, outputs)


class PerChannelTable256(MutantDriver):
    """Per-channel quantised filters (CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D,
    TRANSPOSE_CONV_2D) with a table of 256 channel scales: output channel c requantises with
    channel c & 255's scale. Generated filters have at most a dozen channels."""

    name = "per_channel_table_256"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        f = operands[1] if len(operands) > 1 else None
        if f is None or f.channel_quant is None or len(f.channel_quant.scales) <= 256:
            return results
        scales = np.asarray(f.channel_quant.scales)
        cq = dataclasses.replace(f.channel_quant, scales=tuple(scales[np.arange(scales.size) & 255]))
        faulty = list(operands)
        faulty[1] = dataclasses.replace(f, channel_quant=cq)
        return evaluate(get(op.type), faulty, inputs, outputs)


class EightBitBatches(MutantDriver):
    """Batched operations (the convolutions, FULLY_CONNECTED, BATCH_MATMUL, the poolings) count
    the batch in 8 bits: batch b past 255 gets batch b & 255's result. Generated batches are
    1..4."""

    name = "eight_bit_batches"
    _OPS = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D,
            Op.FULLY_CONNECTED, Op.BATCH_MATMUL, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.L2_POOL_2D)

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        r = np.asarray(results[0])
        if op.type not in self._OPS or r.ndim < 2 or r.shape[0] <= 256:
            return results
        return [r[np.arange(r.shape[0]) & 255], *results[1:]]


# The slices CI runs against each (test_operations.py's collection dominates their cost).
MUTANT_INFO = (
    MutantInfo(QuantActivationFromRange, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_saturate and quant8 and (ADD or SUB or MUL)")),
    MutantInfo(Fp16TilePartials, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_long and (REDUCE_SUM or MEAN)")),
    MutantInfo(ScaleFloorFp16, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_scale_tiny and sync")),
    MutantInfo(UnitScaleAsRaw, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_scale_one and sync")),
    MutantInfo(QuantInHalfPrecision, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_scale_large and sync")),
    MutantInfo(ZeroPointsFoldedInFloat32, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_scale_over_output and sync")),
    MutantInfo(LogSoftmaxAxisOfOneIsIdentity, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_axis_of_1 and SOFTMAX")),
    MutantInfo(BroadcastBothCyclic, "ACC-6", suite="test_operations.py",
               args=("-k", "edge_broadcast_complementary and sync")),
    MutantInfo(SamePaddingAtStrideOne, "ACC-6", suite="test_operations.py",
               args=("-k", "edge_window_stride_over_filter and implicit")),
    MutantInfo(L2ZeroSliceNaN, "ACC-1", suite="test_operations.py", args=("-k", "edge_zero_slice and sync")),
    MutantInfo(EarlySaturatingTable, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_every_value and sync")),
    MutantInfo(UnshiftedSoftmax, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_large_logits and sync")),
    MutantInfo(ExpQuotientOverflow, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_far_tails and sync")),
    MutantInfo(SqrtViaRsqrt, "ACC-1", suite="test_operations.py", args=("-k", "edge_zero_input and sync")),
    MutantInfo(SinOnePeriod, "ACC-1", suite="test_operations.py", args=("-k", "edge_many_periods and sync")),
    MutantInfo(LogOfSoftmax, "ACC-1", suite="test_operations.py", args=("-k", "edge_wide_logits and sync")),
    MutantInfo(MeanCountsAxesListed, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_duplicate_axis and MEAN and float and sync")),
    MutantInfo(ExpTableRange, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_wide_exponents and sync")),
    MutantInfo(LogWithoutExponentSplit, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_wide_magnitudes and sync")),
    MutantInfo(OrderedIntCompare, "ACC-3", suite="test_operations.py",
               args=("-k", "edge_signed_zeros and sync")),
    MutantInfo(CastThroughInt16, "ACC-3", suite="test_operations.py",
               args=("-k", "edge_wide_integers and sync")),
    MutantInfo(RsqrtFixedSeedNewton, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_wide_magnitudes and SQRT and sync")),
    MutantInfo(Gather16BitIndices, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_long_axis and float and sync")),
    MutantInfo(AvgPoolInt16Sum, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_global_window and sync")),
    MutantInfo(QuantizeThroughInt32, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_huge_inputs and sync")),
    MutantInfo(Int32ThroughFloat32, "ACC-3", suite="test_operations.py",
               args=("-k", "edge_int32_wide and sync")),
    MutantInfo(RequantMultiplierBelowOne, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_multiplier_above_one and sync")),
    MutantInfo(SixteenBitBias, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_quant_bias_wide and sync")),
    MutantInfo(HalfIntermediates, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_float16_wide and sync")),
    MutantInfo(SixteenBitSliceBounds, "ACC-6", suite="test_operations.py",
               args=("-k", "edge_int32_bounds and sync")),
    MutantInfo(Float32HashKeys, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_wide_keys and sync and float32")),
    MutantInfo(HalfNearestCoordinates, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_wide_output and sync and float32")),
    MutantInfo(Embedding16BitLookups, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_long_table and float and sync")),
    MutantInfo(HalfRangeConstants, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_float_wide and float32 and sync")),
    MutantInfo(EightBitSequenceSteps, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_long_sequence and RNN and float32 and sync")),
    MutantInfo(EightBitCounts, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_count_past_255 and float32 and sync")),
    MutantInfo(SixteenBitTopkIndices, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_long_axis and TOPK_V2 and float32")),
    MutantInfo(SixteenBitConcatOffsets, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_long_axis and CONCATENATION and float32")),
    MutantInfo(BatchesFromFirstStateRow, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_batch_major_twins and float32")),
    MutantInfo(PerChannelTable256, "ACC-2", suite="test_operations.py",
               args=("-k", "edge_count_past_255 and per_channel and sync")),
    MutantInfo(EightBitBatches, "ACC-1", suite="test_operations.py",
               args=("-k", "edge_count_past_255 and (POOL or BATCH_MATMUL or FULLY) and float32 and sync")),
)
