"""Sources -> shards: local files, folders or globs, fsspec URIs (`s3://`, `memory://`, ...),
or a Hugging Face dataset `hf://datasets/<org>/<name>[@<revision>]` fetched with
`huggingface_hub.snapshot_download` (revision pinned, `allow_patterns` for a subset). Each
shard gets a stable id and a content digest."""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import re
from pathlib import Path

import pyarrow as pa

from .base import Shard, SourceError

EXTENSIONS = {
    "recap": (".parquet",),
    "wds": (".tar", ".tar.gz", ".tgz"),
    "coco": (".json",),
    "jsonl": (".jsonl", ".ndjson", ".json", ".csv", ".tsv"),
    "wordnet": ("data.noun",),  # a WordNet dict folder holds index.* and data.* files: the nouns are read
}
HUB_PATTERNS = {
    "recap": ["data/train_data/*.parquet"],
    "wds": ["*.tar"],
    "coco": ["*.json"],
    "jsonl": ["*.jsonl"],
    "wordnet": ["data.noun"],
}


def _fs(uri: str):
    import fsspec

    return fsspec.core.url_to_fs(uri)


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


def _hub_snapshot(spec: str, revision: str | None, patterns: list[str]) -> Path:
    """`hf://datasets/<org>/<name>[@rev]` -> a local snapshot with the files matching
    `patterns` (downloaded once into the Hugging Face cache, then read from there)."""
    from huggingface_hub import snapshot_download

    rest = spec.removeprefix("hf://").removeprefix("datasets/")
    repo, _, rev = rest.partition("@")
    if repo.count("/") != 1:
        raise SourceError(f"{spec}: expected hf://datasets/<org>/<name>[@<revision>]")
    try:
        return Path(snapshot_download(repo, repo_type="dataset", revision=rev or revision, allow_patterns=patterns))
    except Exception as e:  # offline, not found, gated: one line that names the repo
        raise SourceError(
            f"{spec}: cannot fetch from the Hugging Face hub "
            f"(revision {rev or revision or 'main'}, allow_patterns {patterns}): "
            f"{type(e).__name__}: {e}"
        ) from None


def _is_glob(path: str) -> bool:
    """A source that names no existing file or folder is a pattern if it has glob characters
    (an existing `shots[1].tar` is that file, not `shots1.tar`)."""
    return any(c in path for c in "*?[")


def resolve_sources(
    paths: list[str], fmt: str, revision: str | None = None, allow_patterns: list[str] | None = None
) -> list[Shard]:
    """Every shard the sources name, in a stable order, with ids and content digests.

    A folder contributes its files with the format's extensions (recursively), a glob its
    matches; a path that exists is taken literally, even with glob characters in its name.
    `allow_patterns` (fnmatch on the path inside a folder or hub repo) keeps a subset."""
    uris = _find(paths, fmt, revision, allow_patterns)
    shards, taken = [], set()
    for u in uris:
        sid = _stem(u, fmt)
        if sid in taken:  # same file name in two folders
            sid = f"{sid}-{hashlib.sha1(u.encode()).hexdigest()[:8]}"
        taken.add(sid)
        shards.append(Shard(sid, u, _digest(u)))
    return shards


def check_sources(paths: list[str], fmt: str, allow_patterns: list[str] | None = None) -> None:
    """What `resolve_sources` refuses without the network and without reading a shard, with
    its messages: an unknown format, no sources, a local path that names nothing or no shard
    of the format. Hub and URI sources are left to `resolve_sources`. `platonic ingest` calls
    it before it starts Prefect and MLflow: a mistyped path answers at once."""
    _find(paths, fmt, None, allow_patterns, remote=False)


def _find(
    paths: list[str], fmt: str, revision: str | None, allow_patterns: list[str] | None, remote: bool = True
) -> list[str]:
    """The shards' URIs (`resolve_sources`); `remote=False`: the local sources' alone."""
    if fmt not in EXTENSIONS:
        raise SourceError(f"unknown format {fmt!r} (formats: {', '.join(EXTENSIONS)})")
    if not paths:
        raise SourceError("no sources given")
    exts = EXTENSIONS[fmt]

    def want(rel: str) -> bool:
        return rel.lower().endswith(exts) and (
            not allow_patterns or any(fnmatch.fnmatch(rel, p) for p in allow_patterns)
        )

    uris: list[str] = []
    for src in paths:
        if not remote and "://" in src:
            continue
        if src.startswith("hf://"):
            root = _hub_snapshot(src, revision, allow_patterns or HUB_PATTERNS[fmt])
            found = sorted(str(p) for p in root.rglob("*") if p.is_file() and want(str(p.relative_to(root))))
        elif "://" in src:  # as below: what exists is taken literally, only the rest is a glob
            fs, path = _fs(src)
            if fs.isdir(path):
                found = sorted(p for p in fs.find(path) if want(p[len(path.rstrip("/")) + 1 :]))
            elif fs.exists(path):
                found = [path]
            elif _is_glob(path):
                found = sorted(fs.glob(path))
            else:
                raise SourceError(f"{src}: no such file")
            found = [fs.unstrip_protocol(p) for p in found]
        else:
            p = Path(src)
            if p.is_dir():
                found = sorted(str(f) for f in p.rglob("*") if f.is_file() and want(str(f.relative_to(p))))
            elif p.is_file():
                found = [str(p)]
            elif _is_glob(src):
                found = sorted(glob.glob(src, recursive=True))
            else:
                raise SourceError(f"{src}: no such file or folder")
        if not found:
            raise SourceError(
                f"{src}: no {fmt} shards ({'/'.join(exts)} files"
                f"{' matching ' + str(allow_patterns) if allow_patterns else ''})"
            )
        uris.extend(u for u in found if u not in uris)
    return uris
