from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import yaml
from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic.core.config import to_plain
from platonic.core.stages import StageInstance, cache_key
from platonic.core.train import run_train, torchrun_command

from . import tracking
from .stage import execute


def checkpoint_dir(cfg, model: str, key: str) -> Path:
    """Resumable training state of one train instance: OUT_DIR/checkpoints/train-<model>/<key>/."""
    return Path(cfg.out_dir) / "checkpoints" / f"train-{model}" / key


def _log_jsonl(c, run_id: str, path: Path, offset: int) -> int:
    """Log the complete metrics lines after byte `offset` (the trainer appends while we
    read); returns the offset after the last complete line."""
    if not path.exists():
        return offset
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1
    for line in chunk[:end].decode().splitlines():
        m = json.loads(line)
        step = m.pop("step")
        tracking.log_metrics(c, run_id, {f"train/{k}": v for k, v in m.items()}, step=step)
    return offset + end


def _torchrun(cfg, model: str, input_dir: Path, out: Path, state: Path, c, run_id: str, nproc: int) -> dict:
    """Train under `torchrun --nproc-per-node nproc` (the same entry point a cluster runs);
    per-step metrics are read from the trainer's JSONL while it runs and logged to MLflow."""
    state.mkdir(parents=True, exist_ok=True)
    recipe = state / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(to_plain(cfg), sort_keys=False))
    metrics = state / "metrics.jsonl"
    metrics.unlink(missing_ok=True)  # a resumed run re-logs from its checkpoint's step on
    cmd = torchrun_command(recipe, model, input_dir, out, nproc, checkpoints=state, metrics=metrics)
    log_file = state / "torchrun.log"
    with open(log_file, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        done = 0
        while p.poll() is None:
            time.sleep(2)
            done = _log_jsonl(c, run_id, metrics, done)
    _log_jsonl(c, run_id, metrics, done)
    if p.returncode != 0:
        tail = log_file.read_text()[-3000:]
        raise RuntimeError(f"torchrun train:{model} exited with {p.returncode} (log: {log_file}):\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()  # timings: not part of the content-addressed artifact
    return summary


@task(name="train", cache_policy=NO_CACHE, task_run_name="train:{model}")
def train(cfg, model, input_m, mode, ctx):
    """Train one model; loss terms per step go to MLflow, the checkpoint is safetensors.
    Resumable state lives in OUT_DIR/checkpoints/train-<model>/<cache key>/ until the
    artifact is committed: a killed run rerun with the same recipe resumes from it."""
    inst = StageInstance("train", model)
    mcfg = cfg.train.models[model]
    state = checkpoint_dir(cfg, model, cache_key(inst, cfg, {input_m.stage: input_m.digest})).resolve()

    def compute(out, run_id):
        import torch

        torch.set_num_threads(cfg.train.threads)
        c = ctx.client

        def on_log(step, metrics):
            tracking.log_metrics(c, run_id, {f"train/{k}": v for k, v in metrics.items()}, step=step)

        if mcfg.nproc > 1:
            summary = _torchrun(cfg, model, input_m.path, out, state, c, run_id, mcfg.nproc)
        else:
            summary = run_train(mcfg, cfg.seed, input_m.path, out, on_log=on_log, desc=inst.id, state_dir=state)
        counts = {"steps": summary["steps"], "samples": summary["samples"], "parameters": summary["parameters"]}
        return counts, {k: v for k, v in summary.items() if k not in counts}

    manifest = execute(inst, cfg, {input_m.stage: input_m}, mode, ctx, compute,
                       log_files=("model.safetensors", "model.json", "tokenizer.json"))
    shutil.rmtree(state, ignore_errors=True)  # committed: the resumable state is no longer needed
    for d in (state.parent, state.parent.parent):  # and the folders it leaves empty
        try:
            d.rmdir()
        except OSError:
            break
    return manifest
