"""A stop request (Ctrl-C) that long loops honour at a safe point.

The app's SIGINT handler calls `request_stop()`. Code that can stop cleanly, such as the
training loop between two optimiser steps, runs under `polled()` and checks
`stop_requested()` at each safe point. There it saves what a rerun resumes from, then
raises `Interrupted`. While nothing polls, the handler raises KeyboardInterrupt at once,
as Python's default handler would: a stage with no safe point stops where it is, and its
scratch is swept by the next run. The library never installs a signal handler itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_requested = threading.Event()
_pollers = 0  # how many `polled()` blocks are open


class Interrupted(KeyboardInterrupt):
    """Stopped on request at a safe point; the message says what was kept."""


def request_stop() -> None:
    _requested.set()


def stop_requested() -> bool:
    return _requested.is_set()


def clear() -> None:
    """Forget a request (a new command starts)."""
    _requested.clear()


def polling() -> bool:
    """Whether running code checks `stop_requested()` at safe points now."""
    return _pollers > 0


@contextmanager
def polled() -> Iterator[None]:
    """The caller checks `stop_requested()` at safe points while inside this block."""
    global _pollers
    _pollers += 1
    try:
        yield
    finally:
        _pollers -= 1


def check(what: str) -> None:
    """Raise Interrupted before `what` starts if a stop was requested."""
    if _requested.is_set():
        raise Interrupted(f"stopped before {what}")
