"""A next-token step against a JEPA step of the same width and batch, measured in one run.

    python benchmarks/bench_ntp_step.py                        # widths 64 and 256, V = 8,000
    python benchmarks/bench_ntp_step.py --widths 64 --vocab 30522 --rounds 5
    python benchmarks/bench_ntp_step.py --views STORE/artifacts/views/KEY     # a views artifact's batches
    python benchmarks/bench_ntp_step.py --precision fp32       # only fp32 (default: fp32, then native_bf16)

Each step is the train loop's own (`compute_loss`, backward, clipping, AdamW) on batches
shaped like configs/wordnet.yaml's: a JEPA sees 2 views x 128 texts of up to 32 tokens, the
next-token model 128 documents of up to 64 tokens (two texts in one sequence), with lengths
drawn from the same distribution and padded as the samplers pad. With `--views DIR` (a views
artifact: `platonic run configs/wordnet.yaml` writes one) the batches are the train stage's
own (its samplers, tokenizer and vocabulary) instead. The three step kinds are
interleaved, round by round, so a noisy neighbour slows them alike:
- jepa:      text_jepa on good views (SIGReg + prediction);
- ntp:       causal_lm, the output layer fused into the cross-entropy over real targets;
- ntp_ref:   the same model and batch through logits (B, T, V) and F.cross_entropy, the way
             the loss was computed before (the baseline the fused loss is measured against).
Prints the median step time of each and the ratios ntp / jepa (target <= 3) and
ntp_ref / ntp (the speed-up), and checks that the two next-token losses agree. Each width is
measured at each `--precision`, resolved as the train loop resolves a recipe's (`use_bf16`):
`native_bf16` is bf16 autocast where the CPU has bf16 arithmetic (AVX512-BF16, AMX), the
demo's precision; on a CPU without, it is fp32 and its row is skipped. malloc is set as a
trainer's is (`--allocator glibc`: glibc's defaults, the run to compare against).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from platonic.core.allocator import keep_freed_memory
from platonic.core.config import ModelConfig
from platonic.core.models import build_model
from platonic.core.objectives import SIGReg
from platonic.core.tokenizer import load_tokenizer, special_ids
from platonic.core.train.data import load_text_data
from platonic.core.train.loop import compute_loss, cpu_has_native_bf16, use_bf16
from platonic.core.train.sampler import make_sampler


def lengths(n: int, max_len: int, g: torch.Generator) -> torch.Tensor:
    """Text lengths between a quarter of max_len and max_len (WordNet: a lemma list is short,
    a definition with an example long)."""
    return torch.randint(max(2, max_len // 4), max_len + 1, (n,), generator=g)


def padded(n: int, max_len: int, vocab: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(5, vocab, (n, max_len), generator=g)
    mask = (torch.arange(max_len)[None] < lengths(n, max_len, g)[:, None]).long()  # (N, T)
    return ids.masked_fill(mask == 0, 0), mask


def ref_ntp_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The unfused baseline: full logits, shifted, F.cross_entropy over the real targets."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(ids, mask)  # (B, T, V)
    target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), target.reshape(-1), ignore_index=-100)


def train_step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[[], torch.Tensor], bf16: bool
) -> None:
    """One optimiser step as the train loop takes it: loss (under bf16 autocast if `bf16`),
    backward, clipping, AdamW."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_fn()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def measure(width: int, precision: str, a: argparse.Namespace, g: torch.Generator) -> dict:
    """Median step times of jepa / ntp / ntp_ref at one width and precision, interleaved
    round by round."""
    common = {
        "width": width,
        "layers": a.layers,
        "heads": max(1, width // 16),
        "steps": a.steps,
        "batch_size": a.batch,
        "precision": precision,
    }
    jcfg = ModelConfig(kind="text_jepa", views="good", lam=0.05, **common)
    ncfg = ModelConfig(kind="causal_lm", views="documents", tie_embeddings=False, **common)
    if a.views:  # the train stage's own batches: its tokenizer, samplers and padding
        sp = special_ids(load_tokenizer(a.views / "tokenizer.json"))
        jdata, tok, max_len = load_text_data(a.views, jcfg, sp)
        jbatch = make_sampler(jcfg, jdata, 0, sp)()
        nbatch = make_sampler(ncfg, load_text_data(a.views, ncfg, sp)[0], 0, sp)()
        vocab = tok.get_vocab_size()
    else:
        views = [padded(a.batch, a.max_len, a.vocab, g) for _ in range(2)]
        jbatch = {"input_ids": torch.stack([v[0] for v in views]), "attention_mask": torch.stack([v[1] for v in views])}
        nids, nmask = padded(a.batch, 2 * a.max_len, a.vocab, g)
        nbatch = {"input_ids": nids, "attention_mask": nmask}
        vocab, max_len = a.vocab, a.max_len
    torch.manual_seed(0)
    jepa = build_model(jcfg, vocab_size=vocab, max_len=max_len).train()
    ntp = build_model(ncfg, vocab_size=vocab, max_len=2 * max_len).train()
    sigreg = SIGReg(jcfg.slices)
    bf16 = use_bf16(ncfg, torch.device("cpu"))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        fused, ref = compute_loss(ncfg, ntp, nbatch, None, 0)[0].item(), ref_ntp_loss(ntp, nbatch).item()
    if abs(fused - ref) > (1e-2 if bf16 else 1e-4) * abs(ref):  # bf16: a 8-bit mantissa's rounding
        raise SystemExit(f"the fused next-token loss {fused} differs from the reference {ref}")
    jopt, nopt = torch.optim.AdamW(jepa.parameters(), lr=1e-4), torch.optim.AdamW(ntp.parameters(), lr=1e-4)
    kinds = {
        "jepa": (jepa, jopt, lambda: compute_loss(jcfg, jepa, jbatch, sigreg, 0)[0]),
        "ntp": (ntp, nopt, lambda: compute_loss(ncfg, ntp, nbatch, None, 0)[0]),
        "ntp_ref": (ntp, nopt, lambda: ref_ntp_loss(ntp, nbatch)),
    }
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(a.rounds):
        for name, (model, opt, fn) in kinds.items():
            for s in range(a.steps):
                t0 = time.perf_counter()
                train_step(model, opt, fn, bf16)
                if s:  # the first step of a round is warm-up
                    times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "width": width,
        "precision": precision,
        "bf16_autocast": bf16,
        "layers": a.layers,
        "batch": a.batch,
        "vocab": vocab,
        "real_tokens": {"jepa": int(jbatch["attention_mask"].sum()), "ntp": int(nbatch["attention_mask"].sum())},
        "threads": torch.get_num_threads(),
        "step_s": {k: round(v, 4) for k, v in med.items()},
        "ratio_ntp_vs_jepa": round(med["ntp"] / med["jepa"], 2),
        "ratio_ntp_ref_vs_jepa": round(med["ntp_ref"] / med["jepa"], 2),
        "speedup_fused_vs_ref": round(med["ntp_ref"] / med["ntp"], 2),
        "loss_fused_vs_ref": [round(fused, 5), round(ref, 5)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=32, help="tokens per text (a document holds two)")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="steps per round and kind (the first is warm-up)")
    ap.add_argument("--views", type=Path, default=None, help="a views artifact: its batches, not random ones")
    ap.add_argument("--precision", nargs="+", default=["fp32", "native_bf16"], choices=["fp32", "native_bf16"])
    ap.add_argument(
        "--allocator",
        default="trainer",
        choices=["trainer", "glibc"],
        help="malloc as a trainer sets it (platonic_core/allocator.py), or glibc's defaults",
    )
    a = ap.parse_args()
    if a.allocator == "trainer" and not keep_freed_memory():
        print("allocator: this process's malloc kept its settings (not glibc, or MALLOC_* set)", flush=True)
    g = torch.Generator().manual_seed(0)
    rows = []
    for precision in a.precision:
        if precision == "native_bf16" and not cpu_has_native_bf16():  # it would measure fp32 again
            print("native_bf16: this CPU has no bf16 arithmetic (it would run fp32): skipped", flush=True)
            continue
        for width in a.widths:
            rows.append(measure(width, precision, a, g))
            print(json.dumps(rows[-1]), flush=True)
    for precision in dict.fromkeys(r["precision"] for r in rows):
        worst = max(r["ratio_ntp_vs_jepa"] for r in rows if r["precision"] == precision)
        verdict = "ok" if worst <= 3 else "ABOVE TARGET"
        print(f"{precision}: next-token step / JEPA step at most {worst} (target <= 3): {verdict}")


if __name__ == "__main__":
    main()
