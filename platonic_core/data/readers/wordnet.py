"""WordNet 3.0 database files (`data.noun`, wndb(5) line format), read without nltk: one
image-less item per synset, image_id its wnid (`n%08d` of the synset offset: the ImageNet
class ids), its texts the lemma list ("dog, domestic dog, Canis familiaris"), the
definition and each quoted example, provenance the offset, the lexicographer file's name
and the hypernym wnids (pointers `@` and `@i`).

A line of a data file:

    synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt
        [ptr...] [frames...] | gloss

offsets and p_cnt decimal, w_cnt and lex_id hexadecimal, each pointer `symbol offset pos
source/target` (four hex digits), frames only for verbs. The license header (lines that
start with two spaces) is skipped and counted, never quarantined; a line that does not
follow the format (a bad count, a non-hex number, a truncated pointer list, no gloss) is
quarantined `malformed_wordnet`, its `field` the wndb field that was wrong, its raw text
the line, its `source_row` the line's index in the file (0-based)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from .base import (
    MAX_RECORD_BYTES,
    REASON,
    REASON_FIELD,
    Batch,
    Reader,
    Shard,
    TextField,
    as_text,
    bounded_lines,
)
from .sources import open_binary

if TYPE_CHECKING:
    from ...config import IngestConfig

# lexnames(5): lex_filenum -> the lexicographer file (Debian's wordnet-base ships no lexnames file)
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
HYPERNYM_POINTERS = ("@", "@i")  # hypernym, instance hypernym
MALFORMED = "malformed_wordnet"
KINDS = {"lemmas": "wn_lemmas", "definition": "wn_definition", "example": "wn_example"}

# (pattern, what it is in words) of the numeric fields
_DEC8 = (re.compile(r"\d{8}"), "8 decimal digits")
_DEC2 = (re.compile(r"\d{2}"), "2 decimal digits")
_DEC3 = (re.compile(r"\d{3}"), "3 decimal digits")
_HEX1 = (re.compile(r"[0-9a-fA-F]"), "1 hex digit")
_HEX2 = (re.compile(r"[0-9a-fA-F]{2}"), "2 hex digits")
_HEX4 = (re.compile(r"[0-9a-fA-F]{4}"), "4 hex digits")
_POS = frozenset("nvasr")
_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")  # data.adj's syntactic markers: not part of the lemma
_FIRST_EXAMPLE = re.compile(r'(?:^|[;:])\s*"')  # an example opens the gloss or follows "; " or ": "
_QUOTED = re.compile(r'"([^"]*)"')


@dataclass(frozen=True)
class Synset:
    offset: int
    ss_type: str  # n v a s r
    lex_filenum: int
    words: tuple[str, ...]  # as in the file: underscores, no adjective markers
    pointers: tuple[tuple[str, int, str], ...]  # (symbol, target offset, target pos)
    definition: str
    examples: tuple[str, ...]

    @property
    def wnid(self) -> str:
        return wnid(self.ss_type, self.offset)

    @property
    def lexname(self) -> str:
        return LEXNAMES[self.lex_filenum]

    @property
    def lemma_text(self) -> str:
        """The lemma list as one text: "dog, domestic dog, Canis familiaris"."""
        return ", ".join(w.replace("_", " ") for w in self.words)

    @property
    def hypernyms(self) -> tuple[str, ...]:
        """wnids of the direct hypernyms (class and instance)."""
        return tuple(wnid(pos, off) for sym, off, pos in self.pointers if sym in HYPERNYM_POINTERS)


class MalformedLine(ValueError):
    """A data line that does not follow wndb(5): `field` names the part that is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def wnid(pos: str, offset: int) -> str:
    """`n02084071`: the part of speech letter and the 8-digit offset (ImageNet's class ids)."""
    return f"{pos}{offset:08d}"


def is_license_line(line: str) -> bool:
    return line.startswith("  ")


def _take(tokens: list[str], i: int, field: str, number: tuple[re.Pattern, str] | None = None) -> str:
    if i >= len(tokens):
        raise MalformedLine(field, f"the line ends before {field} (truncated)")
    if number is not None and not number[0].fullmatch(tokens[i]):
        raise MalformedLine(field, f"{tokens[i]!r} is not {number[1]}")
    return tokens[i]


def split_gloss(gloss: str) -> tuple[str, tuple[str, ...]]:
    """The gloss `def; "example one"; "example two"` -> (definition, examples). Quotes inside the
    definition (before the first example) stay in it."""
    gloss = gloss.strip()
    m = _FIRST_EXAMPLE.search(gloss)
    if m is None:
        return gloss.rstrip("; "), ()
    examples = tuple(e.strip() for e in _QUOTED.findall(gloss[m.start() :]) if e.strip())
    return gloss[: m.start()].strip().rstrip(";").strip(), examples


# a well-formed line of a noun, adjective or adverb file, single-spaced as WordNet writes it:
# one match reads it (five times faster than the token walk, which still names what is wrong)
_WELL_FORMED = re.compile(
    r"(\d{8}) (\d{2}) ([nasr]) ([0-9a-fA-F]{2}) ((?:\S+ [0-9a-fA-F] )+)(\d{3}) "
    r"((?:\S+ \d{8} [nvasr] [0-9a-fA-F]{4} )*)\|(.*)"
)


def parse_data_line(line: str) -> Synset:
    """One wndb(5) data line -> its Synset; MalformedLine naming the field otherwise."""
    line = line.rstrip("\r\n")
    m = _WELL_FORMED.fullmatch(line)
    if m is not None:
        words, ptrs = m.group(5).split()[::2], m.group(7).split()
        lex_filenum = int(m.group(2))
        if len(words) == int(m.group(4), 16) and len(ptrs) == 4 * int(m.group(6)) and lex_filenum < len(LEXNAMES):
            pointers = tuple((ptrs[i], int(ptrs[i + 1]), ptrs[i + 2]) for i in range(0, len(ptrs), 4))
            definition, examples = split_gloss(m.group(8))
            words = tuple(_ADJ_MARKER.sub("", w) for w in words)
            return Synset(int(m.group(1)), m.group(3), lex_filenum, words, pointers, definition, examples)
    return _parse_tokens(line)


def _parse_tokens(line: str) -> Synset:
    """The token-by-token reading of wndb(5): verbs (frames), odd spacing, and every
    malformed line, whose first wrong field it names."""
    head, bar, gloss = line.partition("|")
    t = head.split()
    offset = int(_take(t, 0, "synset_offset", _DEC8))
    lex_filenum = int(_take(t, 1, "lex_filenum", _DEC2))
    if lex_filenum >= len(LEXNAMES):
        raise MalformedLine("lex_filenum", f"{lex_filenum} is not a lexicographer file (0-{len(LEXNAMES) - 1})")
    ss_type = _take(t, 2, "ss_type")
    if ss_type not in _POS:
        raise MalformedLine("ss_type", f"{ss_type!r} is not one of n v a s r")
    w_cnt = int(_take(t, 3, "w_cnt", _HEX2), 16)
    if w_cnt == 0:
        raise MalformedLine("w_cnt", "a synset has at least one word")
    i, words = 4, []
    for _ in range(w_cnt):
        words.append(_ADJ_MARKER.sub("", _take(t, i, "word")))
        _take(t, i + 1, "lex_id", _HEX1)
        i += 2
    p_cnt = int(_take(t, i, "p_cnt", _DEC3))
    i += 1
    pointers = []
    for _ in range(p_cnt):
        symbol = _take(t, i, "pointer_symbol")
        target = int(_take(t, i + 1, "pointer_offset", _DEC8))
        pos = _take(t, i + 2, "pointer_pos")
        if pos not in _POS:
            raise MalformedLine("pointer_pos", f"{pos!r} is not one of n v a s r")
        _take(t, i + 3, "source_target", _HEX4)
        pointers.append((symbol, target, pos))
        i += 4
    if ss_type == "v" and i < len(t):  # verb frames: f_cnt then "+ f_num w_num" each
        f_cnt = int(_take(t, i, "f_cnt", _DEC2))
        for _ in range(f_cnt):
            _take(t, i + 1, "frame")
            _take(t, i + 2, "f_num", _DEC2)
            _take(t, i + 3, "w_num", _HEX2)
            i += 3
        i += 1
    if i != len(t):
        raise MalformedLine("p_cnt", f"{len(t) - i} tokens after the {p_cnt} pointers the line declares")
    if not bar:
        raise MalformedLine("gloss", "no '|' before the gloss (truncated)")
    definition, examples = split_gloss(gloss)
    return Synset(offset, ss_type, lex_filenum, tuple(words), tuple(pointers), definition, examples)


@dataclass
class DataFile:
    """A whole data file parsed: synsets in file order, the license header's line count and
    the malformed lines as (line index, field, message)."""

    synsets: list[Synset]
    header_lines: int
    malformed: list[tuple[int, str, str]]

    @property
    def lines(self) -> int:
        return len(self.synsets) + self.header_lines + len(self.malformed)


def iter_data_lines(
    uri: str, max_bytes: int = MAX_RECORD_BYTES
) -> Iterator[tuple[int, str, Synset | MalformedLine | None]]:
    """(line index, the line, its Synset, MalformedLine, or None for a license line) per line.
    A line over `max_bytes` is malformed, and only its first bytes are read (memory)."""
    with open_binary(uri) as fh:
        for i, (raw, over) in enumerate(bounded_lines(fh, max_bytes)):
            line = raw.decode("utf-8", "surrogateescape").rstrip("\r\n")
            if over:
                too_long = MalformedLine("line", f"longer than {max_bytes:,} bytes (ingest.max_record_bytes)")
                yield i, line[:1000], too_long
                continue
            if is_license_line(line):
                yield i, line, None
                continue
            try:
                yield i, line, parse_data_line(line)
            except MalformedLine as e:
                yield i, line, e


def read_data_file(path: str | Path) -> DataFile:
    synsets, malformed, header = [], [], 0
    for i, _line, parsed in iter_data_lines(str(path)):
        if parsed is None:
            header += 1
        elif isinstance(parsed, MalformedLine):
            malformed.append((i, parsed.field, str(parsed)))
        else:
            synsets.append(parsed)
    return DataFile(synsets, header, malformed)


class WordNetReader(Reader):
    """wndb(5) data files -> per synset a lemma-list text and a definition text (one input
    row), and one input row per quoted example (its index in `example_index`); a malformed
    line is one quarantined input row. Every row carries `synset_offset`, `lexname` and
    `hypernyms` (space-separated wnids). `header_lines[shard.id]` counts the license lines
    skipped (the corpus counts have no field for lines that are not rows)."""

    format = "wordnet"
    id_column = "image_id"

    def __init__(self, cfg: IngestConfig):
        super().__init__(cfg)
        self.header_lines: dict[str, int] = {}

    @property
    def fields(self) -> list[TextField]:
        return [
            TextField("lemmas", KINDS["lemmas"]),
            TextField("definition", KINDS["definition"]),
            TextField("example", KINDS["example"], 0, "example_index"),
        ]

    def batches(self, shard: Shard) -> Iterator[Batch]:
        self.header_lines[shard.id] = 0
        chunk: list[tuple[int, str, Synset | MalformedLine]] = []
        for i, line, parsed in iter_data_lines(shard.uri, self.cfg.max_record_bytes):
            if parsed is None:
                self.header_lines[shard.id] += 1
                continue
            chunk.append((i, line, parsed))
            if len(chunk) >= self.batch_rows:
                yield from self._emit(chunk)
                chunk = []
        if chunk:
            yield from self._emit(chunk)

    def _emit(self, chunk: list[tuple[int, str, Synset | MalformedLine]]) -> Iterator[Batch]:
        """Up to three batches, one per shape of row (the normaliser reads the text columns a
        batch has): synsets (lemmas + definition), examples, malformed lines. Provenance
        columns are the same in all three, so the shard's texts have one schema."""
        good = [(i, s) for i, _, s in chunk if isinstance(s, Synset)]
        if good:
            ss = [s for _, s in good]
            yield Batch(
                pa.table(
                    {
                        "image_id": pa.array([s.wnid for s in ss], pa.string()),
                        "source_row": pa.array([i for i, _ in good], pa.int64()),
                        "lemmas": as_text([s.lemma_text for s in ss])[0],
                        "definition": as_text([s.definition for s in ss])[0],
                        **_provenance(ss),
                    }
                )
            )
        ex = [(i, s, n, e) for i, s in good for n, e in enumerate(s.examples)]
        if ex:
            yield Batch(
                pa.table(
                    {
                        "image_id": pa.array([s.wnid for _, s, _, _ in ex], pa.string()),
                        "source_row": pa.array([i for i, _, _, _ in ex], pa.int64()),
                        "example": as_text([e for _, _, _, e in ex])[0],
                        "example_index": pa.array([str(n) for _, _, n, _ in ex], pa.string()),
                        **_provenance([s for _, s, _, _ in ex]),
                    }
                )
            )
        bad = [(i, line, e) for i, line, e in chunk if isinstance(e, MalformedLine)]
        if bad:
            n = len(bad)
            yield Batch(
                pa.table(
                    {
                        "image_id": pa.nulls(n, pa.string()),
                        "source_row": pa.array([i for i, _, _ in bad], pa.int64()),
                        "lemmas": as_text([line for _, line, _ in bad])[0],  # the raw line, quarantined
                        REASON: pa.array([MALFORMED] * n, pa.string()),
                        REASON_FIELD: pa.array([e.field for _, _, e in bad], pa.string()),
                        **_provenance([None] * n),
                    }
                )
            )


def _provenance(synsets: list[Synset | None]) -> dict[str, pa.Array]:
    return {
        "synset_offset": pa.array([s.offset if s else None for s in synsets], pa.int64()),
        "lexname": pa.array([s.lexname if s else None for s in synsets], pa.string()),
        "hypernyms": pa.array([" ".join(s.hypernyms) if s else None for s in synsets], pa.string()),
    }
