"""Views: what each text model reads.

- good views: per image, the texts of kinds `good_sources` (the model draws `n_views`
  distinct ones per step): different texts observing one scene;
- texts: one text per row of kinds `text_sources`, which the bad-view JEPA corrupts into
  two masked copies and the causal LM reads for next-token prediction;
- one word-level tokenizer built from all of them, shared by every text model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from .tokenizer import build_tokenizer

if TYPE_CHECKING:
    from .config import ViewsConfig


def build_views(texts: Path, cfg: ViewsConfig, out: Path) -> dict[str, int]:
    t = pq.read_table(texts, columns=["image_id", "text_id", "source_kind", "text"]).to_pylist()
    kinds = {r["source_kind"] for r in t}
    for k in {*cfg.good_sources, *cfg.text_sources} - kinds:
        raise ValueError(f"views: source kind {k!r} is not in the corpus (kinds: {sorted(kinds)})")
    groups: dict[str, list[str]] = {}
    for r in t:
        if r["source_kind"] in cfg.good_sources:
            groups.setdefault(r["image_id"], []).append(r["text"])
    good = [(i, g) for i, g in sorted(groups.items()) if len(g) >= cfg.n_views]
    rg = {"row_group_size": cfg.row_group_rows} if cfg.row_group_rows else {}
    pq.write_table(
        pa.table({"image_id": [i for i, _ in good], "texts": [g for _, g in good]}), out / "good_views.parquet", **rg
    )
    single = [r for r in t if r["source_kind"] in cfg.text_sources]
    pq.write_table(pa.Table.from_pylist(single), out / "texts.parquet", **rg)
    tok = build_tokenizer([x for _, g in good for x in g] + [r["text"] for r in single], cfg)
    tok.save(str(out / "tokenizer.json"))
    (out / "meta.json").write_text(json.dumps({"max_len": cfg.max_len, "n_views": cfg.n_views}))
    return {
        "good_images": len(good),
        "good_texts": sum(len(g) for _, g in good),
        "images_too_few_texts": len(groups) - len(good),
        "texts": len(single),
        "vocab": tok.get_vocab_size(),
    }
