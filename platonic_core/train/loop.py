"""The training loop: one function for every model kind, batches drawn by a seeded sampler.

Budgets are counted in samples (steps × batch size), as in the paper (21.6M / 900M samples).
A *sample* is one image's worth of positives for a JEPA (V views), one text for next-token.

    model = build_model(cfg, vocab_size=..., max_len=...)
    history = train_model(cfg, model, make_sampler(cfg, data, seed), seed=seed)

`run_train` is the train stage: an input artifact (views or world) in, a checkpoint out.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import save_model

from .. import interrupt
from ..models import ImageEncoder, build_model, save_checkpoint
from ..models.pretrained import (
    init_bert_config,
    init_decoder_config,
    init_kind,
    init_source,
    init_tokenizer,
    load_init_decoder,
    load_init_weights,
)
from ..objectives import SIGReg, info_nce, lejepa_loss
from ..progress import LOG_EVERY, bar
from ..tokenizer import DEFAULT_SPECIALS, load_tokenizer, special_ids
from .checkpoint import latest_checkpoint, load_train_state, save_train_state
from .data import ImageData, load_text_data, load_train_renders
from .sampler import StreamSampler, make_sampler

if TYPE_CHECKING:
    from ..config import ModelConfig, OptimConfig


def lr_at(step: int, total: int, optim: OptimConfig) -> float:
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


def rank_world() -> tuple[int, int]:
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


def param_groups(cfg: ModelConfig, model: torch.nn.Module) -> list[dict]:
    """AdamW's groups: weight decay on matrices only; with `optim.head_lr` or `head_steps`,
    the projector (`proj.`) in groups of its own (its rate scaled, the encoder's held at 0 for
    the first head_steps). Without them, the two groups every run so far trained with.
    Frozen weights (requires_grad off: `train_blocks`) are in no group, so AdamW keeps no
    state for them."""
    wd, head_scale = cfg.optim.weight_decay, (cfg.optim.head_lr or cfg.optim.lr) / cfg.optim.lr
    split = cfg.head_steps > 0 or cfg.optim.head_lr is not None
    groups: dict[tuple[str, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        part = ("head" if name.startswith("proj.") else "encoder") if split else "all"
        groups.setdefault((part, p.ndim >= 2), []).append(p)
    order = [(part, d) for part in ("all", "encoder", "head") for d in (True, False) if (part, d) in groups]
    return [
        {
            "params": groups[(part, d)],
            "weight_decay": wd if d else 0.0,
            "part": part,
            "lr_scale": head_scale if part == "head" else 1.0,
        }
        for part, d in order
    ]


def compute_loss(
    cfg: ModelConfig,
    model: torch.nn.Module,
    batch: dict,
    sigreg: SIGReg | None,
    step: int,
    ntp_tokens: float | None = None,
):
    """(loss, {terms}). `ntp_tokens`: the next-token targets of the whole optimiser step
    (all processes, all micro-batches) divided by the world size; the loss is then this
    micro-batch's summed cross-entropy over it, so DDP's mean of gradients over processes
    and accumulation's sum over micro-batches give exactly the global mean over tokens."""
    if cfg.kind == "text_jepa":
        ids, mask = batch["input_ids"], batch["attention_mask"]  # (V, N, T)
        v, n = ids.shape[:2]
        if cfg.objective == "next_token":  # a decoder's own, on every view's text
            loss = model(ids.flatten(0, 1), mask.flatten(0, 1), loss="mean")
            return loss, {"ntp": loss.item()}
        emb, z = model(ids.flatten(0, 1), mask.flatten(0, 1))  # (V*N, D), (V*N, K)
        if cfg.objective == "infonce":  # on the pooled embedding, as a sentence encoder is trained
            e = emb.view(v, n, -1)
            return info_nce(e[0], e[1], cfg.temperature)
        return lejepa_loss(z.view(v, n, -1), sigreg, cfg.lam, step, cfg.loss_form)
    if cfg.kind == "image_jepa":
        imgs = batch["images"]  # (V, N, H, W, 3)
        v, n = imgs.shape[:2]
        _, z = model(ImageEncoder.prepare(imgs.flatten(0, 1)))
        return lejepa_loss(z.view(v, n, -1), sigreg, cfg.lam, step, cfg.loss_form)
    if cfg.kind == "causal_lm":
        if ntp_tokens is None:
            loss = model(batch["input_ids"], batch["attention_mask"], loss="mean")
        else:
            loss = model(batch["input_ids"], batch["attention_mask"], loss="sum") / ntp_tokens
        return loss, {"ntp": loss.item()}
    raise ValueError(f"unknown kind {cfg.kind!r}")


def _ntp_targets(batch: dict) -> int:
    return int(batch["attention_mask"][:, 1:].sum())


def resolve_device(cfg: ModelConfig) -> torch.device:
    want = cfg.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device: cuda, but torch sees no GPU")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def cpu_has_native_bf16() -> bool:
    """This CPU multiplies bf16 in hardware (AVX512-BF16 or AMX): there bf16 matrix products
    run 2.5-4x faster than fp32; elsewhere torch emulates them, slower than fp32."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def use_bf16(cfg: ModelConfig, device: torch.device) -> bool:
    """Whether the step runs under bf16 autocast: `precision` resolved on this device.
    auto: a GPU that supports bf16; native_bf16: that, or a CPU with native bf16
    (`cpu_has_native_bf16`); bf16: always (an error on a GPU without it); fp32: never."""
    p = cfg.precision
    if p == "fp32":
        return False
    if device.type == "cpu":  # CPU bf16 autocast when asked for, or where the CPU has it natively
        return p == "bf16" or (p == "native_bf16" and cpu_has_native_bf16())
    ok = torch.cuda.is_bf16_supported()
    if p == "bf16" and not ok:
        raise RuntimeError("precision: bf16, but this GPU does not support bf16")
    return ok


def _to(batch: dict, device: torch.device) -> dict:
    return batch if device.type == "cpu" else {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _stoppable(
    steps: Iterable[int], stop_before: Callable[[int], None], agree: Callable[[bool], bool] | None = None
) -> Iterator[int]:
    """The steps, polled for a stop request (Ctrl-C, SIGTERM) between two of them:
    `stop_before(step)` saves what a rerun resumes from and raises. Under torch.distributed,
    `agree(asked)` tells every rank whether any rank was asked, so all stop before the same
    step (torchrun signals its ranks one by one). Nothing else changes: an uninterrupted run
    trains the same bytes."""
    with interrupt.polled():
        for step in steps:
            asked = interrupt.stop_requested()
            if agree is not None:
                asked = agree(asked)
            if asked:
                stop_before(step)
            yield step


def _any_rank() -> Callable[[bool], bool]:
    """`agree` for `_stoppable` across the process group: a MAX all-reduce of a CPU flag, on
    gloo (a group of its own under NCCL: no device sync per step). Every rank calls it at the
    same point of every step, so it pairs up like any collective."""
    group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")

    def agree(asked: bool) -> bool:
        flag = torch.tensor([int(asked)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return bool(flag.item())

    return agree


def train_model(
    cfg: ModelConfig,
    model: torch.nn.Module,
    sampler: Callable[[], dict],
    seed: int,
    on_log: Callable[[int, dict], None] | None = None,
    log_every: int = LOG_EVERY,
    desc: str = "train",
    show_progress: bool = True,
    on_snapshot: Callable[[int, torch.nn.Module], None] | None = None,
    state_dir: Path | None = None,
) -> dict:
    """Train `model` for cfg.total_steps; returns a summary (final loss terms, samples, timing).
    `on_snapshot(steps_done, model)` is called with the initial weights (steps_done = 0) and
    after each of `snapshot_steps(steps, cfg.snapshots)` but the last (the final model is the
    caller's): a curve starts where training started.

    `sampler()` gives the global batch (`sampler.global_batch`: every process slices its
    rows) or this process's batch (streaming). Under torch.distributed the model is wrapped
    in DDP. `state_dir`: resumable checkpoints every `cfg.checkpoint_every` samples; when it
    holds one, training resumes from the newest."""
    steps = cfg.total_steps
    accum = cfg.grad_accum
    every = cfg.checkpoint_every
    rank, world = rank_world()
    if cfg.batch_size % (world * accum):
        raise ValueError(
            f"batch_size {cfg.batch_size} (global) is not divisible by {world} processes x grad_accum {accum}"
        )
    device = resolve_device(cfg)
    bf16 = use_bf16(cfg, device)
    snaps = set(snapshot_steps(steps, cfg.snapshots)) - {steps}
    torch.manual_seed(seed)
    model.to(device)
    model.train()
    opt = torch.optim.AdamW(param_groups(cfg, model), lr=cfg.optim.lr, fused=device.type == "cuda" or None)
    lejepa = cfg.kind in ("text_jepa", "image_jepa") and cfg.objective == "lejepa"
    sigreg = SIGReg(cfg.slices, seed=seed).to(device) if lejepa else None
    start = 0
    ckpt = latest_checkpoint(state_dir)
    if ckpt is not None:
        start = load_train_state(ckpt, model, opt, sampler)["step"]
    elif snaps and on_snapshot is not None and rank == 0:
        on_snapshot(0, model)  # the initial weights: where the curve starts
    net: torch.nn.Module = model
    if world > 1:
        # the projector's BatchNorm already normalises over the global batch (GlobalBatchNorm1d)
        net = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None
        )
    if cfg.compile:
        net = torch.compile(net)
    global_batch = getattr(sampler, "global_batch", True)
    # the loss of a micro-batch is a mean over it: scale so the step's gradient is the mean
    # over its micro-batches; NTP is exact over tokens (see compute_loss)
    exact_ntp = cfg.kind == "causal_lm" and (world > 1 or accum > 1)
    terms: dict[str, float] = {}
    t0 = time.perf_counter()
    t_log, samples_log, tokens_log = t0, start * cfg.batch_size, 0
    steps_bar = bar(range(start, steps), desc=desc, unit="step", disable=not show_progress or rank != 0)

    def checkpoint(steps_done: int, samples: int) -> None:  # rank 0 writes, every rank waits for it
        if rank == 0:
            save_train_state(state_dir, model, opt, sampler, steps_done, samples)
        if world > 1:
            dist.barrier()

    def stop_before(step: int) -> None:  # Ctrl-C: keep the state after `step` steps, then stop
        if state_dir is not None and step > start:
            checkpoint(step, step * cfg.batch_size)
        kept = f"a rerun resumes from {c}" if (c := latest_checkpoint(state_dir)) else "nothing saved"
        raise interrupt.Interrupted(f"{desc} stopped at step {step} of {steps}; {kept}")

    for step in _stoppable(steps_bar, stop_before, _any_rank() if world > 1 else None):
        lr = lr_at(step, steps, cfg.optim)
        for g in opt.param_groups:
            # .get: a checkpoint saved before the groups had parts resumes as one "all" part.
            # In the head phase the encoder's gradients are still computed (and counted by the
            # clipping norm); its rate of 0 is what holds it
            g["lr"] = lr * g.get("lr_scale", 1.0) * (g.get("part") == "head" or step >= cfg.head_steps)
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
            steps_bar.set_postfix({k: f"{v:.3g}" for k, v in terms.items()}, refresh=False)
            if on_log is not None and rank == 0:
                on_log(step, {**terms, "lr": lr, "samples": done, **rate})
        if step + 1 in snaps and on_snapshot is not None and rank == 0:
            on_snapshot(step + 1, model)
        if state_dir is not None and every and done // every > step * cfg.batch_size // every and step + 1 < steps:
            checkpoint(step + 1, done)
    steps_bar.close()
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
        "bf16_autocast": float(bf16),  # the recipe's precision as resolved on this machine
    }


# a decoder init's features read texts up to this many tokens: what hf_text_layer_features
# (the reference rows) truncates to
DECODER_FEATURE_LEN = 512


def check_decoder(cfg: ModelConfig, model: torch.nn.Module) -> None:
    """The recipe's train_blocks and objective against the decoder as built."""
    if cfg.train_blocks is not None and cfg.train_blocks > model.blocks:
        raise ValueError(f"train_blocks = {cfg.train_blocks}, but init {cfg.init!r} has {model.blocks} decoder blocks")
    c = model.decoder.config
    if cfg.objective == "next_token" and (not c.tie_word_embeddings or c.final_logit_softcapping):
        raise ValueError(
            f"objective next_token reads the output layer as the tied input embeddings without a logit "
            f"soft-cap; init {cfg.init!r} has tie_word_embeddings={c.tie_word_embeddings}, "
            f"final_logit_softcapping={c.final_logit_softcapping}"
        )


def run_train(
    cfg: ModelConfig,
    seed: int,
    input_dir: Path,
    out: Path,
    on_log=None,
    desc: str = "train",
    state_dir: Path | None = None,
    show_progress: bool = True,
    log_every: int = LOG_EVERY,
) -> dict:
    """Train one model from its input artifact (views or world); write a safetensors
    checkpoint (rank 0). `state_dir`: resumable training state (see `train_model`)."""
    rank, world = rank_world()
    # post-training: its weights, tokenizer and architecture (a BERT or a decoder)
    init, gguf = init_source(cfg.init) if cfg.init else (None, None)
    kind = init_kind(init, gguf) if init else None
    if init:
        cfg.check_init_kind(kind)
    if cfg.kind == "image_jepa":
        renders = load_train_renders(input_dir)
        build_args = {"image_size": int(renders.shape[2])}
        sampler = make_sampler(cfg, ImageData(renders), seed)
    else:
        tok = init_tokenizer(init, gguf) if init else load_tokenizer(input_dir / "tokenizer.json")
        sp = special_ids(tok)
        # the built-in layout keeps model.json as before (old checkpoints load unchanged)
        extra = {} if sp == DEFAULT_SPECIALS else {"special_ids": sp}
        if kind == "bert":
            extra["bert_config"] = init_bert_config(init)
        elif kind == "decoder":
            extra["decoder_config"] = init_decoder_config(init, gguf)
        if cfg.data == "stream":
            max_len = json.loads((input_dir / "meta.json").read_text())["max_len"]
            sampler = StreamSampler(cfg, input_dir, seed, tok, max_len, sp, rank, world)
        else:
            data, tok, max_len = load_text_data(input_dir, cfg, sp, tok)
            sampler = make_sampler(cfg, data, seed, sp)
            if cfg.views == "documents":  # positions for n_views texts in one sequence
                max_len *= cfg.n_views
        build_args = {"vocab_size": tok.get_vocab_size(), "max_len": max_len, **extra}
        # training reads the views' max_len; features read what the encoder can (as it ships).
        # A decoder's 32k positions are capped at the 512 tokens the reference row's features read
        if kind == "bert":
            build_args["max_len"] = extra["bert_config"]["max_position_embeddings"]
        elif kind == "decoder":
            build_args["max_len"] = min(extra["decoder_config"]["max_position_embeddings"], DECODER_FEATURE_LEN)
        if rank == 0 and init:  # the tokenizer the checkpoint reads with (padding off)
            tok.save(str(out / "tokenizer.json"))
        elif rank == 0:
            shutil.copy(input_dir / "tokenizer.json", out / "tokenizer.json")
    torch.manual_seed(seed)
    model = build_model(cfg, **build_args)
    if kind == "bert":
        load_init_weights(model, init)  # the projector stays as seeded above
    elif kind == "decoder":
        load_init_decoder(model, init, gguf)
        check_decoder(cfg, model)
        if cfg.train_blocks is not None:
            model.freeze_below(cfg.train_blocks)

    def on_snapshot(steps_done: int, m: torch.nn.Module) -> None:
        (out / "snapshots").mkdir(exist_ok=True)
        save_model(m, str(out / "snapshots" / f"step_{steps_done:06d}.safetensors"))

    summary = train_model(
        cfg,
        model,
        sampler,
        seed,
        on_log=on_log,
        desc=desc,
        on_snapshot=on_snapshot,
        state_dir=state_dir,
        show_progress=show_progress,
        log_every=log_every,
    )
    if rank == 0:
        save_checkpoint(model.cpu(), build_args, out)
    summary["parameters"] = sum(p.numel() for p in model.parameters())
    return summary
