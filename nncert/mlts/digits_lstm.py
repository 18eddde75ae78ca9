"""The recurrent digits classifier of the MLTS zoo: an LSTM that reads each 8x8 digit of
``nncert.mlts.datasets.digits()`` as a sequence of 8 rows of 8 pixels, trained here at build
time on the training split, deterministically (numpy only: BPTT through the 8 steps, fixed
seed, full-batch Adam, one BLAS thread; ``nncert.mlts.training``), and given as a float32
HAL model:

    input (1, 8, 8) float32            batch-major: 8 time steps (rows) of 8 features (pixels),
                                       pixel values 0-16 scaled to [0, 1]
    UNIDIRECTIONAL_SEQUENCE_LSTM       32 units, no CIFG, peepholes, projection or layer
                                       normalisation; TANH cell activation; zero initial state
                                       -> (1, 8, 32)
    SLICE the last step, RESHAPE       -> (1, 32)
    FULLY_CONNECTED 32 -> 10
    SOFTMAX (beta 1)                   output (1, 10): the probability of each digit 0-9

``preprocess`` turns a digit image into the model's input. ``predict`` runs the trained weights
in float64 numpy (the training's own forward pass). The test split's accuracy through the
reference interpreter is about 0.97 (at least 0.9 is required).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op

STEPS, FEATURES = 8, 8  # rows, pixels per row
UNITS = 32
EPOCHS = 100
LEARNING_RATE = 0.03
WEIGHT_DECAY = 1e-4
SEED = 0
#: The HAL's fused activation code of the cell and output activation (TANH).
TANH = 4


def preprocess(image: np.ndarray) -> np.ndarray:
    """An 8x8 digit (pixel values 0-16) as the model's (1, 8, 8) float32 input in [0, 1]."""
    return (np.asarray(image, np.float32).reshape(1, STEPS, FEATURES) / np.float32(16.0)).astype(np.float32)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for any z


def _forward(params: list[np.ndarray], x: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]]]:
    """Logits of ``x`` (N, STEPS, FEATURES), and per step what BPTT needs: (h_prev, c_prev,
    i, f, g, o, tanh(c))."""
    wx, wh, b, w, bw = params
    n = len(x)
    zx = (x.reshape(n * STEPS, FEATURES) @ wx).reshape(n, STEPS, 4 * UNITS) + b  # every step at once
    h, c = np.zeros((n, UNITS)), np.zeros((n, UNITS))
    tape = []
    for t in range(STEPS):
        z = zx[:, t] + h @ wh
        s = _sigmoid(z)
        i, f, o = s[:, :UNITS], s[:, UNITS:2 * UNITS], s[:, 3 * UNITS:]
        g = np.tanh(z[:, 2 * UNITS:3 * UNITS])
        c_new = f * c + i * g
        tc = np.tanh(c_new)
        tape.append((h, c, i, f, g, o, tc))
        h, c = o * tc, c_new
    return h @ w + bw, tape


def predict(params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """The class probabilities of inputs ``x`` (N, STEPS, FEATURES) under float64 ``params``
    (wx (FEATURES, 4 UNITS), wh (UNITS, 4 UNITS), b (4 UNITS), w (UNITS, 10), bw (10); gates in
    the order input, forget, cell, output)."""
    from nncert.mlts.training import softmax_xent

    logits, _ = _forward(params, x)
    return softmax_xent(logits, np.zeros_like(logits))[0]


@cache
def trained_params(epochs: int = EPOCHS, seed: int = SEED) -> tuple[np.ndarray, ...]:
    """The trained parameters in ``predict``'s layout, float32, read-only. Softmax
    cross-entropy on the last step's output plus L2 on the weights, ``epochs`` full-batch
    Adam steps from a Glorot-scaled initialisation drawn from ``seed`` (forget-gate bias 1)."""
    from nncert.mlts.datasets import digits
    from nncert.mlts.training import adam, frozen, softmax_xent

    data = digits()
    x = data.x_train.reshape(-1, STEPS, FEATURES).astype(np.float64) / 16.0
    onehot = np.eye(10)[data.y_train]
    rng = np.random.default_rng(seed)
    b0 = np.zeros(4 * UNITS)
    b0[UNITS:2 * UNITS] = 1.0  # remember by default: gradients flow back through the steps
    params = [rng.normal(0.0, np.sqrt(1.0 / FEATURES), (FEATURES, 4 * UNITS)),
              rng.normal(0.0, np.sqrt(1.0 / UNITS), (UNITS, 4 * UNITS)), b0,
              rng.normal(0.0, np.sqrt(1.0 / UNITS), (UNITS, 10)), np.zeros(10)]

    def gradients(params: list[np.ndarray]) -> list[np.ndarray]:
        wx, wh, _, w, _ = params
        logits, tape = _forward(params, x)
        _, d_logits = softmax_xent(logits, onehot)
        h_last = tape[-1][5] * tape[-1][6]
        dz = np.empty((len(x), STEPS, 4 * UNITS))
        dh, dc = d_logits @ w.T, np.zeros((len(x), UNITS))
        d_wh = np.zeros_like(wh)
        for t in reversed(range(STEPS)):
            h_prev, c_prev, i, f, g, o, tc = tape[t]
            dc = dc + dh * o * (1.0 - tc * tc)
            dz_t = np.concatenate([dc * g * i * (1.0 - i), dc * c_prev * f * (1.0 - f),
                                   dc * i * (1.0 - g * g), dh * tc * o * (1.0 - o)], axis=1)
            dz[:, t] = dz_t
            d_wh += h_prev.T @ dz_t
            dh, dc = dz_t @ wh.T, dc * f
        flat = dz.reshape(-1, 4 * UNITS)
        return [x.reshape(-1, FEATURES).T @ flat + WEIGHT_DECAY * wx, d_wh + WEIGHT_DECAY * wh,
                flat.sum(axis=0), h_last.T @ d_logits + WEIGHT_DECAY * w, d_logits.sum(axis=0)]

    return frozen(*adam(params, gradients, epochs, LEARNING_RATE))


def build_digits_lstm_model() -> Model:
    """The trained classifier as a float32 HAL model: (1, 8, 8) in, (1, 10) probabilities out."""
    wx, wh, b, w, bw = trained_params()
    gate = [slice(k * UNITS, (k + 1) * UNITS) for k in range(4)]  # input, forget, cell, output
    m = ModelBuilder()
    x = m.operand(T.TENSOR_FLOAT32, (1, STEPS, FEATURES))

    def tensor(value: np.ndarray) -> int:
        return m.constant(T.TENSOR_FLOAT32, np.ascontiguousarray(value))

    absent = m.no_value
    sequence = m.operand(T.TENSOR_FLOAT32, (1, STEPS, UNITS))
    m.operation(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, [
        x,
        *(tensor(wx[:, s].T) for s in gate),  # 1-4: input-to-{input, forget, cell, output} (UNITS, FEATURES)
        *(tensor(wh[:, s].T) for s in gate),  # 5-8: recurrent-to-... (UNITS, UNITS)
        absent(T.TENSOR_FLOAT32), absent(T.TENSOR_FLOAT32), absent(T.TENSOR_FLOAT32),  # 9-11: no peepholes
        *(tensor(b[s]) for s in gate),  # 12-15: gate biases
        absent(T.TENSOR_FLOAT32), absent(T.TENSOR_FLOAT32),  # 16-17: no projection
        tensor(np.zeros((1, UNITS), np.float32)), tensor(np.zeros((1, UNITS), np.float32)),  # 18-19: state
        m.constant(T.INT32, TANH), m.constant(T.FLOAT32, 0.0), m.constant(T.FLOAT32, 0.0),  # no clipping
        m.constant(T.BOOL, False),  # 23: batch-major
        *(absent(T.TENSOR_FLOAT32) for _ in range(4)),  # 24-27: no layer normalisation
    ], [sequence])
    last3 = m.operand(T.TENSOR_FLOAT32, (1, 1, UNITS))
    m.operation(Op.SLICE, [sequence, m.constant(T.TENSOR_INT32, [0, STEPS - 1, 0]),
                           m.constant(T.TENSOR_INT32, [1, 1, UNITS])], [last3])
    last = m.operand(T.TENSOR_FLOAT32, (1, UNITS))
    m.operation(Op.RESHAPE, [last3, m.constant(T.TENSOR_INT32, [1, UNITS])], [last])
    logits = m.operand(T.TENSOR_FLOAT32, (1, 10))
    m.operation(Op.FULLY_CONNECTED, [last, tensor(w.T), tensor(bw), m.constant(T.INT32, 0)], [logits])
    probabilities = m.operand(T.TENSOR_FLOAT32, (1, 10))
    m.operation(Op.SOFTMAX, [logits, m.constant(T.FLOAT32, 1.0)], [probabilities])
    return m.build([x], [probabilities])
