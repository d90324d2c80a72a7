"""The contamination audit as one stage under the stage contract (`platonic audit`).

Its inputs are external, not stage outputs: corpus Parquet files and eval sets. Each is
described by a manifest of its own (URI, content digest, counts) so the cache key, the
MLflow inputs and lineage treat them like any upstream artifact: the same corpus bytes and
eval captions with the same audit settings hit the cache.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from platonic.core.artifacts import Manifest, file_digest
from platonic.core.config import AuditConfig, ConfigError
from platonic.core.data.evalsets import EvalSetError, load_eval_spec
from platonic.core.dedup import audit as run_audit
from platonic.core.dedup import audit_metrics, corpus_files, eval_table
from platonic.core.stages import StageInstance

from .stage import execute


def external(name: str, uri: str, digest: str, counts: dict[str, int]) -> Manifest:
    """A manifest for an input that no stage produced."""
    return Manifest(stage=f"external:{name}", stage_version=0, cache_key=digest[:16], uri=uri, digest=digest,
                    counts=counts, schema={}, config={}, upstream={}, upstream_digests={})


def load_inputs(cfg: AuditConfig) -> tuple[list[Path], pa.Table, dict[str, Manifest]]:
    """Corpus files and eval captions (through the real loaders), with their manifests.
    A bad path or eval spec is a ConfigError: the user's input, reported in one line."""
    try:
        files = corpus_files(cfg.corpus)
        named = dict(load_eval_spec(s) for s in cfg.eval)
    except (EvalSetError, FileNotFoundError, ValueError) as e:
        raise ConfigError(str(e)) from None
    if len(named) != len(cfg.eval):
        raise ConfigError(f"eval sets {cfg.eval} name the same set twice")
    evals = eval_table(named)
    h = hashlib.sha256()
    for f in files:
        h.update(file_digest(f).encode())
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    uri = str(files[0]) + (f" (+{len(files) - 1} more)" if len(files) > 1 else "")
    corpus_m = external("corpus", uri, h.hexdigest(), {"files": len(files), "texts": rows})
    eh = hashlib.sha256()
    for col in evals.columns:
        for v in col.to_pylist():
            eh.update(v.encode() + b"\0")
    eval_m = external("eval", ";".join(cfg.eval), eh.hexdigest(),
                      {"eval_sets": len(named), "captions": evals.num_rows})
    return files, evals, {"corpus": corpus_m, "eval": eval_m}


def metric_name(key: str) -> str:
    """MLflow metric names allow letters, digits and `_-. /` only."""
    return re.sub(r"[^\w\-. /]", "_", key)


def audit(cfg: AuditConfig, mode: str, ctx) -> Manifest:
    """Audit cfg.corpus against cfg.eval at cfg.levels; a nested MLflow run with per-level counts."""
    files, evals, inputs = load_inputs(cfg)

    def compute(out, run_id):
        summary = run_audit(files, evals, cfg, out)
        # per eval set and level, in the manifest: a cache hit logs them again
        counts = {"corpus_texts": summary["corpus_texts"], "eval_captions": evals.num_rows,
                  **{metric_name(k): v for k, v in audit_metrics(summary).items()}}
        return counts, summary["stats"]

    return execute(StageInstance("audit", flow="audit"), cfg, inputs, mode, ctx, compute,
                   log_files=("summary.md", "summary.json", "matches.parquet"))
