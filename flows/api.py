"""Python entry points: what `platonic run` and `platonic ablate` do, from a script or a
notebook, returning results.json as a dict.

    from platonic.flows.api import run, ablate
    res = run("demo", sets=["world.seed=1"])            # a recipe file or a packaged name
    res["models"]["good"]["mutual_knn"]
    res = run("demo", only="evaluate")                  # one stage on cached artifacts
    res = run("demo", only="evaluate", out_dir="~/prh/.platonic")   # from any folder
    grid = ablate("table7", quick=True)                 # grid["summary"], grid["output_dir"]

The store is `out_dir=`, else $PLATONIC_OUT_DIR, else the recipe's (relative to the current
directory); each call says on stderr which it uses (platonic.flows.store). Like the CLI,
each call picks the Prefect server first (PREFECT_API_URL, else the store's running
`platonic server`, else a temporary one that stops with the process) and turns Prefect's and
MLflow's telemetry off unless the environment says otherwise. The flows themselves
(`platonic.flows.pipeline.pipeline`, `platonic.flows.ablate.ablate`) take a validated
recipe as a dict, for deployments.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from platonic.core.config import ConfigError, PipelineConfig, load_config, require_trusted
from platonic.core.config.packages import needed_packages

from . import runlog, services, store


def run(
    recipe: str | Path = "demo",
    sets: Sequence[str] = (),
    only: str | None = None,
    from_stage: str | None = None,
    force: Sequence[str] = (),
    trust_remote_code: bool = False,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run a pipeline recipe (its cached stages are not executed); returns results.json.
    `trust_remote_code`: allow a recipe whose `trust_remote_code` is true (the CLI's flag).
    `out_dir`: the store (else $PLATONIC_OUT_DIR, else the recipe's)."""
    cfg = load_config(recipe, store.out_dir_sets(sets, out_dir))
    return run_config(cfg, only, from_stage, force, f"platonic run {recipe}", trust_remote_code)


def run_config(
    cfg: PipelineConfig,
    only: str | None = None,
    from_stage: str | None = None,
    force: Sequence[str] = (),
    command: str = "platonic demo",
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """`run` on a loaded recipe. `command`: what builds the cache, for the error an `only`
    on an empty cache raises (UpstreamNotCached). A recipe that turns `trust_remote_code`
    on is refused (ConfigError) unless `trust_remote_code` is passed."""
    from platonic.core.stages.dag import plan, require_cached

    require_trusted(cfg, trust_remote_code)
    modes = plan(cfg, only, from_stage, list(force))  # stage names checked before anything starts (or imports MLflow)
    require_packages(needed_packages(cfg))
    where = store.check_for_writing(cfg.out_dir, f"{command} --out-dir COPY")
    services.apply(cfg.services)  # the recipe's endpoints, where the environment names none
    services.use_local_server(where)  # before anything imports Prefect
    if only:  # its upstream must be cached: say so now, before Prefect or MLflow is imported
        require_cached(cfg, modes, f"build them first: {command}", command)
    store.say(where)
    where.mkdir(parents=True, exist_ok=True)
    from platonic.tasks.run_ids import probe_server, tracking_uri

    probe_server(tracking_uri(cfg.out_dir))  # a dead MLflow server: one line before Prefect starts
    # when no server was found: Prefect's temporary one boots in its own process (~4 s) while
    # this one does what the flow would do first: import MLflow and torch, open the store
    if services.tie_temporary_server() == "temporary":
        import torch  # noqa: F401

        from platonic.tasks import tracking

        tracking.client(cfg.out_dir)
    from .pipeline import pipeline

    runlog.start(where)  # after Prefect's logging is set up (at its import), before the flow
    return pipeline(cfg.model_dump(mode="json"), only=only, from_stage=from_stage, force=list(force) or None)


def require_packages(need: dict[str, tuple[str, str]]) -> None:
    """ConfigError, one line, when the recipe turns on something whose package is not
    installed (`need`: config/packages.py's needed_packages or match_needed_packages; before,
    the stage that imports it failed after Prefect's server had started)."""
    from platonic.core.config.packages import missing_packages

    if missing := missing_packages(need):
        raise ConfigError(f"the recipe needs packages that are not installed: {'; '.join(missing)}")


def ablate(
    recipe: str | Path,
    sets: Sequence[str] = (),
    base_sets: Sequence[str] = (),
    quick: bool = False,
    trust_remote_code: bool = False,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run an ablation grid (`configs/table7.yaml`, a sweep, ...) as one flow; returns its
    results (run ids, `summary`, `output_dir` with table.md and the plots). `out_dir`: the
    store of every cell (else $PLATONIC_OUT_DIR, else the base recipe's)."""
    from platonic.core.ablation import load_ablation
    from platonic.tasks.run_ids import probe_server, tracking_uri

    abl, cells = load_ablation(str(recipe), list(sets), store.out_dir_sets(base_sets, out_dir), quick)
    for cell in cells:
        require_trusted(cell.cfg, trust_remote_code)
        require_packages(needed_packages(cell.cfg))
    where = store.check_for_writing(cells[0].cfg.out_dir, f"platonic ablate {recipe} --out-dir COPY")
    store.say(where)
    where.mkdir(parents=True, exist_ok=True)
    services.embedded_defaults()
    probe_server(tracking_uri(cells[0].cfg.out_dir))  # a dead MLflow server: one line now
    services.choose_prefect_server(where)
    from .ablate import ablate as ablate_flow

    runlog.start(where)
    return ablate_flow(abl.model_dump(mode="json"), [c.as_dict() for c in cells])
