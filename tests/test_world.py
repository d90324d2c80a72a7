"""The synthetic world (platonic_core/world): determinism, renders, and what each kind of
text may say about a scene."""

from __future__ import annotations

import hashlib
import itertools
import json
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
    BACKGROUND_WORDS,
    COLOUR_WORDS,
    NONVISUAL_POOLS,
    SHAPE_WORDS,
    SIZE_WORDS,
    alt_text,
    find_nonvisual,
    misperceive,
    parse_alt_text,
    position_phrase,
)
from platonic.core.world.generate import eval_caption, web_alt_text
from platonic.core.world.scenes import COLOURS, SHAPES, SIZES, Scene, SceneObject, sample_themed_scene, world_laws
from platonic.core.world.streams import STREAM_ALT, STREAM_ALT_WRONG, STREAM_SCENE

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


# ---- the web's damage: non-visual and wrong alt-texts, WIT-like eval captions ------------

# sha256 (16 hex) of the JSON list of texts that the world wrote before the web knobs existed:
# the knobs at 0 must give these texts byte for byte
PINNED_CFG = WorldConfig(n_train=300, n_eval=100, eval_leak=0.1, synonyms=4, templates=4)
PINNED = {"alt": "b951a1ca98c518cf", "eval": "8d16df6abb52b919", "paraphrase": "df939f07c1043b08"}
VISUAL_WORDS = {
    w
    for table in (SHAPE_WORDS, COLOUR_WORDS, SIZE_WORDS, BACKGROUND_WORDS)
    for words in table.values()
    for phrase in words
    for w in phrase.split()
} | {w for p in PHRASE_TO_CELL for w in p.split()} - {"in", "the", "at", "area", "spot", "toward"}


def _digest(texts: list[str]) -> str:
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]


def _texts(cfg: WorldConfig) -> tuple[list[tuple[Scene, int, str]], list[tuple[Scene, int, str]]]:
    """(scene, theme, text) of every training alt-text and eval caption, without renders (no
    leak); test_web_knobs_at_zero_reproduce_the_world checks this is what generate_world writes."""
    laws, alts, evals = world_laws(cfg), [], []
    for i in range(cfg.n_train + cfg.n_eval):
        scene, theme = sample_themed_scene(scene_rng(cfg.seed, i, STREAM_SCENE), cfg, laws)
        if i < cfg.n_train:
            alts.append((scene, theme, web_alt_text(scene, theme, i, cfg)))
        else:
            evals.append((scene, theme, eval_caption(scene, theme, i, cfg)))
    return alts, evals


def test_web_knobs_at_zero_reproduce_the_world(tmp_path):
    cfg = PINNED_CFG.model_copy(update={"alt_nonvisual": 0.0, "alt_wrong": 0.0, "eval_partial": 0.0})
    generate_world(cfg, tmp_path)
    alts = pq.read_table(tmp_path / "alt_texts.parquet")["text"].to_pylist()
    evals = pq.read_table(tmp_path / "eval_captions.parquet")["text"].to_pylist()
    paras = [paraphrase(t, cfg, np.random.default_rng([7, i])) for i, t in enumerate(alts)]
    assert {"alt": _digest(alts), "eval": _digest(evals), "paraphrase": _digest(paras)} == PINNED
    # the helper below writes what generate_world writes (the leak aside)
    no_leak = cfg.model_copy(update={"eval_leak": 0.0})
    generate_world(no_leak, tmp_path / "no_leak")
    alts, evals = _texts(no_leak)
    assert [t for *_, t in alts] == pq.read_table(tmp_path / "no_leak" / "alt_texts.parquet")["text"].to_pylist()
    assert [t for *_, t in evals] == pq.read_table(tmp_path / "no_leak" / "eval_captions.parquet")["text"].to_pylist()


def test_nonvisual_pools_hold_no_attribute_word():
    wordings = [w for pool in NONVISUAL_POOLS for concept in pool for w in concept]
    assert len(set(wordings)) == len(wordings)  # every wording names one concept
    for w in wordings:
        assert not set(w.split()) & VISUAL_WORDS, w
        assert parse_alt_text(w) == ([], None), w
        assert len(find_nonvisual(w)) == 1, w
    # brands, places and events of one theme are not another theme's
    for (a, pa), (b, pb) in itertools.combinations(enumerate(NONVISUAL_POOLS), 2):
        assert not {w for c in pa for w in c} & {w for c in pb for w in c}, (a, b)


def test_every_alt_text_is_nonvisual_at_one_and_the_paraphraser_keeps_only_names():
    cfg = WorldConfig(n_train=300, n_eval=16, eval_leak=0.0, alt_nonvisual=1.0)
    alts, _ = _texts(cfg)
    for n, (_scene, theme, text) in enumerate(alts):
        assert parse_alt_text(text) == ([], None), text
        assert not set(re.findall(r"[\w-]+", text)) & VISUAL_WORDS, text
        concepts = find_nonvisual(text)
        # one or two concepts, all from the scene's theme: the text relates to the scene only
        # through what it is a picture of
        assert 1 <= len(concepts) <= 2 and {t for t, _ in concepts} == {theme % len(NONVISUAL_POOLS)}, text
        out = paraphrase(text, cfg, np.random.default_rng(n))
        assert sorted(find_nonvisual(out)) == sorted(concepts), (text, out)  # re-worded, not lost
        assert not set(re.findall(r"[\w-]+", out)) & VISUAL_WORDS, out  # and nothing visual added
    outs = {paraphrase("velox | city marathon", cfg, np.random.default_rng(s)) for s in range(20)}
    assert len(outs) > 5  # names are re-worded as attribute words are


def test_alt_nonvisual_share_and_the_same_scenes_at_every_dose():
    base = WorldConfig(n_train=2000, n_eval=16, eval_leak=0.0)
    texts = {p: [t for *_, t in _texts(base.model_copy(update={"alt_nonvisual": p}))[0]] for p in (0.0, 0.25, 0.5)}
    nonvisual = {p: {i for i, t in enumerate(ts) if not parse_alt_text(t)[0]} for p, ts in texts.items()}
    assert not nonvisual[0.0]
    for p in (0.25, 0.5):
        assert abs(len(nonvisual[p]) / 2000 - p) < 0.04, (p, len(nonvisual[p]))
        # the others are today's alt-texts, byte for byte
        assert all(texts[p][i] == texts[0.0][i] for i in range(2000) if i not in nonvisual[p])
    assert nonvisual[0.25] < nonvisual[0.5]  # a dose adds non-visual scenes, keeps the previous ones
    assert all(texts[0.25][i] == texts[0.5][i] for i in nonvisual[0.25])


def _attrs(o) -> tuple[str, str, str, int]:
    return SHAPES[o.shape], COLOURS[o.colour], SIZES[o.size], o.cell


def test_alt_wrong_states_wrong_attributes_at_its_rate():
    for p in (0.0, 0.3, 1.0):
        cfg = WorldConfig(n_train=1000, n_eval=16, eval_leak=0.0, alt_wrong=p)
        alts, _ = _texts(cfg)
        changed = total = 0
        for i, (scene, _theme, text) in enumerate(alts):
            wrong = misperceive(scene, cfg, scene_rng(cfg.seed, i, STREAM_ALT_WRONG))
            assert text == alt_text(wrong, cfg, scene_rng(cfg.seed, i, STREAM_ALT))
            assert _match_objects(parse_alt_text(text)[0], wrong), text  # it states the misperceived scene
            for o, w in zip(scene.objects, wrong.objects, strict=True):
                changed += sum(a != b for a, b in zip(_attrs(o), _attrs(w), strict=True))
                total += 4
        if p == 1.0:
            # every attribute is another value: a one-object scene's alt-text describes no object of it
            # (with more objects a wrong one may happen to look like another)
            singles = [(s, t) for s, _, t in alts if len(s.objects) == 1]
            assert changed == total and len(singles) > 100
            assert not any(_match_objects(parse_alt_text(t)[0], s) for s, t in singles)
        else:
            assert abs(changed / total - p) < 0.03, (p, changed / total)


def test_paraphrase_keeps_a_wrong_attribute_and_the_captioner_does_not_see_it():
    scene = Scene((SceneObject(shape=0, colour=0, size=2, cell=0),), background=0)  # a large red circle, top left
    cfg = WorldConfig(alt_wrong=1.0, alt_attribute_drop=0.0, synonyms=4, templates=4)
    wrong = misperceive(scene, cfg, np.random.default_rng(0))
    alt = alt_text(wrong, cfg, np.random.default_rng(1))
    (stated,), _ = parse_alt_text(alt)
    assert stated["shape"] != "circle" and stated["colour"] != "red" and stated["size"] != "large", alt
    for s in range(10):
        out = paraphrase(alt, cfg, np.random.default_rng(s))
        assert _signature(parse_alt_text(out)[0]) == _signature([stated]), (alt, out)  # faithful to the text
    # the captioner sees the scene: what it writes does not depend on any web knob
    (recap,) = {recaption(scene, cfg.model_copy(update=k), np.random.default_rng(3)) for k in ({}, {"alt_wrong": 0.0})}
    assert _count_words(recap, COLOUR_WORDS["red"]) == 1 and _count_words(recap, SHAPE_WORDS["circle"]) == 1, recap


def test_web_knobs_leave_scenes_renders_and_recaptions_unchanged(world, tmp_path):
    from platonic.core.positives.world_backend import WorldGenerator

    knobs = {"alt_nonvisual": 1.0, "alt_wrong": 1.0, "eval_partial": 1.0, "eval_nonvisual": 1.0}
    cfg = CFG.model_copy(update=knobs)
    generate_world(cfg, tmp_path)
    for f in ("scenes.parquet", "renders.npy"):
        assert (tmp_path / f).read_bytes() == (world / f).read_bytes(), f
    ids = pq.read_table(world / "scenes.parquet")["scene_id"].to_pylist()
    before = WorldGenerator(world, CFG).recaption(ids, 0)
    assert WorldGenerator(tmp_path, cfg).recaption(ids, 0) == before
    assert pq.read_table(tmp_path / "alt_texts.parquet")["text"].to_pylist() != (
        pq.read_table(world / "alt_texts.parquet")["text"].to_pylist()
    )


def test_eval_partial_drops_and_eval_nonvisual_adds_context():
    cfg = WorldConfig(n_train=16, n_eval=400, eval_leak=0.0, synonyms=4, templates=4)
    _, complete = _texts(cfg)
    _, partial = _texts(cfg.model_copy(update={"eval_partial": 1.0}))
    dropped = 0
    for (scene, _theme, full), (_, _, part) in zip(complete, partial, strict=True):
        assert part != full or len(scene.objects) == 1
        for table, names, attr in (
            (SHAPE_WORDS, SHAPES, "shape"),
            (COLOUR_WORDS, COLOURS, "colour"),
            (SIZE_WORDS, SIZES, "size"),
        ):
            want = Counter(names[getattr(o, attr)] for o in scene.objects)
            for name, words in table.items():
                got = _count_words(part, words)
                assert got <= want.get(name, 0), (part, scene)  # never a wrong or extra attribute
                dropped += want.get(name, 0) - got
        assert not find_nonvisual(part)
    assert dropped > 200  # partial: objects and attributes are missing
    _, half = _texts(cfg.model_copy(update={"eval_partial": 0.5}))
    same = sum(h == c for (*_, h), (*_, c) in zip(half, complete, strict=True))
    assert 150 < same < 280  # about half are the complete captions, unchanged (1-object scenes may coincide)

    _, context = _texts(cfg.model_copy(update={"eval_nonvisual": 1.0}))
    for (_scene, theme, full), (_, _, ctx) in zip(complete, context, strict=True):
        concepts = find_nonvisual(ctx)
        assert 1 <= len(concepts) <= 2 and {t for t, _ in concepts} == {theme % len(NONVISUAL_POOLS)}, ctx
        assert full.rstrip(".") in ctx  # the complete caption is still there, context added


@pytest.mark.parametrize("key", ["alt_nonvisual", "alt_wrong", "eval_partial", "eval_nonvisual"])
def test_web_knobs_are_shares(key):
    from platonic.core.config import ConfigError, load_config

    assert getattr(WorldConfig(), key) == 0.0
    for bad in ("1.5", "-0.1"):
        with pytest.raises(ConfigError) as e:
            load_config(None, [f"world.{key}={bad}"])
        msg = str(e.value)
        assert f"'world.{key}'" in msg and ("less than or equal to 1" in msg or "greater than or equal to 0" in msg)
        assert f"(got {float(bad)!r})" in msg or f"(got {bad})" in msg, msg
    assert load_config(None, [f"world.{key}=1"]).world.model_dump()[key] == 1.0


def test_text_knobs_leave_the_renders_so_the_image_encoder_is_a_cache_hit(world, tmp_path):
    """An alt-text sweep (alt_nonvisual, alt_wrong, eval_leak) rewrites texts only: the files the
    image model's train and embed read are byte-identical, so their cache keys are equal while
    the world's own digest (and a text model's key) moves."""
    from platonic.core.artifacts import ArtifactStore, Manifest
    from platonic.core.config import load_config
    from platonic.core.contract import StageInstance, cache_key, input_digests
    from platonic.core.stages import spec_of

    web = WorldConfig(n_train=64, n_eval=32, eval_leak=0.2, alt_nonvisual=0.5, alt_wrong=0.3)
    generate_world(web, tmp_path / "web")
    for f in ("scenes.parquet", "renders.npy"):
        assert (tmp_path / "web" / f).read_bytes() == (world / f).read_bytes(), f
    assert folder_digest(tmp_path / "web") != folder_digest(world)

    store = ArtifactStore(tmp_path / "store")
    cfg = load_config("tiny")

    def keys(folder: Path) -> dict[str, str]:
        staged = store.staging("world", folder.name)
        for f in folder.iterdir():
            (staged / f.name).write_bytes(f.read_bytes())
        m = Manifest("world", 1, folder.name, "", "", {}, {}, {}, {}, {})
        m = store.commit(staged, m)
        out = {}
        for inst in (StageInstance("train", "image"), StageInstance("embed", "image"), StageInstance("train", "good")):
            spec = spec_of(inst)
            role = "data" if inst.stage == "train" else "eval"
            out[inst.id] = cache_key(spec, inst, cfg, input_digests(spec, inst, cfg, {"world": m}, {role: "world"}))
        return out

    plain, web_keys = keys(world), keys(tmp_path / "web")
    assert plain["train:image"] == web_keys["train:image"]
    assert plain["embed:image"] == web_keys["embed:image"]
    assert plain["train:good"] != web_keys["train:good"]  # a text model's data is the whole input
