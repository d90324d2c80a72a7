"""The ablation grid: planning cells from a recipe, and the summary statistics on known records."""

from __future__ import annotations

import math

import pytest

from platonic.core.ablation import (
    efficiency,
    forecast_from_cells,
    grid_table,
    load_ablation,
    scaling_check,
)
from platonic.core.config import AblationConfig, ConfigError
from platonic.core.stages import instances


def test_cells_share_every_stage_they_can(tmp_path):
    abl, cells = load_ablation("configs/table7.yaml", quick=True)
    grid = [c for c in cells if c.kind == "grid"]
    assert len(grid) == len(abl.rows) * len(abl.seeds)
    # the upstream of views is one config for every cell of the rows without their own `set`:
    # computed once, then cache hits
    plain = [c for c in cells if not abl.rows[c.row].set]
    for section in ("world", "ingest", "positives", "dedup"):
        assert len({getattr(c.cfg, section).model_dump_json() for c in plain}) == 1, section
    # the web row differs from them in its alt-texts only: same scenes, renders, eval captions
    web = [c.cfg.world.model_dump() for c in cells if c.row == "paraphrase_web"]
    assert len(web) == len(abl.seeds) and all(w == web[0] for w in web)
    plain_world = plain[0].cfg.world.model_dump()
    assert {k for k, v in web[0].items() if v != plain_world[k]} == {"alt_nonvisual", "alt_wrong"}
    # views differ by row only; the image model by seed only
    assert len({(c.cfg.views.model_dump_json(), c.cfg.world.model_dump_json()) for c in grid}) == len(abl.rows)
    assert len({(c.cfg.seed, c.cfg.train.models["image"].model_dump_json()) for c in cells}) == len(abl.seeds)
    # grid cells score every column and record curves for the efficiency pair
    c = grid[0]
    assert c.cfg.evaluate.text_models == abl.columns
    assert [i.id for i in instances(c.cfg) if i.stage == "curve"] == ["curve:good", "curve:ntp"]
    # scaling cells: only the scaled model, at fractions of its full budget, no curves
    full = c.cfg.train.models["good"].steps
    sc = [c for c in cells if c.kind == "scaling"]
    assert sorted({c.steps for c in sc}) == sorted({round(f * full) for f in abl.scaling.fit_fractions})
    assert all(c.cfg.evaluate.text_models == ["good"] and c.cfg.train.models["good"].snapshots == 0 for c in sc)


def test_overrides_reach_the_recipe_and_the_base():
    abl, cells = load_ablation("configs/table7.yaml", ["seeds=[3,4,5,6]", "scaling=null"], ["world.n_train=500"])
    assert abl.seeds == [3, 4, 5, 6] and {c.seed for c in cells} == {3, 4, 5, 6}
    assert all(c.kind == "grid" and c.cfg.world.n_train == 500 for c in cells)


@pytest.mark.parametrize(
    "sets, needle",
    [
        (["columns=[good, ntp, image]"], "column 'image' is the image model"),
        (["columns=[good, ntp, nope]"], "model 'nope', not in train.models"),
        (["seeds=[1, 1]"], "seeds repeat"),
        (["seeds=[1]"], "seeds"),
        (["rows.recaptions.good_sources=[captions]"], "rows.recaptions.good_sources"),
        (["scaling.row=missing"], "scaling.row 'missing'"),
        (["efficiency.reference=bad2"], "efficiency refers to model 'bad2'"),
        (["scaling.fit_fractions=[0.5, 1.5, 0.2]"], "fit_fractions"),
        (["base=nowhere.yaml"], "nowhere.yaml: no such recipe file"),
        (["rows.recaptions.good_sources=[alt]"], "row 'recaptions': good views need 2 texts per image"),
    ],
)
def test_bad_recipes_are_one_line_errors(sets, needle):
    with pytest.raises(ConfigError) as e:
        load_ablation("configs/table7.yaml", sets)
    assert needle in str(e.value) and "\n" not in str(e.value)


def _records(rows=("r1",), seeds=(0, 1, 2)):
    """Synthetic records: good's curve rises past ntp's final score at a known point."""
    out = []
    for row in rows:
        for seed in seeds:
            good = [
                {"samples": n, "mutual_knn": y}
                for n, y in [(100, 0.02), (200, 0.05), (400, 0.09 + 0.001 * seed), (800, 0.12)]
            ]
            ntp = [{"samples": n, "mutual_knn": y} for n, y in [(100, 0.02), (200, 0.03), (400, 0.05), (800, 0.07)]]
            for col, pts, tps, score in (
                ("good", good, 2, 0.12 + 0.01 * seed),
                ("ntp", ntp, 1, 0.07),
                ("bad", None, 1, 0.05),
            ):
                out.append(
                    {
                        "kind": "grid",
                        "row": row,
                        "seed": seed,
                        "column": col,
                        "samples": 800,
                        "mutual_knn": score,
                        "t2i_R@1": 0.1,
                        "heldout_residual": 1.1,
                        "chance": 0.01,
                        "n": 512,
                        "curve": {"points": pts, "texts_per_sample": tps} if pts else None,
                    }
                )
    return out


def _abl(**kw):
    return AblationConfig.model_validate(
        {"rows": {"r1": {"good_sources": ["recap"], "text_sources": ["recap"]}}, "seeds": [0, 1, 2], **kw}
    )


def test_grid_table_mean_and_t_interval():
    cells = {"confidence": 0.95, "rows": {"r1": "row one"}, "columns": ["good", "ntp", "bad"], "records": _records()}
    t = grid_table(cells)["mutual_knn"]["r1"]
    assert t["good"]["mean"] == pytest.approx(0.13) and t["good"]["n"] == 3
    half = 4.302653 * 0.01 / math.sqrt(3)  # t_{0.975, 2} * std / sqrt(n)
    assert t["good"]["ci"] == pytest.approx([0.13 - half, 0.13 + half], rel=1e-4)
    assert t["ntp"]["std"] == pytest.approx(0.0)


def test_efficiency_ratio_from_curves():
    e = efficiency(_abl(), _records())["rows"]["r1"]
    # ntp's final 0.07 is reached between 200 (0.05) and 400 (~0.09) samples, in log space
    for p in e["per_seed"]:
        frac = (0.07 - 0.05) / (0.09 + 0.001 * p["seed"] - 0.05)
        needed = math.exp(math.log(200) + frac * math.log(2))
        assert p["status"] == "reached" and p["samples_needed"] == pytest.approx(needed)
        assert p["sample_ratio"] == pytest.approx(800 / needed)
        assert p["text_ratio"] == pytest.approx(800 / needed / 2)  # a good sample reads 2 texts
    assert (
        e["seeds_reached"] == 3
        and e["sample_ratio"]["ci"][0] < e["sample_ratio"]["geomean"] < e["sample_ratio"]["ci"][1]
    )


def test_efficiency_counts_seeds_that_never_get_there():
    recs = _records()
    for r in recs:
        if r["column"] == "ntp" and r["seed"] == 1:
            r["curve"]["points"][-1]["mutual_knn"] = 0.5  # unreachable target
    e = efficiency(_abl(), recs)["rows"]["r1"]
    assert e["seeds_not_reached"] == 1 and e["seeds_reached"] == 2 and "sample_ratio" not in e


def test_scaling_check_and_forecast_hold_out_the_full_budget():
    law = lambda n: 0.2 - 0.3 * (n / 1000) ** -0.5  # noqa: E731
    recs = []
    for seed in range(3):
        for n in (500, 1000, 2000, 4000):
            recs.append(
                {
                    "kind": "scaling",
                    "row": "r1",
                    "seed": seed,
                    "column": "good",
                    "samples": n,
                    "mutual_knn": law(n) + 0.001 * (seed - 1),
                }
            )
        recs.append(
            {
                "kind": "grid",
                "row": "r1",
                "seed": seed,
                "column": "good",
                "samples": 8000,
                "mutual_knn": law(8000) + 0.001 * (seed - 1),
            }
        )
    abl = _abl(columns=["good"], efficiency=None, scaling={"row": "r1"})
    s = scaling_check(abl, recs)
    assert s["fitted_budgets"] == [500, 1000, 2000, 4000] and s["samples"] == 8000
    assert abs(s["error"]) < 0.003 and s["heldout_in_interval"] == 3
    cells = {"confidence": 0.95, "rows": {"r1": "r1"}, "columns": ["good"], "records": recs}
    f = forecast_from_cells(cells, "good", "r1")
    assert f["prediction"] == pytest.approx(s["prediction"]) and f["actual_in_interval"] == 3
    f2 = forecast_from_cells(cells, "good", "r1", samples=4000)  # 4000 held out, 8000 fitted
    assert 4000 not in f2["fitted_budgets"] and 8000 in f2["fitted_budgets"]
    with pytest.raises(ValueError, match="no finished runs"):
        forecast_from_cells(cells, "ntp", "r1")


def test_paired_differences_remove_the_shared_seed_spread():
    from platonic.core.ablation import paired_differences

    cells = {
        "confidence": 0.95,
        "rows": {"r1": "row one"},
        "columns": ["good", "ntp", "bad"],
        "seeds": [0, 1, 2],
        "records": _records(),
    }
    d = {(x["a"][1], x["b"][1]): x for x in paired_differences(cells) if x["kind"] == "objective"}
    assert d[("good", "ntp")]["per_seed"] == pytest.approx([0.05, 0.06, 0.07])
    assert d[("ntp", "bad")]["mean"] == pytest.approx(0.02) and d[("ntp", "bad")]["std"] == pytest.approx(0.0)


def test_efficiency_by_the_first_checkpoint_is_a_lower_bound():
    recs = _records()
    for r in recs:
        if r["column"] == "ntp" and r["seed"] == 0:
            r["curve"]["points"][-1]["mutual_knn"] = 0.01  # below good's first checkpoint
    e = efficiency(_abl(), recs)["rows"]["r1"]
    assert e["seeds_by_first_checkpoint"] == 1 and e["sample_ratio"]["lower_bound"] is True
    assert e["sample_ratio"]["ci"] == [None, None]
    assert e["reference_gain"]["n"] == 3


def test_a_sweep_crosses_every_row_with_its_values():
    sets = [
        "rows={a: {good_sources: [recap], text_sources: [recap]}, b: {good_sources: [alt, paraphrase], "
        "text_sources: [alt, paraphrase], set: ['world.alt_junk=0.2']}}",
        "sweep={key: train.models.good.lam, values: [0.025, 0.05, 0.1], labels: [x0.5, x1, x2]}",
        "columns=[good]",
        "efficiency=null",
        "scaling=null",
        "seeds=[0, 1]",
    ]
    abl, cells = load_ablation("configs/table7.yaml", sets, quick=True)
    assert sorted({c.row for c in cells}) == ["a@x0.5", "a@x1", "a@x2", "b@x0.5", "b@x1", "b@x2"]
    assert len(cells) == 6 * 2
    by = {(c.row, c.seed): c.cfg for c in cells}
    assert by[("a@x2", 1)].train.models["good"].lam == 0.1 and by[("a@x2", 1)].seed == 1
    assert by[("b@x0.5", 0)].train.models["good"].lam == 0.025
    assert by[("b@x1", 0)].world.alt_junk == 0.2 and by[("a@x1", 0)].world.alt_junk != 0.2  # a row's own `set`
    # the sweep does not touch what it does not set: one world for every cell
    assert len({c.cfg.world.model_dump_json() for c in cells if c.row.startswith("a@")}) == 1


def test_sweep_labels_default_to_the_values_and_must_be_distinct():
    from platonic.core.config import SweepConfig

    assert SweepConfig(key="dedup.remove", values=[[], ["exact"], ["exact", "near"]]).value_labels() == [
        "none",
        "exact",
        "exact+near",
    ]
    with pytest.raises(ValueError, match="labels repeat"):
        SweepConfig(key="a.b", values=[1, 2], labels=["x", "x"])
    with pytest.raises(ValueError, match="2 values"):
        SweepConfig(key="a.b", values=[1, 2], labels=["x"])
    with pytest.raises(ConfigError, match="reserved"):
        load_ablation("configs/table7.yaml", ["rows={'a@b': {good_sources: [recap], text_sources: [recap]}}"])


def test_sweep_summary_pairs_rows_at_one_dose_and_doses_within_a_row(tmp_path):
    from platonic.core.ablation import paired_differences, sweep_table
    from platonic.core.report import ablation_table, sweep_plot

    recs = []
    for base, slope in (("para", -0.02), ("recap", 0.0)):
        for i, label in enumerate(["0", "0.5", "1"]):
            for seed in (0, 1, 2):
                recs.append(
                    {
                        "kind": "grid",
                        "row": f"{base}@{label}",
                        "seed": seed,
                        "column": "good",
                        "mutual_knn": 0.13 + slope * i + 0.01 * seed,
                        "t2i_R@1": 0.1,
                        "heldout_residual": 1.0,
                        "chance": 0.01,
                        "n": 512,
                    }
                )
    cells = {
        "name": "dose",
        "confidence": 0.95,
        "seeds": [0, 1, 2],
        "k": 10,
        "columns": ["good"],
        "column_views": {"good": "good"},
        "rows": {r: r for r in ["para@0", "para@0.5", "para@1", "recap@0", "recap@0.5", "recap@1"]},
        "sweep": {
            "key": "world.alt_nonvisual",
            "values": [0, 0.5, 1],
            "labels": ["0", "0.5", "1"],
            "rows": ["para", "recap"],
        },
        "records": recs,
    }
    sw = sweep_table(cells)
    para = sw["rows"]["para"]["good"]
    assert [p["mean"] for p in para] == pytest.approx([0.14, 0.12, 0.10])
    assert para[2]["min"] == pytest.approx(0.09) and para[2]["max"] == pytest.approx(0.11)
    diffs = {(d["a"][0], d["b"][0]): d for d in paired_differences(cells) if d["kind"] == "positives"}
    # rows at one dose, and each row's doses against its first: not every pair of the 6 rows
    assert set(diffs) == {
        ("para@0", "para@0.5"),
        ("para@0", "para@1"),
        ("recap@0", "recap@0.5"),
        ("recap@0", "recap@1"),
        ("para@0", "recap@0"),
        ("para@0.5", "recap@0.5"),
        ("para@1", "recap@1"),
    }
    assert diffs[("para@1", "recap@1")]["mean"] == pytest.approx(-0.04) and diffs[("para@1", "recap@1")][
        "std"
    ] == pytest.approx(0, abs=1e-12)
    sweep_plot(cells, sw, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0
    table = ablation_table(cells, {"table": grid_table(cells), "sweep": sw, "differences": []})
    assert "Sweep of `world.alt_nonvisual`" in table and "0.100" in table


def test_grid_metrics_are_names_mlflow_accepts():
    from mlflow.utils.validation import _validate_metric_name

    from platonic.core.ablation import grid_metrics

    summary = {
        "table": {"mutual_knn": {"r@exact+near": {"good": {"mean": 0.1}}, "r@LeJEPA 0.02": {"good": {"mean": 0.2}}}}
    }
    metrics = grid_metrics(summary)
    assert metrics == {"mutual_knn/r:exact_near/good": 0.1, "mutual_knn/r:LeJEPA 0.02/good": 0.2}
    for name in metrics:
        _validate_metric_name(name)


def test_the_alttext_dose_recipe_sweeps_the_non_visual_share():
    for quick in (False, True):
        abl, cells = load_ablation("configs/alttext_dose.yaml", quick=quick)
        assert abl.columns == ["good"] and abl.efficiency is None and abl.scaling is None
        assert abl.sweep.key == "world.alt_nonvisual" and len(abl.sweep.values) >= 4
        doses = [float(v) for v in abl.sweep.values]
        assert doses[0] == 0 and doses == sorted(doses) and doses[-1] < 1
        labels = abl.sweep.value_labels()
        assert len(cells) == 2 * len(doses) * len(abl.seeds) and all(c.kind == "grid" for c in cells)
        assert sorted({c.row for c in cells}) == sorted(
            f"{r}@{lb}" for r in ("paraphrase", "recaptions") for lb in labels
        )
        by = {(c.row, c.seed): c.cfg for c in cells}
        for seed in abl.seeds:
            for label, dose in zip(labels, doses, strict=True):
                para, recap = by[(f"paraphrase@{label}", seed)], by[(f"recaptions@{label}", seed)]
                assert para.world.alt_nonvisual == recap.world.alt_nonvisual == dose
                assert para.views.good_sources == ["alt", "paraphrase"] and recap.views.good_sources == ["recap"]
                # one model per cell: the good-view JEPA (scored against the seed's image encoder)
                assert para.evaluate.text_models == ["good"] and para.seed == seed
                # only the alt-texts move along the sweep: everything else is the dose-0 world
                w0 = by[(f"paraphrase@{labels[0]}", seed)].world.model_copy(update={"alt_nonvisual": dose})
                assert para.world == w0 and para.world.alt_wrong == 0 and para.world.eval_partial == 0
        if quick:
            assert cells[0].cfg.world.n_train < 12000 and cells[0].cfg.train.models["good"].steps < 450


@pytest.mark.parametrize("quick", [False, True])
def test_lambda_recipe_sweeps_the_good_view_lam_only(quick):
    abl, cells = load_ablation("configs/lambda.yaml", quick=quick)
    assert abl.columns == ["good"] and abl.efficiency is None and abl.scaling is None and len(abl.seeds) >= 3
    labels = ["LeJEPA 0.02", "x0.5", "x1", "x2", "x4"]
    assert abl.sweep.value_labels() == labels and abl.sweep.values == sorted(abl.sweep.values)
    assert sorted({c.row for c in cells}) == sorted(f"recaptions@{lab}" for lab in labels)
    assert len(cells) == len(labels) * len(abl.seeds) and all(c.kind == "grid" for c in cells)
    lam = {(c.row.split("@")[1], c.seed): c.cfg.train.models["good"].lam for c in cells}
    demo = load_ablation("configs/table7.yaml")[1][0].cfg.train.models["good"].lam
    assert demo == 0.05
    for s in abl.seeds:
        assert [lam[(lab, s)] for lab in labels] == [0.02, demo / 2, demo, 2 * demo, 4 * demo]
    # λ is the only thing that differs within a seed: the image encoder and the views are shared
    for s in abl.seeds:
        same_seed = [c.cfg for c in cells if c.seed == s]
        assert len({c.train.models["image"].model_dump_json() for c in same_seed}) == 1
        dumped = {c.model_dump_json(exclude={"train"}) for c in same_seed}
        assert len(dumped) == 1
        good = [c.train.models["good"].model_copy(update={"lam": 0}) for c in same_seed]
        assert len({g.model_dump_json() for g in good}) == 1
    assert all(c.cfg.evaluate.text_models == ["good"] and c.cfg.views.good_sources == ["recap"] for c in cells)
    assert all((c.cfg.world.n_train == 3000) == quick for c in cells)


@pytest.mark.parametrize("quick", [False, True])
def test_contamination_recipe_sweeps_what_dedup_removes(quick):
    abl, cells = load_ablation("configs/contamination.yaml", quick=quick)
    assert abl.columns == ["good"] and len(abl.seeds) >= 3
    labels = ["none", "exact", "exact+near"]
    assert len(cells) == len(abl.rows) * len(labels) * len(abl.seeds)
    for c in cells:
        row, label = c.row.split("@")
        # leaked captions enter training only through alt-texts (and their paraphrases)
        assert "alt" in c.cfg.views.good_sources and row in abl.rows
        assert c.cfg.dedup.remove == {"none": [], "exact": ["exact"], "exact+near": ["exact", "near"]}[label]
        assert c.cfg.dedup.levels == ["exact", "near"] and c.cfg.dedup.enabled
        assert c.cfg.world.eval_leak > 0  # there is something to remove
    # the world (and its leak) and the image encoder do not depend on what dedup removes
    assert len({c.cfg.world.model_dump_json() for c in cells}) == 1
    assert len({c.cfg.train.models["image"].model_dump_json() for c in cells}) == 1


def test_the_wordnet_budget_recipes_plan_the_runs_their_docs_report():
    """configs/wordnet_scaling.yaml and wordnet_efficiency.yaml (docs/realdata.md, issue 41):
    the budgets, widths and next-token's sample-matched steps the hypotheses were written for."""
    abl, cells = load_ablation("configs/wordnet_scaling.yaml")
    grid = [c for c in cells if c.kind == "grid"]
    assert {(c.row, c.cfg.train.models["good"].width, c.cfg.train.models["good"].steps) for c in grid} == {
        ("w64", 64, 1500),
        ("w128", 128, 1500),
    }
    scaled = {(c.row, c.steps) for c in cells if c.kind == "scaling"}
    assert scaled == {("w64", s) for s in (94, 188, 375, 750)}  # 16x below the held-out 1,500
    _, cells = load_ablation("configs/wordnet_scaling.yaml", ["scaling.row=w128"])
    assert {(c.row, c.steps) for c in cells if c.kind == "scaling"} == {("w128", s) for s in (94, 188, 375, 750)}
    abl, cells = load_ablation("configs/wordnet_efficiency.yaml")
    assert len(cells) == 3 and abl.seeds == [0, 1, 2]
    models = cells[0].cfg.train.models
    assert models["ntp"].steps == models["good"].steps == 1500
    assert models["ntp"].batch_size == models["good"].batch_size == 128
    assert [i.id for i in instances(cells[0].cfg) if i.stage == "curve"] == ["curve:good", "curve:ntp"]


def test_the_large_wordnet_recipe_is_the_one_its_hypothesis_fixed():
    """configs/wordnet_large.yaml as docs/realdata.md wrote it down before its run."""
    from platonic.core.config import load_config

    cfg = load_config("configs/wordnet_large.yaml")
    good = cfg.train.models["good"]
    assert (cfg.views.tokenizer, cfg.views.vocab_size, cfg.views.max_len) == ("wordpiece", 16000, 48)
    assert (good.width, good.layers, good.heads, good.steps, good.batch_size, good.lam) == (256, 4, 4, 3500, 128, 0.05)
    assert good.checkpoint_every == 1000 * good.batch_size  # resumable every 1,000 steps
    assert cfg.evaluate.text_models == ["good"] and cfg.evaluate.layers == "best"
