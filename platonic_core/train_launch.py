"""The train stage under `torchrun`: several local processes, metrics relayed as they come.

The stage writes a train job (seed, threads, the model's config: exactly the fields the
stage declares) and runs `python -m platonic.core.train --job JOB` under
`torch.distributed.run`; rank 0 appends per-step metrics to a JSONL file, which this module
reads from a byte offset while the processes run and hands to `on_log`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .config import ModelConfig
from .train import torchrun_command


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


def train_under_torchrun(seed: int, threads: int, model: str, mcfg: ModelConfig, input_dir: Path, out: Path,
                         state: Path, on_log: Callable[[int, dict], None]) -> dict:
    """Train under `torchrun --nproc-per-node mcfg.nproc` (the entry point a cluster runs);
    returns the trainer's summary. Resumes from the checkpoints in `state`."""
    state.mkdir(parents=True, exist_ok=True)
    job = state / "job.json"
    job.write_text(json.dumps({"seed": seed, "threads": threads, "model": model,
                               "config": mcfg.model_dump(mode="json")}, indent=1))
    metrics = state / "metrics.jsonl"
    metrics.unlink(missing_ok=True)  # a resumed run re-logs from its checkpoint's step on
    cmd = torchrun_command(job, model, input_dir, out, mcfg.nproc, checkpoints=state, metrics=metrics)
    log_file = state / "torchrun.log"
    with open(log_file, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        done = 0
        while p.poll() is None:
            time.sleep(2)
            done = relay_metrics(metrics, done, on_log)
    relay_metrics(metrics, done, on_log)
    if p.returncode != 0:
        tail = log_file.read_text()[-3000:]
        raise RuntimeError(f"torchrun train:{model} exited with {p.returncode} (log: {log_file}):\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()  # timings: not part of the content-addressed artifact
    return summary
