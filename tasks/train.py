from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from platonic_core.stages import StageInstance
from platonic_core.train import run_train

from . import tracking
from .stage import execute


@task(name="train", cache_policy=NO_CACHE, task_run_name="train:{model}")
def train(cfg, model, input_m, mode, ctx):
    """Train one model; loss terms per step go to MLflow, the checkpoint is safetensors."""
    inst = StageInstance("train", model)
    mcfg = cfg.train.models[model]

    def compute(out, run_id):
        import torch

        torch.set_num_threads(cfg.train.threads)
        c = ctx.client

        def on_log(step, metrics):
            tracking.log_metrics(c, run_id, {f"train/{k}": v for k, v in metrics.items()}, step=step)

        summary = run_train(mcfg, cfg.seed, input_m.path, out, on_log=on_log, desc=inst.id)
        counts = {"steps": summary["steps"], "samples": summary["samples"], "parameters": summary["parameters"]}
        return counts, {k: v for k, v in summary.items() if k not in counts}

    return execute(inst, cfg, {input_m.stage: input_m}, mode, ctx, compute,
                   log_files=("model.safetensors", "model.json", "tokenizer.json"))
