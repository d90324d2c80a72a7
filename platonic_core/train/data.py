"""Training data held in memory: tokenised texts (with the text rows of each image for good
views) from a views artifact, or the training renders of the world."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq
import torch

from ..tokenizer import encode, load_tokenizer

if TYPE_CHECKING:
    from ..config import ModelConfig


@dataclass
class TextData:
    """Tokenised texts (M, T) and, for good views, the text rows of each image."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    groups: list[np.ndarray] | None = None


@dataclass
class ImageData:
    renders: np.ndarray  # uint8 (n_scenes, R, H, W, 3)


def load_text_data(
    views_dir: Path, cfg: ModelConfig, specials: dict[str, int] | None = None, tok: object | None = None
) -> tuple[TextData, object, int]:
    """Tokenised training texts for `cfg.views` from a views artifact, by the views' tokenizer
    or `tok` (a pretrained encoder's own: `init`)."""
    tok = tok or load_tokenizer(views_dir / "tokenizer.json")
    max_len = json.loads((views_dir / "meta.json").read_text())["max_len"]
    if cfg.views in ("good", "documents"):  # the texts of each image
        groups_txt = pq.read_table(views_dir / "good_views.parquet", columns=["texts"])["texts"].to_pylist()
        texts, groups = [], []
        for g in groups_txt:
            groups.append(np.arange(len(texts), len(texts) + len(g)))
            texts.extend(g)
    else:
        texts = pq.read_table(views_dir / "texts.parquet", columns=["text"])["text"].to_pylist()
        groups = None
    ids, mask = encode(tok, texts, max_len, specials)
    return TextData(ids, mask, groups), tok, max_len


def load_train_renders(world_dir: Path) -> np.ndarray:
    split = pq.read_table(world_dir / "scenes.parquet", columns=["split", "render_row"]).to_pydict()
    rows = [r for s, r in zip(split["split"], split["render_row"], strict=True) if s == "train"]
    return np.load(world_dir / "renders.npy", mmap_mode="r")[rows]
