"""`platonic caption` end to end: the caption flow on the tiny world (its pipeline stages from
the session's tiny run: cache hits) and the real-model recipe (configs/caption_coco.yaml) on
local stand-ins (a tiny DINOv2, BERT and GPT-2 saved with save_pretrained, a Karpathy JSON of
world renders as PNG files): real Prefect flows, MLflow, Java scoring."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from platonic.core.caption.recipe import load_caption

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("java") is None, reason="pycocoevalcap's PTB tokenizer and METEOR need Java"),
]

ROOT = Path(__file__).resolve().parents[1]


def nested_runs(res: dict) -> dict:
    c = MlflowClient(res["tracking_uri"])
    kids = c.search_runs(
        [res["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{res['run_id']}'", max_results=500
    )
    return {r.data.tags["platonic.stage_instance"]: r for r in kids}


def test_world_captions_through_one_map_logged_and_reported(tiny_run):
    """The tiny run's store is shared read-only: this flow adds caption artifacts and runs of
    its own experiment, and finds the pipeline's stages cached."""
    from platonic.flows.caption import caption_flow

    out, _ = tiny_run
    cfg, base = load_caption(ROOT / "configs" / "caption_tiny.yaml", [f"out_dir={out}"])
    res = caption_flow(cfg.model_dump(mode="json"), base.model_dump(mode="json"))
    s = res["summary"]
    assert set(s["encoders"]) == {"good", "ntp"} and s["seeds"] == [0, 1] and s["n_images"] == 16
    conditionings = {"text_embedding", "lstsq@10", "lstsq@all", "pairfree", "floor_shuffled"}
    expected = conditionings | {f"{m}/nearest" for m in conditionings}  # each beside its retrieval baseline
    for rows in s["encoders"].values():
        assert set(rows) == expected
        for m, metrics in rows.items():
            assert set(metrics) >= {"BLEU-4", "METEOR", "ROUGE-L", "CIDEr-D", "shape R", "count R", "background R"}
            assert len(metrics["CIDEr-D"]["per_seed"]) == 2 and metrics["CIDEr-D"]["mean"] >= 0
            assert ("map_R@1" in metrics) == (not m.startswith("text_embedding"))
    assert set(s["once"]) == {"frequent", "human"} and s["frequent_caption"]
    assert s["once"]["human"]["CIDEr-D"] > s["once"]["frequent"]["CIDEr-D"]  # a true caption beats a constant one
    # a true caption of the scene states exactly its attributes: the grammar's reader and the truth agree
    assert all(s["once"]["human"][f"{k} {pr}"] == 1.0 for k in ("shape", "colour", "position") for pr in "PR")
    folder = Path(res["output_dir"])
    table = (folder / "table.md").read_text()
    assert "| good | pair-free rotation (no pair) |" in table and "another true caption of the image" in table
    assert "CIDEr-D: nearest caption" in table and "| shape P / R |" in table and "ceiling" not in table
    assert "data:image/png;base64," in (folder / "examples.html").read_text()
    assert "![s0000400](example_00.png)" in (folder / "examples.md").read_text()
    assert (folder / "example_01.png").is_file() and (folder / "curve.png").is_file()
    runs = nested_runs(res)
    # the pipeline's stages were cache hits (no child run: the parent names their producers);
    # every caption stage ran, once, and logged its files
    parent = MlflowClient(res["tracking_uri"]).get_run(res["run_id"]).data.tags
    assert "train:good" not in runs and parent["platonic.reused.train:good"]
    caption_ids = {i for i in runs if i.startswith("caption_")}
    assert caption_ids == {
        "caption_data",
        "caption_image",
        *(f"caption_{s}:{m}" for s in ("text", "decoder", "map", "eval") for m in ("good", "ntp")),
        "caption_report",
    }
    assert all(runs[i].data.tags["platonic.cache_hit"] == "false" for i in caption_ids)
    c = MlflowClient(res["tracking_uri"])
    logged = {f.path for f in c.list_artifacts(runs["caption_report"].info.run_id, "outputs")}
    assert {"outputs/table.md", "outputs/examples.html", "outputs/example_00.png"} <= logged
    assert "examples.html" in {f.path for f in c.list_artifacts(res["run_id"])}
    # lineage: the eval's inputs are the decoder, the map and both encoders' features, and
    # `platonic lineage` walks from the flow's report back to the world
    ev = runs["caption_eval:good"].data.tags
    assert {"caption_decoder:good", "caption_map:good", "caption_text:good", "caption_image"} <= set(
        json.loads(ev["platonic.upstream"])
    )
    from platonic.tasks.lineage import trace

    tree = trace(res["run_id"], str(out))

    def stages(n):
        yield n["stage"]
        for u in n.get("upstream", []):
            yield from stages(u)

    assert tree["stage"] == "caption_report" and {"world", "train:good", "caption_decoder:good"} <= set(stages(tree))


def test_the_coco_recipe_runs_on_local_standins(tmp_path, prefect_harness):
    """configs/caption_coco.yaml with its paths and hub ids pointed at local stand-ins: Karpathy
    JSON loaders, an HF vision encoder, an HF text encoder, an HF causal LM fine-tuned as the
    decoder. Real numbers need the real models and data, which cannot be downloaded here."""
    from platonic.flows.caption import caption_flow
    from platonic.flows.standins import build_generation_standins, build_standins

    si = build_standins(tmp_path / "si", n=16)
    kp = Path(si["karpathy"])
    texts = [s["raw"] for im in json.loads(kp.read_text())["images"] for s in im["sentences"]]
    gen = build_generation_standins(tmp_path / "si", texts)
    sets = [
        f"out_dir={tmp_path / 'out'}",
        *(f"data.{s}.source={kp}" for s in ("pairs", "texts", "eval")),
        f"data.pairs.image_root={kp.parent}",
        f"data.eval.image_root={kp.parent}",
        f"image_encoder.id={si['dinov2']}",
        f"text_encoders={{bert: {{source: hf, id: {si['text-bert']}}}}}",
        f"decoder.id={gen['lm']}",
        "decoder.steps=3",
        "decoder.batch_size=4",
        "decoder.prefix_len=2",
        "seeds=[0]",
        "threads=1",
        "maps.n_pairs=[4, all]",
        "maps.pairfree={dim: 4, points: 16, iterations: 2}",
        "eval.num_beams=2",
        "eval.max_new_tokens=6",
        "eval.metrics=[bleu, cider]",
        "eval.examples=2",
    ]
    cfg, base = load_caption(ROOT / "configs" / "caption_coco.yaml", sets)
    assert base is None
    res = caption_flow(cfg.model_dump(mode="json"), None)
    s = res["summary"]
    assert s["n_images"] == 16 and s["references_per_image"] == 2.0
    conditionings = {"text_embedding", "lstsq@4", "lstsq@all", "procrustes@4", "procrustes@all", "pairfree"}
    conditionings |= {"floor_shuffled"}
    assert set(s["encoders"]["bert"]) == conditionings | {f"{m}/nearest" for m in conditionings}
    assert not any(
        k.endswith((" P", " R")) for k in s["encoders"]["bert"]["lstsq@all"]
    )  # no scene attributes off-world
    runs = nested_runs(res)
    data = runs["caption_data"]
    # the Karpathy JSONs are inputs with digests: the cache (and MLflow's datasets) see them
    assert {d.dataset.name for d in data.inputs.dataset_inputs} == {"karpathy:pairs", "karpathy:texts", "karpathy:eval"}
    assert (Path(res["output_dir"]) / "example_00.png").is_file()
