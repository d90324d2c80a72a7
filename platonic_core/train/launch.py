"""`python -m platonic.core.train`: the entry point torchrun launches, the command line that
launches it, and the train stage's way of running it (`train_under_torchrun`).

The stage writes a train job (seed, threads, the model's config: exactly the fields the
stage declares) and runs `python -m platonic.core.train --recipe JOB.json` under
`torch.distributed.run`; rank 0 appends per-step metrics to a JSONL file, which
`relay_metrics` reads from a byte offset while the processes run and hands to `on_log`.
A cluster launcher runs the same entry point with a pipeline recipe (YAML) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from .. import interrupt
from ..cpus import AUTO, resolve_threads, set_torch_threads
from .checkpoint import latest_checkpoint
from .loop import rank_world, resolve_device, run_train

if TYPE_CHECKING:
    from ..config import ModelConfig


def torchrun_command(
    recipe: Path,
    model: str,
    input_dir: Path,
    out: Path,
    nproc: int,
    checkpoints: Path | None = None,
    metrics: Path | None = None,
    overrides: list[str] | None = None,
) -> list[str]:
    """The command a stage (or a cluster launcher) runs for `nproc` local processes."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "platonic.core.train",
        "--recipe",
        str(recipe),
        "--model",
        model,
        "--input",
        str(input_dir),
        "--out",
        str(out),
    ]
    if checkpoints is not None:
        cmd += ["--checkpoints", str(checkpoints)]
    if metrics is not None:
        cmd += ["--metrics", str(metrics)]
    for o in overrides or []:
        cmd += ["--set", o]
    return cmd


def relay_metrics(path: Path, offset: int, on_log: Callable[[int, dict], None]) -> int:
    """Hand over the complete metrics lines after byte `offset` (the trainer appends while
    we read); returns the offset after the last complete line."""
    if not path.exists():
        return offset
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1
    for line in chunk[:end].decode().splitlines():
        m = json.loads(line)
        step = m.pop("step")
        on_log(step, m)
    return offset + end


def train_under_torchrun(
    seed: int,
    threads: int,
    model: str,
    mcfg: ModelConfig,
    input_dir: Path,
    out: Path,
    state: Path,
    on_log: Callable[[int, dict], None],
) -> dict:
    """Train under `torchrun --nproc-per-node mcfg.nproc` (the entry point a cluster runs);
    returns the trainer's summary. Resumes from the checkpoints in `state`. A stop request
    (`platonic.core.interrupt`) is relayed to torchrun as SIGTERM, then raises Interrupted:
    the ranks end by that signal, so a rerun resumes from the last periodic checkpoint."""
    state.mkdir(parents=True, exist_ok=True)
    job = state / "job.json"
    job.write_text(
        json.dumps({"seed": seed, "threads": threads, "model": model, "config": mcfg.model_dump(mode="json")}, indent=1)
    )
    metrics = state / "metrics.jsonl"
    metrics.unlink(missing_ok=True)  # a resumed run re-logs from its checkpoint's step on
    cmd = torchrun_command(job, model, input_dir, out, mcfg.nproc, checkpoints=state, metrics=metrics)
    log_file = state / "torchrun.log"
    relayed = False
    with open(log_file, "w") as log, interrupt.polled():
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        done = 0
        while p.poll() is None:
            if interrupt.stop_requested() and not relayed:
                # Ctrl-C or SIGTERM reached this process, not necessarily torchrun (a
                # scheduler signals one process): SIGTERM is torchrun's own graceful stop,
                # it signals its ranks and waits for them. A second signal exits the CLI.
                p.send_signal(signal.SIGTERM)
                relayed = True
            time.sleep(0.1 if relayed else 2)
            done = relay_metrics(metrics, done, on_log)
    relay_metrics(metrics, done, on_log)
    if relayed and p.returncode != 0:  # else it finished as the request came: keep what it trained
        kept = f"a rerun resumes from {c}" if (c := latest_checkpoint(state)) else "nothing saved"
        raise interrupt.Interrupted(f"train:{model} stopped under torchrun; {kept}")
    if p.returncode != 0:
        tail = log_file.read_text()[-3000:]
        raise RuntimeError(f"torchrun train:{model} exited with {p.returncode} (log: {log_file}):\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()  # timings: not part of the content-addressed artifact
    return summary


def main(argv: list[str] | None = None) -> int:
    """Train one model of a recipe. Under torchrun (WORLD_SIZE > 1) every process runs this;
    the process group is gloo on CPU, nccl on GPU; rank 0 writes the outputs. Per-step
    metrics go to a JSONL file (`--metrics`), which the train stage logs to MLflow."""
    from ..config import ModelConfig, load_config

    ap = argparse.ArgumentParser(prog="python -m platonic.core.train", description=main.__doc__)
    ap.add_argument("--recipe", required=True, help="a pipeline recipe (YAML), or a train job (JSON) a stage wrote")
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, type=Path, help="views artifact (text models) or world (image)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--checkpoints", type=Path, default=None, help="resumable state; resumes when it holds one")
    ap.add_argument("--metrics", type=Path, default=None, help="per-step metrics, JSON lines (rank 0)")
    ap.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    if str(a.recipe).endswith(".json"):  # a train job the stage wrote: seed, threads, one model
        job = json.loads(Path(a.recipe).read_text())
        mcfg = ModelConfig.model_validate(job["config"])
        seed, threads = job["seed"], job["threads"]
    else:  # a pipeline recipe (a cluster launcher's form)
        cfg = load_config(a.recipe, a.overrides)
        if a.model not in cfg.train.models:
            ap.error(f"model {a.model!r} is not in the recipe (models: {', '.join(cfg.train.models)})")
        mcfg, seed, threads = cfg.train.models[a.model], cfg.seed, cfg.train.threads
    if threads == AUTO:  # the ranks on this node share its usable CPUs
        threads = max(1, resolve_threads(AUTO) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    set_torch_threads(threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        device = resolve_device(mcfg)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        rank = rank_world()[0]
        if rank == 0:
            a.out.mkdir(parents=True, exist_ok=True)
        log = open(a.metrics, "a") if a.metrics is not None and rank == 0 else None

        def on_log(step: int, metrics: dict) -> None:
            if log is not None:
                log.write(json.dumps({"step": step, **metrics}) + "\n")
                log.flush()

        summary = run_train(
            mcfg,
            seed,
            a.input,
            a.out,
            on_log=on_log,
            desc=f"train:{a.model}",
            state_dir=a.checkpoints,
            show_progress=False,
            log_every=1,
        )
        if rank == 0:
            (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
        if log is not None:
            log.close()
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0
