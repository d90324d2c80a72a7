"""The JEPA projector as a recipe choice: the default small head (unchanged), LeJEPA's
reference head (`projector: lejepa`), custom shapes, and the config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from platonic.core.config import ConfigError, ModelConfig, load_config
from platonic.core.models import PROJECTOR_PRESETS, build_model, load_checkpoint, resolve_projector, save_checkpoint
from platonic.core.models.projector import GlobalBatchNorm1d, projector
from platonic.core.train import ImageData, make_sampler, train_model


def _layout(seq: nn.Sequential) -> list[tuple[str, tuple[int, ...]]]:
    """(layer type, weight shape) of each layer: the architecture, without the numbers."""
    return [(type(m).__name__, tuple(m.weight.shape) if hasattr(m, "weight") else ()) for m in seq]


def test_default_is_the_small_head_bit_for_bit():
    """Default = Linear(w, 2w) -> BN -> GELU -> Linear(2w, k), with the same initial weights
    as the head built before the projector was configurable (the golden digests rely on it)."""
    torch.manual_seed(0)
    new = projector(64, 32)
    torch.manual_seed(0)
    old = nn.Sequential(nn.Linear(64, 128), GlobalBatchNorm1d(128), nn.GELU(), nn.Linear(128, 32))
    assert _layout(new) == _layout(old)
    a, b = new.state_dict(), old.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randn(16, 64)
    assert torch.equal(new(x), old(x))
    # a default ModelConfig resolves to that head, on both JEPAs
    cfg = ModelConfig(kind="text_jepa")
    assert resolve_projector(cfg.projector, 96, cfg.proj_hidden, cfg.proj_act) == ((192,), "gelu")
    text = build_model(ModelConfig(kind="text_jepa", width=32, layers=1, heads=2, proj_dim=8), vocab_size=50)
    image = build_model(ModelConfig(kind="image_jepa", views="renders", width=16, proj_dim=8), image_size=16)
    small = [("Linear", (64, 32)), ("GlobalBatchNorm1d", (64,)), ("GELU", ()), ("Linear", (8, 64))]
    assert _layout(text.proj) == small
    bn = "GlobalBatchNorm1d"
    assert _layout(image.proj) == [("Linear", (32, 16)), (bn, (32,)), ("GELU", ()), ("Linear", (8, 32))]


def test_lejepa_preset_is_the_reference_layout_and_size():
    """torchvision MLP(w, [2048, 2048, k], norm_layer=BatchNorm1d) with ReLU, its p=0 dropouts left out."""
    assert PROJECTOR_PRESETS["lejepa"] == ((2048, 2048), "relu")
    cfg = ModelConfig(kind="text_jepa", width=32, layers=1, heads=2, proj_dim=16, projector="lejepa")
    model = build_model(cfg, vocab_size=50, max_len=16)
    assert _layout(model.proj) == [
        ("Linear", (2048, 32)),
        ("GlobalBatchNorm1d", (2048,)),
        ("ReLU", ()),
        ("Linear", (2048, 2048)),
        ("GlobalBatchNorm1d", (2048,)),
        ("ReLU", ()),
        ("Linear", (16, 2048)),
    ]
    w, k, h = 32, 16, 2048
    expected = (w * h + h) + 2 * h + (h * h + h) + 2 * h + (h * k + k)  # linears + BN affine
    assert sum(p.numel() for p in model.proj.parameters()) == expected == 4_304_912
    ids = torch.randint(4, 50, (6, 10))
    emb, z = model(ids, torch.ones_like(ids))
    assert emb.shape == (6, 32) and z.shape == (6, 16)
    # presets fix the text model's size: the projector reads the preset's width
    mini = build_model(ModelConfig(kind="text_jepa", preset="bert-mini", projector="lejepa"), vocab_size=50)
    assert mini.proj[0].weight.shape == (2048, 256) and mini.proj[-1].weight.shape == (64, 2048)


def test_custom_shapes_and_activation(tmp_path):
    cfg = ModelConfig(
        kind="image_jepa", views="renders", width=16, proj_dim=8, steps=3, batch_size=8, slices=8, proj_hidden=[24, 12]
    )
    cfg = cfg.model_copy(update={"proj_act": "relu"})
    model = build_model(cfg, image_size=16)
    assert _layout(model.proj) == [
        ("Linear", (24, 16)),
        ("GlobalBatchNorm1d", (24,)),
        ("ReLU", ()),
        ("Linear", (12, 24)),
        ("GlobalBatchNorm1d", (12,)),
        ("ReLU", ()),
        ("Linear", (8, 12)),
    ]
    # [] is a linear projector (no hidden layer, no BatchNorm)
    lin = build_model(ModelConfig(kind="image_jepa", views="renders", width=16, proj_dim=8, proj_hidden=[]))
    assert _layout(lin.proj) == [("Linear", (8, 16))]
    # it trains and round-trips through a checkpoint rebuilt from the config
    renders = np.random.default_rng(0).integers(0, 255, (24, 2, 16, 16, 3), dtype=np.uint8)
    summary = train_model(cfg, model, make_sampler(cfg, ImageData(renders), 0), seed=0, show_progress=False)
    assert np.isfinite(summary["final_loss"])
    save_checkpoint(model, {"image_size": 16}, tmp_path)
    again = load_checkpoint(tmp_path, cfg)
    x = torch.randn(4, 3, 16, 16)
    assert torch.allclose(model.eval()(x)[1], again(x)[1])


@pytest.mark.parametrize(
    "sets, match",
    [
        (["projector=lejepa", "proj_hidden=[512]"], "projector 'lejepa' fixes the hidden sizes and activation"),
        (["projector=lejepa", "proj_act=gelu"], "set projector: custom to choose proj_hidden / proj_act"),
        (["projector=big"], "'train.models.good.projector'"),
        (["proj_act=tanh"], "'train.models.good.proj_act'"),
        (["proj_hidden=[64, 0]"], "'train.models.good.proj_hidden.1': Input should be greater than or equal to 1"),
        (["proj_hidden=64"], "'train.models.good.proj_hidden'"),
    ],
)
def test_projector_config_errors_name_the_key(sets, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [f"train.models.good.{s}" for s in sets])


def test_causal_lm_has_no_projector():
    with pytest.raises(ValidationError, match="a causal_lm has no projector"):
        ModelConfig(kind="causal_lm", views="text", projector="lejepa")
    with pytest.raises(ValueError, match="unknown projector activation 'tanh'"):
        projector(8, 4, act="tanh")
    with pytest.raises(ValueError, match="unknown projector 'big'"):
        resolve_projector("big", 8, None, None)


def test_recipe_sets_the_lejepa_head_on_both_jepas():
    cfg = load_config(None, ["train.models.good.projector=lejepa", "train.models.image.projector=lejepa"])
    m = cfg.train.models
    assert m["good"].projector == m["image"].projector == "lejepa"
    assert m["bad"].projector == "custom" and m["bad"].proj_hidden is None
