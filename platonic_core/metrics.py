"""Alignment metrics with the Platonic Representation Hypothesis semantics (minyoungg/platonic-rep).

mutual kNN (k = 10): L2-normalised features; neighbours by cosine similarity with the point
itself excluded; per sample |kNN_A ∩ kNN_B| / k; the mean over samples is the score.
Before scoring, features are clamped to ± a threshold from the q = 0.95 quantile of |features|,
as `prepare_features` does. `clamp="mean"` (the default) is what the published numbers used
(`measure_alignment.py` runs with `--precise` off, `remove_outliers(exact=False)`): each sample's
q-quantile of |x| over all its layers and dims, averaged over samples. `clamp="exact"` is their
`exact=True`: the int(q·numel)-th sorted |x| of the whole stack. `clamp="none"` only normalises.
With several layers per model every (layer_a, layer_b) pair is scored and the best kept.

Also, as defined there: cycle kNN (is i among the A-neighbours of its B-neighbours), CKA
with a linear or RBF kernel (biased HSIC), unbiased CKA (Song et al. 2012 HSIC), and CKNNA
(unbiased HSIC restricted to mutual k-NN pairs). Neighbour search is dense (row chunks of
the similarity matrix, bounded memory) or faiss exact inner-product search (large N).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

KNN_CHUNK = 4096  # rows of the similarity matrix held at once: memory O(chunk · N)


def check_k(k: int, n: int) -> None:
    """k nearest neighbours among n samples need 1 <= k < n (self is excluded)."""
    if k < 1:
        raise ValueError(f"k = {k}: the number of neighbours must be at least 1")
    if n < k + 1:
        raise ValueError(f"need at least k+1 = {k + 1} samples for {k}-NN, got {n}")


def knn_indices(feats: torch.Tensor, k: int, backend: str = "dense") -> torch.Tensor:
    """(N, D) L2-normalised features -> (N, k) neighbour indices by inner product, self excluded."""
    n = feats.size(0)
    check_k(k, n)
    if backend == "faiss":
        return _knn_faiss(feats, k)
    if backend != "dense":
        raise ValueError(f"unknown kNN backend {backend!r} (dense or faiss)")
    out = torch.empty(n, k, dtype=torch.long)
    for s in range(0, n, KNN_CHUNK):
        sim = feats[s : s + KNN_CHUNK] @ feats.T  # (chunk, N)
        rows = torch.arange(sim.size(0))
        sim[rows, rows + s] = float("-inf")  # self excluded
        out[s : s + KNN_CHUNK] = sim.topk(k, dim=1).indices
    return out


def _knn_faiss(feats: torch.Tensor, k: int) -> torch.Tensor:
    """Exact inner-product search (IndexFlatIP) for k+1 neighbours, then self removed."""
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the faiss backend needs faiss: pip install faiss-cpu (or faiss-gpu-cu12 with CUDA)") from e
    x = np.ascontiguousarray(feats.numpy().astype(np.float32))
    index = faiss.IndexFlatIP(x.shape[1])
    if hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0:
        # faiss-gpu (the same package API): the exact index on GPU 0, same results
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    index.add(x)
    _, idx = index.search(x, k + 1)  # (N, k+1)
    n = x.shape[0]
    is_self = idx == np.arange(n)[:, None]
    # drop self where found, otherwise (ties) the (k+1)-th neighbour
    keep = ~is_self
    keep[~is_self.any(1), k] = False
    return torch.from_numpy(idx[keep].reshape(n, k).astype(np.int64))


def mutual_knn_per_sample(a: torch.Tensor, b: torch.Tensor, k: int = 10, backend: str = "dense") -> torch.Tensor:
    """Per-sample overlap |kNN_a(i) ∩ kNN_b(i)| / k for already-normalised a: (N, Da), b: (N, Db)."""
    if a.size(0) != b.size(0):
        raise ValueError(f"feature sets have different sample counts: {a.size(0)} vs {b.size(0)}")
    ka, kb = knn_indices(a, k, backend), knn_indices(b, k, backend)
    return knn_overlap(ka, kb)


def knn_overlap(ka: torch.Tensor, kb: torch.Tensor) -> torch.Tensor:
    """Per row, the fraction of kb's neighbours that are also ka's: (N, k), (N, k) -> (N,)."""
    k = ka.size(1)
    hits = (kb.unsqueeze(2) == ka.unsqueeze(1)).any(2)  # (N, k)
    return hits.float().sum(1) / k


def cycle_knn_per_sample(a: torch.Tensor, b: torch.Tensor, k: int = 10, backend: str = "dense") -> torch.Tensor:
    """Per sample i: 1 if i is an A-neighbour of one of its B-neighbours (platonic-rep cycle_knn)."""
    ka, kb = knn_indices(a, k, backend), knn_indices(b, k, backend)
    cycles = ka[kb]  # (N, k, k)
    return (cycles == torch.arange(a.size(0)).view(-1, 1, 1)).flatten(1).any(1).float()


def _hsic_biased(kk: torch.Tensor, ll: torch.Tensor) -> torch.Tensor:
    n = kk.size(0)
    h = torch.eye(n, dtype=kk.dtype) - 1.0 / n
    return torch.trace(kk @ h @ ll @ h)


def _hsic_unbiased(kk: torch.Tensor, ll: torch.Tensor) -> torch.Tensor:
    """Song et al. (2012), eq. 5."""
    m = kk.size(0)
    kt, lt = kk.clone().fill_diagonal_(0), ll.clone().fill_diagonal_(0)
    value = (kt * lt.T).sum() + kt.sum() * lt.sum() / ((m - 1) * (m - 2)) - 2 * (kt @ lt).sum() / (m - 2)
    return value / (m * (m - 3))


def cka(a: torch.Tensor, b: torch.Tensor, kernel: str = "linear", sigma: float = 1.0, unbiased: bool = False) -> float:
    """Centered kernel alignment of (N, Da), (N, Db); float64 for stability."""
    a, b = a.double(), b.double()
    if kernel == "linear" and not unbiased and a.size(0) > a.size(1) + b.size(1):
        # the same biased HSIC in feature space: trace(K H L H) = ||(HA)^T (HB)||_F^2 for
        # K = A A^T, L = B B^T (H is idempotent). Memory O(N·D + D^2), not N x N matrices
        # (28.8 GB at N = 60k); the kernel form below is kept where N is the smaller side.
        ac, bc = a - a.mean(0), b - b.mean(0)
        hsic_ab, hsic_aa, hsic_bb = ((x.T @ y).square().sum() for x, y in ((ac, bc), (ac, ac), (bc, bc)))
        return (hsic_ab / (torch.sqrt(hsic_aa * hsic_bb) + 1e-6)).item()
    if kernel == "linear":
        kk, ll = a @ a.T, b @ b.T
    elif kernel == "rbf":
        kk = torch.exp(-(torch.cdist(a, a) ** 2) / (2 * sigma**2))
        ll = torch.exp(-(torch.cdist(b, b) ** 2) / (2 * sigma**2))
    else:
        raise ValueError(f"unknown CKA kernel {kernel!r} (linear or rbf)")
    hsic = _hsic_unbiased if unbiased else _hsic_biased
    return (hsic(kk, ll) / (torch.sqrt(hsic(kk, kk) * hsic(ll, ll)) + 1e-6)).item()


def cknna(a: torch.Tensor, b: torch.Tensor, k: int = 10) -> float:
    """CKNNA (platonic-rep, unbiased): unbiased HSIC of the linear kernels restricted to
    pairs that are k-NN in both spaces, normalised like CKA."""
    if k < 2:
        raise ValueError("CKNNA requires k >= 2")
    a, b = a.double(), b.double()
    kk, ll = a @ a.T, b @ b.T
    n = kk.size(0)

    def mask(g: torch.Tensor) -> torch.Tensor:
        idx = g.clone().fill_diagonal_(float("-inf")).topk(k, dim=1).indices
        return torch.zeros(n, n, dtype=g.dtype).scatter_(1, idx, 1.0)

    mk, ml = mask(kk), mask(ll)

    def sim(g1: torch.Tensor, m1: torch.Tensor, g2: torch.Tensor, m2: torch.Tensor) -> torch.Tensor:
        m = m1 * m2
        return _hsic_unbiased(m * g1, m * g2)

    return (sim(kk, mk, ll, ml) / (torch.sqrt(sim(kk, mk, kk, mk) * sim(ll, ml, ll, ml)) + 1e-6)).item()


BOOTSTRAP_BATCH = 256  # resamples (and jackknife means) per vectorised call: memory O(256 · N)
METRICS = ("mutual_knn", "cycle_knn", "cka", "cka_rbf", "unbiased_cka", "cknna")
# N x N float64 matrices alive at once, about (the kernels, their centred / masked copies and a
# product): these metrics need O(N^2) memory. Linear `cka` is computed in feature space (O(N·D))
# and the kNN metrics in row chunks, so they are not listed.
KERNEL_MATRICES = {"cka_rbf": 5, "unbiased_cka": 5, "cknna": 8}


def available_memory() -> int | None:
    """Bytes the system can give without swapping (Linux MemAvailable); None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_kernel_memory(metric: str, n: int, available: int | None = None) -> None:
    """Refuse, before anything is allocated, a kernel metric whose N x N matrices do not fit."""
    if metric not in KERNEL_MATRICES:
        return
    need = KERNEL_MATRICES[metric] * n * n * 8
    available = available_memory() if available is None else available
    if available is not None and need > available:
        raise ValueError(
            f"{metric} at N = {n:,} needs about {need / 1e9:.1f} GB ({KERNEL_MATRICES[metric]} N x N float64 "
            f"matrices), {available / 1e9:.1f} GB available: use --metric cka (linear, O(N·D) memory) or "
            "mutual_knn, or fewer samples"
        )


def score_pair(
    a: torch.Tensor, b: torch.Tensor, metric: str, k: int, backend: str = "dense"
) -> tuple[float, torch.Tensor | None]:
    """One layer pair -> (score, per-sample scores or None for kernel metrics)."""
    if metric == "mutual_knn":
        ps = mutual_knn_per_sample(a, b, k, backend)
        return ps.mean().item(), ps
    if metric == "cycle_knn":
        ps = cycle_knn_per_sample(a, b, k, backend)
        return ps.mean().item(), ps
    if metric == "cka":
        return cka(a, b), None
    if metric == "cka_rbf":
        return cka(a, b, kernel="rbf"), None
    if metric == "unbiased_cka":
        return cka(a, b, unbiased=True), None
    if metric == "cknna":
        return cknna(a, b, k), None
    raise ValueError(f"unknown metric {metric!r}; available: {', '.join(METRICS)}")


def mutual_knn(a: torch.Tensor, b: torch.Tensor, k: int = 10, backend: str = "dense") -> float:
    return (
        mutual_knn_per_sample(F.normalize(a.float(), dim=-1), F.normalize(b.float(), dim=-1), k, backend).mean().item()
    )


@dataclass(frozen=True)
class AlignmentScore:
    score: float
    layer_a: int
    layer_b: int
    ci_low: float | None  # None for kernel metrics (no per-sample decomposition)
    ci_high: float | None
    per_layer: list[list[float]]  # (La, Lb) scores
    metric: str = "mutual_knn"

    def as_dict(self) -> dict:
        return {
            self.metric: self.score,
            "ci95": [self.ci_low, self.ci_high],
            "layer_a": self.layer_a,
            "layer_b": self.layer_b,
        }


def as_layers(x) -> list[torch.Tensor]:
    """(N, D), (L, N, D) or a list of (N, D_l) -> list of float (N, D_l) tensors, checked."""
    if isinstance(x, (list, tuple)):
        layers = [torch.as_tensor(_float32(np.asarray(t), i), dtype=torch.float32) for i, t in enumerate(x)]
    else:
        t = torch.as_tensor(_float32(np.asarray(x)), dtype=torch.float32)
        if t.ndim == 2:
            t = t.unsqueeze(0)
        if t.ndim != 3:
            raise ValueError(f"features must be (N, D) or (L, N, D), got shape {tuple(t.shape)}")
        layers = list(t)
    if not layers:
        raise ValueError("no feature layers")
    for i, t in enumerate(layers):
        if t.ndim != 2:
            raise ValueError(f"layer {i}: expected (N, D), got shape {tuple(t.shape)}")
        if 0 in t.shape:  # (N, 0) ended in an IndexError deep in the clamp
            raise ValueError(
                f"layer {i}: shape {tuple(t.shape)} holds no {'samples' if t.size(0) == 0 else 'features'}"
            )
        if t.size(0) != layers[0].size(0):
            raise ValueError(f"layer {i} has {t.size(0)} samples, layer 0 has {layers[0].size(0)}")
        if not torch.isfinite(t).all():
            raise ValueError(f"layer {i}: features contain NaN or inf")
    return layers


def _float32(a: np.ndarray, layer: int | None = None) -> np.ndarray:
    """The features as float32, refusing values float32 cannot hold (they became inf, and the
    error said the file held NaN or inf when it did not)."""
    if a.dtype.kind == "f" and a.dtype.itemsize > 4 and a.size:
        big = float(np.nanmax(np.abs(a))) if not np.isnan(a).all() else 0.0
        if np.isfinite(big) and big > float(np.finfo(np.float32).max):
            where = f"layer {layer}: " if layer is not None else ""
            raise ValueError(f"{where}features reach |x| = {big:.3g}, past float32's range (3.4e38): rescale them")
    return a


# rows of an L2-normalised layer closer than this to its first row are the same point: a layer
# whose rows all are (constant features, or rows that are multiples of one vector) has no
# neighbourhoods and no variance, and every metric of it is an artefact of tie-breaking
# (mutual_knn 0.21, cycle_knn 0.90, CKA 0 at N = 50 with exit 0 before)
DEGENERATE_ATOL = 1e-6


def degenerate_layers(layers: list[torch.Tensor]) -> list[int]:
    """The layers (normalised rows) in which every sample is the same point."""
    return [i for i, t in enumerate(layers) if (t - t[:1]).abs().max() <= DEGENERATE_ATOL]


CLAMPS = ("mean", "exact", "none")
QUANTILE_CHUNK = 1024  # rows sorted at once by the per-sample quantile: memory O(chunk · L·D)


def row_quantile(x: torch.Tensor, q: float) -> torch.Tensor:
    """(N, M) -> (N,) each row's q-quantile with linear interpolation, as torch.quantile
    (which refuses inputs over 16M elements; all layers of a large model exceed that)."""
    pos = q * (x.size(1) - 1)
    lo, frac = int(pos), pos - int(pos)
    out = torch.empty(x.size(0), dtype=x.dtype)
    for s in range(0, x.size(0), QUANTILE_CHUNK):
        v = x[s : s + QUANTILE_CHUNK].sort(dim=1).values  # (chunk, M)
        hi = min(lo + 1, v.size(1) - 1)
        out[s : s + QUANTILE_CHUNK] = v[:, lo] + frac * (v[:, hi] - v[:, lo])
    return out


def clamp_threshold(layers: list[torch.Tensor], q: float, mode: str = "mean") -> float | None:
    """The PRH clamp threshold of a model's whole layer stack (one threshold for all its layers);
    None when nothing is clamped (mode "none" or q >= 1)."""
    if mode not in CLAMPS:
        raise ValueError(f"unknown clamp {mode!r} (mean, exact or none)")
    if mode == "none" or q >= 1:
        return None
    if mode == "exact":
        flat = torch.cat([t.reshape(-1) for t in layers]).abs().sort().values
        return float(flat[min(int(q * flat.numel()), flat.numel() - 1)])
    per_sample = torch.cat([t.abs() for t in layers], dim=1)  # (N, sum of D_l): a sample's values
    return float(row_quantile(per_sample, q).mean())


def clamp_layers(layers: list[torch.Tensor], q: float, mode: str = "mean") -> list[torch.Tensor]:
    """The PRH clamp (`clamp_threshold`), then per-layer L2 normalisation."""
    thr = clamp_threshold(layers, q, mode)
    if thr is None:
        return [F.normalize(t, dim=-1) for t in layers]
    return [F.normalize(t.clamp(-thr, thr), dim=-1) for t in layers]


def bootstrap_ci(per_sample: np.ndarray, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """95% BCa interval of the mean over samples (scipy.stats.bootstrap; the samples are
    resampled, their neighbourhoods held fixed). BCa corrects the percentile interval for the
    bias and skew of a mean of discrete per-sample scores; where it is undefined (every
    resample on one side of the mean) the percentile interval of the same resamples is given.
    Memory stays O(BATCH · N): the jackknife BCa needs is N leave-one-out means."""
    m = float(per_sample.mean())
    if n_boot <= 0 or np.ptp(per_sample) == 0:  # no resamples, or every resample has the same mean
        return m, m
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            ci = stats.bootstrap(
                (per_sample,),
                np.mean,
                n_resamples=n_boot,
                batch=BOOTSTRAP_BATCH,
                confidence_level=0.95,
                method=method,
                rng=np.random.default_rng(seed),
            ).confidence_interval
        if np.isfinite(ci.low) and np.isfinite(ci.high):
            break
    return float(ci.low), float(ci.high)


def alignment(
    feats_a,
    feats_b,
    k: int = 10,
    clamp_q: float = 0.95,
    clamp: str = "mean",
    layers: str = "best",
    n_boot: int = 1000,
    seed: int = 0,
    metric: str = "mutual_knn",
    backend: str = "dense",
) -> AlignmentScore:
    """PRH alignment between two models' features, (N, D) or (L, N, D) or a list of (N, D_l).

    clamp: "mean" (published), "exact" or "none" (see the module docstring); clamp_q its quantile.
    layers="best": every layer pair, best kept (PRH); "last": the last layer of each.
    The 95% bootstrap interval (over eval samples, neighbourhoods fixed) is given for the
    per-sample metrics (mutual_knn, cycle_knn).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; available: {', '.join(METRICS)}")
    a, b = as_layers(feats_a), as_layers(feats_b)
    if a[0].size(0) != b[0].size(0):
        raise ValueError(f"sample counts differ: {a[0].size(0)} vs {b[0].size(0)}")
    check_k(k, a[0].size(0))
    check_kernel_memory(metric, a[0].size(0))
    a, b = clamp_layers(a, clamp_q, clamp), clamp_layers(b, clamp_q, clamp)
    la = range(len(a)) if layers == "best" else [len(a) - 1]
    lb = range(len(b)) if layers == "best" else [len(b) - 1]
    # a layer whose samples are all one point scores nothing: it is left out of the best (its
    # cells stay NaN), and if no pair is left the score is refused, not made up by ties
    flat_a, flat_b = set(degenerate_layers(a)), set(degenerate_layers(b))
    la, lb = [i for i in la if i not in flat_a], [j for j in lb if j not in flat_b]
    if not la or not lb:
        side, flat = ("A", sorted(flat_a)) if not la else ("B", sorted(flat_b))
        raise ValueError(
            f"features {side}: every sample is the same point in layer(s) {flat} (constant features, or "
            "rows that are multiples of one vector): alignment is undefined there"
        )
    grid = [[float("nan")] * len(b) for _ in range(len(a))]
    best, best_ij, best_ps = -float("inf"), (0, 0), None
    for i in la:
        for j in lb:
            s, ps = score_pair(a[i], b[j], metric, k, backend)
            if not np.isfinite(s):  # never a silent NaN score
                raise ValueError(f"{metric} of layers ({i}, {j}) is {s}: the features give no defined score")
            grid[i][j] = s
            if s > best:
                best, best_ij, best_ps = s, (i, j), ps
    lo, hi = bootstrap_ci(best_ps.numpy(), n_boot, seed) if best_ps is not None else (None, None)
    return AlignmentScore(best, best_ij[0], best_ij[1], lo, hi, grid, metric)
