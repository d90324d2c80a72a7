"""The ablation grid (`platonic ablate`, AblationConfig): cells are pipeline recipes derived
from one base; `cell_rows` crosses a sweep into the rows."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, model_validator

from .pipeline import TextKind
from .recipe import ExperimentName, Section, Seed


class AblationRow(Section):
    """Where the positives come from: the text kinds that make good views, and the texts the
    bad-view JEPA and the causal LM read (the same texts, so columns compare objectives)."""

    label: str = ""
    good_sources: list[TextKind] = Field(min_length=1)
    text_sources: list[TextKind] = Field(min_length=1)
    # more overrides of the base for this row's cells (after the grid's `set`), e.g. a world knob
    set: list[str] = []


class SweepConfig(Section):
    """A dose axis crossed with every row: one override key of the base recipe, several
    values. Row `r` becomes rows `r@<label>`, one per value, each with `key=value` set."""

    key: str
    values: list[Any] = Field(min_length=2)
    labels: list[str] = []  # default: the values (a list as its items joined by "+", [] as "none")

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        if self.labels and len(self.labels) != len(self.values):
            raise ValueError(f"sweep.labels has {len(self.labels)} labels for {len(self.values)} values")
        labels = self.value_labels()
        if len(set(labels)) != len(labels):
            raise ValueError(f"sweep labels repeat: {labels}")
        if "=" in self.key or not all(self.key.split(".")):
            raise ValueError(f"sweep.key {self.key!r} is not a recipe path like train.models.good.lam")
        return self

    def value_labels(self) -> list[str]:
        def label(v: Any) -> str:
            if isinstance(v, list):
                return "+".join(map(str, v)) or "none"
            return "none" if v is None else str(v)

        return list(self.labels) or [label(v) for v in self.values]


class EfficiencyConfig(Section):
    """Alignment-vs-samples curves along one run: how many samples `model` needs to reach
    `reference`'s final score."""

    model: str = "good"
    reference: str = "ntp"
    snapshots: int = Field(8, ge=2, le=1000)


class ScalingConfig(Section):
    """A saturating law a(n) = a_inf − b·n^(−alpha) fitted on finished runs of `model` (row
    `row`) at budgets `fit_fractions` of its full budget; the grid's own full-budget runs
    are held out and predicted."""

    model: str = "good"
    row: str
    fit_fractions: list[float] = Field([0.0625, 0.125, 0.25, 0.5], min_length=3)

    @model_validator(mode="after")
    def _fractions(self) -> ScalingConfig:
        if any(not 0 < f < 1 for f in self.fit_fractions) or len(set(self.fit_fractions)) != len(self.fit_fractions):
            raise ValueError(f"scaling.fit_fractions must be distinct and in (0, 1), got {self.fit_fractions}")
        return self


class AblationConfig(Section):
    name: str = "table7"
    experiment: ExperimentName = "table7"
    base: str = "demo"  # a pipeline recipe: a path, or the name of a packaged one
    set: list[str] = []  # overrides applied to the base in every cell
    quick: list[str] = []  # more overrides, applied with --quick
    seeds: list[Seed] = Field([0, 1, 2], min_length=2)
    rows: dict[str, AblationRow] = Field(min_length=1)
    columns: list[str] = ["good", "bad", "ntp"]  # text models of the base recipe
    sweep: SweepConfig | None = None
    efficiency: EfficiencyConfig | None = EfficiencyConfig()
    scaling: ScalingConfig | None = None
    confidence: float = Field(0.95, gt=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> AblationConfig:
        for name in self.rows:
            if "@" in name or "/" in name:
                raise ValueError(f"row name {name!r}: '@' and '/' are reserved (sweep rows, cell names)")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        if self.efficiency:
            for m in (self.efficiency.model, self.efficiency.reference):
                if m not in self.columns:
                    raise ValueError(f"efficiency refers to model {m!r}, not in columns {self.columns}")
        if self.scaling:
            if self.scaling.model not in self.columns:
                raise ValueError(f"scaling.model {self.scaling.model!r} is not in columns {self.columns}")
            rows = sorted(cell_rows(self.rows, self.sweep))
            if self.scaling.row not in rows:
                raise ValueError(f"scaling.row {self.scaling.row!r} is not in rows {rows}")
        return self


def cell_rows(rows: dict[str, AblationRow], sweep: SweepConfig | None) -> dict[str, AblationRow]:
    """An ablation's rows with its sweep crossed in: `row@label` -> the row plus `key=value`."""
    if sweep is None:
        return dict(rows)
    out = {}
    for name, row in rows.items():
        for value, label in zip(sweep.values, sweep.value_labels(), strict=True):
            out[f"{name}@{label}"] = row.model_copy(
                update={
                    "label": f"{row.label or name} · {sweep.key}={label}",
                    "set": [*row.set, f"{sweep.key}={json.dumps(value)}"],
                }
            )
    return out
