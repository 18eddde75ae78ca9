"""The digits classifier of the MLTS zoo: an MLP trained here, at build time, on the training
split of ``nncert.mlts.datasets.digits()``, deterministically (numpy only: fixed seed,
full-batch Adam), and given as a float32 HAL model.

    input (1, 64) float32      the 8x8 image row-major, pixel values 0-16 scaled to [0, 1]
    FULLY_CONNECTED 64 -> 32, fused RELU
    FULLY_CONNECTED 32 -> 10
    SOFTMAX (beta 1)           output (1, 10): the probability of each digit 0-9

``preprocess`` turns a digit image into the model's input. The test split's accuracy through
the reference interpreter is about 0.97 (at least 0.9 is required).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op

HIDDEN = 32
EPOCHS = 300
LEARNING_RATE = 0.01
WEIGHT_DECAY = 1e-4
SEED = 0


def preprocess(image: np.ndarray) -> np.ndarray:
    """An 8x8 digit (pixel values 0-16) as the model's (1, 64) float32 input in [0, 1]."""
    return (np.asarray(image, np.float32).reshape(1, 64) / np.float32(16.0)).astype(np.float32)


@cache
def trained_weights() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(w1 (32, 64), b1 (32,), w2 (10, 32), b2 (10,)), float32, read-only: weights in the
    FULLY_CONNECTED layout (units x inputs). Softmax cross-entropy plus L2 on the weights,
    full-batch Adam from a He initialisation drawn from ``SEED``."""
    from nncert.mlts.datasets import digits
    from nncert.mlts.training import adam, frozen, softmax_xent

    data = digits()
    x = data.x_train.reshape(-1, 64).astype(np.float64) / 16.0
    onehot = np.eye(10)[data.y_train]
    rng = np.random.default_rng(SEED)
    params = [rng.normal(0.0, np.sqrt(2.0 / 64), (64, HIDDEN)), np.zeros(HIDDEN),
              rng.normal(0.0, np.sqrt(2.0 / HIDDEN), (HIDDEN, 10)), np.zeros(10)]

    def gradients(params: list[np.ndarray]) -> list[np.ndarray]:
        w1, b1, w2, b2 = params
        pre = x @ w1 + b1
        hidden = np.maximum(pre, 0.0)
        _, d_logits = softmax_xent(hidden @ w2 + b2, onehot)
        d_hidden = (d_logits @ w2.T) * (pre > 0)
        return [x.T @ d_hidden + WEIGHT_DECAY * w1, d_hidden.sum(axis=0),
                hidden.T @ d_logits + WEIGHT_DECAY * w2, d_logits.sum(axis=0)]

    w1, b1, w2, b2 = adam(params, gradients, EPOCHS, LEARNING_RATE)
    return frozen(w1.T, b1, w2.T, b2)  # type: ignore[return-value]


def build_digits_model() -> Model:
    """The trained classifier as a float32 HAL model: (1, 64) in, (1, 10) probabilities out."""
    w1, b1, w2, b2 = trained_weights()
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (1, 64))
    hidden = b.operand(T.TENSOR_FLOAT32, (1, HIDDEN))
    b.operation(Op.FULLY_CONNECTED, [x, b.constant(T.TENSOR_FLOAT32, w1), b.constant(T.TENSOR_FLOAT32, b1),
                                     b.constant(T.INT32, 1)], [hidden])  # fused RELU
    logits = b.operand(T.TENSOR_FLOAT32, (1, 10))
    b.operation(Op.FULLY_CONNECTED, [hidden, b.constant(T.TENSOR_FLOAT32, w2),
                                     b.constant(T.TENSOR_FLOAT32, b2), b.constant(T.INT32, 0)], [logits])
    probabilities = b.operand(T.TENSOR_FLOAT32, (1, 10))
    b.operation(Op.SOFTMAX, [logits, b.constant(T.FLOAT32, 1.0)], [probabilities])
    return b.build([x], [probabilities])
