"""Scenes: a few objects with discrete attributes on a background.

A scene is the "world state" that every rendering (image, caption) observes. Attributes are
small integers; `attribute_vector` turns a scene into the bag of its true attributes, the
oracle representation every modality could in principle recover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..config import WorldConfig

SHAPES = ["circle", "square", "triangle", "cross", "diamond", "ring", "hbar", "vbar"]
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "cyan", "white"]
SIZES = ["small", "medium", "large"]
BACKGROUNDS = ["dark", "grey"]


@dataclass(frozen=True)
class SceneObject:
    shape: int
    colour: int
    size: int
    cell: int  # row * grid + col


@dataclass(frozen=True)
class Scene:
    objects: tuple[SceneObject, ...]
    background: int


@dataclass(frozen=True)
class WorldLaws:
    """The statistical structure of a world, drawn once per world seed. Like the real one,
    things co-occur: a scene has a theme that prefers some shapes and a background, each
    shape prefers some colours and sizes. `world.concentration` sets how strongly (a
    Dirichlet concentration: small = strong preferences, large = nearly independent)."""

    theme: np.ndarray  # (themes,)
    theme_shape: np.ndarray  # (themes, shapes)
    theme_background: np.ndarray  # (themes, backgrounds)
    shape_colour: np.ndarray  # (shapes, colours)
    shape_size: np.ndarray  # (shapes, sizes)


def world_laws(cfg: WorldConfig) -> WorldLaws:
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 0xC0FFEE]))
    a = cfg.concentration

    def dirichlet(rows: int, cols: int) -> np.ndarray:
        return rng.dirichlet(np.full(cols, a), size=rows)

    return WorldLaws(
        theme=np.full(cfg.themes, 1 / cfg.themes),
        theme_shape=dirichlet(cfg.themes, cfg.n_shapes),
        theme_background=dirichlet(cfg.themes, len(BACKGROUNDS)),
        shape_colour=dirichlet(cfg.n_shapes, cfg.n_colours),
        shape_size=dirichlet(cfg.n_shapes, cfg.n_sizes),
    )


def sample_scene(rng: np.random.Generator, cfg: WorldConfig, laws: WorldLaws) -> Scene:
    """One scene; objects occupy distinct grid cells."""
    return sample_themed_scene(rng, cfg, laws)[0]


def sample_themed_scene(rng: np.random.Generator, cfg: WorldConfig, laws: WorldLaws) -> tuple[Scene, int]:
    """One scene and its theme. The theme is not part of what a scene looks like (renders and
    captions never see it); web texts that talk about the scene's context (brand, place, event)
    draw their words from it (captions.nonvisual_phrases)."""
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    cells = rng.choice(cfg.grid * cfg.grid, size=n, replace=False)
    theme = int(rng.choice(len(laws.theme), p=laws.theme))
    objs = []
    for c in sorted(cells):
        shape = int(rng.choice(cfg.n_shapes, p=laws.theme_shape[theme]))
        objs.append(
            SceneObject(
                shape=shape,
                colour=int(rng.choice(cfg.n_colours, p=laws.shape_colour[shape])),
                size=int(rng.choice(cfg.n_sizes, p=laws.shape_size[shape])),
                cell=int(c),
            )
        )
    background = int(rng.choice(len(BACKGROUNDS), p=laws.theme_background[theme]))
    return Scene(objects=tuple(objs), background=background), theme


def scene_to_json(scene: Scene) -> list[list[int]]:
    return [[o.shape, o.colour, o.size, o.cell] for o in scene.objects]


def scene_from_json(objs: list[list[int]], background: int) -> Scene:
    return Scene(tuple(SceneObject(*map(int, o)) for o in objs), int(background))


def attribute_vector(scene: Scene, cfg: WorldConfig) -> np.ndarray:
    """Bag of true attributes: per grid cell a one-hot of shape, colour and size (and
    'occupied'), plus the background. Two scenes are near here iff they look alike."""
    per_cell = 1 + cfg.n_shapes + cfg.n_colours + cfg.n_sizes
    v = np.zeros(cfg.grid * cfg.grid * per_cell + len(BACKGROUNDS), dtype=np.float32)
    for o in scene.objects:
        base = o.cell * per_cell
        v[base] = 1.0
        v[base + 1 + o.shape] = 1.0
        v[base + 1 + cfg.n_shapes + o.colour] = 1.0
        v[base + 1 + cfg.n_shapes + cfg.n_colours + o.size] = 1.0
    v[cfg.grid * cfg.grid * per_cell + scene.background] = 1.0
    return v
