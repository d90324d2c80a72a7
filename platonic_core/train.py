"""The training loop: one function for every model kind, batches drawn by a seeded sampler.

Budgets are counted in samples (steps × batch size), as in the paper (21.6M / 900M samples).
A *sample* is one image's worth of positives for a JEPA (V views), one text for next-token.

    model = build_model(cfg, vocab_size=..., max_len=...)
    history = train_model(cfg, model, make_sampler(cfg, data, seed), seed=seed)
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from safetensors.torch import save_model
from tqdm.auto import tqdm

from .models import build_model, save_checkpoint
from .objectives import SIGReg, lejepa_loss, next_token_loss
from .tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID, encode, load_tokenizer


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


def mask_tokens(ids: torch.Tensor, rate: float, span: int, gen: torch.Generator) -> torch.Tensor:
    """A corrupted copy of `ids`: spans of `span` tokens starting with probability
    rate/span are replaced by [MASK]; specials and padding are never masked."""
    maskable = (ids != PAD_ID) & (ids != CLS_ID) & (ids != SEP_ID)
    starts = torch.rand(ids.shape, generator=gen) < rate / span
    hit = starts.clone()
    for s in range(1, span):
        hit[:, s:] |= starts[:, :-s]
    return ids.masked_fill(hit & maskable, MASK_ID)


def make_sampler(cfg, data: TextData | ImageData, seed: int) -> Callable[[], dict]:
    """Returns a function producing the next batch; the stream is fixed by `seed`."""
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

        return good
    if cfg.views == "bad":

        def bad() -> dict:
            rows = rng.choice(len(data.input_ids), size=n, replace=False)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])  # (N, T)
            views = torch.stack([mask_tokens(ids, cfg.mask_rate, cfg.mask_span, gen) for _ in range(v)])
            return {"input_ids": views, "attention_mask": mask.expand(v, -1, -1)}  # (V, N, T)

        return bad
    if cfg.views == "text":

        def text() -> dict:
            rows = rng.choice(len(data.input_ids), size=n, replace=False)
            ids, mask = _trim(data.input_ids[rows], data.attention_mask[rows])
            return {"input_ids": ids, "attention_mask": mask}  # (N, T)

        return text
    if cfg.views == "renders":
        r = data.renders.shape[1]

        def renders() -> dict:
            rows = rng.choice(len(data.renders), size=n, replace=False)
            which = np.stack([rng.choice(r, size=v, replace=r < v) for _ in rows], 1)  # (V, N)
            imgs = torch.from_numpy(np.stack([data.renders[rows, which[k]] for k in range(v)]))
            return {"images": imgs}  # (V, N, H, W, 3) uint8

        return renders
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


def compute_loss(cfg, model: torch.nn.Module, batch: dict, sigreg: SIGReg | None, step: int):
    if cfg.kind == "text_jepa":
        ids, mask = batch["input_ids"], batch["attention_mask"]  # (V, N, T)
        v, n = ids.shape[:2]
        _, z = model(ids.flatten(0, 1), mask.flatten(0, 1))  # (V*N, K)
        return lejepa_loss(z.view(v, n, -1), sigreg, cfg.lam, step, cfg.loss_form)
    if cfg.kind == "image_jepa":
        imgs = batch["images"]  # (V, N, H, W, 3)
        v, n = imgs.shape[:2]
        _, z = model(model.prepare(imgs.flatten(0, 1)))
        return lejepa_loss(z.view(v, n, -1), sigreg, cfg.lam, step, cfg.loss_form)
    if cfg.kind == "causal_lm":
        logits = model(batch["input_ids"], batch["attention_mask"])
        loss = next_token_loss(logits, batch["input_ids"], batch["attention_mask"])
        return loss, {"ntp": loss.item()}
    raise ValueError(f"unknown kind {cfg.kind!r}")


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
) -> dict:
    """Train `model` for cfg.steps; returns a summary (final loss terms, samples, timing).
    `on_snapshot(steps_done, model)` is called after each of `snapshot_steps(cfg.steps,
    cfg.snapshots)` but the last (the final model is the caller's)."""
    snaps = set(snapshot_steps(cfg.steps, cfg.snapshots)) - {cfg.steps}
    torch.manual_seed(seed)
    model.train()
    decay = [p for n_, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n_, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.optim.lr,
    )
    sigreg = SIGReg(cfg.slices, seed=seed) if cfg.kind in ("text_jepa", "image_jepa") else None
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    use_bf16 = device_type == "cuda" and torch.cuda.is_bf16_supported()
    terms: dict[str, float] = {}
    t0 = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=desc, unit="step", disable=not show_progress, leave=False, mininterval=0.5)
    for step in bar:
        lr = lr_at(step, cfg.steps, cfg.optim)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = sampler()
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=use_bf16):
            loss, terms = compute_loss(cfg, model, batch, sigreg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step()
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"{desc}: loss is {loss.item()} at step {step}")
        terms = {"loss": loss.item(), **terms}
        if step % log_every == 0 or step == cfg.steps - 1:
            bar.set_postfix({k: f"{v:.3g}" for k, v in terms.items()}, refresh=False)
            if on_log is not None:
                on_log(step, {**terms, "lr": lr, "samples": (step + 1) * cfg.batch_size})
        if step + 1 in snaps and on_snapshot is not None:
            on_snapshot(step + 1, model)
    bar.close()
    model.eval()
    seconds = time.perf_counter() - t0
    return {
        **{f"final_{k}": v for k, v in terms.items()},
        "steps": cfg.steps,
        "samples": cfg.steps * cfg.batch_size,
        "train_seconds": seconds,
        "samples_per_second": cfg.steps * cfg.batch_size / max(seconds, 1e-9),
    }


# ---- the train stage: artifacts in, checkpoint out ---------------------------------------


def load_text_data(views_dir: Path, cfg) -> tuple[TextData, object, int]:
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
    ids, mask = encode(tok, texts, max_len)
    return TextData(ids, mask, groups), tok, max_len


def load_train_renders(world_dir: Path) -> np.ndarray:
    split = pq.read_table(world_dir / "scenes.parquet", columns=["split", "render_row"]).to_pydict()
    rows = [r for s, r in zip(split["split"], split["render_row"], strict=True) if s == "train"]
    return np.load(world_dir / "renders.npy", mmap_mode="r")[rows]


def run_train(cfg, seed: int, input_dir: Path, out: Path, on_log=None, desc: str = "train") -> dict:
    """Train one model from its input artifact (views or world); write a safetensors checkpoint."""
    if cfg.kind == "image_jepa":
        renders = load_train_renders(input_dir)
        build_args = {"image_size": int(renders.shape[2])}
        data = ImageData(renders)
    else:
        data, tok, max_len = load_text_data(input_dir, cfg)
        build_args = {"vocab_size": tok.get_vocab_size(), "max_len": max_len}
        shutil.copy(input_dir / "tokenizer.json", out / "tokenizer.json")
    torch.manual_seed(seed)
    model = build_model(cfg, **build_args)

    def on_snapshot(steps_done: int, m: torch.nn.Module) -> None:
        (out / "snapshots").mkdir(exist_ok=True)
        save_model(m, str(out / "snapshots" / f"step_{steps_done:06d}.safetensors"))

    summary = train_model(cfg, model, make_sampler(cfg, data, seed), seed, on_log=on_log, desc=desc,
                          on_snapshot=on_snapshot)
    save_checkpoint(model, build_args, out)
    summary["parameters"] = sum(p.numel() for p in model.parameters())
    return summary
