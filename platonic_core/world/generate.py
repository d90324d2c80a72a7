"""The synthetic world on disk: injective renderings of one world, small enough for a laptop.

`generate_world(cfg, out)` writes
- `scenes.parquet`: scene_id, split (train/eval), objects (JSON), background, render_row
- `renders.npy`: uint8 (n_scenes, renders_per_scene, H, W, 3); row = render_row
- `alt_texts.parquet`: scene_id, text (train scenes: what a web crawl would give)
- `eval_captions.parquet`: scene_id, text (eval scenes: one caption each; complete unless
  `eval_partial` / `eval_nonvisual` make them WIT-like)

Everything is a function of `cfg` alone: each scene draws from its own seeded stream, so
the world is identical across machines and re-runs. `load_scenes` reads the scenes back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .captions import add_nonvisual, alt_text, misperceive, nonvisual_alt_text, partial_caption, recaption
from .render import render
from .scenes import Scene, sample_themed_scene, scene_from_json, scene_to_json, world_laws
from .streams import (
    STREAM_ALT,
    STREAM_ALT_NONVISUAL,
    STREAM_ALT_WRONG,
    STREAM_EVAL_CAPTION,
    STREAM_EVAL_WEB,
    STREAM_LEAK,
    STREAM_REFERENCE,
    STREAM_RENDER,
    STREAM_SCENE,
    scene_rng,
)

if TYPE_CHECKING:
    from ..config import WorldConfig


def generate_world(cfg: WorldConfig, out: Path, progress=None) -> dict[str, int]:
    """Write the world under `out`; returns counts."""
    out.mkdir(parents=True, exist_ok=True)
    n = cfg.n_train + cfg.n_eval
    ids, splits, objs_json, backgrounds = [], [], [], []
    renders = np.zeros((n, cfg.renders_per_scene, cfg.image_size, cfg.image_size, 3), np.uint8)
    alt_rows, eval_rows = [], []
    laws = world_laws(cfg)
    it = range(n) if progress is None else progress(range(n), desc="world", unit="scene")
    for i in it:
        scene, theme = sample_themed_scene(scene_rng(cfg.seed, i, STREAM_SCENE), cfg, laws)
        sid = f"s{i:07d}"
        split = "train" if i < cfg.n_train else "eval"
        ids.append(sid)
        splits.append(split)
        objs_json.append(json.dumps(scene_to_json(scene)))
        backgrounds.append(scene.background)
        rng = scene_rng(cfg.seed, i, STREAM_RENDER)
        for r in range(cfg.renders_per_scene):
            renders[i, r] = render(scene, rng, cfg.image_size, cfg.grid, cfg.image_noise)
        if split == "train":
            alt_rows.append((sid, web_alt_text(scene, theme, i, cfg)))
        else:
            eval_rows.append((sid, eval_caption(scene, theme, i, cfg)))
    leaked = leak_eval_captions(alt_rows, eval_rows, cfg)
    pq.write_table(
        pa.table(
            {
                "scene_id": ids,
                "split": splits,
                "objects": objs_json,
                "background": pa.array(backgrounds, pa.int8()),
                "render_row": pa.array(range(n), pa.int32()),
            }
        ),
        out / "scenes.parquet",
    )
    np.save(out / "renders.npy", renders)
    for name, rows in (("alt_texts", alt_rows), ("eval_captions", eval_rows)):
        pq.write_table(
            pa.table({"scene_id": [r[0] for r in rows], "text": [r[1] for r in rows]}),
            out / f"{name}.parquet",
        )
    return {
        "scenes": n,
        "train_scenes": cfg.n_train,
        "eval_scenes": cfg.n_eval,
        "renders": n * cfg.renders_per_scene,
        "eval_captions_leaked": leaked,
    }


def web_alt_text(scene: Scene, theme: int, index: int, cfg: WorldConfig) -> str:
    """The alt-text of training scene `index`: with probability `alt_nonvisual` one in the page's
    register (brand/place/event of its theme, no attribute word), else a partial alt-text whose
    stated attributes are each wrong with probability `alt_wrong`. At 0 / 0 this is exactly
    `alt_text` on the STREAM_ALT stream, as before the knobs existed."""
    web = scene_rng(cfg.seed, index, STREAM_ALT_NONVISUAL)
    if web.random() < cfg.alt_nonvisual:
        return nonvisual_alt_text(theme, cfg, web)
    if cfg.alt_wrong > 0:
        scene = misperceive(scene, cfg, scene_rng(cfg.seed, index, STREAM_ALT_WRONG))
    # alt_text's draws do not depend on attribute values: a misperceived scene is worded with
    # the same dropped objects and attributes, only the wrong values differ
    return alt_text(scene, cfg, scene_rng(cfg.seed, index, STREAM_ALT))


def eval_caption(scene: Scene, theme: int, index: int, cfg: WorldConfig) -> str:
    """The caption of eval scene `index`: the captioner's complete caption (default), partial
    with probability `eval_partial`, with the scene's context added with probability
    `eval_nonvisual` (WIT's reference descriptions do both)."""
    web = scene_rng(cfg.seed, index, STREAM_EVAL_WEB)
    partial, nonvisual = web.random(2) < (cfg.eval_partial, cfg.eval_nonvisual)
    rng = scene_rng(cfg.seed, index, STREAM_EVAL_CAPTION)
    text = partial_caption(scene, cfg, rng) if partial else recaption(scene, cfg, rng)
    return add_nonvisual(text, theme, cfg, web) if nonvisual else text


def _web_variant(text: str, rng: np.random.Generator) -> str:
    """What a copy on the web looks like: case, final punctuation, spacing changed."""
    t = text.rstrip(".")
    if rng.random() < 0.5:
        t = t.capitalize()
    if rng.random() < 0.5:
        t = t.replace(", ", " , ", 1)
    return t + ("!" if rng.random() < 0.3 else "")


def leak_eval_captions(alt_rows: list[tuple[str, str]], eval_rows: list[tuple[str, str]], cfg: WorldConfig) -> int:
    """Overwrite the alt-texts of random training scenes with web copies of a fraction
    `cfg.eval_leak` of the eval captions (in place); returns how many leaked."""
    n = int(round(cfg.eval_leak * len(eval_rows)))
    if n == 0 or not alt_rows:
        return 0
    rng = scene_rng(cfg.seed, 0, STREAM_LEAK)
    src = rng.choice(len(eval_rows), size=min(n, len(eval_rows)), replace=False)
    dst = rng.choice(len(alt_rows), size=len(src), replace=False)
    for e, a in zip(src, dst, strict=True):
        alt_rows[a] = (alt_rows[a][0], _web_variant(eval_rows[e][1], rng))
    return len(src)


def more_captions(scene: Scene, index: int, cfg: WorldConfig, n: int, first: int = 1) -> list[str]:
    """`n` more complete captions of scene `index` (the captioner's grammar), the r-th from its
    own stream (STREAM_REFERENCE, r) for r = first .. first + n - 1: what several annotators
    write of one image, for captioning's references. Deterministic given the world config."""
    return [recaption(scene, cfg, scene_rng(cfg.seed, index, STREAM_REFERENCE, r)) for r in range(first, first + n)]


def load_scenes(world_dir: Path) -> dict[str, tuple[int, Scene, str]]:
    """scene_id -> (scene index, Scene, split)."""
    t = pq.read_table(world_dir / "scenes.parquet").to_pydict()
    return {
        sid: (int(sid[1:]), scene_from_json(json.loads(o), bg), split)
        for sid, o, bg, split in zip(t["scene_id"], t["objects"], t["background"], t["split"], strict=True)
    }
