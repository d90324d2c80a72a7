"""Tokens per training sample, as the train stage draws them: the factor that turns a sample
ratio into a token ratio (the paper counts good views' efficiency in both).

    python benchmarks/tokens_per_sample.py STORE/artifacts/views/KEY                  # good pairs vs documents
    python benchmarks/tokens_per_sample.py STORE/artifacts/views/KEY --batches 400 --seed 1

A good-view sample is n_views texts of one synset, each encoded (every real token counted); a
next-token sample is a document, the same number of texts of one synset in one sequence (its
real tokens, separators included, up to the document's max length). Counted over batches of
the train stage's own samplers (`make_sampler`), so truncation and separators are as trained.
Prints tokens per sample of each and token ratio = sample ratio x (document / pair tokens).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from platonic.core.config import ModelConfig
from platonic.core.tokenizer import load_tokenizer, special_ids
from platonic.core.train.data import load_text_data
from platonic.core.train.sampler import make_sampler


def mean_tokens(views: Path, views_kind: str, kind: str, batches: int, seed: int, batch: int = 128) -> float:
    """Mean real (unmasked) tokens per sample over `batches` batches of `batch` samples."""
    cfg = ModelConfig(kind=kind, views=views_kind, steps=batches, batch_size=batch)
    sp = special_ids(load_tokenizer(views / "tokenizer.json"))
    draw = make_sampler(cfg, load_text_data(views, cfg, sp)[0], seed, sp)
    total = samples = 0
    for _ in range(batches):
        mask = draw()["attention_mask"]  # good: (V, B, T); documents: (B, T)
        total += int(mask.sum())
        samples += mask.shape[-2]
    return total / samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("views", type=Path, help="a views artifact (STORE/artifacts/views/KEY)")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128, help="samples per batch (the recipes': 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-ratio", type=float, default=None, help="print this sample ratio in tokens too")
    a = ap.parse_args()
    if not (a.views / "good_views.parquet").is_file():
        raise SystemExit(f"{a.views}: not a views artifact (no good_views.parquet)")
    pair = mean_tokens(a.views, "good", "text_jepa", a.batches, a.seed, a.batch)
    doc = mean_tokens(a.views, "documents", "causal_lm", a.batches, a.seed, a.batch)
    drawn = f"{a.batches} batches of {a.batch}, seed {a.seed}"
    print(f"good-view pair: {pair:.2f} tokens per sample; document: {doc:.2f} ({drawn})")
    print(f"token ratio = sample ratio x {doc / pair:.3f}")
    if a.sample_ratio:
        print(f"sample ratio {a.sample_ratio:g} -> token ratio {a.sample_ratio * doc / pair:.2f}")


if __name__ == "__main__":
    main()
