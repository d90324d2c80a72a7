"""Seconds per step of post-training Gemma-3 270M (configs/improve_gemma.yaml's rows), and its load.

    nice -n 10 python benchmarks/bench_gemma_post.py                      # good row: lejepa, 2 blocks
    nice -n 10 python benchmarks/bench_gemma_post.py --objectives lejepa next_token --steps 6

Loads the packaged GGUF the way the train stage does (models/pretrained.py: init_source,
init_tokenizer, init_decoder_config, load_init_decoder; timed apart), checks that step 0's
last-layer features are the reference row's code's (hf_text_layer_features' tokenizer, padding
and pooling, on the same loaded decoder), then runs the train loop's own steps (train_model:
compute_loss, backward, clipping, AdamW) on good views of WordNet (a synset's lemma list and
definition, /usr/share/wordnet/data.noun) at the recipe's batch, max_len and train_blocks.
The first step (allocation, first-touch) is reported apart from the median of the rest.
Nothing is written; the model is not saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from platonic.core.config import ModelConfig
from platonic.core.data.readers.wordnet import read_data_file
from platonic.core.models import build_model
from platonic.core.models.pretrained import init_decoder_config, init_source, init_tokenizer, load_init_decoder
from platonic.core.tokenizer import encode, special_ids
from platonic.core.train import make_sampler, train_model
from platonic.core.train.data import TextData


def wordnet_pairs(n: int, seed: int = 0) -> list[list[str]]:
    """`n` good-view groups: [lemma list, definition] of random noun synsets that have both."""
    syn = [s for s in read_data_file("/usr/share/wordnet/data.noun").synsets if s.definition]
    rng = np.random.default_rng(seed)
    return [[syn[i].lemma_text, syn[i].definition] for i in rng.choice(len(syn), n, replace=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objectives", nargs="+", default=["lejepa"], choices=["lejepa", "infonce", "next_token"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=32)
    ap.add_argument("--train-blocks", type=int, default=2)
    ap.add_argument("--pooling", default="mean", choices=["mean", "last"])
    args = ap.parse_args()
    print(f"torch threads {torch.get_num_threads()}")

    t0 = time.perf_counter()
    folder, gguf = init_source("gemma-3-270m")
    tok = init_tokenizer(folder, gguf)
    arch = init_decoder_config(folder, gguf)
    t_meta = time.perf_counter() - t0
    cfg0 = ModelConfig(kind="text_jepa", views="good", init="gemma-3-270m", pooling=args.pooling)
    model = build_model(cfg0, tok.get_vocab_size(), 512, special_ids=special_ids(tok), decoder_config=arch)
    t1 = time.perf_counter()
    load_init_decoder(model, folder, gguf)
    t_load = time.perf_counter() - t1
    print(f"assemble + tokenizer + config {t_meta:.1f} s; GGUF weights (dequantised, strict) {t_load:.1f} s")

    # step 0 = the reference row's code path (AutoTokenizer: left padding) on the same weights
    from transformers import AutoTokenizer

    from platonic.core.features import text_layer_features
    from platonic.core.models.pooling import pool_tokens

    texts = ["dog, domestic dog, Canis familiaris: a member of the genus Canis", "oak", "tabby: a striped cat"]
    ours = text_layer_features(model.eval(), tok, texts, 512, 8, special_ids(tok))[-1]
    hf_tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf)
    enc = hf_tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model.decoder(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    ref = pool_tokens(h, enc["attention_mask"], args.pooling).numpy()
    diff = float(np.abs(ours - ref).max())
    print(f"step 0 vs the reference row's code ({hf_tok.padding_side} padding): max |diff| {diff:.2e}")

    groups = wordnet_pairs(4000)
    flat = [t for g in groups for t in g]
    ids, mask = encode(tok, flat, args.max_len, special_ids(tok))
    data = TextData(ids, mask, [np.array([2 * i, 2 * i + 1]) for i in range(len(groups))])
    print(f"tokens per text: mean {mask.sum(1).float().mean():.1f}, padded to {ids.shape[1]}", flush=True)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = {}
    for objective in args.objectives:
        model.load_state_dict(state)
        for p in model.parameters():
            p.requires_grad_(True)
        cfg = ModelConfig(
            kind="text_jepa",
            views="good",
            init="gemma-3-270m",
            pooling=args.pooling,
            train_blocks=args.train_blocks,
            objective=objective,
            steps=args.steps,
            batch_size=args.batch,
            optim={"lr": 2e-5},
        )
        model.freeze_below(args.train_blocks)
        times: list[float] = []
        last = [time.perf_counter()]

        def on_log(step: int, terms: dict, times: list[float] = times, last: list[float] = last) -> None:
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

        last[0] = time.perf_counter()
        sampler = make_sampler(cfg, data, 0, special_ids(tok))
        summary = train_model(cfg, model, sampler, 0, on_log, 1, show_progress=False)
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        results[objective] = {
            "first_step_s": round(times[0], 2),
            "median_step_s": round(statistics.median(times[1:]), 2),
            "steps": len(times),
            "final_loss": round(summary["final_loss"], 4),
            "trained_params": trained,
        }
        print(objective, json.dumps(results[objective]), flush=True)
    print(json.dumps({"load_s": round(t_load, 1), "meta_s": round(t_meta, 1), **vars(args), "results": results}))


if __name__ == "__main__":
    main()
