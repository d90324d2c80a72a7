"""Does a caption state the scene's attributes? Precision and recall per kind (world only).

CIDEr-D rewards n-grams, and on the world's small vocabulary a caption can score by getting the
count, the sizes and the background right while naming the wrong shapes. Here each generated
caption is read back with the world's own grammar (world/captions.py `mentioned_attributes`)
and compared with its scene's true attributes, per kind: shape, colour, size, position (cell),
count (objects, one per shape mention) and background.

Per kind, as bags (multisets, not bound to objects): matched = the values both the caption
and the scene have (with multiplicity), precision = Σ matched / Σ stated, recall = Σ matched
/ Σ true, summed over the eval images (micro averages). For count, stated and true are the
numbers of objects and matched their minimum. A true caption of the scene scores 1 / 1; the
floors (shuffled images, the most frequent caption) say what chance co-occurrence gives.

    attributes.parquet (caption_data, world only): image_id, shape, colour, size, position
    (lists, one entry per object; position on the 3x3 grid), background
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..world.captions import mentioned_attributes

KINDS = ("shape", "colour", "size", "position", "count", "background")
LIST_KINDS = ("shape", "colour", "size", "position")


def write_attributes(truth: dict[str, dict[str, list]], path: Path) -> None:
    """image id -> its scene's attributes (world/captions.py `scene_attributes`)."""
    ids = list(truth)
    cols = {"image_id": ids} | {k: [truth[i][k] for i in ids] for k in LIST_KINDS}
    cols["background"] = [truth[i]["background"][0] for i in ids]
    pq.write_table(pa.table(cols), path)


def read_attributes(path: Path) -> dict[str, dict[str, list]]:
    t = pq.read_table(path).to_pydict()
    out = {}
    for k, i in enumerate(t["image_id"]):
        a = {kind: list(t[kind][k]) for kind in LIST_KINDS}
        out[i] = a | {"count": len(a["shape"]), "background": [t["background"][k]]}
    return out


def attribute_scores(captions: dict[str, str], truth: dict[str, dict[str, list]]) -> dict[str, float]:
    """`<kind> P` and `<kind> R` over the captioned images (see the module doc); a kind no
    caption states has no precision (left out)."""
    stated, true, matched = Counter(), Counter(), Counter()
    for i, text in captions.items():
        said, real = mentioned_attributes(text), truth[i]
        for kind in KINDS:
            if kind == "count":
                s, r, m = said[kind], real[kind], min(said[kind], real[kind])
            else:
                s, r = len(said[kind]), len(real[kind])
                m = sum((Counter(map(str, said[kind])) & Counter(map(str, real[kind]))).values())
            stated[kind], true[kind], matched[kind] = stated[kind] + s, true[kind] + r, matched[kind] + m
    out: dict[str, float] = {}
    for kind in KINDS:
        if stated[kind]:
            out[f"{kind} P"] = matched[kind] / stated[kind]
        if true[kind]:
            out[f"{kind} R"] = matched[kind] / true[kind]
    return out
