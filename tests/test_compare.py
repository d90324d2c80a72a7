"""`platonic compare` end to end on tiny local stand-ins (HF models saved with
save_pretrained, a PRH-format eval set) plus a checkpoint this project trained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from platonic.core.config import CompareConfig, ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_run):
    """The recipe: stand-ins built here, and two checkpoints of the session's tiny run (read
    only: the comparison writes to its own out_dir)."""
    from platonic.flows.standins import build_standins

    tmp = tmp_path_factory.mktemp("compare")
    paths = build_standins(tmp / "si", n=30)
    _, res = tiny_run
    recipe = {
        "name": "t",
        "out_dir": str(tmp / "out"),
        "k": 5,
        "bootstrap": 20,
        "eval_sets": {
            "wit_like": {"kind": "prh", "source": paths["prh"]},
            "w_train": {
                "kind": "karpathy",
                "source": paths["karpathy"],
                "image_root": str(Path(paths["karpathy"]).parent),
                "split": "train",
            },
            "w_test": {
                "kind": "karpathy",
                "source": paths["karpathy"],
                "image_root": str(Path(paths["karpathy"]).parent),
                "split": "test",
            },
        },
        "retrieval": [{"fit": "w_train", "eval": "w_test"}],
        "text_models": {
            "ours_good": {"source": "checkpoint", "id": res["stages"]["train:good"]["uri"]},
            "gpt2_mean": {"source": "hf", "id": paths["lm-gpt2"]},
            "gpt2_last": {"source": "hf", "id": paths["lm-gpt2"], "pooling": "last"},
            "clip_text": {"source": "hf", "id": paths["clip"]},
        },
        "vision_models": {
            "dinov2": {"source": "hf", "id": paths["dinov2"]},
            "ours_image": {"source": "checkpoint", "id": res["stages"]["train:image"]["uri"]},
        },
    }
    (tmp / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return tmp / "recipe.yaml"


@pytest.mark.e2e  # the compare flow, on checkpoints of the session's tiny pipeline run
def test_grid_covers_every_pair_and_reruns_from_cache(setup, monkeypatch):
    from platonic.flows.compare import compare_flow

    cfg = load_config(setup, model=CompareConfig)
    res = compare_flow(cfg.model_dump(mode="json"))
    grid = res["scores"]["wit_like"]
    assert set(grid) == {"ours_good", "gpt2_mean", "gpt2_last", "clip_text"}
    assert all(set(v) == {"dinov2", "ours_image"} for v in grid.values())
    for row in grid.values():
        for s in row.values():
            assert 0 <= s["ci95"][0] <= s["mutual_knn"] <= s["ci95"][1] <= 1
    assert "| ours_good |" in (Path(res["output_dir"]) / "table.md").read_text()
    ret = res["retrieval"]["w_train->w_test"]
    assert set(ret) == set(grid) and set(ret["ours_good"]["ours_image"]) == {"procrustes", "lstsq"}
    r = ret["ours_good"]["ours_image"]["procrustes"]
    assert 0 <= r["t2i_R@1"] <= r["t2i_R@5"] <= 1 and 0 <= r["i2t_R@1"] <= r["i2t_R@5"] <= 1

    import dataclasses

    from platonic.core.stages import COMPARE_SPECS

    def boom(call):
        raise AssertionError(f"recomputed on a cache hit: {call.inst.id}")

    for name in ("evalset", "features"):
        monkeypatch.setitem(COMPARE_SPECS, name, dataclasses.replace(COMPARE_SPECS[name], compute=boom))
    again = compare_flow(cfg.model_dump(mode="json"))
    assert again["scores"] == res["scores"]


def test_compare_recipe_errors():
    with pytest.raises(ConfigError, match="unknown key 'text_models.x.pool'"):
        load_config(
            ROOT / "configs" / "compare_tiny.yaml",
            ["text_models.x.pool=mean", "text_models.x.id=a"],
            model=CompareConfig,
        )
    cfg = load_config(ROOT / "configs" / "paper_table.yaml", model=CompareConfig)
    assert cfg.eval_sets["wit1024"].revision == "wit_1024" and "dinov2-b" in cfg.vision_models
