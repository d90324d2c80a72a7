"""Views: what each text model reads.

- good views: per image, the texts of kinds `good_sources` (the model draws `n_views`
  distinct ones per step): different texts observing one scene;
- texts: one text per row of kinds `text_sources`, which the bad-view JEPA corrupts into
  two masked copies and the causal LM reads for next-token prediction;
- one word-level tokenizer built from all of them, shared by every text model.

One kind is derived here rather than ingested: `wn_hypernym`, a WordNet synset's parent
named by the parent's lemma list (as the corpus keeps it). With `good_sources: [wn_lemmas,
wn_hypernym]` a synset's two views are its own lemmas and its parent's: positives that carry
the hierarchy and nothing else (issue 42's control, configs/improve_minilm_hier.yaml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from .data.schema import TEXT_SCHEMA
from .tokenizer import build_tokenizer

if TYPE_CHECKING:
    from .config import ViewsConfig

# the files' column types, fixed (polars hands out large strings): texts.parquet keeps the text
# schema's, good_views.parquet has plain lists, as they always had (the pinned digests hash them)
TEXTS_SCHEMA = pa.schema([TEXT_SCHEMA.field(c) for c in ("image_id", "text_id", "source_kind", "text")])
GOOD_VIEWS_SCHEMA = pa.schema([("image_id", pa.string()), ("texts", pa.list_(pa.string()))])


HYPERNYM_KIND = "wn_hypernym"


def hypernym_texts(t: pl.DataFrame) -> pl.DataFrame:
    """Per synset with a `wn_lemmas` row: one `wn_hypernym` row, the lemma list of its first
    hypernym (WordNet's pointer order) whose `wn_lemmas` row the corpus holds; synsets with
    none get no row. `t` has the WordNet reader's `hypernyms` column (space-separated wnids)."""
    lemmas = t.filter(pl.col("source_kind") == "wn_lemmas")
    parents = (
        lemmas.select("image_id", parent=pl.col("hypernyms").str.split(" "))
        .with_columns(rank=pl.int_ranges(pl.col("parent").list.len()))
        .explode("parent", "rank")
        .join(lemmas.select(parent="image_id", text="text"), on="parent")  # parents the corpus kept
        .sort("image_id", "rank")
        .unique("image_id", keep="first", maintain_order=True)
    )
    return parents.select(
        "image_id",
        text_id=pl.col("image_id") + f":{HYPERNYM_KIND}:0",
        source_kind=pl.lit(HYPERNYM_KIND),
        text="text",
    )


def build_views(texts: Path, cfg: ViewsConfig, out: Path) -> dict[str, int]:
    derive = HYPERNYM_KIND in {*cfg.good_sources, *cfg.text_sources}
    if derive and "hypernyms" not in pq.read_schema(texts).names:
        raise ValueError(f"views: {HYPERNYM_KIND!r} is derived from a WordNet corpus's hypernyms; {texts} has none")
    t = pl.from_arrow(pq.read_table(texts, columns=TEXTS_SCHEMA.names + (["hypernyms"] if derive else [])))
    if derive:
        t = pl.concat([t.drop("hypernyms"), hypernym_texts(t)], how="vertical_relaxed")
    kinds = set(t["source_kind"].unique())
    for k in {*cfg.good_sources, *cfg.text_sources} - kinds:
        raise ValueError(f"views: source kind {k!r} is not in the corpus (kinds: {sorted(kinds)})")
    # each image's good-kind texts in corpus order (a group keeps its rows' order), images by id
    good_kind = pl.col("source_kind").is_in(cfg.good_sources)
    groups = t.filter(good_kind).group_by("image_id").agg(texts="text").sort("image_id")
    good = groups.filter(pl.col("texts").list.len() >= cfg.n_views)
    rg = {"row_group_size": cfg.row_group_rows} if cfg.row_group_rows else {}
    pq.write_table(good.to_arrow().cast(GOOD_VIEWS_SCHEMA), out / "good_views.parquet", **rg)
    single = t.filter(pl.col("source_kind").is_in(cfg.text_sources))
    pq.write_table(single.to_arrow().cast(TEXTS_SCHEMA), out / "texts.parquet", **rg)
    good_texts = good["texts"].explode().to_list()
    tok = build_tokenizer(good_texts + single["text"].to_list(), cfg)
    tok.save(str(out / "tokenizer.json"))
    (out / "meta.json").write_text(json.dumps({"max_len": cfg.max_len, "n_views": cfg.n_views}))
    return {
        "good_images": good.height,
        "good_texts": len(good_texts),
        "images_too_few_texts": groups.height - good.height,
        "texts": single.height,
        "vocab": tok.get_vocab_size(),
    }
