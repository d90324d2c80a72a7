"""The contamination audit's matching key: a text normalised so that trivial edits (width,
ligatures, case, punctuation, invisible characters, look-alike letters) do not hide a copy.

For matching only: the key is compared (the exact level) and shingled (the near level), the
stored text never changes. The steps, in order:

1. `nfkc`: Unicode NFKC (full-width forms, ligatures, superscripts, composed accents);
2. `ignorables`: Default_Ignorable_Code_Point characters removed (soft hyphen, zero-width
   space / joiner / non-joiner, word joiner, BOM, bidi controls, variation selectors, tags):
   they are invisible, so "cu<U+00AD>be" reads "cube", where punctuation removal alone would
   split it into "cu be";
3. `confusables`: look-alikes of ASCII letters and digits in other scripts folded to them, by
   Unicode's confusables data ("a rеd cubе" with Cyrillic е, "ɢʀᴇᴇɴ" in small capitals, "ɑ"
   Latin alpha, Armenian "օ"), and combining marks that compose no letter over an ASCII
   letter dropped ("c̶ube");

then case folding, punctuation to spaces and whitespace collapsed (the `plain` rules, always
on). An ASCII text's key is what it was before steps 2 and 3 existed: both only touch
non-ASCII code points. `match_step` says which step a matched pair first needed, so the
audit can report how many matches each step adds.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection

from .confusables_table import CONFUSABLES, MARK_RANGES

MATCH_STEPS = ("nfkc", "ignorables", "confusables")  # applied in this order
STEP_NAMES = ("plain", *MATCH_STEPS)  # `plain`: case, punctuation, whitespace only

# Default_Ignorable_Code_Point, from Unicode's DerivedCoreProperties.txt (Unicode 14 to 16
# agree). Python's unicodedata has no property lookup, so the ranges are written out here;
# tests/test_data.py checks them against the `regex` module's \p{Default_Ignorable_Code_Point}.
# Inclusive ranges.
DEFAULT_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG / JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ / AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE, ZWNJ, ZWJ, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # WORD JOINER, invisible operators, bidi isolates, deprecated format chars
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1..16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE (BOM)
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # reserved
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT CONTROLS
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM..END PHRASE
    (0xE0000, 0xE0FFF),  # tags, VARIATION SELECTOR-17..256, reserved
)
_IGNORABLE = {cp: None for lo, hi in DEFAULT_IGNORABLE_RANGES for cp in range(lo, hi + 1)}

# Look-alikes: Unicode TS #39's confusables data (the idea of a "skeleton"), generated into
# confusables_table.py by benchmarks/gen_confusables.py: every non-ASCII character whose
# prototype is one ASCII letter or digit (Cyrillic е, Greek Ο, Latin alpha ɑ, Armenian օ, ...)
# and the Latin small capitals (ɢʀᴇᴇɴ), which the data has as prototypes of their own. Not
# the full skeleton: ASCII characters are never folded (l, I and 1 stay apart), and a letter
# whose prototype carries a mark (ç -> c̦, η -> n̩) is left alone, as accented letters are.
# Upper-case letters map to upper-case Latin (before case folding: Greek Η looks like H);
# the table is applied again after case folding, for the lower-case letters that case
# folding produces (ᾳ -> αι).
_CONFUSABLE = str.maketrans(CONFUSABLES)


_TABLES = {  # (remove ignorables, fold confusables) -> the `str.translate` table
    (True, True): _IGNORABLE | _CONFUSABLE,
    (True, False): _IGNORABLE,
    (False, True): _CONFUSABLE,
}
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def _char_class(ranges: Collection[tuple[int, int]]) -> str:
    return "[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges) + "]"


# A combining mark that NFKC left standing on an ASCII letter or digit composes no letter of
# any language (c + U+0336 strike, x + acute): decoration, dropped by the confusables step so
# the plain rules do not turn it into a word break. A mark that composes (café) is part of
# its letter and stays; marks over other letters are left to the plain rules as before.
_STRAY_MARKS = re.compile("(?<=[0-9A-Za-z])" + _char_class(MARK_RANGES) + "+")
# `re` tests a class of BMP code points with a bitmap, one with astral ones range by range
# (40x slower): the cheap test first, the astral one only for a text that has such a character
_MARK_BMP = re.compile(_char_class([r for r in MARK_RANGES if r[1] <= 0xFFFF]))
_MARK_ASTRAL = re.compile(_char_class([r for r in MARK_RANGES if r[1] > 0xFFFF]))


def _has_mark(t: str) -> bool:
    return bool(_MARK_BMP.search(t)) or (max(t, default="") > "\uffff" and bool(_MARK_ASTRAL.search(t)))


def normalize_text(text: str, steps: Collection[str] = MATCH_STEPS) -> str:
    """The matching key: the `steps` (see the module doc), then case folded, punctuation to
    spaces, whitespace collapsed. `steps=()` is the `plain` key."""
    nfkc = "nfkc" in steps
    t = unicodedata.normalize("NFKC", text) if nfkc else text
    # both tables hold non-ASCII code points only, and most texts are ASCII: skip the lookups
    fold = (False, False) if t.isascii() else ("ignorables" in steps, "confusables" in steps)
    # translating is cheaper than searching first with a class of the tables' astral keys
    if fold in _TABLES and (u := t.translate(_TABLES[fold])) != t:
        # a removed ignorable may have stood between a letter and its combining mark
        t = unicodedata.normalize("NFKC", u) if nfkc else u
    if fold[1] and _has_mark(t):
        t = _STRAY_MARKS.sub("", t)
    t = t.casefold()
    if fold[1]:
        # the table may give an upper-case letter (Greek ϒ -> Y); the key is case folded
        t = t.translate(_CONFUSABLE).casefold()
    return " ".join(_PUNCT.sub(" ", t).split())


def word_ngrams(key: str, sizes: Collection[int]) -> set[tuple[str, ...]]:
    """A key's word n-grams, n in `sizes`: the near level's shingles before hashing
    (`sql/dedup_shingles.sql`)."""
    w = key.split(" ") if key else []
    return {tuple(w[i : i + n]) for n in sizes for i in range(len(w) - n + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def match_step(a: str, b: str, level: str, ngrams: Collection[int] = (), threshold: float = 1.0) -> str:
    """The first of `STEP_NAMES` whose key (that step and the ones before it switched on)
    already matches `a` with `b` at `level` (exact: equal keys; near: word n-gram Jaccard >=
    threshold). A pair the audit matched always gets one: the last step is the full key."""
    for k, name in enumerate(STEP_NAMES[:-1]):
        ka, kb = normalize_text(a, MATCH_STEPS[:k]), normalize_text(b, MATCH_STEPS[:k])
        if level == "exact" and ka == kb and ka:
            return name
        if level == "near" and jaccard(word_ngrams(ka, ngrams), word_ngrams(kb, ngrams)) >= threshold:
            return name
    return STEP_NAMES[-1]
