"""Known answers for the tensor records FILL, RANK, BATCH_MATMUL, PACK, MIRROR_PAD and
REVERSE (values worked out by hand), their validity rules, and the TFLite importer's
mappings of them (against LiteRT's own kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_shape import F16, F32, I32, Q8, Q8S, ints, scalar, tensor

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Operand, dtype_of
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.types import Version
from nncert.hal.validation import validate_model
from nncert.ops import get
from nncert.ops.base import ShapeError, to_real
from nncert.ops.evaluate import bind, evaluate, output_shapes
from nncert.ops.interpreter import run_model


def _bound(op, inputs, out_type, scale, zero_point):
    ops = [o for o, _ in inputs]
    raw = [r for _, r in inputs]
    record = get(op)
    real = [None if o is None else to_real(r, o) if record.dequantize else r
            for o, r in zip(ops, raw, strict=True)]
    probe = Operand(out_type, (), scale, zero_point)
    shapes = output_shapes(record, ops, real, [probe])
    out = Operand(out_type, shapes[0], scale, zero_point)
    if record.check:
        record.check(bind(record, ops, real, [out]))
    return record, ops, raw, out


def run(op, inputs, out_type, scale=0.0, zero_point=0):
    """The raw output of one operation after its shape rule and checks."""
    record, ops, raw, out = _bound(op, inputs, out_type, scale, zero_point)
    got = evaluate(record, ops, raw, [out])[0]
    assert got.shape == out.dimensions and got.dtype == dtype_of(out_type)
    return got


def invalid(op, inputs, out_type=F32, scale=0.0, zero_point=0):
    with pytest.raises(ShapeError):
        _bound(op, inputs, out_type, scale, zero_point)


NO = (None, None)  # an omitted (NO_VALUE) optional input


@pytest.mark.parametrize("op, version", [(Op.FILL, Version.V1_3), (Op.RANK, Version.V1_3),
                                         (Op.BATCH_MATMUL, Version.FL6), (Op.PACK, Version.FL6),
                                         (Op.MIRROR_PAD, Version.FL7), (Op.REVERSE, Version.FL7)])
def test_feature_levels(op, version):
    assert get(op).versions == [version]


# ---------------------------------------------------------------------------------------
# FILL


def test_fill():
    np.testing.assert_array_equal(run(Op.FILL, [ints([2, 3]), scalar(T.FLOAT32, 1.5)], F32),
                                  np.full((2, 3), 1.5, np.float32))
    np.testing.assert_array_equal(run(Op.FILL, [ints([3]), scalar(T.INT32, -7)], I32), [-7, -7, -7])
    got = run(Op.FILL, [ints([1, 2]), scalar(T.FLOAT16, 0.1)], F16)
    assert got.dtype == np.float16 and got.tolist() == [[np.float16(0.1)] * 2]


def test_fill_shape_is_known_only_with_the_dims_value():
    dims, _ = ints([2, 2])
    assert output_shapes(get(Op.FILL), [dims, Operand(T.FLOAT32)], [None, 1.0], [Operand(F32)]) is None
    # dims as a model input, the output's dimensions unknown: the run computes them (EXE-4)
    b = ModelBuilder()
    d = b.operand(I32, (2,))
    out = b.operand(F32, (0, 0))
    b.operation(Op.FILL, [d, b.constant(T.FLOAT32, 2.5)], [out])
    model = b.build([d], [out])
    validate_model(model)
    (got,) = run_model(model, [np.array([3, 1], np.int32)])
    np.testing.assert_array_equal(got, [[2.5], [2.5], [2.5]])


@pytest.mark.parametrize("dims", [[2, 0], [-1], [[2, 2]]])
def test_fill_rejects_bad_dims(dims):
    invalid(Op.FILL, [ints(dims), scalar(T.FLOAT32, 1.0)])


# ---------------------------------------------------------------------------------------
# RANK


@pytest.mark.parametrize("type_, dims", [(F32, (2, 3, 4)), (T.TENSOR_BOOL8, (5,)),
                                         (T.TENSOR_QUANT16_ASYMM, (1, 1, 1, 1)), (Q8S, (2, 1))])
def test_rank(type_, dims):
    scale = 0.5 if type_.is_quant else 0.0
    got = run(Op.RANK, [tensor(type_, np.zeros(dims), scale)], T.INT32)
    assert got.shape == () and got.dtype == np.int32 and int(got) == len(dims)


def test_rank_is_a_scalar_model_output():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_QUANT8_SYMM, (2, 3, 1), 0.1, 0)
    r = b.operand(T.INT32)
    b.operation(Op.RANK, [x], [r])
    model = b.build([x], [r])
    validate_model(model)
    (got,) = run_model(model, [np.zeros((2, 3, 1), np.int8)])
    assert got.shape == () and int(got) == 3


# ---------------------------------------------------------------------------------------
# BATCH_MATMUL

A = [[1, 2], [3, 4]]
B = [[5, 6], [7, 8]]
AB = [[19, 22], [43, 50]]  # 1*5+2*7, 1*6+2*8; 3*5+4*7, 3*6+4*8


def _flag(v):
    return scalar(T.BOOL, v)


def test_batch_matmul():
    got = run(Op.BATCH_MATMUL, [tensor(F32, A), tensor(F32, B), _flag(False), _flag(False)], F32)
    np.testing.assert_array_equal(got, AB)
    # adj_x / adj_y: the stored slices are the transposes
    got = run(Op.BATCH_MATMUL, [tensor(F32, np.transpose(A)), tensor(F32, np.transpose(B)),
                                _flag(True), _flag(True)], F32)
    np.testing.assert_array_equal(got, AB)
    # omitted flags default to false; int32 is exact
    got = run(Op.BATCH_MATMUL, [tensor(I32, A), tensor(I32, B), NO, NO], I32)
    np.testing.assert_array_equal(got, AB)


def test_batch_matmul_batches_and_shapes():
    x = [[[1, 0, 2]], [[0, 1, 1]]]  # [2, 1, 3]
    y = [[[1], [2], [3]], [[4], [5], [6]]]  # [2, 3, 1]
    got = run(Op.BATCH_MATMUL, [tensor(F32, x), tensor(F32, y), _flag(False), _flag(False)], F32)
    np.testing.assert_array_equal(got, [[[7]], [[11]]])  # 1+6; 5+6


def test_batch_matmul_quantised():
    # x real [1, 2] (q 2, 4 at scale 0.5), y real [[1], [1]]: 3; output scale 0.25, zp -10 -> 2
    got = run(Op.BATCH_MATMUL, [tensor(Q8S, [[2, 4]], 0.5), tensor(Q8S, [[2], [2]], 0.5),
                                _flag(False), _flag(False)], Q8S, 0.25, -10)
    assert got.tolist() == [[2]]


@pytest.mark.parametrize("x, y", [((2, 3), (2, 3)),  # inner dimensions 3 != 2
                                  ((2, 2, 3), (3, 2, 4)),  # batch dimensions differ
                                  ((2, 3), (1, 3, 4)),  # ranks differ
                                  ((1, 1, 1, 2, 2), (1, 1, 1, 2, 2))])  # rank 5
def test_batch_matmul_rejects(x, y):
    invalid(Op.BATCH_MATMUL, [tensor(F32, np.zeros(x)), tensor(F32, np.zeros(y)), NO, NO])


def test_batch_matmul_takes_four_inputs():
    invalid(Op.BATCH_MATMUL, [tensor(F32, A), tensor(F32, B)])


# ---------------------------------------------------------------------------------------
# PACK


def test_pack():
    a, b = tensor(F32, [1, 2]), tensor(F32, [3, 4])
    np.testing.assert_array_equal(run(Op.PACK, [scalar(T.INT32, 0), a, b], F32), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(run(Op.PACK, [scalar(T.INT32, 1), a, b], F32), [[1, 3], [2, 4]])
    got = run(Op.PACK, [scalar(T.INT32, 0), tensor(Q8, [[7, 250]], 0.5, 3)], Q8, 0.5, 3)
    assert got.tolist() == [[[7, 250]]]


def test_pack_rules():
    a = tensor(F32, [1, 2])
    invalid(Op.PACK, [scalar(T.INT32, -1), a, a])  # no negative axis
    invalid(Op.PACK, [scalar(T.INT32, 2), a, a])  # [0, R]
    invalid(Op.PACK, [scalar(T.INT32, 0), a, tensor(F32, [1, 2, 3])])  # shapes differ
    # quantised inputs share the output's scale and zero point
    invalid(Op.PACK, [scalar(T.INT32, 0), tensor(Q8S, [1], 0.5, 0), tensor(Q8S, [1], 0.25, 0)],
            Q8S, 0.5, 0)


# ---------------------------------------------------------------------------------------
# MIRROR_PAD


def test_mirror_pad_documented_example():
    x = tensor(F32, [1, 2, 3])
    pads = ints([[0, 2]])
    np.testing.assert_array_equal(run(Op.MIRROR_PAD, [x, pads, scalar(T.INT32, 0)], F32), [1, 2, 3, 2, 1])
    np.testing.assert_array_equal(run(Op.MIRROR_PAD, [x, pads, scalar(T.INT32, 1)], F32), [1, 2, 3, 3, 2])


def test_mirror_pad_two_dimensions():
    x = tensor(I32, [[1, 2], [3, 4]])
    got = run(Op.MIRROR_PAD, [x, ints([[1, 0], [0, 1]]), scalar(T.INT32, 1)], I32)
    np.testing.assert_array_equal(got, [[1, 2, 2], [1, 2, 2], [3, 4, 4]])
    got = run(Op.MIRROR_PAD, [x, ints([[1, 1], [1, 0]]), scalar(T.INT32, 0)], I32)
    np.testing.assert_array_equal(got, [[4, 3, 4], [2, 1, 2], [4, 3, 4], [2, 1, 2]])


def test_mirror_pad_limits():
    x = tensor(F32, [1, 2, 3])
    invalid(Op.MIRROR_PAD, [x, ints([[3, 0]]), scalar(T.INT32, 0)])  # REFLECT: below 3
    np.testing.assert_array_equal(run(Op.MIRROR_PAD, [x, ints([[3, 0]]), scalar(T.INT32, 1)], F32),
                                  [3, 2, 1, 1, 2, 3])  # SYMMETRIC: up to 3
    invalid(Op.MIRROR_PAD, [x, ints([[0, 4]]), scalar(T.INT32, 1)])
    invalid(Op.MIRROR_PAD, [x, ints([[-1, 0]]), scalar(T.INT32, 1)])
    invalid(Op.MIRROR_PAD, [x, ints([[0, 1]]), scalar(T.INT32, 2)])  # no mode 2
    invalid(Op.MIRROR_PAD, [x, ints([[0, 1], [0, 0]]), scalar(T.INT32, 0)])  # [rank, 2]


# ---------------------------------------------------------------------------------------
# REVERSE


def test_reverse():
    x = tensor(F32, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(run(Op.REVERSE, [x, ints([0])], F32), [[4, 5, 6], [1, 2, 3]])
    np.testing.assert_array_equal(run(Op.REVERSE, [x, ints([1])], F32), [[3, 2, 1], [6, 5, 4]])
    got = run(Op.REVERSE, [tensor(Q8S, [-128, 0, 127], 0.5, 1), ints([0])], Q8S, 0.5, 1)
    assert got.tolist() == [127, 0, -128]


@pytest.mark.parametrize("axis", [[-1], [2], [0, 1]])
def test_reverse_rejects_axes(axis):
    invalid(Op.REVERSE, [tensor(F32, np.zeros((2, 3))), ints(axis)])


# ---------------------------------------------------------------------------------------
# The TFLite importer's mappings, against LiteRT


def _import_and_compare(build):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    from nncert.drivers.litert.export import Graph
    from nncert.mlts.tflite_import import import_tflite

    g = Graph()
    ins, outs, feeds = build(g)
    data = g.build(ins, outs)
    model = import_tflite(data)
    validate_model(model)
    it = litert.Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    want = [it.get_tensor(d["index"]) for d in it.get_output_details()]
    got = run_model(model, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a).reshape(b.shape), b)
    return model


def test_importer_maps_the_tensor_family():
    from nncert.drivers.litert.export import fb

    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    x1 = np.arange(12, dtype=np.float32).reshape(2, 3, 2) - 5

    def build(g):
        x, y = g.tensor([2, 3], "FLOAT32"), g.tensor([2, 3, 2], "FLOAT32")
        filled, packed = g.tensor([2, 2], "FLOAT32"), g.tensor([2, 2, 3], "FLOAT32")
        g.op("FILL", [g.const([2, 2]), g.const(np.float32(0.75), np.float32)], [filled])
        g.op("PACK", [x, x], [packed], "Pack", valuesCount=2, axis=1)
        mirrored, reversed_ = g.tensor([2, 6], "FLOAT32"), g.tensor([2, 3], "FLOAT32")
        g.op("MIRROR_PAD", [x, g.const([[0, 0], [1, 2]])], [mirrored], "MirrorPad",
             mode=fb.MirrorPadMode.SYMMETRIC)
        g.op("REVERSE_V2", [x, g.const([0, -1])], [reversed_])
        rows = g.tensor([2, 2, 2], "FLOAT32")
        g.op("BATCH_MATMUL", [y, y], [rows], "BatchMatMul", adjX=True, adjY=False)
        rank = g.tensor([], "INT32")
        g.op("RANK", [y], [rank])
        return [x, y], [filled, packed, mirrored, reversed_, rows, rank], [x0, x1]

    model = _import_and_compare(build)
    used = {op.type for op in model.main.operations}
    assert {Op.PACK, Op.MIRROR_PAD, Op.REVERSE, Op.BATCH_MATMUL} <= used
