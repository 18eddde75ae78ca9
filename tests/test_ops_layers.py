"""Per-kernel tests of the layers family against hand-computed values: CHANNEL_SHUFFLE,
INSTANCE_NORMALIZATION (NHWC and NCHW), POW and SPLIT; and the TFLite round trip of the
lookup and layers operations LiteRT has (export, import, same results)."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.drivers.litert.export import export
from nncert.hal.errors import HalError
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import validate_model
from nncert.mlts.tflite_import import import_tflite
from nncert.ops import get
from nncert.ops.interpreter import run_model
from nncert.ops.layers import channel_shuffle
from nncert.testing.cases import sample_case
from tests.test_ops_lookup import _run

F32, Q8, I32 = T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_INT32


def test_channel_shuffle_formula():
    # 6 channels, 2 groups of 3: output channel k * 2 + g = input channel g * 3 + k.
    assert channel_shuffle(np.arange(6), 2, 0).tolist() == [0, 3, 1, 4, 2, 5]
    assert channel_shuffle(np.arange(6), 3, 0).tolist() == [0, 2, 4, 1, 3, 5]
    x = np.arange(12).reshape(2, 6)
    got, = _run(Op.CHANNEL_SHUFFLE, [(F32, (6, 2), None), (T.INT32, 3), (T.INT32, 0)], [(F32, (6, 2))],
                [x.T.astype(np.float32)])
    assert got.T.tolist() == [[0, 2, 4, 1, 3, 5], [6, 8, 10, 7, 9, 11]]


def test_channel_shuffle_groups_must_divide():
    with pytest.raises(HalError, match="does not divide"):
        _run(Op.CHANNEL_SHUFFLE, [(F32, (1, 5), np.zeros((1, 5))), (T.INT32, 2), (T.INT32, -1)],
             [(F32, (1, 5))])


@pytest.mark.parametrize("nchw", [False, True])
def test_instance_normalization(nchw):
    # One batch, 2x1 plane, 2 channels: channel 0 [1, 3] (mean 2, variance 1), channel 1 [5, 5].
    x = np.array([[[[1.0, 5.0]], [[3.0, 5.0]]]], np.float32)  # NHWC [1, 2, 1, 2]
    feed = np.transpose(x, (0, 3, 1, 2)) if nchw else x
    got, = _run(Op.INSTANCE_NORMALIZATION, [(F32, feed.shape, None), (T.FLOAT32, 2.0), (T.FLOAT32, 0.5),
                                            (T.FLOAT32, 3.0), (T.BOOL, nchw)], [(F32, feed.shape)], [feed])
    if nchw:
        got = np.transpose(got, (0, 2, 3, 1))
    # (x - 2) * 2 / sqrt(1 + 3) + 0.5 = x - 1.5 for channel 0; channel 1 is beta.
    np.testing.assert_allclose(got[..., 0].ravel(), [-0.5, 1.5])
    np.testing.assert_allclose(got[..., 1].ravel(), [0.5, 0.5])


def test_pow_broadcasts_and_edge_values():
    base = np.array([[0.0], [2.0], [-2.0]], np.float32)
    exponent = np.array([[0.0, 3.0, -1.0]], np.float32)
    got, = _run(Op.POW, [(F32, (3, 1), None), (F32, (1, 3), None)], [(F32, (3, 3))], [base, exponent])
    assert got.tolist() == [[1.0, 0.0, np.inf], [1.0, 8.0, 0.5], [1.0, -8.0, -0.5]]


def test_split_into_equal_parts_along_a_negative_axis():
    x = np.arange(12, dtype=np.int32).reshape(2, 6)
    parts = _run(Op.SPLIT, [(I32, (2, 6), None), (T.INT32, -1), (T.INT32, 3)], [(I32, (2, 2))] * 3, [x])
    assert [p.tolist() for p in parts] == [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 11]]]


def test_split_into_six_parts_one_element_thick():
    # num_splits may be anything up to the axis's length, not only the 1..4 TFLite tests use.
    x = np.arange(12, dtype=np.int32).reshape(2, 6)
    parts = _run(Op.SPLIT, [(I32, (2, 6), None), (T.INT32, 1), (T.INT32, 6)], [(I32, (2, 1))] * 6, [x])
    assert [p.ravel().tolist() for p in parts] == [[k, k + 6] for k in range(6)]


@pytest.mark.parametrize(("dims", "parts", "outputs", "problem"), [
    ((6,), 3, 2, "num_splits is 3, the operation has 2 outputs"),
    ((6,), 6, 5, "num_splits is 6, the operation has 5 outputs"),
    ((6,), 6, 7, "num_splits is 6, the operation has 7 outputs"),
    ((5,), 2, 2, "does not divide"),
    ((5,), 7, 7, "does not divide"),
])
def test_split_count_must_match_the_outputs_and_divide(dims, parts, outputs, problem):
    with pytest.raises(HalError, match=problem):
        _run(Op.SPLIT, [(I32, dims, np.arange(dims[0])), (T.INT32, 0), (T.INT32, parts)],
             [(I32, (1,))] * outputs)


def test_split_cases_reach_more_than_four_parts_and_parts_of_one():
    record = get(Op.SPLIT)
    (sig,) = record.signatures
    variant = record.variants[0]
    counts = {len(sample_case(record, sig, variant, seed=seed).outputs) for seed in range(12)}
    assert counts == set(range(1, 7))
    for seed in range(4):
        case = sample_case(record, sig, variant, seed=seed, edge="parts_of_1")
        x, axis, parts = (ci for ci in case.inputs)
        assert parts.value == len(case.outputs) == x.operand.dimensions[axis.value]


@pytest.mark.parametrize(("op", "label", "edge"), [
    (Op.TOPK_V2, "quant8_asymm", "ties"), (Op.TOPK_V2, "int32", "ties"), (Op.SPLIT, "quant8_asymm", None),
    (Op.POW, "float32", "negative_base_integer_exponent"), (Op.EMBEDDING_LOOKUP, "int32", None),
    (Op.HASHTABLE_LOOKUP, "quant8_asymm", "keys_ends_and_misses"),
    (Op.LSH_PROJECTION, "float32-I=int32", None), (Op.LSH_PROJECTION, "float32-I=quant8_asymm", "long_keys"),
])
def test_tflite_round_trip(op, label, edge):
    """Exported to TFLite and imported back, the model computes what the original does (TOPK_V2
    ties included: both directions reverse the row, so NNAPI's tie order survives)."""
    record = get(op)
    variant = next(v for v in record.variants if v.label == label)
    for sig in record.signatures:
        for seed in (0, 1):
            case = sample_case(record, sig, variant, seed=seed, edge=edge)
            model, feeds = case.model()
            back = import_tflite(export(model))
            validate_model(back)
            assert {o.type for o in back.main.operations} >= {op}
            for got, want in zip(run_model(back, feeds), run_model(model, feeds), strict=True):
                np.testing.assert_array_equal(got, want)
