"""Training: one loop for every model kind, batches drawn by a seeded sampler.

Modules: `data` (texts / renders held in memory), `sampler` (seeded batch streams, in memory
or streamed from Parquet row groups), `checkpoint` (resumable training state), `loop`
(`train_model`, and `run_train`: the train stage), `launch` (`torchrun_command` and the entry
point torchrun runs: `python -m platonic.core.train`).
"""

from .checkpoint import latest_checkpoint, load_train_state, save_train_state
from .data import ImageData, TextData, load_text_data, load_train_renders
from .launch import main, relay_metrics, torchrun_command, train_under_torchrun
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
    "train_under_torchrun",
    "use_bf16",
]
