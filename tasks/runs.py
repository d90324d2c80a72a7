"""Flow-level MLflow runs, once: open a parent run, publish a flow's outputs to it, read an
ablation back. Stage runs are the executor's (executor.py)."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from platonic.core.config import stable_hash
from platonic.core.durable import disk_full

from . import tracking
from .executor import RunContext


def recipe_run_name() -> str:
    """A flow run's name: its recipe's name and start time (`demo-20261204-014500`), not
    Prefect's random adjective-animal; the MLflow parent run takes the same name."""
    from prefect import runtime

    params = runtime.flow_run.parameters
    name = runtime.flow_run.flow_name
    for key in ("config", "recipe"):
        value = params.get(key)
        if isinstance(value, dict) and value.get("name"):
            name = value["name"]
            break
        if isinstance(value, str) and value:
            name = Path(value).stem
            break
    return stamped(name)


def stamped(name: str) -> str:
    """A run's name: what ran and when (`demo-20261204-014500`)."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


@contextmanager
def parent_run(
    out_dir: str | Path,
    experiment: str,
    name: str,
    config: dict,
    tags: dict[str, str],
    params: dict[str, Any] | None = None,
) -> Iterator[RunContext]:
    """Open the parent run of one flow run or command (tags: Prefect flow-run id when in a
    flow, git commit, config digest, the owning process; the config as `config.yaml`;
    `params` flattened), yield the context stage executions log under, and close the run
    FINISHED, KILLED if the user stopped it (Ctrl-C), or FAILED if the body raised. Runs
    that a dead process of this host left RUNNING in the store are marked KILLED first."""
    from prefect import runtime

    out = Path(out_dir).resolve()
    c = tracking.client(out)
    tracking.mark_killed_runs(c)
    exp = tracking.experiment_id(c, experiment, out)
    tags = {
        **tracking.owner_tags(),
        tracking.RECIPE_TAG: name,
        tracking.CONFIG_DIGEST_TAG: stable_hash(config),
        tracking.PREFECT_FLOW_RUN_TAG: str(runtime.flow_run.id or ""),
        **tags,
    }
    if commit := tracking.git_commit():
        tags[tracking.GIT_COMMIT_TAG] = commit
    # the Source (and Version) columns of MLflow's runs table, on the parent and every run under it
    shared = tracking.source_tags(tags.get(tracking.FLOW_TAG, name))
    if tracking.GIT_COMMIT_TAG in tags:
        shared[tracking.GIT_COMMIT_TAG] = tags[tracking.GIT_COMMIT_TAG]
    tags = {**shared, **tags}
    # the flow run's name (recipe_run_name) when in a flow: Prefect and MLflow name it alike
    run_name = runtime.flow_run.name or stamped(name)
    run_id = c.create_run(exp, run_name=run_name, tags=tags).info.run_id
    try:
        tracking.log_text(c, run_id, yaml.safe_dump(config, sort_keys=False), "config.yaml")
        if params:
            tracking.log_params(c, run_id, tracking.flatten(params))
        yield RunContext(out, exp, run_id, tracking.tracking_uri(out), run_tags=shared)
        c.set_terminated(run_id, "FINISHED")
    except BaseException as e:
        full = disk_full(e, where=out, database=tracking.tracking_uri(out))
        with contextlib.suppress(Exception):  # on a full disk this write fails too: the cause is what to say
            c.set_terminated(run_id, tracking.end_status(e))
        if full is not None and full is not e:
            raise full from e
        raise


def name_by_what_ran(ctx: RunContext, instances: list[str], only: str | None = None) -> str:
    """Rename a flow's parent run after what it ran, once it has: a full run keeps its name
    (`demo-20261206-201500`); a rerun says what it was (`... (only evaluate)`, `... (all 14
    stages cached)`, `... (ran evaluate; 13 cached)`), so the runs table tells it from a full
    run. `instances`: the stage instances the run took part in (ran or took from the cache);
    the parent's `platonic.reused.*` tags name the cached ones, whichever worker ran them.
    Returns the name."""
    c = ctx.client
    run = c.get_run(ctx.parent_run_id)
    reused = {
        k.removeprefix(tracking.REUSED_TAG).replace("/", "@")
        for k in run.data.tags
        if k.startswith(tracking.REUSED_TAG)
    }
    ran = [i for i in instances if i not in reused]
    cached = len(instances) - len(ran)
    if only:
        what = f"only {only}"
    elif not ran:
        what = f"all {cached} stages cached"
    elif cached:
        what = f"ran {', '.join(ran) if len(ran) <= 3 else f'{len(ran)} stages'}; {cached} cached"
    else:
        return run.info.run_name
    name = f"{run.info.run_name} ({what})"[:250]
    c.update_run(ctx.parent_run_id, name=name)
    return name


def publish(ctx: RunContext, results: dict[str, Any], files: dict[str, Path]) -> Path:
    """A flow's outputs: `files` (name -> source) copied into OUT_DIR/runs/<parent run>/
    beside results.json, and each logged to the parent run. Returns that folder."""
    out = run_folder(ctx)
    out.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        if Path(src).exists():
            (out / name).write_bytes(Path(src).read_bytes())
            ctx.client.log_artifact(ctx.parent_run_id, str(out / name))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    ctx.client.log_artifact(ctx.parent_run_id, str(out / "results.json"))
    if (out / "table.md").is_file():
        _prefect_artifact(ctx, (out / "table.md").read_text(), out)
    return out


def _prefect_artifact(ctx: RunContext, table_md: str, out: Path) -> None:
    """The flow's table as a Prefect markdown artifact of its flow run (the Prefect UI shows
    the numbers beside the run), with where the files and the MLflow run are."""
    from prefect import runtime
    from prefect.artifacts import create_markdown_artifact

    if not runtime.flow_run.id:  # a command outside a flow (ingest, audit)
        return
    create_markdown_artifact(
        markdown=f"{table_md}\n\nOutputs: `{out}` · MLflow run `{ctx.parent_run_id}` ({ctx.tracking_uri})",
        key="results",
        description="the flow run's results table (table.md)",
    )


def run_header(ctx: RunContext, experiment: str) -> dict[str, Any]:
    """The fields every flow's results.json starts with: where the parent run lives."""
    return {
        "run_id": ctx.parent_run_id,
        "experiment": experiment,
        "experiment_id": ctx.experiment_id,
        "tracking_uri": ctx.tracking_uri,
        "output_dir": str(run_folder(ctx)),
    }


def run_folder(ctx: RunContext) -> Path:
    """Where a flow run's outputs go (publish writes them): OUT_DIR/runs/<parent run id>/."""
    return ctx.out_dir / "runs" / ctx.parent_run_id


def load_ablation_run(experiment: str, out_dir: str, run_id: str | None = None) -> tuple[str, dict, dict]:
    """(run id, cells.json, summary.json) of an ablation parent run: the latest finished one
    in `experiment` (or `run_id`), read back from MLflow."""
    c = tracking.client(out_dir)
    if run_id is None:
        exp = c.get_experiment_by_name(experiment)
        if exp is None:
            raise LookupError(f"no MLflow experiment {experiment!r} at {tracking.tracking_uri(out_dir)}")
        runs = c.search_runs(
            [exp.experiment_id],
            f"tags.`{tracking.FLOW_TAG}` = 'ablate' and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not runs:
            raise LookupError(f"experiment {experiment!r} has no finished ablation run (run `platonic ablate` first)")
        run_id = runs[0].info.run_id
    with tempfile.TemporaryDirectory() as d:
        try:
            cells = json.loads(open(c.download_artifacts(run_id, "cells.json", d)).read())
            summary = json.loads(open(c.download_artifacts(run_id, "summary.json", d)).read())
        except Exception as e:
            raise LookupError(f"run {run_id} has no ablation outputs (cells.json, summary.json): {e}") from None
    return run_id, cells, summary
