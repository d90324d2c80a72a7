"""The contamination audit's stage (`platonic audit`): any corpus against eval sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..artifacts import Manifest
from ..config import AuditConfig, ConfigError
from ..contract import StageCall, StageSpec


def audit(call: StageCall):
    """Audit the corpus against the eval sets at the configured levels."""
    import re

    from ..dedup import audit as run_audit
    from ..dedup import audit_metrics

    files, evals = call.context["files"], call.context["evals"]
    summary = run_audit(files, evals, call.cfg, call.out)
    # per eval set and level, in the manifest (a cache hit logs them again); MLflow metric
    # names allow letters, digits and `_-. /` only
    counts = {
        "corpus_texts": summary["corpus_texts"],
        "eval_captions": evals.num_rows,
        **{re.sub(r"[^\w\-. /]", "_", k): v for k, v in audit_metrics(summary).items()},
    }
    return counts, summary["stats"]


AUDIT_SPECS: dict[str, StageSpec] = {
    "audit": StageSpec(
        "audit",
        3,  # 3: look-alikes from Unicode's confusables data (issue 43); 2: invisible characters, per-step counts
        ("levels", "near", "embed"),
        ("eval.parquet", "matches.parquet", "summary.json", "summary.md"),
        audit,
        "contamination audit of any corpus against eval sets: exact, near-duplicate, embedding",
        log_files=("summary.md", "summary.json", "matches.parquet"),
    ),
}


def audit_inputs(cfg: AuditConfig) -> tuple[list[Path], Any, dict[str, Manifest]]:
    """Corpus files and eval captions (through the real loaders), each described by a
    manifest of its own, so the cache key, MLflow inputs and lineage treat them like any
    upstream artifact. A bad path or eval spec is a ConfigError: one line for the user."""
    import hashlib

    import pyarrow.parquet as pq

    from ..artifacts import file_digest
    from ..data.evalsets import EvalSetError, load_eval_spec
    from ..dedup import corpus_files, eval_table

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
    eh = hashlib.sha256()
    for col in evals.columns:
        for v in col.to_pylist():
            eh.update(v.encode() + b"\0")
    return (
        files,
        evals,
        {
            "corpus": Manifest.external("external:corpus", uri, h.hexdigest(), {"files": len(files), "texts": rows}),
            "eval": Manifest.external(
                "external:eval",
                ";".join(cfg.eval),
                eh.hexdigest(),
                {"eval_sets": len(named), "captions": evals.num_rows},
            ),
        },
    )
