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
