"""The ablation grid's stage (`platonic ablate`): its cells are pipeline stage instances
(stages/pipeline.py); this is the one stage that summarises them."""

from __future__ import annotations

from ..contract import StageCall, StageSpec


def ablation(call: StageCall):
    """The grid's summary from every cell's evaluate, embed and curve artifacts. Inputs are
    named `<cell>/<instance>`; the cells (their recipes) and the MLflow run behind each of
    their stage instances come from the flow as context (records name the runs)."""
    from ..ablation import CellResult, grid_metrics, summarize

    cells = call.context["cells"]
    results = []
    for cell in cells:  # cell names hold slashes ("recap/seed=0"): strip the prefix
        mine = {k.removeprefix(cell.name + "/"): m for k, m in call.inputs.items() if k.startswith(cell.name + "/")}
        results.append(
            CellResult(
                cell,
                mine["evaluate"].path,
                {k.split(":", 1)[1]: v.path for k, v in mine.items() if k.startswith("embed:")},
                {k.split(":", 1)[1]: v.path for k, v in mine.items() if k.startswith("curve:")},
                call.context["runs"][cell.name],
            )
        )
    summary = summarize(call.cfg, results, call.out)
    counts = {"cells": len(cells), "records": sum(len(cell.cfg.evaluate.text_models) for cell in cells)}
    return counts, grid_metrics(summary)


ABLATE_SPECS: dict[str, StageSpec] = {
    "ablation": StageSpec(
        "ablation",
        5,
        ("name", "seeds", "rows", "sweep", "columns", "efficiency", "scaling", "confidence"),
        ("cells.json", "summary.json", "table.md", "curves.png", "scaling.png", "sweep.png"),
        ablation,
        "the grid summarised: mean ± CI over seeds per cell, retrieval, text-text rotations, "
        "sample efficiency, the scaling-law fit checked on a held-out run",
        log_files=("cells.json", "summary.json", "table.md", "curves.png", "scaling.png", "sweep.png"),
    ),
}

# inputs of the summary stage: what it reads of each cell
ABLATION_INPUTS = ("evaluate", "embed:", "curve:")
