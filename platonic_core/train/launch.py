"""`python -m platonic.core.train`: the entry point torchrun launches, the command line that
launches it, and the train stage's way of running it in processes of its own
(`train_in_subprocess`: torchrun for several processes, the entry point alone for one).

The stage writes a train job (seed, threads, the model's config: exactly the fields the
stage declares) and runs `python -m platonic.core.train --recipe JOB.json`, under
`torch.distributed.run` when `nproc` > 1; rank 0 appends per-step metrics to a JSONL file, which
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
from typing import TYPE_CHECKING, Any

from .. import interrupt
from ..allocator import keep_freed_memory
from ..cpus import AUTO, resolve_threads, set_torch_threads
from ..forkserver import ENTRY, ForkedTrainer, forking_available, trainer_server
from ..progress import LOG_EVERY, bar

if TYPE_CHECKING:
    from ..config import ModelConfig

# The client side (the commands, `train_in_subprocess`, `relay_metrics`) imports neither torch
# nor the loop, nor does the package (`__init__`, lazy): the flow's process starts its first
# trainer at once instead of after importing torch and transformers (3 s alone; 13 s in the
# demo, beside the text stages in its other thread). `main`, the trainer's side, imports them.


def entry_command(
    recipe: Path,
    model: str,
    input_dir: Path,
    out: Path,
    checkpoints: Path | None = None,
    metrics: Path | None = None,
    overrides: list[str] | None = None,
    log_every: int = 1,
) -> list[str]:
    """`python -m platonic.core.train ...`: one process (what torchrun runs per rank)."""
    cmd = [sys.executable, "-m", "platonic.core.train", "--recipe", str(recipe), "--model", model]
    cmd += ["--input", str(input_dir), "--out", str(out)]
    if checkpoints is not None:
        cmd += ["--checkpoints", str(checkpoints)]
    if metrics is not None:
        cmd += ["--metrics", str(metrics), "--log-every", str(log_every)]
    for o in overrides or []:
        cmd += ["--set", o]
    return cmd


def torchrun_command(recipe: Path, model: str, input_dir: Path, out: Path, nproc: int, **options: Any) -> list[str]:
    """The command a stage (or a cluster launcher) runs for `nproc` local processes: torchrun
    in front of `entry_command` (`options`: its keyword arguments)."""
    entry = entry_command(recipe, model, input_dir, out, **options)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *entry[1:]]


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


def train_in_subprocess(
    seed: int,
    threads: int,
    model: str,
    mcfg: ModelConfig,
    input_dir: Path,
    out: Path,
    state: Path,
    on_log: Callable[[int, dict], None],
    on_started: Callable[[], object] | None = None,
) -> dict:
    """Train in processes of its own: `torchrun --nproc-per-node mcfg.nproc` (the entry point
    a cluster runs), or that entry point alone for one process (trainings side by side:
    `train.parallel`); returns the trainer's summary. Resumes from the checkpoints in
    `state`. `on_started` is called once the process runs (what this process still has to
    do, beside it). A progress bar follows the relayed steps. A stop request
    (`platonic.core.interrupt`) is relayed as SIGTERM, then raises Interrupted: torchrun
    signals its ranks, which end by it (a rerun resumes from the last periodic checkpoint);
    a lone process saves its state at the step it was on, as an in-process run does."""
    state.mkdir(parents=True, exist_ok=True)
    job = state / "job.json"
    job.write_text(
        json.dumps({"seed": seed, "threads": threads, "model": model, "config": mcfg.model_dump(mode="json")}, indent=1)
    )
    metrics = state / "metrics.jsonl"
    metrics.unlink(missing_ok=True)  # a resumed run re-logs from its checkpoint's step on
    options = {"checkpoints": state, "metrics": metrics, "log_every": LOG_EVERY}  # as often as in-process
    if mcfg.nproc > 1:
        cmd, what = torchrun_command(job, model, input_dir, out, mcfg.nproc, **options), "torchrun"
    else:
        cmd, what = entry_command(job, model, input_dir, out, **options), "its process"
    log_file = state / "train.log"
    steps = bar(total=mcfg.total_steps, desc=f"train:{model}", unit="step")

    def relayed_step(step: int, m: dict) -> None:
        on_log(step, m)
        steps.update(step + 1 - steps.n)

    relayed = False
    # its own session: a terminal's Ctrl-C reaches this process, which relays it (below), not
    # the trainer directly (which would stop wherever it was, saving nothing)
    with interrupt.polled(), steps:
        p = _start(cmd, log_file, state / "train.rc")
        if on_started is not None:
            on_started()
        done = 0
        while p.poll() is None:
            if interrupt.stop_requested() and not relayed:
                # Ctrl-C or SIGTERM reached this process (a scheduler signals one process):
                # SIGTERM is torchrun's own graceful stop, and the lone trainer's stop request
                # (`main`). A second signal exits the CLI.
                p.send_signal(signal.SIGTERM)
                relayed = True
            time.sleep(0.1 if relayed else 0.5)
            done = relay_metrics(metrics, done, relayed_step)
        relay_metrics(metrics, done, relayed_step)
    if relayed and p.returncode != 0:  # else it finished as the request came: keep what it trained
        from .checkpoint import latest_checkpoint

        kept = f"a rerun resumes from {c}" if (c := latest_checkpoint(state)) else "nothing saved"
        raise interrupt.Interrupted(f"train:{model} stopped under {what}; {kept}")
    if p.returncode != 0:
        tail = log_file.read_text()[-3000:]
        raise RuntimeError(f"train:{model} under {what} exited with {p.returncode} (log: {log_file}):\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()  # timings: not part of the content-addressed artifact
    return summary


def _start(cmd: list[str], log_file: Path, status: Path) -> subprocess.Popen | ForkedTrainer:
    """The trainer's process, stdout and stderr to `log_file`, in a session of its own: a lone
    trainer forked by the fork server (torch and transformers already imported), torchrun (or
    a lone trainer where forking is off) as a fresh process."""
    if cmd[1:3] == ENTRY and forking_available():
        return trainer_server().run(cmd[3:], log_file, status)
    with open(log_file, "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _request_stop(signum: int, frame: object) -> None:
    """A trainer's SIGTERM or SIGINT (each rank's, under torchrun): a stop request the loop honours at its next step
    (it saves its state there), or KeyboardInterrupt while nothing polls (loading data)."""
    if not interrupt.polling():
        raise KeyboardInterrupt
    interrupt.request_stop()


def main(argv: list[str] | None = None) -> int:
    """Train one model of a recipe. Under torchrun (WORLD_SIZE > 1) every process runs this;
    the process group is gloo on CPU, nccl on GPU; rank 0 writes the outputs. Per-step
    metrics go to a JSONL file (`--metrics`), which the train stage logs to MLflow."""
    import torch
    import torch.distributed as dist

    from ..config import ModelConfig, load_config
    from .loop import rank_world, resolve_device, run_train

    ap = argparse.ArgumentParser(prog="python -m platonic.core.train", description=main.__doc__)
    ap.add_argument("--recipe", required=True, help="a pipeline recipe (YAML), or a train job (JSON) a stage wrote")
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, type=Path, help="views artifact (text models) or world (image)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--checkpoints", type=Path, default=None, help="resumable state; resumes when it holds one")
    ap.add_argument("--metrics", type=Path, default=None, help="per-step metrics, JSON lines (rank 0)")
    ap.add_argument("--log-every", type=int, default=1, metavar="STEPS", help="metrics every this many steps")
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
    keep_freed_memory()  # a launcher's rank as a flow's trainer: platonic_core/allocator.py
    set_torch_threads(threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # a stop request, not the end: ranks of several agree on the step to stop before (the
    # loop's `_stoppable`), rank 0 saves the state there and each exits 130
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _request_stop)
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
            log_every=a.log_every,
        )
        if rank == 0:
            (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
        if log is not None:
            log.close()
    except interrupt.Interrupted as e:  # stopped on request (every rank at one step): what it kept, no traceback
        print(e, file=sys.stderr)
        return 130
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0
