"""The MLTS data sets (MLTS-1): real images with ImageNet label sets, handwritten digits, and
spoken wake words. Nothing is fetched: the images ship with scikit-image, scikit-learn and
matplotlib (the ``mlts`` extra), the digits with scikit-learn, and the class names and speech
clips are committed under ``datasets/`` (made by the scripts there).

- ``images(n=1500, size=256)``: ``SOURCES`` (16 pictures) first as they are, then
  augmented in turn until there are ``n`` (as the Android MLTS image set, about 1,500);
  size x size x 3 uint8, each with its set of acceptable ImageNet-1k class indices
  (``imagenet_classes()`` names them), empty where no class fits unambiguously.
- ``digits()``: scikit-learn's 1,797 8x8 digits (pixel values 0-16), a fixed train/test split.
- ``speech()``: 60 synthetic clips, 16 kHz mono int16: the wake words of the openWakeWord and
  microWakeWord models (``WAKE_WORDS``) in 8 voices, and 20 other words and phrases.

Everything is deterministic (same bytes every run). Digits and speech are cached in memory, their
arrays read-only so that no caller can change another's data; images are made on demand from
sources cached in memory (1,500 at 256 x 256 would take 300 MB).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, overload

import numpy as np

from nncert.resources import data_dir

if TYPE_CHECKING:
    from PIL import Image

#: The committed data (nncert/data in a wheel, datasets/ in a checkout).
DATA_DIR = data_dir()

#: The wake-word model names the positive speech clips carry (openWakeWord / microWakeWord).
WAKE_WORDS = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu", "hey_rhasspy")


# -- images ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """One picture the image set is made from. ``origin`` is ``package:name``; ``box`` is the
    labelled object as fractions of the image (left, top, right, bottom): every crop keeps it."""

    name: str
    origin: str
    labels: frozenset[int] = frozenset()
    box: tuple[float, float, float, float] | None = None


SOURCES: tuple[Source, ...] = (
    Source("chelsea", "skimage:chelsea", frozenset({281, 282, 285}), (0.15, 0.05, 0.9, 0.95)),
    Source("coffee", "skimage:coffee", frozenset({967, 504, 968}), (0.08, 0.03, 0.78, 0.97)),
    Source("rocket", "skimage:rocket", frozenset({657, 744}), (0.4, 0.2, 0.6, 0.95)),
    Source("motorcycle", "skimage:stereo_motorcycle", frozenset({665, 670}), (0.08, 0.15, 0.95, 0.93)),
    Source("china", "sklearn:china.jpg", frozenset({442, 663, 698, 832}), (0.1, 0.05, 0.57, 0.97)),
    Source("grace_hopper", "matplotlib:grace_hopper.jpg", frozenset({652, 457, 906}), (0.05, 0.1, 0.95, 1.0)),
    # A dahlia: "daisy" is ImageNet's one class for a composite flower head.
    Source("flower", "sklearn:flower.jpg", frozenset({985}), (0.25, 0.03, 0.72, 0.85)),
    # No ImageNet class fits these unambiguously (a spacesuit, a cameraman, coins, a gift...):
    # they serve agreement with the baseline only.
    Source("astronaut", "skimage:astronaut"),
    Source("camera", "skimage:camera"),
    Source("coins", "skimage:coins"),
    Source("moon", "skimage:moon"),
    Source("clock", "skimage:clock"),
    Source("hubble_deep_field", "skimage:hubble_deep_field"),
    Source("immunohistochemistry", "skimage:immunohistochemistry"),
    Source("retina", "skimage:retina"),
    Source("present", "matplotlib:Minduka_Present_Blue_Pack.png"),
)


class LabelledImage(NamedTuple):
    name: str
    image: np.ndarray
    labels: frozenset[int]


@dataclass(frozen=True)
class Dataset:
    """The image set, made lazily: image i (size x size x 3 uint8, a fresh array each time) is
    named ``names[i]``, made from the source ``sources[i]``, and may be classified as any
    ImageNet-1k index in ``labels[i]`` (empty: unlabelled). Indexing and iteration give
    ``LabelledImage(name, image, labels)``; ``array()`` gives them all at once."""

    size: int
    seed: int
    names: tuple[str, ...]
    sources: tuple[str, ...]
    labels: tuple[frozenset[int], ...]

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, i: int) -> LabelledImage: ...
    @overload
    def __getitem__(self, i: slice) -> list[LabelledImage]: ...

    def __getitem__(self, i: int | slice) -> LabelledImage | list[LabelledImage]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return LabelledImage(self.names[i], self.image(i), self.labels[i])

    def __iter__(self) -> Iterator[LabelledImage]:
        return (self[i] for i in range(len(self)))

    def image(self, i: int) -> np.ndarray:
        i = range(len(self))[i]
        k, which = divmod(i, len(SOURCES))
        rng = np.random.default_rng([self.seed, i]) if k else None
        return _augment(_bases(self.size)[which], SOURCES[which].box, self.size, rng)

    def array(self) -> np.ndarray:
        """Every image, (n, size, size, 3) uint8."""
        out = np.empty((len(self), self.size, self.size, 3), np.uint8)
        for i in range(len(self)):
            out[i] = self.image(i)
        return out

    @property
    def labelled(self) -> list[int]:
        """The indexes of the images that have labels."""
        return [i for i, labels in enumerate(self.labels) if labels]


@cache
def imagenet_classes() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names in class-index order (``datasets/imagenet_classes.txt``;
    a model with 1001 outputs, "background" first, is off by one)."""
    names = tuple(_data_file("imagenet_classes.txt").read_text().splitlines())
    if len(names) != 1000:
        raise ValueError(f"{DATA_DIR / 'imagenet_classes.txt'}: {len(names)} class names, expected 1000")
    return names


def images(n: int = 1500, size: int = 256, seed: int = 0) -> Dataset:
    """``n`` images of size x size: each source as it is (the square of its shorter side, widened
    up to 4:3 where its object needs it, centred on the object, resized), then augmented copies,
    the sources in turn (about 1.5 ms an image; the sources are loaded once per size).

    Augmentation, drawn per image from ``seed`` and the image's index (so image i is the same
    whatever ``n``): a crop of 65-100% of the shorter side, aspect 3:4 to 4:3, placed anywhere
    that keeps the labelled object whole; a rotation of up to 10 degrees (mirrored edges fill
    the corners); a horizontal flip half the time; contrast x0.75-1.25 and brightness -25..+25
    about mid-grey. Sources are first resized (antialiased) so that their shorter side is
    1.25 x size, so crops are resampled at about their own scale."""
    which = [SOURCES[i % len(SOURCES)] for i in range(n)]
    return Dataset(size, seed, tuple(f"{s.name}-{i // len(SOURCES):03d}" for i, s in enumerate(which)),
                   tuple(s.name for s in which), tuple(s.labels for s in which))


_PAD = 0.12  # reflected margin, as a fraction of the shorter side: room for rotated corners


@cache
def _bases(size: int) -> tuple[tuple[Image.Image, int], ...]:
    """Every source resized to a shorter side of 1.25 x size, with a reflected margin (and
    the margin's width)."""
    from PIL import Image

    bases = []
    for source in SOURCES:
        image = Image.fromarray(_load(source.origin))
        scale = 1.25 * size / min(image.size)
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.LANCZOS)
        pad = round(_PAD * min(image.size))
        padded = np.pad(np.asarray(image), ((pad, pad), (pad, pad), (0, 0)), mode="reflect")
        bases.append((Image.fromarray(padded), pad))
    return tuple(bases)


def _load(origin: str) -> np.ndarray:
    """A source picture as HxWx3 uint8 (grey replicated, transparency over white)."""
    from PIL import Image

    package, name = origin.split(":")
    if package == "skimage":
        import skimage.data

        image = getattr(skimage.data, name)()
        image = image[0] if isinstance(image, tuple) else image  # stereo pairs: the left view
    elif package == "sklearn":
        from sklearn.datasets import load_sample_image

        image = load_sample_image(name)
    elif package == "matplotlib":
        from matplotlib.cbook import get_sample_data

        with get_sample_data(name) as f:
            image = np.asarray(Image.open(f))
    else:
        raise ValueError(f"image source {origin!r}: unknown package {package!r} "
                         "(known: skimage, sklearn, matplotlib)")
    image = np.asarray(image)
    if image.ndim == 2:
        return np.repeat(image[..., None], 3, axis=2)
    if image.shape[2] == 4:
        rgba = Image.fromarray(image)
        return np.asarray(Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB"))
    return image


def _augment(base: tuple[Image.Image, int], box: tuple[float, float, float, float] | None, size: int,
             rng: np.random.Generator | None) -> np.ndarray:
    """One view of a padded base image; ``rng`` None is the plain view."""
    from PIL import Image

    padded, pad = base
    w_img, h_img = padded.width - 2 * pad, padded.height - 2 * pad
    if rng is None:
        fraction, aspect, angle, flip, contrast, brightness = 1.0, 1.0, 0.0, False, 1.0, 0.0
    else:
        fraction = rng.uniform(0.65, 1.0)
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        angle = math.radians(rng.uniform(-10, 10))
        flip = bool(rng.integers(2))
        contrast, brightness = rng.uniform(0.75, 1.25), rng.uniform(-25, 25)
    bx0, by0, bx1, by1 = box or (0.5, 0.5, 0.5, 0.5)
    bx0, bx1, by0, by1 = bx0 * w_img, bx1 * w_img, by0 * h_img, by1 * h_img
    side = fraction * min(h_img, w_img)
    # Large enough for the object, then at most 4:3 by growing the shorter side, then inside
    # the image (shrinking the longer side again only if the image itself is too narrow).
    w = max(side * math.sqrt(aspect), bx1 - bx0)
    h = max(side / math.sqrt(aspect), by1 - by0)
    w, h = min(w_img, max(w, 3 / 4 * h)), min(h_img, max(h, 3 / 4 * w))
    w, h = min(w, 4 / 3 * h), min(h, 4 / 3 * w)
    left = _place(rng, w, w_img, bx0, bx1)
    top = _place(rng, h, h_img, by0, by1)
    # Output pixel centre (u, v), taken about the output's centre, maps to the base at
    # centre + R(angle) . diag(+-w / out, h / out) . (u, v). Sampled nearest at twice the
    # size and averaged 2x2: as smooth as Pillow's bilinear transform, at half its cost.
    out = 2 * size
    cos, sin = math.cos(angle), math.sin(angle)
    sx, sy = (-w if flip else w) / out, h / out
    a, b, d, e = cos * sx, -sin * sy, sin * sx, cos * sy
    cx, cy = pad + left + w / 2, pad + top + h / 2
    view = padded.transform((out, out), Image.Transform.AFFINE,
                            (a, b, cx - (a + b) * size, d, e, cy - (d + e) * size),
                            resample=Image.Resampling.NEAREST).reduce(2)
    if rng is not None:
        lut = np.clip(np.round((np.arange(256) - 128.0) * contrast + 128.0 + brightness), 0, 255)
        view = view.point(lut.astype(np.uint8).tolist() * 3)
    return np.asarray(view).copy()


def _place(rng: np.random.Generator | None, extent: float, limit: float, lo: float, hi: float) -> float:
    """Where a crop of ``extent`` starts along an axis of ``limit``: anywhere that keeps
    [lo, hi] inside it (centred on it without ``rng``)."""
    first, last = max(0.0, hi - extent), min(limit - extent, lo)
    if rng is None or first >= last:
        return min(max((lo + hi - extent) / 2, 0.0), limit - extent)
    return float(rng.uniform(first, last))


# -- digits ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Digits:
    """8x8 digit images (uint8 pixel values 0-16, read-only) and their classes (0-9)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@cache
def digits() -> Digits:
    """scikit-learn's digits: every fifth image (index 0, 5, 10, ...) is the test split (360),
    the others the training split (1,437)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x, y = data.images.astype(np.uint8), data.target.astype(np.int64)
    test = np.arange(len(y)) % 5 == 0
    parts = [np.ascontiguousarray(a) for a in (x[~test], y[~test], x[test], y[test])]
    for a in parts:
        a.setflags(write=False)
    return Digits(*parts)


# -- speech ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clip:
    """A spoken phrase: ``audio`` int16 mono at ``sample_rate``; ``wake_word`` is the model name
    (one of ``WAKE_WORDS``) when it is a wake word, else None. ``voice`` (espeak-ng voice and
    variant), ``speed`` (words per minute) and ``pitch`` (0-99) say how it was made."""

    audio: np.ndarray
    sample_rate: int
    text: str
    wake_word: str | None
    voice: str
    speed: int
    pitch: int

    @property
    def name(self) -> str:
        return f"{self.text.replace(' ', '_')}-{self.voice}-{self.speed}-{self.pitch}"


def speech() -> list[Clip]:
    """The speech clips of ``datasets/speech.npz`` (made by ``datasets/make_speech.py``)."""
    return list(_speech())


@cache
def _speech() -> tuple[Clip, ...]:
    with np.load(_data_file("speech.npz"), allow_pickle=False) as z:
        audio, offsets = z["audio"], z["offsets"]
        audio.setflags(write=False)
        rate = int(z["sample_rate"])
        return tuple(
            Clip(audio[offsets[i]:offsets[i + 1]], rate, str(z["text"][i]), str(z["wake_word"][i]) or None,
                 str(z["voice"][i]), int(z["speed"][i]), int(z["pitch"][i]))
            for i in range(len(offsets) - 1))


def _data_file(name: str) -> Path:
    path = DATA_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; nncert's data sets are the repository's datasets/ "
                                "directory (installed as nncert/data)")
    return path
