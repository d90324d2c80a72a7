"""Captioning through one map, piece by piece (platonic_core/caption): the pair-free rotation,
the maps, the text-only decoder, the scorer (Java), the world's references, the recipes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from platonic.core.config import CaptionConfig, CaptionMapsConfig, ConfigError, DecoderConfig, PairFreeConfig

ROOT = Path(__file__).resolve().parents[1]
java = pytest.mark.skipif(shutil.which("java") is None, reason="pycocoevalcap's PTB tokenizer and METEOR need Java")


def skewed_cloud(n: int, d: int, seed: int) -> np.ndarray:
    """Points with distinct variances along d axes and skewed distributions (a world where
    the pair-free assumptions hold), in a random orientation."""
    rng = np.random.default_rng(seed)
    z = rng.gamma(2.0, 1.0, (n, d)) * np.linspace(2.0, 0.5, d)  # (n, d)
    return z @ np.linalg.qr(rng.standard_normal((d, d)))[0]


def test_pairfree_finds_the_rotation_between_disjoint_samples_of_isometric_clouds():
    from platonic.core.caption.pairfree import fit_pairfree
    from platonic.core.retrieval import recall_at_k

    x = skewed_cloud(2400, 12, 0)
    rot = np.linalg.qr(np.random.default_rng(1).standard_normal((12, 12)))[0]
    y = x @ rot + 0.01 * np.random.default_rng(2).standard_normal(x.shape)
    # images of the first half, captions of the second: no row of one has its partner in the other
    m, info = fit_pairfree(x[:1200], y[1200:], PairFreeConfig(dim=12, points=400), seed=0)
    held = np.arange(200)
    r1 = recall_at_k(m.predict(x[:200]), y[:200], held, held, ks=(1,))[1]
    assert r1 > 0.9, info
    assert info["cost_per_sweep"][-1] <= info["cost_per_sweep"][0]
    # a wrong map (another rotation) gets nowhere: the score is not a property of the data alone
    wrong = np.linalg.qr(np.random.default_rng(3).standard_normal((12, 12)))[0]
    assert recall_at_k(x[:200] @ wrong, y[:200], held, held, ks=(1,))[1] < 0.2


def test_linear_maps_predict_in_the_target_space_and_nest_their_pair_subsets(tmp_path):
    from platonic.core.caption.maps import fit_maps, load_maps, map_names, save_maps

    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6))
    a, b = rng.standard_normal((6, 4)), rng.standard_normal(4)
    y = x @ a + b  # an exact affine relation
    cfg = CaptionMapsConfig(n_pairs=[10, "all"], ridge=0.0, pairfree=PairFreeConfig(dim=4, points=50, iterations=2))
    maps, info = fit_maps(x, y, cfg, seed=0)
    assert (
        sorted(maps)
        == sorted(map_names(cfg))
        == sorted(["lstsq@10", "lstsq@all", "procrustes@10", "procrustes@all", "pairfree"])
    )
    assert info["lstsq@10"]["pairs"] == 10 and info["lstsq@all"]["pairs"] == 300 and info["pairfree"]["pairs"] == 0
    np.testing.assert_allclose(maps["lstsq@all"].predict(x[:5]), y[:5], atol=1e-6)  # back in Y's own units
    assert maps["procrustes@all"].predict(x[:5]).shape == (5, 4)
    save_maps({0: maps}, {"0": info}, tmp_path)
    again = load_maps(tmp_path)[0]
    for name, m in maps.items():
        np.testing.assert_allclose(again[name].predict(x[:3]), m.predict(x[:3]))


def test_the_text_only_decoder_writes_back_the_caption_its_embedding_came_from(tmp_path):
    import torch

    from platonic.core.caption.decoder import generate, load_decoder, train_decoder

    torch.set_num_threads(1)
    texts = [
        "a red circle on a dark background.",
        "a blue square in the top left-hand area.",
        "two green rings at the centre.",
        "a small yellow cross on a grey background.",
    ]
    cond = np.eye(4, dtype=np.float32) * 3  # one embedding per caption
    cfg = DecoderConfig(
        width=32, layers=1, heads=2, prefix_len=2, noise=0.0, steps=120, batch_size=8, lr=3e-3, heldout=0
    )
    summary = train_decoder(cond, texts, cfg, seed=0, out=tmp_path / "dec")
    assert summary["kept_step"] == summary["steps"] == 120 and summary["heldout_loss"] is None  # nothing held out
    assert summary["final_loss"] < summary["first_loss"] / 4
    model, tok = load_decoder(tmp_path / "dec", "cpu")
    got = generate(model, tok, cond, max_new_tokens=16)
    norm = [t.replace(" .", ".").replace(" ,", ",") for t in got]
    assert sum(g == t for g, t in zip(norm, texts, strict=True)) >= 3, got
    assert "left-hand" in got[1]  # word-level captions rejoin their hyphens
    assert not any((tmp_path / "dec").rglob("*.bin")) and (tmp_path / "dec" / "lm" / "model.safetensors").is_file()


def test_early_stopping_keeps_the_lowest_heldout_loss_and_stops_after_patience():
    from platonic.core.caption.decoder import EarlyStopping

    stop = EarlyStopping(patience=2)
    kept = []
    for step, loss in [(100, 5.0), (200, 4.0), (300, 3.0), (400, 3.2), (500, 2.9), (600, 3.1), (700, 3.0)]:
        assert not stop.stop
        stop.update(step, loss, lambda s=step: kept.append(s) or {"step": s})
    # 500 is the best; 600 and 700 do not improve on it: patience 2 is spent
    assert stop.stop and stop.best_step == 500 and stop.best_loss == 2.9 and stop.best_state == {"step": 500}
    assert kept == [100, 200, 300, 500]  # weights copied only when a step is the best so far
    never = EarlyStopping(patience=None)
    for step, loss in enumerate([1.0, 2.0, 3.0, 4.0]):
        never.update(step, loss)
    assert not never.stop and never.best_step == 0


def test_heldout_split_keeps_an_image_s_captions_together_and_is_the_same_for_every_seed():
    from platonic.core.caption.decoder import heldout_split

    groups = [f"s{k // 3}" for k in range(300)]  # 100 images, 3 captions each
    train, held = heldout_split(groups, 0.1)
    assert len(held) == 30 and len(train) == 270 and not set(train) & set(held)
    assert not {groups[k] for k in train} & {groups[k] for k in held}
    assert all(np.array_equal(a, b) for a, b in zip(heldout_split(groups, 0.1), (train, held), strict=True))
    assert len(heldout_split(groups, 0)[1]) == 0
    assert len(set(np.asarray(["a", "b", "c"])[heldout_split(["a", "b", "c"], 0.1)[1]])) == 1  # at least one image
    with pytest.raises(ValueError, match="decoder.heldout 0.1: 1 images cannot be split"):
        heldout_split(["a", "a"], 0.1)


def test_the_decoder_saved_is_the_one_with_the_lowest_heldout_loss(tmp_path):
    """Trained far past its best on 6 captions (a high learning rate, no noise), the decoder
    overfits; the one saved is the measured best, not the last."""
    import torch

    from platonic.core.caption.decoder import encode_captions, heldout_loss, load_decoder, train_decoder

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    colours, shapes = ["red", "blue", "green", "white"], ["circle", "square", "ring", "cross"]
    texts = [f"a {colours[k % 4]} {shapes[(k // 4) % 4]} on a dark background." for k in range(16)]
    groups = [f"s{k}" for k in range(16)]
    cond = rng.standard_normal((16, 8)).astype(np.float32)  # unrelated to the text: nothing generalises
    cfg = DecoderConfig(width=32, layers=1, heads=2, prefix_len=2, noise=0.0, steps=60, batch_size=8, lr=1e-2,
                        heldout=0.25, eval_every=5, patience=None)  # fmt: skip
    summary = train_decoder(cond, texts, cfg, seed=0, out=tmp_path / "dec", groups=groups)
    curve = summary["heldout_curve"]
    assert [s for s, _ in curve] == list(range(5, 61, 5)) and summary["heldout_texts"] == 4
    best_step, best = min(curve, key=lambda p: p[1])
    assert summary["kept_step"] == best_step and summary["heldout_loss"] == best
    model, tok = load_decoder(tmp_path / "dec", "cpu")
    from platonic.core.caption.decoder import heldout_split

    _, held = heldout_split(groups, 0.25)
    ids, mask = encode_captions(tok, [texts[k] for k in held], cfg.max_len)
    again = heldout_loss(model, torch.from_numpy(cond[held]), ids, mask, 8)
    assert again == pytest.approx(best, rel=1e-4)
    assert best < curve[-1][1]  # it overfitted: the last step would have been the wrong one to keep


def test_the_retrieval_baseline_answers_with_a_training_caption():
    from platonic.core.caption.evaluate import nearest_captions

    rng = np.random.default_rng(0)
    bank = rng.standard_normal((50, 16))
    texts = [f"caption {k}" for k in range(50)]
    query = 3.0 * bank[[7, 3, 42]] + 0.01 * rng.standard_normal((3, 16))  # scale does not matter: cosine
    assert nearest_captions(query, bank, texts, chunk=2) == ["caption 7", "caption 3", "caption 42"]
    got = nearest_captions(rng.standard_normal((20, 16)), bank, texts)
    assert len(got) == 20 and set(got) <= set(texts)
    with pytest.raises(ValueError, match="50 embeddings for 49 texts"):
        nearest_captions(query, bank, texts[:-1])


def test_attribute_precision_and_recall_per_kind_on_captions_with_known_answers():
    from platonic.core.caption.attributes import attribute_scores
    from platonic.core.world.captions import mentioned_attributes

    truth = {
        "a": {"shape": ["circle", "cross"], "colour": ["red", "blue"], "size": ["small", "large"],
              "position": [0, 8], "count": 2, "background": ["dark"]},
        "b": {"shape": ["ring"], "colour": ["green"], "size": ["medium"], "position": [4], "count": 1,
              "background": ["grey"]},
    }  # fmt: skip
    said = mentioned_attributes("a tiny crimson disc in the top left and one big plus sign in navy at the lower right")
    assert said == {"shape": ["circle", "cross"], "colour": ["red", "blue"], "size": ["small", "large"],
                    "position": [0, 8], "count": 2, "background": []}  # fmt: skip
    perfect = {
        "a": "a small red circle in the top left and a large blue cross at the lower right on a black background.",
        "b": "on a silver background: a green hoop, mid-sized, dead centre.",
    }
    s = attribute_scores(perfect, truth)
    assert all(
        s[f"{k} {m}"] == 1.0 for k in ("shape", "colour", "size", "position", "count", "background") for m in "PR"
    )
    # the failure the issue saw: the same wrong shape written three times
    wrong = {
        "a": "a small red plus, a small red plus and a small red plus on a dark background.",
        "b": "a green ring in the middle on a dark background.",
    }
    s = attribute_scores(wrong, truth)
    assert s["shape P"] == pytest.approx(2 / 4) and s["shape R"] == pytest.approx(2 / 3)  # one cross, one ring
    assert s["colour P"] == pytest.approx(2 / 4) and s["colour R"] == pytest.approx(2 / 3)
    assert s["size P"] == pytest.approx(1 / 3) and s["size R"] == pytest.approx(1 / 3)
    assert s["count P"] == pytest.approx(3 / 4) and s["count R"] == pytest.approx(1.0)
    assert s["position P"] == 1.0 and s["position R"] == pytest.approx(1 / 3)
    assert s["background P"] == 0.5 and s["background R"] == 0.5
    assert "position P" not in attribute_scores({"b": "a green ring."}, truth)  # nothing stated: no precision


def test_missing_java_is_one_clear_line(monkeypatch):
    from platonic.core.caption import score

    monkeypatch.setattr(score.shutil, "which", lambda name: None)
    with pytest.raises(score.MissingJava, match="java not found on PATH") as e:
        score.require_java()
    assert "\n" not in str(e.value)


@java
def test_scores_match_the_literature_s_scale_and_a_caption_from_its_own_embedding_is_scored_without_it():
    from platonic.core.caption.score import score_systems

    refs = {
        "1": ["a red circle on a dark background.", "a crimson disc on a black background."],
        "2": ["a blue square in the top left.", "a navy box at the upper left."],
        "3": ["a small green ring in the middle.", "a tiny emerald hoop at the centre."],
    }
    systems = {
        "copy": {i: r[0] for i, r in refs.items()},  # a reference itself: near-perfect against itself
        "wrong": {"1": refs["2"][0], "2": refs["3"][0], "3": refs["1"][0]},
        "text_embedding": {i: r[0] for i, r in refs.items()},
    }
    own = {"text_embedding": {i: r[1:] for i, r in refs.items()}}  # not scored against the caption it came from
    s = score_systems(refs, systems, ["bleu", "rouge", "cider"], own)  # METEOR: test_caption_flow.py
    assert set(s["copy"]) == {"BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr-D"}
    assert s["copy"]["BLEU-4"] > 90 and s["copy"]["ROUGE-L"] > 90
    assert s["wrong"]["CIDEr-D"] < s["text_embedding"]["CIDEr-D"] < s["copy"]["CIDEr-D"]
    assert s["text_embedding"]["BLEU-4"] < 90


def test_world_references_are_complete_distinct_and_reproducible():
    from platonic.core.config import WorldConfig
    from platonic.core.world import more_captions, sample_scene, scene_rng, world_laws
    from platonic.core.world.captions import COLOUR_WORDS
    from platonic.core.world.scenes import COLOURS

    cfg = WorldConfig()
    scene = sample_scene(scene_rng(0, 7, 0), cfg, world_laws(cfg))
    refs = more_captions(scene, 7, cfg, 4)
    assert refs == more_captions(scene, 7, cfg, 4) and len(set(refs)) == 4
    assert more_captions(scene, 7, cfg, 2, first=3) == refs[2:]
    for r in refs:  # complete: every object's colour is named, and the background
        assert r.endswith("background.")
        for o in scene.objects:
            assert any(w in r for w in COLOUR_WORDS[COLOURS[o.colour]])


def test_references_are_grouped_per_image_in_reference_order(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from platonic.core.caption.data import read_references

    rows = [("e2", 1, "e2 b"), ("e1", 2, "e1 c"), ("e2", 0, "e2 a"), ("e1", 0, "e1 a"), ("e1", 1, "e1 b")]
    pq.write_table(
        pa.table(
            {
                "image_id": [r[0] for r in rows],
                "ref_index": pa.array([r[1] for r in rows], pa.int32()),
                "text": [r[2] for r in rows],
            }
        ),
        tmp_path / "references.parquet",
    )
    refs = read_references(tmp_path)
    assert refs == {"e2": ["e2 a", "e2 b"], "e1": ["e1 a", "e1 b", "e1 c"]} and list(refs) == ["e2", "e1"]


def test_caption_recipes_validate_with_one_line_errors(tmp_path):
    from platonic.core.caption.recipe import load_caption, pipeline_needs

    cfg, base = load_caption(ROOT / "configs" / "caption_world.yaml")
    assert base is not None and base.out_dir == cfg.out_dir and base.train.threads == 1
    assert pipeline_needs(cfg, base) == ["world", "dedup", "train:image", "train:good", "train:ntp", "train:bad"]
    coco, no_base = load_caption(ROOT / "configs" / "caption_coco.yaml")
    assert no_base is None and coco.data.source == "karpathy" and coco.decoder.source == "hf"
    with pytest.raises(ConfigError, match=r"text_encoders.good.id 'image' is a image_jepa, not a text model"):
        load_caption(ROOT / "configs" / "caption_world.yaml", ["text_encoders.good.id=image"])
    with pytest.raises(ConfigError, match=r"image_encoder.id 'nope' is not a model of the base recipe"):
        load_caption(ROOT / "configs" / "caption_world.yaml", ["image_encoder.id=nope"])
    with pytest.raises(ConfigError, match=r"'data': Value error|data.source karpathy needs data.pairs"):
        load_caption(ROOT / "configs" / "caption_world.yaml", ["data.source=karpathy"])
    with pytest.raises(ConfigError, match="unknown key 'maps.pairs'"):
        load_caption(ROOT / "configs" / "caption_world.yaml", ["maps.pairs=3"])
    with pytest.raises(ValueError, match="needs a base pipeline recipe"):
        CaptionConfig(base=None)
    with pytest.raises(ValueError, match="decoder.source hf needs decoder.id"):
        DecoderConfig(source="hf")


def test_the_caption_command_says_in_one_line_what_is_missing(monkeypatch):
    from typer.testing import CliRunner

    from platonic.core.caption import score
    from platonic.flows.cli import app

    recipe = str(ROOT / "configs" / "caption_tiny.yaml")
    runner = CliRunner()
    bad = runner.invoke(app, ["caption", recipe, "--force", "caption_nope"])
    assert bad.exit_code == 2 and "--force 'caption_nope': not a caption stage" in bad.output
    monkeypatch.setattr(score.shutil, "which", lambda name: None)
    res = runner.invoke(app, ["caption", recipe])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        "error: java not found on PATH: captions are scored with pycocoevalcap, whose PTB tokenizer and METEOR "
        "run on Java (install a JRE, e.g. `apt-get install default-jre-headless`)"
    ]
