"""The contamination audit's matching key: a text normalised so that trivial edits (width,
ligatures, case, punctuation, invisible characters, look-alike letters) do not hide a copy.

For matching only: the key is compared (the exact level) and shingled (the near level), the
stored text never changes. The steps, in order:

1. `nfkc`: Unicode NFKC (full-width forms, ligatures, superscripts, composed accents);
2. `ignorables`: Default_Ignorable_Code_Point characters removed (soft hyphen, zero-width
   space / joiner / non-joiner, word joiner, BOM, bidi controls, variation selectors, tags):
   they are invisible, so "cu<U+00AD>be" reads "cube", where punctuation removal alone would
   split it into "cu be";
3. `confusables`: Cyrillic and Greek letters that look like Latin ones folded to the Latin
   letter ("a rеd cubе" with Cyrillic е reads "a red cube");

then case folding, punctuation to spaces and whitespace collapsed (the `plain` rules, always
on). An ASCII text's key is what it was before steps 2 and 3 existed: both only touch
non-ASCII code points. `match_step` says which step a matched pair first needed, so the
audit can report how many matches each step adds.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection

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

# Look-alikes of Latin letters in Cyrillic and Greek: a subset of Unicode TS #39's
# confusables.txt (the idea of a "skeleton"), the letters a homoglyph attack on English text
# uses. Not the full skeleton algorithm: other scripts, symbols, and precomposed letters with
# diacritics (ё, ά) are left alone. Upper-case letters map to upper-case Latin (before case
# folding: Greek Η looks like H, its lower case η like n); the table is applied again after
# case folding, for lower-case letters that case folding produces (ᾳ -> αι).
CONFUSABLES = {
    # Cyrillic
    "а": "a", "А": "A", "В": "B", "е": "e", "Е": "E", "һ": "h", "Һ": "H", "і": "i", "І": "I",
    "ј": "j", "Ј": "J", "К": "K", "М": "M", "Н": "H", "о": "o", "О": "O", "р": "p", "Р": "P",
    "с": "c", "С": "C", "Т": "T", "у": "y", "У": "Y", "х": "x", "Х": "X", "ѕ": "s", "Ѕ": "S",
    "ԁ": "d", "Ԁ": "D", "ԛ": "q", "Ԛ": "Q", "ԝ": "w", "Ԝ": "W", "ү": "y", "Ү": "Y", "ӏ": "l",
    "Ӏ": "l",
    # Greek
    "Α": "A", "α": "a", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "η": "n", "Ι": "I", "ι": "i",
    "Κ": "K", "Μ": "M", "Ν": "N", "ν": "v", "Ο": "O", "ο": "o", "Ρ": "P", "ρ": "p", "Τ": "T",
    "Υ": "Y", "Χ": "X", "ϲ": "c", "Ϲ": "C", "ϳ": "j", "Ϳ": "J",
    # Latin dotless i
    "ı": "i",
}  # fmt: skip
_CONFUSABLE = str.maketrans(CONFUSABLES)


def _fold(table: dict[int, str | None]) -> tuple[re.Pattern, dict[int, str | None]]:
    """(a character class of the table's keys, the table): `str.translate` looks every
    character up in the dict, so it runs only on texts the class finds a character in."""
    cps = sorted(table)
    ranges, lo = [], cps[0]
    for a, b in zip(cps, [*cps[1:], None], strict=True):
        if b != a + 1:
            ranges.append(re.escape(chr(lo)) + ("-" + re.escape(chr(a)) if a > lo else ""))
            lo = b
    return re.compile("[" + "".join(ranges) + "]"), table


_FOLD = {  # (remove ignorables, fold confusables) -> (pattern, table)
    (True, True): _fold(_IGNORABLE | _CONFUSABLE),
    (True, False): _fold(_IGNORABLE),
    (False, True): _fold(_CONFUSABLE),
}
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def normalize_text(text: str, steps: Collection[str] = MATCH_STEPS) -> str:
    """The matching key: the `steps` (see the module doc), then case folded, punctuation to
    spaces, whitespace collapsed. `steps=()` is the `plain` key."""
    nfkc = "nfkc" in steps
    t = unicodedata.normalize("NFKC", text) if nfkc else text
    # both tables hold non-ASCII code points only, and most texts are ASCII: skip the lookups
    fold = (False, False) if t.isascii() else ("ignorables" in steps, "confusables" in steps)
    if fold in _FOLD and _FOLD[fold][0].search(t):
        t = t.translate(_FOLD[fold][1])
        # a removed ignorable may have stood between a letter and its combining mark
        t = unicodedata.normalize("NFKC", t) if nfkc else t
    t = t.casefold()
    if fold[1] and _FOLD[False, True][0].search(t):
        t = t.translate(_CONFUSABLE)
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
