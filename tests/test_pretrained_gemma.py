"""Post-training a decoder (issue 42, Gemma-3): a text JEPA started from a gemma3_text
checkpoint (`init`), its pooling fixed by the recipe, only its last blocks trained
(`train_blocks`), its own next-token objective, the checkpoint that carries the decoder's
architecture, and the export transformers reloads.

A tiny Gemma-3 (hidden 32, 2 blocks) built from a config and saved locally with a tokenizer
trained here stands in for the packaged GGUF, which takes minutes to load on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file, save_file
from test_pretrained import TEXTS, write_views
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModel, AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

from platonic.core.config import ModelConfig
from platonic.core.features import checkpoint_text_features
from platonic.core.models import DecoderEncoder, build_model, load_checkpoint
from platonic.core.models.pretrained import init_decoder_config, init_kind, init_tokenizer, load_init_decoder
from platonic.core.tokenizer import special_ids
from platonic.core.train import run_train
from platonic.core.train.loop import param_groups

GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # Gemma's own ids 0..4


def gemma_like_tokenizer(texts: list[str], folder: Path) -> Tokenizer:
    """Gemma's tokenizer pipeline (transformers' GemmaTokenizer: spaces as "▁", byte-fallback
    BPE, <bos> prepended, its special tokens at its ids) over a vocabulary trained here; saved
    in `folder` as AutoTokenizer reads it, and returned as the train stage reads tokenizer.json."""
    from transformers import GemmaTokenizer

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=200, special_tokens=GEMMA_SPECIALS))
    bpe = json.loads(tok.to_str())["model"]
    GemmaTokenizer(vocab=bpe["vocab"], merges=[tuple(m) for m in bpe["merges"]], add_bos_token=True).save_pretrained(
        folder
    )
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    """A local transformers folder of a tiny Gemma-3 causal LM, saved as hub checkpoints are
    (Gemma3ForCausalLM: `model.` keys, the output layer tied to the embeddings)."""
    folder = tmp_path_factory.mktemp("gemma")
    tok = gemma_like_tokenizer(TEXTS, folder)
    cfg = Gemma3TextConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(cfg)
    with torch.no_grad():  # RMSNorm weights start at 0 (a scale of 1): move them so a norm's training shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.1)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def views(tmp_path_factory) -> Path:
    return write_views(tmp_path_factory.mktemp("views"))


def _cfg(folder, **kw) -> ModelConfig:
    base = dict(kind="text_jepa", views="good", init=str(folder), steps=3, batch_size=8, slices=16, proj_dim=8)
    return ModelConfig(**{**base, **kw})


def _built(stand_in: Path, cfg: ModelConfig) -> DecoderEncoder:
    tok = init_tokenizer(stand_in)
    model = build_model(cfg, tok.get_vocab_size(), 64, decoder_config=init_decoder_config(stand_in))
    load_init_decoder(model, stand_in)
    return model


def _shipped(stand_in: Path) -> dict[str, torch.Tensor]:
    return AutoModel.from_pretrained(stand_in).state_dict()  # Gemma3TextModel: the decoder without its head


def test_the_decoder_loads_every_weight_and_gives_the_reference_features(stand_in):
    """Step 0 is the checkpoint exactly (strict: every weight, none left over), and its
    features are the reference rows' code's (hf_text_layer_features: AutoModel, AutoTokenizer)."""
    from platonic.core.hf_features import hf_text_layer_features

    assert init_kind(stand_in) == "decoder"
    arch = init_decoder_config(stand_in)
    assert (arch["model_type"], arch["hidden_size"], arch["num_hidden_layers"]) == ("gemma3_text", 32, 2)
    assert arch["attention_dropout"] == 0.0 and arch["tie_word_embeddings"] is True
    ref = _shipped(stand_in)
    for pooling in ("mean", "last"):
        model = _built(stand_in, _cfg(stand_in, pooling=pooling)).eval()
        assert set(model.decoder.state_dict()) == set(ref)
        assert all(torch.equal(v, ref[k]) for k, v in model.decoder.state_dict().items())
        tok = init_tokenizer(stand_in)
        assert tok.encode("dog").ids[0] == 2  # <bos> first, as Gemma's tokenizer
        from platonic.core.features import text_layer_features

        ours = text_layer_features(model, tok, TEXTS[:6], 64, 4, special_ids(tok))
        theirs = hf_text_layer_features(str(stand_in), TEXTS[:6], pooling, 4, None, "float32", False)
        assert len(ours) == len(theirs) == 3
        assert max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True)) < 1e-5


def test_a_checkpoint_that_does_not_fit_is_refused(stand_in, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(stand_in, bad)
    state = load_file(str(bad / "model.safetensors"))
    state.pop("model.layers.1.mlp.up_proj.weight")
    save_file(state, str(bad / "model.safetensors"))
    with pytest.raises(ValueError, match=r"weights do not fit the decoder: .*up_proj"):
        _built(bad, _cfg(bad))


def test_recipe_checks_name_the_field(stand_in, views, tmp_path):
    from platonic.core.models.pretrained import init_folder

    with pytest.raises(ValidationError, match="pooling and train_blocks are for a text_jepa started from"):
        ModelConfig(kind="text_jepa", views="good", train_blocks=1)
    with pytest.raises(ValidationError, match="pooling and train_blocks are for a text_jepa started from"):
        ModelConfig(kind="text_jepa", views="good", pooling="last")
    with pytest.raises(ValidationError, match="is a BERT encoder: pooling .* and train_blocks are for a decoder"):
        ModelConfig(kind="text_jepa", views="good", init="all-MiniLM-L6-v2", train_blocks=2)
    with pytest.raises(ValidationError, match="objective next_token is a decoder's own"):
        ModelConfig(kind="text_jepa", views="good", init="all-MiniLM-L6-v2", objective="next_token")
    with pytest.raises(ValidationError, match="objective next_token continues a pretrained decoder"):
        ModelConfig(kind="text_jepa", views="good", objective="next_token")
    with pytest.raises(ValidationError, match="objective next_token continues a pretrained decoder"):
        _cfg(stand_in, views="bad", objective="next_token")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        _cfg(stand_in, train_blocks=0)
    assert init_folder(str(stand_in)) == stand_in
    # what only the checkpoint knows: its depth, or that a folder is a BERT
    with pytest.raises(ValueError, match="train_blocks = 3, but init .* has 2 decoder blocks"):
        run_train(_cfg(stand_in, train_blocks=3), 0, views, tmp_path, show_progress=False)
    from transformers import BertConfig, BertModel

    bert = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)).save_pretrained(
        bert
    )
    (bert / "tokenizer.json").write_text((stand_in / "tokenizer.json").read_text())
    with pytest.raises(ValueError, match="is a BERT encoder: pooling .* and train_blocks are for a decoder"):
        run_train(_cfg(bert, train_blocks=1), 0, views, tmp_path, show_progress=False)


def test_frozen_blocks_stay_and_get_no_optimizer_state(stand_in, views, tmp_path):
    """train_blocks: 1 of 2: the embeddings (the tied output layer too) and block 0 keep their
    shipped weights, block 1, the final norm and the projector move; AdamW holds only those."""
    cfg = _cfg(stand_in, train_blocks=1, optim={"lr": 1e-2})
    model = _built(stand_in, cfg)
    model.freeze_below(1)
    held = {id(p) for g in param_groups(cfg, model) for p in g["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in held}
    assert names and all(n.startswith(("decoder.layers.1.", "decoder.norm.", "proj.")) for n in names)
    assert any(n.startswith("decoder.norm.") for n in names) and any(n.startswith("proj.") for n in names)

    out = tmp_path / "run"
    out.mkdir()
    summary = run_train(cfg, 0, views, out, show_progress=False)
    assert summary["steps"] == 3 and np.isfinite(summary["final_loss"])
    ref = _shipped(stand_in)
    after = load_checkpoint(out, cfg).decoder.state_dict()
    frozen = [k for k in ref if k.startswith(("embed_tokens.", "layers.0."))]
    trained = [k for k in ref if k.startswith(("layers.1.", "norm."))]
    assert frozen and all(torch.equal(after[k], ref[k]) for k in frozen)
    assert all(not torch.equal(after[k], ref[k]) for k in trained if k.endswith("weight"))


def test_next_token_is_gemmas_own_loss_through_the_tied_head(stand_in, views, tmp_path):
    """objective next_token: the loss is the causal LM's (Gemma3ForCausalLM with labels) on
    the same texts; training on it moves the trained blocks and leaves the head (embeddings)."""
    cfg = _cfg(stand_in, objective="next_token", train_blocks=1, optim={"lr": 1e-2})
    model = _built(stand_in, cfg).eval()
    lm = Gemma3ForCausalLM.from_pretrained(stand_in).eval()
    tok = init_tokenizer(stand_in)
    ids = torch.tensor([tok.encode("a dog is a kind of canine").ids])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        ours = model(ids, mask, loss="mean")
        theirs = lm(input_ids=ids, attention_mask=mask, labels=ids).loss
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)
    out = tmp_path / "ntp"
    out.mkdir()
    summary = run_train(cfg, 0, views, out, show_progress=False)
    assert np.isfinite(summary["final_ntp"]) and summary["final_loss"] == summary["final_ntp"]
    after = load_checkpoint(out, cfg).decoder.state_dict()
    ref = _shipped(stand_in)
    assert torch.equal(after["embed_tokens.weight"], ref["embed_tokens.weight"])
    assert not torch.equal(after["layers.1.mlp.up_proj.weight"], ref["layers.1.mlp.up_proj.weight"])


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_the_checkpoint_reloads_alone_and_exports_to_automodel(stand_in, views, tmp_path, pooling):
    """model.json carries the decoder's architecture (no init folder needed to load it); the
    evaluation's features of the checkpoint equal what AutoModel/AutoTokenizer give from the
    export, pooled as platonic.json says."""
    import shutil

    from platonic.core.export import export_pretrained

    out = tmp_path / "run"
    out.mkdir()
    cfg = _cfg(stand_in, pooling=pooling, train_blocks=2, snapshots=2)
    run_train(cfg, 0, views, out, show_progress=False)
    args = json.loads((out / "model.json").read_text())
    assert args["decoder_config"]["model_type"] == "gemma3_text" and "bert_config" not in args
    assert args["max_len"] == 64 and args["special_ids"]["cls"] == 2 and args["special_ids"]["sep"] == 1
    # step 0 (the first snapshot) is the shipped decoder
    step0 = load_file(str(out / "snapshots/step_000000.safetensors"))
    ref = _shipped(stand_in)
    assert all(torch.equal(step0[f"decoder.{k}"], v) for k, v in ref.items())
    # the checkpoint alone: the init folder gone
    alone = tmp_path / "alone"
    shutil.copytree(out, alone)
    moved = tmp_path / "gone"
    stand_in.rename(moved)
    try:
        model = load_checkpoint(alone, cfg)
        feats = checkpoint_text_features(model, alone, TEXTS[:5], 4)
    finally:
        moved.rename(stand_in)
    assert len(feats) == 3 and feats[-1].shape == (5, 32)
    dest = tmp_path / "hf"
    info = export_pretrained(alone, cfg, dest)
    assert info["pooling_rule"] == pooling and info["architecture"] == "Gemma3TextModel"
    hf = AutoModel.from_pretrained(dest).eval()
    tok = AutoTokenizer.from_pretrained(dest)
    batch = tok(TEXTS[:5], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == 2  # <bos>, as the checkpoint's tokenizer
    from platonic.core.models.pooling import pool_tokens

    with torch.no_grad():
        h = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    got = pool_tokens(h, batch["attention_mask"], pooling).numpy()
    assert np.allclose(got, feats[-1], atol=1e-5)
    st = json.loads((dest / "1_Pooling" / "config.json").read_text())
    assert st["pooling_mode_mean_tokens"] == (pooling == "mean") and st.get("pooling_mode_lasttoken", False) == (
        pooling == "last"
    )
    assert ("last real token" in (dest / "README.md").read_text()) == (pooling == "last")


def test_recipes_keep_their_cache_keys_and_the_gemma_recipe_validates():
    """pooling and train_blocks are left out of a model's dump at their defaults (Section's
    added_fields): the MiniLM rows keep their cached artifacts; the Gemma recipe states both."""
    from platonic.core.config import load_config

    repo = Path(__file__).resolve().parents[1]
    minilm = load_config(repo / "configs" / "improve_minilm.yaml").train.models["good"].model_dump(mode="json")
    assert "pooling" not in minilm and "train_blocks" not in minilm
    gemma = load_config(repo / "configs" / "improve_gemma.yaml").train.models
    assert {n: (m.init, m.train_blocks, m.objective) for n, m in gemma.items()} == {
        "good": ("gemma-3-270m", 2, "lejepa"),
        "bad": ("gemma-3-270m", 2, "lejepa"),
        "own": ("gemma-3-270m", 2, "next_token"),
    }
    assert gemma["good"].model_dump(mode="json")["train_blocks"] == 2


@pytest.mark.e2e
def test_a_post_trained_decoder_row_runs_through_the_real_data_flow(wordnet_tiny_run, stand_in, tmp_path):
    """The real pipeline (a private copy of the session's tiny WordNet store): a row started
    from the stand-in Gemma, last block only, trains on the cached views and is embedded and
    scored from its checkpoint alone (model.json's decoder_config)."""
    import shutil

    from platonic.core.config import load_config
    from platonic.flows.pipeline import pipeline

    repo = Path(__file__).resolve().parents[1]
    out = shutil.copytree(wordnet_tiny_run[0], tmp_path / "out")
    fixture = repo / "tests" / "fixtures" / "wordnet" / "data.noun"
    post = (
        f"{{kind: text_jepa, views: good, init: {stand_in}, pooling: last, train_blocks: 1, "
        "steps: 4, batch_size: 8, slices: 16, snapshots: 2}"
    )
    sets = [f"out_dir={out}", f"ingest.paths=[{fixture}]", "concepts.classes=0"]
    sets += [f"train.models.post={post}", "evaluate.text_models=[post]"]
    res = pipeline(load_config(repo / "configs" / "wordnet_tiny.yaml", sets).model_dump(mode="json"))
    row = res["models"]["post"]
    assert 0 <= row["mutual_knn"] <= 1
    curve = json.loads((Path(res["stages"]["curve:post"]["uri"]) / "curve.json").read_text())["points"]
    assert [p["steps"] for p in curve][0] == 0 and curve[-1]["steps"] == 4
