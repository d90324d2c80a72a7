"""Tables and plots of alignment results."""

from __future__ import annotations

from pathlib import Path


def alignment_table(result: dict) -> str:
    """Markdown table: one row per text model, mutual kNN with a 95% CI and the layer pair."""
    labels = result.get("labels", {})
    lines = [
        f"| model | mutual {result['k']}-NN with `{result['image_model']}` | 95% CI | layers (text, image) "
        "| rotation: t→i R@1 | i→t R@1 | held-out residual |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, s in sorted(result["models"].items(), key=lambda kv: -kv[1]["mutual_knn"]):
        name = f"{m} ({labels[m]})" if m in labels else m
        r = s.get("procrustes", {})
        rot = (f"{r['t2i_R@1']:.3f} | {r['i2t_R@1']:.3f} | {r['heldout_residual']:.3f}" if r else " | | ")
        lines.append(f"| {name} | {s['mutual_knn']:.4f} | [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}] "
                     f"| {s['layer_a']}, {s['layer_b']} | {rot} |")
    lines.append(f"| chance / unrelated | {result['chance']:.4f} (k/(N−1)) | | | {2 / result['n']:.4f} (2/N) "
                 f"| {2 / result['n']:.4f} | ≈1.414 (√2) |")
    return "\n".join(lines) + "\n"


def alignment_plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = sorted(result["models"].items(), key=lambda kv: -kv[1]["mutual_knn"])
    names = [m for m, _ in items]
    vals = [s["mutual_knn"] for _, s in items]
    err = [[v - s["ci95"][0] for v, (_, s) in zip(vals, items, strict=True)],
           [s["ci95"][1] - v for v, (_, s) in zip(vals, items, strict=True)]]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=120)
    palette = {"good": "#3b7dd8", "text": "#e0a030", "bad": "#c0504d"}  # by training views
    views = result.get("views", {})
    ax.bar(names, vals, yerr=err, capsize=4, color=[palette.get(views.get(n, ""), "#777777") for n in names])
    ax.axhline(result["chance"], ls="--", c="k", lw=1, label="chance")
    ax.set_ylabel(f"mutual {result['k']}-NN with {result['image_model']}")
    ax.set_title(f"text-image alignment (N={result['n']}, 95% CI)")
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
