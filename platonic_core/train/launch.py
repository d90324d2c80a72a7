"""`python -m platonic.core.train`: the entry point torchrun launches, and the command line
that launches it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .loop import rank_world, resolve_device, run_train


def torchrun_command(recipe: Path, model: str, input_dir: Path, out: Path, nproc: int,
                     checkpoints: Path | None = None, metrics: Path | None = None,
                     overrides: list[str] | None = None) -> list[str]:
    """The command a stage (or a cluster launcher) runs for `nproc` local processes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "platonic.core.train", "--recipe", str(recipe), "--model", model, "--input", str(input_dir),
           "--out", str(out)]
    if checkpoints is not None:
        cmd += ["--checkpoints", str(checkpoints)]
    if metrics is not None:
        cmd += ["--metrics", str(metrics)]
    for o in overrides or []:
        cmd += ["--set", o]
    return cmd


def main(argv: list[str] | None = None) -> int:
    """Train one model of a recipe. Under torchrun (WORLD_SIZE > 1) every process runs this;
    the process group is gloo on CPU, nccl on GPU; rank 0 writes the outputs. Per-step
    metrics go to a JSONL file (`--metrics`), which the train stage logs to MLflow."""
    from ..config import load_config

    ap = argparse.ArgumentParser(prog="python -m platonic.core.train", description=main.__doc__)
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, type=Path, help="views artifact (text models) or world (image)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--checkpoints", type=Path, default=None, help="resumable state; resumes when it holds one")
    ap.add_argument("--metrics", type=Path, default=None, help="per-step metrics, JSON lines (rank 0)")
    ap.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    cfg = load_config(a.recipe, a.overrides)
    if a.model not in cfg.train.models:
        ap.error(f"model {a.model!r} is not in the recipe (models: {', '.join(cfg.train.models)})")
    mcfg = cfg.train.models[a.model]
    torch.set_num_threads(cfg.train.threads)
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

        summary = run_train(mcfg, cfg.seed, a.input, a.out, on_log=on_log, desc=f"train:{a.model}",
                            state_dir=a.checkpoints, show_progress=False, log_every=1)
        if rank == 0:
            (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
        if log is not None:
            log.close()
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0
