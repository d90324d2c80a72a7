"""The match's outputs: every (class set, text model) scored over seeds -> scores.json,
table.md (one table per class set) and match.png."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..report import _fmt
from .matcher import match_classes


def run_match(
    labels: dict[str, np.ndarray],
    class_names: dict[str, list[str]],
    image: np.ndarray,
    text: dict[str, dict[str, np.ndarray]],
    solver_cfg,
    out: Path,
    meta: dict | None = None,
) -> dict:
    """labels / class_names: class set -> (N,) / C names; image (N, D); text: model -> class
    set -> (C, D). Writes scores.json, table.md, match.png; returns the scores."""
    s = solver_cfg
    scores: dict[str, dict[str, dict]] = {}
    for cs, y in labels.items():
        for model, feats in text.items():
            scores.setdefault(cs, {})[model] = match_classes(
                image,
                y,
                feats[cs],
                list(s.seeds),
                s.top_k,
                s.kmeans_init,
                s.solver,
                s.restarts,
                s.center,
                s.confidence,
                s.clusters,
                s.null_draws,
            )
    result = {"class_sets": {cs: class_names[cs] for cs in labels}, "scores": scores, **(meta or {})}
    (out / "scores.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(match_table(result))
    match_plot(result, out / "match.png")
    return result


def _p(p: dict | None) -> str:
    """A p-value as measured: Monte Carlo's at its floor says so (≤ its resolution)."""
    if p is None:
        return "–"
    if p.get("method") == "monte carlo" and p["p"] <= p["resolution"]:
        return f"≤ {p['resolution']:.0e}"
    return f"{p['p']:.2g}"


def _truth(t: dict | None) -> str:
    """Where the truth ranks, and the objective of the truth against what the solver found
    (found above true: the kernels, not the search, prefer a wrong assignment)."""
    if t is None:
        return "–"
    where = f"{t['rank']:,} of {t['of']:,} (p {t['p']:.2g})" if t["method"] == "exact" else f"p {_p(t)}"
    return f"{where}; f true {t['objective_true']:,.0f}, found {t['objective_found']:,.0f}"


def match_table(result: dict) -> str:
    """Markdown, one table per class set: top-1 (and top-k when C > 10) as mean [95% t interval]
    over seeds with the relabelling p-value, the labelled oracle, the labelled-means diagnostic
    and the rank of the true matching, chance."""
    lines = []
    for cs, models in result["scores"].items():
        any_ = next(iter(models.values()))
        k, c, n = any_["k"], any_["classes"], any_["images"]
        topk = any_.get("report_topk", c > 10)
        head = ["text model", "top-1", "p"] + ([f"top-{k}", "p"] if topk else []) + ["oracle top-1"]
        head += [f"oracle top-{k}"] if topk else []
        head += ["classes matched from labelled means", "true matching (rank of C! by the objective)"]
        lines += [
            f"### {cs}: {c} classes, {n} images, {len(any_['seeds'])} seeds, solver {any_['solver']}, "
            f"clusters {any_.get('clusters', 'kmeans')}",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for m, r in models.items():
            s, pv = r["summary"], r.get("pvalues", {})
            row = [m, _fmt(s["top1"]), _p(pv.get("top1"))]
            row += [_fmt(s["topk"]), _p(pv.get("topk"))] if topk else []
            row += [_fmt(s["oracle_top1"])] + ([_fmt(s["oracle_topk"])] if topk else [])
            row += [_num(r["class_means_matched"]), _truth(r.get("true_matching"))]
            lines.append("| " + " | ".join(row) + " |")
        chance = ["chance", f"{any_['chance_top1']:.3f}", ""] + ([f"{any_['chance_topk']:.3f}", ""] if topk else [])
        chance += [""] * (len(head) - len(chance) - 2) + [f"{1 / c:.3f}", ""]
        lines += ["| " + " | ".join(chance) + " |", ""]
    lines.append(
        "top-1: images whose cluster's assigned class is their label; top-k (reported when C > 10: at C = 10 a "
        "top-5 is half the classes): label among the cluster's k classes with the best swap gain (the QAP "
        "objective's change when the class moves into that cluster). p: the relabelling test, P(score >= "
        "observed) were the class names shuffled, one shuffle shared by all seeds (exact over C! or by the "
        "fixed-point count; else Monte Carlo, ≤ its resolution at the floor). Oracle: Hungarian on the cluster "
        "x label counts (top-1), each cluster's k most frequent labels (top-k). Classes matched from labelled "
        "means: the same solver on the kernel of each class's mean image feature (uses the labels: a "
        "diagnostic, not pair-free). True matching: how many of the C! assignments the objective puts above "
        "the true one on that kernel pair, or (C > 10) the Monte Carlo p of the truth's objective among random "
        "assignments. Mean [95% t interval] over seeds: the spread of k-means and solver starts, not a test."
    )
    return "\n".join(lines) + "\n"


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def match_plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(result["scores"])
    fig, axes = plt.subplots(1, len(sets), figsize=(3.6 * len(sets) + 0.6, 3.4), dpi=120, squeeze=False)
    for ax, cs in zip(axes[0], sets, strict=True):
        models = result["scores"][cs]
        names = list(models)
        x = np.arange(len(names))
        any_ = next(iter(models.values()))
        for off, metric, colour, label in ((-0.2, "top1", "#3b7dd8", "top-1"), (0.2, "topk", "#e0a030", None)):
            vals = [models[m]["summary"][metric]["mean"] for m in names]
            lo = [v - (models[m]["summary"][metric]["ci"][0] or v) for v, m in zip(vals, names, strict=True)]
            hi = [(models[m]["summary"][metric]["ci"][1] or v) - v for v, m in zip(vals, names, strict=True)]
            ax.bar(x + off, vals, 0.4, yerr=[lo, hi], capsize=3, color=colour, label=label or f"top-{any_['k']}")
            oracle = [models[m]["summary"]["oracle_" + metric]["mean"] for m in names]
            ax.scatter(x + off, oracle, marker="_", s=200, c="k", zorder=3, label="oracle" if off < 0 else None)
        ax.axhline(any_["chance_top1"], ls="--", c="#3b7dd8", lw=1)
        ax.axhline(any_["chance_topk"], ls="--", c="#e0a030", lw=1)
        ax.set_xticks(x, names, rotation=20, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(f"{cs} (C={any_['classes']})", fontsize=9)
    axes[0][0].set_ylabel("accuracy (dashed: chance)")
    axes[0][0].legend(frameon=False, fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
