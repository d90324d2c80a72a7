"""A streaming JSON parser: the items of a document's top-level arrays, one at a time, in
bounded memory (caption JSON files run to hundreds of MB)."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import Any

from .base import MAX_RECORD_BYTES, ShardError
from .sources import open_binary

# the longest value held to decode (an item of an array, a skipped value); a longer one is a
# ShardError, never read whole
MAX_VALUE_BYTES = MAX_RECORD_BYTES


class JsonStream:
    """Items of top-level arrays of one JSON object, without loading the document: the
    object's keys are scanned in order; the array under a wanted key is decoded one item at
    a time (`json.JSONDecoder.raw_decode` on a sliding buffer); other values are skipped."""

    def __init__(self, fh, uri: str, chunk: int = 1 << 20, max_value: int = MAX_VALUE_BYTES):
        self.fh, self.uri, self.chunk, self.max_value = fh, uri, chunk, max_value
        self.dec = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.buf, self.pos, self.eof, self.fresh = "", 0, False, True
        self.json = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        b = self.fh.read(self.chunk)
        if not b:
            self.eof = True
            self.buf = self.buf[self.pos :] + self.dec.decode(b"", final=True)
            self.pos = 0
            return False
        self.buf = self.buf[self.pos :] + self.dec.decode(b)
        if self.fresh and self.buf.startswith("\ufeff"):  # a UTF-8 byte-order mark opens the file
            self.buf = self.buf[1:]
        self.fresh = False
        self.pos = 0
        return True

    def _skip_ws(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                raise ShardError(f"{self.uri}: truncated JSON (unexpected end of file)")

    def _expect(self, ch: str) -> None:
        got = self._skip_ws()
        if got != ch:
            raise ShardError(f"{self.uri}: invalid JSON: expected {ch!r} at character {self.pos}, got {got!r}")
        self.pos += 1

    def _value(self) -> Any:
        self._skip_ws()
        while True:
            try:
                v, end = self.json.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # a number might continue in the next chunk
                    self.pos = end
                    return v
            except json.JSONDecodeError as e:
                if self.eof:
                    raise ShardError(f"{self.uri}: truncated or invalid JSON ({e.msg})") from None
                if len(self.buf) - self.pos > self.max_value:  # characters: at least as many bytes
                    raise ShardError(
                        f"{self.uri}: a JSON value at character {self.pos} runs past {self.max_value:,} "
                        "characters (ingest.max_record_bytes); not read further"
                    ) from None
            if not self._fill():
                continue

    def _items(self) -> Iterator[Any]:
        """The items of the array starting here, one at a time."""
        self._expect("[")
        if self._skip_ws() == "]":
            self.pos += 1
            return
        while True:
            yield self._value()
            c = self._skip_ws()
            self.pos += 1
            if c == "]":
                return
            if c != ",":
                raise ShardError(f"{self.uri}: invalid JSON: expected ',' or ']', got {c!r}")

    def _skip(self) -> None:
        """Skip the value starting here; an array is walked item by item, never held whole."""
        if self._skip_ws() == "[":
            for _ in self._items():
                pass
        else:
            self._value()

    def arrays(self, wanted: set[str]) -> Iterator[tuple[str, Any]]:
        """(key, item) for every item of the arrays under the wanted top-level keys, in
        file order; other values are skipped. `self.keys` lists the top-level keys seen."""
        self.keys: list[str] = []
        self._expect("{")
        if self._skip_ws() == "}":
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise ShardError(f"{self.uri}: invalid JSON: object key expected")
            self.keys.append(key)
            self._expect(":")
            if key in wanted and self._skip_ws() == "[":
                for item in self._items():
                    yield key, item
            else:
                self._skip()
            c = self._skip_ws()
            self.pos += 1
            if c == "}":
                return
            if c != ",":
                raise ShardError(f"{self.uri}: invalid JSON: expected ',' or '}}', got {c!r}")


def json_items(uri: str, wanted: set[str], max_value: int = MAX_VALUE_BYTES) -> Iterator[tuple[str, Any]]:
    with open_binary(uri) as fh:
        yield from JsonStream(fh, uri, max_value=max_value).arrays(wanted)


def top_level_keys(uri: str, max_value: int = MAX_VALUE_BYTES) -> set[str]:
    """The keys of a JSON document's top-level object (one streaming pass, nothing kept)."""
    with open_binary(uri) as fh:
        s = JsonStream(fh, uri, max_value=max_value)
        for _ in s.arrays(set()):
            pass
        return set(s.keys)
