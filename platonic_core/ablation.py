"""The ablation grid (Table 7 of the paper, on the synthetic world, with seeds).

A grid is data: a base pipeline recipe, rows (where the positives come from), columns (the
base's text models: good views, bad views, next-token) and seeds. Every cell is an ordinary
pipeline recipe derived from the base by overrides, so cells share every stage whose inputs
they share (the world, positives and dedup once; the views once per row; the image encoder
once per seed) through the content-addressed cache.

    abl, cells = load_ablation("configs/table7.yaml", quick=True)
    summary = summarize(abl, results, out_dir)    # results: what the flow produced per cell

Statistics are over seeds: a cell's mean with a Student-t interval (see stats.py).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .config import AblationConfig, ConfigError, PipelineConfig, cell_rows, read_recipe, validate_recipe
from .scaling import forecast, samples_to_reach
from .stats import mean_ci


@dataclass(frozen=True)
class Cell:
    """One pipeline run of the grid."""

    name: str  # "recap/seed=0"; scaling cells: "scaling/recap/steps=60/seed=0"
    kind: str  # grid | scaling
    row: str
    seed: int
    cfg: PipelineConfig
    steps: int | None = None  # scaling cells: the model's budget

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "row": self.row,
            "seed": self.seed,
            "steps": self.steps,
            "config": self.cfg.model_dump(mode="json"),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Cell:
        return cls(d["name"], d["kind"], d["row"], d["seed"], PipelineConfig.model_validate(d["config"]), d["steps"])


def _yaml_value(v) -> str:
    return json.dumps(v)  # JSON is YAML: lists and strings survive `--set` parsing


def load_ablation(
    path: str | Path, overrides: list[str] | None = None, base_overrides: list[str] | None = None, quick: bool = False
) -> tuple[AblationConfig, list[Cell]]:
    """Read an ablation recipe (`overrides` apply to it) and plan its cells (`base_overrides`
    apply to the base pipeline recipe of every cell, after the recipe's own `set`/`quick`)."""
    raw, origin = read_recipe(path)
    abl = validate_recipe(raw, origin, overrides, AblationConfig)
    base_raw, base_origin = read_recipe(abl.base, relative_to=Path(origin).parent)
    shared = [*abl.set, *(abl.quick if quick else []), *(base_overrides or [])]
    rows = cell_rows(abl.rows, abl.sweep)
    cells = []

    def make(name, kind, row, seed, extra, steps=None):
        r = rows[row]
        cell_set = [
            *shared,
            f"seed={seed}",
            f"views.good_sources={_yaml_value(r.good_sources)}",
            f"views.text_sources={_yaml_value(r.text_sources)}",
            *r.set,
            *extra,
        ]
        try:
            cfg = validate_recipe(base_raw, base_origin, cell_set)
        except ConfigError as e:
            raise ConfigError(f"{origin}: cell {name}: {e}") from None
        if cfg.ingest.source == "world":  # texts per image are known before anything runs
            per_image = {"alt": 1, "recap": cfg.positives.recaptions, "paraphrase": cfg.positives.paraphrases}
            have = sum(per_image[k] for k in r.good_sources)
            if have < cfg.views.n_views:
                raise ConfigError(
                    f"{origin}: row {row!r}: good views need {cfg.views.n_views} texts per image, but "
                    f"{'+'.join(r.good_sources)} give {have} (positives: {cfg.positives.recaptions} "
                    f"recaptions, {cfg.positives.paraphrases} paraphrases per image)"
                )
        cells.append(Cell(name, kind, row, seed, cfg, steps))
        return cfg

    # columns become each cell's evaluate.text_models, which refuses an image model in its own
    # words: say it in the ablation's (a base that fails here is named by its first cell below)
    try:
        models = validate_recipe(base_raw, base_origin, shared).train.models
    except ConfigError:
        models = {}
    for m in abl.columns:
        if m in models and models[m].kind == "image_jepa":
            raise ConfigError(f"{origin}: column {m!r} is the image model; columns are text models")
    eff = abl.efficiency
    curve_set = [f"train.models.{m}.snapshots={eff.snapshots}" for m in (eff.model, eff.reference)] if eff else []
    for seed in abl.seeds:
        for row in rows:
            cfg = make(
                f"{row}/seed={seed}",
                "grid",
                row,
                seed,
                [f"evaluate.text_models={_yaml_value(abl.columns)}", *curve_set],
            )
    if abl.scaling:
        sc = abl.scaling
        full = cfg.train.models[sc.model].total_steps
        # a sample budget would override the cell's steps: the cells set steps alone
        unset = [f"train.models.{sc.model}.samples=null"] if cfg.train.models[sc.model].samples else []
        fit_steps = sorted({max(1, round(f * full)) for f in sc.fit_fractions})
        if len(fit_steps) < 3:
            raise ConfigError(
                f"{origin}: scaling.fit_fractions {sc.fit_fractions} of {full} steps give fewer "
                f"than 3 distinct budgets {fit_steps}"
            )
        for seed in abl.seeds:
            for steps in fit_steps:
                make(
                    f"scaling/{sc.row}/steps={steps}/seed={seed}",
                    "scaling",
                    sc.row,
                    seed,
                    [
                        f"evaluate.text_models={_yaml_value([sc.model])}",
                        f"train.models.{sc.model}.steps={steps}",
                        f"train.models.{sc.model}.snapshots=0",
                        *unset,
                    ],
                    steps,
                )
    return abl, cells


# ---- the summary stage ------------------------------------------------------------------


@dataclass
class CellResult:
    """What one cell produced: artifact folders and the MLflow runs behind them."""

    cell: Cell
    evaluate_dir: Path
    embed_dirs: dict[str, Path]  # model -> embed artifact
    curve_dirs: dict[str, Path] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)  # stage instance -> MLflow run id


def cell_records(results: list[CellResult]) -> list[dict]:
    """One record per (cell, text model): the scores every table and fit is built from."""
    records = []
    for r in results:
        scores = json.loads((r.evaluate_dir / "scores.json").read_text())
        for m, s in scores["models"].items():
            mcfg = r.cell.cfg.train.models[m]
            curve = None
            if m in r.curve_dirs:
                curve = json.loads((r.curve_dirs[m] / "curve.json").read_text())
            rot = s.get("procrustes", {})
            records.append(
                {
                    "cell": r.cell.name,
                    "kind": r.cell.kind,
                    "row": r.cell.row,
                    "seed": r.cell.seed,
                    "column": m,
                    "steps": mcfg.total_steps,
                    "samples": mcfg.total_steps * mcfg.batch_size,
                    "texts_per_sample": mcfg.n_views if mcfg.views in ("good", "documents") else 1,
                    "mutual_knn": s["mutual_knn"],
                    "fraction_of_ceiling": s.get("fraction_of_ceiling"),
                    "ceiling": scores.get("ceilings", {}).get("learned"),
                    "ci95_eval": s["ci95"],
                    "layer_a": s["layer_a"],
                    "layer_b": s["layer_b"],
                    "t2i_R@1": rot.get("t2i_R@1"),
                    "i2t_R@1": rot.get("i2t_R@1"),
                    "heldout_residual": rot.get("heldout_residual"),
                    "chance": scores["chance"],
                    "n": scores["n"],
                    "curve": curve,
                    "runs": {
                        k: v for k, v in r.runs.items() if k in (f"train:{m}", f"embed:{m}", "evaluate", f"curve:{m}")
                    },
                }
            )
    return records


def grid_table(cells: dict) -> dict:
    """cells.json -> {metric: {row: {column: mean/std/ci/n}}} over the grid's seeds."""
    conf = cells["confidence"]
    grid = [r for r in cells["records"] if r["kind"] == "grid"]
    out: dict = {}
    for metric in ("mutual_knn", "fraction_of_ceiling", "t2i_R@1", "heldout_residual"):
        out[metric] = {
            row: {
                col: mean_ci(
                    [r[metric] for r in grid if r["row"] == row and r["column"] == col and r.get(metric) is not None],
                    conf,
                )
                for col in cells["columns"]
            }
            for row in cells["rows"]
        }
    return out


def sweep_point(row: str) -> tuple[str, str | None]:
    """`row@label` -> (row, label); a row outside a sweep -> (row, None)."""
    base, _, label = row.partition("@")
    return base, label or None


def row_pairs(rows: list[str]) -> list[tuple[str, str]]:
    """The row pairs worth comparing: every pair without a sweep; with one, the rows at the
    same sweep value (positives compared at one dose) and each row against its own first
    value (the dose's effect)."""
    pairs = []
    for a, b in itertools.combinations(rows, 2):
        (ba, la), (bb, lb) = sweep_point(a), sweep_point(b)
        if la is None or la == lb or (ba == bb and a == next(r for r in rows if sweep_point(r)[0] == ba)):
            pairs.append((a, b))
    return pairs


def paired_differences(cells: dict) -> list[dict]:
    """Differences between two cells measured on the same seeds (the same image encoder
    and eval split), mean with a t interval over seeds: every column pair within a row
    (objectives) and the row pairs of `row_pairs` within a column (positives, doses).
    Pairing removes the seed-to-seed spread the cells share, so these intervals are
    narrower than the cells'."""
    grid = {(r["row"], r["column"], r["seed"]): r["mutual_knn"] for r in cells["records"] if r["kind"] == "grid"}
    seeds = cells["seeds"]
    out = []

    def diff(a, b, kind, where):
        d = [grid[a + (s,)] - grid[b + (s,)] for s in seeds if a + (s,) in grid and b + (s,) in grid]
        out.append({"kind": kind, "where": where, "a": a, "b": b, "per_seed": d, **mean_ci(d, cells["confidence"])})

    for row in cells["rows"]:
        for ca, cb in itertools.combinations(cells["columns"], 2):
            diff((row, ca), (row, cb), "objective", row)
    for col in cells["columns"]:
        for ra, rb in row_pairs(list(cells["rows"])):
            diff((ra, col), (rb, col), "positives", col)
    return out


def text_rotations(abl: AblationConfig, results: list[CellResult]) -> list[dict]:
    """The theorem's one rotation between two *text* models trained separately on different
    positive sources (same column, same seed, two rows): mutual kNN between them and an
    orthogonal Procrustes map fitted on half the eval captions, R@1 and residual held out."""
    # imported here, the summary stage's only reader of feature files: `platonic table` and
    # `platonic forecast` import this module to read cells.json, not torch and the models' code
    from .evaluate import rotation_fit
    from .features import load_features
    from .metrics import alignment

    by = {(r.cell.row, r.cell.seed): r for r in results if r.cell.kind == "grid"}
    # with a sweep, models are compared at one dose only
    pairs = [
        (a, b) for a, b in row_pairs(list(cell_rows(abl.rows, abl.sweep))) if sweep_point(a)[1] == sweep_point(b)[1]
    ]
    out = []
    for col in abl.columns:
        for ra, rb in pairs:
            per_seed = []
            for seed in abl.seeds:
                a = load_features(by[(ra, seed)].embed_dirs[col] / "features.npz")
                b = load_features(by[(rb, seed)].embed_dirs[col] / "features.npz")
                ev = by[(ra, seed)].cell.cfg.evaluate
                s = alignment(a, b, n_boot=0, k=ev.k, clamp_q=ev.clamp_quantile, clamp=ev.clamp, layers=ev.layers)
                rot = rotation_fit(a[s.layer_a], b[s.layer_b], seed=seed)
                per_seed.append(
                    {
                        "seed": seed,
                        "mutual_knn": s.score,
                        "t2i_R@1": rot["t2i_R@1"],
                        "heldout_residual": rot["heldout_residual"],
                    }
                )
            sources = [set(_sources(abl, row, col, by)) for row in (ra, rb)]
            out.append(
                {
                    "column": col,
                    "rows": [ra, rb],
                    "disjoint_sources": not (sources[0] & sources[1]),
                    "per_seed": per_seed,
                    **{
                        k: mean_ci([p[k] for p in per_seed], abl.confidence)
                        for k in ("mutual_knn", "t2i_R@1", "heldout_residual")
                    },
                }
            )
    return out


def _sources(abl: AblationConfig, row: str, col: str, by: dict) -> list[str]:
    """The text kinds a column's model reads in a row."""
    views = by[(row, abl.seeds[0])].cell.cfg.train.models[col].views
    r = cell_rows(abl.rows, abl.sweep)[row]
    return list(r.good_sources if views in ("good", "documents") else r.text_sources)


def efficiency(abl: AblationConfig, records: list[dict]) -> dict:
    """Per row: the samples `model` needs to reach `reference`'s final score (its curve,
    interpolated in log samples), and the ratio reference samples / those samples, with a
    t interval of the log ratio over seeds (a geometric mean). Seeds where the model never
    gets there are counted, not dropped; the interval is given only when every seed got there."""
    eff = abl.efficiency
    out = {}
    for row in cell_rows(abl.rows, abl.sweep):
        per_seed = []
        for seed in abl.seeds:
            cur = {
                r["column"]: r
                for r in records
                if r["kind"] == "grid" and r["row"] == row and r["seed"] == seed and r["curve"]
            }
            if eff.model not in cur or eff.reference not in cur:
                continue
            ref, mod = cur[eff.reference]["curve"], cur[eff.model]["curve"]
            target = ref["points"][-1]["mutual_knn"]
            # did the reference learn anything the untrained encoder did not have? If its final
            # score is no better than at initialisation (step 0; older curves: their first
            # checkpoint), "samples to reach it" measures the initialisation, not learning
            reference_gain = target - ref["points"][0]["mutual_knn"]
            pts = [p for p in mod["points"] if p["samples"] > 0]  # log samples: the trained points
            needed, status = samples_to_reach([p["samples"] for p in pts], [p["mutual_knn"] for p in pts], target)
            ratio = ref["points"][-1]["samples"] / needed if needed else None
            per_seed.append(
                {
                    "seed": seed,
                    "target": target,
                    "reference_gain": reference_gain,
                    "reference_samples": ref["points"][-1]["samples"],
                    "samples_needed": needed,
                    "status": status,
                    "sample_ratio": ratio,
                    "text_ratio": ratio * ref["texts_per_sample"] / mod["texts_per_sample"] if ratio else None,
                }
            )
        reached = [p for p in per_seed if p["status"] == "reached"]
        summary = {
            "per_seed": per_seed,
            "seeds_reached": len(reached),
            "seeds_by_first_checkpoint": sum(p["status"] == "by_first" for p in per_seed),
            "seeds_not_reached": sum(p["status"] == "not_reached" for p in per_seed),
        }
        summary["reference_gain"] = mean_ci([p["reference_gain"] for p in per_seed], abl.confidence)
        bounded = [p for p in per_seed if p["status"] != "not_reached"]
        if per_seed and len(bounded) == len(per_seed):
            # seeds that got there by the first checkpoint give a lower bound on their ratio,
            # so with any of them the geometric mean is a lower bound and no interval is given
            exact = len(reached) == len(per_seed)
            for key in ("sample_ratio", "text_ratio"):
                logs = mean_ci([math.log(p[key]) for p in bounded], abl.confidence)
                summary[key] = {
                    "geomean": math.exp(logs["mean"]),
                    "n": logs["n"],
                    "lower_bound": not exact,
                    "ci": [math.exp(x) if x is not None and exact else None for x in logs["ci"]],
                }
            logs = mean_ci([math.log(p["samples_needed"]) for p in bounded], abl.confidence)
            summary["samples_needed"] = {
                "geomean": math.exp(logs["mean"]),
                "upper_bound": not exact,
                "ci": [math.exp(x) if x is not None and exact else None for x in logs["ci"]],
            }
        out[row] = summary
    return {"model": eff.model, "reference": eff.reference, "rows": out}


def scaling_check(abl: AblationConfig, records: list[dict]) -> dict:
    """Fit the law on the scaling cells (finished runs at smaller budgets) and predict the
    grid's own full-budget runs, which the fit never saw: error against seed noise."""
    sc = abl.scaling
    fit = [
        (r["seed"], r["samples"], r["mutual_knn"])
        for r in records
        if r["kind"] == "scaling" and r["row"] == sc.row and r["column"] == sc.model
    ]
    held = [r for r in records if r["kind"] == "grid" and r["row"] == sc.row and r["column"] == sc.model]
    at = held[0]["samples"]
    f = forecast(fit, at, abl.confidence)
    actual = [r["mutual_knn"] for r in held]
    stats = mean_ci(actual, abl.confidence)
    lo, hi = f["interval"]
    return {
        **f,
        "model": sc.model,
        "row": sc.row,
        "heldout_actual": actual,
        "heldout_mean": stats["mean"],
        "heldout_seed_std": stats["std"],
        "error": f["prediction"] - stats["mean"],
        "within_seed_noise": abs(f["prediction"] - stats["mean"]) <= (stats["std"] or 0.0),
        "heldout_in_interval": sum(lo <= a <= hi for a in actual),
        "heldout_runs": len(actual),
        "fit_points": [{"seed": s, "samples": n, "mutual_knn": y} for s, n, y in fit],
    }


def sweep_table(cells: dict) -> dict:
    """Per base row and column, the score at each sweep value: mean with its interval and the
    seed spread (std, min, max). Paired differences are in `paired_differences`."""
    sw = cells["sweep"]
    grid = [r for r in cells["records"] if r["kind"] == "grid"]
    out: dict = {}
    for base in sw["rows"]:
        for col in cells["columns"]:
            points = []
            for label, value in zip(sw["labels"], sw["values"], strict=True):
                xs = [r["mutual_knn"] for r in grid if r["row"] == f"{base}@{label}" and r["column"] == col]
                points.append(
                    {
                        "label": label,
                        "value": value,
                        "per_seed": xs,
                        "min": min(xs, default=None),
                        "max": max(xs, default=None),
                        **mean_ci(xs, cells["confidence"]),
                    }
                )
            out.setdefault(base, {})[col] = points
    return {"key": sw["key"], "rows": out}


def grid_metrics(summary: dict) -> dict[str, float]:
    """The grid's cell means as flat MLflow metrics: mutual_knn/<row>/<column> (a sweep row
    `r@label` as `r:label`; characters MLflow refuses in a name, such as `+`, as `_`)."""
    return {
        re.sub(r"[^\w\-. :/]", "_", f"mutual_knn/{row.replace('@', ':')}/{col}"): s["mean"]
        for row, cols in summary["table"]["mutual_knn"].items()
        for col, s in cols.items()
        if s["mean"] is not None
    }


def summarize(abl: AblationConfig, results: list[CellResult], out: Path) -> dict:
    """cells.json (every score with its runs), summary.json, table.md and the plots."""
    from .report import ablation_table, curves_plot, scaling_plot, sweep_plot

    records = cell_records(results)
    cells = {
        "name": abl.name,
        "confidence": abl.confidence,
        "seeds": abl.seeds,
        "k": results[0].cell.cfg.evaluate.k,
        "rows": {k: r.label or k for k, r in cell_rows(abl.rows, abl.sweep).items()},
        "columns": abl.columns,
        "column_views": {c: results[0].cell.cfg.train.models[c].views for c in abl.columns},
        "records": records,
    }
    if abl.sweep:
        sw = abl.sweep
        cells["sweep"] = {"key": sw.key, "values": sw.values, "labels": sw.value_labels(), "rows": list(abl.rows)}
    summary = {
        "table": grid_table(cells),
        "differences": paired_differences(cells),
        "rotations": text_rotations(abl, results),
    }
    if abl.sweep:
        summary["sweep"] = sweep_table(cells)
        sweep_plot(cells, summary["sweep"], out / "sweep.png")
    if abl.efficiency:
        summary["efficiency"] = efficiency(abl, records)
        curves_plot(cells, summary["efficiency"], out / "curves.png")
    if abl.scaling:
        summary["scaling"] = scaling_check(abl, records)
        scaling_plot(summary["scaling"], out / "scaling.png")
    (out / "cells.json").write_text(json.dumps(cells, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "table.md").write_text(ablation_table(cells, summary))
    return summary


def forecast_from_cells(cells: dict, model: str, row: str, samples: float | None = None) -> dict:
    """Predict the score of `model` in `row` at `samples` from the grid's finished runs at
    the other budgets (default: the largest budget, whose runs are held out and shown)."""
    runs = [r for r in cells["records"] if r["column"] == model and r["row"] == row]
    if not runs:
        raise ValueError(
            f"no finished runs of model {model!r} in row {row!r} "
            f"(columns: {cells['columns']}, rows: {list(cells['rows'])})"
        )
    budgets = sorted({r["samples"] for r in runs})
    at = float(samples if samples is not None else budgets[-1])
    fit = [(r["seed"], r["samples"], r["mutual_knn"]) for r in runs if r["samples"] != at]
    if len({n for _, n, _ in fit}) < 3:
        raise ValueError(
            f"{model!r} in {row!r} has finished runs at {len(budgets)} budgets {budgets}; the law needs "
            "3 budgets besides the one predicted (add a `scaling:` section to the recipe)"
        )
    f = forecast(fit, at, cells["confidence"])
    actual = [r["mutual_knn"] for r in runs if r["samples"] == at]
    f.update({"model": model, "row": row, "actual": actual})
    if actual:
        lo, hi = f["interval"]
        f["actual_mean"] = sum(actual) / len(actual)
        f["error"] = f["prediction"] - f["actual_mean"]
        f["actual_in_interval"] = sum(lo <= a <= hi for a in actual)
    return f
