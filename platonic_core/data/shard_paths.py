"""Which files a corpus's sources name, and the error when they name none: local files,
folders or globs, fsspec URIs, Hugging Face datasets (`readers/sources.py` turns them into
shards with ids and digests). Imports no pyarrow, nor the readers: `platonic ingest` calls
`check_sources` before anything heavy is imported, so a mistyped path answers at once."""

from __future__ import annotations

import fnmatch
import glob
from pathlib import Path


class SourceError(ValueError):
    """A source that cannot be read at all (no such file, no shards, bad URI). One line."""


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


def check_sources(paths: list[str], fmt: str, allow_patterns: list[str] | None = None) -> None:
    """What `resolve_sources` (readers/sources.py) refuses without the network and without
    reading a shard, with its messages: an unknown format, no sources, a local path that names
    nothing or no shard of the format. Hub and URI sources are left to `resolve_sources`.
    `platonic ingest` calls it before it starts Prefect and MLflow."""
    find_shards(paths, fmt, None, allow_patterns, remote=False)


def find_shards(
    paths: list[str], fmt: str, revision: str | None, allow_patterns: list[str] | None, remote: bool = True
) -> list[str]:
    """The shards' URIs, in a stable order (`resolve_sources`); `remote=False`: the local
    sources' alone, hub and URI sources left out."""
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
