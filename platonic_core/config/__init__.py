"""Typed recipe configs: YAML in, `--set key=value` overrides, stable hashing.

A recipe is data. Every section is a pydantic model with `extra="forbid"`, so a typo is an
error that names the key, never a silently ignored field. `ConfigError` carries one line
meant for the user; the CLI prints it and exits with code 2.

Where each thing is (everything is re-exported here: `from platonic.core.config import X`):

- recipe.py: the flow-agnostic machinery. ConfigError, Section (the base of every section),
  the shared field types Seed and Threads, the YAML bounds (MAX_RECIPE_BYTES, MAX_YAML_NODES,
  MAX_YAML_DEPTH) and load_yaml, parse_override, check_overrides, apply_overrides,
  read_recipe, validate_as, to_plain, stable_hash, get_path; validate_recipe and load_config
  (the pipeline's recipe by default) are defined here, beside every flow's sections.
- pipeline.py: the pipeline recipe (`platonic run`), PipelineConfig and one section per stage:
  WorldConfig, IngestConfig, PositivesConfig (GenModelConfig, GenModelsConfig, PromptsConfig,
  SamplingConfig, GenHttpConfig), MatchConfig (NearConfig, EmbedMatchConfig, Level),
  DedupConfig, ViewsConfig, TrainConfig (ModelConfig, OptimConfig), EmbedConfig,
  EvaluateConfig (CeilingConfig), ConceptsConfig (real data), ServicesConfig, FanoutConfig; and DEPLOYMENT_OVERRIDES,
  what a deployment run may override. The other flows import the sections they share from it.
- compare.py: `platonic compare`, CompareConfig (EvalSetConfig, FeatureModelConfig, RetrievalConfig).
- caption.py: `platonic caption`, CaptionConfig (CaptionEncoderConfig, CaptionDataConfig,
  DecoderConfig, PairFreeConfig, CaptionMapsConfig, CaptionEvalConfig).
- ablation.py: `platonic ablate`, AblationConfig (AblationRow, SweepConfig, EfficiencyConfig,
  ScalingConfig) and cell_rows.
- audit.py: `platonic audit`, AuditConfig.
- match.py: `platonic match` (pair-free classification), ClassMatchConfig (MatchDataConfig,
  MatchModelConfig, MatchSolverConfig).

A name is defined in one module and only re-exported here: a test that monkeypatches a name
patches the module that reads it, not this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ablation import AblationConfig, AblationRow, EfficiencyConfig, ScalingConfig, SweepConfig, cell_rows
from .audit import AuditConfig
from .caption import (
    CaptionConfig,
    CaptionDataConfig,
    CaptionEncoderConfig,
    CaptionEvalConfig,
    CaptionMapsConfig,
    DecoderConfig,
    PairFreeConfig,
)
from .compare import CompareConfig, EvalSetConfig, FeatureModelConfig, RetrievalConfig
from .match import ClassMatchConfig, MatchDataConfig, MatchModelConfig, MatchSolverConfig
from .pipeline import (
    DEPLOYMENT_OVERRIDES,
    PYTHON_NAME,
    CeilingConfig,
    ConceptsConfig,
    DedupConfig,
    EmbedConfig,
    EmbedMatchConfig,
    EvaluateConfig,
    FanoutConfig,
    GenHttpConfig,
    GenModelConfig,
    GenModelsConfig,
    IngestConfig,
    Level,
    MatchConfig,
    ModelConfig,
    NearConfig,
    OptimConfig,
    PipelineConfig,
    PositivesConfig,
    PromptsConfig,
    SamplingConfig,
    ServicesConfig,
    TrainConfig,
    ViewsConfig,
    WorldConfig,
)
from .recipe import (
    MAX_RECIPE_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    TRUST_FLAG,
    ConfigError,
    Section,
    Seed,
    Threads,
    _format_validation_error,
    apply_overrides,
    check_overrides,
    get_path,
    load_yaml,
    parse_override,
    read_recipe,
    remote_code_keys,
    require_trusted,
    stable_hash,
    to_plain,
    validate_as,
)

__all__ = [
    # recipe.py
    "MAX_RECIPE_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "ConfigError",
    "Section",
    "Seed",
    "Threads",
    "_format_validation_error",
    "apply_overrides",
    "check_overrides",
    "get_path",
    "load_config",
    "load_yaml",
    "parse_override",
    "read_recipe",
    "stable_hash",
    "to_plain",
    "validate_recipe",
    # pipeline.py
    "DEPLOYMENT_OVERRIDES",
    "PYTHON_NAME",
    "TRUST_FLAG",
    "remote_code_keys",
    "require_trusted",
    "CeilingConfig",
    "ConceptsConfig",
    "DedupConfig",
    "EmbedConfig",
    "EmbedMatchConfig",
    "EvaluateConfig",
    "FanoutConfig",
    "GenHttpConfig",
    "GenModelConfig",
    "GenModelsConfig",
    "IngestConfig",
    "Level",
    "MatchConfig",
    "ModelConfig",
    "NearConfig",
    "OptimConfig",
    "PipelineConfig",
    "PositivesConfig",
    "PromptsConfig",
    "SamplingConfig",
    "ServicesConfig",
    "TrainConfig",
    "ViewsConfig",
    "WorldConfig",
    # compare.py
    "CompareConfig",
    "EvalSetConfig",
    "FeatureModelConfig",
    "RetrievalConfig",
    # caption.py
    "CaptionConfig",
    "CaptionDataConfig",
    "CaptionEncoderConfig",
    "CaptionEvalConfig",
    "CaptionMapsConfig",
    "DecoderConfig",
    "PairFreeConfig",
    # ablation.py
    "AblationConfig",
    "AblationRow",
    "EfficiencyConfig",
    "ScalingConfig",
    "SweepConfig",
    "cell_rows",
    # audit.py
    "AuditConfig",
    # match.py
    "ClassMatchConfig",
    "MatchDataConfig",
    "MatchModelConfig",
    "MatchSolverConfig",
]


def validate_recipe(
    raw: dict[str, Any], origin: str, overrides: list[str] | None = None, model: type[Section] | None = None
):
    """Apply `--set` overrides to a raw recipe and validate it as `model` (default: the
    pipeline's recipe). Here, beside every flow's sections, so that recipe.py imports none."""
    return validate_as(model or PipelineConfig, raw, origin, overrides)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, model: type[Section] | None = None):
    """Load a YAML recipe (or the packaged demo when `path` is None) and apply overrides.
    `model` is the recipe type (default: the pipeline)."""
    raw, origin = read_recipe(path)
    return validate_recipe(raw, origin, overrides, model)
