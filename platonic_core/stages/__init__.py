"""The DAG as data: every stage of every flow, once — what it reads, takes, writes and computes.

    world -> ingest -> positives -> dedup -> views -> train:{text models}
    world -> train:{image model};  train:* -> embed:* -> evaluate
    world + train:{image model} + embed:{image model} -> ceiling -> evaluate
    train:{model with snapshots} + ingest + embed:{image model} -> curve:{model}

    real data (ingest.source: wordnet): concepts replaces the world as eval set and image side
    concepts + ingest -> positives -> dedup -> views -> train:{text models} -> embed:* -> evaluate
    concepts -> references -> evaluate

A stage *instance* is a stage applied to one thing: `train:good`, `embed:ntp`. `instances`
lists a recipe's instances in execution order (a topological order); each spec's `inputs`
names the upstream instances it reads, by role. The executor (`platonic.tasks.executor`)
walks them; nothing else knows the DAG's shape. The compute functions adapt a library
function to `compute(call) -> (counts, stats)` and see only their declared config slice
(see contract.py). Bump `version` when a stage's semantics change: the cache cannot see code.

One module per flow, each its computes, then its specs, then its instances:
pipeline.py (the picture above), compare.py, ablation.py, audit.py, match.py, caption.py;
registry.py knows them all (FLOW_SPECS, spec_of); dag.py holds the helpers over them
(upstream, instance_inputs, and the pipeline's run plan: plan, uncached; its closure is in
pipeline.py). A new flow is a new module and one line in FLOW_SPECS.
"""

from __future__ import annotations

from .ablation import ABLATE_SPECS, ABLATION_INPUTS
from .audit import AUDIT_SPECS, audit_inputs
from .caption import CAPTION_SPECS, caption_instances
from .compare import COMPARE_SPECS, compare_instances
from .dag import (
    CACHED_ONLY,
    FORCE,
    RUN,
    SKIP,
    check_selector,
    instance_inputs,
    plan,
    uncached,
    upstream,
)
from .match import MATCH_SPECS, match_base, match_base_instances, match_instances
from .pipeline import ORDER, SPECS, closure, corpus_source, curve_models, evaluated_models, has_ceiling, instances
from .registry import FLOW_SPECS, spec_of

__all__ = [
    "ABLATE_SPECS",
    "ABLATION_INPUTS",
    "AUDIT_SPECS",
    "CACHED_ONLY",
    "CAPTION_SPECS",
    "COMPARE_SPECS",
    "FLOW_SPECS",
    "FORCE",
    "MATCH_SPECS",
    "ORDER",
    "RUN",
    "SKIP",
    "SPECS",
    "audit_inputs",
    "caption_instances",
    "check_selector",
    "closure",
    "compare_instances",
    "corpus_source",
    "curve_models",
    "evaluated_models",
    "has_ceiling",
    "instance_inputs",
    "instances",
    "match_base",
    "match_base_instances",
    "match_instances",
    "plan",
    "spec_of",
    "uncached",
    "upstream",
]
