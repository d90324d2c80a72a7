"""Durable writes: a file that appears whole or not at all, and a full disk said in one line.

`write_atomic` writes to a temporary file beside the target, fsyncs it and renames it into
place, so a crash or a full disk leaves the old file (or none), never a truncated one.
`disk_full` recognises an error that is really "no space left on device" (an OSError
ENOSPC anywhere in the chain, or SQLite's "database or disk is full" under MLflow) and turns
it into a `DiskFullError` whose message is one line naming the path. `scratch` names a
process's scratch folder so that the next process to use the same place sweeps what a killed
one left there."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
from pathlib import Path

from .processes import pid_alive

HOST = socket.gethostname().replace("-", "_")  # `-` separates the pid in a scratch name


class DiskFullError(OSError):
    """No space left on the device holding `filename`: one line, what to do included."""

    def __init__(self, path: str | Path):
        super().__init__(
            errno.ENOSPC,
            f"no space left on device (the disk is full) writing {path}; free space and rerun: "
            "nothing half-written was kept, the rerun redoes what did not finish",
            str(path),
        )

    def __str__(self) -> str:
        return self.strerror


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through `.<name>.tmp` in the same folder: fsync'd, then renamed
    over `path` (and the folder fsync'd, so the rename survives a crash). On any failure the
    temporary file is removed and `path` is untouched; ENOSPC raises DiskFullError(path)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC and not isinstance(e, DiskFullError):
            raise DiskFullError(path) from e
        raise


def _chain(exc: BaseException):
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def disk_full(exc: BaseException, where: str | Path | None = None, database: str | None = None) -> DiskFullError | None:
    """The DiskFullError `exc` amounts to, or None when it is not about a full disk. The path
    is the failing file's when the error names one, else `where` (the folder being written);
    SQLite's "database or disk is full" names `database` (the MLflow store's URI)."""
    for e in _chain(exc):
        if isinstance(e, DiskFullError):
            return e
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return DiskFullError(e.filename or where or "an unnamed file")
        text = str(e).lower()
        if "database or disk is full" in text:
            return DiskFullError(database or where or "a database")
        if "no space left on device" in text:
            return DiskFullError(where or database or "an unnamed file")
    return None


def unwritable(path: str | Path) -> str | None:
    """Why this process cannot write `path`, as `PATH: reason`, or None where it can (or
    where `path` does not exist). A folder: a file is created in it and removed; a file: it
    is opened for writing, not a byte written. The test is the write itself, not the mode
    bits: root ignores those, a read-only mount does not."""
    p = Path(path)
    try:
        if p.is_dir():
            fd, tmp = tempfile.mkstemp(dir=p, prefix=".write-test-")
            os.close(fd)
            os.unlink(tmp)
        elif p.is_file():
            os.close(os.open(p, os.O_WRONLY))
    except PermissionError as e:
        return f"{p}: {e.strerror}"
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES):
            return f"{p}: {e.strerror}"
        raise
    return None


def sweep_scratch(folder: Path) -> list[Path]:
    """Remove the scratch folders (`.<name>.tmp-<host>-<pid>`) in `folder` whose process on
    this host is gone (killed: kill -9, a crash, a second Ctrl-C); returns them. A live
    process's scratch stays, and so does another host's (on a shared folder)."""
    swept = []
    for stale in Path(folder).glob(f".*.tmp-{HOST}-*"):
        pid = stale.name.rsplit("-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
            swept.append(stale)
    return swept


def scratch(folder: Path, name: str) -> Path:
    """This process's scratch path for `name` in `folder` (`.<name>.tmp-<host>-<pid>`, not
    created), after sweeping the scratch that dead processes left in `folder`."""
    sweep_scratch(folder)
    return Path(folder) / f".{name}.tmp-{HOST}-{os.getpid()}"
