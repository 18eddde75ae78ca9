"""What the models the zoo trains at build time share (``digits``, ``digits_lstm``): full-batch
Adam on float64 numpy arrays, one BLAS thread, and the softmax cross-entropy gradient.

Training is deterministic: a fixed seed draws the initialisation, every step sees the whole
training split in the same order, and with one BLAS thread the order of every sum is fixed,
so the same recipe gives the same bytes on every run of the same machine and libraries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


def softmax_xent(logits: np.ndarray, onehot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, the gradient of the mean cross-entropy with respect to ``logits``)."""
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p, (p - onehot) / len(logits)


def adam(params: list[np.ndarray], gradients: Callable[[list[np.ndarray]], list[np.ndarray]], steps: int,
         learning_rate: float) -> list[np.ndarray]:
    """``params`` after ``steps`` full-batch Adam steps; ``gradients(params)`` gives the
    gradient of the loss for each parameter, in the same order. Runs on one BLAS thread: the
    products are small (threads only contend on a busy machine), and the order of every sum
    is then fixed."""
    from threadpoolctl import threadpool_limits

    params = list(params)
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    with threadpool_limits(limits=1, user_api="blas"):
        for step in range(1, steps + 1):
            for i, g in enumerate(gradients(params)):
                m[i] = BETA1 * m[i] + (1 - BETA1) * g
                v[i] = BETA2 * v[i] + (1 - BETA2) * g * g
                params[i] = params[i] - learning_rate * (m[i] / (1 - BETA1 ** step)) / (
                    np.sqrt(v[i] / (1 - BETA2 ** step)) + EPS)
    return params


def frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays as contiguous read-only float32 copies (what a cached trainer returns)."""
    out = tuple(np.ascontiguousarray(a, np.float32) for a in arrays)
    for a in out:
        a.setflags(write=False)
    return out
