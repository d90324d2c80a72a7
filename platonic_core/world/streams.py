"""Seeded random streams: every scene draws from its own streams (one per purpose), so the
world is a function of its config alone, identical across machines and re-runs."""

from __future__ import annotations

import numpy as np

# independent random streams per scene
STREAM_SCENE, STREAM_RENDER, STREAM_ALT, STREAM_EVAL_CAPTION = 0, 1, 2, 3
STREAM_RECAPTION, STREAM_PARAPHRASE = 10, 11
STREAM_LEAK = 20


def scene_rng(seed: int, scene_index: int, stream: int, extra: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, scene_index, stream, extra]))
