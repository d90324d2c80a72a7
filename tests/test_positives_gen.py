"""Positives from real model backends (platonic_core/positives/): the transformers backend
in process, the OpenAI-compatible client against a real loopback server (with injected
errors and timeouts), the vLLM offline backend through a stand-in `vllm` module in a child
interpreter, resume after a SIGKILL, provenance, and counts that add up.

Every model is tiny, built from configs and saved locally (random weights: the texts are
word salad; the plumbing is what is under test)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from platonic.core.config import IngestConfig, PositivesConfig, WorldConfig
from platonic.core.positives import generate_corpus, make_backend
from platonic.core.positives.generate import GEN_SCHEMA, sha256
from platonic.core.positives.images import image_source, input_shards
from platonic.core.positives.jobs import Completion

ROOT = Path(__file__).resolve().parents[1]
FAKE_VLLM = ROOT / "tests" / "fixtures" / "fake_vllm"


@pytest.fixture(scope="module")
def world_ingest(tmp_path_factory):
    """A 16-image world and its ingest (alt-texts, images.parquet)."""
    from platonic.core.data.ingest import ingest_world
    from platonic.core.world import generate_world

    d = tmp_path_factory.mktemp("world")
    generate_world(WorldConfig(n_train=16, n_eval=16, seed=3), d / "world")
    (d / "ingest").mkdir()
    ingest_world(d / "world", IngestConfig(), d / "ingest")
    return d / "world", d / "ingest"


@pytest.fixture(scope="module")
def models(tmp_path_factory, world_ingest):
    from platonic.flows.standins import build_generation_standins

    world, _ = world_ingest
    texts = pq.read_table(world / "alt_texts.parquet")["text"].to_pylist()
    return build_generation_standins(tmp_path_factory.mktemp("gen"), texts)


@pytest.fixture(scope="module")
def server(models):
    """A real HTTP server on loopback serving both tiny models (faults set per test)."""
    from platonic.flows.serve_chat import Faults, make_server

    srv = make_server([models["captioner"], models["lm"]], port=0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.faults = Faults()
    srv.shutdown()
    srv.server_close()


def cfg_for(models, backend: str, base_url: str = "http://127.0.0.1:1/v1", **kw) -> PositivesConfig:
    http = kw.pop("http", {})
    return PositivesConfig.model_validate(
        {
            "backend": backend,
            "recaptions": 1,
            "paraphrases": 1,
            "seed": 5,
            "batch_size": 4,
            "models": {
                "recaption": {"id": models["captioner"], "revision": "r-cap", "base_url": base_url},
                "paraphrase": {"id": models["lm"], "base_url": base_url},
            },
            "sampling": {"temperature": 0.8, "top_p": 0.9, "max_tokens": 8},
            "http": {"timeout_s": 5, "max_retries": 0, "backoff_s": 0.01, "concurrency": 4, **http},
            **kw,
        }
    )


def run(cfg, world_ingest, work: Path, out: Path, backend=None):
    world, ingest = world_ingest
    out.mkdir(parents=True, exist_ok=True)
    return generate_corpus(
        input_shards(ingest), cfg, backend or make_backend(cfg), work, out, lambda s: image_source(ingest, world, s)
    )


def check_counts(out: Path, counts: dict, requested: int) -> None:
    gens = pq.read_table(out / "generations.parquet").to_pylist()
    texts = pq.read_table(out / "texts.parquet").to_pylist()
    fails = pq.read_table(out / "failures.parquet").to_pylist()
    assert counts["requested"] == requested == len(gens) == counts["generated"] + counts["failed"]
    assert counts["failed"] == len(fails) == sum(g["status"] == "failed" for g in gens)
    keys = [(g["image_id"], g["task"], g["index"]) for g in gens]
    assert len(set(keys)) == len(keys), "duplicate generations"
    generated = [t for t in texts if t["source_kind"] in ("recap", "paraphrase")]
    assert len(generated) == counts["generated"] and len({t["text_id"] for t in texts}) == len(texts)
    assert all(g["reason"] for g in gens if g["status"] == "failed")


def test_transformers_backend_in_process_with_provenance(models, world_ingest, tmp_path):
    cfg = cfg_for(models, "transformers")
    counts, stats = run(cfg, world_ingest, tmp_path / "work", tmp_path / "out")
    check_counts(tmp_path / "out", counts, requested=32)  # 16 images x (1 recaption + 1 paraphrase)
    assert counts["input_texts"] == 16 and stats["texts_per_s"] > 0 and stats["tokens_per_s"] > 0
    gens = pq.read_table(tmp_path / "out" / "generations.parquet")
    assert gens.schema.equals(GEN_SCHEMA)
    rows = gens.to_pylist()
    recap = [r for r in rows if r["task"] == "recap"]
    para = [r for r in rows if r["task"] == "paraphrase"]
    assert {r["model"] for r in recap} == {models["captioner"]} and {r["revision"] for r in recap} == {"r-cap"}
    assert {r["prompt_sha256"] for r in recap} == {sha256(cfg.prompts.recaption)}
    assert {r["prompt_sha256"] for r in para} == {sha256(cfg.prompts.paraphrase)}
    for r in rows:
        assert r["backend"] == "transformers" and r["seed"] == 5 and r["temperature"] == 0.8
        assert r["top_p"] == 0.9 and r["max_tokens"] == 8 and r["generated_at"] is not None
    assert len({r["request_seed"] for r in rows}) == len(rows)  # per request, derived from the seed
    ok = [t for t in pq.read_table(tmp_path / "out" / "texts.parquet").to_pylist() if t["generator"]]
    params = json.loads(ok[0]["generator_params"])
    assert {"prompt_sha256", "temperature", "top_p", "max_tokens", "seed", "revision", "generated_at"} <= set(params)


def test_openai_backend_records_injected_failures_with_their_reasons(models, world_ingest, server, tmp_path):
    """No retries: every injected 500, timeout and refusal becomes a failure with that
    reason; the counts match the server's own log one for one."""
    from platonic.flows.serve_chat import Faults

    srv, url = server
    srv.log.clear()
    srv.count = 0
    srv.faults = Faults(fail_every=5, delay_every=7, delay_s=3.5, refuse_every=9)
    cfg = cfg_for(models, "openai", url, http={"timeout_s": 1.5, "max_retries": 0})
    counts, _ = run(cfg, world_ingest, tmp_path / "work", tmp_path / "out")
    check_counts(tmp_path / "out", counts, requested=32)
    outcomes = Counter(e["outcome"] for e in srv.log)
    reasons = Counter(g["reason"] for g in pq.read_table(tmp_path / "out" / "generations.parquet").to_pylist())
    assert outcomes["http_500"] == 6 and reasons["http_500"] == 6  # requests 5, 10, ..., 30
    assert reasons["timeout"] == outcomes["delayed"] == 4  # 7, 14, 21, 28 (35 is a 500 first)
    assert reasons["refusal"] == outcomes["refusal"] == 3  # 9, 18, 27
    assert set(reasons) <= {None, "http_500", "timeout", "refusal", "empty_output"}


def test_openai_backend_retries_until_it_succeeds(models, world_ingest, server, tmp_path):
    from platonic.flows.serve_chat import Faults

    srv, url = server
    srv.log.clear()
    srv.count = 0
    srv.faults = Faults(fail_every=7, delay_every=11, delay_s=2.0)
    cfg = cfg_for(models, "openai", url, http={"timeout_s": 1.0, "max_retries": 6, "backoff_s": 0.01})
    backend = make_backend(cfg)
    counts, _ = run(cfg, world_ingest, tmp_path / "work", tmp_path / "out", backend)
    check_counts(tmp_path / "out", counts, requested=32)
    reasons = Counter(g["reason"] for g in pq.read_table(tmp_path / "out" / "generations.parquet").to_pylist())
    assert set(reasons) <= {None, "empty_output"}, reasons  # every injected fault was retried away
    assert backend.attempts == len(srv.log) > 32  # the retries really went over the wire


def test_paraphrase_never_sends_the_image(models, world_ingest, server, tmp_path):
    from platonic.flows.serve_chat import Faults

    srv, url = server
    srv.log.clear()
    srv.faults = Faults()
    run(cfg_for(models, "openai", url), world_ingest, tmp_path / "work", tmp_path / "out")
    by_model = {m: {e["has_image"] for e in srv.log if e["model"] == m} for m in (models["lm"], models["captioner"])}
    assert by_model == {models["lm"]: {False}, models["captioner"]: {True}}
    # and paraphrase-only runs do not even read images
    cfg = cfg_for(models, "openai", url, recaptions=0)
    world, ingest = world_ingest

    def no_images(shard):
        raise AssertionError("the image source was opened for a paraphrase-only run")

    (tmp_path / "o2").mkdir()
    counts, _ = generate_corpus(
        input_shards(ingest), cfg, make_backend(cfg), tmp_path / "w2", tmp_path / "o2", no_images
    )
    assert counts["requested"] == 16


@pytest.mark.e2e  # a real child process, SIGKILLed
def test_kill_mid_shard_then_rerun_resumes_without_duplicates(models, world_ingest, server, tmp_path):
    """A real child process generating against the (slowed) server is SIGKILLed after two
    batches landed; the rerun keeps those parts, asks only for the rest, and a third run
    skips the finished shard."""
    from platonic.flows.serve_chat import Faults

    srv, url = server
    srv.faults = Faults(latency_s=0.15)
    cfg = cfg_for(models, "openai", url, batch_size=2, http={"concurrency": 1})
    world, ingest = world_ingest
    work, out = tmp_path / "work", tmp_path / "out"
    child = (
        "import sys, json; from pathlib import Path\n"
        "from platonic.core.config import PositivesConfig\n"
        "from platonic.core.positives import generate_corpus, make_backend\n"
        "from platonic.core.positives.images import image_source, input_shards\n"
        "cfg = PositivesConfig.model_validate(json.loads(sys.argv[1]))\n"
        "w, i, work, out = map(Path, sys.argv[2:6]); out.mkdir()\n"
        "generate_corpus(input_shards(i), cfg, make_backend(cfg), work, out, lambda s: image_source(i, w, s))\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", child, cfg.model_dump_json(), str(world), str(ingest), str(work), str(out)]
    )
    shard = work / "corpus"
    deadline = time.time() + 60
    while len(list(shard.glob("part-*.parquet"))) < 2 and time.time() < deadline and p.poll() is None:
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 60  # the request in flight at the kill is logged before the log is cleared
    while not srv.idle():
        assert time.monotonic() < deadline, "the server never finished the killed client's requests"
        time.sleep(0.01)
    assert p.returncode == -signal.SIGKILL
    before = {q.name for q in shard.glob("part-*.parquet")}
    assert before and not (shard / "_DONE.json").exists()
    kept_rows = sum(pq.read_metadata(shard / n).num_rows for n in before)
    srv.faults = Faults()
    srv.log.clear()
    counts, _ = run(cfg, world_ingest, work, out)
    check_counts(out, counts, requested=32)
    assert before <= {q.name for q in shard.glob("part-*.parquet")}  # finished batches kept as they were
    assert counts["resumed_rows"] == kept_rows >= 4
    assert len(srv.log) == 32 - kept_rows  # no finished row was asked again
    srv.log.clear()
    again, _ = run(cfg, world_ingest, work, tmp_path / "out3")
    assert again["shards_skipped"] == 1 and not srv.log
    assert pq.read_table(out / "texts.parquet").equals(pq.read_table(tmp_path / "out3" / "texts.parquet"))


@pytest.mark.e2e  # a separate interpreter runs the generation
def test_vllm_offline_backend_through_a_standin_vllm(models, world_ingest, tmp_path):
    """The stage writes requests, launches a separate interpreter running vllm_runner.py,
    and reads the results back. `vllm` there is tests/fixtures/fake_vllm (a stand-in that
    runs the tiny transformers models), not vLLM."""
    from platonic.core.positives.vllm_offline import VllmOfflineBackend

    assert "vllm" not in sys.modules
    cfg = cfg_for(models, "vllm", vllm_python=sys.executable, batch_size=5)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKE_VLLM), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    backend = VllmOfflineBackend(cfg, env=env, poll_s=0.05)
    counts, stats = run(cfg, world_ingest, tmp_path / "work", tmp_path / "out", backend)
    check_counts(tmp_path / "out", counts, requested=32)
    assert backend.info["vllm_version"] == "0.0.0+standin"
    gens = pq.read_table(tmp_path / "out" / "generations.parquet").to_pylist()
    assert {g["backend"] for g in gens} == {"vllm"} and stats["texts_per_s"] > 0
    assert len(list((tmp_path / "work" / "corpus").glob("part-*.parquet"))) >= 8  # streamed back batch by batch
    assert "vllm" not in sys.modules  # the main process never imported it


def test_vllm_runner_failure_is_an_error_that_keeps_finished_batches(models, world_ingest, tmp_path):
    from platonic.core.positives.vllm_offline import VllmOfflineBackend

    cfg = cfg_for(models, "vllm", vllm_python=sys.executable, recaptions=0)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "nowhere")}  # no vllm importable there
    with pytest.raises(RuntimeError, match="vLLM runner .* exited with code 1"):
        run(cfg, world_ingest, tmp_path / "work", tmp_path / "out", VllmOfflineBackend(cfg, env=env, poll_s=0.05))
    assert not (tmp_path / "work" / "corpus" / "_DONE.json").exists()


def test_parse_completion_reasons():
    from platonic.core.positives.openai_http import parse_completion

    ok = {
        "choices": [{"message": {"content": " a  red\ncube "}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    assert parse_completion(ok) == Completion(" a  red\ncube ", None, 3, 4)
    assert parse_completion({"choices": [{"message": {"content": None, "refusal": "no"}}]}).reason == "refusal"
    assert (
        parse_completion({"choices": [{"message": {"content": "x"}, "finish_reason": "content_filter"}]}).reason
        == "refusal"
    )
    assert parse_completion({"choices": []}).reason == "bad_response"
    assert parse_completion({"choices": [{"message": {"content": [{"type": "text", "text": "hi"}]}}]}).text == "hi"


def test_missing_images_fail_their_requests_and_nonvision_setups_are_refused(models, world_ingest, tmp_path):
    world, ingest = world_ingest
    cfg = cfg_for(models, "transformers", paraphrases=0)
    src = image_source(ingest, world, "corpus")
    drop = sorted(src.row)[:3]

    def images(shard):
        return lambda i: (_ for _ in ()).throw(KeyError(i)) if i in drop else src(i)

    (tmp_path / "out").mkdir()
    counts, _ = generate_corpus(
        input_shards(ingest), cfg, make_backend(cfg), tmp_path / "work", tmp_path / "out", images
    )
    check_counts(tmp_path / "out", counts, requested=16)
    fails = pq.read_table(tmp_path / "out" / "failures.parquet").to_pylist()
    assert sum(f["reason"].startswith("image_unavailable") for f in fails) == 3
    with pytest.raises(ValueError, match="recaptions need images"):
        generate_corpus(input_shards(ingest), cfg, make_backend(cfg), tmp_path / "w2", tmp_path / "out", lambda s: None)


def test_stage_logs_throughput_to_mlflow_and_a_forced_rerun_resumes(models, tmp_path):
    """The positives task (outside a flow) with the transformers backend on the world:
    texts/s and tokens/s reach the stage's MLflow run; the provenance table is logged; a
    forced rerun finds every shard finished in the work folder and regenerates nothing."""
    from platonic.core.config import load_config
    from platonic.core.contract import StageInstance
    from platonic.core.stages import FORCE, RUN
    from platonic.tasks import tracking
    from platonic.tasks.executor import RunContext, run_instances

    out = tmp_path / "store"
    cfg = load_config(
        ROOT / "configs" / "tiny.yaml",
        [
            f"out_dir={out}",
            "world.n_train=16",
            "world.n_eval=16",
            "evaluate.k=3",
            "positives.backend=transformers",
            "positives.recaptions=1",
            f"positives.models.recaption.id={models['captioner']}",
            f"positives.models.paraphrase.id={models['lm']}",
            "positives.sampling.max_tokens=6",
        ],
    )
    c = tracking.client(out)
    exp = tracking.experiment_id(c, "positives-test", out)
    parent = c.create_run(exp).info.run_id
    ctx = RunContext(out, exp, parent, tracking.tracking_uri(out))
    first = [StageInstance("world"), StageInstance("ingest"), StageInstance("positives")]
    m = run_instances(cfg, first, {"world": RUN, "ingest": RUN, "positives": RUN}, ctx)["positives"]
    assert m.counts["requested"] == 32 == m.counts["generated"] + m.counts["failed"]
    metrics = c.get_run(m.producer_run_id).data.metrics
    assert metrics["texts_per_s"] > 0 and metrics["tokens_per_s"] > 0 and metrics["requested"] == 32
    assert {a.path for a in c.list_artifacts(m.producer_run_id, "outputs")} >= {
        "outputs/generations.parquet",
        "outputs/failures.parquet",
    }
    again = run_instances(cfg, first, {"world": RUN, "ingest": RUN, "positives": FORCE}, ctx)["positives"]
    assert again.counts["shards_skipped"] == 1 and again.stats["generated_this_run"] == 0
    assert again.digest == m.digest  # the same rows, provenance timestamps included


@pytest.mark.e2e  # a CLI subprocess
def test_serve_chat_cli_answers_the_protocol_and_injects_failures(models, tmp_path):
    """`platonic serve-chat` as a user starts it: /v1/models, a chat completion, an injected 500."""
    import re

    import httpx

    exe = Path(sys.executable).with_name("platonic")
    p = subprocess.Popen(  # port 0: the server binds a free port itself and prints it (no bind-then-release race)
        [str(exe), "serve-chat", "--model", models["lm"], "--port", "0", "--fail-every", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        seen = ""
        while "serving" not in seen and p.poll() is None:  # printed once the model is loaded and the port bound
            seen += p.stdout.readline()
        assert "serving" in seen, seen
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/v1", seen).group(1))
        base = f"http://127.0.0.1:{port}/v1"
        assert [m["id"] for m in httpx.get(f"{base}/models").json()["data"]] == [models["lm"]]
        body = {"model": models["lm"], "messages": [{"role": "user", "content": "a red cube"}], "max_tokens": 4}
        r1 = httpx.post(f"{base}/chat/completions", json=body, timeout=30)
        assert r1.status_code == 200 and r1.json()["choices"][0]["message"]["role"] == "assistant"
        assert httpx.post(f"{base}/chat/completions", json=body, timeout=30).status_code == 500
        wrong = httpx.post(f"{base}/chat/completions", json={**body, "model": "nope"}, timeout=30)
        assert wrong.status_code == 404 and "not served" in wrong.json()["error"]["message"]
    finally:
        p.terminate()
        p.wait(10)


def test_infra_recipe_points_the_openai_backend_at_the_paper_models():
    from platonic.core.config import load_config

    cfg = load_config(ROOT / "infra" / "vllm" / "positives_openai.yaml").positives
    assert cfg.backend == "openai"
    assert cfg.models.recaption.id == "llava-hf/llama3-llava-next-8b-hf"
    assert cfg.models.paraphrase.id == "Qwen/Qwen2.5-7B-Instruct"
    for script, model in (("serve_llava.sh", cfg.models.recaption), ("serve_qwen.sh", cfg.models.paraphrase)):
        text = (ROOT / "infra" / "vllm" / script).read_text()
        assert f"vllm serve {model.id}" in text and model.base_url.rsplit(":", 1)[1].split("/")[0] in text


def test_webdataset_corpus_recaptions_read_the_tar_members_the_ingest_located(models, tmp_path):
    """Two webdataset shards ingested; recaption requests carry the very bytes of each
    sample's image member (located at ingest, read by offset); a sample without an image
    fails with image_unavailable; the output keeps the shards' alt-texts."""
    import base64
    import io
    import tarfile

    import numpy as np

    from platonic.core.data.corpus import ingest_corpus
    from platonic.core.data.readers import resolve_sources
    from platonic.core.positives.images import png_bytes
    from platonic.core.positives.transformers_backend import TransformersBackend

    rng = np.random.default_rng(0)
    sent: dict[str, bytes] = {}
    for s in range(2):
        with tarfile.open(tmp_path / f"{s:05d}.tar", "w") as tf:
            for k in range(3):
                key = f"{s}{k:04d}"
                members = [(f"{key}.txt", f"a red cube number {k} in shard {s}".encode())]
                if (s, k) != (1, 2):  # one sample has no image member
                    sent[key] = png_bytes(rng.integers(0, 255, (32, 32, 3)))
                    members.insert(0, (f"{key}.png", sent[key]))
                for name, data in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    ic = IngestConfig(source="wds", paths=[str(tmp_path / f"{s:05d}.tar") for s in range(2)])
    ingest_corpus(resolve_sources(ic.paths, "wds"), ic, tmp_path / "ingest", tmp_path / "cache")
    shards = input_shards(tmp_path / "ingest")
    assert [s for s, _ in shards] == ["00000", "00001"]

    seen: dict[str, bytes] = {}

    class Spy(TransformersBackend):  # the real backend, recording what each request carried
        def generate(self, task, jobs, batch_size):
            def record(js):
                for j in js:
                    for p in j.messages[0]["content"] if task == "recap" else []:
                        if p["type"] == "image_url":
                            seen[j.request.image_id] = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                    yield j

            yield from super().generate(task, record(jobs), batch_size)

    cfg = cfg_for(models, "transformers")
    (tmp_path / "out").mkdir()
    counts, _ = generate_corpus(
        shards, cfg, Spy(cfg), tmp_path / "work", tmp_path / "out", lambda s: image_source(tmp_path / "ingest", None, s)
    )
    check_counts(tmp_path / "out", counts, requested=12)  # 6 samples x (1 recaption + 1 paraphrase)
    assert seen == sent
    fails = pq.read_table(tmp_path / "out" / "failures.parquet").to_pylist()
    assert [f["raw"] for f in fails if f["reason"].startswith("image_unavailable")] == ["10002:recap:0"]
    assert counts["input_texts"] == 6 and counts["shards"] == 2


def test_a_stop_string_ends_the_completion_before_it(models):
    """positives.sampling.stop: generation stops at the first stop string and the text ends
    before it (sampling is seeded, so the run without stop shows where the string comes)."""
    from platonic.core.positives.transformers_backend import ChatModel

    lm = ChatModel(models["lm"])
    msgs = [[{"role": "user", "content": "a red square"}]]
    (full,) = lm.chat(msgs, temperature=1.0, max_tokens=12, seed=3)
    words = full.text.split()
    assert len(words) >= 4
    stop = f" {words[2]}"
    (cut,) = lm.chat(msgs, temperature=1.0, max_tokens=12, seed=3, stop=[stop])
    assert cut.text == full.text.split(stop, 1)[0] and stop not in cut.text
    assert cut.completion_tokens < full.completion_tokens
