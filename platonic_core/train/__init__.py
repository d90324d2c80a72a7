"""Training: one loop for every model kind, batches drawn by a seeded sampler.

Modules: `data` (texts / renders held in memory), `sampler` (seeded batch streams, in memory
or streamed from Parquet row groups), `checkpoint` (resumable training state), `loop`
(`train_model`, and `run_train`: the train stage), `launch` (`torchrun_command`, `entry_command`, the
entry point both run: `python -m platonic.core.train`, and `train_in_subprocess`). The names
below are imported from their modules on first use.
"""

import importlib
from typing import Any

# each public name -> the module that defines it, imported on first use (PEP 562): importing
# `launch`, the train stage's client side, pulls neither torch nor transformers (launch.py)
_HOME = {
    "latest_checkpoint": "checkpoint",
    "load_train_state": "checkpoint",
    "save_train_state": "checkpoint",
    "ImageData": "data",
    "TextData": "data",
    "load_text_data": "data",
    "load_train_renders": "data",
    "entry_command": "launch",
    "main": "launch",
    "relay_metrics": "launch",
    "torchrun_command": "launch",
    "train_in_subprocess": "launch",
    "compute_loss": "loop",
    "lr_at": "loop",
    "resolve_device": "loop",
    "run_train": "loop",
    "slice_batch": "loop",
    "snapshot_steps": "loop",
    "train_model": "loop",
    "use_bf16": "loop",
    "Sampler": "sampler",
    "StreamSampler": "sampler",
    "make_sampler": "sampler",
    "mask_tokens": "sampler",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)


__all__ = sorted(_HOME)
