"""Generate `platonic_core/confusables.json`, the contamination audit's look-alike table,
from Unicode's confusables data as the PyPI package `confusable-homoglyphs` ships it.

    pip install confusable-homoglyphs==3.3.1     # in the `test` extra
    python benchmarks/gen_confusables.py

The package is needed only here and in the test that checks the committed table against it
(tests/test_data.py): the runtime reads the generated file (package data, loaded by
`platonic_core/matchnorm.py`). Its
`confusables.json` holds, for each character of Unicode's confusables.txt, either its one
prototype (a source: `{"ɑ": [{"c": "a"}]}`) or the characters that have it as their
prototype (a prototype: `{"a": [{"c": "⍺"}, ...]}`). The table folds, each rule read off
Unicode's data, never a character picked by hand:

1. every non-ASCII source whose prototype is one ASCII letter or digit (ɑ -> a, ս -> u,
   Cyrillic е -> e). Unicode's prototype of the I/l/1/| class is `l` and of O/0 is `O`; the
   key never merges those ASCII characters, so a source in these classes takes the member
   its own general category names: a digit -> 1 / 0, a capital (Lu) -> I, otherwise l / O;
2. the Latin small capitals, which are prototypes themselves (ɢ ʀ ᴇ ɴ look like no ASCII
   letter in the data): by name, `LATIN LETTER SMALL CAPITAL X` -> x (and `LATIN CAPITAL
   LETTER SMALL CAPITAL X` -> X), and every source whose prototype is one of them
   (ԍ -> ɢ -> g);
3. ASCII characters are never keys (an ASCII text's key does not change).

It also writes the ranges of combining marks (general category Mn, Me) by this Python's
unicodedata: `matchnorm` drops a mark that NFKC left standing on an ASCII letter or digit.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
import unicodedata
from importlib.resources import files
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "platonic_core" / "confusables.json"
ALNUM = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
SMALL_CAPITAL = re.compile(r"LATIN (LETTER|CAPITAL LETTER) SMALL CAPITAL ([A-Z])")
CLASSES = {"l": ("1", "I", "l"), "O": ("0", "O", "O")}  # prototype -> (digit, capital, other)


def small_capital(ch: str) -> str | None:
    m = SMALL_CAPITAL.fullmatch(unicodedata.name(ch, ""))
    return None if m is None else (m[2] if m[1] == "CAPITAL LETTER" else m[2].lower())


def in_class(src: str, proto: str) -> str:
    if proto not in CLASSES:
        return proto
    digit, capital, other = CLASSES[proto]
    cat = unicodedata.category(src)
    return digit if cat.startswith("N") else capital if cat == "Lu" else other


def table(data: dict[str, list[dict[str, str]]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, entries in data.items():
        # the JSON wraps right-to-left characters in LEFT-TO-RIGHT MARKs ("\u200e١\u200e")
        src = key.strip("\u200e\u200f")
        if len(src) != 1 or src.isascii() or len(entries) != 1:
            continue  # a prototype (its list is its sources) or a sequence
        proto = entries[0]["c"].strip("\u200e\u200f")
        if proto in ALNUM:
            out[src] = in_class(src, proto)
        elif len(proto) == 1 and (sc := small_capital(proto)):
            out[src] = sc
    for cp in range(0x80, 0x110000):
        if (sc := small_capital(chr(cp))) and chr(cp) not in out:
            out[chr(cp)] = sc
    assert all(not k.isascii() and v in ALNUM for k, v in out.items())
    return dict(sorted(out.items()))


def mark_ranges() -> list[tuple[int, int]]:
    cps = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) in ("Mn", "Me")]
    ranges: list[tuple[int, int]] = []
    for cp in cps:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return ranges


def document(data: dict[str, list[dict[str, str]]], version: str) -> dict:
    """The file's content: where it comes from, the look-alike table, the mark ranges."""
    fold = table(data)
    return {
        "generated_by": "benchmarks/gen_confusables.py; do not edit by hand",
        "source": f"confusable-homoglyphs {version}",
        "license": "confusables.json of the PyPI package confusable-homoglyphs (MIT License, Copyright (c) "
        "2016-2018 Victor Felder, 2024 Elena Grandi), generated from Unicode's confusables.txt (UTS #39; "
        "Unicode License)",
        "unidata_version": unicodedata.unidata_version,  # the marks, and the names the rules read
        "confusables": fold,  # non-ASCII look-alike -> the one ASCII letter or digit it folds to
        "mark_ranges": mark_ranges(),  # combining marks (Mn, Me), inclusive code point ranges
    }


def render(doc: dict) -> str:
    """One look-alike or range per line, every non-ASCII character escaped (no right-to-left
    or combining character sits in the file)."""
    head = {k: v for k, v in doc.items() if k not in ("confusables", "mark_ranges")}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines += ['  "confusables": {']
    lines += [f"    {json.dumps(k)}: {json.dumps(v)}," for k, v in doc["confusables"].items()]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  },", '  "mark_ranges": [']
    lines += [f"    [{a}, {b}]," for a, b in doc["mark_ranges"]]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def main() -> None:
    version = importlib.metadata.version("confusable-homoglyphs")
    data = json.loads((files("confusable_homoglyphs") / "confusables.json").read_text("utf-8"))
    doc = document(data, version)
    OUT.write_text(render(doc), "utf-8")
    print(f"{OUT}: {len(doc['confusables'])} look-alikes from confusable-homoglyphs {version}", file=sys.stderr)


if __name__ == "__main__":
    main()
