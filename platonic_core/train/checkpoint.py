"""Resumable training state: safetensors tensors + JSON scalars, written atomically, the
newest two kept. Nothing is pickled."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from ..durable import scratch


def _flatten_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{pid}.{k}"] = v.detach().contiguous().cpu()
            else:
                scalars[f"{pid}.{k}"] = v
    return tensors, {"scalars": scalars, "param_groups": sd["param_groups"]}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, v in [*tensors.items(), *meta["scalars"].items()]:
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = v
    return {"state": state, "param_groups": meta["param_groups"]}


def save_train_state(
    folder: Path,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sampler,
    step: int,
    samples_seen: int,
    keep: int = 2,
) -> Path:
    """Write `folder/step_<n>/` atomically (a temporary folder renamed into place): weights
    and optimiser tensors as safetensors, optimiser scalars + RNG + sampler position as
    JSON. Keeps the newest `keep` checkpoints. Nothing here is pickled."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step_{step:09d}"
    tmp = scratch(folder, f"step_{step:09d}")  # a killed run's half-written checkpoint here is swept
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    tensors, meta = _flatten_optimizer(opt)
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    state = {
        "step": step,
        "samples_seen": samples_seen,
        "optimizer": meta,
        "data": sampler.state_dict(),
        "rng": {"numpy": np.random.get_state()[1].tolist(), "numpy_pos": int(np.random.get_state()[2])},
    }
    (tmp / "state.json").write_text(json.dumps(state))
    for f in tmp.iterdir():  # durable before the rename makes it visible
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    for old in sorted(folder.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(folder: Path | None) -> Path | None:
    if folder is None or not folder.is_dir():
        return None
    done = sorted(p for p in folder.glob("step_*") if (p / "state.json").is_file())
    return done[-1] if done else None


def load_train_state(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, sampler) -> dict:
    """Restore what `save_train_state` wrote; returns the state (step, samples_seen)."""
    load_model(model, str(path / "model.safetensors"))
    state = json.loads((path / "state.json").read_text())
    tensors = load_file(str(path / "optimizer.safetensors"))
    torch.set_rng_state(tensors.pop("rng.torch"))
    opt.load_state_dict(_unflatten_optimizer(tensors, state["optimizer"]))
    sampler.load_state_dict(state["data"])
    np.random.set_state(
        ("MT19937", np.array(state["rng"]["numpy"], dtype=np.uint32), state["rng"]["numpy_pos"], 0, 0.0)
    )
    return state
