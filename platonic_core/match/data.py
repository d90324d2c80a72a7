"""Labelled images and class names for pair-free matching: the world's single-object scenes,
Fashion-MNIST (IDX files) and any ImageFolder layout (ImageNet-100 by its class list).

`materialize(cfg, out, world_dir)` writes one artifact whatever the source:
- `labels.parquet`: one row per image: `image` (row of images.npy, or a file path), `sha256`
  (files only: the image bytes' digest, so the artifact's digest follows the images), and one
  int column per class set (the label);
- `classes.json`: class set -> class names in label order (what the prompts say);
- `images.npy` (world, Fashion-MNIST): uint8 (N, H, W[, 3]);
prototypes: `image` is each class's row in an ImageNet classifier (no image at all).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from ..config import MatchDataConfig, WorldConfig

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
# the dataset's published label names, in label order (zalandoresearch/fashion-mnist)
FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


class MatchDataError(ValueError):
    """Bad or missing match data: one line naming the file or field."""


def prompt_name(label: str) -> str:
    """A published label as a prompt says it: lower case, "a/b" -> "a or b"."""
    return label.replace("/", " or ").lower()


def prompts(names: list[str], templates: list[str]) -> list[str]:
    """Class-major: class c's templates are rows c*T .. c*T+T-1 (matcher.class_features)."""
    return [t.format(n) for n in names for t in templates]


# ---- Fashion-MNIST --------------------------------------------------------------------


IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
# the largest IDX array read (Fashion-MNIST's train images are 47 MB; EMNIST's largest 550 MB);
# PLATONIC_IDX_MAX_BYTES overrides it
IDX_MAX_BYTES = 1 << 30


def read_idx(path: Path, max_bytes: int | None = None) -> np.ndarray:
    """An IDX file (plain or .gz): the magic's type byte and dims, then big-endian data.

    Memory is bounded by what the header declares, checked before any data is read: a header
    over `max_bytes` is refused, and exactly the declared bytes are read, one more telling a
    file that holds more (a gzip bomb decompresses no further than that)."""
    max_bytes = int(os.environ.get("PLATONIC_IDX_MAX_BYTES", IDX_MAX_BYTES)) if max_bytes is None else max_bytes
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0:
                raise MatchDataError(f"{path}: not an IDX file (bad magic)")
            if head[2] not in IDX_TYPES:
                raise MatchDataError(f"{path}: unknown IDX data type 0x{head[2]:02x}")
            ndim, dtype = head[3], np.dtype(IDX_TYPES[head[2]])
            dim_bytes = f.read(4 * ndim)
            if len(dim_bytes) < 4 * ndim:
                raise MatchDataError(f"{path}: truncated IDX header ({ndim} dimensions declared)")
            dims = [int.from_bytes(dim_bytes[4 * i : 4 * i + 4], "big") for i in range(ndim)]
            need = math.prod(dims) * dtype.itemsize  # Python ints: no overflow
            if need > max_bytes:
                raise MatchDataError(
                    f"{path}: header declares {dims} of {dtype.str[1:]} ({need:,} bytes), over the "
                    f"{max_bytes:,}-byte limit (PLATONIC_IDX_MAX_BYTES); not read"
                )
            raw = f.read(need + 1)
    except (OSError, EOFError, zlib.error) as e:  # a corrupt .gz: one line naming the file
        raise MatchDataError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    if len(raw) != need:
        more = "more than" if len(raw) > need else f"{len(raw):,} bytes, not"
        raise MatchDataError(f"{path}: header says {dims} ({need:,} bytes) but the file holds {more} that")
    data = np.frombuffer(raw, dtype=dtype)
    return data.reshape(dims).astype(data.dtype.newbyteorder("="))


def _idx_file(root: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (root / name).is_file():
            return root / name
    raise MatchDataError(
        f"{root / stem}[.gz]: no such file (Fashion-MNIST: apt-get install dataset-fashion-mnist, or data.path)"
    )


def load_fashion_mnist(root: str | Path | None = None, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 28, 28) uint8, labels (N,)) of the train (60k) or test (10k) split."""
    root = Path(root or FASHION_MNIST_DIR)
    prefix = {"train": "train", "test": "t10k"}[split]
    images = read_idx(_idx_file(root, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(_idx_file(root, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
    if images.ndim != 3 or len(images) != len(labels):
        raise MatchDataError(f"{root}: {split} images {images.shape} do not pair with labels {labels.shape}")
    return images.astype(np.uint8), labels


def subsample(labels: np.ndarray, per_class: int | None, seed: int) -> np.ndarray:
    """Indices (ascending) of up to `per_class` images of every class, drawn by `seed`."""
    if per_class is None:
        return np.arange(len(labels))
    order = np.random.default_rng(seed).permutation(len(labels))
    keep = np.concatenate([order[labels[order] == c][:per_class] for c in np.unique(labels)])
    return np.sort(keep)


# ---- ImageFolder (ImageNet-100) ---------------------------------------------------------


def read_class_list(spec: str) -> list[tuple[str, str]]:
    """(folder id, name) per class, in class order, from a TSV (folder id, [index,] name; `#`
    comments). `spec`: a path, or the name of a list packaged with the recipes (imagenet100)."""
    from ..resources import read_resource

    p = Path(spec)
    if p.is_file():
        text, origin = p.read_text(), str(p)
    elif "/" not in spec:
        try:
            text, origin = read_resource("configs", f"{spec.removesuffix('.tsv')}.tsv"), f"configs/{spec}.tsv"
        except FileNotFoundError:
            raise MatchDataError(f"data.classes: {spec}: no such file, nor a packaged class list") from None
    else:
        raise MatchDataError(f"data.classes: {spec}: no such file")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise MatchDataError(f"{origin}:{n}: expected folder id<TAB>[index<TAB>]name, got {line!r}")
        out.append((cols[0].strip(), cols[-1].strip()))
    if len({f for f, _ in out}) != len(out):
        raise MatchDataError(f"{origin}: a class folder is listed twice")
    return out


def load_image_folder(
    root: str | Path, classes: list[tuple[str, str]] | None = None
) -> tuple[list[Path], np.ndarray, list[str]]:
    """(image paths, labels, class names): `root/<folder>/*` for each listed class (or every
    subfolder, sorted, named by its folder)."""
    root = Path(root)
    if not root.is_dir():
        raise MatchDataError(f"data.path: {root}: no such folder")
    if classes is None:
        classes = [(d.name, d.name) for d in sorted(root.iterdir()) if d.is_dir()]
    paths, labels = [], []
    for c, (folder, _) in enumerate(classes):
        d = root / folder
        if not d.is_dir():
            raise MatchDataError(f"{d}: the class folder of {folder!r} is missing")
        files = sorted(f for f in d.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise MatchDataError(f"{d}: no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        paths += files
        labels += [c] * len(files)
    return paths, np.asarray(labels, dtype=np.int64), [name for _, name in classes]


# ---- the world's single-object scenes -----------------------------------------------------


def world_single_objects(
    world: WorldConfig, per_class: int, seed: int, position: str = "centre"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(renders (N, H, W, 3), shapes (N,), colours (N,)): `per_class` renders of every
    shape x colour, one object each, random size and background, in the centre cell (or a
    random one), drawn with the world's renderer and its nuisance."""
    from ..world import render
    from ..world.scenes import BACKGROUNDS, Scene, SceneObject

    rng = np.random.default_rng(np.random.SeedSequence([world.seed, seed, 0x5EED]))
    cells = world.grid * world.grid
    images, shapes, colours = [], [], []
    for s in range(world.n_shapes):
        for c in range(world.n_colours):
            for _ in range(per_class):
                cell = cells // 2 if position == "centre" else int(rng.integers(cells))
                obj = SceneObject(s, c, int(rng.integers(world.n_sizes)), cell)
                scene = Scene((obj,), int(rng.integers(len(BACKGROUNDS))))
                images.append(render(scene, rng, world.image_size, world.grid, world.image_noise))
                shapes.append(s)
                colours.append(c)
    return np.stack(images), np.asarray(shapes), np.asarray(colours)


def world_class_sets(world: WorldConfig, shapes: np.ndarray, colours: np.ndarray, sets: list[str]) -> dict:
    """class set -> (labels, names). Names as the world's captions say them (the attribute's
    first word); a colour class is "<colour> shape" so every prompt names a thing."""
    from ..world.scenes import COLOURS, SHAPES

    all_sets = {
        "shape": (shapes, SHAPES[: world.n_shapes]),
        "colour": (colours, [f"{c} shape" for c in COLOURS[: world.n_colours]]),
        "shape_colour": (
            shapes * world.n_colours + colours,
            [f"{c} {s}" for s in SHAPES[: world.n_shapes] for c in COLOURS[: world.n_colours]],
        ),
    }
    return {name: all_sets[name] for name in sets}


# ---- ImageNet class prototypes (no photos) ----------------------------------------------


def imagenet_prototype_rows(classes: list[tuple[str, str]]) -> tuple[dict, dict]:
    """(class sets, table) for one item per listed ImageNet class: `image` is the class's row
    in a 1,000-way ImageNet classifier (the rank of its wnid, realdata/imagenet.py)."""
    from ..realdata.imagenet import imagenet_wnids

    index = {w: i for i, w in enumerate(imagenet_wnids())}
    missing = [w for w, _ in classes if w not in index]
    if missing:
        raise MatchDataError(f"data.classes: {missing[0]} is not an ImageNet-1k wnid ({len(missing)} such)")
    rows = np.array([index[w] for w, _ in classes], dtype=np.int64)
    return {"classes": (np.arange(len(classes)), [name for _, name in classes])}, {"image": rows}


# ---- the artifact -----------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def materialize(cfg: MatchDataConfig, out: Path, world: WorldConfig | None = None) -> dict[str, int]:
    """Write labels.parquet, classes.json (and images.npy) for the configured source."""
    if cfg.source == "world":
        if world is None:
            raise MatchDataError("data.source world needs the base recipe's world")
        images, shapes, colours = world_single_objects(world, cfg.per_class or 32, cfg.seed, cfg.position)
        sets = world_class_sets(world, shapes, colours, list(cfg.class_sets))
        np.save(out / "images.npy", images)
        table = {"image": np.arange(len(images))}
    elif cfg.source == "fashion_mnist":
        images, labels = load_fashion_mnist(cfg.path, cfg.split)
        keep = subsample(labels, cfg.per_class, cfg.seed)
        images = images[keep]
        sets = {"fashion_mnist": (labels[keep], [prompt_name(n) for n in FASHION_MNIST_CLASSES])}
        np.save(out / "images.npy", images)
        table = {"image": keep}  # row in the split's IDX file
    elif cfg.source == "prototypes":
        sets, table = imagenet_prototype_rows(read_class_list(cfg.classes))
    else:
        listed = read_class_list(cfg.classes) if cfg.classes else None
        paths, labels, names = load_image_folder(cfg.path, listed)
        keep = subsample(labels, cfg.per_class, cfg.seed)
        paths = [paths[i] for i in keep]
        sets = {"classes": (labels[keep], names)}
        table = {"image": [str(p.resolve()) for p in paths], "sha256": [_sha256(p) for p in paths]}
    for name, names in cfg.class_names.items():
        if name not in sets:
            raise MatchDataError(f"data.class_names.{name}: no such class set (sets: {', '.join(sets)})")
        if len(names) != len(sets[name][1]):
            raise MatchDataError(
                f"data.class_names.{name}: {len(names)} names for {len(sets[name][1])} classes {sets[name][1]}"
            )
        sets[name] = (sets[name][0], list(names))
    cols = {**table, **{name: pa.array(np.asarray(lab, dtype=np.int64)) for name, (lab, _) in sets.items()}}
    pq.write_table(pa.table(cols), out / "labels.parquet")
    (out / "classes.json").write_text(json.dumps({name: names for name, (_, names) in sets.items()}, indent=1))
    per_set = {f"classes_{n}": len(v[1]) for n, v in sets.items()}
    return {"images": len(table["image"]), "class_sets": len(sets), **per_set}


def load_labels(data_dir: Path) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """(class set -> names, class set -> labels (N,)) of a match data artifact."""
    classes = json.loads((data_dir / "classes.json").read_text())
    t = pq.read_table(data_dir / "labels.parquet", columns=list(classes))
    return classes, {name: t[name].to_numpy() for name in classes}


class ImageFiles:
    """Images behind recorded paths, read (and checked against their digests) when indexed,
    so a long list never sits decoded in memory at once."""

    def __init__(self, paths: list[str], digests: list[str]):
        self.paths, self.digests = paths, digests

    def __len__(self) -> int:
        return len(self.paths)

    def _open(self, i: int):
        from PIL import Image

        p = Path(self.paths[i])
        if not p.is_file():
            raise MatchDataError(f"{p}: an image of the match data is gone (rerun the match_data stage)")
        if _sha256(p) != self.digests[i]:
            raise MatchDataError(f"{p}: changed since the match data was made (rerun with --force match_data)")
        with Image.open(p) as im:
            return im.convert("RGB")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._open(j) for j in range(*i.indices(len(self)))]
        return self._open(i)


def load_images(data_dir: Path) -> np.ndarray | ImageFiles:
    """The uint8 array of images.npy, or the recorded image files (ImageFiles)."""
    if (data_dir / "images.npy").is_file():
        return np.load(data_dir / "images.npy")
    t = pq.read_table(data_dir / "labels.parquet", columns=["image", "sha256"]).to_pydict()
    return ImageFiles(t["image"], t["sha256"])
