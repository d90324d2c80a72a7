"""Sources -> shards: local files, folders or globs, fsspec URIs (`s3://`, `memory://`, ...),
or a Hugging Face dataset `hf://datasets/<org>/<name>[@<revision>]` fetched with
`huggingface_hub.snapshot_download` (revision pinned, `allow_patterns` for a subset). Each
shard gets a stable id and a content digest. Which files the sources name, and the
SourceError when they name none, is `platonic.core.data.shard_paths` (no pyarrow:
`platonic ingest` checks the sources before anything heavy is imported)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pyarrow as pa

from ..shard_paths import EXTENSIONS, _fs, find_shards
from .base import Shard


def open_binary(uri: str):
    """A binary file object for a local path or an fsspec URI."""
    if "://" not in uri:
        return open(uri, "rb")
    fs, path = _fs(uri)
    return fs.open(path, "rb")


def open_native(uri: str) -> pa.NativeFile:
    """`open_binary` for Arrow readers: a local path as Arrow's own file (reads release the
    GIL and land in Arrow's memory pool; through a Python file object every read takes the
    GIL from the thread normalising the previous batch), a URI through its fsspec file."""
    return pa.OSFile(uri) if "://" not in uri else pa.PythonFile(open_binary(uri), mode="r")


def _stem(name: str, fmt: str) -> str:
    base = name.rsplit("/", 1)[-1]
    for ext in sorted(EXTENSIONS[fmt], key=len, reverse=True):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
            break
    return re.sub(r"[^A-Za-z0-9._-]", "_", base) or "shard"


def _digest(uri: str) -> str:
    """Content digest of a shard: sha256 of its bytes. A Hugging Face cache blob is named by
    its sha256 already, so hub shards are not re-read."""
    if "://" not in uri:
        real = Path(uri).resolve()
        if real.parent.name == "blobs" and re.fullmatch(r"[0-9a-f]{64}", real.name):
            return real.name
    h = hashlib.sha256()
    with open_binary(uri) as f:
        while b := f.read(1 << 22):
            h.update(b)
    return h.hexdigest()


def resolve_sources(
    paths: list[str], fmt: str, revision: str | None = None, allow_patterns: list[str] | None = None
) -> list[Shard]:
    """Every shard the sources name, in a stable order, with ids and content digests.

    A folder contributes its files with the format's extensions (recursively), a glob its
    matches; a path that exists is taken literally, even with glob characters in its name.
    `allow_patterns` (fnmatch on the path inside a folder or hub repo) keeps a subset."""
    uris = find_shards(paths, fmt, revision, allow_patterns)
    shards, taken = [], set()
    for u in uris:
        sid = _stem(u, fmt)
        if sid in taken:  # same file name in two folders
            sid = f"{sid}-{hashlib.sha1(u.encode()).hexdigest()[:8]}"
        taken.add(sid)
        shards.append(Shard(sid, u, _digest(u)))
    return shards
