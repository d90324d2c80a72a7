"""`ingest.source` -> its reader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Reader, SourceError
from .coco import CocoReader
from .jsonl import JsonlReader
from .recap import RecapReader
from .wds import WdsReader
from .wordnet import WordNetReader

if TYPE_CHECKING:
    from ...config import IngestConfig

READERS: dict[str, type[Reader]] = {
    "recap": RecapReader,
    "wds": WdsReader,
    "coco": CocoReader,
    "jsonl": JsonlReader,
    "wordnet": WordNetReader,
}


def reader_for(cfg: IngestConfig) -> Reader:
    if cfg.source not in READERS:
        raise SourceError(f"ingest.source {cfg.source!r} has no corpus reader (readers: {', '.join(READERS)})")
    return READERS[cfg.source](cfg)
