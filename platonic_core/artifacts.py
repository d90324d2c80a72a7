"""Content-addressed artifact store.

Each stage output is a folder `<root>/<stage>/<cache_key>/` holding its files and a
`manifest.json` (its presence means the artifact is complete). The manifest is written
atomically into the staging folder before that folder is renamed into place, so a folder
under its final name always holds a whole manifest; one that cannot be read (a disk that
filled under an older version) is a cache miss with a warning naming it, never a traceback. The manifest
records what a later stage, or a person asking "where did this number come from", needs:
URI, content digest, counts, schema, stage + version, cache key, the upstream cache keys
and digests, the config the stage read, and the MLflow run that produced it.

The digest covers the content files only (not the manifest, not timings), so a stage that
re-executes and writes the same bytes yields the same digest and leaves downstream cached.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .durable import DiskFullError, scratch, write_atomic

MANIFEST = "manifest.json"
# written first into a folder of the user's choosing that a stage works in (`in_place`): the
# folder is the tool's; holds the stage instance's name; not content (outside the digest)
OWNER_MARK = ".platonic-artifact"
# derived indexes (rebuilt from the content files, not byte-stable): outside the digest
DERIVED_SUFFIXES = {".duckdb", ".wal"}


class ManifestError(ValueError):
    """A manifest.json that cannot be read as one (empty, truncated, not this tool's fields):
    the message is one line naming the file."""


@dataclass
class Manifest:
    stage: str
    stage_version: int
    cache_key: str
    uri: str
    digest: str
    counts: dict[str, int]
    schema: dict[str, Any]
    config: dict[str, Any]
    upstream: dict[str, str]  # input stage -> its cache key
    upstream_digests: dict[str, str]
    upstream_runs: dict[str, str] = field(default_factory=dict)  # input stage -> producer run
    stats: dict[str, Any] = field(default_factory=dict)  # not content: timings, losses
    producer_run_id: str = ""
    created_at: float = 0.0
    files: dict[str, str] = field(default_factory=dict)  # content file -> sha256 (`digest` hashes these)
    # content file -> [bytes, mtime_ns] at commit: a hit whose files still match is not rehashed
    file_stats: dict[str, list[int]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.uri)

    @property
    def incomplete(self) -> bool:
        """Part of its input could not be read (a corpus shard that failed): it is kept for
        inspection, but no run takes it as a cache hit, so the next run retries that part."""
        return bool(self.counts.get("shards_failed"))

    def files_digest(self, names: tuple[str, ...]) -> str:
        """One digest of some of the artifact's files: what a stage that reads only those
        is keyed on. Manifests written before per-file digests were kept hash the files."""
        return combined_digest({n: self.files[n] if n in self.files else file_digest(self.path / n) for n in names})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True, default=str)

    @classmethod
    def external(
        cls, name: str, uri: str, digest: str, counts: dict[str, int], schema: dict[str, Any] | None = None
    ) -> Manifest:
        """A manifest for an input no stage produced (a corpus, eval sets): the cache key,
        MLflow inputs and lineage treat it like any upstream artifact."""
        return cls(
            stage=name,
            stage_version=0,
            cache_key=digest[:16],
            uri=uri,
            digest=digest,
            counts=counts,
            schema=schema or {},
            config={},
            upstream={},
            upstream_digests={},
        )

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        """The manifest of an artifact folder, located where it is now: the stored `uri` is
        relative to the store, so a copied or moved out_dir reads its own files."""
        path = Path(folder) / MANIFEST
        try:
            m = cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as e:  # ValueError: JSON and UTF-8 errors
            why = "empty" if path.is_file() and path.stat().st_size == 0 else f"{type(e).__name__}: {e}"
            raise ManifestError(f"{path} is unreadable ({why})") from e
        m.uri = str(Path(folder).resolve())
        return m


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def content_files(folder: Path) -> list[Path]:
    """The files the digest covers: all but the manifest, the owner mark and derived indexes, sorted."""
    return [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, OWNER_MARK) and p.suffix not in DERIVED_SUFFIXES
    ]


def file_digests(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every content file."""
    return {str(p.relative_to(folder)): file_digest(p) for p in content_files(folder)}


def file_stats(folder: Path, names: Iterable[str]) -> dict[str, list[int]]:
    """Relative path -> [bytes, mtime_ns]: what `verify` compares before it rehashes a file."""
    return {n: [(st := (folder / n).stat()).st_size, st.st_mtime_ns] for n in names}


def verify(manifest: Manifest, full: bool = False) -> str | None:
    """Why a committed artifact's files no longer are what its manifest recorded (None: they
    are). A file whose size and mtime are unchanged since the commit is trusted (the fast
    path of every cache hit), unless `full`: then every file is rehashed (`platonic verify`),
    which also catches bytes rewritten in place with the size kept and the mtime reset.
    Manifests from before per-file digests are checked by the whole digest."""
    folder = manifest.path
    if not manifest.files:
        return None if folder_digest(folder) == manifest.digest else "its content digest differs"
    present = {str(p.relative_to(folder)) for p in content_files(folder)}
    if missing := sorted(set(manifest.files) - present):
        return f"{missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
    if extra := sorted(present - set(manifest.files)):
        return f"{extra[0]} was added after it was committed"
    for name, digest in manifest.files.items():
        st = (folder / name).stat()
        if not full and manifest.file_stats.get(name) == [st.st_size, st.st_mtime_ns]:
            continue
        if file_digest(folder / name) != digest:
            return f"{name} changed after it was committed (sha256 differs)"
    return None


def combined_digest(files: dict[str, str]) -> str:
    """sha256 over (relative path, file sha256) of the files, sorted by path parts (as
    `Path`s sort: `a/b` before `a-c`, so digests match those computed before per-file ones)."""
    h = hashlib.sha256()
    for rel in sorted(files, key=lambda r: r.split("/")):
        h.update(rel.encode() + b"\0" + files[rel].encode() + b"\n")
    return h.hexdigest()


def folder_digest(folder: Path) -> str:
    """sha256 over (relative path, file sha256) of every content file, sorted."""
    return combined_digest(file_digests(folder))


def describe_schema(folder: Path) -> dict[str, Any]:
    """Per content file: Parquet columns and types, .npy shapes and dtypes, else its size."""
    import numpy as np  # here, not at the top: the stages' specs import this module (`platonic run`'s checks)
    import pyarrow.parquet as pq

    out: dict[str, Any] = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name in (MANIFEST, OWNER_MARK):
            continue
        rel = str(p.relative_to(folder))
        if p.suffix == ".parquet":
            s = pq.read_schema(p)
            out[rel] = {"columns": {f.name: str(f.type) for f in s}}
        elif p.suffix == ".npy":
            a = np.load(p, mmap_mode="r")
            out[rel] = {"shape": list(a.shape), "dtype": str(a.dtype)}
        else:
            out[rel] = {"bytes": p.stat().st_size}
    return out


def committed(root: Path) -> tuple[list[Path], list[Path]]:
    """The committed artifact folders under a store's root (those holding a manifest), and
    the symbolic links to folders found there, which are not followed: what a link points
    to is not the store's, so it is neither verified nor taken as a cache hit. Dot folders
    below the root (staging, scratch) are not artifacts yet; only names below the root are
    tested, since the store itself may sit in a dot folder (the default `.platonic`)."""
    folders: list[Path] = []
    links: list[Path] = []
    for here, dirs, files in os.walk(root):
        if MANIFEST in files and Path(here) != Path(root):
            folders.append(Path(here))
        for d in list(dirs):
            if (Path(here) / d).is_symlink():
                links.append(Path(here) / d)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (Path(here) / d).is_symlink())
    return sorted(folders), sorted(links)


def link_problem(link: Path) -> str:
    """One line on an artifact folder that is a symbolic link, naming it and its target."""
    return f"{link}: a symbolic link to {os.readlink(link)}, not a folder of the store"


class ForeignFolderError(ValueError):
    """A folder the tool was told to write in holds files it did not write: refused, and
    nothing there is touched. The message is one line naming the folder and what is there."""


def listing(paths: list[Path], root: Path, limit: int = 6) -> str:
    """`a, b/, c ... (+N more)`: some entries under `root`, folders with a slash."""
    names = [str(p.relative_to(root)) + ("/" if p.is_dir() else "") for p in sorted(paths)]
    return ", ".join(names[:limit]) + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _owned_manifest(folder: Path) -> Manifest | None:
    """The folder's manifest if it is one this tool wrote (a user's manifest.json is not)."""
    try:
        return Manifest.read(folder)
    except ManifestError:
        return None


def _warn(msg: str) -> None:
    logging.getLogger("platonic").warning("%s", msg)


def _read_or_miss(folder: Path, warn: Callable[[str], None] | None) -> Manifest | None:
    """A committed folder's manifest; an unreadable one is a cache miss, said in one line."""
    try:
        return Manifest.read(folder)
    except ManifestError as e:
        (warn or _warn)(f"{e}: treated as a cache miss, the stage re-executes")
        return None


class ArtifactStore:
    """Folders keyed by (stage, cache key) under `root`."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    @classmethod
    def of(cls, out_dir: str | Path) -> ArtifactStore:
        """The store of a recipe's out_dir (`<out_dir>/artifacts`)."""
        return cls(Path(out_dir) / "artifacts")

    def folder(self, stage: str, cache_key: str) -> Path:
        return self.root / stage.replace(":", "/") / cache_key

    def lookup(self, stage: str, cache_key: str, warn: Callable[[str], None] | None = None) -> Manifest | None:
        """The committed artifact of (stage, key), or None. `warn(line)` hears of a manifest
        that cannot be read (default: the `platonic` logger); that artifact is a miss."""
        folder = self.folder(stage, cache_key)
        if folder.is_symlink():
            # files outside the store are not a cache hit; the commit replaces the link
            (warn or _warn)(f"{link_problem(folder)}: treated as a cache miss, the stage re-executes and replaces it")
            return None
        if not (folder / MANIFEST).is_file():
            return None
        return _read_or_miss(folder, warn)

    def staging(self, stage: str, cache_key: str) -> Path:
        """A fresh scratch folder; `commit` moves it into place atomically. Named after this
        host and process, so the scratch of a producer that died (kill -9) is recognised and
        swept here, while another live run's (or another host's, on a shared out_dir) stays."""
        tmp = scratch(self.folder(stage, cache_key).parent, cache_key)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    @staticmethod
    def lookup_at(folder: Path, cache_key: str, warn: Callable[[str], None] | None = None) -> Manifest | None:
        """The artifact in a folder of the user's choosing, if complete and of this key."""
        if not (Path(folder) / MANIFEST).is_file():
            return None
        m = _read_or_miss(Path(folder), warn)
        return m if m is not None and m.cache_key == cache_key else None

    @staticmethod
    def in_place(folder: Path, stage: str) -> Path:
        """Make `folder` the working folder of `stage` (an instance id), which resumes where
        it stopped (its earlier files stay) and may replace what it wrote there before: the
        manifest goes first, so the folder reads as incomplete.

        The folder must be new, empty, or this stage's: marked by `OWNER_MARK`, or holding
        its manifest (artifacts written before the mark). Where a manifest lists the files
        the stage wrote, any other file is the user's. Otherwise ForeignFolderError, and
        nothing in the folder is touched."""
        folder = Path(folder).resolve()
        if folder.exists() and not folder.is_dir():
            raise ForeignFolderError(f"{folder}: is a file, not a folder")
        entries = list(folder.iterdir()) if folder.is_dir() else []
        if entries:
            mark = folder / OWNER_MARK
            m = _owned_manifest(folder) if (folder / MANIFEST).is_file() else None
            marked = mark.is_file() and mark.read_text().strip() == stage
            if not marked and (m is None or m.stage != stage):
                raise ForeignFolderError(
                    f"{folder}: not empty and not written by {stage} (holds {listing(entries, folder)}); "
                    "give a new or empty folder"
                )
            if m is not None and m.files:
                stray = [p for p in content_files(folder) if str(p.relative_to(folder)) not in m.files]
                if stray:
                    raise ForeignFolderError(
                        f"{folder}: holds files {stage} did not write ({listing(stray, folder)}); "
                        "move them out or give another folder"
                    )
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OWNER_MARK).write_text(stage + "\n")
        (folder / MANIFEST).unlink(missing_ok=True)
        return folder

    def commit(self, tmp: Path, manifest: Manifest, dest: Path | None = None) -> Manifest:
        """Write the manifest into the staging folder (atomically: temporary file, fsync,
        rename), then move the folder into place; `in_place` work stays where it is and gets
        its manifest the same way, last. Either way no folder under its final name ever holds
        a partial manifest. A full disk raises DiskFullError naming the artifact folder, and
        the staging folder (scratch) is removed to give the space back."""
        final = Path(dest).resolve() if dest is not None else self.folder(manifest.stage, manifest.cache_key)
        staged = final != Path(tmp).resolve()
        try:
            manifest.files = file_digests(tmp)
            manifest.digest = combined_digest(manifest.files)
            manifest.schema = describe_schema(tmp)
            manifest.created_at = time.time()
            manifest.file_stats = file_stats(tmp, manifest.files)  # the rename below keeps mtimes
            # on disk the location is relative to the store (a copied out_dir reads its own files)
            manifest.uri = str(final.relative_to(self.root)) if final.is_relative_to(self.root) else str(final)
            write_atomic(Path(tmp) / MANIFEST, manifest.to_json())
        except OSError as e:
            if staged:
                shutil.rmtree(tmp, ignore_errors=True)
            if e.errno == errno.ENOSPC:
                raise DiskFullError(final) from e
            raise
        if staged:
            if final.is_symlink():  # only the link goes: what it points to is not the store's
                final.unlink()
            elif final.exists():  # a forced re-run (or a miss on an unreadable manifest) replaces it
                shutil.rmtree(final)
            tmp.rename(final)
        manifest.uri = str(final)
        return manifest
