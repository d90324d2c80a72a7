"""Mutual kNN speed: our dense (chunked torch) search vs faiss exact search, same run.

    python benchmarks/bench_mutual_knn.py            # N = 10k, D = 768; then N = 100k via faiss
    python benchmarks/bench_mutual_knn.py --n 2000   # smaller

Prints wall times, the ratio dense / faiss (target <= 1.5) and the difference between the
two scores. Machines here are shared: compare the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from platonic.core.metrics import mutual_knn_per_sample


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def structured(rng: np.random.Generator, n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of one low-rank latent (so neighbourhoods mean something), L2-normalised."""
    z = rng.standard_normal((n, 32), dtype=np.float32)
    wa, wb = (rng.standard_normal((32, d), dtype=np.float32) for _ in range(2))
    a = z @ wa + 0.3 * rng.standard_normal((n, d), dtype=np.float32)
    b = z @ wb + 0.3 * rng.standard_normal((n, d), dtype=np.float32)
    return F.normalize(torch.from_numpy(a), dim=-1), F.normalize(torch.from_numpy(b), dim=-1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--large", type=int, default=100_000, help="N for the faiss-only run (0: skip)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    a, b = structured(rng, args.n, args.d)
    t_dense, s_dense = timed(lambda: mutual_knn_per_sample(a, b, args.k, "dense").mean().item())
    t_faiss, s_faiss = timed(lambda: mutual_knn_per_sample(a, b, args.k, "faiss").mean().item())
    print(f"N={args.n} D={args.d} k={args.k} threads={torch.get_num_threads()}")
    print(f"  dense  {t_dense:7.2f} s   mutual kNN {s_dense:.4f}")
    print(f"  faiss  {t_faiss:7.2f} s   mutual kNN {s_faiss:.4f}")
    print(
        f"  ratio dense/faiss = {t_dense / t_faiss:.2f}  (target <= 1.5)   "
        f"|score difference| = {abs(s_dense - s_faiss):.1e}"
        "  (float rounding can swap neighbours tied at the k-th place)"
    )
    if args.large:
        n = args.large
        a, b = structured(rng, n, args.d)
        t, s = timed(lambda: mutual_knn_per_sample(a, b, args.k, "faiss").mean().item(), repeat=1)
        print(f"N={n} through faiss: {t:.1f} s, mutual kNN {s:.4f}")


if __name__ == "__main__":
    main()
