"""The `concepts` stage's artifact: the ImageNet-1k classes as an eval set, in the files the
pipeline's other stages already read.

    eval.parquet     one class text per class (text schema, image_id = wnid): what the text
                     models embed and what dedup audits the training texts against
    features.npz     the classifier's prototypes, one layer (classes, features), and
    ids.parquet      the wnids in the same order: the image side, read by evaluate exactly as
                     an image model's embed artifact
    heldout.parquet  the eval synsets and all their descendants: removed from training (dedup)
    lemmas.json      wnid -> its lemmas (what `kept_naming_eval_classes` looks for)
    subsets.json     name -> the wnids of the classes under a root synset (the 118 dogs)
    concepts.json    the classifier, template, class count, and where the files came from
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ..data.schema import text_table
from ..features import save_features
from .concepts import load_concepts
from .hierarchy import NounHierarchy
from .imagenet import imagenet_wnids
from .prototypes import classifier_prototypes

if TYPE_CHECKING:
    from ..config import ConceptsConfig

SOURCE_KIND = "concept"  # the eval texts' source kind


def write_concepts(cfg: ConceptsConfig, out: Path) -> dict[str, int]:
    """Write the concept eval set (module docstring) for `cfg`; returns its counts."""
    hierarchy = NounHierarchy.read(cfg.wordnet)
    wnids = list(imagenet_wnids())
    prototypes = classifier_prototypes(cfg.classifier)  # (1000, D), rows in wnid order
    if cfg.classes:  # the first N classes: small recipes
        wnids, prototypes = wnids[: cfg.classes], prototypes[: cfg.classes]
    concepts = load_concepts(hierarchy, cfg.template, wnids)
    rows = [
        {"image_id": w, "text_id": f"{w}:concept", "source_kind": SOURCE_KIND, "text": t, "source_uri": cfg.wordnet}
        for w, t in zip(concepts.wnids, concepts.texts, strict=True)
    ]
    pq.write_table(text_table(rows), out / "eval.parquet")
    save_features([prototypes], out / "features.npz")
    pq.write_table(pa.table({"image_id": concepts.wnids}), out / "ids.parquet")
    heldout = sorted(concepts.leakage())
    pq.write_table(pa.table({"image_id": heldout}), out / "heldout.parquet")
    lemmas = {w: [x.replace("_", " ") for x in hierarchy.synsets[w].words] for w in concepts.wnids}
    (out / "lemmas.json").write_text(json.dumps(lemmas, indent=0))
    subsets = {name: [concepts.wnids[i] for i in concepts.subset(root)] for name, root in cfg.subsets.items()}
    (out / "subsets.json").write_text(json.dumps(subsets, indent=1))
    (out / "concepts.json").write_text(
        json.dumps(
            {
                "classifier": cfg.classifier,
                "template": cfg.template,
                "classes": len(wnids),
                "prototype_dim": int(prototypes.shape[1]),
                "wordnet": cfg.wordnet,
            },
            indent=1,
        )
    )
    return {"classes": len(wnids), "heldout_synsets": len(heldout)} | {
        f"subset_{n}": len(v) for n, v in subsets.items()
    }


def heldout_items(concepts_dir: Path) -> set[str]:
    """The synsets training must not see (the eval classes and their descendants)."""
    return set(pq.read_table(Path(concepts_dir) / "heldout.parquet")["image_id"].to_pylist())


def remove_heldout(texts: Path, concepts_dir: Path, kept_path: Path, out: Path) -> tuple[Path, int]:
    """Split a training corpus by the WordNet relation: texts of a held-out synset go to
    out/heldout_removed.parquet (reason `heldout_synset`), the rest to `kept_path`. Returns
    (kept_path, removed count); in = kept + removed."""
    import pyarrow.compute as pc

    t = pq.read_table(texts)
    held = pc.is_in(t["image_id"], value_set=pa.array(sorted(heldout_items(concepts_dir)), pa.string()))
    removed = t.filter(held)
    removed = removed.append_column("reason", pa.array(["heldout_synset"] * removed.num_rows, pa.string()))
    pq.write_table(removed, out / "heldout_removed.parquet")
    pq.write_table(t.filter(pc.invert(held)), kept_path)
    return kept_path, removed.num_rows


def kept_naming_eval_classes(texts: Path, concepts_dir: Path) -> int:
    """How many kept training texts still name an eval class by one of its lemmas (a whole-word,
    case-insensitive match): leakage the WordNet relation cannot see ("a breed of dog")."""
    import re

    lemmas = json.loads((Path(concepts_dir) / "lemmas.json").read_text())
    words = sorted({x.lower() for ls in lemmas.values() for x in ls if len(x) > 2}, key=len, reverse=True)
    if not words:
        return 0
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b", re.I)
    return sum(1 for x in pq.read_table(texts, columns=["text"])["text"].to_pylist() if pattern.search(x))


def subset_rows(image_dir: Path, ids: list[str], k: int) -> dict[str, list[int]]:
    """name -> row positions in `ids` of each subset the image side defines (none for the
    world) that has more than k items, so a k-NN score on it is defined (a small recipe's
    classes may hold no dog)."""
    f = Path(image_dir) / "subsets.json"
    if not f.is_file():
        return {}
    position = {w: i for i, w in enumerate(ids)}
    subsets = json.loads(f.read_text())
    return {name: [position[w] for w in wnids] for name, wnids in subsets.items() if len(wnids) > k}
