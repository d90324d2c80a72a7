"""Seeded random streams: every scene draws from its own streams (one per purpose), so the
world is a function of its config alone, identical across machines and re-runs."""

from __future__ import annotations

import numpy as np

# independent random streams per scene
STREAM_SCENE, STREAM_RENDER, STREAM_ALT, STREAM_EVAL_CAPTION = 0, 1, 2, 3
# the web's damage to texts (world.alt_nonvisual, alt_wrong, eval_partial, eval_nonvisual): streams
# of their own, so that turning a knob leaves every other text byte-identical, and so that one
# scene's draws are the same at every dose (a scene non-visual at 0.25 is non-visual at 0.5 too)
STREAM_ALT_NONVISUAL, STREAM_ALT_WRONG, STREAM_EVAL_WEB = 4, 5, 6
STREAM_RECAPTION, STREAM_PARAPHRASE = 10, 11
# more complete captions of an eval scene (captioning's several references per image)
STREAM_REFERENCE = 12
STREAM_LEAK = 20


def scene_rng(seed: int, scene_index: int, stream: int, extra: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, scene_index, stream, extra]))
