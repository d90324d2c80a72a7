"""Embeddings of eval texts and images: one pooled (N, D_l) array per layer.

Saved as `.npz` (`layer_0` … `layer_L`, embeddings first), the format `metrics.alignment`
and `platonic align` read.
"""

from __future__ import annotations

import json
import math
import pickle
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .feature_files import check_feature_file, unsupported
from .models import load_checkpoint
from .tokenizer import encode, load_tokenizer, special_ids

if TYPE_CHECKING:
    from .config import ModelConfig


@torch.no_grad()
def text_layer_features(
    model: torch.nn.Module,
    tok,
    texts: list[str],
    max_len: int,
    batch_size: int = 256,
    specials: dict[str, int] | None = None,
) -> list[np.ndarray]:
    chunks: list[list[torch.Tensor]] = []
    for s in range(0, len(texts), batch_size):
        ids, mask = encode(tok, texts[s : s + batch_size], max_len, specials)
        chunks.append(model.layer_features(ids, mask))
    return [torch.cat([c[i] for c in chunks]).numpy() for i in range(len(chunks[0]))]


@torch.no_grad()
def image_layer_features(model: torch.nn.Module, images: np.ndarray, batch_size: int = 256) -> list[np.ndarray]:
    chunks = []
    for s in range(0, len(images), batch_size):
        x = model.prepare(torch.from_numpy(np.ascontiguousarray(images[s : s + batch_size])))
        chunks.append(model.layer_features(x))
    return [torch.cat([c[i] for c in chunks]).numpy() for i in range(len(chunks[0]))]


def save_features(layers: list[np.ndarray], path: Path) -> None:
    np.savez(path, **{f"layer_{i}": a.astype(np.float32) for i, a in enumerate(layers)})


class Unreadable(ValueError):
    """A feature file's content is not features; the message (without the path) says why."""


def _parquet_layers(path: Path) -> list[np.ndarray]:
    """A Parquet of features: list-valued columns are layers (one row per sample, in column
    order); otherwise the numeric columns together are one (N, D) layer."""
    t = pq.read_table(path)
    list_cols = [
        f.name
        for f in t.schema
        if pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type) or pa.types.is_large_list(f.type)
    ]
    if list_cols:
        layers = []
        for c in list_cols:
            rows = t[c].to_pylist()
            if any(r is None for r in rows) or len({len(r) for r in rows}) != 1:
                raise Unreadable(f"column {c!r} has missing or ragged rows")
            layers.append(np.asarray(rows, dtype=np.float32))
        return layers
    num = [f.name for f in t.schema if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
    if not num:
        raise Unreadable("no list-valued or numeric columns to read features from")
    return [np.stack([t[c].to_numpy(zero_copy_only=False) for c in num], 1).astype(np.float32)]


# what reading a file that is not what it claims to be raises (numpy, torch, zipfile, pyarrow)
_UNREADABLE = (ValueError, TypeError, RuntimeError, OSError, EOFError, MemoryError, KeyError, zipfile.BadZipFile)


def _why(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:200]}"


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise Unreadable("holds pickled Python objects, not only tensors (refused: weights_only)") from None
    except _UNREADABLE as e:
        raise Unreadable(f"not a readable torch file ({_why(e)})") from None


def load_torch_file(path: Path) -> Any:
    """`torch.load` of a file from anywhere (features, state dicts): tensors and plain
    containers only (weights_only), and a corrupt file or a pickle of other objects is one
    ValueError line naming the file instead of torch's multi-line traceback."""
    try:
        return _torch_load(path)
    except Unreadable as e:
        raise ValueError(f"{path}: {e}") from None


def _check_npy_header(f: BinaryIO, size: int, what: str) -> None:
    """Before numpy allocates anything: the array the header of an open .npy stream declares
    must be numbers and fit in the `size` bytes the stream holds (a forged header can claim
    terabytes, which np.load would try to allocate)."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise Unreadable(f"{what}.npy format version {version} is not supported")
    if dtype.hasobject:
        raise Unreadable(f"{what}holds Python objects, not numbers")
    need, have = math.prod(shape) * dtype.itemsize, size - f.tell()
    if need > have:
        raise Unreadable(f"{what}header declares shape {shape} of {dtype} ({need:,} bytes) but holds {have:,} bytes")


def _read_layers(path: Path) -> list[np.ndarray]:
    if path.suffix == ".npz":
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                with zf.open(info) as f:
                    _check_npy_header(f, info.file_size, f"member {info.filename}: ")
        with np.load(path, allow_pickle=False) as z:
            keys = sorted(z.files, key=lambda k: int(k.split("_")[-1]) if k.split("_")[-1].isdigit() else -1)
            return [z[k] for k in keys]
    if path.suffix == ".parquet":
        return _parquet_layers(path)
    if path.suffix == ".npy":
        with open(path, "rb") as f:
            _check_npy_header(f, path.stat().st_size, "")
        a = np.load(path, allow_pickle=False)
    elif path.suffix == ".pt":
        obj = _torch_load(path)
        if isinstance(obj, torch.Tensor):
            if obj.numel() * obj.element_size() > obj.untyped_storage().nbytes():
                raise Unreadable(f"a tensor of shape {tuple(obj.shape)} is a view larger than the data stored")
            a = (obj.float() if obj.is_floating_point() else obj).numpy()
        else:
            a = np.asarray(obj)
    else:
        raise Unreadable(unsupported(path.suffix))
    if a.ndim == 2:
        return [a]
    if a.ndim == 3:
        return list(a)
    raise Unreadable(f"features must be (N, D) or (L, N, D), got shape {a.shape}")


def load_features(path: Path) -> list[np.ndarray]:
    """Read features from .npz (layer_i), .npy ((N, D) or (L, N, D)), .pt (weights_only) or
    .parquet (see `_parquet_layers`). These files come from anywhere (`platonic align`): a
    file that is not numeric features (corrupt, truncated, a forged .npy header, a pickle) is
    a one-line ValueError naming it, raised before anything large is allocated."""
    path = check_feature_file(path)  # not a file, or a suffix no reader takes
    try:
        layers = _read_layers(path)
    except Unreadable as e:
        raise ValueError(f"{path}: {e}") from None
    except _UNREADABLE as e:
        raise ValueError(f"{path}: not a readable feature file ({_why(e)})") from None
    for i, a in enumerate(layers):
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{path}: layer {i} holds {a.dtype}, not numbers")
    return layers


def eval_captions(ingest_dir: Path) -> tuple[list[str], list[str]]:
    """(image ids, captions) of the eval split, ordered by image id: every model's row order."""
    t = pq.read_table(ingest_dir / "eval.parquet", columns=["image_id", "text"]).to_pydict()
    pairs = sorted(zip(t["image_id"], t["text"], strict=True))
    return [i for i, _ in pairs], [x for _, x in pairs]


def checkpoint_text_features(
    model: torch.nn.Module, checkpoint_dir: Path, texts: list[str], batch_size: int = 256, text_output: str = "pooled"
) -> list[np.ndarray]:
    """Per-layer features of `texts` with a text model of a `train` artifact (its tokenizer).
    `text_output: projector`: one layer, the JEPA projector's output instead."""
    tok = load_tokenizer(checkpoint_dir / "tokenizer.json")
    sp = special_ids(tok)
    max_len = json.loads((checkpoint_dir / "model.json").read_text())["max_len"]
    if text_output == "projector":
        if not hasattr(model, "proj"):
            raise ValueError("embed.text_output: projector needs a JEPA text model (it has a projector)")
        chunks = []
        with torch.no_grad():
            for s in range(0, len(texts), batch_size):
                ids, mask = encode(tok, texts[s : s + batch_size], max_len, sp)
                chunks.append(model(ids, mask)[1])  # (B, K)
        return [torch.cat(chunks).numpy()]
    if text_output != "pooled":
        raise ValueError(f"unknown text_output {text_output!r} (pooled, projector)")
    return text_layer_features(model, tok, texts, max_len, batch_size, sp)


def run_embed(
    model_cfg: ModelConfig,
    checkpoint_dir: Path,
    eval_dir: Path,
    out: Path,
    batch_size: int = 256,
    text_output: str = "pooled",
    layer: int | None = None,
) -> dict:
    """Embed the eval split with one trained model. Text models read the eval captions of an
    ingest artifact, the image model the eval renders of a world artifact; rows are ordered
    by image id, the same order for every model (checked at evaluation). Text models:
    `text_output` (pooled layers or the projector) and `layer` (keep one pooled layer)."""
    model = load_checkpoint(checkpoint_dir, model_cfg)
    if model_cfg.kind == "image_jepa":
        s = pq.read_table(eval_dir / "scenes.parquet", columns=["scene_id", "split", "render_row"]).to_pydict()
        pairs = sorted(
            (i, r) for i, sp, r in zip(s["scene_id"], s["split"], s["render_row"], strict=True) if sp == "eval"
        )
        renders = np.load(eval_dir / "renders.npy", mmap_mode="r")
        ids = [i for i, _ in pairs]
        layers = image_layer_features(model, renders[[r for _, r in pairs], 0], batch_size)
    else:
        ids, texts = eval_captions(eval_dir)
        layers = checkpoint_text_features(model, checkpoint_dir, texts, batch_size, text_output)
        if layer is not None and text_output == "pooled":
            if not -len(layers) <= layer < len(layers):
                raise ValueError(f"embed.layer = {layer}, but the model has {len(layers)} layers (embeddings first)")
            layers = [layers[layer]]
    save_features(layers, out / "features.npz")
    pq.write_table(pa.table({"image_id": ids}), out / "ids.parquet")
    return {"samples": len(ids), "layers": len(layers), "dim": int(layers[-1].shape[1])}
