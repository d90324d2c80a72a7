"""Caption grammar: a scene -> text, with nuisance; and a text-only paraphraser.

Three ways a text can observe a scene, mirroring the paper's Table 7:
- `recaption`: a captioner that sees the scene. Complete: every object with shape, colour,
  size and position, and the background. Nuisance: synonyms, phrase and sentence templates,
  object order.
- `alt_text`: what the web attaches to an image. Partial (objects and attributes dropped),
  noisy (junk such as file names and shop words).
- `paraphrase`: a text-only rewriter that reads an alt-text and nothing else. It parses the
  attribute words it recognises and re-words them; it cannot add what the alt-text lacks.

How the web really writes (knobs `world.alt_*` / `world.eval_*`, all off by default):
- `nonvisual_alt_text`: an alt-text in the register of the page, not of the picture: brand,
  place and event names from the scene's theme (`NONVISUAL_POOLS`), no attribute words. Like
  "Nike summer sale" under a photo of shoes, it relates to the image only through what the
  image is of. The paraphraser re-words such names (a language model knows that "velox
  athletics" is "velox sports"), but it finds nothing visual to keep; the captioner, which sees
  the scene, writes its usual complete caption.
- `misperceive`: the scene an alt-text's writer got wrong (another colour, size, position or
  shape; the other background). The alt-text states the wrong value; the paraphraser keeps it,
  having nothing to check it against; the captioner does not see it.
- `partial_caption`, `add_nonvisual`: WIT-like eval captions, which mention part of the scene
  and often its context (a reference description of a Wikipedia image).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from .scenes import BACKGROUNDS, COLOURS, SHAPES, SIZES, Scene, SceneObject

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
_ALT_MENTIONS_BACKGROUND = 0.25  # how often an alt-text names the background
# Non-visual phrases per scene theme: two brands, a place, an event; each a concept with 4
# wordings, the first `world.synonyms` of which a writer uses (as for attribute words). No word
# here is an attribute word of the grammar above (tests/test_world.py checks), so none of it
# parses as part of the scene. Theme t draws from pool t % 8: with more than 8 themes, themes
# share a pool.
NONVISUAL_POOLS: list[list[list[str]]] = [
    [  # home
        ["nordvik", "nordvik co", "nordvik home", "the nordvik brand"],
        ["hemlund", "hemlund ltd", "hemlund living", "the hemlund label"],
        ["oslo showroom", "the oslo showroom", "oslo store", "showroom of oslo"],
        ["spring sale", "spring clearance", "seasonal sale", "spring deals"],
    ],
    [  # sport
        ["velox", "velox sports", "velox athletics", "the velox label"],
        ["kinetra", "kinetra gear", "kinetra pro", "the kinetra brand"],
        ["riverside stadium", "the riverside stadium", "riverside arena", "stadium by the river"],
        ["city marathon", "the city marathon", "marathon weekend", "annual marathon"],
    ],
    [  # fashion
        ["lumaire", "lumaire paris", "maison lumaire", "the lumaire house"],
        ["corvella", "corvella atelier", "corvella studio", "the corvella line"],
        ["milan runway", "the milan runway", "runway of milan", "milan catwalk"],
        ["fashion week", "the fashion week", "fashion week show", "fashion week event"],
    ],
    [  # toys
        ["tumbletot", "tumbletot toys", "tumbletot play", "the tumbletot range"],
        ["bramblebee", "bramblebee games", "bramblebee fun", "the bramblebee brand"],
        ["nuremberg toy fair", "the nuremberg toy fair", "toy fair of nuremberg", "nuremberg fair"],
        ["birthday party", "a birthday party", "birthday celebration", "party for a birthday"],
    ],
    [  # tech
        ["quantel", "quantel inc", "quantel labs", "the quantel brand"],
        ["voxa", "voxa audio", "voxa electronics", "the voxa label"],
        ["berlin expo", "the berlin expo", "expo of berlin", "berlin trade fair"],
        ["product launch", "the product launch", "launch event", "release day"],
    ],
    [  # garden
        ["greenhollow", "greenhollow co", "greenhollow plants", "the greenhollow brand"],
        ["fernwick", "fernwick ltd", "fernwick outdoor", "the fernwick label"],
        ["chelsea garden", "the chelsea garden", "garden of chelsea", "chelsea grounds"],
        ["flower show", "the flower show", "annual flower show", "flower festival"],
    ],
    [  # travel
        ["aerolis", "aerolis air", "aerolis travel", "the aerolis brand"],
        ["wandera", "wandera tours", "wandera trips", "the wandera label"],
        ["kyoto station", "the kyoto station", "station of kyoto", "kyoto terminal"],
        ["summer holiday", "the summer holiday", "summer vacation", "summer trip"],
    ],
    [  # wedding
        ["belvoir", "belvoir bridal", "belvoir events", "the belvoir house"],
        ["amorel", "amorel studio", "amorel weddings", "the amorel brand"],
        ["lakeside chapel", "the lakeside chapel", "chapel by the lake", "lakeside church"],
        ["wedding day", "the wedding day", "wedding ceremony", "wedding reception"],
    ],
]
_NONVISUAL_SEPARATORS = [" ", " - ", " | ", ", "]


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
    if rng.random() < _ALT_MENTIONS_BACKGROUND:
        bg = BACKGROUND_WORDS[BACKGROUNDS[scene.background]][0]
        text += f" on {bg} background"
    return _tidy(_add_junk(text, cfg, rng))


def _add_junk(text: str, cfg: WorldConfig, rng: np.random.Generator) -> str:
    if rng.random() < cfg.alt_junk:
        junk = ALT_JUNK[int(rng.integers(len(ALT_JUNK)))].format(n=int(rng.integers(1000, 9999)))
        text = f"{junk} {text}" if rng.random() < 0.5 else f"{text} | {junk}"
    return text


# ---- how the web really writes: non-visual and wrong alt-texts, WIT-like eval captions -----


def _other(value: int, n: int, u: float) -> int:
    """A value other than `value` among n, uniformly, from one uniform draw u (n = 1: none)."""
    return value if n < 2 else (value + 1 + int(u * (n - 1))) % n


def misperceive(scene: Scene, cfg: WorldConfig, rng: np.random.Generator) -> Scene:
    """The scene as a careless alt-text writer states it: each attribute of each object (shape,
    colour, size, cell) and the background is, with probability `cfg.alt_wrong`, another value.
    A wrong cell may be another object's: a wrong alt-text need not describe a possible scene.
    The same number of draws at every `alt_wrong`, so a scene's mistakes grow with the dose."""
    sizes = (cfg.n_shapes, cfg.n_colours, cfg.n_sizes, cfg.grid * cfg.grid)
    objs = []
    for o in scene.objects:
        wrong, u = rng.random(4) < cfg.alt_wrong, rng.random(4)
        values = [o.shape, o.colour, o.size, o.cell]
        objs.append(
            SceneObject(*(_other(v, n, x) if w else v for v, n, w, x in zip(values, sizes, wrong, u, strict=True)))
        )
    wrong_bg = rng.random() < cfg.alt_wrong
    background = _other(scene.background, len(BACKGROUNDS), rng.random()) if wrong_bg else scene.background
    return Scene(tuple(objs), background)


def _nonvisual_phrases(theme: int, cfg: WorldConfig, rng: np.random.Generator) -> list[str]:
    """One or two of the theme's concepts (brand, place, event), each in one of its wordings."""
    pool = NONVISUAL_POOLS[theme % len(NONVISUAL_POOLS)]
    picked = rng.choice(len(pool), size=1 + int(rng.random() < 0.5), replace=False)
    return [_pick(pool[int(c)], cfg.synonyms, rng) for c in picked]


def nonvisual_alt_text(theme: int, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """An alt-text that names the page's context instead of the picture ("velox | city marathon",
    "stock photo hemlund living"): the scene's theme in brand/place/event words, web junk as
    usual, and no attribute word, so a text-only paraphraser finds nothing visual in it."""
    sep = _NONVISUAL_SEPARATORS[int(rng.integers(len(_NONVISUAL_SEPARATORS)))]
    return _tidy(_add_junk(sep.join(_nonvisual_phrases(theme, cfg, rng)), cfg, rng))


def partial_caption(scene: Scene, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """A caption that mentions part of the scene, as a reference description does: objects and
    attributes dropped at the alt-text's rates, written in the captioner's grammar."""
    objs = [o for o in scene.objects if rng.random() < cfg.alt_object_keep]
    if not objs:
        objs = [scene.objects[int(rng.integers(len(scene.objects)))]]
    known = []
    for o in objs:
        drop = rng.random(3) < cfg.alt_attribute_drop
        known.append(
            {
                "shape": SHAPES[o.shape],
                "colour": None if drop[0] else COLOURS[o.colour],
                "size": None if drop[1] else SIZES[o.size],
                "cell": None if drop[2] else _cell3(o.cell, cfg.grid),
            }
        )
    bg = BACKGROUNDS[scene.background] if rng.random() < _ALT_MENTIONS_BACKGROUND else None
    return _describe(known, bg, cfg, rng)


def add_nonvisual(text: str, theme: int, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """`text` with the scene's context added before or after it ("velox, city marathon: ...")."""
    extra = ", ".join(_nonvisual_phrases(theme, cfg, rng))
    if rng.random() < 0.5:
        return _tidy(f"{extra}: {text}")
    return _tidy(f"{text.rstrip('.')}, {extra}.")


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

_POS_CELL = {p: c for p, c in reversed(_POS_LEX)}  # a phrase -> its cell (the first in _POS_LEX wins)


@functools.cache
def _word_re(word: str) -> re.Pattern[str]:
    """`word` as a whole word (not inside a longer word or hyphenation), compiled once."""
    return re.compile(rf"(?<![\w-]){re.escape(word)}(?![\w-])")


def _find(text: str, lex: list[tuple[str, str]]) -> str | None:
    for word, name in lex:
        # the substring test first: most words of a lexicon are not in a text at all
        if word in text and _word_re(word).search(text):
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


# every wording of every non-visual concept -> (theme pool, concept); longest first, so that
# "the velox label" is read as one phrase, not as "velox"
_NONVISUAL_LEX: list[tuple[str, tuple[int, int]]] = sorted(
    ((w, (t, c)) for t, pool in enumerate(NONVISUAL_POOLS) for c, words in enumerate(pool) for w in words),
    key=lambda p: (-len(p[0]), p[0]),
)


T = TypeVar("T")  # what a lexicon maps its words to


def find_nonvisual(text: str) -> list[tuple[int, int]]:
    """The non-visual concepts (pool, concept) a text names, in reading order. A language
    model knows these names (that "velox athletics" and "velox" are one brand) without seeing
    any image: this is world knowledge of the text kind, not of the scene."""
    return _find_all(text.lower(), _NONVISUAL_LEX)


def _find_all(text: str, lex: list[tuple[str, T]]) -> list[T]:
    """Every mention of a lexicon's words in reading order, longest first and never
    overlapping ("plus sign" is one cross, not a cross and a plus)."""
    found: list[tuple[int, T]] = []  # starts never repeat: the sort never compares two T
    taken = [False] * len(text)
    for word, name in lex:
        if word not in text:
            continue
        for m in _word_re(word).finditer(text):
            if not any(taken[m.start() : m.end()]):
                taken[m.start() : m.end()] = [True] * (m.end() - m.start())
                found.append((m.start(), name))
    return [name for _, name in sorted(found)]


def _cell3(cell: int, grid: int) -> int:
    """A cell as the 3x3 grid numbers it (a 2x2 grid uses the corners, as position_phrase does)."""
    if grid == 3:
        return cell
    row, col = divmod(cell, grid)
    return row * 2 * 3 + col * 2


def _describe(objects: list[dict[str, str | int | None]], bg: str | None, cfg: WorldConfig, rng) -> str:
    """The captioner's grammar for what a writer knows: objects with their known attributes
    (None = unknown; `cell` on the 3x3 grid) and the background (None = unknown)."""
    if cfg.shuffle_objects:
        objects = [objects[i] for i in rng.permutation(len(objects))]
    t_obj = int(rng.integers(cfg.templates))
    phrases = []
    for o in objects:
        pos = None
        if o["cell"] is not None:  # re-word the position too
            pos = position_phrase(int(o["cell"]), 3, int(rng.integers(min(cfg.synonyms, 4))))
        phrases.append(
            _object_phrase({"shape": o["shape"], "colour": o["colour"], "size": o["size"], "pos": pos}, cfg, rng, t_obj)
        )
    objs = _join(phrases)
    if bg is None:
        return _tidy(["{}.", "a picture of {}.", "there is {}."][int(rng.integers(3))].format(objs))
    bg_word = _pick(BACKGROUND_WORDS[bg], cfg.synonyms, rng)
    sentence = SENTENCE_TEMPLATES[int(rng.integers(cfg.templates))]
    return _tidy(sentence.format(objs=objs, bg=bg_word))


def paraphrase(text: str, cfg: WorldConfig, rng: np.random.Generator) -> str:
    """Re-word an alt-text. Sees only `text`: what it lacks stays missing, what it states wrongly
    stays wrong. Brand, place and event names (non-visual) are kept and re-worded, as a language
    model keeps a caption's meaning; web junk (file names, shop words) is dropped."""
    objects, bg = parse_alt_text(text)
    context = find_nonvisual(text)
    if not objects and not context:
        return _tidy(text)  # nothing it understands: returned as it is
    # the non-visual part's draws come after the visual part's, so a text without names is
    # re-worded exactly as before names existed
    known = [{**o, "cell": None if o["pos"] is None else _POS_CELL[o["pos"]]} for o in objects]
    visual = _describe(known, bg, cfg, rng) if objects else ""
    if not context:
        return visual
    if cfg.shuffle_objects:
        context = [context[i] for i in rng.permutation(len(context))]
    names = ", ".join(_pick(NONVISUAL_POOLS[t][c], cfg.synonyms, rng) for t, c in context)
    if visual:
        return _tidy(f"{visual.rstrip('.')}, {names}.")
    return _tidy(["{}.", "a photo from {}.", "a picture: {}."][int(rng.integers(3))].format(names))


# ---- reading a caption back: the attributes it states ------------------------------------

_ROW_OF = {w: r for r in (0, 2) for w in _ROWS[r]}  # top/upper/high -> 0, bottom/lower/low -> 2
_COL_OF = {w: c for c in (0, 2) for w in _COLS[c]}  # left/left-hand/west -> 0, right/right-hand/east -> 2
_POS_WORDS = sorted({*(w for ws in _ROWS + _COLS for w in ws), "center", "area", "spot"}, key=lambda w: (-len(w), w))
_POS_WORD = "(?:" + "|".join(re.escape(w) for w in _POS_WORDS) + r")(?![\w-])"
# "in/at/toward the <position words>" or "dead centre"; the words decide the cell, so a
# wording the grammar never pairs ("in the upper left") still reads as what it says
_POS_RE = re.compile(rf"(?<![\w-])(?:(?:in|at|toward) the ({_POS_WORD}(?: {_POS_WORD})*)|dead centre(?![\w-]))")


def mentioned_attributes(text: str) -> dict[str, list]:
    """What a caption in the captioner's grammar states, read back word by word: the shapes,
    colours and sizes it names (attribute names, one per mention), the positions (cells of
    the 3x3 grid), the background(s), and `count`, the number of objects (one per shape
    mention). Words are not bound to objects: a caption that names a red circle and a blue
    square states red, blue, circle and square."""
    body = text.lower()
    cells = []
    for m in _POS_RE.finditer(body):
        words = m.group(1).split() if m.group(1) else []
        row = next((_ROW_OF[w] for w in words if w in _ROW_OF), 1)
        col = next((_COL_OF[w] for w in words if w in _COL_OF), 1)
        cells.append(row * 3 + col)
    shapes = _find_all(body, _SHAPE_LEX)
    return {
        "shape": shapes,
        "colour": _find_all(body, _COLOUR_LEX),
        "size": _find_all(body, _SIZE_LEX),
        "position": cells,
        "count": len(shapes),
        "background": _find_all(body, _BG_LEX),
    }


def scene_attributes(scene: Scene, grid: int) -> dict[str, list]:
    """A scene's true attributes in `mentioned_attributes`'s terms (cells on the 3x3 grid)."""
    return {
        "shape": [SHAPES[o.shape] for o in scene.objects],
        "colour": [COLOURS[o.colour] for o in scene.objects],
        "size": [SIZES[o.size] for o in scene.objects],
        "position": [_cell3(o.cell, grid) for o in scene.objects],
        "count": len(scene.objects),
        "background": [BACKGROUNDS[scene.background]],
    }
