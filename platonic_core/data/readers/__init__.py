"""Readers for real corpora: each turns one shard (a file) into a stream of Arrow batches.

A reader knows one source format; the normaliser (`corpus.py`) knows the rules. Every batch
holds, per input row: `image_id`, `source_row` (the row's ordinal in the shard), the text
columns named by the reader's `fields`, per-row index columns where a text's index comes from
the data (caption ids), `__mismatch__<col>` flags where a value had the wrong type, and
provenance columns (everything else). Texts may be `binary` (undecoded bytes): the
normaliser checks UTF-8 itself, so an invalid byte quarantines a text, never a shard.

    recap  Recap-DataComp-1B parquet: org_caption -> alt, re_caption (+ the diverse top-k
           recaption when present) -> recap; key = image id; url, sha256, scores provenance
    wds    webdataset tars: per sample key, .txt and/or .json fields; image members are
           recorded as (tar, member, offset, size), never decoded; a member no text column
           needs is never read, a text member at most 4 bytes per allowed character
    coco   Karpathy dataset_{coco,flickr30k}.json, or COCO captions_*.json: several
           captions per image, read with a streaming JSON parser (bounded memory)
    jsonl  JSON lines or CSV/TSV with a configurable column mapping

Sources are local files, folders or globs, fsspec URIs (`s3://`, `memory://`, ...), or a
Hugging Face dataset `hf://datasets/<org>/<name>[@<revision>]` fetched with
`huggingface_hub.snapshot_download` (revision pinned, `allow_patterns` for a subset).

Modules: `base` (shard/batch types, errors, the `Reader` base), `sources` (sources ->
shards; which files they name, and SourceError, are `platonic.core.data.shard_paths`),
`recap`, `wds`, `coco`, `jsonl` (one format each), `jsonstream` (the streaming JSON parser),
`registry` (`ingest.source` -> reader).
"""

from .base import (
    MISMATCH,
    OVER_LONG,
    REASON,
    REASON_FIELD,
    Batch,
    Reader,
    Shard,
    ShardError,
    SourceError,
    TextField,
)
from .coco import CocoReader, karpathy_image_id
from .jsonl import JsonlReader
from .jsonstream import JsonStream, json_items
from .recap import RecapReader
from .registry import READERS, reader_for
from .sources import open_binary, resolve_sources
from .wds import IMAGE_SCHEMA, WdsReader, read_image_member

__all__ = [
    "Batch",
    "CocoReader",
    "IMAGE_SCHEMA",
    "JsonStream",
    "JsonlReader",
    "MISMATCH",
    "OVER_LONG",
    "READERS",
    "REASON",
    "REASON_FIELD",
    "RecapReader",
    "Reader",
    "Shard",
    "ShardError",
    "SourceError",
    "TextField",
    "WdsReader",
    "json_items",
    "karpathy_image_id",
    "open_binary",
    "reader_for",
    "read_image_member",
    "resolve_sources",
]
