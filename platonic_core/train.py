"""The training loop: one function for every model kind, batches drawn by a seeded sampler.

Budgets are counted in samples (steps × batch size), as in the paper (21.6M / 900M samples).
A *sample* is one image's worth of positives for a JEPA (V views), one text for next-token.

    model = build_model(cfg, vocab_size=..., max_len=...)
    history = train_model(cfg, model, make_sampler(cfg, data, seed), seed=seed)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm.auto import tqdm

from .models import ImageEncoder, build_model, save_checkpoint
from .objectives import SIGReg, lejepa_loss, next_token_loss
from .tokenizer import DEFAULT_SPECIALS, encode, load_tokenizer, special_ids


@dataclass
class TextData:
    """Tokenised texts (M, T) and, for good views, the text rows of each image."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    groups: list[np.ndarray] | None = None


@dataclass
class ImageData:
    renders: np.ndarray  # uint8 (n_scenes, R, H, W, 3)


def _trim(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = int(mask.sum(-1).max())
    return ids[..., :t], mask[..., :t]


def mask_tokens(ids: torch.Tensor, rate: float, span: int, gen: torch.Generator,
                specials: dict[str, int] | None = None) -> torch.Tensor:
    """A corrupted copy of `ids`: spans of `span` tokens starting with probability
    rate/span are replaced by [MASK]; specials and padding are never masked. `specials`:
    the tokenizer's ids (`tokenizer.special_ids`) when not the built-in layout."""
    sp = specials or DEFAULT_SPECIALS
    maskable = (ids != sp["pad"]) & (ids != sp["cls"]) & (ids != sp["sep"])
    starts = torch.rand(ids.shape, generator=gen) < rate / span
    hit = starts.clone()
    for s in range(1, span):
        hit[:, s:] |= starts[:, :-s]
    return ids.masked_fill(hit & maskable, sp["mask"])


class Sampler:
    """A seeded batch stream with a state: `sampler()` is the next global batch;
    `state_dict()` / `load_state_dict()` make a resumed run draw what the killed one would."""

    def __init__(self, draw: Callable[[], dict], rng: np.random.Generator, gen: torch.Generator):
        self._draw, self.rng, self.gen = draw, rng, gen
        self.global_batch = True  # every process draws the same global batch, then slices it

    def __call__(self) -> dict:
        return self._draw()

    def state_dict(self) -> dict:
        return {"numpy": self.rng.bit_generator.state, "torch": self.gen.get_state().tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["numpy"]
        self.gen.set_state(torch.tensor(state["torch"], dtype=torch.uint8))


def make_sampler(cfg, data: TextData | ImageData, seed: int, specials: dict[str, int] | None = None) -> Sampler:
    """The in-memory batch stream (global batches), fixed by `seed`."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    n = cfg.batch_size
    v = cfg.n_views
    population = len(data.renders) if isinstance(data, ImageData) else len(data.input_ids)
    if cfg.views != "good" and population < n:
        raise ValueError(f"{population} training samples for views {cfg.views!r}, fewer than batch_size {n}")
    if cfg.views == "good":
        groups = [g for g in data.groups if len(g) >= v]
        if len(groups) < n:
            raise ValueError(f"only {len(groups)} images have >= {v} texts; batch size is {n}")

        def good() -> dict:
            pick = rng.choice(len(groups), size=n, replace=False)
            rows = np.stack([rng.choice(groups[i], size=v, replace=False) for i in pick], 1)  # (V, N)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])  # (V, N, T)
            return {"input_ids": ids, "attention_mask": mask}

        return Sampler(good, rng, gen)
    if cfg.views == "bad":

        def bad() -> dict:
            rows = rng.choice(len(data.input_ids), size=n, replace=False)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])  # (N, T)
            views = torch.stack([mask_tokens(ids, cfg.mask_rate, cfg.mask_span, gen, specials) for _ in range(v)])
            return {"input_ids": views, "attention_mask": mask.expand(v, -1, -1)}  # (V, N, T)

        return Sampler(bad, rng, gen)
    if cfg.views == "text":

        def text() -> dict:
            rows = rng.choice(len(data.input_ids), size=n, replace=False)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])
            return {"input_ids": ids, "attention_mask": mask}  # (N, T)

        return Sampler(text, rng, gen)
    if cfg.views == "renders":
        r = data.renders.shape[1]

        def renders() -> dict:
            rows = rng.choice(len(data.renders), size=n, replace=False)
            which = np.stack([rng.choice(r, size=v, replace=r < v) for _ in rows], 1)  # (V, N)
            imgs = torch.from_numpy(np.stack([data.renders[rows, which[k]] for k in range(v)]))
            return {"images": imgs}  # (V, N, H, W, 3) uint8

        return Sampler(renders, rng, gen)
    raise ValueError(f"unknown views {cfg.views!r}")


def lr_at(step: int, total: int, optim) -> float:
    """Linear warmup, then cosine down to final_lr_frac · lr."""
    warm = max(1, int(optim.warmup_frac * total))
    if step < warm:
        return optim.lr * (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    return optim.lr * (optim.final_lr_frac + (1 - optim.final_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def snapshot_steps(steps: int, n: int) -> list[int]:
    """`n` log-spaced step counts ending at `steps` (each about twice the previous one for
    n=8 over a few hundred steps): where alignment-vs-samples curves are measured."""
    if n <= 0:
        return []
    first = max(1, round(steps / 2 ** (n - 1)))
    return sorted({int(round(x)) for x in np.geomspace(first, steps, n)})


def _dist() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _n_dim(key: str, x: torch.Tensor) -> int:
    """The sample axis of a batch tensor: (V, N, ...) views, (N, T) texts."""
    return 1 if key == "images" or x.ndim == 3 else 0


def slice_batch(batch: dict, part: int, parts: int) -> dict:
    """Rows part*N/parts .. (part+1)*N/parts of every tensor along its sample axis."""
    out = {}
    for k, x in batch.items():
        d = _n_dim(k, x)
        n = x.shape[d] // parts
        out[k] = x.narrow(d, part * n, n)
    return out


def compute_loss(cfg, model: torch.nn.Module, batch: dict, sigreg: SIGReg | None, step: int,
                 ntp_tokens: float | None = None):
    """(loss, {terms}). `ntp_tokens`: the next-token targets of the whole optimiser step
    (all processes, all micro-batches) divided by the world size; the loss is then this
    micro-batch's summed cross-entropy over it, so DDP's mean of gradients over processes
    and accumulation's sum over micro-batches give exactly the global mean over tokens."""
    if cfg.kind == "text_jepa":
        ids, mask = batch["input_ids"], batch["attention_mask"]  # (V, N, T)
        v, n = ids.shape[:2]
        _, z = model(ids.flatten(0, 1), mask.flatten(0, 1))  # (V*N, K)
        return lejepa_loss(z.view(v, n, -1), sigreg, cfg.lam, step, cfg.loss_form)
    if cfg.kind == "image_jepa":
        imgs = batch["images"]  # (V, N, H, W, 3)
        v, n = imgs.shape[:2]
        _, z = model(ImageEncoder.prepare(imgs.flatten(0, 1)))
        return lejepa_loss(z.view(v, n, -1), sigreg, cfg.lam, step, cfg.loss_form)
    if cfg.kind == "causal_lm":
        logits = model(batch["input_ids"], batch["attention_mask"])
        if ntp_tokens is None:
            loss = next_token_loss(logits, batch["input_ids"], batch["attention_mask"])
            return loss, {"ntp": loss.item()}
        loss = next_token_loss(logits, batch["input_ids"], batch["attention_mask"], reduction="sum") / ntp_tokens
        return loss, {"ntp": loss.item()}
    raise ValueError(f"unknown kind {cfg.kind!r}")


def _ntp_targets(batch: dict) -> int:
    return int(batch["attention_mask"][:, 1:].sum())


# ---- checkpoints: safetensors tensors + JSON scalars, atomic, newest two kept -----------


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


def save_train_state(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, sampler, step: int,
                     samples_seen: int, keep: int = 2) -> Path:
    """Write `folder/step_<n>/` atomically (a temporary folder renamed into place): weights
    and optimiser tensors as safetensors, optimiser scalars + RNG + sampler position as
    JSON. Keeps the newest `keep` checkpoints. Nothing here is pickled."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step_{step:09d}"
    tmp = folder / f".tmp-step_{step:09d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    tensors, meta = _flatten_optimizer(opt)
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    state = {"step": step, "samples_seen": samples_seen, "optimizer": meta, "data": sampler.state_dict(),
             "rng": {"numpy": np.random.get_state()[1].tolist(), "numpy_pos": int(np.random.get_state()[2])}}
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
    np.random.set_state(("MT19937", np.array(state["rng"]["numpy"], dtype=np.uint32), state["rng"]["numpy_pos"], 0, 0.0))
    return state


# ---- the loop --------------------------------------------------------------------------


def resolve_device(cfg) -> torch.device:
    want = cfg.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device: cuda, but torch sees no GPU")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def use_bf16(cfg, device: torch.device) -> bool:
    p = cfg.precision
    if p == "fp32":
        return False
    ok = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if p == "bf16" and device.type == "cuda" and not ok:
        raise RuntimeError("precision: bf16, but this GPU does not support bf16")
    return ok or (p == "bf16" and device.type == "cpu")  # CPU bf16 autocast when asked for


def _to(batch: dict, device: torch.device) -> dict:
    return batch if device.type == "cpu" else {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def train_model(
    cfg,
    model: torch.nn.Module,
    sampler: Callable[[], dict],
    seed: int,
    on_log: Callable[[int, dict], None] | None = None,
    log_every: int = 10,
    desc: str = "train",
    show_progress: bool = True,
    on_snapshot: Callable[[int, torch.nn.Module], None] | None = None,
    state_dir: Path | None = None,
) -> dict:
    """Train `model` for cfg.total_steps; returns a summary (final loss terms, samples, timing).
    `on_snapshot(steps_done, model)` is called after each of `snapshot_steps(steps,
    cfg.snapshots)` but the last (the final model is the caller's).

    `sampler()` gives the global batch (`sampler.global_batch`: every process slices its
    rows) or this process's batch (streaming). Under torch.distributed the model is wrapped
    in DDP. `state_dir`: resumable checkpoints every `cfg.checkpoint_every` samples; when it
    holds one, training resumes from the newest."""
    steps = cfg.total_steps
    accum = cfg.grad_accum
    every = cfg.checkpoint_every
    rank, world = _dist()
    if cfg.batch_size % (world * accum):
        raise ValueError(f"batch_size {cfg.batch_size} (global) is not divisible by {world} processes x "
                         f"grad_accum {accum}")
    device = resolve_device(cfg)
    bf16 = use_bf16(cfg, device)
    snaps = set(snapshot_steps(steps, cfg.snapshots)) - {steps}
    torch.manual_seed(seed)
    model.to(device)
    model.train()
    decay = [p for n_, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n_, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.optim.lr, fused=device.type == "cuda" or None,
    )
    sigreg = SIGReg(cfg.slices, seed=seed).to(device) if cfg.kind in ("text_jepa", "image_jepa") else None
    start = 0
    ckpt = latest_checkpoint(state_dir)
    if ckpt is not None:
        start = load_train_state(ckpt, model, opt, sampler)["step"]
    net: torch.nn.Module = model
    if world > 1:
        # the projector's BatchNorm already normalises over the global batch (GlobalBatchNorm1d)
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.compile:
        net = torch.compile(net)
    global_batch = getattr(sampler, "global_batch", True)
    # the loss of a micro-batch is a mean over it: scale so the step's gradient is the mean
    # over its micro-batches; NTP is exact over tokens (see compute_loss)
    exact_ntp = cfg.kind == "causal_lm" and (world > 1 or accum > 1)
    terms: dict[str, float] = {}
    t0 = time.perf_counter()
    t_log, samples_log, tokens_log = t0, start * cfg.batch_size, 0
    bar = tqdm(range(start, steps), desc=desc, unit="step", disable=not show_progress or rank != 0, leave=False,
               mininterval=0.5)
    for step in bar:
        lr = lr_at(step, steps, cfg.optim)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = sampler()
        mine = slice_batch(batch, rank, world) if global_batch and world > 1 else batch
        tokens_log += int(mine["attention_mask"].sum()) * world if "attention_mask" in mine else 0
        ntp_tokens = None
        if exact_ntp:  # the step's targets over all processes: the global batch's, or summed
            if global_batch:
                count = float(_ntp_targets(batch))
            else:
                total = torch.tensor(float(_ntp_targets(mine)))
                if world > 1:
                    dist.all_reduce(total)
                count = total.item()
            ntp_tokens = max(count, 1.0) / world
        opt.zero_grad(set_to_none=True)
        step_terms: dict[str, float] = {}
        for m in range(accum):
            micro = _to(slice_batch(mine, m, accum) if accum > 1 else mine, device)
            sync = m == accum - 1 or world == 1
            ctx = net.no_sync() if not sync and hasattr(net, "no_sync") else contextlib.nullcontext()
            with ctx, torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss, t = compute_loss(cfg, net, micro, sigreg, step, ntp_tokens)
                if accum > 1 and ntp_tokens is None:
                    loss = loss / accum
            with ctx:
                loss.backward()
            for k, v in {"loss": loss.item(), **t}.items():
                # the loss (already scaled) and exact NTP shares add up; other terms average
                step_terms[k] = step_terms.get(k, 0.0) + v / (1 if (k == "loss" or exact_ntp) else accum)
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step()
        if not math.isfinite(step_terms["loss"]):
            raise FloatingPointError(f"{desc}: loss is {step_terms['loss']} at step {step}")
        done = (step + 1) * cfg.batch_size
        if step % log_every == 0 or step == steps - 1:  # every process takes the same branch
            if world > 1:  # the step's global terms: shares and local means averaged over processes
                vec = torch.tensor(list(step_terms.values()), dtype=torch.float64)
                dist.all_reduce(vec)
                step_terms = dict(zip(step_terms, (vec / world).tolist(), strict=True))
            terms = step_terms
            now = time.perf_counter()
            dt = max(now - t_log, 1e-9)
            rate = {"samples_per_s": (done - samples_log) / dt, "tokens_per_s": tokens_log / dt}
            t_log, samples_log, tokens_log = now, done, 0
            bar.set_postfix({k: f"{v:.3g}" for k, v in terms.items()}, refresh=False)
            if on_log is not None and rank == 0:
                on_log(step, {**terms, "lr": lr, "samples": done, **rate})
        if step + 1 in snaps and on_snapshot is not None and rank == 0:
            on_snapshot(step + 1, model)
        if state_dir is not None and every and done // every > step * cfg.batch_size // every and step + 1 < steps:
            if rank == 0:
                save_train_state(state_dir, model, opt, sampler, step + 1, done)
            if world > 1:
                dist.barrier()
    bar.close()
    model.eval()
    seconds = time.perf_counter() - t0
    ran = steps - start
    return {
        **{f"final_{k}": v for k, v in terms.items()},
        "steps": steps,
        "samples": steps * cfg.batch_size,
        "resumed_from_step": start,
        "train_seconds": seconds,
        "samples_per_second": ran * cfg.batch_size / max(seconds, 1e-9),
    }


# ---- streaming: Parquet row groups of the views artifact ---------------------------------


class StreamSampler:
    """Batches read from the row groups of a views Parquet file, never all in memory.

    Per epoch the row groups are permuted by (seed, epoch) and dealt to processes
    round-robin (rank r reads groups r, r+W, ...); rows are shuffled within a group by
    (seed, epoch, group), and so are the good-view choices; bad-view masks are seeded by
    (seed, epoch, position). So the stream is a function of (seed, rank, world) alone, and
    the data position {epoch, pos} (rows consumed this epoch) is all a resume needs. Each
    process yields its own `batch_size / world` rows (`global_batch` is False); an epoch's
    tail shorter than a batch is dropped."""

    global_batch = False

    def __init__(self, cfg, views_dir: Path, seed: int, tok, max_len: int, specials: dict[str, int],
                 rank: int = 0, world: int = 1):
        self.cfg, self.seed, self.tok, self.max_len, self.specials = cfg, seed, tok, max_len, specials
        self.rank, self.world = rank, world
        self.n = cfg.batch_size // world
        self.v = cfg.n_views
        name, self.column = ("good_views.parquet", "texts") if cfg.views == "good" else ("texts.parquet", "text")
        self.file = pq.ParquetFile(views_dir / name)
        meta = self.file.metadata
        self.sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if len(self.sizes) < world:
            raise ValueError(f"{name} has {len(self.sizes)} row groups for {world} processes; write the views with "
                             "a smaller views.row_group_rows")
        self.epoch, self.pos, self.draws = 0, 0, 0
        self._cache: tuple[int, int, list, np.ndarray, list] | None = None
        self._check()

    def _check(self) -> None:
        if self.cfg.views == "good" and self.sizes[0]:
            first = self.file.read_row_group(0, columns=[self.column])[self.column].to_pylist()
            if min(len(g) for g in first) < self.v:
                raise ValueError(f"good views hold {min(len(g) for g in first)} texts per image, fewer than "
                                 f"n_views = {self.v}")
        if sum(self._groups(0)[1]) < self.n:
            raise ValueError(f"process {self.rank} has fewer rows than its batch {self.n}")

    def _groups(self, epoch: int) -> tuple[list[int], list[int]]:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.sizes))
        mine = [int(g) for g in order[self.rank :: self.world]]
        return mine, [self.sizes[g] for g in mine]

    def _group(self, epoch: int, k: int, g: int) -> tuple[list, np.ndarray, list]:
        if self._cache is None or self._cache[:2] != (epoch, k):
            rows = self.file.read_row_group(g, columns=[self.column])[self.column].to_pylist()
            rng = np.random.default_rng([self.seed, epoch, g])
            perm = rng.permutation(len(rows))
            picks = [rng.choice(len(rows[i]), size=self.v, replace=False) for i in perm] if self.cfg.views == "good" else []
            self._cache = (epoch, k, rows, perm, picks)
        return self._cache[2:]

    def _take(self) -> list:
        """The next `n` rows (for good views: the V chosen texts of each)."""
        mine, sizes = self._groups(self.epoch)
        out, pos, need = [], self.pos, self.n
        starts = np.cumsum([0, *sizes])
        while need:
            k = int(np.searchsorted(starts, pos, side="right") - 1)
            rows, perm, picks = self._group(self.epoch, k, mine[k])
            off = pos - int(starts[k])
            take = min(need, sizes[k] - off)
            for j in range(off, off + take):
                r = rows[perm[j]]
                out.append([r[c] for c in picks[j]] if self.cfg.views == "good" else r)
            pos, need = pos + take, need - take
        self.pos = pos
        return out

    def __call__(self) -> dict:
        self.draws += 1
        if self.pos + self.n > sum(self._groups(self.epoch)[1]):
            self.epoch, self.pos = self.epoch + 1, 0
        epoch, pos = self.epoch, self.pos
        rows = self._take()
        if self.cfg.views == "good":
            texts = [t for k in range(self.v) for t in (r[k] for r in rows)]  # view-major
            ids, mask = encode(self.tok, texts, self.max_len, self.specials)  # (V*N, T)
            return {"input_ids": ids.view(self.v, self.n, -1), "attention_mask": mask.view(self.v, self.n, -1)}
        ids, mask = encode(self.tok, rows, self.max_len, self.specials)  # (N, T)
        if self.cfg.views == "text":
            return {"input_ids": ids, "attention_mask": mask}
        gen = torch.Generator().manual_seed(int(np.random.default_rng([self.seed, epoch, pos, self.rank]).integers(2**62)))
        views = torch.stack([mask_tokens(ids, self.cfg.mask_rate, self.cfg.mask_span, gen, self.specials)
                             for _ in range(self.v)])
        return {"input_ids": views, "attention_mask": mask.expand(self.v, -1, -1)}  # (V, N, T)

    def state_dict(self) -> dict:
        """Rank 0's position and the batches drawn; every process recomputes its own
        position from `draws` (each draw takes `n` rows of its own groups)."""
        return {"epoch": self.epoch, "pos": self.pos, "draws": self.draws}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos, self._cache, self.draws = 0, 0, None, 0
        left = state["draws"]
        while left:  # row-group sizes only: no reading
            per_epoch = (sum(self._groups(self.epoch)[1]) - self.pos) // self.n
            if left < per_epoch:
                self.pos += left * self.n
                break
            left -= per_epoch
            self.epoch, self.pos = self.epoch + 1, 0
        self.draws = state["draws"]


# ---- the train stage: artifacts in, checkpoint out ---------------------------------------


def load_text_data(views_dir: Path, cfg, specials: dict[str, int] | None = None) -> tuple[TextData, object, int]:
    """Tokenised training texts for `cfg.views` from a views artifact."""
    tok = load_tokenizer(views_dir / "tokenizer.json")
    max_len = json.loads((views_dir / "meta.json").read_text())["max_len"]
    if cfg.views == "good":
        groups_txt = pq.read_table(views_dir / "good_views.parquet", columns=["texts"])["texts"].to_pylist()
        texts, groups = [], []
        for g in groups_txt:
            groups.append(np.arange(len(texts), len(texts) + len(g)))
            texts.extend(g)
    else:
        texts = pq.read_table(views_dir / "texts.parquet", columns=["text"])["text"].to_pylist()
        groups = None
    ids, mask = encode(tok, texts, max_len, specials)
    return TextData(ids, mask, groups), tok, max_len


def load_train_renders(world_dir: Path) -> np.ndarray:
    split = pq.read_table(world_dir / "scenes.parquet", columns=["split", "render_row"]).to_pydict()
    rows = [r for s, r in zip(split["split"], split["render_row"], strict=True) if s == "train"]
    return np.load(world_dir / "renders.npy", mmap_mode="r")[rows]


def run_train(cfg, seed: int, input_dir: Path, out: Path, on_log=None, desc: str = "train",
              state_dir: Path | None = None, show_progress: bool = True, log_every: int = 10) -> dict:
    """Train one model from its input artifact (views or world); write a safetensors
    checkpoint (rank 0). `state_dir`: resumable training state (see `train_model`)."""
    rank, world = _dist()
    if cfg.kind == "image_jepa":
        renders = load_train_renders(input_dir)
        build_args = {"image_size": int(renders.shape[2])}
        sampler = make_sampler(cfg, ImageData(renders), seed)
    else:
        tok = load_tokenizer(input_dir / "tokenizer.json")
        sp = special_ids(tok)
        # the built-in layout keeps model.json as before (old checkpoints load unchanged)
        extra = {} if sp == DEFAULT_SPECIALS else {"special_ids": sp}
        if cfg.data == "stream":
            max_len = json.loads((input_dir / "meta.json").read_text())["max_len"]
            sampler = StreamSampler(cfg, input_dir, seed, tok, max_len, sp, rank, world)
        else:
            data, tok, max_len = load_text_data(input_dir, cfg, sp)
            sampler = make_sampler(cfg, data, seed, sp)
        build_args = {"vocab_size": tok.get_vocab_size(), "max_len": max_len, **extra}
        if rank == 0:
            shutil.copy(input_dir / "tokenizer.json", out / "tokenizer.json")
    torch.manual_seed(seed)
    model = build_model(cfg, **build_args)

    def on_snapshot(steps_done: int, m: torch.nn.Module) -> None:
        (out / "snapshots").mkdir(exist_ok=True)
        save_model(m, str(out / "snapshots" / f"step_{steps_done:06d}.safetensors"))

    summary = train_model(cfg, model, sampler, seed, on_log=on_log, desc=desc, on_snapshot=on_snapshot,
                          state_dir=state_dir, show_progress=show_progress, log_every=log_every)
    if rank == 0:
        save_checkpoint(model.cpu(), build_args, out)
    summary["parameters"] = sum(p.numel() for p in model.parameters())
    return summary


# ---- `python -m platonic.core.train`: the entry point torchrun launches ------------------


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
    from .config import ModelConfig, load_config

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
    torch.set_num_threads(threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        device = resolve_device(mcfg)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        rank = _dist()[0]
        if rank == 0:
            a.out.mkdir(parents=True, exist_ok=True)
        log = open(a.metrics, "a") if a.metrics is not None and rank == 0 else None

        def on_log(step: int, metrics: dict) -> None:
            if log is not None:
                log.write(json.dumps({"step": step, **metrics}) + "\n")
                log.flush()

        summary = run_train(mcfg, seed, a.input, a.out, on_log=on_log, desc=f"train:{a.model}",
                            state_dir=a.checkpoints, show_progress=False, log_every=1)
        if rank == 0:
            (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
        if log is not None:
            log.close()
    finally:
        if world > 1:
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
