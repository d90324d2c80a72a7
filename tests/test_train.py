"""The training loop, samplers, masking, schedule and checkpoints on tiny data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from platonic.core.config import ModelConfig, OptimConfig
from platonic.core.features import text_layer_features
from platonic.core.models import build_model, load_checkpoint, save_checkpoint
from platonic.core.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, encode, train_tokenizer
from platonic.core.train import ImageData, TextData, lr_at, make_sampler, mask_tokens, train_model

TEXTS = [
    f"a {s} {c} {sh} in the {p}."
    for s in ("small", "big")
    for c in ("red", "blue", "green")
    for sh in ("circle", "square")
    for p in ("top", "bottom left", "middle")
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS, 100)


def test_mask_tokens_spares_specials_and_hits_the_rate(tok):
    ids, _ = encode(tok, TEXTS * 20, 32)
    g = torch.Generator().manual_seed(0)
    out = mask_tokens(ids, 0.3, 1, g)
    special = (ids == PAD_ID) | (ids == CLS_ID) | (ids == SEP_ID)
    assert torch.equal(out[special], ids[special])  # specials and padding never masked
    rate = (out == MASK_ID)[~special].float().mean().item()
    assert 0.25 < rate < 0.35, rate
    spans = mask_tokens(ids, 0.3, 3, torch.Generator().manual_seed(0))
    # with span 3, masked tokens come in runs: most masked tokens have a masked neighbour
    m = spans == MASK_ID
    neighbour = torch.zeros_like(m)
    neighbour[:, 1:] |= m[:, :-1]
    neighbour[:, :-1] |= m[:, 1:]
    assert neighbour[m].float().mean() > 0.8


def test_good_view_sampler_draws_distinct_texts_of_one_image(tok):
    ids, mask = encode(tok, TEXTS, 32)
    groups = [np.arange(i, i + 3) for i in range(0, 36, 3)]
    cfg = ModelConfig(kind="text_jepa", views="good", batch_size=8, n_views=3, width=16, heads=2)
    batch = make_sampler(cfg, TextData(ids, mask, groups), seed=0)()
    v, n, _ = batch["input_ids"].shape
    assert (v, n) == (3, 8)
    rows = {tuple(r.tolist()): i for i, r in enumerate(ids[:, : batch["input_ids"].shape[2]])}
    for j in range(n):
        found = [rows[tuple(batch["input_ids"][k, j].tolist())] for k in range(v)]
        assert len(set(found)) == 3 and len({f // 3 for f in found}) == 1  # same image, distinct texts


def test_sampler_errors_are_clear(tok):
    ids, mask = encode(tok, TEXTS[:4], 32)
    cfg = ModelConfig(kind="causal_lm", views="text", batch_size=8, width=16, heads=2)
    with pytest.raises(ValueError, match="fewer than batch_size 8"):
        make_sampler(cfg, TextData(ids, mask), seed=0)


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    o = OptimConfig(lr=1e-3, warmup_frac=0.1, final_lr_frac=0.01)
    lrs = [lr_at(s, 100, o) for s in range(100)]
    assert lrs[0] < lrs[5] < lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] == pytest.approx(1e-5, rel=0.05)


@pytest.mark.parametrize("kind,views", [("causal_lm", "text"), ("text_jepa", "good"), ("text_jepa", "bad")])
def test_training_lowers_the_loss_and_checkpoints_round_trip(tok, tmp_path, kind, views):
    torch.manual_seed(0)
    ids, mask = encode(tok, TEXTS, 32)
    groups = [np.arange(i, i + 2) for i in range(0, 36, 2)]
    cfg = ModelConfig(
        kind=kind,
        views=views,
        width=32,
        layers=1,
        heads=2,
        proj_dim=8,
        steps=60,
        batch_size=16,
        slices=32,
        optim=OptimConfig(lr=3e-3),
    )
    model = build_model(cfg, vocab_size=tok.get_vocab_size(), max_len=32)
    seen = []
    train_model(
        cfg,
        model,
        make_sampler(cfg, TextData(ids, mask, groups), 0),
        seed=0,
        on_log=lambda step, m: seen.append(m["loss"]),
        log_every=1,
        show_progress=False,
    )
    assert np.mean(seen[-10:]) < np.mean(seen[:5]), seen
    save_checkpoint(model, {"vocab_size": tok.get_vocab_size(), "max_len": 32}, tmp_path)
    again = load_checkpoint(tmp_path, cfg)
    a = text_layer_features(model.eval(), tok, TEXTS, 32)
    b = text_layer_features(again, tok, TEXTS, 32)
    assert len(a) == 2 and all(np.allclose(x, y) for x, y in zip(a, b, strict=True))


def test_image_jepa_trains_on_renders():
    renders = np.random.default_rng(0).integers(0, 255, (40, 2, 16, 16, 3), dtype=np.uint8)
    cfg = ModelConfig(kind="image_jepa", views="renders", width=16, proj_dim=8, steps=5, batch_size=8, slices=16)
    model = build_model(cfg, image_size=16)
    summary = train_model(cfg, model, make_sampler(cfg, ImageData(renders), 0), seed=0, show_progress=False)
    assert summary["samples"] == 40 and np.isfinite(summary["final_loss"])


@pytest.mark.e2e  # three interpreter subprocesses
def test_tokenizer_is_identical_across_processes(tmp_path):
    """Same texts -> same tokenizer bytes, whatever the process's hash seed (content addressing)."""
    import subprocess
    import sys

    code = (
        "from platonic.core.tokenizer import train_tokenizer; import sys; "
        f"texts = {TEXTS!r}; sys.stdout.write(train_tokenizer(texts, 30).to_str())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(outs) == 1


def test_tokenizer_keeps_the_most_frequent_words_ties_alphabetical():
    tok = train_tokenizer(["b a c", "a b", "a"], vocab_size=5 + 2)
    vocab = tok.get_vocab()
    assert vocab["a"] == 5 and vocab["b"] == 6 and "c" not in vocab
    assert tok.encode("a c").ids == [CLS_ID, 5, 1, SEP_ID]  # unknown word -> [UNK] (id 1)


def test_snapshot_steps_are_log_spaced_and_end_at_the_budget():
    from platonic.core.train import snapshot_steps

    assert snapshot_steps(450, 8) == [4, 8, 15, 30, 59, 117, 229, 450]
    assert snapshot_steps(10, 3) == [2, 4, 10]
    assert snapshot_steps(300, 0) == []


def test_snapshots_do_not_change_training(tok):
    """Saving snapshots along a run is an observation: the final weights are bit-identical."""
    ids, mask = encode(tok, TEXTS, 32)
    groups = [np.arange(i, i + 3) for i in range(0, 36, 3)]
    finals, seen = [], []
    for snaps in (0, 4):
        cfg = ModelConfig(
            kind="text_jepa", views="good", batch_size=8, width=16, heads=2, layers=1, steps=12, snapshots=snaps
        )
        torch.manual_seed(0)
        model = build_model(cfg, vocab_size=tok.get_vocab_size(), max_len=32)
        train_model(
            cfg,
            model,
            make_sampler(cfg, TextData(ids, mask, groups), 0),
            0,
            show_progress=False,
            on_snapshot=lambda step, m: seen.append((step, {k: v.clone() for k, v in m.state_dict().items()})),
        )
        finals.append(model.state_dict())
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])
    # the initial weights, then snapshot_steps(12, 4) minus the final step
    assert [s for s, _ in seen] == [0, 2, 4, 7]
    torch.manual_seed(0)
    init = build_model(cfg, vocab_size=tok.get_vocab_size(), max_len=32).state_dict()
    assert all(torch.equal(seen[0][1][k], init[k]) for k in init)  # step 0 is the untrained model
    assert not torch.equal(seen[1][1]["proj.0.weight"], finals[1]["proj.0.weight"])


def test_documents_concatenate_texts_of_one_image():
    from platonic.core.config import ModelConfig
    from platonic.core.train.data import TextData
    from platonic.core.train.sampler import make_sampler

    # 6 images x 3 texts; text r is [CLS, 100 + r, (200 + r), SEP]: lengths 3 and 4 alternate
    rows = [[2, 100 + r, 3] if r % 2 else [2, 100 + r, 200 + r, 3] for r in range(18)]
    ids = torch.zeros(18, 4, dtype=torch.long)
    mask = torch.zeros(18, 4, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)], mask[r, : len(row)] = torch.tensor(row), 1
    groups = [np.arange(3 * i, 3 * i + 3) for i in range(6)]
    cfg = ModelConfig(kind="causal_lm", views="documents", width=16, heads=2, batch_size=4, n_views=2)
    batch = make_sampler(cfg, TextData(ids, mask, groups), seed=0)()
    assert batch["input_ids"].shape[0] == 4 and batch["input_ids"].shape[1] <= 8
    for doc, m in zip(batch["input_ids"], batch["attention_mask"], strict=True):
        toks = doc[m.bool()].tolist()
        assert toks.count(2) == 2 and toks.count(3) == 2  # two texts, each with its own markers
        texts = [t - 100 for t in toks if 100 <= t < 200]
        assert len(texts) == 2 and texts[0] != texts[1] and texts[0] // 3 == texts[1] // 3  # one image
    with pytest.raises(ValueError, match="documents"):
        ModelConfig(kind="causal_lm", views="documents", width=16, heads=2, data="stream")
    with pytest.raises(ValueError, match="views"):
        ModelConfig(kind="text_jepa", views="documents", width=16, heads=2)


@pytest.mark.parametrize("native", [True, False])
def test_native_bf16_autocasts_where_the_cpu_has_bf16_and_says_so(monkeypatch, native):
    """precision native_bf16: bf16 autocast on a CPU with bf16 instructions, fp32 on one
    without; the summary (MLflow metrics) records which. fp32 and auto stay fp32 on a CPU."""
    import platonic.core.train.loop as loop

    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: native)
    cpu = torch.device("cpu")
    for precision, want in (("native_bf16", native), ("fp32", False), ("auto", False), ("bf16", True)):
        assert loop.use_bf16(ModelConfig(kind="text_jepa", precision=precision), cpu) is want, precision
    renders = np.random.default_rng(0).integers(0, 255, (40, 2, 16, 16, 3), dtype=np.uint8)
    cfg = ModelConfig(
        kind="image_jepa",
        views="renders",
        width=16,
        proj_dim=8,
        steps=5,
        batch_size=8,
        slices=16,
        precision="native_bf16",
    )
    model = build_model(cfg, image_size=16)
    summary = train_model(cfg, model, make_sampler(cfg, ImageData(renders), 0), seed=0, show_progress=False)
    assert summary["bf16_autocast"] == float(native) and np.isfinite(summary["final_loss"])
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
