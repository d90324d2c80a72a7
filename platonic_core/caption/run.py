"""The caption stages' computations, one function per stage (stages/caption.py adapts them).

caption_data -> caption_text:{encoder}, caption_image -> caption_decoder:{encoder},
caption_map:{encoder} -> caption_eval:{encoder} -> caption_report
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .data import read_texts
from .decoder import build_tokenizer, train_decoder
from .encode import load_roles
from .maps import fit_maps, save_maps

if TYPE_CHECKING:
    from ..config import CaptionMapsConfig, DecoderConfig


def run_decoders(
    data_dir: Path,
    text_dir: Path,
    cfg: DecoderConfig,
    seeds: list[int],
    out: Path,
    on_log: Callable[[int, int, dict[str, float]], None] | None = None,
) -> dict:
    """One text-only decoder per seed (out/seed_<s>/), all on the decoder texts and their
    embeddings by this text encoder; `max_texts` keeps a random subset (fixed across seeds).
    Each is selected on the same held-out images' captions (decoder.heldout)."""
    groups, texts = read_texts(data_dir, "decoder_texts")
    feats = load_roles(text_dir)["decoder_texts"]
    if cfg.max_texts is not None and cfg.max_texts < len(texts):
        keep = np.sort(np.random.default_rng(0).choice(len(texts), cfg.max_texts, replace=False))
        texts, feats, groups = [texts[k] for k in keep], feats[keep], [groups[k] for k in keep]
    tok = build_tokenizer(texts, cfg)  # one vocabulary for every seed
    summary = {}
    for seed in seeds:
        log = None if on_log is None else (lambda step, m, s=seed: on_log(s, step, m))
        summary[str(seed)] = train_decoder(feats, texts, cfg, seed, out / f"seed_{seed}", tok, log, groups)
    (out / "decoders.json").write_text(json.dumps({"texts": len(texts), "seeds": summary}, indent=1))
    return {"texts": len(texts), "vocab": len(tok), "seeds": summary}


def run_maps(text_dir: Path, image_dir: Path, cfg: CaptionMapsConfig, seeds: list[int], out: Path) -> dict:
    """Every map of every seed, from the pair images' and pair captions' features."""
    text, image = load_roles(text_dir), load_roles(image_dir)
    maps, info = {}, {}
    for seed in seeds:
        maps[seed], info[str(seed)] = fit_maps(image["pairs"], text["pairs"], cfg, seed)
    save_maps(maps, info, out)
    return info


def run_report(
    eval_dirs: dict[str, Path],
    data_dir: Path,
    out: Path,
    examples: int = 8,
    confidence: float = 0.95,
    world_dir: Path | None = None,
) -> dict:
    """The table over encoders and seeds (summary.json, table.md, curve.png) and the examples
    page (examples.md with example_NN.png, examples.html): the first `examples` eval images
    with their references and, per encoder, the first seed's captions from a true caption's
    text embedding, through the paired map on all pairs (and that map's nearest training
    caption) and through the pair-free map."""
    import pyarrow.parquet as pq

    from ..report import caption_examples, caption_plot, caption_table
    from .data import LazyImages, read_references
    from .summary import summarize

    evals = {e: json.loads((d / "scores.json").read_text()) for e, d in eval_dirs.items()}
    summary = summarize(evals, confidence)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "table.md").write_text(caption_table(summary))
    caption_plot(summary, out / "curve.png")
    files = ["summary.json", "table.md", "curve.png"]
    if examples:
        images = LazyImages(data_dir, "eval", world_dir)
        refs = read_references(data_dir)
        seed = str(summary["seeds"][0])
        gens = {}
        for enc, d in eval_dirs.items():
            t = pq.read_table(d / "generations.parquet").to_pylist()
            for r in t:
                if r["seed"] in (seed, "") and r["image_id"] in images.ids[:examples]:
                    gens.setdefault(r["image_id"], {})[(enc, r["method"])] = r["caption"]
        shown = []
        for k, i in enumerate(images.ids[:examples]):
            caps = {}
            for enc in eval_dirs:
                methods = [m for (e, m) in gens.get(i, {}) if e == enc]
                paired_all = [m for m in methods if m.endswith("@all")]
                for m in ["text_embedding", *paired_all[:1], *(f"{m}/nearest" for m in paired_all[:1]), "pairfree"]:
                    if (enc, m) in gens[i]:
                        caps[f"{enc} · {m}"] = gens[i][(enc, m)]
            caps["most frequent caption"] = summary.get("frequent_caption", "")
            shown.append({"image": images[k], "image_id": i, "references": refs[i], "captions": caps})
        files += caption_examples(shown, out)
    return {"summary": summary, "files": files}
