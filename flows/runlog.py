"""A command's full log in the store, and a terminal without tracebacks.

A stage that fails makes Prefect log its exception twice with the whole traceback (the task
run, then the flow run): a full disk was 167 lines on the terminal with 8 tracebacks, the one
line that said what to do at the end. `start(store)` writes every record, tracebacks and all,
to `STORE/logs/<time>-<pid>.log`, and gives the terminal each record's message line alone;
`pointer()` is what the CLI adds to its `error:` line, so the traceback is one path away.

Call it after Prefect is imported (its logging is configured at import, which would drop a
handler added before it) and before the flow starts.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

FORMAT = "%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"

_file: logging.FileHandler | None = None
path: Path | None = None


class _MessageOnly(logging.Formatter):
    """A console formatter's lines without the traceback a record carries."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        kept = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = kept


class _QuietFile(logging.FileHandler):
    """A log file that stops writing, without a word, when it cannot (a full disk: the error
    the run reports says so already; logging's own report would be a traceback)."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        logging.getLogger().removeHandler(self)


def start(store: Path) -> Path:
    """Log every record of this process to a new file under `store/logs` (the one a previous
    call opened is closed), and strip tracebacks from the terminal's handlers. Returns it."""
    global _file, path
    root = logging.getLogger()
    if _file is not None:
        root.removeHandler(_file)
        _file.close()
    folder = store / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    _file = _QuietFile(path, encoding="utf-8", delay=True)
    _file.setFormatter(logging.Formatter(FORMAT))
    _file.setLevel(logging.INFO)
    root.addHandler(_file)
    for h in root.handlers:
        if h is not _file and isinstance(h, logging.StreamHandler) and not isinstance(h.formatter, _MessageOnly):
            h.setFormatter(_MessageOnly(h.formatter or logging.Formatter()))
    return path


def pointer() -> str:
    """ "; full log: PATH" once `start` has opened one that holds something, else ""."""
    if path is None or not path.is_file():
        return ""
    return f"; full log: {path}"
