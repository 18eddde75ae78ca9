"""The MLTS data sets and the digits model (MLTS-1): the image set is deterministic, about 1,500
images with valid ImageNet label sets whose names say what the pictures show; the speech clips
load as committed; the digits classifier reaches 0.9 on its test split through the reference
interpreter, float and quantised."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest

from nncert.hal.validation import validate_model
from nncert.mlts import datasets
from nncert.mlts.digits import build_digits_model, preprocess, trained_weights
from nncert.ops.interpreter import run_model

pytest.importorskip("skimage")
pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")
pytestmark = pytest.mark.req("MLTS-1")

# What each labelled picture shows, by the ImageNet names of its acceptable classes.
EXPECTED_LABELS = {
    "chelsea": {"tabby, tabby cat", "tiger cat", "Egyptian cat"},
    "coffee": {"espresso", "coffee mug", "cup"},
    "rocket": {"missile", "projectile, missile"},
    "motorcycle": {"moped", "motor scooter, scooter"},
    "china": {"palace", "monastery", "stupa, tope", "bell cote, bell cot"},
    "grace_hopper": {"military uniform", "Windsor tie", "bow tie, bow-tie, bowtie"},
    "flower": {"daisy"},
}


def _digest(ds: datasets.Dataset, indexes: range) -> str:
    return hashlib.sha256(b"".join(ds[i].image.tobytes() for i in indexes)).hexdigest()


def test_imagenet_classes():
    names = datasets.imagenet_classes()
    assert len(names) == 1000 and all(names)
    assert (names[0], names[281], names[999]) == ("tench, Tinca tinca", "tabby, tabby cat", "toilet tissue, "
                                                  "toilet paper, bathroom tissue")


def test_about_1500_images_with_valid_labels():
    ds = datasets.images()
    assert len(ds) == 1500 == len(ds.labels) == len(ds.sources) == len(set(ds.names))
    counts = Counter(ds.sources)
    assert set(counts) == {s.name for s in datasets.SOURCES}
    assert max(counts.values()) - min(counts.values()) <= 1
    names = datasets.imagenet_classes()
    for source in datasets.SOURCES:
        assert all(0 <= k < 1000 for k in source.labels), source.name
        assert {names[k] for k in source.labels} == EXPECTED_LABELS.get(source.name, set()), source.name
    by_name = {s.name: s.labels for s in datasets.SOURCES}
    assert all(labels == by_name[source] for labels, source in zip(ds.labels, ds.sources, strict=True))
    assert len(ds.labelled) == sum(1 for s in ds.sources if s in EXPECTED_LABELS)


def test_images_are_deterministic_and_augmented():
    ds = datasets.images()
    picked = range(0, len(ds), 23)
    first = _digest(ds, picked)
    datasets._bases.cache_clear()  # the sources loaded and resized again
    assert _digest(datasets.images(), picked) == first
    assert _digest(datasets.images(n=100), range(0, 100, 23)) == _digest(ds, range(0, 100, 23))
    name, image, labels = ds[1499]
    assert image.shape == (256, 256, 3) and image.dtype == np.uint8
    assert (name, labels) == (ds.names[-1], ds.labels[-1])
    # Every view differs from the others, and an augmented view from its source's plain one.
    views = [ds[i].image.tobytes() for i in range(0, 3 * len(datasets.SOURCES))]
    assert len(set(views)) == len(views)
    assert datasets.images(n=4, size=224)[3].image.shape == (224, 224, 3)


def test_speech_clips():
    clips = datasets.speech()
    assert len(clips) == 60
    assert {c.sample_rate for c in clips} == {16000}
    assert all(c.audio.dtype == np.int16 and c.audio.ndim == 1 for c in clips)
    assert all(0.3 < len(c.audio) / c.sample_rate < 2.0 for c in clips)
    assert all(20000 < np.abs(c.audio.astype(np.int32)).max() < 24000 for c in clips)  # peak 0.7
    wake = Counter(c.wake_word for c in clips)
    assert wake == {**dict.fromkeys(datasets.WAKE_WORDS, 8), None: 20}
    assert {c.text for c in clips if c.wake_word == "hey_mycroft"} == {"hey mycroft"}
    assert len({c.voice for c in clips}) == 8
    assert len({c.name for c in clips}) == 60
    with pytest.raises(ValueError):
        clips[0].audio[0] = 0  # shared: read-only


def test_digits_split():
    d = datasets.digits()
    assert (len(d.x_train), len(d.x_test)) == (1437, 360)
    assert d.x_test.shape[1:] == (8, 8) and d.x_test.dtype == np.uint8 and d.x_test.max() == 16
    assert set(np.unique(d.y_test)) == set(range(10))
    x = preprocess(d.x_test[0])
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, d.x_test[0].reshape(1, 64) / 16.0)


def _accuracy(model, inputs_of, outputs_of) -> float:
    d = datasets.digits()
    predicted = [int(np.argmax(outputs_of(run_model(model, inputs_of([preprocess(x)])))[0]))
                 for x in d.x_test]
    return float(np.mean(np.array(predicted) == d.y_test))


def test_digits_model_accuracy():
    model = build_digits_model()
    validate_model(model)
    assert _accuracy(model, lambda x: x, lambda y: y) >= 0.9
    for cached, again in zip(trained_weights(), trained_weights.__wrapped__(), strict=True):
        assert cached.tobytes() == again.tobytes()  # trained the same way each time


def test_digits_model_quantised_uint8():
    quantize = pytest.importorskip("nncert.mlts.quantize")
    d = datasets.digits()
    model = quantize.quantize(build_digits_model(), [[preprocess(x)] for x in d.x_train[:256]], "uint8")
    accuracy = _accuracy(model, lambda x: quantize.quantize_inputs(model, x),
                         lambda y: quantize.dequantize_outputs(model, y))
    assert accuracy >= 0.9


def test_an_installed_nncert_carries_the_data_sets(tmp_path):
    """What a wheel holds (setup.py's build_py: the packages and their data) reads the class
    names and speech clips from nncert/data, without the checkout's datasets/."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(datasets.__file__).resolve().parents[2]
    if not (root / "setup.py").is_file():
        pytest.skip("not a checkout: nothing to build")
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
                           cwd=root, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    script = ("import nncert.mlts.datasets as d; "
              "print(d.DATA_DIR, len(d.imagenet_classes()), len(d.speech()))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(tmp_path / "nncert" / "data"), "1000", str(len(datasets.speech()))]
