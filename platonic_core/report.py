"""Tables and plots of alignment results."""

from __future__ import annotations

import re
from pathlib import Path

from .matchnorm import DEFAULT_IGNORABLE_RANGES

# Characters a report must not print as they are: Default_Ignorable_Code_Point (zero-width
# space / joiners, soft hyphen, bidi embeddings, overrides and isolates, BOM, variation
# selectors, tags: invisible, or reordering what follows, as in a Trojan Source attack),
# the other bidi marks (ALM, LRM, RLM are in the set), controls, and line / paragraph
# separators (they break a table row). Shown as \uXXXX escapes instead.
_HIDDEN = re.compile(
    "["
    + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in DEFAULT_IGNORABLE_RANGES)
    + "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]"
)


def display_text(text: object) -> str:
    """Text from data as a report shows it: every invisible or direction-changing character
    written as a visible escape (`\\u202e`), so that what a reader sees is what is stored and
    a right-to-left override cannot reorder a report. Other text is returned as it is."""
    s = str(text)
    return _HIDDEN.sub(lambda m: f"\\u{ord(m[0]):04x}" if ord(m[0]) <= 0xFFFF else f"\\U{ord(m[0]):08x}", s)


ORACLES = {
    "learned": "an MLP fitted on training scenes to predict the image features from the whole scene: the ceiling",
    "attributes": "the bag of true attributes (a perfect bag of words: no binding), ties broken by jitter",
    "render": "the image encoder against itself on a second render of each scene",
}


def alignment_table(result: dict) -> str:
    """Markdown: one row per text model (mutual kNN with a 95% CI, the layer pair, its fraction
    of the learned ceiling when there is one, the rotation), the oracles, and every text
    layer's best score."""
    labels = result.get("labels", {})
    ceilings = result.get("ceilings") or {}
    frac_head, frac_rule = ("| of the ceiling ", "---|") if "learned" in ceilings else ("", "")
    lines = [
        f"| model | mutual {result['k']}-NN with `{result['image_model']}` | 95% CI | layers (text, image) "
        f"{frac_head}| rotation: t→i R@1 | i→t R@1 | held-out residual |",
        "|---|---|---|---|" + frac_rule + "---|---|---|",
    ]
    for m, s in sorted(result["models"].items(), key=lambda kv: -kv[1]["mutual_knn"]):
        name = f"{m} ({labels[m]})" if m in labels else m
        r = s.get("procrustes", {})
        rot = f"{r['t2i_R@1']:.3f} | {r['i2t_R@1']:.3f} | {r['heldout_residual']:.3f}" if r else " | | "
        frac = f"| {s['fraction_of_ceiling']:.3f} " if frac_head else ""
        lines.append(
            f"| {name} | {s['mutual_knn']:.4f} | [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}] "
            f"| {s['layer_a']}, {s['layer_b']} {frac}| {rot} |"
        )
    lines.append(
        f"| chance / unrelated | {result['chance']:.4f} (k/(N−1)) | | {'| ' if frac_head else ''}"
        f"| {2 / result['n']:.4f} (2/N) | {2 / result['n']:.4f} | ≈1.414 (√2) |"
    )
    if ceilings:
        lines += ["", "| oracle (ceiling.py) | mutual kNN | what it is |", "|---|---|---|"]
        lines += [f"| {k} | {v:.4f} | {ORACLES.get(k, '')} |" for k, v in ceilings.items()]
    lines += _subset_and_reference_rows(result)
    width = max(len(s["per_layer"]) for s in result["models"].values())
    lines += [
        "",
        "Each text layer's best score over the image layers (layer 0: the embeddings; bold: the best).",
        "",
        "| model | " + " | ".join(f"layer {i}" for i in range(width)) + " |",
        "|---|" + "---|" * width,
    ]
    for m, s in sorted(result["models"].items()):
        best = [max(row) for row in s["per_layer"]]
        cells = [f"**{v:.4f}**" if i == s["layer_a"] else f"{v:.4f}" for i, v in enumerate(best)]
        lines.append(f"| {m} | " + " | ".join(cells + [""] * (width - len(cells))) + " |")
    return "\n".join(lines) + "\n"


def _subset_and_reference_rows(result: dict) -> list[str]:
    """Real data: every model and reference row on all items and on each subset."""
    refs = result.get("references") or {}
    names = sorted({n for s in result["models"].values() for n in s.get("subsets", {})})
    if not refs and not names:
        return []
    head = "| row | all items | " + " | ".join(names) + (" | " if names else "") + "what it is |"
    lines = [
        "",
        f"Trained models beside the reference rows (mutual {result['k']}-NN, all {result['n']} items"
        + (f" and each subset: {', '.join(names)})." if names else ")."),
        "",
        head,
        "|---|---|" + "---|" * len(names) + "---|",
    ]

    def row(name: str, score: str, subsets: dict, what: str) -> str:
        cells = " | ".join(f"{subsets[n]:.4f}" if n in subsets else "" for n in names)
        return f"| {name} | {score} | " + cells + (" | " if names else "") + f"{what} |"

    for m, s in sorted(result["models"].items(), key=lambda kv: -kv[1]["mutual_knn"]):
        lines.append(row(m, f"{s['mutual_knn']:.4f}", s.get("subsets", {}), result.get("labels", {}).get(m, "")))
    for name, r in sorted(refs.items(), key=lambda kv: -kv[1]["mutual_knn"]):
        score = f"{r['mutual_knn']:.4f}" + (f" ± {r['sd']:.4f}" if "sd" in r else "")
        lines.append(row(f"ref: {name}", score, r.get("subsets", {}), r.get("note", "")))
    return lines


def alignment_plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = sorted(result["models"].items(), key=lambda kv: -kv[1]["mutual_knn"])
    names = [m for m, _ in items]
    vals = [s["mutual_knn"] for _, s in items]
    err = [
        [v - s["ci95"][0] for v, (_, s) in zip(vals, items, strict=True)],
        [s["ci95"][1] - v for v, (_, s) in zip(vals, items, strict=True)],
    ]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=120)
    palette = {"good": "#3b7dd8", "text": "#e0a030", "documents": "#e0a030", "bad": "#c0504d"}  # by views
    views = result.get("views", {})
    ax.bar(names, vals, yerr=err, capsize=4, color=[palette.get(views.get(n, ""), "#777777") for n in names])
    ax.axhline(result["chance"], ls="--", c="k", lw=1, label="chance")
    styles = {"learned": ("-.", "#2a8a4a"), "attributes": (":", "#6a3d9a"), "render": ("--", "#999999")}
    for name, v in (result.get("ceilings") or {}).items():
        ls, c = styles.get(name, (":", "#444444"))
        ax.axhline(v, ls=ls, c=c, lw=1, label=f"{name} oracle ({v:.2f})")
    ax.set_ylabel(f"mutual {result['k']}-NN with {result['image_model']}")
    ax.set_title(f"text-image alignment (N={result['n']}, 95% CI)")
    ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- the ablation grid ------------------------------------------------------------------

VIEW_LABELS = {"good": "good views", "bad": "bad views", "text": "next-token", "documents": "next-token (documents)"}
VIEW_COLOURS = {"good": "#3b7dd8", "text": "#e0a030", "documents": "#e0a030", "bad": "#c0504d"}


def _fmt(s: dict, digits: int = 3) -> str:
    if s["mean"] is None:
        return "–"
    lo, hi = s["ci"]
    ci = f" [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None else ""
    return f"{s['mean']:.{digits}f}{ci}"


def ablation_table(cells: dict, summary: dict) -> str:
    """The Table-7-like grid and what was measured around it, as Markdown."""
    conf = int(round(cells["confidence"] * 100))
    n_seeds = len(cells["seeds"])
    cols = cells["columns"]
    head = "| positives | " + " | ".join(f"{c} ({VIEW_LABELS.get(cells['column_views'][c], c)})" for c in cols) + " |"
    rule = "|---|" + "---|" * len(cols)
    chance = next((r["chance"] for r in cells["records"]), None)
    n_eval = next((r["n"] for r in cells["records"]), None)
    lines = [
        f"## {cells['name']}: where the positives come from × objective",
        "",
        f"Mean over {n_seeds} seeds with a {conf}% t interval; N = {n_eval} held-out image/caption pairs.",
        "",
    ]
    k = cells.get("k", 10)
    titles = {
        "mutual_knn": f"Mutual {k}-NN with the image encoder (chance {chance:.4f})" if chance else "Mutual kNN",
        "fraction_of_ceiling": "Fraction of the learned ceiling (an MLP that knows the scene; ceiling.py)",
        "t2i_R@1": "Text→image R@1 through one orthogonal map fitted on half the pairs, held-out half "
        f"(chance {2 / n_eval:.4f})"
        if n_eval
        else "Text→image R@1",
        "heldout_residual": "Held-out Procrustes residual (0 = one rotation apart; √2 ≈ 1.414 = unrelated)",
    }
    for metric, title in titles.items():
        table = summary["table"].get(metric, {})
        if all(c["mean"] is None for cols_ in table.values() for c in cols_.values()):
            continue  # e.g. no ceiling outside the synthetic world
        lines += [f"### {title}", "", head, rule]
        for row, label in cells["rows"].items():
            lines.append(f"| {label} | " + " | ".join(_fmt(summary["table"][metric][row][c]) for c in cols) + " |")
        lines.append("")
    diffs = summary.get("differences", [])
    if diffs:
        lines += [
            f"### Paired differences in mutual {k}-NN (same seeds: same image encoder), mean [{conf}% t interval]",
            "",
            "| compared | in | difference | per seed |",
            "|---|---|---|---|",
        ]
        for d in diffs:
            if d["kind"] == "objective":
                name, where = f"{d['a'][1]} − {d['b'][1]}", cells["rows"][d["where"]]
            else:
                name, where = f"{cells['rows'][d['a'][0]]} − {cells['rows'][d['b'][0]]}", d["where"]
            lines.append(f"| {name} | {where} | {_fmt(d)} | {', '.join(f'{x:+.3f}' for x in d['per_seed'])} |")
        lines.append("")
    rots = summary.get("rotations", [])
    if rots:
        lines += [
            "### One rotation between text models trained separately (same objective, different positives)",
            "",
            f"| model | rows | sources disjoint | mutual {k}-NN | R@1 (held out) | residual (held out) |",
            "|---|---|---|---|---|---|",
        ]
        for r in rots:
            lines.append(
                f"| {r['column']} | {cells['rows'][r['rows'][0]]} ↔ {cells['rows'][r['rows'][1]]} "
                f"| {'yes' if r['disjoint_sources'] else 'no'} | {_fmt(r['mutual_knn'])} | {_fmt(r['t2i_R@1'])} "
                f"| {_fmt(r['heldout_residual'])} |"
            )
        lines.append("")
    sw = summary.get("sweep")
    if sw:
        labels = cells["sweep"]["labels"]
        lines += [
            f"### Sweep of `{sw['key']}`: mutual {k}-NN, mean [{conf}% t interval] (seed min–max)",
            "",
            "| row | model | " + " | ".join(labels) + " |",
            "|---|---|" + "---|" * len(labels),
        ]
        for base, by_col in sw["rows"].items():
            for col, points in by_col.items():
                cells_txt = [
                    f"{_fmt(p)} ({p['min']:.3f}–{p['max']:.3f})" if p["min"] is not None else "–" for p in points
                ]
                lines.append(f"| {base} | {col} | " + " | ".join(cells_txt) + " |")
        lines.append("")
    eff = summary.get("efficiency")
    if eff:
        lines += [
            f"### Sample efficiency: samples `{eff['model']}` needs to reach `{eff['reference']}`'s final score",
            "",
            "| positives | target (reference final) | reference gain over its initialisation "
            "| samples needed (geo. mean) "
            "| sample ratio (geo. mean) | text ratio | seeds reached |",
            "|---|---|---|---|---|---|---|",
        ]
        for row, e in eff["rows"].items():
            tgt = [p["target"] for p in e["per_seed"]]
            target = f"{sum(tgt) / len(tgt):.3f}" if tgt else "–"
            if "sample_ratio" in e:
                sr, tr = e["sample_ratio"], e["text_ratio"]
                ge = "≥ " if sr.get("lower_bound") else ""
                ratio = f"{ge}{sr['geomean']:.1f}×" + (
                    f" [{sr['ci'][0]:.1f}, {sr['ci'][1]:.1f}]" if sr["ci"][0] else ""
                )
                text = f"{ge}{tr['geomean']:.1f}×"
                sn = e["samples_needed"]
                needed = (
                    ("≤ " if ge else "")
                    + f"{sn['geomean']:,.0f}"
                    + (f" [{sn['ci'][0]:,.0f}, {sn['ci'][1]:,.0f}]" if sn["ci"][0] else "")
                )
            else:
                ratio = text = needed = "–"
            n = len(e["per_seed"])
            note = f"{e['seeds_reached']}/{n}"
            if e["seeds_by_first_checkpoint"]:
                note += f" ({e['seeds_by_first_checkpoint']} by the first checkpoint)"
            if e["seeds_not_reached"]:
                note += f" ({e['seeds_not_reached']} never)"
            gain = _fmt(e["reference_gain"]) if "reference_gain" in e else "–"
            lines.append(f"| {cells['rows'][row]} | {target} | {gain} | {needed} | {ratio} | {text} | {note} |")
        lines.append("")
    sc = summary.get("scaling")
    if sc:
        law = sc["law"]
        lo, hi = sc["interval"]
        lines += [
            "### Scaling law, checked on runs it never saw",
            "",
            f"a(n) = {law['a_inf']:.4f} − {law['b']:.4f}·(n/1000)^−{law['alpha']:.3f}, fitted on "
            f"{sc['fitted_runs']} finished runs of `{sc['model']}` ({cells['rows'][sc['row']]}) at "
            f"{', '.join(f'{int(b):,}' for b in sc['fitted_budgets'])} samples.",
            "",
            f"| held-out budget | predicted ({conf}% interval for one run) | actual (mean ± seed std) | error "
            "| held-out seed std | runs inside the interval |",
            "|---|---|---|---|---|---|",
            f"| {int(sc['samples']):,} | {sc['prediction']:.4f} [{lo:.4f}, {hi:.4f}] | {sc['heldout_mean']:.4f} ± "
            f"{(sc['heldout_seed_std'] or 0):.4f} | {sc['error']:+.4f} | {(sc['heldout_seed_std'] or 0):.4f} "
            f"| {sc['heldout_in_interval']}/{sc['heldout_runs']} |",
            "",
        ]
    return "\n".join(lines)


def sweep_plot(cells: dict, sw: dict, path: Path) -> None:
    """Dose-response: the score at each sweep value, one line per (row, model), mean with its
    t interval and every seed as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = cells["sweep"]["labels"]
    x = list(range(len(labels)))
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 3, 3.6), dpi=120)
    for i, (base, by_col) in enumerate(sw["rows"].items()):
        for j, (col, points) in enumerate(by_col.items()):
            shift = (i * len(by_col) + j) * 0.06  # side by side, not on top of each other
            xs = [v + shift for v in x]
            means = [p["mean"] for p in points]
            lo = [p["mean"] - p["ci"][0] if p["ci"][0] is not None else 0 for p in points]
            hi = [p["ci"][1] - p["mean"] if p["ci"][1] is not None else 0 for p in points]
            line = ax.errorbar(xs, means, yerr=[lo, hi], marker="o", capsize=3, label=f"{base} · {col}")
            for xv, p in zip(xs, points, strict=True):
                ax.scatter([xv] * len(p["per_seed"]), p["per_seed"], s=8, alpha=0.5, color=line[0].get_color())
    ax.set_xticks(x, labels)
    ax.set_xlabel(sw["key"])
    ax.set_ylabel(f"mutual {cells.get('k', 10)}-NN with the image encoder")
    ax.set_title(f"{cells['name']}: {len(cells['seeds'])} seeds, mean and {int(cells['confidence'] * 100)}% interval")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def curves_plot(cells: dict, eff: dict, path: Path) -> None:
    """Alignment against samples seen (log axis), one panel per row: the mean curve over
    seeds with its min-max band, and the reference's final score as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(cells["rows"])
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.4), dpi=120, sharey=True, squeeze=False)
    for ax, row in zip(axes[0], rows, strict=True):
        for col in (eff["model"], eff["reference"]):
            curves = [
                r["curve"]
                for r in cells["records"]
                if r["kind"] == "grid" and r["row"] == row and r["column"] == col and r["curve"]
            ]
            if not curves:
                continue
            x = np.array([p["samples"] for p in curves[0]["points"]], dtype=float)
            y = np.array([[p["mutual_knn"] for p in c["points"]] for c in curves])
            view = cells["column_views"][col]
            colour = VIEW_COLOURS.get(view, "#777777")
            trained = x > 0
            if not trained.all():  # the initialisation, drawn half a step left of the first checkpoint
                x[~trained] = x[trained].min() / 2
                ax.plot(x[~trained], y[:, ~trained].mean(0), "s", mfc="none", color=colour)
            ax.plot(
                x[trained],
                y[:, trained].mean(0),
                "o-",
                ms=3,
                color=colour,
                label=f"{col} ({VIEW_LABELS.get(view, view)})",
            )
            ax.fill_between(x[trained], y[:, trained].min(0), y[:, trained].max(0), color=colour, alpha=0.2, lw=0)
            if col == eff["reference"]:
                ax.axhline(y[:, -1].mean(), ls="--", lw=1, color=colour, label=f"{col}: its final score")
        chance = next(r["chance"] for r in cells["records"])
        ax.axhline(chance, ls=":", lw=1, color="k", label="chance")
        ax.set_xscale("log")
        ax.set_xlabel("training samples")
        ax.set_title(cells["rows"][row], fontsize=9)
    axes[0][0].set_ylabel(f"mutual {cells.get('k', 10)}-NN with the image encoder")
    axes[0][-1].legend(frameon=False, fontsize=8)
    # one panel is narrower than the title: two lines there
    fig.suptitle(
        f"alignment along training{chr(10) if len(rows) == 1 else ' '}"
        f"(mean of {len(cells['seeds'])} seeds, band = min–max; □ at initialisation)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def scaling_plot(sc: dict, path: Path) -> None:
    """Finished runs used in the fit, the fitted law, and the held-out runs with the
    predicted interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import NullFormatter

    from .scaling import SaturatingLaw

    law = SaturatingLaw(**sc["law"])
    fit = sc["fit_points"]
    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=120)
    ax.plot(
        [p["samples"] for p in fit], [p["mutual_knn"] for p in fit], "o", color="#3b7dd8", ms=4, label="fitted runs"
    )
    xs = np.geomspace(min(p["samples"] for p in fit), sc["samples"] * 2, 200)
    ax.plot(xs, law(xs), "-", color="#3b7dd8", lw=1, label="fitted law")
    ax.errorbar(
        [sc["samples"]],
        [sc["prediction"]],
        yerr=[[sc["prediction"] - sc["interval"][0]], [sc["interval"][1] - sc["prediction"]]],
        fmt="s",
        color="k",
        capsize=4,
        ms=5,
        label="forecast (interval)",
    )
    ax.plot(
        [sc["samples"]] * len(sc["heldout_actual"]),
        sc["heldout_actual"],
        "x",
        color="#c0504d",
        ms=7,
        label="held-out runs",
    )
    ax.set_xscale("log")
    # under two decades matplotlib labels the minor ticks too, and their labels overlap
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training samples (finished runs)")
    ax.set_ylabel("mutual kNN with the image encoder")
    row = f" ({sc['row']})" if sc.get("row") else ""
    ax.set_title(f"scaling law: {sc['model']}{row}, forecast vs held-out runs", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- captioning through one map (platonic_core/caption) ---------------------------------

CAPTION_METHODS = {
    "text_embedding": "a true caption's text embedding (no image)",
    "pairfree": "pair-free rotation (no pair)",
    "floor_shuffled": "floor: the map on all pairs, shuffled images",
    "frequent": "floor: the most frequent training caption",
    "human": "bound: another true caption of the image (no decoder)",
}
ATTRIBUTE_KINDS = ("shape", "colour", "size", "position", "count", "background")


def _caption_method(m: str) -> str:
    if "@" in m:
        kind, n = m.split("@")
        return f"{kind} on {'all' if n == 'all' else n} pairs"
    return CAPTION_METHODS.get(m, m)


def caption_table(summary: dict) -> str:
    """Markdown: per conditioning encoder and conditioning (a map, or a true caption's text
    embedding), the decoder's captions beside the nearest training caption to the same
    vector (CIDEr-D and BLEU-4: mean over seeds and t interval; METEOR and ROUGE-L: means,
    where scored), the map's R@1 on the eval images, and, on the world, attribute precision /
    recall per kind."""
    conf = int(round(summary["confidence"] * 100))
    n_seeds = len(summary["seeds"])
    near = "/nearest"
    scored = {k for rows in summary["encoders"].values() for m in rows.values() for k in m}
    extra = [k for k in ("METEOR", "ROUGE-L") if k in scored]
    lines = [
        f"Captions of {summary['n_images']} held-out images ({summary['references_per_image']:.1f} references "
        f"each), pycocoevalcap ×100; mean over {n_seeds} seeds with a {conf}% t interval. Each conditioning "
        "vector is read by the decoder and, beside it, answered with the nearest training caption (cosine to "
        "its text embedding: the retrieval baseline). Map R@1: an image's mapped feature retrieving its own "
        f"caption's embedding among all eval captions (chance {1 / summary['n_images']:.4f}). A true caption's "
        "text embedding is scored against the image's other references.",
        "",
        "| encoder | conditioning | CIDEr-D: decoder | CIDEr-D: nearest caption | BLEU-4: decoder | "
        "BLEU-4: nearest caption | " + "".join(f"{k}: decoder | " for k in extra) + "map R@1 |",
        "|---|---|---|---|---|---|" + "---|" * len(extra) + "---|",
    ]

    def cell(metrics: dict, k: str, ci: bool) -> str:
        s = metrics.get(k)
        if not s or s["mean"] is None:
            return "–"
        return _fmt(s, 1) if ci else f"{s['mean']:.1f}"

    for enc, rows in summary["encoders"].items():
        for m, metrics in rows.items():
            if m.endswith(near):
                continue
            other = rows.get(m + near, {})
            r1 = metrics.get("map_R@1")
            r1s = f"{r1['mean']:.3f}" if r1 and r1["mean"] is not None else "–"
            cells = [cell(metrics, "CIDEr-D", True), cell(other, "CIDEr-D", True)]
            cells += [cell(metrics, "BLEU-4", True), cell(other, "BLEU-4", True)]
            cells += [cell(metrics, k, False) for k in extra]
            lines.append(f"| {enc} | {_caption_method(m)} | " + " | ".join(cells) + f" | {r1s} |")
    for name in ("human", "frequent"):
        f = summary.get("once", {}).get(name)
        if f:
            values = " | ".join(
                f"{f[k]:.1f}" if k in f else "–" for k in ("CIDEr-D", "CIDEr-D", "BLEU-4", "BLEU-4", *extra)
            )
            lines.append(f"| (any) | {CAPTION_METHODS[name]} (no decoder, no retrieval) | {values} | – |")
    lines += ["", f"The most frequent training caption: “{summary.get('frequent_caption', '')}”"]
    if any(f"{k} R" in scored for k in ATTRIBUTE_KINDS):
        lines += ["", *caption_attribute_table(summary)]
    return "\n".join(lines) + "\n"


def caption_attribute_table(summary: dict) -> list[str]:
    """Attribute precision / recall per kind (caption/attributes.py), means over seeds."""
    head = " | ".join(f"{k} P / R" for k in ATTRIBUTE_KINDS)
    lines = [
        "Attributes the captions state, read back with the world's grammar against each scene's true "
        "attributes: precision / recall per kind (bags of values, not bound to objects; count: objects, one "
        "per shape named), mean over seeds. A true caption states 1.00 / 1.00; the shuffled-image floor is "
        "what co-occurrence alone gives.",
        "",
        f"| encoder | conditioning | captions by | {head} |",
        "|---|---|---|" + "---|" * len(ATTRIBUTE_KINDS),
    ]

    def pr(metrics: dict, kind: str) -> str:
        def one(k: str) -> str:
            v = metrics.get(k)
            v = v.get("mean") if isinstance(v, dict) else v
            return "–" if v is None else f"{v:.2f}"

        return f"{one(f'{kind} P')} / {one(f'{kind} R')}"

    for enc, rows in summary["encoders"].items():
        for m, metrics in rows.items():
            base, by = (m[: -len("/nearest")], "nearest caption") if m.endswith("/nearest") else (m, "decoder")
            cells = " | ".join(pr(metrics, k) for k in ATTRIBUTE_KINDS)
            lines.append(f"| {enc} | {_caption_method(base)} | {by} | {cells} |")
    for name in ("human", "frequent"):
        f = summary.get("once", {}).get(name)
        if f:
            lines.append(
                f"| (any) | {CAPTION_METHODS[name]} | – | " + " | ".join(pr(f, k) for k in ATTRIBUTE_KINDS) + " |"
            )
    return lines


def caption_plot(summary: dict, path: Path) -> None:
    """CIDEr-D against the number of pairs the map was fitted on (log axis), per encoder and
    paired kind, mean with its interval: the decoder (solid / dashed) and the nearest training
    caption through the same map (dotted); pair-free and the decoder on a true caption's text
    embedding as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    colours = ["#3b7dd8", "#e0a030", "#c0504d", "#2a8a4a", "#6a3d9a", "#777777"]
    styles = {"lstsq": "-", "procrustes": "--", "lstsq nearest": ":", "procrustes nearest": (0, (1, 1))}
    n_all, n_min = None, None
    for k, (enc, rows) in enumerate(summary["encoders"].items()):
        c = colours[k % len(colours)]
        paired: dict[str, list[tuple[float, dict]]] = {}
        for m, metrics in rows.items():
            if "@" in m and "CIDEr-D" in metrics:
                kind, n = m.removesuffix("/nearest").split("@")
                kind += " nearest" if m.endswith("/nearest") else ""
                paired.setdefault(kind, []).append((n, metrics["CIDEr-D"]))
        for kind, pts in paired.items():
            finite = [int(n) for n, _ in pts if n != "all"]
            n_all = n_all or (max(finite) * 10 if finite else 10)
            xs = [n_all if n == "all" else int(n) for n, _ in pts]
            n_min = min(xs) if n_min is None else min(n_min, *xs)
            ys = [s["mean"] for _, s in pts]
            lo = [s["mean"] - s["ci"][0] if s["ci"][0] is not None else 0 for _, s in pts]
            hi = [s["ci"][1] - s["mean"] if s["ci"][1] is not None else 0 for _, s in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], color=c, ls=styles.get(kind, "-"), marker="o", ms=3, capsize=2,
                        label=f"{enc}: {kind}")  # fmt: skip
        for m, ls, what in (("pairfree", "-.", "pair-free"), ("text_embedding", (0, (5, 1)), "text embedding")):
            if m in rows and "CIDEr-D" in rows[m]:
                ax.axhline(rows[m]["CIDEr-D"]["mean"], color=c, ls=ls, lw=1, label=f"{enc}: {what}")
    f = summary.get("once", {}).get("frequent", {})
    if "CIDEr-D" in f:
        ax.axhline(f["CIDEr-D"], color="#444444", ls=(0, (1, 3)), lw=1, label="most frequent caption")
    h = summary.get("once", {}).get("human", {})
    if "CIDEr-D" in h:
        ax.axhline(h["CIDEr-D"], color="#000000", ls="-", lw=0.8, label="bound: another true caption")
    ax.set_xscale("log")
    if n_all:  # the axis spans the data: ticks from the fewest pairs fitted, up to "all"
        ticks = sorted({t for t in ax.get_xticks() if n_min <= t < n_all})
        ax.set_xticks([*ticks, n_all], [*(f"{int(t)}" for t in ticks), "all"])
        ax.set_xlim(n_min / 1.5, n_all * 1.5)
    ax.set_xlabel("image-caption pairs the map was fitted on")
    ax.set_ylabel("CIDEr-D ×100")
    ax.set_title(f"captions through one map ({len(summary['seeds'])} seeds, {int(summary['confidence'] * 100)}% CI)")
    ax.legend(fontsize=6, ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def caption_examples(examples: list[dict], out: Path) -> list[str]:
    """An examples page, as Markdown (images beside it as example_NN.png) and as one
    self-contained HTML file (images inline). Each example: `image` (uint8 (H, W, 3) array or
    PIL image), `image_id`, `references`, `captions` (label -> generated caption). Returns the
    files written."""
    import base64
    import html
    import io

    import numpy as np
    from PIL import Image

    md = ["# Captions through one map: examples", ""]
    page = [
        "<!doctype html><meta charset='utf-8'><title>captions through one map</title>",
        "<style>body{font-family:sans-serif;max-width:1100px}td{vertical-align:top;padding:6px}"
        "img{image-rendering:pixelated}li{margin:2px 0}</style><h1>Captions through one map: examples</h1><table>",
    ]
    files = []
    for k, ex in enumerate(examples):
        im = ex["image"] if isinstance(ex["image"], Image.Image) else Image.fromarray(np.asarray(ex["image"]))
        scale = max(1, 128 // max(im.size))  # tiny world renders: scaled up, pixels kept sharp
        im = im.convert("RGB").resize((im.size[0] * scale, im.size[1] * scale), Image.NEAREST)
        name = f"example_{k:02d}.png"
        im.save(out / name)
        files.append(name)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        b64 = base64.b64encode(buf.getvalue()).decode()
        image_id = display_text(ex["image_id"])  # texts from data: invisible characters shown, not printed
        md += [f"## {image_id}", "", f"![{image_id}]({name})", "", "References:", ""]
        md += [f"- {display_text(r)}" for r in ex["references"]]
        md += ["", "| conditioning → decoder | caption |", "|---|---|"]
        md += [f"| {display_text(label)} | {display_text(cap)} |" for label, cap in ex["captions"].items()]
        md.append("")
        refs = "".join(f"<li>{html.escape(display_text(r))}</li>" for r in ex["references"])
        caps = "".join(
            f"<tr><td><b>{html.escape(display_text(lab))}</b></td><td>{html.escape(display_text(c))}</td></tr>"
            for lab, c in ex["captions"].items()
        )
        page.append(
            f"<tr><td><img src='data:image/png;base64,{b64}'><br><small>{html.escape(image_id)}</small></td>"
            f"<td><i>references</i><ul>{refs}</ul><table>{caps}</table></td></tr>"
        )
    page.append("</table>")
    (out / "examples.md").write_text("\n".join(md) + "\n")
    (out / "examples.html").write_text("\n".join(page) + "\n")
    return [*files, "examples.md", "examples.html"]
