"""Fan-out through Prefect's Dask task runner gives the in-process result, byte for byte;
the recipe's service endpoints yield to the standard variables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from platonic.core.config import FanoutConfig, IngestConfig, ServicesConfig, load_config
from platonic.core.data.corpus import ingest_corpus
from platonic.core.data.readers import resolve_sources
from platonic.tasks import tracking
from platonic.tasks.fanout import mapper_for


def corpus(folder: Path, shards: int = 4, rows: int = 300) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(shards):
        lines = [
            json.dumps({"image_id": f"s{s}-{i}", "text": f"shard {s} caption {i} of a red square"}) for i in range(rows)
        ]
        lines += ["not json", json.dumps({"image_id": f"s{s}-0", "text": "a duplicate id"})]  # quarantined rows
        (folder / f"part-{s}.jsonl").write_text("\n".join(lines) + "\n")
        paths.append(str(folder / f"part-{s}.jsonl"))
    return paths


def ingest(paths: list[str], out: Path, engine: str) -> dict:
    ic = IngestConfig(source="jsonl", paths=paths)
    shards = resolve_sources(ic.paths, ic.source)
    counts, results = ingest_corpus(
        shards, ic, out / "out", out / "cache", mapper=mapper_for(FanoutConfig(engine=engine, workers=2))
    )
    assert [r.status for r in results] == ["ingested"] * len(paths)
    return counts


@pytest.mark.e2e  # Prefect harness + Dask task runner
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
    from platonic.flows import services

    for var in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "MLFLOW_S3_ENDPOINT_URL"):
        # setenv first so teardown restores the original state: apply() writes os.environ
        # itself, and a bare delenv of an unset variable records nothing (the recipe's
        # mlflow.lab then leaked into every later test)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    cfg = load_config(
        "tiny",
        ["services.mlflow_tracking_uri=http://mlflow.lab:5000", "services.prefect_api_url=http://prefect.lab:4200/api"],
    )
    monkeypatch.setenv("PREFECT_API_URL", "http://elsewhere:4200/api")  # the environment wins
    applied = services.apply(cfg.services)
    assert applied == {"PREFECT_API_URL": "http://elsewhere:4200/api", "MLFLOW_TRACKING_URI": "http://mlflow.lab:5000"}
    assert tracking.tracking_uri(tmp_path) == "http://mlflow.lab:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    # no variable, no recipe value: the embedded default, a SQLite store under out_dir
    assert services.apply(ServicesConfig()) == {"PREFECT_API_URL": "http://elsewhere:4200/api"}
    assert tracking.tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


@pytest.mark.e2e  # Prefect harness + Dask task runner
def test_dask_fanout_of_positives_shards_matches_the_inline_run(tmp_path, prefect_harness):
    """Paraphrases of a 3-shard corpus with a tiny local LM: each Dask worker builds its own
    backend; the generated texts are those of the in-process run (seeds are per request)."""
    from platonic.core.config import PositivesConfig
    from platonic.core.positives import make_backend
    from platonic.core.positives.corpus import generate_corpus
    from platonic.core.positives.images import input_shards
    from platonic.flows.standins import build_generation_standins

    paths = corpus(tmp_path / "src", shards=3, rows=12)
    ic = IngestConfig(source="jsonl", paths=paths, text_columns={"text": "alt"})
    ingest_corpus(resolve_sources(ic.paths, ic.source), ic, tmp_path / "ingest", tmp_path / "cache")
    lm = build_generation_standins(
        tmp_path / "models", [json.loads(line)["text"] for line in Path(paths[0]).read_text().splitlines()[:12]]
    )["lm"]
    pc = PositivesConfig(
        backend="transformers",
        recaptions=0,
        paraphrases=1,
        models={"paraphrase": {"id": lm}},
        sampling={"max_tokens": 6},
        batch_size=8,
    )
    shards = input_shards(tmp_path / "ingest")
    assert len(shards) == 3
    runs = {}
    for engine in ("inline", "dask"):
        out = tmp_path / f"out-{engine}"
        out.mkdir()
        # one worker process: it still pickles the shard calls and builds its own backend,
        # and loads torch once rather than twice (CI time)
        mapper = mapper_for(FanoutConfig(engine=engine, workers=1))
        counts, _ = generate_corpus(
            shards, pc, make_backend(pc) if mapper is None else None, tmp_path / f"work-{engine}", out, mapper=mapper
        )
        assert counts["requested"] == 36 == counts["generated"] + counts["failed"]
        runs[engine] = pq.read_table(out / "texts.parquet", columns=["image_id", "text_id", "text"]).to_pylist()
    assert runs["dask"] == runs["inline"]


def test_two_producers_of_one_stage_instance_take_turns_and_the_second_gets_a_cache_hit(tmp_path, monkeypatch):
    """Two flow runs of one recipe at once: the stage body runs once; the other run waits on
    the cache key's lock and then reads the committed artifact."""
    import dataclasses
    import threading

    from platonic.core.contract import StageInstance
    from platonic.core.stages import RUN, SPECS
    from platonic.tasks.executor import RunContext, execute

    cfg = load_config("tiny", [f"out_dir={tmp_path}"])
    c = tracking.client(tmp_path)
    exp = tracking.experiment_id(c, "lock-test", tmp_path)
    calls, results = [], []

    def compute(call):
        calls.append(call.inst.id)
        (call.out / "scenes.txt").write_text("x")
        threading.Event().wait(1.0)  # long enough for the other producer to arrive
        return {"n": 1}, {}

    monkeypatch.setitem(SPECS, "world", dataclasses.replace(SPECS["world"], compute=compute))

    def produce():
        ctx = RunContext(tmp_path, exp, c.create_run(exp).info.run_id, tracking.tracking_uri(tmp_path))
        results.append(execute(StageInstance("world"), cfg, {}, RUN, ctx))

    threads = [threading.Thread(target=produce) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and len(results) == 2
    assert results[0].digest == results[1].digest and results[0].producer_run_id == results[1].producer_run_id


@pytest.mark.e2e  # Prefect harness + Dask task runner
def test_dask_fanout_of_the_dedup_near_level_matches_the_inline_run(tmp_path, prefect_harness):
    """The near level in row ranges on Dask workers: the dedup stage writes the same bytes
    (matches, removals, kept texts, report) as the in-process run."""
    from platonic.core.artifacts import folder_digest
    from platonic.core.config import DedupConfig
    from platonic.core.data.schema import text_table
    from platonic.core.dedup import dedup, near_units

    evals = [f"a small red square left of a blue circle number {k}" for k in range(4)]
    rows = [
        {
            "image_id": f"i{n}",
            "text_id": f"i{n}:alt:0",
            "source_kind": "alt",
            "text": f"picture {n} of a green triangle above a yellow star",
        }
        for n in range(150)
    ]
    for n in range(0, 150, 23):  # near edits of eval captions, spread over every row range
        rows[n]["text"] = evals[n % 4].replace("small ", "") + " today"
    rows[7]["text"] = evals[1].upper()  # an exact match too
    pq.write_table(text_table(rows), tmp_path / "texts.parquet")
    pq.write_table(
        text_table(
            [
                {"image_id": f"E{k}", "text_id": f"E{k}:eval:0", "source_kind": "eval", "text": t}
                for k, t in enumerate(evals)
            ]
        ),
        tmp_path / "eval.parquet",
    )
    cfg = DedupConfig(levels=["exact", "near"], remove=["exact", "near"], near={"batch_rows": 40})
    assert len(near_units([tmp_path / "texts.parquet"], 40)) == 4
    runs = {}
    for engine in ("inline", "dask"):
        out = tmp_path / f"out-{engine}"
        out.mkdir()
        mapper = mapper_for(FanoutConfig(engine=engine, workers=2))
        stats: dict = {}
        counts = dedup(
            tmp_path / "texts.parquet",
            tmp_path / "eval.parquet",
            cfg,
            out,
            eval_name="world",
            stats=stats,
            mapper=mapper,
        )
        runs[engine] = (counts, stats["near_texts"], folder_digest(out))
    assert runs["dask"] == runs["inline"]
    counts = runs["inline"][0]
    assert counts["removed_by_exact"] == 1 and counts["removed_by_near"] == 7 and counts["in"] == 150


@pytest.mark.e2e  # Prefect harness + Dask task runner
def test_sigterm_to_the_command_stops_the_dask_workers_as_ctrl_c_does(tmp_path, prefect_harness):
    """Issue 43 (row 43.7): SIGTERM to the CLI's process alone (a scheduler's stop) while
    shards run on a LocalCluster. Before, the default action killed the process where it was
    (this test's own process too); the workers then ended through Dask's watch of their
    parent. Now, as Ctrl-C: KeyboardInterrupt where the map waits (no shard loop polls), and
    leaving the task runner closes the cluster, so the worker processes are gone."""
    import os
    import signal
    import threading
    import time

    from platonic.flows import ctrl_c

    def shard(folder: str, i: int) -> None:
        import os
        import time
        from pathlib import Path

        Path(folder, f"{i}.pid").write_text(str(os.getpid()))
        time.sleep(120)

    def terminate_when_both_run() -> None:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    map_on_dask = mapper_for(FanoutConfig(engine="dask", workers=2))
    threading.Thread(target=terminate_when_both_run, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), ctrl_c.handled():
        map_on_dask(shard, [(str(tmp_path), 0), (str(tmp_path), 1)])
    assert ctrl_c.exit_code() == 143 and time.monotonic() - t0 < 100
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
