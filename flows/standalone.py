"""Commands that run one stage under their own MLflow parent run, with no Prefect server
(its start would take longer than a small audit or ingest takes): the same stage contract,
cache and MLflow layout as the flows.

    platonic audit --corpus ... --eval ...     -> run_audit
    platonic ingest SOURCE... --format F       -> run_ingest
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from platonic.core.artifacts import ArtifactStore, Manifest
from platonic.core.config import AuditConfig, PipelineConfig
from platonic.core.contract import IncompleteArtifact, StageInstance
from platonic.core.stages.audit import audit_inputs
from platonic.core.stages.dag import FORCE, RUN
from platonic.core.stages.pipeline import corpus_source
from platonic.tasks import tracking
from platonic.tasks.executor import run_instance
from platonic.tasks.runs import parent_run, publish, run_header

# `platonic ingest --out DIR` writes outside the store: the store remembers where, so
# `platonic corpus stats` finds it
LATEST_INGEST = "latest-out.txt"


def run_audit(config: dict, force: bool = False) -> dict:
    """Audit a corpus against eval sets (one stage); results.json, summary.md, matches."""
    cfg = AuditConfig.model_validate(config)
    started = time.time()
    plain = cfg.model_dump(mode="json")
    files, evals, inputs = audit_inputs(cfg)
    with parent_run(cfg.out_dir, cfg.experiment, cfg.name, plain, {tracking.FLOW_TAG: "audit"}, params=plain) as ctx:
        m = run_instance(
            StageInstance("audit", flow="audit"),
            cfg,
            inputs,
            FORCE if force else RUN,
            ctx,
            context={"files": files, "evals": evals},
        )
        summary = json.loads((m.path / "summary.json").read_text())
        results = {
            **run_header(ctx, cfg.experiment),
            "artifact": m.uri,
            "audit_run_id": m.producer_run_id,
            "cache_hit": m.created_at < started,
            **summary,
        }
        publish(ctx, results, {f: m.path / f for f in ("summary.md", "matches.parquet")})
        return results


def run_ingest(cfg: PipelineConfig, out: Path | None = None, force: bool = False) -> Manifest:
    """The ingest stage alone (a real corpus), its artifact in the store or in `out`.
    Raises IncompleteArtifact (carrying the manifest) when shards failed: the others are
    kept, and a rerun redoes only the failed ones."""
    with parent_run(
        cfg.out_dir,
        cfg.experiment,
        f"ingest:{cfg.ingest.source}",
        cfg.model_dump(mode="json"),
        {tracking.FLOW_TAG: "ingest", "platonic.command": "platonic ingest"},
        params={"ingest": cfg.ingest.model_dump(mode="json")},
    ) as ctx:
        try:
            m = run_instance(
                StageInstance("ingest"), cfg, corpus_source(cfg.ingest), FORCE if force else RUN, ctx, folder=out
            )
        except IncompleteArtifact as e:
            remember_ingest(ctx.store.root, e.manifest.path)
            tracking.log_metrics(ctx.client, ctx.parent_run_id, e.manifest.counts)
            raise
        remember_ingest(ctx.store.root, m.path)
        tracking.log_metrics(ctx.client, ctx.parent_run_id, m.counts)
        return m


def remember_ingest(store_root: Path, folder: Path) -> None:
    p = Path(store_root) / "ingest" / LATEST_INGEST
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(str(Path(folder).resolve()))


def latest_ingest(out_dir: str) -> Path:
    """The most recent ingest output: artifacts in the store, or the folder the last
    `platonic ingest --out DIR` wrote (noted in the store)."""
    found = []
    root = ArtifactStore.of(out_dir).root / "ingest"
    pointer = root / LATEST_INGEST
    outside = [Path(pointer.read_text().strip()) / "manifest.json"] if pointer.is_file() else []
    for mf in [*root.glob("*/manifest.json"), *outside]:
        try:
            found.append((json.loads(mf.read_text()).get("created_at", 0.0), mf.parent))
        except (OSError, ValueError):
            continue
    if not found and outside and (outside[0].parent / "catalog.duckdb").is_file():  # stage incomplete
        return outside[0].parent
    if not found:
        raise FileNotFoundError(
            f"no ingest artifact under {Path(out_dir) / 'artifacts' / 'ingest'}; run `platonic ingest` or pass --dir"
        )
    return max(found)[1]
