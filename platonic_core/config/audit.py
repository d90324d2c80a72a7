"""The audit recipe (`platonic audit`, AuditConfig): the pipeline's contamination levels
(MatchConfig, pipeline.py) measured for any corpus against any eval sets."""

from __future__ import annotations

from .pipeline import MatchConfig
from .recipe import ExperimentName


class AuditConfig(MatchConfig):
    """`platonic audit`: any corpus (Parquet in the text schema, globs, artifact folders)
    against any eval sets (`wit_1024`, `coco_karpathy:PATH`, ...; see data/evalsets.py)."""

    name: str = "audit"
    out_dir: str = ".platonic"
    experiment: ExperimentName = "platonic-audit"
    corpus: list[str]
    eval: list[str]
