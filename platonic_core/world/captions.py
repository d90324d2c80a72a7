"""Caption grammar: a scene -> text, with nuisance; and a text-only paraphraser.

Three ways a text can observe a scene, mirroring the paper's Table 7:
- `recaption`: a captioner that sees the scene. Complete: every object with shape, colour,
  size and position, and the background. Nuisance: synonyms, phrase and sentence templates,
  object order.
- `alt_text`: what the web attaches to an image. Partial (objects and attributes dropped),
  noisy (junk such as file names and shop words).
- `paraphrase`: a text-only rewriter that reads an alt-text and nothing else. It parses the
  attribute words it recognises and re-words them; it cannot add what the alt-text lacks.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from .scenes import BACKGROUNDS, COLOURS, SHAPES, SIZES, Scene

if TYPE_CHECKING:
    from ..config import WorldConfig

SHAPE_WORDS = {
    "circle": ["circle", "disc", "round dot", "ball"],
    "square": ["square", "box", "block", "tile"],
    "triangle": ["triangle", "wedge", "pyramid", "arrowhead"],
    "cross": ["cross", "plus sign", "plus", "crosshair"],
    "diamond": ["diamond", "rhombus", "lozenge", "kite"],
    "ring": ["ring", "hoop", "donut", "loop"],
    "hbar": ["horizontal bar", "flat stripe", "lying bar", "dash"],
    "vbar": ["vertical bar", "upright stripe", "standing bar", "pillar"],
}
COLOUR_WORDS = {
    "red": ["red", "crimson", "scarlet", "ruby"],
    "green": ["green", "emerald", "lime", "jade"],
    "blue": ["blue", "navy", "azure", "cobalt"],
    "yellow": ["yellow", "golden", "lemon", "amber"],
    "purple": ["purple", "violet", "magenta", "lilac"],
    "orange": ["orange", "tangerine", "copper", "apricot"],
    "cyan": ["cyan", "teal", "turquoise", "aqua"],
    "white": ["white", "ivory", "snowy", "pale"],
}
SIZE_WORDS = {
    "small": ["small", "tiny", "little", "petite"],
    "medium": ["medium", "mid-sized", "average", "moderate"],
    "large": ["large", "big", "huge", "giant"],
}
BACKGROUND_WORDS = {
    "dark": ["dark", "black", "night", "shadowy"],
    "grey": ["grey", "gray", "ashen", "silver"],
}
# position phrases for a 3x3 grid, 4 wordings each; a 2x2 grid uses the corners
_ROWS = [["top", "upper", "top", "high"], ["middle", "central", "mid", "centre"], ["bottom", "lower", "bottom", "low"]]
_COLS = [
    ["left", "left", "left-hand", "west"],
    ["middle", "central", "mid", "centre"],
    ["right", "right", "right-hand", "east"],
]


def position_phrase(cell: int, grid: int, variant: int) -> str:
    row, col = divmod(cell, grid)
    if grid == 2:
        row, col = row * 2, col * 2
    r, c = _ROWS[row][variant], _COLS[col][variant]
    if row == 1 and col == 1:
        return ["in the middle", "at the centre", "in the center spot", "dead centre"][variant]
    if row == 1:
        r = ""
    if col == 1:
        c = ""
    spot = " ".join(w for w in (r, c) if w)
    return ["in the {}", "at the {}", "in the {} area", "toward the {}"][variant].format(spot)


# object phrase templates; {pos} may be empty for alt-texts/paraphrases
OBJECT_TEMPLATES = [
    "a {size} {colour} {shape} {pos}",
    "{pos} a {colour} {shape} of {size} size",
    "a {colour} {shape}, {size}, {pos}",
    "one {size} {shape} in {colour} {pos}",
]
SENTENCE_TEMPLATES = [
    "{objs} on a {bg} background.",
    "a picture of {objs}, with a {bg} background.",
    "on a {bg} background: {objs}.",
    "there is {objs} against a {bg} backdrop.",
]
ALT_JUNK = [
    "stock photo",
    "img_{n}.jpg",
    "free download",
    "hd wallpaper",
    "clipart",
    "buy now",
    "vector illustration",
    "dsc{n}",
    "best price",
    "icon set",
]


def _tidy(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([,.:])", r"\1", text)
    text = re.sub(r",\s*,", ",", text)
    return text.strip(" ,")


def _join(phrases: list[str]) -> str:
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _pick(words: list[str], n: int, rng: np.random.Generator) -> str:
    return words[int(rng.integers(min(n, len(words))))]


def _object_phrase(attrs: dict[str, str | None], cfg: WorldConfig, rng: np.random.Generator, template: int) -> str:
    """Words for one object. `attrs` values are attribute names or None when unknown."""
    syn = cfg.synonyms
    words = {
        "shape": _pick(SHAPE_WORDS[attrs["shape"]], syn, rng) if attrs.get("shape") else "shape",
        "colour": _pick(COLOUR_WORDS[attrs["colour"]], syn, rng) if attrs.get("colour") else "",
        "size": _pick(SIZE_WORDS[attrs["size"]], syn, rng) if attrs.get("size") else "",
        "pos": attrs.get("pos") or "",
    }
    if not words["size"] and template == 1:
        template = 0  # "of  size" reads badly without a size
    phrase = OBJECT_TEMPLATES[template].format(**words)
    return _tidy(phrase.replace("in  ", "").replace(", ,", ","))


def recaption(scene: Scene, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """A complete caption of `scene` (a captioner that sees the image)."""
    objs = list(scene.objects)
    if cfg.shuffle_objects:
        objs = [objs[i] for i in rng.permutation(len(objs))]
    t_obj = int(rng.integers(cfg.templates))
    phrases = []
    for o in objs:
        attrs = {
            "shape": SHAPES[o.shape],
            "colour": COLOURS[o.colour],
            "size": SIZES[o.size],
            "pos": position_phrase(o.cell, cfg.grid, int(rng.integers(min(cfg.synonyms, 4)))),
        }
        phrases.append(_object_phrase(attrs, cfg, rng, t_obj))
    bg = _pick(BACKGROUND_WORDS[BACKGROUNDS[scene.background]], cfg.synonyms, rng)
    sentence = SENTENCE_TEMPLATES[int(rng.integers(cfg.templates))]
    return _tidy(sentence.format(objs=_join(phrases), bg=bg))


def alt_text(scene: Scene, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """A web-like alt-text: some objects, some attributes, maybe junk."""
    objs = [o for o in scene.objects if rng.random() < cfg.alt_object_keep]
    if not objs:
        objs = [scene.objects[int(rng.integers(len(scene.objects)))]]
    phrases = []
    for o in objs:
        drop = rng.random(3) < cfg.alt_attribute_drop
        attrs = {
            "shape": SHAPES[o.shape],
            "colour": None if drop[0] else COLOURS[o.colour],
            "size": None if drop[1] else SIZES[o.size],
            "pos": None if drop[2] else position_phrase(o.cell, cfg.grid, 0),
        }
        phrases.append(_object_phrase(attrs, cfg, rng, 0))
    text = " and ".join(p.removeprefix("a ") for p in phrases)
    if rng.random() < 0.25:
        bg = BACKGROUND_WORDS[BACKGROUNDS[scene.background]][0]
        text += f" on {bg} background"
    if rng.random() < cfg.alt_junk:
        junk = ALT_JUNK[int(rng.integers(len(ALT_JUNK)))].format(n=int(rng.integers(1000, 9999)))
        text = f"{junk} {text}" if rng.random() < 0.5 else f"{text} | {junk}"
    return _tidy(text)


# ---- the text-only paraphraser -------------------------------------------------------


def _lexicon(table: dict[str, list[str]]) -> list[tuple[str, str]]:
    pairs = [(w, name) for name, words in table.items() for w in words]
    return sorted(pairs, key=lambda p: -len(p[0]))  # longest match first


_SHAPE_LEX = _lexicon(SHAPE_WORDS)
_COLOUR_LEX = _lexicon(COLOUR_WORDS)
_SIZE_LEX = _lexicon(SIZE_WORDS)
_BG_LEX = _lexicon(BACKGROUND_WORDS)
# longest phrase first (a phrase may contain a shorter one); ties broken by the phrase and its
# cell, never by set order, which follows string hashing and so changes from process to process
_POS_LEX: list[tuple[str, int]] = sorted(
    {(position_phrase(c, 3, v), c) for c in range(9) for v in range(4)}, key=lambda p: (-len(p[0]), p[0], p[1])
)


def _find(text: str, lex: list[tuple[str, str]]) -> str | None:
    for word, name in lex:
        if re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text):
            return name
    return None


def parse_alt_text(text: str) -> tuple[list[dict[str, str | None]], str | None]:
    """Recover what an alt-text says: per object its known attributes, and the background."""
    body = text.lower().split(" | ")[0]
    bg = None
    m = re.search(r" on (\w+) background", body)
    if m:
        bg = _find(m.group(1), _BG_LEX)
        body = body[: m.start()]
    objects = []
    for chunk in body.split(" and "):
        shape = _find(chunk, _SHAPE_LEX)
        if shape is None:
            continue
        pos = None
        for phrase, _cell in _POS_LEX:
            if phrase in chunk:
                pos = phrase
                break
        objects.append(
            {"shape": shape, "colour": _find(chunk, _COLOUR_LEX), "size": _find(chunk, _SIZE_LEX), "pos": pos}
        )
    return objects, bg


def paraphrase(text: str, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """Re-word an alt-text. Sees only `text`: what it lacks stays missing."""
    objects, bg = parse_alt_text(text)
    if not objects:
        return _tidy(text)
    if cfg.shuffle_objects:
        objects = [objects[i] for i in rng.permutation(len(objects))]
    t_obj = int(rng.integers(cfg.templates))
    phrases = []
    for o in objects:
        if o["pos"] is not None:  # re-word the position too
            cell = next(c for p, c in _POS_LEX if p == o["pos"])
            o = {**o, "pos": position_phrase(cell, 3, int(rng.integers(min(cfg.synonyms, 4))))}
        phrases.append(_object_phrase(o, cfg, rng, t_obj))
    objs = _join(phrases)
    if bg is None:
        return _tidy(["{}.", "a picture of {}.", "there is {}."][int(rng.integers(3))].format(objs))
    bg_word = _pick(BACKGROUND_WORDS[bg], cfg.synonyms, rng)
    sentence = SENTENCE_TEMPLATES[int(rng.integers(cfg.templates))]
    return _tidy(sentence.format(objs=objs, bg=bg_word))
