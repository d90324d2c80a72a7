"""Model size presets: transformers configs named in the recipe (`train.models.<m>.preset`).

`custom` keeps the recipe's own width/layers/heads (the tiny demo models). The BERT sizes
are the Turc et al. (2019) family; `bert-base` is BERT-B (12 layers, 768 wide, 12 heads,
~109M parameters with its 30522-token vocabulary and 512 positions). A causal LM
(`kind: causal_lm`) with a preset is a GPT-2 of the same width and depth, so next-token
baselines match the JEPA encoder's size.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

PresetName = Literal["custom", "bert-tiny", "bert-mini", "bert-small", "bert-medium", "bert-base", "bert-large"]


class Dims(NamedTuple):
    layers: int
    width: int
    heads: int


PRESETS: dict[str, Dims] = {
    "bert-tiny": Dims(2, 128, 2),
    "bert-mini": Dims(4, 256, 4),
    "bert-small": Dims(4, 512, 8),
    "bert-medium": Dims(8, 512, 8),
    "bert-base": Dims(12, 768, 12),
    "bert-large": Dims(24, 1024, 16),
}


def resolve_dims(preset: str, width: int, layers: int, heads: int) -> Dims:
    """(layers, width, heads) of a model: the preset's, or the recipe's own for `custom`."""
    if preset == "custom":
        return Dims(layers, width, heads)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: custom, {', '.join(PRESETS)}")
    return PRESETS[preset]


# --------------------------------------------------------------------------------------
# projector presets (`train.models.<m>.projector`)

ProjectorName = Literal["custom", "lejepa"]
Activation = Literal["gelu", "relu"]


class ProjectorSpec(NamedTuple):
    """A projector MLP: Linear -> BatchNorm -> activation per hidden size, then Linear to proj_dim."""

    hidden: tuple[int, ...]
    act: str  # an `Activation`


# LeJEPA's reference (rbalestr-lab/lejepa MINIMAL.md): torchvision's
# MLP(embedding, [2048, 2048, proj_dim], norm_layer=BatchNorm1d), ReLU by default; its dropout
# is 0, so it has no layer here. The output size stays the recipe's `proj_dim` (the reference's
# recommended run uses 16, its ViTEncoder default is 128).
PROJECTOR_PRESETS: dict[str, ProjectorSpec] = {
    "lejepa": ProjectorSpec((2048, 2048), "relu"),
}


def resolve_projector(name: str, width: int, hidden: list[int] | None, act: str | None) -> ProjectorSpec:
    """The projector of a model: the preset's, or for `custom` the recipe's `proj_hidden` /
    `proj_act`, by default this project's small one (one hidden layer of 2·width, GELU)."""
    if name == "custom":
        return ProjectorSpec(tuple(hidden) if hidden is not None else (2 * width,), act or "gelu")
    if name not in PROJECTOR_PRESETS:
        raise ValueError(f"unknown projector {name!r}; projectors: custom, {', '.join(PROJECTOR_PRESETS)}")
    if hidden is not None or act is not None:
        raise ValueError(f"projector {name!r} fixes proj_hidden and proj_act; set projector: custom to choose them")
    return PROJECTOR_PRESETS[name]
