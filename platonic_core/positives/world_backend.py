"""The synthetic world's generators: a captioner that sees the scene, a paraphraser that
sees only the alt-text. Deterministic given (world seed, backend seed, image, index)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..world import (
    STREAM_PARAPHRASE,
    STREAM_RECAPTION,
    load_scenes,
    paraphrase,
    recaption,
    scene_rng,
)

if TYPE_CHECKING:
    from ..config import WorldConfig


class WorldGenerator:
    name = "world"
    model = "world-grammar-v1"

    def __init__(self, world_dir: Path, world_cfg: WorldConfig, seed: int = 0):
        self.scenes = load_scenes(world_dir)
        self.cfg = world_cfg
        self.seed = seed

    def _rng(self, image_id: str, stream: int, index: int):
        scene_index = self.scenes[image_id][0]
        return scene_rng(self.cfg.seed, scene_index, stream, self.seed * 1000 + index)

    def recaption(self, image_ids: list[str], index: int) -> list[str | None]:
        # the captioner "sees the image": in the world, the scene the render depicts
        return [recaption(self.scenes[i][1], self.cfg, self._rng(i, STREAM_RECAPTION, index)) for i in image_ids]

    def paraphrase(self, texts: list[str], image_ids: list[str], index: int) -> list[str | None]:
        # the image id only seeds the randomness; the words come from `text` alone
        return [
            paraphrase(t, self.cfg, self._rng(i, STREAM_PARAPHRASE, index))
            for t, i in zip(texts, image_ids, strict=True)
        ]

    def params(self, task: str) -> dict:
        return {"task": task, "seed": self.seed, "synonyms": self.cfg.synonyms, "templates": self.cfg.templates}
