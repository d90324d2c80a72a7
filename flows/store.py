"""Which store (out_dir) a command uses, checked before anything is written there.

A recipe's `out_dir` is relative to the current directory (`.platonic` by default), so the
same command from another folder found another, empty store: `--only` failed, and a plain
run silently rebuilt everything. Where the store is, highest first:

    an explicit out_dir (`--out-dir`, `run(..., out_dir=)`, `--set out_dir=`)
    $PLATONIC_OUT_DIR (the environment wins over the recipe, as for the service endpoints)
    the recipe's `out_dir`

Every command says which store it uses (`say`), on stderr, before its work starts. A store
is refused, with one line naming it, where writing would put files where the user did not
mean: an empty name, a file, the filesystem's root, the home folder itself, a system
folder, or an existing folder that holds other files and no store (`--out-dir .` in a
checkout, `--out-dir ~`, a mistyped path to someone's folder).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from platonic.core.config import ConfigError

ENV = "PLATONIC_OUT_DIR"
DEFAULT = ".platonic"

# what a store holds (any one of them): the artifact store, the embedded MLflow store, the
# flows' outputs, training checkpoints, the project's Prefect server, `platonic stand-ins`,
# the commands' full logs (flows/runlog.py)
STORE_ENTRIES = (
    "artifacts",
    "mlflow.db",
    "mlflow.db.lock",
    "mlartifacts",
    "runs",
    "checkpoints",
    "prefect",
    "stand-ins",
    "logs",
)

# folders of the system: nothing of a run's belongs at or under them
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys", "/usr")
# shared folders: a store may live under them, never be one of them
SHARED_FOLDERS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var", "/var/tmp")


def out_dir_sets(sets: Sequence[str], out_dir: str | os.PathLike | None = None) -> list[str]:
    """`sets` with the store's `out_dir=` override where one applies: `out_dir` (the
    command's own option) wins over a `--set out_dir=` in `sets`, which wins over
    $PLATONIC_OUT_DIR; with none of them, `sets` unchanged (the recipe's out_dir)."""
    sets = list(sets)
    if out_dir is not None:
        return [*sets, f"out_dir={os.fspath(out_dir)}"]
    if any(s.split("=", 1)[0].strip() == "out_dir" for s in sets):
        return sets
    if ENV in os.environ:
        return [*sets, f"out_dir={os.environ[ENV]}"]
    return sets


def chosen(out_dir: str | os.PathLike | None) -> str:
    """A store option of a command that reads no recipe (`--out-dir` of table, lineage,
    server, ...): the option, else $PLATONIC_OUT_DIR, else `.platonic`."""
    if out_dir is not None:
        return os.fspath(out_dir)
    return os.environ.get(ENV, DEFAULT)


def check(out_dir: str | os.PathLike) -> Path:
    """The store's folder, absolute (`~` expanded), or ConfigError naming it where a command
    would write where the user did not mean (the module's docstring)."""
    raw = os.fspath(out_dir)
    if not raw.strip():
        raise ConfigError(f"out_dir {raw!r} is empty: name a folder for the store (default {DEFAULT})")
    path = Path(os.path.abspath(Path(raw).expanduser()))
    real = path.resolve()
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise ConfigError(f"out_dir {raw}: {p} is a file, not a folder")
    home = Path.home().resolve()
    if real == home:
        raise ConfigError(f"out_dir {raw}: {real} is the home folder, not a store; name a folder inside it")
    if str(real) in SHARED_FOLDERS:
        raise ConfigError(f"out_dir {raw}: {real} is a shared folder, not a store; name a folder inside it")
    if any(real == Path(t) or real.is_relative_to(t) for t in SYSTEM_TREES):
        raise ConfigError(f"out_dir {raw}: {real} is a system folder; name a folder of your own")
    if real.is_dir() and not is_store(real):
        try:
            other = next(real.iterdir(), None)
        except OSError as e:
            raise ConfigError(f"out_dir {raw}: cannot read {real}: {e.strerror}") from e
        if other is not None:
            raise ConfigError(
                f"out_dir {raw}: {real} holds other files (e.g. {other.name}) and no store; "
                "name a new or empty folder, or an existing store"
            )
    return path


def check_for_writing(out_dir: str | Path, rerun: str) -> Path:
    """`check`, then `require_writable` where the store exists: for every command that records
    itself in the store (run, demo, ablate, compare, match, caption, ingest, audit). `rerun`:
    the user's command on a copy named COPY, for the line."""
    where = check(out_dir)
    if where.is_dir():  # a read-only store: one line now, not Prefect's traceback at the first write
        require_writable(where, rerun)
    return where


def require_writable(path: Path, rerun: str) -> None:
    """ConfigError, one line, where a run could not write the existing store `path`: a run
    records itself there (its MLflow runs, runs/<id>/, the stages' locks) even when every
    stage is a cache hit, so on a read-only store (a shared results folder) it failed on the
    first of those writes, after Prefect had started, with a traceback. Said before anything
    starts, with what does work: the read-only commands, or a run on a writable copy.
    `rerun`: the user's command on a copy named COPY, for the line."""
    from platonic.core.durable import unwritable

    own_mlflow = not os.environ.get("MLFLOW_TRACKING_URI")
    paths = [path, path / "runs", path / "artifacts" / ".locks"]
    paths += [path / "mlflow.db", path / "mlflow.db.lock"] if own_mlflow else []
    denied = next((why for p in paths if (why := unwritable(p))), None)
    if denied is None:
        return
    raise ConfigError(
        f"out_dir {path}: the store is read-only here ({denied}); a run records itself in its store "
        "(MLflow runs, runs/<id>/, stage locks) even when every stage is cached. Read it as it is "
        f"(platonic lineage RUN_ID --out-dir {path}; results in {path / 'runs'}/<id>/results.json), "
        f"or run on a writable copy: cp -a {path} COPY && {rerun}"
    )


def is_store(folder: Path) -> bool:
    """Whether `folder` holds a store (anything a run writes at its top)."""
    return any((folder / e).exists() for e in STORE_ENTRIES)


def to_read(out_dir: str | os.PathLike) -> Path:
    """A store that a command only reads (table, forecast, lineage, export): `check`ed, and,
    where MLflow is the store's own (no MLFLOW_TRACKING_URI), it must be there: a mistyped
    --out-dir is one line, not a new empty MLflow store."""
    path = check(out_dir)
    if not os.environ.get("MLFLOW_TRACKING_URI") and not is_store(path):
        raise ConfigError(f"out_dir {os.fspath(out_dir)}: no store at {path} (a run writes one; or pass --out-dir)")
    return path


def for_reading(out_dir: str | os.PathLike | None) -> str:
    """The store of a command that only reads one (table, forecast, lineage, export): the
    option or its defaults (`chosen`), refused where there is no store (`to_read`), named on
    stderr (`say`)."""
    path = to_read(chosen(out_dir))
    say(path)
    return str(path)


def say(path: Path, stream=None) -> None:
    """One line on stderr naming the store, and `(new)` when nothing was written there yet:
    the line a user reads before a run rebuilds everything in the wrong folder."""
    new = "" if path.is_dir() and is_store(path) else " (new: nothing cached there yet)"
    print(f"store: {path}{new}", file=stream or sys.stderr, flush=True)
