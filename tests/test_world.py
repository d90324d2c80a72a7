"""The synthetic world (platonic_core/world): determinism, renders, and what each kind of
text may say about a scene."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from platonic.core.artifacts import folder_digest
from platonic.core.config import WorldConfig
from platonic.core.world import generate_world, load_scenes, paraphrase, recaption, scene_rng
from platonic.core.world.captions import (
    COLOUR_WORDS,
    SHAPE_WORDS,
    SIZE_WORDS,
    parse_alt_text,
    position_phrase,
)
from platonic.core.world.scenes import COLOURS, SHAPES, SIZES

CFG = WorldConfig(n_train=64, n_eval=32, eval_leak=0.0)  # leak tested on its own below
# every position wording the grammar can produce on a 3x3 grid -> its cell
PHRASE_TO_CELL = {position_phrase(c, 3, v): c for c in range(9) for v in range(4)}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("world")
    generate_world(CFG, out)
    return out


def _count_words(text: str, words: list[str]) -> int:
    """Occurrences of any of `words` as whole words (hyphens count as word characters)."""
    alt = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return len(re.findall(rf"(?<![\w-])(?:{alt})(?![\w-])", text))


# ---- generation --------------------------------------------------------------------------


def test_world_is_deterministic_and_seeded(world, tmp_path):
    counts = generate_world(CFG, tmp_path / "again")
    assert counts == {"scenes": 96, "train_scenes": 64, "eval_scenes": 32, "renders": 192, "eval_captions_leaked": 0}
    assert folder_digest(tmp_path / "again") == folder_digest(world)
    for f in ("scenes.parquet", "renders.npy", "alt_texts.parquet", "eval_captions.parquet"):
        assert (tmp_path / "again" / f).read_bytes() == (world / f).read_bytes(), f
    generate_world(WorldConfig(n_train=64, n_eval=32, seed=1, eval_leak=0.0), tmp_path / "other")
    assert folder_digest(tmp_path / "other") != folder_digest(world)
    assert not np.array_equal(np.load(tmp_path / "other" / "renders.npy"), np.load(world / "renders.npy"))
    other_alt = pq.read_table(tmp_path / "other" / "alt_texts.parquet")["text"].to_pylist()
    assert other_alt != pq.read_table(world / "alt_texts.parquet")["text"].to_pylist()


def test_files_and_renders(world):
    renders = np.load(world / "renders.npy")
    assert renders.shape == (96, CFG.renders_per_scene, CFG.image_size, CFG.image_size, 3)
    assert renders.dtype == np.uint8
    assert renders.min() < 40 and renders.max() > 200  # dark background and bright objects
    # two renders of one scene are two different observations of it, but close
    a, b = renders[:, 0].astype(int), renders[:, 1].astype(int)
    assert (a != b).any(axis=(1, 2, 3)).all()
    assert np.abs(a - b).mean() < np.abs(a - np.roll(a, 1, axis=0)).mean()

    scenes = pq.read_table(world / "scenes.parquet").to_pydict()
    assert scenes["split"] == ["train"] * 64 + ["eval"] * 32
    assert scenes["render_row"] == list(range(96))
    assert len(set(scenes["scene_id"])) == 96
    alt = pq.read_table(world / "alt_texts.parquet").to_pydict()
    ev = pq.read_table(world / "eval_captions.parquet").to_pydict()
    assert alt["scene_id"] == scenes["scene_id"][:64]
    assert ev["scene_id"] == scenes["scene_id"][64:]
    assert all(t.strip() for t in alt["text"] + ev["text"])


def test_scenes_respect_the_config(world):
    for _sid, (_i, scene, _split) in load_scenes(world).items():
        assert CFG.min_objects <= len(scene.objects) <= CFG.max_objects
        cells = [o.cell for o in scene.objects]
        assert len(set(cells)) == len(cells) and all(0 <= c < CFG.grid**2 for c in cells)


# ---- captions ----------------------------------------------------------------------------


def test_recaption_mentions_every_object(world):
    cfg = WorldConfig(n_train=64, n_eval=32, synonyms=3, templates=4)
    for sid, (i, scene, _split) in load_scenes(world).items():
        for extra in range(3):
            text = recaption(scene, cfg, scene_rng(cfg.seed, i, 10, extra))
            # each attribute value occurs exactly as often as objects carry it, in one of the
            # first `synonyms` wordings
            for table, names, attr in (
                (SHAPE_WORDS, SHAPES, "shape"),
                (COLOUR_WORDS, COLOURS, "colour"),
                (SIZE_WORDS, SIZES, "size"),
            ):
                want = Counter(names[getattr(o, attr)] for o in scene.objects)
                for name, words in table.items():
                    got = _count_words(text, words[: cfg.synonyms])
                    assert got == want.get(name, 0), (sid, text, attr, name)
                    assert _count_words(text, words[cfg.synonyms :]) == 0, (text, words)


def _match_objects(parsed: list[dict], scene) -> bool:
    """Can every parsed object be assigned to a distinct scene object that agrees with each
    attribute the text states?"""

    def agrees(p, o) -> bool:
        return (
            p["shape"] == SHAPES[o.shape]
            and p["colour"] in (None, COLOURS[o.colour])
            and p["size"] in (None, SIZES[o.size])
            and (p["pos"] is None or PHRASE_TO_CELL[p["pos"]] == o.cell)
        )

    return any(
        all(agrees(p, o) for p, o in zip(parsed, perm, strict=False))
        for perm in itertools.permutations(scene.objects, len(parsed))
    )


def test_alt_text_only_mentions_objects_of_its_scene(world):
    scenes = load_scenes(world)
    alt = pq.read_table(world / "alt_texts.parquet").to_pydict()
    n_dropped_attr = 0
    for sid, text in zip(alt["scene_id"], alt["text"], strict=True):
        _i, scene, split = scenes[sid]
        assert split == "train"
        objs, bg = parse_alt_text(text)
        assert 1 <= len(objs) <= len(scene.objects), text
        assert _match_objects(objs, scene), (text, scene)
        if bg is not None:
            assert bg == ["dark", "grey"][scene.background]
        n_dropped_attr += sum(o[a] is None for o in objs for a in ("colour", "size", "pos"))
    assert n_dropped_attr > 0  # alt-texts are partial: the check above was not vacuous
    # and an alt-text does not match some other scene in general
    first = parse_alt_text(alt["text"][0])[0]
    assert not all(_match_objects(first, scenes[s][1]) for s in alt["scene_id"])


HAND_ALT_TEXTS = [
    "circle",
    "red circle",
    "small circle",
    "circle in the top left",
    "large blue square in the middle",
    "tiny ring on dark background",
    "stock photo emerald wedge in the bottom right | img_1234.jpg",
    "medium plus sign and navy hoop in the right",
    "small kite in the top and large kite",
    "crimson pillar and dash",
    "huge flat stripe in the left on grey background | buy now",
]


def _signature(objs: list[dict]) -> list[tuple]:
    # as sortable strings: None -> "-", a position -> its cell
    return sorted(
        (o["shape"], o["colour"] or "-", o["size"] or "-", "-" if o["pos"] is None else str(PHRASE_TO_CELL[o["pos"]]))
        for o in objs
    )


def test_paraphrase_never_adds_an_attribute(world):
    # max nuisance: every template and synonym
    cfg = WorldConfig(n_train=64, n_eval=32, synonyms=4, templates=4)
    generated = pq.read_table(world / "alt_texts.parquet")["text"].to_pylist()
    # the parser splits objects on " and ", which paraphrases with 3+ objects do not use
    # ("a, b and c"), so only alt-texts with at most 2 objects can be checked this way
    alts = HAND_ALT_TEXTS + [t for t in generated if len(parse_alt_text(t)[0]) <= 2]
    assert len(alts) > 40
    none_pattern_seen = set()
    for n, text in enumerate(alts):
        src = parse_alt_text(text)[0]
        assert src, text
        for extra in range(4):
            out = paraphrase(text, cfg, np.random.default_rng([n, extra]))
            got = parse_alt_text(out)[0]
            # same objects, same attribute values, and None exactly where the alt-text has None
            assert _signature(got) == _signature(src), (text, out)
        none_pattern_seen |= {tuple(o[a] is None for a in ("colour", "size", "pos")) for o in src}
    assert len(none_pattern_seen) >= 6  # many combinations of dropped attributes exercised


def test_paraphrase_rewords(world):
    cfg = WorldConfig(n_train=64, n_eval=32, synonyms=4, templates=4)
    text = "large blue square in the middle"
    outs = {paraphrase(text, cfg, np.random.default_rng(s)) for s in range(20)}
    assert len(outs) > 5  # nuisance: different wordings of the same content
    assert text not in outs


def test_eval_leak_plants_web_copies_that_exact_dedup_finds(tmp_path):
    from platonic.core.dedup import normalize_text

    cfg = WorldConfig(n_train=400, n_eval=100, eval_leak=0.1)
    counts = generate_world(cfg, tmp_path)
    assert counts["eval_captions_leaked"] == 10
    alts = pq.read_table(tmp_path / "alt_texts.parquet")["text"].to_pylist()
    evals = pq.read_table(tmp_path / "eval_captions.parquet")["text"].to_pylist()
    assert len(set(alts) & set(evals)) < 10  # the copies are not byte-identical (web variants)...
    norm_eval = {normalize_text(e) for e in evals}
    assert sum(normalize_text(a) in norm_eval for a in alts) == 10  # ...but equal after normalisation
