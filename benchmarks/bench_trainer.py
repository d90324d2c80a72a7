"""Trainer overhead, tokens/s and MFU, every figure measured in one run.

    python benchmarks/bench_trainer.py --preset bert-mini                       # CPU
    python benchmarks/bench_trainer.py --preset bert-base --batch 8 --rounds 2 --steps 3
    python benchmarks/bench_trainer.py --preset bert-base --device cuda --precision bf16 \\
        --batch 256 --seq 128 --peak-tflops 989                               # one H200 (infra/gpu)

Interleaves rounds of (a) `platonic.core.train.train_model` — the loop the train stage runs
(schedule, accumulation, clipping, logging hook, checkpoint checks) — and (b) a bare PyTorch
loop on a copy of the same model with the same batch, objective and optimiser, and prints:
- ratio = bare step time / our step time (median over steps; the first step of each round is
  warm-up and not counted; target >= 0.9);
- tokens/s (tokens in the batch: views x batch x sequence, padding included);
- MFU = model FLOP/s / peak, with model FLOPs = 6 x non-embedding params x tokens + the
  attention term 12 x layers x width x seq x tokens (+ the LM head for a causal LM; + the
  projector once per text for a JEPA; SIGReg and the optimiser are not counted), and the
  peak a dense GEMM measured in this run (bf16 on a GPU with --precision bf16, else fp32), and
  against --peak-tflops (e.g. 989 = H200 dense bf16) when given.
Batches are random token ids of a fixed length (no tokenizer, no data loading).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from platonic.core.config import ModelConfig
from platonic.core.models import build_model, resolve_dims
from platonic.core.objectives import SIGReg, lejepa_loss
from platonic.core.train import resolve_device, train_model, use_bf16


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_peak(device: torch.device, bf16: bool, seconds: float = 1.0) -> float:
    """FLOP/s of a large square matmul on this device (the practical dense peak)."""
    n = 8192 if device.type == "cuda" else 1024
    dtype = torch.bfloat16 if bf16 and device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    _sync(device)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
        if device.type == "cuda" and reps % 10:
            continue
        _sync(device)
    _sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def model_flops_per_step(cfg: ModelConfig, model: torch.nn.Module, tokens: int, seq: int, vocab: int) -> float:
    layers, width, _ = resolve_dims(cfg.preset, cfg.width, cfg.layers, cfg.heads)
    if cfg.kind == "causal_lm":
        tr = model.lm.transformer
        non_emb = sum(p.numel() for p in tr.h.parameters()) + sum(p.numel() for p in tr.ln_f.parameters())
        non_emb += vocab * width  # the LM head matmul (weights tied to the embedding)
        return 6 * non_emb * tokens + 12 * layers * width * seq * tokens
    non_emb = sum(p.numel() for p in model.bert.encoder.parameters())
    proj = sum(p.numel() for p in model.proj.parameters())  # runs once per text, not per token
    return 6 * non_emb * tokens + 12 * layers * width * seq * tokens + 6 * proj * (tokens // seq)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="bert-mini")
    ap.add_argument("--kind", default="text_jepa", choices=["text_jepa", "causal_lm"])
    ap.add_argument("--batch", type=int, default=32, help="samples per step (each has --views texts for a JEPA)")
    ap.add_argument("--views", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--steps", type=int, default=6, help="steps per round (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--peak-tflops", type=float, default=None, help="nominal dense peak, e.g. 989 (H200 bf16)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    views = "good" if a.kind == "text_jepa" else "text"
    cfg = ModelConfig(
        kind=a.kind,
        views=views,
        preset=a.preset,
        steps=a.steps,
        batch_size=a.batch,
        n_views=a.views,
        device=a.device,
        precision=a.precision,
        compile=a.compile,
        optim={"warmup_frac": 0.0},
        attention="sdpa",
    )
    device = resolve_device(cfg)
    bf16 = use_bf16(cfg, device)
    g = torch.Generator().manual_seed(0)
    if a.kind == "text_jepa":
        ids = torch.randint(5, a.vocab, (a.views, a.batch, a.seq), generator=g)  # (V, N, T)
    else:
        ids = torch.randint(5, a.vocab, (a.batch, a.seq), generator=g)  # (N, T)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    tokens = ids.numel()

    class Fixed:  # the same batch every step, as the bare loop sees it
        global_batch = True

        def __call__(self):
            return batch

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    torch.manual_seed(0)
    ours = build_model(cfg, vocab_size=a.vocab, max_len=a.seq)
    bare = copy.deepcopy(ours).to(device).train()
    flops = model_flops_per_step(cfg, ours, tokens, a.seq, a.vocab)
    bare_net = torch.compile(bare) if a.compile else bare
    opt = torch.optim.AdamW(bare.parameters(), lr=1e-4, weight_decay=0.05, fused=device.type == "cuda" or None)
    sigreg = SIGReg(cfg.slices).to(device)
    dev_batch = {k: v.to(device) for k, v in batch.items()}

    def bare_step(step: int) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if a.kind == "text_jepa":
                x, m = dev_batch["input_ids"], dev_batch["attention_mask"]
                _, z = bare_net(x.flatten(0, 1), m.flatten(0, 1))
                loss, _ = lejepa_loss(z.view(a.views, a.batch, -1), sigreg, cfg.lam, step)
            else:
                loss = bare_net(dev_batch["input_ids"], dev_batch["attention_mask"], loss="mean")
                loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(bare.parameters(), 1.0)
        opt.step()

    peaks = [gemm_peak(device, bf16)]
    ours_t: list[float] = []
    bare_t: list[float] = []
    for r in range(a.rounds):
        stamps: list[float] = []
        train_model(
            cfg,
            ours,
            Fixed(),
            seed=r,
            log_every=1,
            show_progress=False,
            on_log=lambda s, m, st=stamps: (_sync(device), st.append(time.perf_counter())),
        )
        ours_t += [b - a_ for a_, b in zip(stamps[1:], stamps[2:], strict=False)]  # steps 2..k (1 = warm-up)
        t_prev = None
        for s in range(a.steps):
            bare_step(s)
            _sync(device)
            now = time.perf_counter()
            if t_prev is not None and s >= 2:
                bare_t.append(now - t_prev)
            t_prev = now
    peaks.append(gemm_peak(device, bf16))
    t_ours, t_bare = statistics.median(ours_t), statistics.median(bare_t)
    peak = max(peaks)
    params = sum(p.numel() for p in ours.parameters())
    out = {
        "preset": a.preset,
        "kind": a.kind,
        "device": str(device),
        "bf16": bf16,
        "compile": a.compile,
        "params": params,
        "tokens_per_step": tokens,
        "model_tflop_per_step": round(flops / 1e12, 4),
        "step_s_ours": round(t_ours, 5),
        "step_s_bare": round(t_bare, 5),
        "ratio_ours_vs_bare": round(t_bare / t_ours, 3),
        "tokens_per_s_ours": round(tokens / t_ours, 1),
        "tokens_per_s_bare": round(tokens / t_bare, 1),
        "gemm_peak_tflops_measured": round(peak / 1e12, 3),
        "mfu_vs_measured_gemm": round(flops / t_ours / peak, 4),
        "steps_timed": {"ours": len(ours_t), "bare": len(bare_t)},
    }
    if a.peak_tflops:
        out["mfu_vs_nominal"] = round(flops / t_ours / (a.peak_tflops * 1e12), 4)
        out["nominal_peak_tflops"] = a.peak_tflops
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
