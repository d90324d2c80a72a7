"""The captioning table's numbers: every caption_eval's scores, over seeds (`caption_report`).

Per conditioning encoder and method: each metric's mean over seeds with a Student-t
interval (stats.py: 3-5 seeds are too few for a bootstrap); the seed-free bounds (`frequent`,
`human`) once. Seeds vary the decoder's initialisation and batch order, the pair subsets of the paired
maps and the pair-free map's points; the encoders are the base recipe's (one training seed).
"""

from __future__ import annotations

import re

from ..stats import mean_ci

HEADLINE = ("CIDEr-D", "BLEU-4")
NEAREST = "/nearest"  # a method's retrieval row: the nearest training caption to the same conditioning


def method_order(methods: list[str]) -> list[str]:
    """The decoder on the text embedding, the paired maps (by kind, then N ascending, "all"
    last), pair-free, floors; each decoder row followed by its nearest-caption row."""

    def key(m: str):
        base, nearest = m.removesuffix(NEAREST), m.endswith(NEAREST)
        if base == "text_embedding":
            return (0, "", 0, nearest)
        if "@" in base:
            kind, n = base.split("@")
            return (1, kind, float("inf") if n == "all" else int(n), nearest)
        if base == "pairfree":
            return (2, "", 0, nearest)
        return (3, base, 0, nearest)

    return sorted(methods, key=key)


def summarize(evals: dict[str, dict], confidence: float = 0.95) -> dict:
    """evals: conditioning encoder -> its caption_eval scores.json. Returns the summary
    (encoders -> method -> metric -> mean_ci with per_seed values)."""
    out: dict = {"confidence": confidence, "encoders": {}, "once": {}}
    for enc, ev in evals.items():
        per_seed = {s: v for s, v in ev["scores"].items() if s != "all"}
        methods = method_order(sorted({m for v in per_seed.values() for m in v}))
        rows = {}
        for m in methods:
            metrics = sorted({k for v in per_seed.values() for k in v.get(m, {})})
            rows[m] = {}
            for k in metrics:
                values = [per_seed[s][m][k] for s in sorted(per_seed) if per_seed[s].get(m, {}).get(k) is not None]
                rows[m][k] = {**mean_ci(values, confidence), "per_seed": values}
        out["encoders"][enc] = rows
        out["once"] = ev["scores"].get("all", {})  # the same for every encoder
        out["frequent_caption"] = ev["frequent_caption"]
        out["n_images"] = ev["n_images"]
        out["references_per_image"] = ev["references_per_image"]
        out["seeds"] = ev["seeds"]
    return out


def summary_metrics(summary: dict) -> dict[str, float]:
    """Flat metrics for MLflow: `<metric>/<encoder>/<method>` (mean over seeds)."""
    flat = {}
    for enc, rows in summary["encoders"].items():
        for m, metrics in rows.items():
            for k in HEADLINE:
                if k in metrics and metrics[k]["mean"] is not None:
                    flat[re.sub(r"[^\w\-. /]", "_", f"{k}/{enc}/{m}")] = metrics[k]["mean"]
    for name, metrics in summary.get("once", {}).items():
        flat |= {f"{k}/{name}": metrics[k] for k in HEADLINE if k in metrics}
    return flat
