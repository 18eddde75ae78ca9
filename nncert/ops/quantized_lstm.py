"""The integer LSTM cells: QUANTIZED_16BIT_LSTM (HAL 1.2) and QUANTIZED_LSTM (HAL 1.3).

Both are defined by fixed-point arithmetic, not by a real-valued formula: the result is
whatever the documented integer steps give, so these records see raw stored integers
(``dequantize=False``) and the kernels carry out those steps exactly, in int64 numpy
arithmetic that reproduces the wrap-around and saturation of the int16 / int32 C types.
The building blocks are gemmlowp's fixed-point primitives (``FixedPoint<int16, k>``: a raw
integer with k integer bits) and TFLite's ``MultiplyByQuantizedMultiplier``:

- ``srdhm``: SaturatingRoundingDoublingHighMul, the product of two fixed-point numbers
  (a * b * 2 / 2^bits, rounded half away from zero; the one overflowing case, min * min,
  saturates);
- ``rdbpot``: RoundingDivideByPOT (arithmetic shift right, rounding half away from zero);
- ``mul_by_multiplier``: x * M * 2^shift with M a Q0.31 multiplier from ``quantize_multiplier``
  (frexp, rounded to 31 bits), left shift first, then srdhm, then a rounding right shift;
- ``logistic`` / ``tanh``: gemmlowp's, i.e. exp on [-1/4, 0) by a Taylor polynomial around
  -1/8, a barrel shifter of exp(-2^k) constants for the rest, and three Newton-Raphson
  steps for 1 / (1 + x) and (1 - x) / (1 + x).

QUANTIZED_16BIT_LSTM (TFLite's "basic" quantised LSTM cell): input and output uint8 with
scale 1/128, zero point 128; all eight weight matrices share one uint8 scale and zero
point; biases int32 with scale weights_scale / 128; the cell state int16 with scale 2^-11
(4 integer bits). Each gate's pre-activation is bias + [x - 128, prev_output - 128] .
([recurrent weights | input weights] - zp), the two halves concatenated in opposite orders:
that is what Android's CPU implementation computes (it builds TFLite's concatenated weight
matrix with the recurrent weights first and concatenates input before previous output)
and what CTS checks (its quantized_lstm example, input size 2, output size 4, holds only
for this product), so it is Android's semantics, though the documentation's wording reads
as input x input weights + previous output x recurrent weights; the two agree on nothing
but zero weights. The pre-activation is rescaled by ``quantize_multiplier(4096 * bias_scale)`` to Q3.12 and
saturated to int16; i, f, o = logistic, g = tanh (Q3.12 in, Q0.15 out); the new cell state
is saturating_add(rescale(i*g to 4 integer bits), f*c); the output is
128 + clamp(rdbpot(o * tanh(c rescaled to Q3.12), 8), -128, 127). Outputs: the new cell
state, then the output (both fed back: ``state``).

QUANTIZED_LSTM (TFLite's fully integer "8x8_16" LSTM): int8 input and output state, int8
symmetric weights, int16 cell state whose scale must be 2^k, -15 <= k <= -9. Each gate is
``MatrixBatchVectorMultiplyAccumulate`` of the input and of the previous output (each with
its own effective multiplier input_scale * weight_scale / gate_intermediate_scale, the
zero point folded into the bias), plus the peephole (cell weights x cell state, multiplier
2^k * peephole_scale / intermediate_scale), then layer normalisation (integer mean and
variance, inverse square root by Newton-Raphson, weight and bias, multiplier
layer_norm_scale * 2^12), then logistic (tanh<3> for the cell gate). CIFG: the input gate
is 32767 - forget gate. Cell: rdbpot(f * c, 15) + rdbpot(i * g, 30 + k), saturated, then
clipped to the quantised cell clip. Hidden: o * tanh<15+k>(c), multiplier
2^-30 / hidden_scale, plus the hidden zero point, int8. Projection (optional): a
``MatrixBatchVectorMultiplyAccumulate`` of the hidden state (minus its zero point, folded
into the bias) with the output state's zero point, clipped to the quantised projection clip.
Outputs: output state, cell state, output (= output state). Validity is Android's: its
validation checks the outputs' types only and its execution never reads their
quantisation, so the outputs may declare any scale and zero point and hold the values
computed with the state inputs' parameters; with CIFG, cell_to_input_weights may come (unused)
with the other two peepholes; a clip that is not above 0 (negative, NaN) is no clipping.

Where this follows TFLite's integer LSTM rather than Android's CPU implementation: the
CPU implementation ignores the gate biases when there is no layer normalisation (it builds
the effective biases without them), reads the output cell state buffer, before it is
written, for the input and forget gate peepholes (and, as TFLite's integer kernel does,
applies each peephole to only the first output_size units, a stride of output_size through
the [batch, units] buffers: NNAPI's peephole has one weight per unit, applied here to all),
dereferences a missing projection bias,
quantises the projection clip by the projection weights' scale, and subtracts the hidden
zero point where the usual convention (real = (q - zero point) x scale) adds it. The
documentation gives none of that: here the biases count, the input and forget peepholes
read the previous cell state (the output peephole the new one), a missing projection bias
is zero, the projection clip is in the output's scale, and the hidden zero point is added
(as LiteRT does; CTS's examples, all with layer normalisation and hidden zero point 0, hold
either way and are met bit for bit). The intermediate scales are used as given (with
layer normalisation the input of the normalisation; without it the gate activations read
the result as Q3.12, so a model means what TFLite does when they are 2^-12, which the
generated cases use). Effective scales are computed in float32 as the C++ code does.
"""

from __future__ import annotations

import math

import numpy as np

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
    Unknown,
    bias_of,
    fixed,
    follows,
    same_as,
    variant,
)

Q8, Q8S, Q8SYMM, Q16SYMM, I32 = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED,
                                 T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM, T.TENSOR_INT32)

# ---------------------------------------------------------------------------------------
# Fixed-point arithmetic (gemmlowp / TFLite), on int64 arrays holding int16 or int32 values


def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def wrap(x, bits: int) -> np.ndarray:
    """Two's complement wrap-around to a signed ``bits``-bit integer (C's narrowing)."""
    half = 1 << (bits - 1)
    return ((_i64(x) + half) & ((1 << bits) - 1)) - half


def saturate(x, bits: int) -> np.ndarray:
    half = 1 << (bits - 1)
    return np.clip(_i64(x), -half, half - 1)


def _tdiv(n, d: int) -> np.ndarray:
    """C integer division (truncating toward zero) by a positive ``d``."""
    n = _i64(n)
    q = np.abs(n) // d
    return np.where(n < 0, -q, q)


def srdhm(a, b, bits: int = 32) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul of two ``bits``-bit raw values."""
    a, b = _i64(a), _i64(b)
    lo = -(1 << (bits - 1))
    ab = a * b
    nudge = np.where(ab >= 0, 1 << (bits - 2), 1 - (1 << (bits - 2)))
    r = _tdiv(ab + nudge, 1 << (bits - 1))
    return np.where((a == b) & (a == lo), -lo - 1, r)


def rdbpot(x, exponent: int) -> np.ndarray:
    """RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x = _i64(x)
    if exponent == 0:
        return x
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def sat_mul_pot(x, exponent: int, bits: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT: a saturating left shift, or rdbpot."""
    x = _i64(x)
    if exponent <= 0:
        return rdbpot(x, -exponent)
    threshold = (1 << (bits - 1 - exponent)) - 1
    r = x << exponent
    r = np.where(x > threshold, (1 << (bits - 1)) - 1, r)
    return np.where(x < -threshold, -(1 << (bits - 1)), r)


def sat_add(a, b, bits: int) -> np.ndarray:
    return saturate(_i64(a) + _i64(b), bits)


def quantize_multiplier(m: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: (Q0.31 multiplier, shift) with m = M * 2^(shift - 31)."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    fixed_ = math.floor(abs(q) * (1 << 31) + 0.5) * (1 if q > 0 else -1)
    if fixed_ == 1 << 31:
        fixed_ //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed_, shift


def mul_by_multiplier(x, multiplier: int, shift: int) -> np.ndarray:
    """MultiplyByQuantizedMultiplier (int32 in, int32 out; the left shift wraps as in C)."""
    left, right = max(shift, 0), max(-shift, 0)
    return rdbpot(srdhm(wrap(_i64(x) << left, 32), multiplier, 32), right)


def _constant(raw32: int, bits: int) -> int:
    """GEMMLOWP_CHECKED_FIXEDPOINT_CONSTANT: an int32 raw constant, rounded to ``bits``."""
    return int(rdbpot(raw32, 32 - bits))


def _exp_quarter(a: np.ndarray, bits: int) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), both with 0 integer bits."""
    term = _constant(1895147668, bits)  # exp(-1/8)
    third = _constant(715827883, bits)
    x = wrap(a + (1 << (bits - 4)), bits)  # a + 1/8
    x2 = srdhm(x, x, bits)
    x3 = srdhm(x2, x, bits)
    x4 = srdhm(x2, x2, bits)
    poly = rdbpot(wrap(srdhm(wrap(rdbpot(x4, 2) + x3, bits), third, bits) + x2, bits), 1)
    inner = srdhm(term, wrap(x + poly, bits), bits)
    return sat_add(term, inner, bits) if bits == 16 else wrap(term + inner, bits)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
           (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int, bits: int = 16) -> np.ndarray:
    """exp(a) for a <= 0 with ``integer_bits``; the result has 0 integer bits."""
    a = _i64(a)
    frac = bits - 1 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = wrap((a & (quarter - 1)) - quarter, bits)
    result = _exp_quarter(sat_mul_pot(a_mod, integer_bits, bits), bits)
    remainder = wrap(a_mod - a, bits)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            k = _constant(multiplier, bits)
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, k, bits), result)
    if integer_bits > 5:
        clamp = _constant(-(1 << (36 - integer_bits)), bits)  # -32
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, (1 << (bits - 1)) - 1, result)


def _newton(a: np.ndarray, bits: int) -> np.ndarray:
    """Three Newton-Raphson steps for 1 / (1 + a), a in (0, 1); the result has 2 integer bits
    and is half of it (gemmlowp's one_over_one_plus_x and one_minus_x_over_one_plus_x)."""
    one0 = (1 << (bits - 1)) - 1
    s = a + one0
    half = _tdiv(s + np.where(s >= 0, 1, -1), 2)  # RoundingHalfSum(a, 1)
    x = wrap(_constant(1515870810, bits) + srdhm(half, _constant(-1010580540, bits), bits), bits)
    one2 = 1 << (bits - 3)
    for _ in range(3):
        err = wrap(one2 - srdhm(half, x, bits), bits)
        x = wrap(x + sat_mul_pot(srdhm(x, err, bits), 2, bits), bits)
    return x


def logistic(a, integer_bits: int, bits: int = 16) -> np.ndarray:
    """gemmlowp::logistic of FixedPoint<int{bits}, integer_bits>; Q0.(bits-1) out."""
    a = _i64(a)
    positive = a > 0
    magnitude = np.where(positive, a, wrap(-a, bits))
    e = exp_on_negative_values(wrap(-magnitude, bits), integer_bits, bits)
    if_positive = sat_mul_pot(_newton(e, bits), 1, bits)
    if_negative = wrap(((1 << (bits - 1)) - 1) - if_positive, bits)
    return np.where(a == 0, _constant(1 << 30, bits), np.where(positive, if_positive, if_negative))


def tanh(a, integer_bits: int, bits: int = 16) -> np.ndarray:
    """gemmlowp::tanh of FixedPoint<int{bits}, integer_bits>; Q0.(bits-1) out."""
    a = _i64(a)
    negative = a < 0
    n = np.where(negative, a, wrap(-a, bits))
    e = exp_on_negative_values(n, integer_bits + 1, bits)  # exp(2n): one more integer bit
    t = sat_mul_pot(wrap(_newton(e, bits) - (1 << (bits - 3)), bits), 2, bits)
    return np.where(a == 0, 0, np.where(negative, wrap(-t, bits), t))


def inv_sqrt_multiplier(value: int) -> tuple[int, int]:
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1): (multiplier, shift) with
    1 / sqrt(value) = multiplier * 2^(shift - 31), by five Newton-Raphson steps in Q3.28."""
    if value <= 1:
        return (1 << 31) - 1, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    pairs = ((32 - value.bit_length()) - 1) // 2 - 1
    shift -= pairs
    value <<= 2 * pairs
    half_input = int(rdbpot(value >> 1, 1))
    half_three = (1 << 28) + (1 << 27)
    x = 1 << 28
    for _ in range(5):
        x3 = int(sat_mul_pot(srdhm(srdhm(x, x), x), 6, 32))
        x = int(sat_mul_pot(wrap(srdhm(half_three, x) - srdhm(half_input, x3), 32), 3, 32))
    x = int(srdhm(x, 1518500250))  # sqrt(2) / 2
    if shift < 0:
        x <<= -shift
        shift = 0
    return x, -shift


def _f32(x: float) -> float:
    return float(np.float32(x))


def _scale_ratio(a: float, b: float, c: float) -> float:
    """a * b / c in float32 arithmetic (how the C++ code computes an effective scale)."""
    return _f32(np.float32(np.float32(a) * np.float32(b)) / np.float32(c))


def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """[B, K] x [N, K]^T in int64 (exact for the sizes here), wrapped to int32 as C sums."""
    return wrap(_i64(x) @ _i64(w).T, 32)


def _accumulate(x, bias, w, scale: float, out_zp: int, acc, bits: int) -> np.ndarray:
    """MatrixBatchVectorMultiplyAccumulate: acc + zp + rescale(bias + x w^T), saturated."""
    m, s = quantize_multiplier(scale)
    r = mul_by_multiplier(wrap(_matmul(x, w) + _i64(bias), 32), m, s)
    return saturate(r + out_zp + acc, bits)


# ---------------------------------------------------------------------------------------
# QUANTIZED_16BIT_LSTM


_W16 = same_as("input_to_input_weights")
_Q16_LSTM = Signature(
    inputs=(
        Arg("input", "T", ranks=(2,), quant=fixed(1 / 128, 128)),
        Arg("input_to_input_weights", "T", ranks=(2,), const=True),
        *(Arg(f"input_to_{g}_weights", "T", ranks=(2,), quant=_W16, const=True)
          for g in ("forget", "cell", "output")),
        *(Arg(f"recurrent_to_{g}_weights", "T", ranks=(2,), quant=_W16, const=True)
          for g in ("input", "forget", "cell", "output")),
        *(Arg(f"{g}_gate_bias", I32, ranks=(1,), quant=bias_of("input", "input_to_input_weights"), const=True)
          for g in ("input", "forget", "cell", "output")),
        Arg("prev_cell_state", Q16SYMM, ranks=(2,), quant=fixed(2.0**-11, 0)),
        Arg("prev_output", "T", ranks=(2,), quant=fixed(1 / 128, 128)),
    ),
    outputs=(Arg("cell_state_out", Q16SYMM, quant=fixed(2.0**-11, 0)),
             Arg("output", "T", quant=fixed(1 / 128, 128))),
)

_GATES = ("input", "forget", "cell", "output")

#: The gate order of the one weight matrix of TFLite's basic LSTM kernel (which Android's CPU
#: implementation builds from the eight HAL matrices): blocks of output_size rows.
BASIC_GATE_ORDER = ("input", "cell", "forget", "output")


def basic_gate_weights(recurrent: np.ndarray, input_: np.ndarray) -> np.ndarray:
    """One gate's block of the basic kernel's matrix: [recurrent weights | input weights]."""
    return np.concatenate([recurrent, input_], axis=1)


def basic_concatenate(value) -> tuple[np.ndarray, np.ndarray]:
    """The basic kernel's weights [4 * output_size, output_size + input_size] and bias
    [4 * output_size] from the HAL inputs (``value``: name -> stored values)."""
    w = np.concatenate([basic_gate_weights(value(f"recurrent_to_{g}_weights"), value(f"input_to_{g}_weights"))
                        for g in BASIC_GATE_ORDER])
    return w, np.concatenate([value(f"{g}_gate_bias") for g in BASIC_GATE_ORDER])


def basic_split(weights: np.ndarray, bias: np.ndarray, output_size: int) -> dict[str, np.ndarray]:
    """``basic_concatenate`` undone: HAL input name -> stored values."""
    out: dict[str, np.ndarray] = {}
    for k, g in enumerate(BASIC_GATE_ORDER):
        rows = slice(k * output_size, (k + 1) * output_size)
        out[f"recurrent_to_{g}_weights"] = weights[rows, :output_size]
        out[f"input_to_{g}_weights"] = weights[rows, output_size:]
        out[f"{g}_gate_bias"] = bias[rows]
    return out


def _q16_sizes(ctx: OpContext) -> tuple[int, int, int]:
    batches, input_size = ctx.dims("input")
    prev = ctx.dims("prev_output")
    if prev[0] != batches:
        raise ShapeError(f"prev_output has {prev[0]} batches, input has {batches}")
    output_size = prev[1]
    for g in _GATES:
        for kind, cols in (("input", input_size), ("recurrent", output_size)):
            d = ctx.dims(f"{kind}_to_{g}_weights")
            if d != (output_size, cols):
                raise ShapeError(f"{kind}_to_{g}_weights has shape {list(d)}, expected "
                                 f"[{output_size}, {cols}]")
        d = ctx.dims(f"{g}_gate_bias")
        if d != (output_size,):
            raise ShapeError(f"{g}_gate_bias has shape {list(d)}, expected [{output_size}]")
    cell = ctx.dims("prev_cell_state")
    if cell != (batches, output_size):
        raise ShapeError(f"prev_cell_state has shape {list(cell)}, expected [{batches}, {output_size}]")
    return batches, input_size, output_size


def _q16_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    b, _, o = _q16_sizes(ctx)
    return [(b, o), (b, o)]


def _q16_check(ctx: OpContext) -> None:
    if ctx.operand("input_to_input_weights").scale <= 0:
        raise ShapeError("the weights' scale must be positive")


def _q16_kernel(ctx: OpContext) -> list[np.ndarray]:
    wzp = ctx.operand("input_to_input_weights").zero_point
    x = _i64(ctx.value("input")) - 128
    h = _i64(ctx.value("prev_output")) - 128
    c = _i64(ctx.value("prev_cell_state"))
    m, s = quantize_multiplier(float(np.float32(4096) * np.float32(ctx.operand("input_gate_bias").scale)))
    act = {}
    xh = np.concatenate([x, h], axis=1)
    for g in _GATES:
        w = basic_gate_weights(_i64(ctx.value(f"recurrent_to_{g}_weights")),
                               _i64(ctx.value(f"input_to_{g}_weights"))) - wzp
        acc = wrap(_matmul(xh, w) + _i64(ctx.value(f"{g}_gate_bias")), 32)
        act[g] = saturate(mul_by_multiplier(acc, m, s), 16)  # Q3.12
    i, f, o = (logistic(act[g], 3) for g in ("input", "forget", "output"))
    g = tanh(act["cell"], 3)
    new_c = sat_add(rdbpot(srdhm(i, g, 16), 4), srdhm(f, c, 16), 16)  # Q4.11
    hidden = srdhm(o, tanh(sat_mul_pot(new_c, 1, 16), 3), 16)  # tanh of c rescaled to Q3.12
    out = np.clip(rdbpot(hidden, 8), -128, 127) + 128
    return [new_c.astype(np.int16), out.astype(np.uint8)]


def _q16_sample(s: SampleContext, wide: bool = False) -> None:
    """Small cells, weights around +-1 (scale 0.004-0.012), biases in [-1, 1]. ``wide``: the
    full weight range, a previous cell state near +-16 and biases of 6-8 pushing every gate
    towards saturation, with the cell gate's sign that of the state, so that the new cell
    state saturates at the int16 bounds."""
    b, n_in, n_out = s.draw.int(1, 2), s.draw.int(1, 5), s.draw.int(1, 4)
    w_scale = float(np.float32(s.draw.float(0.004, 0.012)))
    w_zp = s.draw.int(96, 160)
    sign = np.where(s.draw.integers((n_out,), 0, 1) == 1, 1, -1)
    s.tensor("input", (b, n_in))
    for g in _GATES:
        for kind, cols in (("input", n_in), ("recurrent", n_out)):
            name = f"{kind}_to_{g}_weights"
            value = s.draw.integers((n_out, cols), 0 if wide else 40, 255 if wide else 216)
            s.tensor(name, (n_out, cols), value.astype(np.uint8), const=True,
                     scale=w_scale if name == "input_to_input_weights" else None,
                     zero_point=w_zp if name == "input_to_input_weights" else None)
        step = w_scale / 128
        if wide:
            bias = s.draw.array((n_out,), 6.0, 8.0) * (sign if g == "cell" else 1) / step
        else:
            bias = s.draw.array((n_out,), -1.0, 1.0) / step
        s.tensor(f"{g}_gate_bias", (n_out,), np.round(bias).astype(np.int32), const=True)
    if wide:
        cell = s.draw.integers((b, n_out), 30000, 32767) * sign
    else:
        cell = s.draw.integers((b, n_out), -8000, 8000)
    s.tensor("prev_cell_state", (b, n_out), cell.astype(np.int16))
    s.tensor("prev_output", (b, n_out))


def _saturated_cell(out0: np.ndarray) -> int:
    return edges.FULL if np.any(np.abs(_i64(out0)) >= 32767) else 0


_Q16_RECORD = OpRecord(
    Op.QUANTIZED_16BIT_LSTM, (_Q16_LSTM,), (variant(Version.V1_2, T=Q8),),
    _q16_kernel, _q16_shape, _q16_sample, criterion="strict", dequantize=False, check=_q16_check,
    state=(("prev_cell_state", 0), ("prev_output", 1)),
    edges=(edges.Edge("saturated_cell_state", "saturate",
                      "gate inputs past Q3.12's +-8 and a previous cell state near +-16: the new "
                      "cell state saturates at the int16 bounds, and is fed back",
                      sample=lambda s: _q16_sample(s, wide=True), reached=_saturated_cell),),
    graphs="fixed input, output and cell state scales (1/128, 2^-11) that no other operation's "
           "output has, and eight constant weight matrices sharing one quantisation",
    doc="one LSTM cell step in 8-bit / 16-bit fixed point (TFLite's basic quantised LSTM): "
        "outputs the new cell state and the output",
)


# ---------------------------------------------------------------------------------------
# QUANTIZED_LSTM

_QLSTM = Signature(
    inputs=(
        Arg("input", "T", ranks=(2,)),
        Arg("input_to_input_weights", Q8SYMM, ranks=(2,), optional=True, const=True),
        *(Arg(f"input_to_{g}_weights", Q8SYMM, ranks=(2,), const=True) for g in ("forget", "cell", "output")),
        Arg("recurrent_to_input_weights", Q8SYMM, ranks=(2,), optional=True, const=True),
        *(Arg(f"recurrent_to_{g}_weights", Q8SYMM, ranks=(2,), const=True)
          for g in ("forget", "cell", "output")),
        *(Arg(f"cell_to_{g}_weights", Q16SYMM, ranks=(1,), optional=True, const=True)
          for g in ("input", "forget", "output")),
        Arg("input_gate_bias", I32, ranks=(1,), optional=True, const=True),
        *(Arg(f"{g}_gate_bias", I32, ranks=(1,), const=True) for g in ("forget", "cell", "output")),
        Arg("projection_weights", Q8SYMM, ranks=(2,), optional=True, const=True),
        Arg("projection_bias", I32, ranks=(1,), optional=True, const=True),
        Arg("output_state_in", "T", ranks=(2,)),
        Arg("cell_state_in", Q16SYMM, ranks=(2,)),
        *(Arg(f"{g}_layer_norm_weights", Q16SYMM, ranks=(1,), optional=True, const=True) for g in _GATES),
        Arg("cell_clip", T.FLOAT32),
        Arg("projection_clip", T.FLOAT32),
        *(Arg(f"{g}_intermediate_scale", T.FLOAT32) for g in _GATES),
        Arg("hidden_state_zero_point", T.INT32),
        Arg("hidden_state_scale", T.FLOAT32),
    ),
    # Android checks only the outputs' types: the values are computed with the state
    # inputs' parameters, whatever quantisation the outputs declare.
    outputs=(Arg("output_state_out", "T", quant=follows("output_state_in")),
             Arg("cell_state_out", Q16SYMM, quant=follows("cell_state_in")),
             Arg("output", "T", quant=follows("output_state_in"))),
)


def _all_or_none(ctx: OpContext, names: list[str], what: str) -> bool:
    present = [ctx.has(n) for n in names]
    if any(present) and not all(present):
        given = ", ".join(n for n, p in zip(names, present, strict=True) if p)
        raise ShapeError(f"{what}: all of {', '.join(names)} or none (given: {given})")
    return all(present)


def _qlstm_sizes(ctx: OpContext) -> tuple[int, int, int, int]:
    batches, input_size = ctx.dims("input")
    units = ctx.dims("input_to_output_weights")[0]
    output_size = ctx.dims("recurrent_to_output_weights")[1]
    cifg = not _all_or_none(ctx, ["input_to_input_weights", "recurrent_to_input_weights"], "CIFG")
    expect = {f"input_to_{g}_weights": (units, input_size) for g in _GATES}
    expect.update({f"recurrent_to_{g}_weights": (units, output_size) for g in _GATES})
    expect.update({f"cell_to_{g}_weights": (units,) for g in ("input", "forget", "output")})
    expect.update({f"{g}_gate_bias": (units,) for g in _GATES})
    expect.update({f"{g}_layer_norm_weights": (units,) for g in _GATES})
    expect.update({"projection_weights": (output_size, units), "projection_bias": (output_size,),
                   "output_state_in": (batches, output_size), "cell_state_in": (batches, units)})
    for name, want in expect.items():
        if ctx.has(name) and ctx.dims(name) != want:
            raise ShapeError(f"{name} has shape {list(ctx.dims(name))}, expected {list(want)}")
    # With CIFG, cell_to_input_weights may be given (and is unused) along with the other two.
    peep = ["cell_to_forget_weights", "cell_to_output_weights"]
    if not cifg or ctx.has("cell_to_input_weights"):
        peep.append("cell_to_input_weights")
    _all_or_none(ctx, peep, "peephole weights")
    if cifg == ctx.has("input_gate_bias"):
        raise ShapeError("input_gate_bias must be given exactly when the input gate is (no CIFG)")
    norms = [f"{g}_layer_norm_weights" for g in _GATES if not (cifg and g == "input")]
    _all_or_none(ctx, norms, "layer normalisation weights")
    if cifg and ctx.has("input_layer_norm_weights"):
        raise ShapeError("input_layer_norm_weights is given with CIFG (no input gate)")
    if not ctx.has("projection_weights") and output_size != units:
        raise ShapeError(f"without projection the output size ({output_size}) must equal the number "
                         f"of units ({units})")
    return batches, input_size, units, output_size


def _qlstm_shape(ctx: OpContext) -> list[tuple[int, ...]]:
    b, _, n, o = _qlstm_sizes(ctx)
    return [(b, o), (b, n), (b, o)]


def _cell_shift(ctx: OpContext) -> int:
    """k of the cell state's scale 2^k, -15 <= k <= -9 (what the arithmetic is built for)."""
    scale = ctx.operand("cell_state_in").scale
    k = round(math.log2(scale)) if scale > 0 else 0
    if scale <= 0 or abs(math.log2(scale) - k) >= 1e-3 or not -15 <= k <= -9:
        raise ShapeError(f"cell_state_in's scale must be a power of two from 2^-15 to 2^-9, is {scale:g}")
    return k


def _qlstm_check(ctx: OpContext) -> None:
    _cell_shift(ctx)
    cifg = not ctx.has("input_to_input_weights")
    scalars = ["hidden_state_scale"] + [f"{g}_intermediate_scale" for g in _GATES
                                        if not (cifg and g == "input")]
    for name in scalars:
        try:
            v = float(ctx.value(name))
        except Unknown:
            continue
        if not (math.isfinite(v) and v > 0):
            raise ShapeError(f"{name} must be positive and finite, is {v:g}")
    try:
        zp = int(ctx.value("hidden_state_zero_point"))
    except Unknown:
        zp = 0
    if not -128 <= zp <= 127:
        raise ShapeError(f"hidden_state_zero_point must be in [-128, 127], is {zp}")
    for name in ("input", "output_state_in"):
        if ctx.operand(name).scale <= 0:
            raise ShapeError(f"{name}'s scale must be positive")


def _qlstm_kernel(ctx: OpContext) -> list[np.ndarray]:
    b, _, n, _ = _qlstm_sizes(ctx)
    k = _cell_shift(ctx)
    x_op, h_op = ctx.operand("input"), ctx.operand("output_state_in")
    x, h = _i64(ctx.value("input")), _i64(ctx.value("output_state_in"))
    c = _i64(ctx.value("cell_state_in"))
    cifg = not ctx.has("input_to_input_weights")
    norm = ctx.has("forget_layer_norm_weights")
    peephole = ctx.has("cell_to_forget_weights")

    def gate(g: str, cell: np.ndarray, activation) -> np.ndarray:
        inter = float(ctx.value(f"{g}_intermediate_scale"))
        acc = np.zeros((b, n), np.int64)
        for kind, v, op in (("input", x, x_op), ("recurrent", h, h_op)):
            w_op = ctx.operand(f"{kind}_to_{g}_weights")
            w = _i64(ctx.value(f"{kind}_to_{g}_weights"))
            bias = -op.zero_point * w.sum(axis=1)
            if kind == "input" and not norm:
                bias = bias + _i64(ctx.value(f"{g}_gate_bias"))
            acc = _accumulate(v, bias, w, _scale_ratio(w_op.scale, op.scale, inter), 0, acc, 16)
        if peephole and g != "cell":
            p_op = ctx.operand(f"cell_to_{g}_weights")
            m, s = quantize_multiplier(_f32(2.0**k * _f32(p_op.scale) / _f32(inter)))
            prod = mul_by_multiplier(_i64(ctx.value(f"cell_to_{g}_weights")) * cell, m, s)
            acc = saturate(prod + acc, 16)
        if norm:
            ln_op = ctx.operand(f"{g}_layer_norm_weights")
            acc = layer_norm(acc, _i64(ctx.value(f"{g}_layer_norm_weights")),
                             _i64(ctx.value(f"{g}_gate_bias")), ln_op.scale)
        return activation(acc, 3)

    f = gate("forget", c, logistic)
    g = gate("cell", c, tanh)
    i = ((1 << 15) - 1) - f if cifg else gate("input", c, logistic)
    new_c = saturate(rdbpot(f * c, 15) + rdbpot(i * g, 30 + k), 16)
    cell_clip = float(np.float32(ctx.value("cell_clip")))
    if cell_clip > 0:
        q = int(min(max(float(np.float32(cell_clip) / np.float32(ctx.operand("cell_state_in").scale)),
                        -32768.0), 32767.0))
        if q > 0:
            new_c = np.clip(new_c, -q, q)
    o = gate("output", new_c, logistic)
    hidden_scale = float(np.float32(ctx.value("hidden_state_scale")))
    hidden_zp = int(ctx.value("hidden_state_zero_point"))
    m, s = quantize_multiplier(_f32(2.0**-15 / hidden_scale * 2.0**-15))
    hidden = np.clip(mul_by_multiplier(o * tanh(new_c, 15 + k), m, s) + hidden_zp, -128, 127)
    if ctx.has("projection_weights"):
        p_op = ctx.operand("projection_weights")
        w = _i64(ctx.value("projection_weights"))
        bias = -hidden_zp * w.sum(axis=1)
        if ctx.has("projection_bias"):
            bias = bias + _i64(ctx.value("projection_bias"))
        out = _accumulate(hidden, bias, w, _scale_ratio(p_op.scale, hidden_scale, h_op.scale),
                          h_op.zero_point, 0, 8)
        clip = float(np.float32(ctx.value("projection_clip")))
        if clip > 0:
            q = int(min(max(float(np.float32(clip) / np.float32(h_op.scale)), -128.0), 127.0))
            if q > 0:
                out = np.clip(out, -q, q)
    else:
        out = hidden
    out = out.astype(np.int8)
    return [out, new_c.astype(np.int16), out.copy()]


def layer_norm(acc: np.ndarray, weights: np.ndarray, bias: np.ndarray, scale: float) -> np.ndarray:
    """TFLite's integer ApplyLayerNorm of int16 rows: output Q3.12 (int16)."""
    m, s = quantize_multiplier(float(np.float32(scale)))
    guard = min(1, int(np.float32(10000) * np.float32(scale)))
    n = acc.shape[1]
    out = np.empty_like(acc)
    for r in range(acc.shape[0]):
        row = acc[r]
        mean = int(_tdiv(int(row.sum()) * 1024, n))
        variance = int((row * row).sum()) * ((1 << 20) // n) - mean * mean
        variance = int(_tdiv(variance, 1 << 20))
        if variance < 1:
            variance = guard
        inv_m, inv_s = inv_sqrt_multiplier(variance)
        rescaled = mul_by_multiplier(wrap(1024 * row - mean, 32), inv_m, inv_s)
        v3 = wrap(wrap(rescaled * weights, 32) + bias, 32)
        v4 = _tdiv(np.where(v3 > 0, v3 + 512, v3 - 512), 1024)
        out[r] = saturate(mul_by_multiplier(v4, m, s + 12), 16)
    return out


def _qlstm_sample(s: SampleContext, *, cifg: bool | None = None, peephole: bool | None = None,
                  norm: bool | None = None, projection: bool | None = None, clip: bool | None = None,
                  wide: bool = False) -> None:
    """A small cell with each option drawn (or forced): CIFG, peephole, layer normalisation,
    projection (with or without bias), cell and projection clips. Scales keep values in
    range: gate inputs within Q3.12 (intermediate scale 2^-12 without layer normalisation),
    the hidden state near 1/128. ``wide``: weights and biases four times wider, so that the
    int16 accumulators, the cell state and the int8 outputs saturate."""
    d = s.draw
    b, n_in, units = d.int(1, 2), d.int(1, 5), d.int(1, 4)
    cifg = d.bool(0.3) if cifg is None else cifg
    peephole = d.bool(0.4) if peephole is None else peephole
    norm = d.bool(0.5) if norm is None else norm
    projection = d.bool(0.4) if projection is None else projection
    clip = d.bool(0.3) if clip is None else clip
    n_out = d.int(1, 4) if projection else units
    k = d.int(-15, -11)
    spread = 4.0 if wide else 1.0
    x_scale = _f32(d.float(0.005, 0.02))
    s.tensor("input", (b, n_in), d.integers((b, n_in), -128, 127).astype(np.int8),
             scale=x_scale, zero_point=d.int(-20, 20))
    hidden_scale = _f32(d.float(0.006, 0.01))
    if projection:
        h_scale, h_zp, hidden_zp = _f32(d.float(0.005, 0.02)), d.int(-10, 10), d.int(-10, 10)
    else:
        h_zp = d.int(-10, 10)
        h_scale, hidden_zp = hidden_scale, h_zp
    s.tensor("output_state_in", (b, n_out), d.integers((b, n_out), -128, 127).astype(np.int8),
             scale=h_scale, zero_point=h_zp)
    lim = 32767 if wide else 10000
    s.tensor("cell_state_in", (b, units), d.integers((b, units), -lim, lim).astype(np.int16),
             scale=2.0**k, zero_point=0)
    gates = [g for g in _GATES if not (cifg and g == "input")]
    ln_scale = {g: _f32(d.float(2e-5, 6e-5)) for g in gates}
    inter = {g: _f32(d.float(5e-4, 2e-3) / spread) if norm else 2.0**-12 for g in _GATES}
    for g in _GATES:
        if g not in gates:
            for name in (f"input_to_{g}_weights", f"recurrent_to_{g}_weights", f"cell_to_{g}_weights",
                         f"{g}_gate_bias", f"{g}_layer_norm_weights"):
                s.omit(name)
            continue
        w_scale = {}
        for kind, cols in (("input", n_in), ("recurrent", n_out)):
            w_scale[kind] = _f32(d.float(0.004, 0.01) * spread)
            s.tensor(f"{kind}_to_{g}_weights", (units, cols),
                     d.integers((units, cols), -127, 127).astype(np.int8), const=True, scale=w_scale[kind])
        if peephole and g != "cell":
            s.tensor(f"cell_to_{g}_weights", (units,), d.integers((units,), -16000, 16000).astype(np.int16),
                     const=True, scale=_f32(d.float(1e-5, 4e-5)), zero_point=0)
        elif g != "cell":
            s.omit(f"cell_to_{g}_weights")
        bias_real = d.array((units,), -spread, spread)
        bias_scale = ln_scale[g] / 1024 if norm else x_scale * w_scale["input"]
        s.tensor(f"{g}_gate_bias", (units,), np.round(bias_real / bias_scale).astype(np.int32), const=True)
        if norm:
            s.tensor(f"{g}_layer_norm_weights", (units,), d.integers((units,), 3000, 32767).astype(np.int16),
                     const=True, scale=ln_scale[g], zero_point=0)
        else:
            s.omit(f"{g}_layer_norm_weights")
    if projection:
        pw_scale = _f32(d.float(0.005, 0.02) * spread)
        s.tensor("projection_weights", (n_out, units), d.integers((n_out, units), -127, 127).astype(np.int8),
                 const=True, scale=pw_scale)
        if d.bool(0.7):
            bias = d.array((n_out,), -0.5 * spread, 0.5 * spread) / (pw_scale * hidden_scale)
            s.tensor("projection_bias", (n_out,), np.round(bias).astype(np.int32), const=True)
        else:
            s.omit("projection_bias")
    else:
        s.omit("projection_weights")
        s.omit("projection_bias")
    s.scalar("cell_clip", _f32(d.float(0.3, 0.9) * 2.0 ** (k + 15)) if clip else 0.0)
    s.scalar("projection_clip", _f32(d.float(0.3, 0.8) * 127 * h_scale) if clip and projection else 0.0)
    for g in _GATES:
        s.scalar(f"{g}_intermediate_scale", inter[g])
    s.scalar("hidden_state_zero_point", hidden_zp)
    s.scalar("hidden_state_scale", hidden_scale)


def _qlstm_edge(name: str, doc: str, **options) -> edges.Edge:
    return edges.Edge(name, "options", doc, sample=lambda s: _qlstm_sample(s, **options))


_QLSTM_RECORD = OpRecord(
    Op.QUANTIZED_LSTM, (_QLSTM,), (variant(Version.V1_3, T=Q8S),),
    _qlstm_kernel, _qlstm_shape, _qlstm_sample, criterion="strict", dequantize=False,
    check=_qlstm_check, state=(("output_state_in", 0), ("cell_state_in", 1)),
    edges=(
        _qlstm_edge("every_option", "input gate, peepholes, layer normalisation, projection and both "
                    "clips at once", cifg=False, peephole=True, norm=True, projection=True, clip=True),
        _qlstm_edge("cifg_plain", "CIFG (input gate = 1 - forget gate) with no other option",
                    cifg=True, peephole=False, norm=False, projection=False, clip=False),
        _qlstm_edge("cifg_peephole_norm", "CIFG with peepholes and layer normalisation of the three "
                    "remaining gates", cifg=True, peephole=True, norm=True, projection=False),
        _qlstm_edge("saturating", "weights and biases four times wider and a cell state near "
                    "+-32767: gate pre-activations towards and past Q3.12's +-8",
                    norm=False, clip=False, wide=True),
    ),
    graphs="a state pair (int8 output state, int16 cell state of a power-of-two scale) fed back, "
           "many constant weight tensors and intermediate scales fixed by the model: nothing "
           "another operation outputs fits its inputs",
    doc="one step of the fully integer LSTM (TFLite's 8x8_16 kernel): optional CIFG, peephole, "
        "layer normalisation, projection and clips; outputs the output state, the cell state "
        "and the output",
)

RECORDS = [_Q16_RECORD, _QLSTM_RECORD]
