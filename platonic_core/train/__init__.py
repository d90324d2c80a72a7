"""Training: one loop for every model kind, batches drawn by a seeded sampler.

Modules: `data` (texts / renders held in memory), `sampler` (seeded batch streams, in memory
or streamed from Parquet row groups), `checkpoint` (resumable training state), `loop`
(`train_model`, and `run_train`: the train stage), `launch` (`torchrun_command`, `entry_command`, the
entry point both run: `python -m platonic.core.train`, and `train_in_subprocess`).
"""

from .checkpoint import latest_checkpoint, load_train_state, save_train_state
from .data import ImageData, TextData, load_text_data, load_train_renders
from .launch import entry_command, main, relay_metrics, torchrun_command, train_in_subprocess
from .loop import (
    compute_loss,
    lr_at,
    resolve_device,
    run_train,
    slice_batch,
    snapshot_steps,
    train_model,
    use_bf16,
)
from .sampler import Sampler, StreamSampler, make_sampler, mask_tokens

__all__ = [
    "ImageData",
    "Sampler",
    "StreamSampler",
    "TextData",
    "compute_loss",
    "entry_command",
    "latest_checkpoint",
    "load_text_data",
    "load_train_renders",
    "load_train_state",
    "lr_at",
    "main",
    "make_sampler",
    "mask_tokens",
    "resolve_device",
    "run_train",
    "save_train_state",
    "slice_batch",
    "snapshot_steps",
    "relay_metrics",
    "torchrun_command",
    "train_model",
    "train_in_subprocess",
    "use_bf16",
]
