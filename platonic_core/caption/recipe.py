"""A caption recipe with its base pipeline recipe, validated together.

    cfg, base = load_caption("configs/caption_world.yaml", ["seeds=[0]"], ["train.threads=1"])

`base` is the pipeline recipe whose world, training texts and encoders the captioner uses
(None for a recipe on real data and hub models only). Its `out_dir` is the caption recipe's,
so its stages hit the pipeline's cache (run `platonic run` on the base first, or let the
caption flow train what is missing).
"""

from __future__ import annotations

from pathlib import Path

from ..config import CaptionConfig, ConfigError, PipelineConfig, read_recipe, validate_recipe


def load_caption(
    path: str | Path, overrides: list[str] | None = None, base_overrides: list[str] | None = None
) -> tuple[CaptionConfig, PipelineConfig | None]:
    raw, origin = read_recipe(path)
    cfg = validate_recipe(raw, origin, overrides, CaptionConfig)
    if cfg.base is None:
        if base_overrides:
            raise ConfigError(f"{origin}: --base-set given, but the recipe has no base pipeline recipe")
        return cfg, None
    base_raw, base_origin = read_recipe(cfg.base, relative_to=Path(origin).parent)
    base = validate_recipe(base_raw, base_origin, [*cfg.set, *(base_overrides or []), f"out_dir={cfg.out_dir}"])
    models = base.train.models
    encoders = {"image_encoder": cfg.image_encoder} | {f"text_encoders.{n}": e for n, e in cfg.text_encoders.items()}
    for key, enc in encoders.items():
        if enc.source != "pipeline":
            continue
        if enc.id not in models:
            raise ConfigError(f"{origin}: {key}.id {enc.id!r} is not a model of the base recipe ({sorted(models)})")
        is_image = models[enc.id].kind == "image_jepa"
        if is_image != (key == "image_encoder"):
            what = "an image model" if key == "image_encoder" else "a text model"
            raise ConfigError(f"{origin}: {key}.id {enc.id!r} is a {models[enc.id].kind}, not {what}")
    if cfg.data.source == "world" and base.ingest.source != "world":
        src = base.ingest.source
        raise ConfigError(f"{origin}: data.source world needs a base recipe on the world, not ingest.source {src!r}")
    return cfg, base


def pipeline_needs(cfg: CaptionConfig, base: PipelineConfig) -> list[str]:
    """The base recipe's stage instances the caption stages read (the flow runs them and
    their upstream; cache hits where the pipeline already ran)."""
    needs = ["world", "dedup"] if cfg.data.source == "world" else []
    encoders = [cfg.image_encoder, *cfg.text_encoders.values()]
    return needs + [f"train:{e.id}" for e in encoders if e.source == "pipeline"]
