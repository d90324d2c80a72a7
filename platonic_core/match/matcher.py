"""Pair-free classification: image clusters <-> class names by kernel matching.

The protocol (after Schnaus et al., "It's a (Blind) Match!", CVPR 2025), per seed:
1. image features (N, D_img), L2-normalised -> k-means with C clusters (k-means++, `n_init`
   starts) -> centroids, L2-normalised;
2. class names -> one text feature per class (prompt templates averaged, then normalised:
   done when the features are made, see data.py / features.py);
3. each side's kernel: rows centred over the C items (removes the direction every item
   shares, strong in sentence and LM embeddings), L2-normalised, cosine similarities, off-diagonal
   z-scored (solver.standardise_kernel);
4. the assignment cluster -> class maximising the QAP objective (solver.solve);
5. scores against the labels, which are used only here, after the assignment:
   - top-1: the share of images whose cluster's assigned class is their label;
   - top-k: the share whose label is among their cluster's k best-scoring classes, a class's
     score at a cluster being the objective's change when it is swapped in (0 for the
     assigned class, so top-1 ⊆ top-k);
   - oracle (the upper bound given the clusters): the assignment a labelled observer picks,
     Hungarian on the cluster x label counts (top-1), and each cluster's k most frequent labels
     (top-k);
   - chance: 1/C for top-1 and k/C for top-k (a random assignment's expectation);
   - the objective f of the found and of the oracle assignment: f_found >= f_oracle with a
     wrong match means the kernels, not the search, prefer the wrong one;
   - a diagnostic that uses the labels to cluster (so not pair-free): the share of classes the
     same solver maps right from the kernel of the labelled class means (`class_means_matched`).
     High here but low above: k-means is the bottleneck; low here too: the two kernels disagree.
Seeds change the k-means starts and the solver's restarts; intervals are Student-t over seeds
(stats.mean_ci).
"""

from __future__ import annotations

import numpy as np

from ..stats import mean_ci
from .kmeans import kmeans
from .solver import solve, standardise_kernel


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def kernel(items: np.ndarray, center: bool = True) -> np.ndarray:
    """(C, D) class or cluster vectors -> (C, C) standardised cosine kernel."""
    v = np.asarray(items, dtype=np.float64)
    if center:
        v = v - v.mean(0, keepdims=True)
    v = l2_normalise(v)
    return standardise_kernel(v @ v.T)


def class_features(prompt_features: np.ndarray, n_classes: int) -> np.ndarray:
    """(C·T, D) prompt embeddings, class-major (class c's T templates together) -> (C, D):
    each class's templates averaged after normalisation, then normalised again."""
    p = l2_normalise(prompt_features)
    if len(p) % n_classes:
        raise ValueError(f"{len(p)} prompt embeddings are not a whole number of templates for {n_classes} classes")
    return l2_normalise(p.reshape(n_classes, len(p) // n_classes, -1).mean(1))


def _topk(scores: np.ndarray, perm: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """(C, C) scores, assigned classes -> (C, k) each cluster's k best classes, the assigned
    one first (ties with 0 gain cannot push it out); other ties in random order (a stable
    sort would favour the classes listed first)."""
    s = scores.copy()
    s[np.arange(len(perm)), perm] = np.inf
    return np.lexsort((rng.random(s.shape), -s), axis=1)[:, :k]


def _hits(counts: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """(C classes, C labels) h[v, l]: images labelled l whose cluster lists class v in `sets`
    ((C clusters, k) classes per cluster), from `counts` (C clusters, C labels): what a score
    counts, and what null.relabel_pvalue relabels (its trace is the number of hits)."""
    h = np.zeros_like(counts)
    for j in range(sets.shape[1]):
        np.add.at(h, sets[:, j], counts)
    return h


def match_once(
    image: np.ndarray,
    labels: np.ndarray,
    classes: np.ndarray,
    seed: int,
    top_k: int = 5,
    n_init: int = 10,
    solver: str = "auto",
    restarts: int = 100,
    center: bool = True,
    clusters: str = "kmeans",
) -> dict:
    """One seed of the protocol. image (N, D_img), labels (N,) in [0, C), classes (C, D_txt).
    `clusters`: kmeans (C clusters of the images), or items (each of the N = C image vectors is
    its own cluster: class prototypes, not photos). Also returns `_h1` / `_hk` (null.py's h)."""
    from scipy.optimize import linear_sum_assignment

    c = len(classes)
    k = min(top_k, c)
    x = l2_normalise(image)
    if clusters == "kmeans":
        assign, centres = kmeans(x, c, seed=seed, n_init=n_init)
    elif clusters == "items":
        if len(x) != c:
            raise ValueError(f"clusters items: each image vector is one cluster, but {len(x)} vectors for {c} classes")
        assign, centres = np.arange(c), x
    else:
        raise ValueError(f"unknown clusters {clusters!r} (kmeans, items)")
    clusters = assign
    a, b = kernel(centres, center), kernel(classes, center)
    sol = solve(a, b, solver, restarts, seed)
    n = len(labels)
    top1 = float((sol.perm[clusters] == labels).mean())
    best = _topk(sol.scores, sol.perm, k, np.random.default_rng([seed, 0x70B]))  # (C, k)
    topk = float((best[clusters] == labels[:, None]).any(1).mean())
    counts = np.zeros((c, c), dtype=np.int64)  # clusters x labels
    np.add.at(counts, (clusters, labels), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    oracle = np.empty(c, dtype=np.int64)
    oracle[rows] = cols
    oracle_topk = float(np.sort(counts, axis=1)[:, ::-1][:, :k].sum() / n)
    return {
        "seed": seed,
        "top1": top1,
        f"top{k}": topk,
        "oracle_top1": float(counts[rows, cols].sum() / n),
        f"oracle_top{k}": oracle_topk,
        "clusters_matched": float((sol.perm == oracle).mean()),
        "objective": sol.objective,
        "objective_oracle": float((a * b[np.ix_(oracle, oracle)]).sum()),
        "perm": sol.perm.tolist(),
        "oracle_perm": oracle.tolist(),
        **sol.info,
        "_h1": _hits(counts, sol.perm[:, None]),
        "_hk": _hits(counts, best),
    }


METRICS = ("top1", "topk", "oracle_top1", "oracle_topk", "clusters_matched")


TOPK_MIN_CLASSES = 11  # at C <= 10 a top-5 is half the classes (chance 50%): top-1 only is reported


def match_classes(
    image: np.ndarray,
    labels: np.ndarray,
    classes: np.ndarray,
    seeds: list[int],
    top_k: int = 5,
    n_init: int = 10,
    solver: str = "auto",
    restarts: int = 100,
    center: bool = True,
    confidence: float = 0.95,
    clusters: str = "kmeans",
    null_draws: int = 100_000,
) -> dict:
    """The protocol over seeds: per-seed records, mean [t interval] of every metric (the
    spread over k-means and solver seeds), the relabelling p-values of top-1 and top-k (the
    test of "better than ignoring the labels": null.relabel_pvalue) and the labelled-means
    diagnostic with the rank of the true matching (null.true_matching_rank)."""
    from .null import relabel_pvalue, true_matching_rank

    labels = np.asarray(labels, dtype=np.int64)
    c = len(classes)
    if len(image) != len(labels):
        raise ValueError(f"{len(image)} image features but {len(labels)} labels")
    if labels.min() < 0 or labels.max() >= c:
        raise ValueError(f"labels must lie in [0, {c}) for {c} classes, got [{labels.min()}, {labels.max()}]")
    k = min(top_k, c)
    runs = [match_once(image, labels, classes, s, top_k, n_init, solver, restarts, center, clusters) for s in seeds]
    h1, hk = sum(r.pop("_h1") for r in runs), sum(r.pop("_hk") for r in runs)
    pvalues = {"top1": relabel_pvalue(h1, null_draws, seeds[0])}
    if c >= TOPK_MIN_CLASSES:
        pvalues["topk"] = relabel_pvalue(hk, null_draws, seeds[0])
    x = l2_normalise(image)
    means_matched = truth = None
    if len(np.unique(labels)) == c:  # every class has images: its labelled mean exists
        means = np.stack([x[labels == j].mean(0) for j in range(c)])
        a, b = kernel(means, center), kernel(classes, center)
        sol = solve(a, b, solver, restarts, seeds[0])
        means_matched = float((sol.perm == np.arange(c)).mean())
        truth = true_matching_rank(a, b, None, min(null_draws, 10_000), seeds[0])
        truth["objective_found"] = sol.objective
    key = {"topk": f"top{k}", "oracle_topk": f"oracle_top{k}"}
    summary = {m: mean_ci([r[key.get(m, m)] for r in runs], confidence) for m in METRICS}
    return {
        "classes": c,
        "images": len(labels),
        "k": k,
        "chance_top1": 1 / c,
        "chance_topk": k / c,
        "report_topk": c >= TOPK_MIN_CLASSES,
        "seeds": list(seeds),
        "solver": runs[0]["solver"],
        "clusters": clusters,
        "pvalues": pvalues,
        "class_means_matched": means_matched,
        "true_matching": truth,
        "summary": summary,
        "runs": runs,
    }
