"""Post-training (issue 42): a text JEPA started from a pretrained BERT (`init`), the InfoNCE
objective beside LeJEPA, and the checkpoint that carries the pretrained architecture.

A tiny BERT built from a config and saved locally stands in for a hub model; the packaged
all-MiniLM-L6-v2 (a test dependency) checks that step 0 is the model as it ships."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from pydantic import ValidationError
from tokenizers import Tokenizer
from transformers import AutoModel, BertConfig, BertModel

from platonic.core.config import ModelConfig
from platonic.core.features import text_layer_features
from platonic.core.models import load_checkpoint
from platonic.core.models.pretrained import init_bert_config, init_folder, init_tokenizer
from platonic.core.objectives import info_nce
from platonic.core.tokenizer import special_ids, train_subword_tokenizer
from platonic.core.train import run_train

REPO = Path(__file__).resolve().parents[1]
GROUPS = [
    [f"{n}", f"a {n} is a kind of {k}", f"the {n} sat by the {p}"]
    for n, k in (("dog", "canine"), ("cat", "feline"), ("oak", "tree"), ("rose", "flower"), ("hawk", "bird"))
    for p in ("door", "river", "wall")
]
TEXTS = [t for g in GROUPS for t in g]


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A local transformers BERT folder: config, weights, and a tokenizer.json that pads every
    text to 16 as a served tokenizer often does (the train stage must turn that off)."""
    folder = tmp_path_factory.mktemp("bert")
    tok = train_subword_tokenizer(TEXTS, 120, "wordpiece")
    tok.enable_padding(length=16, pad_id=0, pad_token="[PAD]")
    tok.save(str(folder / "tokenizer.json"))
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=40,
        hidden_dropout_prob=0.1,
    )
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(folder)  # with a pooler, as hub checkpoints are
    return folder


def write_views(d: Path) -> Path:
    """A views artifact's files in `d`, as the train stage reads them (the views' own tokenizer
    is a different vocabulary: an init model must not use it)."""
    pq.write_table(pa.table({"texts": GROUPS}), d / "good_views.parquet")
    pq.write_table(pa.table({"text": TEXTS}), d / "texts.parquet")
    (d / "meta.json").write_text(json.dumps({"max_len": 12}))
    train_subword_tokenizer(TEXTS, 80, "wordpiece").save(str(d / "tokenizer.json"))
    return d


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    return write_views(tmp_path_factory.mktemp("views"))


def _cfg(folder, **kw) -> ModelConfig:
    base = dict(kind="text_jepa", views="good", init=str(folder), steps=4, batch_size=8, slices=16, proj_dim=8)
    return ModelConfig(**{**base, **kw})


def test_init_refuses_what_it_would_ignore(stand_in):
    with pytest.raises(ValidationError, match="fixes the architecture; leave width unset"):
        _cfg(stand_in, width=64, heads=4)
    with pytest.raises(ValidationError, match="for text_jepa models"):
        ModelConfig(kind="causal_lm", views="text", init=str(stand_in))
    with pytest.raises(ValidationError, match="infonce contrasts two good views"):
        _cfg(stand_in, views="bad", objective="infonce")
    with pytest.raises(ValueError, match=r"nor a transformers folder \(missing config.json, model.safetensors"):
        init_folder(str(stand_in.parent / "nowhere"))


def test_the_stand_in_tokenizer_and_config_come_without_padding_or_dropout(stand_in):
    tok = init_tokenizer(stand_in)
    assert len(tok.encode("dog").ids) == 3  # [CLS] dog [SEP], not padded to 16
    cfg = init_bert_config(stand_in)
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["max_position_embeddings"]) == (32, 2, 40)
    assert cfg["hidden_dropout_prob"] == cfg["attention_probs_dropout_prob"] == 0.0


@pytest.mark.parametrize("objective", ["lejepa", "infonce"])
def test_post_training_starts_from_the_weights_and_the_checkpoint_reloads(stand_in, views, tmp_path, objective):
    out = tmp_path / objective
    out.mkdir()
    cfg = _cfg(stand_in, objective=objective, snapshots=2)
    summary = run_train(cfg, 0, views, out, show_progress=False)
    assert summary["steps"] == 4 and np.isfinite(summary["final_loss"])
    assert ("final_infonce" in summary) == (objective == "infonce")
    # the checkpoint: the init's tokenizer (no padding), its architecture, the views' max_len unused
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab() == init_tokenizer(stand_in).get_vocab() and tok.padding is None
    args = json.loads((out / "model.json").read_text())
    assert args["bert_config"]["hidden_size"] == 32 and args["max_len"] == 40
    model = load_checkpoint(out, cfg)
    # step 0 (the first snapshot) is the pretrained encoder exactly; training moved it
    shipped = BertModel.from_pretrained(stand_in, add_pooling_layer=False).eval()
    from safetensors.torch import load_file

    step0 = {k[5:]: v for k, v in load_file(str(out / "snapshots/step_000000.safetensors")).items() if k[:5] == "bert."}
    ref = shipped.state_dict()
    assert all(torch.equal(step0[k], ref[k]) for k in ref)
    moved = [k for k, v in model.bert.state_dict().items() if not torch.equal(v, ref[k])]
    assert moved, "post-training changed no encoder weight"
    # what a transformers user loads from the checkpoint's encoder gives the evaluation's features
    export = tmp_path / f"{objective}_hf"
    model.bert.save_pretrained(export)
    hf = AutoModel.from_pretrained(export).eval()
    ids = torch.tensor([tok.encode("a dog is a kind of canine").ids])
    mask = torch.ones_like(ids)
    ours = text_layer_features(model, tok, ["a dog is a kind of canine"], 40, 8, special_ids(tok))[-1]
    with torch.no_grad():
        h = hf(input_ids=ids, attention_mask=mask).last_hidden_state.mean(1).numpy()
    assert np.allclose(ours, h, atol=1e-5)


def test_step_zero_is_minilm_as_it_ships():
    """The packaged all-MiniLM-L6-v2 through the train stage's model: the same last-layer
    mean-pooled features as transformers gives (the `minilm` reference row's code path)."""
    from platonic.core.hf_features import hf_text_layer_features
    from platonic.core.models import build_model
    from platonic.core.models.pretrained import load_init_weights

    folder = init_folder("all-MiniLM-L6-v2")
    tok = init_tokenizer(folder)
    cfg = ModelConfig(kind="text_jepa", views="good", init="all-MiniLM-L6-v2")
    bert_config = init_bert_config(folder)
    model = build_model(cfg, tok.get_vocab_size(), 512, special_ids=special_ids(tok), bert_config=bert_config)
    load_init_weights(model, folder)
    texts = ["dog, domestic dog: a member of the genus Canis", "tabby: a cat with a striped coat", "oak"]
    ours = text_layer_features(model.eval(), tok, texts, 512, 8, special_ids(tok))
    ref = hf_text_layer_features(str(folder), texts, "mean", 8, None, "float32", False)
    assert len(ours) == len(ref) == 7
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, ref, strict=True)) < 1e-5


def test_minilm_exported_loads_as_a_sentence_transformer_with_its_base_model(tmp_path):
    """Issue 44: `platonic export` of a model post-trained from the packaged MiniLM (here at
    step 0, saved as the train stage saves it) is a sentence-transformers folder too:
    `SentenceTransformer(DIR)` gives the last layer's mean-pooled features, equal to MiniLM's
    own through transformers (the `minilm` reference row's code); the card names its base model."""
    from sentence_transformers import SentenceTransformer

    from platonic.core.export import export_pretrained
    from platonic.core.hf_features import hf_text_layer_features
    from platonic.core.models import build_model, save_checkpoint
    from platonic.core.models.pretrained import load_init_weights

    folder = init_folder("all-MiniLM-L6-v2")
    tok = init_tokenizer(folder)
    cfg = ModelConfig(kind="text_jepa", views="good", init="all-MiniLM-L6-v2")
    bert_config = init_bert_config(folder)
    args = {
        "vocab_size": tok.get_vocab_size(),
        "max_len": 512,
        "special_ids": special_ids(tok),
        "bert_config": bert_config,
    }
    model = build_model(cfg, **args)
    load_init_weights(model, folder)
    ckpt = tmp_path / "train"
    save_checkpoint(model, args, ckpt)
    tok.save(str(ckpt / "tokenizer.json"))
    dest = tmp_path / "hf"
    export_pretrained(ckpt, cfg, dest, {"best_layer": 6})
    texts = ["dog, domestic dog: a member of the genus Canis", "tabby: a cat with a striped coat", "oak"]
    got = SentenceTransformer(str(dest), device="cpu").encode(texts, convert_to_numpy=True)
    want = hf_text_layer_features(str(folder), texts, "mean", 8, None, "float32", False)[-1]
    assert got.shape == (3, 384) and float(np.abs(got - want).max()) < 1e-5
    header = (dest / "README.md").read_text().split("---\n")[1]
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in header and "- sentence-transformers" in header
    assert "(the evaluation's layer)" in (dest / "README.md").read_text()
    # no license of its own is declared; the base model's is named, and the header links the file saying so
    assert "license: other" in header and "license_link: LICENSE.txt" in header
    assert "sentence-transformers/all-MiniLM-L6-v2" in (dest / "LICENSE.txt").read_text()
    assert "(apache-2.0)" in (dest / "LICENSE.txt").read_text()


def test_info_nce_is_the_symmetric_in_batch_cross_entropy():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    loss, terms = info_nce(a, b, 0.1)
    an, bn = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    s = (an @ bn.T / 0.1).double()
    by_row = -(s.diag() - s.logsumexp(1)).mean()
    by_col = -(s.diag() - s.logsumexp(0)).mean()
    assert loss.item() == pytest.approx(float(0.5 * (by_row + by_col)), rel=1e-5)
    assert info_nce(b, a, 0.1)[0].item() == pytest.approx(loss.item(), rel=1e-6)  # no anchor
    same, t = info_nce(a, a, 0.01)
    assert same.item() < 1e-3 and t["in_batch_top1"] == 1.0  # each row its own nearest


@pytest.mark.e2e
def test_a_post_trained_row_runs_through_the_real_data_flow(wordnet_tiny_run, stand_in, tmp_path):
    """The real pipeline (a private copy of the session's tiny WordNet store): a model started
    from the stand-in BERT trains on the cached views, and its curve starts at the stand-in's
    own score (step 0 is the pretrained encoder) before the final model's."""
    import shutil

    from platonic.core.config import load_config
    from platonic.flows.pipeline import pipeline

    out = shutil.copytree(wordnet_tiny_run[0], tmp_path / "out")
    fixture = REPO / "tests" / "fixtures" / "wordnet" / "data.noun"
    post = f"{{kind: text_jepa, views: good, init: {stand_in}, steps: 4, batch_size: 8, slices: 16, snapshots: 2}}"
    sets = [f"out_dir={out}", f"ingest.paths=[{fixture}]", "concepts.classes=0"]
    sets += [f"train.models.post={post}", "evaluate.text_models=[post]"]
    res = pipeline(load_config(REPO / "configs" / "wordnet_tiny.yaml", sets).model_dump(mode="json"))
    # the run's own views (unchanged), read with the init's tokenizer
    assert res["stages"]["views"]["digest"] == wordnet_tiny_run[1]["stages"]["views"]["digest"]
    row = res["models"]["post"]
    assert 0 <= row["mutual_knn"] <= 1 and set(row["subsets"]) == {"dogs"}
    curve = json.loads((Path(res["stages"]["curve:post"]["uri"]) / "curve.json").read_text())["points"]
    assert [p["steps"] for p in curve][0] == 0 and curve[-1]["steps"] == 4


def test_head_steps_train_the_projector_alone_then_everything(stand_in, views, tmp_path):
    """LP-FT: for the first head_steps the encoder's weights stay the pretrained ones and the
    projector moves (at head_lr); after them the encoder moves too."""
    from platonic.core.models import build_model
    from platonic.core.models.pretrained import load_init_weights
    from platonic.core.train import load_text_data, make_sampler, train_model
    from platonic.core.train.loop import param_groups

    cfg = _cfg(stand_in, steps=6, head_steps=3, optim={"lr": 1e-3, "head_lr": 1e-2})
    tok = init_tokenizer(stand_in)
    sp = special_ids(tok)
    model = build_model(cfg, tok.get_vocab_size(), 40, special_ids=sp, bert_config=init_bert_config(stand_in))
    load_init_weights(model, stand_in)
    groups = param_groups(cfg, model)
    assert [(g["part"], g["lr_scale"]) for g in groups] == [("encoder", 1.0)] * 2 + [("head", 10.0)] * 2
    data, _, _ = load_text_data(views, cfg, sp, tok)
    enc0 = {k: v.clone() for k, v in model.bert.state_dict().items()}
    head0 = {k: v.clone() for k, v in model.proj.state_dict().items()}
    seen = {}

    def snap(step, m):
        seen[step] = {k: v.clone() for k, v in m.bert.state_dict().items()}

    cfg3 = cfg.model_copy(update={"snapshots": 3})
    train_model(cfg3, model, make_sampler(cfg, data, 0, sp), seed=0, on_snapshot=snap, show_progress=False)
    early = min(s for s in seen if s > 0)
    assert early <= 3 and all(torch.equal(seen[early][k], enc0[k]) for k in enc0)  # the probe phase
    assert any(not torch.equal(v, head0[k]) for k, v in model.proj.state_dict().items())
    assert any(not torch.equal(v, enc0[k]) for k, v in model.bert.state_dict().items())  # then fine-tuning
    plain = param_groups(_cfg(stand_in), model)  # no head options: the two groups as before
    assert [(g["part"], g["weight_decay"] > 0) for g in plain] == [("all", True), ("all", False)]
    with pytest.raises(ValidationError, match="leaves no step"):
        _cfg(stand_in, steps=4, head_steps=4)
