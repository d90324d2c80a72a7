"""Ceilings: what a text encoder of the synthetic world could reach at best against the image
encoder, scored exactly as `evaluate` scores the models (same eval scenes, clamp, k, layers).

- `attributes`: the bag of each eval scene's true attributes (counts of every shape, colour,
  size, position and background value: what a perfect bag of words knows, without binding
  which colour goes with which shape). These features are discrete, so many scenes tie
  exactly and the kNN would fall back to index order; a tiny Gaussian jitter breaks the ties
  and the score is averaged over `draws` jitters.
- `learned`: a small MLP fitted on the *training* scenes to predict the image encoder's
  features (every layer, each L2-normalised) from the whole scene (`attribute_vector`:
  per grid cell its object's shape, colour and size — binding included), then applied to the
  eval scenes. It is the best a text feature that knows the scene could do against *this*
  image encoder, so it is the ceiling a model's score is a fraction of.
- `render`: the image encoder against itself on a second render of each eval scene (new
  noise and jitter): how much of its own neighbourhood structure survives a re-render.

    ceilings = run_ceiling(world_dir, image_dir, image_cfg, cfg.evaluate, cfg.world, out)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq
import torch
from torch import nn

from .features import image_layer_features, load_features
from .metrics import alignment
from .models import load_checkpoint
from .world import attribute_vector, load_scenes
from .world.scenes import BACKGROUNDS, Scene

if TYPE_CHECKING:
    from .config import CeilingConfig, EvaluateConfig, ModelConfig, WorldConfig


def attribute_bag(scene: Scene, cfg: WorldConfig) -> np.ndarray:
    """Counts of each attribute value in the scene, no binding: (shapes + colours + sizes +
    cells + backgrounds,)."""
    sizes = [cfg.n_shapes, cfg.n_colours, cfg.n_sizes, cfg.grid * cfg.grid, len(BACKGROUNDS)]
    offsets = np.cumsum([0, *sizes[:-1]])
    v = np.zeros(sum(sizes), np.float32)
    for o in scene.objects:
        for off, value in zip(offsets[:4], (o.shape, o.colour, o.size, o.cell), strict=True):
            v[off + value] += 1.0
    v[offsets[4] + scene.background] = 1.0
    return v


def fit_feature_mlp(x: np.ndarray, y: np.ndarray, cfg: CeilingConfig) -> tuple[nn.Module, dict[str, float]]:
    """An MLP x -> y by MSE (Adam, minibatches), with a 10% held-out split of the training
    scenes to report its fit. Returns the model (eval mode) and its train/held-out MSE."""
    g = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    perm = torch.randperm(len(xt), generator=g)
    n_hold = max(1, len(xt) // 10)
    hold, fit = perm[:n_hold], perm[n_hold:]
    mlp = nn.Sequential(
        nn.Linear(x.shape[1], cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(),
        nn.Linear(cfg.hidden, y.shape[1]),
    )  # fmt: skip
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    for _ in range(cfg.epochs):
        order = fit[torch.randperm(len(fit), generator=g)]
        for s in range(0, len(order), 256):
            b = order[s : s + 256]
            loss = (mlp(xt[b]) - yt[b]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    mlp.eval()
    with torch.no_grad():
        mse = {
            "train_mse": (mlp(xt[fit]) - yt[fit]).square().mean().item(),
            "heldout_mse": (mlp(xt[hold]) - yt[hold]).square().mean().item(),
            "target_variance": yt[hold].var(0).mean().item(),
        }
    return mlp, mse


def _split(y: np.ndarray, dims: list[int]) -> list[np.ndarray]:
    return np.split(y, np.cumsum(dims)[:-1], axis=1)


def run_ceiling(
    world_dir: Path,
    image_dir: Path,
    image_embed_dir: Path,
    image_cfg: ModelConfig,
    ev: EvaluateConfig,
    world: WorldConfig,
    out: Path,
    batch_size: int = 256,
) -> dict:
    """Score every oracle of `ev.ceiling.oracles`; writes ceiling.json, returns flat metrics."""
    cc = ev.ceiling
    scenes = load_scenes(world_dir)
    eval_ids = pq.read_table(image_embed_dir / "ids.parquet")["image_id"].to_pylist()
    image = load_features(image_embed_dir / "features.npz")  # the eval renders, as evaluate sees them
    renders = np.load(world_dir / "renders.npy", mmap_mode="r")

    def score(feats: list[np.ndarray], n_boot: int, seed: int = 0) -> dict:
        s = alignment(
            feats, image, k=ev.k, clamp_q=ev.clamp_quantile, clamp=ev.clamp, layers=ev.layers, n_boot=n_boot, seed=seed
        )
        return {**s.as_dict(), "per_layer": s.per_layer}

    oracles: dict[str, dict] = {}
    if "attributes" in cc.oracles:
        bag = np.stack([attribute_bag(scenes[i][1], world) for i in eval_ids])
        rng = np.random.default_rng(cc.seed)
        draws = [
            score([bag + cc.jitter * rng.standard_normal(bag.shape).astype(np.float32)], 0) for _ in range(cc.draws)
        ]
        values = [d["mutual_knn"] for d in draws]
        oracles["attributes"] = {
            "mutual_knn": float(np.mean(values)),
            "draws": len(values),
            "draw_min": min(values),
            "draw_max": max(values),
            "dim": int(bag.shape[1]),
            "distinct_scenes": int(len(np.unique(bag, axis=0))),
        }
    model = None
    if "learned" in cc.oracles or "render" in cc.oracles:
        model = load_checkpoint(image_dir, image_cfg)
    if "learned" in cc.oracles:
        train = sorted((i, row) for i, (row, _, split) in scenes.items() if split == "train")
        # row is the scene index, which is its render row (world/generate.py)
        target = image_layer_features(model, renders[[r for _, r in train], 0], batch_size)
        dims = [t.shape[1] for t in target]
        y = np.concatenate([t / (np.linalg.norm(t, axis=1, keepdims=True) + 1e-8) for t in target], 1)
        x = np.stack([attribute_vector(scenes[i][1], world) for i, _ in train])
        mlp, fit = fit_feature_mlp(x, y.astype(np.float32), cc)
        with torch.no_grad():
            pred = mlp(torch.from_numpy(np.stack([attribute_vector(scenes[i][1], world) for i in eval_ids]))).numpy()
        oracles["learned"] = {**score(_split(pred, dims), ev.bootstrap), "fit": {**fit, "train_scenes": len(train)}}
    if "render" in cc.oracles:
        if renders.shape[1] < 2:
            oracles["render"] = {"mutual_knn": None, "note": "world.renders_per_scene = 1: no second render"}
        else:
            second = image_layer_features(model, renders[[scenes[i][0] for i in eval_ids], 1], batch_size)
            oracles["render"] = score(second, ev.bootstrap)
    result = {"image_model": ev.image_model, "n": len(eval_ids), "k": ev.k, "oracles": oracles}
    (out / "ceiling.json").write_text(json.dumps(result, indent=1))
    return {f"ceiling_{name}": o["mutual_knn"] for name, o in oracles.items() if o.get("mutual_knn") is not None}
