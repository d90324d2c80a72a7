"""Eval-set loaders on fixtures in the real formats (PRH Parquet, Karpathy JSON, COCO JSON)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from platonic.core.data.evalsets import EvalSetError, load_coco_captions, load_karpathy, load_prh


def png(path, colour):
    Image.fromarray(np.full((8, 8, 3), colour, np.uint8)).save(path)


def test_prh_parquet_fixture(tmp_path):
    datasets = pytest.importorskip("datasets")
    imgs = [Image.fromarray(np.full((8, 8, 3), c, np.uint8)) for c in (0, 128, 255)]
    ds = datasets.Dataset.from_dict(
        {"image": imgs, "text": [["a black square", "dark"], ["a grey square"], ["a white square", "x"]]},
        features=datasets.Features({"image": datasets.Image(), "text": datasets.Sequence(datasets.Value("string"))}),
    )
    ds.to_parquet(str(tmp_path / "train-00000.parquet"))
    wit = load_prh(str(tmp_path))
    assert wit.captions == ["a black square", "a grey square", "a white square"]
    assert wit.first_captions() == wit.captions and len(wit.image_ids) == 3
    assert np.asarray(wit.image(2)).mean() == 255 and wit.image(0).mode == "RGB"
    bad = datasets.Dataset.from_dict(
        {"image": imgs[:1], "caption": ["no text field"]},
        features=datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")}),
    )
    bad.to_parquet(str(tmp_path / "bad.parquet"))
    with pytest.raises(EvalSetError, match="missing field 'text'"):
        load_prh(str(tmp_path / "bad.parquet"))


def test_karpathy_split_and_flickr_protocol(tmp_path):
    (tmp_path / "val2014").mkdir()
    png(tmp_path / "val2014" / "a.jpg", 10)
    png(tmp_path / "val2014" / "b.jpg", 20)
    data = {
        "images": [
            {
                "filepath": "val2014",
                "filename": "a.jpg",
                "split": "test",
                "cocoid": 1,
                "sentences": [{"raw": "first of a"}, {"raw": "second of a"}],
            },
            {"filepath": "val2014", "filename": "b.jpg", "split": "train", "cocoid": 2, "sentences": [{"raw": "b"}]},
            {"filepath": "val2014", "filename": "c.jpg", "split": "test", "cocoid": 3, "sentences": [{"raw": "c"}]},
        ]
    }
    (tmp_path / "dataset_coco.json").write_text(json.dumps(data))
    ev = load_karpathy(tmp_path / "dataset_coco.json", tmp_path, split="test")
    assert ev.image_ids == ["1", "3"] and ev.caption_image == ["1", "1", "3"]
    assert ev.first_captions() == ["first of a", "c"]
    assert np.asarray(ev.image(0)).mean() == 10
    with pytest.raises(EvalSetError, match="image file not found: .*c.jpg"):
        ev.image(1)
    del data["images"][0]["sentences"]
    (tmp_path / "broken.json").write_text(json.dumps(data))
    with pytest.raises(EvalSetError, match=r"images\[0\]: missing field 'sentences'"):
        load_karpathy(tmp_path / "broken.json", tmp_path)


def test_coco_captions_layout(tmp_path):
    png(tmp_path / "x.jpg", 5)
    data = {
        "images": [{"id": 7, "file_name": "x.jpg"}],
        "annotations": [{"id": 2, "image_id": 7, "caption": "second"}, {"id": 1, "image_id": 7, "caption": "first "}],
    }
    (tmp_path / "captions_val2014.json").write_text(json.dumps(data))
    ev = load_coco_captions(tmp_path / "captions_val2014.json", tmp_path)
    assert ev.captions == ["first", "second"] and ev.first_captions() == ["first"]
    data["annotations"].append({"id": 3, "image_id": 99, "caption": "orphan"})
    (tmp_path / "orphan.json").write_text(json.dumps(data))
    with pytest.raises(EvalSetError, match="unknown images"):
        load_coco_captions(tmp_path / "orphan.json", tmp_path)
