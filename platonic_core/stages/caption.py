"""Captioning through one map (`platonic caption`): the stages over platonic_core/caption/.

[base pipeline: world, dedup, train:{encoders}] -> caption_data -> caption_image, caption_text:{t}
-> caption_decoder:{t}, caption_map:{t} -> caption_eval:{t} -> caption_report
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..artifacts import Manifest
from ..config import ConfigError
from ..contract import StageCall, StageInstance, StageSpec


def _threads(call: StageCall) -> None:
    from ..cpus import set_torch_threads

    set_torch_threads(call.cfg.threads)


def _encoder_checkpoint(call: StageCall, enc) -> Path | None:
    """The train artifact an encoder reads: the pipeline's (an input), a folder (checkpoint)."""
    if enc.source == "pipeline":
        return call.input("model")
    return Path(enc.id) if enc.source == "checkpoint" else None


def caption_data(call: StageCall):
    from ..caption.data import karpathy_data, world_data
    from ..config import WorldConfig

    d = call.cfg.data
    if d.source == "world":
        world = call.inputs["world"]
        # the grammar the references are written in: the world's own config (its digest covers it)
        wcfg = WorldConfig.model_validate(world.config["world"])
        return world_data(world.path, call.input("dedup"), wcfg, d, call.out), {}
    return karpathy_data(d, call.out), {}


def caption_text(call: StageCall):
    from ..caption.encode import run_text_features

    _threads(call)
    enc = call.cfg.text_encoders[call.inst.model]
    return run_text_features(enc, call.input("data"), call.out, _encoder_checkpoint(call, enc)), {}


def caption_image(call: StageCall):
    from ..caption.encode import run_image_features

    _threads(call)
    enc = call.cfg.image_encoder
    world = call.input("world") if "world" in call.inputs else None
    return run_image_features(enc, call.input("data"), call.out, _encoder_checkpoint(call, enc), world), {}


def caption_decoder(call: StageCall):
    from ..caption.run import run_decoders

    _threads(call)

    def on_log(seed: int, step: int, metrics: dict) -> None:
        call.hooks.log_metrics({f"decoder/seed_{seed}/{k}": v for k, v in metrics.items()}, step)

    res = run_decoders(call.input("data"), call.input("text"), call.cfg.decoder, list(call.cfg.seeds), call.out, on_log)
    stats = {f"final_loss_seed_{s}": v["final_loss"] for s, v in res["seeds"].items()}
    for s, v in res["seeds"].items():  # the kept checkpoint: its step and held-out loss
        stats[f"kept_step_seed_{s}"] = v["kept_step"]
        if v["heldout_loss"] is not None:
            stats[f"heldout_loss_seed_{s}"] = v["heldout_loss"]
    return {"texts": res["texts"], "vocab": res["vocab"], "decoders": len(res["seeds"])}, stats


def caption_map(call: StageCall):
    from ..caption.run import run_maps

    info = run_maps(call.input("text"), call.input("image"), call.cfg.maps, list(call.cfg.seeds), call.out)
    stats = {}
    for seed, v in info.items():  # the pair-free map's matching cost, and that of the rotation pairs would pick
        for k in ("transport_cost", "paired_rotation_transport_cost"):
            if k in v.get("pairfree", {}):
                stats[f"pairfree_{k}_seed_{seed}"] = v["pairfree"][k]
    return {"maps": sum(len(v) for v in info.values())}, stats


def caption_eval(call: StageCall):
    from ..caption.evaluate import run_caption_eval

    _threads(call)
    res = run_caption_eval(
        call.input("data"),
        call.input("text"),
        call.input("image"),
        call.input("decoder"),
        call.input("map"),
        call.cfg.eval,
        list(call.cfg.seeds),
        call.out,
        call.cfg.decoder.device,
        call.hooks.logger.info,
    )
    metrics = {}
    for seed, methods in res["scores"].items():
        for m, s in methods.items():
            if "CIDEr-D" in s:
                metrics[f"CIDEr-D_{m}_seed_{seed}".replace("@", "_at_")] = s["CIDEr-D"]
    return {"images": res["n_images"], "systems": sum(len(v) for v in res["scores"].values())}, metrics


def caption_report(call: StageCall):
    from ..caption.run import run_report
    from ..caption.summary import summary_metrics

    evals = {role.split(":", 1)[1]: m.path for role, m in call.inputs.items() if role.startswith("eval:")}
    world = call.input("world") if "world" in call.inputs else None
    res = run_report(evals, call.input("data"), call.out, call.cfg.eval.examples, call.cfg.confidence, world)
    return {"encoders": len(evals), "files": len(res["files"])}, summary_metrics(res["summary"])


def _caption_external(cfg: Any, enc) -> dict[str, Manifest]:
    """A checkpoint folder named by path: its weights' digest is an input (the cache sees it)."""
    if enc.source != "checkpoint":
        return {}
    from ..artifacts import file_digest

    weights = Path(enc.id) / "model.safetensors"
    if not weights.is_file():
        raise ConfigError(f"{enc.id}: not a train artifact (no model.safetensors)")
    return {f"checkpoint:{enc.id}": Manifest.external("external:checkpoint", enc.id, file_digest(weights), {})}


def _karpathy_external(cfg: Any, i: StageInstance) -> dict[str, Manifest]:
    if cfg.data.source != "karpathy":
        return {}
    from ..caption.data import CaptionDataError, karpathy_sources

    try:
        sources = karpathy_sources(cfg.data)
    except CaptionDataError as e:
        raise ConfigError(str(e)) from None
    return {
        f"karpathy:{name}": Manifest.external(f"external:karpathy_{name}", uri, digest, counts)
        for name, (uri, digest, counts) in sources.items()
    }


def _model_input(enc) -> dict[str, str]:
    return {"model": f"train:{enc.id}"} if enc.source == "pipeline" else {}


def _world_input(cfg: Any) -> dict[str, str]:
    return {"world": "world"} if cfg.data.source == "world" else {}


CAPTION_SPECS: dict[str, StageSpec] = {
    s.name: s
    for s in [
        StageSpec(
            "caption_data",
            2,
            ("data",),
            (
                "pairs.parquet",
                "decoder_texts.parquet",
                "references.parquet",
                "conditions.parquet",
                "images.parquet",
                "attributes.parquet (world)",
            ),
            caption_data,
            "the captioner's data: map pairs, decoder texts (text only), eval images with several references, "
            "a true caption per eval image to decode from, the eval scenes' attributes (the world, or Karpathy JSONs)",
            inputs=lambda cfg, i: {"world": "world", "dedup": "dedup"} if cfg.data.source == "world" else {},
            external=_karpathy_external,
        ),
        StageSpec(
            "caption_image",
            1,
            ("image_encoder",),
            ("features.npz",),
            caption_image,
            "one layer of image features of the pair images and the eval images",
            inputs=lambda cfg, i: {"data": "caption_data"} | _model_input(cfg.image_encoder) | _world_input(cfg),
            external=lambda cfg, i: _caption_external(cfg, cfg.image_encoder),
            uses=("threads",),
        ),
        StageSpec(
            "caption_text",
            1,
            ("text_encoders.{model}",),
            ("features.npz",),
            caption_text,
            "one layer of text features of the decoder texts, the pair captions and the conditioning captions",
            inputs=lambda cfg, i: {"data": "caption_data"} | _model_input(cfg.text_encoders[i.model]),
            external=lambda cfg, i: _caption_external(cfg, cfg.text_encoders[i.model]),
            uses=("threads",),
        ),
        StageSpec(
            "caption_decoder",
            2,
            ("decoder", "seeds"),
            ("seed_<s>/lm/", "seed_<s>/prefix.safetensors", "decoders.json"),
            caption_decoder,
            "the text-only decoder, one per seed: a causal LM writing each training caption back from a prefix "
            "made of that caption's frozen text embedding (never an image); the step with the lowest loss on "
            "held-out training captions is kept",
            inputs=lambda cfg, i: {"data": "caption_data", "text": f"caption_text:{i.model}"},
            uses=("threads",),
            log_files=("decoders.json",),
        ),
        StageSpec(
            "caption_map",
            1,
            ("maps", "seeds"),
            ("maps.npz", "maps.json"),
            caption_map,
            "maps from image features into the text encoder's space: paired (lstsq, procrustes) on N pairs, and a "
            "pair-free rotation (Wasserstein-Procrustes from within-modality structure), per seed",
            inputs=lambda cfg, i: {"text": f"caption_text:{i.model}", "image": "caption_image"},
            log_files=("maps.json",),
        ),
        StageSpec(
            "caption_eval",
            2,
            ("eval.metrics", "eval.max_new_tokens", "eval.num_beams", "seeds"),
            ("generations.parquet", "scores.json"),
            caption_eval,
            "captions of the held-out images through every map and from a true caption's text embedding, each beside "
            "the nearest training caption, floors and the bound; pycocoevalcap scores "
            "(PTB tokenizer; BLEU, METEOR, ROUGE-L, CIDEr-D); attribute precision/recall (world); each map's R@1",
            inputs=lambda cfg, i: {
                "data": "caption_data",
                "text": f"caption_text:{i.model}",
                "image": "caption_image",
                "decoder": f"caption_decoder:{i.model}",
                "map": f"caption_map:{i.model}",
            },
            uses=("threads", "decoder.device", "eval.batch_size"),
            log_files=("scores.json", "generations.parquet"),
        ),
        StageSpec(
            "caption_report",
            2,
            ("eval.examples", "confidence"),
            ("summary.json", "table.md", "curve.png", "examples.md", "examples.html", "example_NN.png"),
            caption_report,
            "the table over encoders and seeds (mean and t interval), the CIDEr-vs-pairs curve, examples with the "
            "rendered images",
            inputs=lambda cfg, i: (
                {"data": "caption_data"}
                | {f"eval:{t}": f"caption_eval:{t}" for t in cfg.text_encoders}
                | _world_input(cfg)
            ),
            log_files=("summary.json", "table.md", "curve.png", "examples.md", "examples.html", "example_*.png"),
        ),
    ]
}


def caption_instances(cfg: Any) -> list[StageInstance]:
    """Every stage instance of a caption recipe, in execution order."""
    texts = list(cfg.text_encoders)
    return [
        StageInstance("caption_data", flow="caption"),
        StageInstance("caption_image", flow="caption"),
        *(StageInstance("caption_text", t, flow="caption") for t in texts),
        *(StageInstance("caption_decoder", t, flow="caption") for t in texts),
        *(StageInstance("caption_map", t, flow="caption") for t in texts),
        *(StageInstance("caption_eval", t, flow="caption") for t in texts),
        StageInstance("caption_report", flow="caption"),
    ]
