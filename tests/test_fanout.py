"""Fan-out through Prefect's Dask task runner gives the in-process result, byte for byte;
the recipe's service endpoints yield to the standard variables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from platonic_core.config import FanoutConfig, IngestConfig, ServicesConfig, load_config
from platonic_core.data.corpus import ingest_corpus
from platonic_core.data.readers import resolve_sources
from tasks import tracking
from tasks.fanout import mapper_for


def corpus(folder: Path, shards: int = 4, rows: int = 300) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        lines = [json.dumps({"image_id": f"s{s}-{i}", "text": f"shard {s} caption {i} of a red square"}) for i in range(rows)]
        lines += ["not json", json.dumps({"image_id": f"s{s}-0", "text": "a duplicate id"})]  # quarantined rows
        (folder / f"part-{s}.jsonl").write_text("\n".join(lines) + "\n")
        paths.append(str(folder / f"part-{s}.jsonl"))
    return paths


def ingest(paths: list[str], out: Path, engine: str) -> dict:
    ic = IngestConfig(source="jsonl", paths=paths)
    cfg = type("Recipe", (), {"fanout": FanoutConfig(engine=engine, workers=2)})()
    shards = resolve_sources(ic.paths, ic.source)
    counts, results = ingest_corpus(shards, ic, out / "out", out / "cache", mapper=mapper_for(cfg))
    assert [r.status for r in results] == ["ingested"] * len(paths)
    return counts


def test_dask_fanout_of_ingest_shards_matches_the_inline_run(tmp_path, prefect_harness):
    paths = corpus(tmp_path / "src")
    inline = ingest(paths, tmp_path / "inline", "inline")
    dask = ingest(paths, tmp_path / "dask", "dask")
    assert inline == dask and inline["in"] == inline["kept"] + inline["quarantined"]
    for part in ("texts", "quarantine"):
        a = sorted((tmp_path / "inline" / "out" / part).rglob("*.parquet"))
        b = sorted((tmp_path / "dask" / "out" / part).rglob("*.parquet"))
        assert [p.relative_to(tmp_path / "inline") for p in a] == [p.relative_to(tmp_path / "dask") for p in b]
        for x, y in zip(a, b, strict=True):
            assert pq.read_table(x).equals(pq.read_table(y)), x
            assert x.read_bytes() == y.read_bytes(), x


def test_endpoints_come_from_the_environment_first_then_the_recipe(monkeypatch, tmp_path):
    for var in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "MLFLOW_S3_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_config("tiny", ["services.mlflow_tracking_uri=http://mlflow.lab:5000",
                               "services.prefect_api_url=http://prefect.lab:4200/api"])
    monkeypatch.setenv("PREFECT_API_URL", "http://elsewhere:4200/api")  # the environment wins
    applied = cfg.services.apply()
    assert applied == {"PREFECT_API_URL": "http://elsewhere:4200/api", "MLFLOW_TRACKING_URI": "http://mlflow.lab:5000"}
    assert tracking.tracking_uri(tmp_path) == "http://mlflow.lab:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    # no variable, no recipe value: the embedded default, a SQLite store under out_dir
    assert ServicesConfig().apply() == {"PREFECT_API_URL": "http://elsewhere:4200/api"}
    assert tracking.tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
