"""The stage contract, as types: what a stage declares and what its compute receives.

A stage is `compute(call) -> (counts, stats)`. It writes its artifact into `call.out` and
sees nothing but what it declares:

- `reads`: config paths hashed into its cache key (`train.models.{model}`: the instance's);
- `uses`: config paths it may see that are *not* in the key: runtime knobs that leave what
  its artifact means unchanged (threads, inference batch sizes, fan-out) or facts its inputs'
  digests already cover (a model's kind, seen again by the stage that embeds it). A knob may
  still move float bytes: a training at 1 and at 2 torch threads sums in another order and
  ends in other weights (scores equal within their intervals), so a thread count is fixed
  per run, never changed while a step runs;
- `inputs`: the upstream stage instances it reads, by role (`{"data": "views"}`).

`call.cfg` is a `ConfigView`: reading a field outside `reads`/`uses` raises
`UndeclaredRead`, so a stage cannot depend on a field its cache key does not see.

Cache key = hash(instance id, stage version, the `reads` slice, the input digests keyed by
upstream instance id). Bump `version` when a stage's semantics change: the key cannot see
code. This module knows nothing of Prefect, MLflow or the artifact store: `platonic.tasks`
applies the contract (cache, lock, MLflow run, lineage); `StageHooks` is how a stage talks
back to it (metrics along the way, tags, progress, fan-out), with do-nothing defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .artifacts import Manifest
from .config import get_path, stable_hash, to_plain

Counts = dict[str, int]
Stats = dict[str, Any]
Mapper = Callable[[Callable[..., Any], Sequence[tuple]], list]


class UpstreamNotCached(RuntimeError):
    """`--only S`: an input of S has no cached artifact for this recipe."""


class CorruptCache(UpstreamNotCached):
    """`--only S`: an input of S is cached, but its files are not what was committed (the
    message names the artifact, what changed and the `--force` that rebuilds it)."""


class IncompleteArtifact(RuntimeError):
    """A stage committed an artifact with failed shards (the others are kept; a rerun
    retries the failed ones). Carries the manifest."""

    def __init__(self, manifest: Manifest):
        failed = manifest.stats.get("failed_shards", [])
        super().__init__(
            f"{len(failed)} of {manifest.counts.get('shards', '?')} shards failed: "
            + "; ".join(f["error"] for f in failed)
        )
        self.manifest = manifest


class UndeclaredRead(AttributeError):
    """A stage read a config field it does not declare in `reads` or `uses`."""


@dataclass(frozen=True)
class StageInstance:
    """One stage applied to one thing, in one flow: `train:good` (pipeline),
    `features:qwen@wit` (compare), `ablation` (ablate)."""

    stage: str
    model: str | None = None
    set: str | None = None  # compare: the eval set
    modality: str | None = None  # compare: text | vision
    flow: str = "pipeline"

    @property
    def id(self) -> str:
        if self.set is not None:
            return f"{self.stage}:{self.model}@{self.set}" if self.model else f"{self.stage}:{self.set}"
        return f"{self.stage}:{self.model}" if self.model else self.stage

    def fill(self, template: str) -> str:
        """A declared path with this instance's placeholders filled in."""
        return template.format(model=self.model, set=self.set, modality=self.modality)


@dataclass
class StageHooks:
    """How a running stage talks to whoever runs it. The defaults do nothing (a notebook);
    the executor in `platonic.tasks` routes them to MLflow and Prefect's logger."""

    log_metrics: Callable[[dict[str, float], int], None] = lambda metrics, step: None
    set_tags: Callable[[dict[str, str]], None] = lambda tags: None
    logger: logging.Logger | logging.LoggerAdapter = field(default_factory=lambda: logging.getLogger("platonic"))
    mapper: Mapper | None = None  # fan-out of shard-level work (None: the stage's own loop)


@dataclass
class StageCall:
    """Everything one execution of a stage instance gets."""

    inst: StageInstance
    cfg: ConfigView
    inputs: dict[str, Manifest]  # by role
    out: Path  # write the artifact here
    hooks: StageHooks
    state_dir: Path | None = None  # resumable work of this cache key (kept across kills)
    cache_root: Path | None = None  # the store's root: caches shared across keys (ingest shards)
    context: dict[str, Any] = field(default_factory=dict)  # objects a flow hands over (the ablation's cells)

    def input(self, role: str) -> Path:
        return self.inputs[role].path


Compute = Callable[[StageCall], tuple[Counts, Stats]]
InputsFn = Callable[[Any, StageInstance], dict[str, str]]


@dataclass(frozen=True)
class StageSpec:
    name: str
    version: int
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    compute: Compute
    doc: str
    # role -> upstream instance id, from the recipe (None: the caller hands inputs over)
    inputs: InputsFn | None = None
    # inputs no stage produced (a real corpus's shards), as manifests: name -> Manifest
    external: Callable[[Any, StageInstance], dict[str, Manifest]] | None = None
    uses: tuple[str, ...] = ()
    log_files: tuple[str, ...] = ()  # outputs also logged as MLflow artifacts
    # resumable work: "none"; "until_commit" (deleted once the artifact is committed: train
    # checkpoints); "kept" (a forced rerun resumes from it: generated positives)
    state: str = "none"
    fan_out: bool = False  # several instances of this stage may run at once (one per worker)
    # inputs of which the stage reads only some files: role -> those files. The key covers
    # only their digests, so a change elsewhere in the input (a world's alt-texts) is a hit.
    input_files: Callable[[Any, StageInstance], dict[str, tuple[str, ...]]] | None = None
    # the artifact is this trained model (a ModelConfig; None: not one to publish): the
    # tracker logs and registers it as a model, not only as files
    model: Callable[[Any, StageInstance], Any] | None = None
    # the artifact scores several models (the evaluation): its folder -> model -> {"metrics":
    # {name: value}, "per_layer": [value per layer]}, one set of names for every model; the
    # tracker gives each model its own evaluation run with them (one schema across models)
    per_model: Callable[[Path], dict[str, dict[str, Any]]] | None = None


class ConfigView:
    """A recipe seen through a stage's declared paths. Sections on the way to a declared
    path are views; a declared path (or anything under it) is the real value."""

    __slots__ = ("_node", "_path", "_allowed", "_stage")

    def __init__(self, node: Any, allowed: frozenset[str], stage: str, path: str = ""):
        self._node, self._allowed, self._stage, self._path = node, allowed, stage, path

    def _child(self, name: str, value: Any) -> Any:
        p = f"{self._path}.{name}" if self._path else name
        if any(p == a or p.startswith(a + ".") for a in self._allowed):
            return value
        if any(a.startswith(p + ".") for a in self._allowed):
            return ConfigView(value, self._allowed, self._stage, p)
        raise UndeclaredRead(
            f"stage {self._stage} reads {p!r}, which it does not declare (declared: {', '.join(sorted(self._allowed))})"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._child(name, getattr(self._node, name))

    def __getitem__(self, key: str) -> Any:
        return self._child(str(key), self._node[key])

    def __repr__(self) -> str:
        return f"ConfigView({self._stage}: {', '.join(sorted(self._allowed))})"


def declared(spec: StageSpec, inst: StageInstance) -> tuple[list[str], list[str]]:
    """(reads, uses) of one instance, placeholders filled."""
    return [inst.fill(r) for r in spec.reads], [inst.fill(u) for u in spec.uses]


def config_view(spec: StageSpec, inst: StageInstance, cfg: Any) -> ConfigView:
    reads, uses = declared(spec, inst)
    return ConfigView(cfg, frozenset(reads + uses), inst.id)


def config_slice(spec: StageSpec, inst: StageInstance, cfg: Any) -> dict[str, Any]:
    """The `reads` slice: what the cache key and the MLflow params see."""
    return {r: to_plain(get_path(cfg, r)) for r in declared(spec, inst)[0]}


def input_digests(
    spec: StageSpec, inst: StageInstance, cfg: Any, inputs: dict[str, Manifest], roles: dict[str, str]
) -> dict[str, str]:
    """What the key sees of each input (named as in `inputs`): its digest, or for a role
    in `spec.input_files` the digest of just the files the stage reads."""
    files = spec.input_files(cfg, inst) if spec.input_files else {}
    parts = {roles.get(role, role): names for role, names in files.items()}
    return {n: m.files_digest(parts[n]) if n in parts else m.digest for n, m in inputs.items()}


def cache_key(spec: StageSpec, inst: StageInstance, cfg: Any, input_digests: dict[str, str]) -> str:
    """hash(instance id, version, the `reads` slice, input digests keyed by upstream id)."""
    return stable_hash(
        {"stage": inst.id, "version": spec.version, "config": config_slice(spec, inst, cfg), "inputs": input_digests}
    )
