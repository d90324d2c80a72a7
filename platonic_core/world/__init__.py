"""The synthetic world: injective renderings of one world, small enough for a laptop.

Modules: `scenes` (scenes and their attributes), `render` (a scene -> an image), `captions`
(a scene -> texts, and the text-only paraphraser), `streams` (seeded random streams per
scene), `generate` (`generate_world`: the world on disk; `load_scenes` reads it back).
"""

from .captions import alt_text, paraphrase, recaption
from .generate import generate_world, leak_eval_captions, load_scenes, more_captions
from .render import render
from .scenes import (
    Scene,
    attribute_vector,
    sample_scene,
    scene_from_json,
    scene_to_json,
    world_laws,
)
from .streams import (
    STREAM_ALT,
    STREAM_EVAL_CAPTION,
    STREAM_LEAK,
    STREAM_PARAPHRASE,
    STREAM_RECAPTION,
    STREAM_REFERENCE,
    STREAM_RENDER,
    STREAM_SCENE,
    scene_rng,
)

__all__ = [
    "generate_world",
    "scene_rng",
    "load_scenes",
    "more_captions",
    "attribute_vector",
    "recaption",
    "paraphrase",
    "alt_text",
    "Scene",
    "leak_eval_captions",
    "render",
    "sample_scene",
    "scene_from_json",
    "scene_to_json",
    "world_laws",
    "STREAM_ALT",
    "STREAM_EVAL_CAPTION",
    "STREAM_LEAK",
    "STREAM_PARAPHRASE",
    "STREAM_RECAPTION",
    "STREAM_REFERENCE",
    "STREAM_RENDER",
    "STREAM_SCENE",
]
