"""Per-kernel tests of the lookup family against hand-computed values: EMBEDDING_LOOKUP,
HASHTABLE_LOOKUP, LSH_PROJECTION (FarmHash Fingerprint64 and Android's published examples)
and TOPK_V2 (NNAPI's tie order)."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import HalError
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import validate_model
from nncert.ops.interpreter import run_model
from nncert.ops.lookup import fingerprint64, topk

I32, F32, F16, Q8 = T.TENSOR_INT32, T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM


def _run(op, ins, outs, feeds=()):
    """ins: (type, dims, value or None for a model input, scale, zero point) / scalars as
    (T.INT32, value); outs: (type, dims, scale, zero point)."""
    b = ModelBuilder()
    idx, inputs = [], []
    for spec in ins:
        if spec is None:
            idx.append(b.no_value(F32))
        elif spec[0].is_scalar:
            idx.append(b.constant(spec[0], spec[1]))
        else:
            t, dims, value, *q = spec
            if value is None:
                idx.append(b.operand(t, dims, *q))
                inputs.append(idx[-1])
            else:
                idx.append(b.constant(t, np.asarray(value), *q))
    out = [b.operand(t, dims, *q) for t, dims, *q in outs]
    b.operation(op, idx, out)
    model = b.build(inputs, out)
    validate_model(model)
    return run_model(model, list(feeds))


# -- FarmHash -----------------------------------------------------------------------------

# Fingerprint64 values checked against pyfarmhash 0.5.1 (Google's C++ FarmHash): one key per
# branch of the algorithm (0, 1-3, 4-7, 8-16, 17-32, 33-64 bytes, and the 64-byte loop).
FINGERPRINTS = [
    (b"", 11160318154034397263),
    (b"a", 12917804110809363939),
    (b"hello", 13009744463427800296),
    (b"0123456789abcdef", 6105018409752412263),
    (b"x" * 33, 12270365409943098935),
    (b"y" * 65, 13246502507848426076),
    (b"The quick brown fox jumps over the lazy dog", 12375473906752639284),
]


@pytest.mark.parametrize(("key", "want"), FINGERPRINTS, ids=[f"{len(k)}_bytes" for k, _ in FINGERPRINTS])
def test_fingerprint64_matches_farmhash(key, want):
    assert fingerprint64(key) == want


# -- LSH_PROJECTION -------------------------------------------------------------------------

# Android's generated tests (runtime/test/specs/V1_0/lsh_projection*.mod.py, V1_2/...): 4 hash
# functions of 2 bits over 3 int32 rows of 2.
SEEDS = [0.123, 0.456, -0.321, -0.654, 1.234, 5.678, -4.321, -8.765]
ROWS = [12345, 54321, 67890, 9876, -12345678, -87654321]


@pytest.mark.parametrize(("hash_type", "kind", "weight", "want"), [
    (F32, 2, [0.12, 0.34, 0.56], [1, 1, 1, 0, 1, 1, 1, 0]),  # DENSE
    (F32, 1, None, [1, 2, 2, 0]),  # SPARSE_DEPRECATED: the bits packed
    (F32, 3, None, [1, 6, 10, 12]),  # SPARSE: plus k * 2**2
    (F16, 2, [0.12, 0.34, 0.56], [1, 1, 1, 1, 1, 0, 0, 0]),  # float16 seeds hash other bytes
])
def test_lsh_projection_android_examples(hash_type, kind, weight, want):
    ins = [(hash_type, (4, 2), np.asarray(SEEDS).reshape(4, 2)), (I32, (3, 2), None),
           None if weight is None else (hash_type, (3,), np.asarray(weight)), (T.INT32, kind)]
    got, = _run(Op.LSH_PROJECTION, ins, [(I32, (len(want),))], [np.asarray(ROWS, np.int32).reshape(3, 2)])
    assert got.tolist() == want


def test_lsh_projection_sparse_with_weight_is_rejected():
    ins = [(F32, (4, 2), np.asarray(SEEDS).reshape(4, 2)), (I32, (3, 2), np.asarray(ROWS).reshape(3, 2)),
           (F32, (3,), np.ones(3)), (T.INT32, 3)]
    with pytest.raises(HalError, match="sparse types take no weight"):
        _run(Op.LSH_PROJECTION, ins, [(I32, (4,))])


# -- TOPK_V2 --------------------------------------------------------------------------------

def test_topk_sorts_descending_and_ties_larger_index_first():
    x = np.array([[3, 1, 3, 2, 1], [0, 5, 5, 5, -1]])
    values, idx = topk(x, 4)
    assert values.tolist() == [[3, 3, 2, 1], [5, 5, 5, 0]]
    assert idx.tolist() == [[2, 0, 3, 4], [3, 2, 1, 0]]


def test_topk_v2_quantised_keeps_stored_values():
    x = np.array([[200, 7, 128, 7]], np.uint8)
    values, idx = _run(Op.TOPK_V2, [(Q8, (1, 4), None, 0.5, 128), (T.INT32, 3)],
                       [(Q8, (1, 3), 0.5, 128), (I32, (1, 3))], [x])
    assert values.tolist() == [[200, 128, 7]] and idx.tolist() == [[0, 2, 3]]


@pytest.mark.parametrize("k", [0, 5])
def test_topk_v2_k_outside_the_row_is_rejected(k):
    with pytest.raises(HalError, match="k = "):
        _run(Op.TOPK_V2, [(F32, (2, 4), np.zeros((2, 4))), (T.INT32, k)], [(F32, (2, 4)), (I32, (2, 4))])


# -- EMBEDDING_LOOKUP / HASHTABLE_LOOKUP --------------------------------------------------------

def test_embedding_lookup_picks_rows():
    values = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    got, = _run(Op.EMBEDDING_LOOKUP, [(I32, (4,), None), (F32, (3, 2, 2), values)], [(F32, (4, 2, 2))],
                [np.array([2, 0, 0, 2], np.int32)])
    assert got.tolist() == [values[2].tolist(), values[0].tolist(), values[0].tolist(), values[2].tolist()]


def test_embedding_lookup_out_of_range_fails():
    with pytest.raises(Exception, match=r"lookups must lie in 0\.\.2"):
        _run(Op.EMBEDDING_LOOKUP, [(I32, (1,), None), (F32, (3, 2), np.zeros((3, 2)))], [(F32, (1, 2))],
             [np.array([3], np.int32)])


def test_hashtable_lookup_hits_and_misses_as_zero_bytes():
    keys = np.array([-5, 2, 9], np.int32)
    values = np.array([[10, 11], [20, 21], [30, 31]], np.uint8)
    look = np.array([9, 3, -5, 2147483647], np.int32)
    ins = [(I32, (4,), None), (I32, (3,), keys), (Q8, (3, 2), values, 0.5, 100)]
    out, hits = _run(Op.HASHTABLE_LOOKUP, ins, [(Q8, (4, 2), 0.5, 100), (Q8, (4,), 1.0, 0)], [look])
    # A miss is stored 0 (not the zero point 100): zero bytes, as Android's CPU path writes.
    assert out.tolist() == [[30, 31], [0, 0], [10, 11], [0, 0]]
    assert hits.tolist() == [1, 0, 1, 0]


def test_hashtable_lookup_unsorted_keys_are_rejected():
    with pytest.raises(HalError, match="keys must be sorted"):
        _run(Op.HASHTABLE_LOOKUP, [(I32, (1,), np.array([1])), (I32, (2,), np.array([4, 1])),
                                   (F32, (2, 1), np.zeros((2, 1)))], [(F32, (1, 1)), (Q8, (1,), 1.0, 0)])
