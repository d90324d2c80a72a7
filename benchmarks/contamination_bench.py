"""A synthetic corpus with planted contamination, to measure the audit at scale.

Texts are word sequences drawn (vectorised, numpy + Arrow) from a Zipf-distributed
vocabulary of pseudo-words, 6-20 words each, so short function-like words recur across
texts as in captions. Eval captions come from the same distribution. A known set of eval
captions is planted into the corpus as edited copies; every copy records its edit, so the
audit's recall per edit kind and its precision can be measured:

- `case`, `punctuation`: letter case / punctuation / spacing only (the exact level's job);
- `insertion`, `deletion`, `swap`: 1-2 word insertions, deletions or adjacent-word swaps,
  plus case and punctuation changes half of the time (the near level's job).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from platonic.core.data.schema import TEXT_SCHEMA

EXACT_EDITS = ("case", "punctuation")
NEAR_EDITS = ("insertion", "deletion", "swap")
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """`size` distinct pseudo-words of 1-4 syllables (short ones first: they get the most mass)."""
    words: dict[str, None] = {}
    syl = np.array(_SYLLABLES)
    for n_syl in range(1, 8):
        draws = syl[rng.integers(0, len(syl), (size * 2, n_syl))]
        for w in ("".join(row) for row in draws):
            words.setdefault(w, None)
            if len(words) >= size:
                return list(words)
    return list(words)


class TextSampler:
    """Texts of `min_words`-`max_words` words from a Zipf(`exponent`) vocabulary."""

    def __init__(
        self, vocab_size: int = 30_000, exponent: float = 1.0, min_words: int = 6, max_words: int = 20, seed: int = 0
    ):
        rng = np.random.default_rng(seed)
        self.vocab = pa.array(vocabulary(vocab_size, rng))
        w = 1.0 / np.arange(1, vocab_size + 1) ** exponent
        self.cdf = np.cumsum(w / w.sum())
        self.min_words, self.max_words = min_words, max_words

    def sample(self, n: int, rng: np.random.Generator) -> pa.Array:
        lengths = rng.integers(self.min_words, self.max_words + 1, n)
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        idx = np.minimum(np.searchsorted(self.cdf, rng.random(int(offsets[-1]))), len(self.vocab) - 1)
        words = pa.ListArray.from_arrays(pa.array(offsets), self.vocab.take(pa.array(idx)))
        return pc.binary_join(words, " ")

    def words(self, n: int, rng: np.random.Generator) -> list[str]:
        """`n` single words from the same Zipf distribution (what an insertion inserts)."""
        idx = np.minimum(np.searchsorted(self.cdf, rng.random(n)), len(self.vocab) - 1)
        return self.vocab.take(pa.array(idx)).to_pylist()


def _surface(text: str, rng: np.random.Generator) -> str:
    """Case, punctuation and spacing changes: invisible after normalisation."""
    words = text.split(" ")
    if rng.random() < 0.5:
        words = [w.upper() if rng.random() < 0.2 else w.capitalize() for w in words]
    if len(words) > 2 and rng.random() < 0.7:
        k = int(rng.integers(1, len(words) - 1))
        words[k] = words[k] + rng.choice([",", ";", " -", ":"])
    out = "  ".join(words) if rng.random() < 0.3 else " ".join(words)
    return out + str(rng.choice([".", "!", "...", ""]))


def plant_edit(text: str, kind: str, rng: np.random.Generator, filler: list[str]) -> str:
    """An edited copy of `text` (see the module doc for the kinds)."""
    if kind == "case":
        return text.upper() if rng.random() < 0.3 else text.capitalize() + "."
    if kind == "punctuation":
        return _surface(text, rng)
    words = text.split(" ")
    for _ in range(int(rng.integers(1, 3))):
        if kind == "insertion":
            words.insert(int(rng.integers(0, len(words) + 1)), filler[int(rng.integers(len(filler)))])
        elif kind == "deletion" and len(words) > 2:
            del words[int(rng.integers(len(words)))]
        elif kind == "swap" and len(words) > 1:
            k = int(rng.integers(len(words) - 1))
            words[k], words[k + 1] = words[k + 1], words[k]
    out = " ".join(words)
    return _surface(out, rng) if rng.random() < 0.5 else out


def write_benchmark(
    out: Path,
    n_texts: int,
    n_eval: int,
    n_planted: int,
    seed: int = 0,
    batch: int = 500_000,
    sampler: TextSampler | None = None,
) -> dict:
    """Write `corpus.parquet` (text schema, `n_texts` rows incl. the planted copies),
    `eval.parquet` (captions: image_id, caption) and `planted.parquet` (text_id, eval row,
    edit kind). Streams the corpus in batches: memory is one batch."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sampler = sampler or TextSampler(seed=seed)
    evals = sampler.sample(n_eval, rng).to_pylist()
    pq.write_table(pa.table({"image_id": [f"e{i:06d}" for i in range(n_eval)], "caption": evals}), out / "eval.parquet")
    kinds = (*EXACT_EDITS, *NEAR_EDITS)
    src = rng.choice(n_eval, n_planted, replace=n_planted > n_eval)
    kind = rng.choice(len(kinds), n_planted)
    where = np.sort(rng.choice(n_texts, n_planted, replace=False))
    filler = sampler.words(1000, rng)
    planted = {
        int(w): (int(s), kinds[k], plant_edit(evals[s], kinds[k], rng, filler))
        for w, s, k in zip(where, src, kind, strict=True)
    }
    with pq.ParquetWriter(out / "corpus.parquet", TEXT_SCHEMA) as w:
        for start in range(0, n_texts, batch):
            n = min(batch, n_texts - start)
            texts = pc.utf8_capitalize(sampler.sample(n, rng)).to_pylist()
            for row in [r for r in planted if start <= r < start + n]:
                texts[row - start] = planted[row][2]
            rows = np.arange(start, start + n)
            ids = pa.array([f"t{r:09d}" for r in rows])
            w.write_table(
                pa.table(
                    {
                        "image_id": pa.array([f"i{r // 2:09d}" for r in rows]),
                        "text_id": ids,
                        "source_kind": pa.array(["alt"] * n),
                        "text": pa.array(texts),
                        "source_uri": pa.array(["bench"] * n),
                        "source_row": pa.array(rows, pa.int64()),
                        "generator": pa.array([""] * n),
                        "generator_model": pa.array([""] * n),
                        "generator_params": pa.array([""] * n),
                    },
                    schema=TEXT_SCHEMA,
                )
            )
    pq.write_table(
        pa.table(
            {
                "text_id": [f"t{r:09d}" for r in planted],
                "eval_row": [v[0] for v in planted.values()],
                "edit": [v[1] for v in planted.values()],
            }
        ),
        out / "planted.parquet",
    )
    return {"texts": n_texts, "eval": n_eval, "planted": n_planted}


def score_planted(matches: pa.Table, planted: pa.Table, eval_ids: list[str], level: str) -> dict:
    """Recall (per edit kind) of the planted copies among the pairs found at `level` or a
    stricter one, and precision: the share of found pairs that are planted ones."""
    from platonic.core.dedup import LEVELS

    keep = LEVELS[: LEVELS.index(level) + 1]
    pair = ["text_id", "eval_text_id"]
    found = pl.from_arrow(matches).filter(pl.col("level").is_in(keep)).select(pair).unique()
    truth = pl.from_arrow(planted)
    # a planted copy is of its eval image's first caption; a hit: the audit found that pair
    first = pl.Series([f"{eval_ids[r]}#0" for r in truth["eval_row"]], dtype=pl.String)
    truth = truth.with_columns(eval_text_id=first).join(found.with_columns(hit=pl.lit(True)), on=pair, how="left")
    truth = truth.with_columns(pl.col("hit").fill_null(False))
    hit = int(truth["hit"].sum())
    by_edit = truth.group_by("edit").agg(pl.col("hit").mean()).sort("edit")
    return {
        "recall": hit / max(1, truth.height),
        "precision": hit / max(1, found.height),
        "found_pairs": found.height,
        "planted": truth.height,
        "recall_by_edit": {k: round(v, 4) for k, v in by_edit.iter_rows()},
    }
