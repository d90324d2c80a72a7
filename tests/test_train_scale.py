"""Training at scale (issue 8): presets, torchrun DDP vs one process, exact resume after a
SIGKILL, streaming determinism, checkpoint safety. Real processes, tiny models."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import dead_pid
from safetensors.torch import load_file

from platonic.core.config import ModelConfig, ViewsConfig
from platonic.core.models import build_model
from platonic.core.tokenizer import load_tokenizer, special_ids
from platonic.core.train import StreamSampler, main, torchrun_command
from platonic.core.views import build_views

COLOURS = ["red", "blue", "green", "black", "white", "pink", "grey", "brown"]
SHAPES = ["circle", "square", "star", "cross", "heart", "ring"]
PLACES = ["top", "bottom", "left", "right", "middle"]


def _corpus(n_images: int = 96) -> list[dict]:
    rows = []
    for i in range(n_images):
        c, s, p = COLOURS[i % 8], SHAPES[(i // 8) % 6], PLACES[(i // 48) % 5]
        texts = [f"a {c} {s} at the {p}.", f"the {s} is {c}, {p}.", f"{p}: one {c} {s} here"]
        rows += [
            {"image_id": f"im{i:03d}", "text_id": f"t{i}_{k}", "source_kind": "recap", "text": t}
            for k, t in enumerate(texts)
        ]
    return rows


RECIPE = """
name: scale
seed: 3
train:
  threads: 1
  models:
    good: {kind: text_jepa, views: good, width: 32, layers: 1, heads: 2, proj_dim: 16, steps: 8, batch_size: 16,
           slices: 32}
    bad:  {kind: text_jepa, views: bad, width: 32, layers: 1, heads: 2, proj_dim: 16, steps: 8, batch_size: 16,
           slices: 32}
    ntp:  {kind: causal_lm, views: text, width: 32, layers: 1, heads: 2, steps: 8, batch_size: 16, optim: {lr: 0.005}}
    image: {kind: image_jepa, views: renders, width: 16, proj_dim: 8, steps: 2, batch_size: 8}
"""


@pytest.fixture(scope="module")
def views(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scale")
    pq.write_table(pa.Table.from_pylist(_corpus()), root / "texts.parquet")
    out = root / "views"
    out.mkdir()
    build_views(root / "texts.parquet", ViewsConfig(vocab_size=80, max_len=16, n_views=3, row_group_rows=8), out)
    (root / "recipe.yaml").write_text(RECIPE)
    return out


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_presets_have_the_papers_sizes():
    """BERT-B is ~109M parameters with bert-base-uncased's vocabulary and 512 positions;
    the causal LM preset is a GPT-2 of the same width and depth."""
    with torch.device("meta"):
        enc = build_model(ModelConfig(kind="text_jepa", preset="bert-base"), vocab_size=30522, max_len=512)
        lm = build_model(ModelConfig(kind="causal_lm", views="text", preset="bert-base"), vocab_size=30522, max_len=512)
        mini = build_model(ModelConfig(kind="text_jepa", preset="bert-mini"), vocab_size=30522, max_len=512)
    bert = sum(p.numel() for p in enc.bert.parameters())
    assert 108e6 < bert < 110e6, bert  # BertModel without the pooler: 108.9M
    gpt = sum(p.numel() for p in lm.parameters())  # tied embeddings counted once
    assert 0.95 < gpt / bert < 1.2, (gpt, bert)
    assert enc.bert.config.num_hidden_layers == 12 and enc.bert.config.hidden_size == 768
    assert mini.bert.config.num_hidden_layers == 4 and mini.bert.config.hidden_size == 256
    # custom (the default) keeps the recipe's own sizes: the demo's models are unchanged
    tiny = build_model(ModelConfig(kind="text_jepa", width=16, layers=1, heads=2), vocab_size=50, max_len=8)
    assert tiny.bert.config.hidden_size == 16 and tiny.bert.config.num_hidden_layers == 1


@pytest.mark.e2e  # torchrun
@pytest.mark.parametrize("model, rtol", [("ntp", 1e-4), ("good", 1e-3)])
def test_two_torchrun_processes_match_one_with_the_same_global_batch(views, tmp_path, model, rtol):
    """2 CPU processes (gloo) each take half of the global batch. NTP matches one process to
    float rounding (the loss is normalised by the global token count); the JEPA matches
    within a tolerance because its projector's BatchNorm sees per-process statistics on CPU
    (SyncBatchNorm on GPU)."""
    recipe = views.parent / "recipe.yaml"
    one, two = tmp_path / "one", tmp_path / "two"
    main(
        [
            "--recipe",
            str(recipe),
            "--model",
            model,
            "--input",
            str(views),
            "--out",
            str(one),
            "--metrics",
            str(tmp_path / "one.jsonl"),
        ]
    )
    cmd = torchrun_command(recipe, model, views, two, 2, metrics=tmp_path / "two.jsonl")
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = _metrics(tmp_path / "one.jsonl"), _metrics(tmp_path / "two.jsonl")
    assert [m["step"] for m in a] == [m["step"] for m in b] == list(range(8))
    la = torch.tensor([m["loss"] for m in a])
    lb = torch.tensor([m["loss"] for m in b])
    assert torch.allclose(la, lb, rtol=rtol), (la, lb)
    assert la[-1] < la[0]  # it trains
    wa, wb = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert wa.keys() == wb.keys()
    if model == "ntp":
        for k in wa:
            assert torch.allclose(wa[k], wb[k], atol=1e-4), k


def _stop_then_resume(views: Path, tmp_path: Path, sets: list[str], under: str) -> str:
    """next-token, 400 steps, through `train_in_subprocess`: once uninterrupted, then stopped
    at its first relayed metrics (a rerun resumes from a checkpoint saved at the stop, the
    message names it, under `under`), then the same call again: it resumes at that step and
    ends with the uninterrupted run's bytes. Returns the stopped run's train.log."""
    from platonic.core import interrupt
    from platonic.core.config import load_config
    from platonic.core.train import latest_checkpoint, train_in_subprocess

    mcfg = load_config(views.parent / "recipe.yaml", ["train.models.ntp.steps=400", *sets]).train.models["ntp"]
    full, out, state = tmp_path / "full", tmp_path / "out", tmp_path / "state"
    for d in (full, out):
        d.mkdir()
    train_in_subprocess(3, 1, "ntp", mcfg, views, full, tmp_path / "full-state", lambda s, m: None)

    def stop(step: int, metrics: dict) -> None:
        interrupt.request_stop()  # what the CLI's signal handler does

    try:
        with pytest.raises(interrupt.Interrupted, match=f"stopped under {under}; a rerun resumes from .*step_"):
            train_in_subprocess(3, 1, "ntp", mcfg, views, out, state, stop)
    finally:
        interrupt.clear()
    saved = latest_checkpoint(state)
    assert saved is not None and 0 < int(saved.name.split("_")[1]) < 400
    log = (state / "train.log").read_text()
    summary = train_in_subprocess(3, 1, "ntp", mcfg, views, out, state, lambda s, m: None)
    assert summary["resumed_from_step"] == int(saved.name.split("_")[1])
    assert (out / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()
    return log


@pytest.mark.e2e  # torchrun
def test_torchrun_ranks_stop_at_one_step_save_it_and_resume_to_the_same_bytes(views, tmp_path):
    """Issue 43 (43.7b): a stop relayed to torchrun as SIGTERM ended its ranks by the signal,
    saving nothing past the last periodic checkpoint. Each rank's SIGTERM is now a stop
    request; the ranks agree (a flag all-reduced each step) on the step to stop before, rank 0
    saves the state there, and the same call again resumes to the bytes of a run never stopped."""
    log = _stop_then_resume(views, tmp_path, ["train.models.ntp.nproc=2"], "torchrun")
    assert log.count("stopped at step") == 2  # both ranks, one step


@pytest.mark.e2e  # real training subprocesses
def test_a_sigkilled_run_resumes_to_the_same_final_weights(views, tmp_path):
    """Kill a real training process right after its first checkpoint; rerunning the same
    command resumes from it and ends bit-identical to an uninterrupted run."""
    recipe = views.parent / "recipe.yaml"
    sets = ["--set", "train.models.bad.steps=150", "--set", "train.models.bad.checkpoint_every=160"]
    ref = tmp_path / "ref"
    main(["--recipe", str(recipe), "--model", "bad", "--input", str(views), "--out", str(ref), *sets])
    ck, out = tmp_path / "ck", tmp_path / "out"
    args = [
        sys.executable,
        "-m",
        "platonic.core.train",
        "--recipe",
        str(recipe),
        "--model",
        "bad",
        "--input",
        str(views),
        "--out",
        str(out),
        "--checkpoints",
        str(ck),
        *sets,
    ]
    p = subprocess.Popen(args, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(ck.glob("step_*")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "model.safetensors").exists()
    first = sorted(ck.glob("step_*"))
    assert first and json.loads((first[0] / "state.json").read_text())["step"] < 150
    r = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["resumed_from_step"] > 0
    assert (out / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()
    # at most the two newest checkpoints are kept, each fully written (no temporary folders)
    kept = sorted(ck.iterdir())
    assert 1 <= len(kept) <= 2 and all(k.name.startswith("step_") for k in kept)


def test_checkpoints_hold_no_pickle(views, tmp_path):
    recipe = views.parent / "recipe.yaml"
    ck = tmp_path / "ck"
    main(
        [
            "--recipe",
            str(recipe),
            "--model",
            "good",
            "--input",
            str(views),
            "--out",
            str(tmp_path / "o"),
            "--checkpoints",
            str(ck),
            "--set",
            "train.models.good.checkpoint_every=16",
        ]
    )
    for step in ck.glob("step_*"):
        assert sorted(f.name for f in step.iterdir()) == ["model.safetensors", "optimizer.safetensors", "state.json"]
        opt = load_file(str(step / "optimizer.safetensors"))  # safetensors: tensors only, no code
        assert any(k.endswith("exp_avg") for k in opt)
        assert json.loads((step / "state.json").read_text())["samples_seen"] % 16 == 0


def test_streaming_is_deterministic_split_and_resumable(views):
    cfg = ModelConfig(kind="text_jepa", views="bad", batch_size=8, width=16, heads=2, data="stream", n_views=2)
    tok = load_tokenizer(views / "tokenizer.json")
    sp = special_ids(tok)

    def stream(rank=0, world=1):
        return StreamSampler(cfg, views, 5, tok, 16, sp, rank, world)

    a, b = stream(), stream()
    batches = [a() for _ in range(40)]  # several epochs of 288 rows / 8
    for x in batches:
        y = b()
        assert torch.equal(x["input_ids"], y["input_ids"])
    # resumed from a position, the stream continues exactly
    c = stream()
    for _ in range(23):
        c()
    d = stream()
    d.load_state_dict(c.state_dict())
    for _ in range(20):
        assert torch.equal(c()["input_ids"], d()["input_ids"])
    # two processes read disjoint row groups within an epoch
    r0, r1 = stream(0, 2), stream(1, 2)
    g0, g1 = set(r0._groups(0)[0]), set(r1._groups(0)[0])
    assert g0 and g1 and not g0 & g1 and len(g0 | g1) == len(r0.sizes)
    assert r0()["input_ids"].shape[1] == 4  # half the global batch each


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_subword_tokenizers_train_offline_with_the_builtin_special_ids(tmp_path, kind):
    from platonic.core.tokenizer import DEFAULT_SPECIALS, build_tokenizer, encode

    texts = [r["text"] for r in _corpus(48)]
    tok = build_tokenizer(texts, ViewsConfig(tokenizer=kind, vocab_size=120))
    assert special_ids(tok) == DEFAULT_SPECIALS
    ids, mask = encode(tok, ["a pink heart at the top.", "an unseenword"], 16)
    assert ids[0, 0].item() == DEFAULT_SPECIALS["cls"] and (ids[mask.bool()] != DEFAULT_SPECIALS["unk"]).any()
    assert tok.get_vocab_size() <= 120


def test_pretrained_tokenizer_special_ids_and_a_clear_offline_error(monkeypatch):
    from tokenizers import Tokenizer, models

    from platonic.core.tokenizer import pretrained_tokenizer

    # a BERT-like layout: specials are not 0..4, as in bert-base-uncased
    vocab = {"[PAD]": 0, "[unused0]": 1, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103, "red": 104}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    assert special_ids(tok) == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="needs the Hugging Face hub"):
        pretrained_tokenizer("platonic-test/no-such-tokenizer")


def test_embed_text_output_projector_and_layer(views, tmp_path):
    from platonic.core.features import run_embed

    recipe = views.parent / "recipe.yaml"
    ck = tmp_path / "good"
    main(
        [
            "--recipe",
            str(recipe),
            "--model",
            "good",
            "--input",
            str(views),
            "--out",
            str(ck),
            "--set",
            "train.models.good.steps=2",
        ]
    )
    ev = tmp_path / "ingest"
    ev.mkdir()
    pq.write_table(
        pa.table({"image_id": ["b", "a", "c"], "text": ["a red star.", "one blue ring", "pink"]}), ev / "eval.parquet"
    )
    cfg = ModelConfig(kind="text_jepa", width=32, layers=1, heads=2, proj_dim=16)
    (tmp_path / "p").mkdir()
    pooled = run_embed(cfg, ck, ev, tmp_path / "p", 2)
    assert pooled["layers"] == 2 and pooled["dim"] == 32
    (tmp_path / "q").mkdir()
    proj = run_embed(cfg, ck, ev, tmp_path / "q", 2, text_output="projector")
    assert proj["layers"] == 1 and proj["dim"] == 16
    (tmp_path / "r").mkdir()
    assert run_embed(cfg, ck, ev, tmp_path / "r", 2, layer=0)["layers"] == 1


def test_gradient_accumulation_matches_one_big_batch_for_next_token(views, tmp_path):
    """Two micro-batches of 8 give the step one batch of 16 gives (the loss is normalised by
    the step's token count, not per micro-batch)."""
    recipe = views.parent / "recipe.yaml"
    outs = {}
    for accum in (1, 2):
        outs[accum] = tmp_path / f"a{accum}"
        main(
            [
                "--recipe",
                str(recipe),
                "--model",
                "ntp",
                "--input",
                str(views),
                "--out",
                str(outs[accum]),
                "--set",
                f"train.models.ntp.grad_accum={accum}",
                "--set",
                "train.models.ntp.steps=4",
            ]
        )
    a, b = load_file(str(outs[1] / "model.safetensors")), load_file(str(outs[2] / "model.safetensors"))
    for k in a:
        assert torch.allclose(a[k], b[k], atol=2e-5), k


def test_a_stop_request_saves_the_state_between_steps_and_the_rerun_ends_bit_identical(views, tmp_path):
    """Ctrl-C's stop request (platonic.core.interrupt) during training: the loop stops
    between two steps, saves the resumable state there (periodic checkpoints are off) and
    raises Interrupted; the rerun resumes from it and ends bit-identical to an uninterrupted
    run. While no stop is requested nothing changes (the reference is a plain run)."""
    from platonic.core import interrupt
    from platonic.core.config import load_config
    from platonic.core.train import latest_checkpoint, run_train

    mcfg = load_config(views.parent / "recipe.yaml", ["train.models.bad.steps=40"]).train.models["bad"]
    ref, out, ck = tmp_path / "ref", tmp_path / "out", tmp_path / "ck"
    for d in (ref, out):
        d.mkdir()
    run_train(mcfg, 3, views, ref, show_progress=False)

    def stop_at_step_10(step: int, metrics: dict) -> None:
        if step == 10:
            interrupt.request_stop()  # what the SIGINT handler does

    try:
        with pytest.raises(interrupt.Interrupted, match="stopped at step 11 of 40; a rerun resumes from"):
            run_train(mcfg, 3, views, out, on_log=stop_at_step_10, state_dir=ck, show_progress=False)
    finally:
        interrupt.clear()
    assert not (out / "model.safetensors").exists()
    assert latest_checkpoint(ck).name == "step_000000011"
    assert not [p for p in ck.iterdir() if p.name.startswith(".")]  # no scratch left
    summary = run_train(mcfg, 3, views, out, state_dir=ck, show_progress=False)
    assert summary["resumed_from_step"] == 11
    assert (out / "model.safetensors").read_bytes() == (ref / "model.safetensors").read_bytes()


def test_a_stop_request_is_relayed_to_torchrun_as_sigterm(tmp_path, monkeypatch):
    """Issue 43 (row 43.7): Ctrl-C or SIGTERM to the CLI alone (a scheduler signals one
    process) while train_in_subprocess waits: torchrun got nothing and trained on, or was left
    running when the CLI exited. The stop request is now relayed to torchrun as SIGTERM (its
    own graceful stop: it signals its ranks and waits for them), then Interrupted names what a
    rerun resumes from. A stand-in plays torchrun: it records the signal and exits."""
    import threading
    from types import SimpleNamespace

    from platonic.core import interrupt
    from platonic.core.train import launch

    state, ready, got = tmp_path / "state", tmp_path / "ready", tmp_path / "got"
    (state / "step_000000050").mkdir(parents=True)
    (state / "step_000000050" / "state.json").write_text("{}")  # a periodic checkpoint
    fake = (
        "import pathlib, signal, sys, time\n"
        f"def on_term(s, f):\n    pathlib.Path({str(got)!r}).write_text(signal.Signals(s).name); sys.exit(1)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(launch, "torchrun_command", lambda *a, **k: [sys.executable, "-c", fake])
    mcfg = SimpleNamespace(nproc=2, total_steps=100, model_dump=lambda mode: {})

    def stop_when_ready() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        interrupt.request_stop()  # what the CLI's signal handler does

    threading.Thread(target=stop_when_ready, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(
            interrupt.Interrupted, match="stopped under torchrun; a rerun resumes from .*step_000000050"
        ):
            launch.train_in_subprocess(0, 1, "good", mcfg, tmp_path, tmp_path / "out", state, lambda s, m: None)
    finally:
        interrupt.clear()
    assert got.read_text() == "SIGTERM"
    assert time.monotonic() - t0 < 20


@pytest.mark.e2e  # real training processes
def test_a_lone_trainer_stops_at_its_next_step_saves_it_and_resumes_to_the_same_bytes(views, tmp_path):
    """A training in its own process (`train.parallel` > 1 runs each one so) stopped by Ctrl-C
    or SIGTERM to the CLI: the request is relayed as SIGTERM, the trainer saves its state at
    the step it was on (no periodic checkpoint configured) and exits; Interrupted names that
    checkpoint; the same call again resumes there and ends with the bytes of a run never
    stopped. The stop comes once its first metrics line is relayed."""
    log = _stop_then_resume(views, tmp_path, [], "its process")
    assert "stopped at step" in log  # the trainer's own words


def test_a_checkpoint_sweeps_the_half_written_checkpoints_of_killed_runs(views, tmp_path):
    """A run killed while writing a checkpoint left `.tmp-step_<n>-<pid>` in the state folder
    for good. The scratch is now named after host and pid, and the next checkpoint written
    there sweeps what dead processes of this host left; a live process's stays."""
    from platonic.core.durable import HOST

    ck = tmp_path / "ck"
    stale = ck / f".step_000000005.tmp-{HOST}-{dead_pid()}"
    live = ck / f".step_000000007.tmp-{HOST}-{os.getppid()}"
    for d in (stale, live):
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"half")
    args = ["--recipe", str(views.parent / "recipe.yaml"), "--model", "good", "--input", str(views)]
    main(
        [
            *args,
            "--out",
            str(tmp_path / "o"),
            "--checkpoints",
            str(ck),
            "--set",
            "train.models.good.checkpoint_every=16",
        ]
    )
    assert not stale.exists() and live.exists()
    assert [p.name for p in ck.glob("step_*")]


def test_a_forked_trainer_trains_the_bytes_of_a_fresh_process(views, tmp_path, monkeypatch):
    """The fork server (a lone trainer forked from a process that imported torch once) against
    `python -m platonic.core.train` as a fresh process (`PLATONIC_TRAIN_FORKSERVER=0`): the
    same summary steps and the same trained bytes; the forked one is the server's child."""
    from platonic.core import forkserver
    from platonic.core.config import load_config
    from platonic.core.train import launch

    mcfg = load_config(views.parent / "recipe.yaml", ["train.models.ntp.steps=12"]).train.models["ntp"]
    started = []
    real_start = launch._start
    monkeypatch.setattr(launch, "_start", lambda *a: started.append(real_start(*a)) or started[-1])
    outs = {}
    for fork in ("1", "0"):
        monkeypatch.setenv("PLATONIC_TRAIN_FORKSERVER", fork)
        outs[fork] = tmp_path / f"out{fork}"
        outs[fork].mkdir()
        launch.train_in_subprocess(3, 1, "ntp", mcfg, views, outs[fork], tmp_path / f"state{fork}", lambda s, m: None)
    assert isinstance(started[0], forkserver.ForkedTrainer) and isinstance(started[1], subprocess.Popen)
    assert started[0].returncode == 0 and started[1].returncode == 0
    assert (outs["1"] / "model.safetensors").read_bytes() == (outs["0"] / "model.safetensors").read_bytes()


def test_the_fork_server_reports_a_failure_and_a_signal_as_popen_does(views, tmp_path):
    """A trainer that fails (a model the recipe lacks) exits 1 with its error in its log; one
    killed by a signal reads -N; when its client goes (the server's stdin ends) a trainer still
    running is sent SIGTERM: it saves its state and exits 130, and the server then ends."""
    from platonic.core.forkserver import ForkServer
    from platonic.core.train import latest_checkpoint

    server = ForkServer()
    try:
        recipe = str(views.parent / "recipe.yaml")
        common = ["--recipe", recipe, "--input", str(views), "--out", str(tmp_path)]
        bad = server.run([*common, "--model", "nosuch"], tmp_path / "bad.log", tmp_path / "bad.rc")
        long = server.run(
            [*common, "--model", "ntp", "--set", "train.models.ntp.steps=100000"],
            tmp_path / "long.log",
            tmp_path / "long.rc",
        )
        deadline = time.monotonic() + 60
        while bad.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bad.returncode not in (None, 0)
        assert "nosuch" in (tmp_path / "bad.log").read_text()
        assert long.poll() is None  # training on
        long.send_signal(signal.SIGKILL)
        while long.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert long.returncode == -signal.SIGKILL
        endless = [*common, "--model", "ntp", "--set", "train.models.ntp.steps=100000"]
        orphan = server.run(
            [*endless, "--checkpoints", str(tmp_path / "ck"), "--metrics", str(tmp_path / "m.jsonl")],
            tmp_path / "orphan.log",
            tmp_path / "orphan.rc",
        )
        metrics = tmp_path / "m.jsonl"  # the child creates it at its first step
        while not (metrics.exists() and metrics.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.close()  # as when the flow's process dies: the server's stdin ends
    try:
        assert server._proc.wait(timeout=60) == 0
    finally:
        if orphan.poll() is None:  # not stopped: end it here, not after the test session
            orphan.send_signal(signal.SIGKILL)
    assert orphan.poll() == 130, (tmp_path / "orphan.log").read_text()  # stopped by the server's SIGTERM
    assert "stopped at step" in (tmp_path / "orphan.log").read_text()
    assert latest_checkpoint(tmp_path / "ck") is not None  # its state, saved at the stop
