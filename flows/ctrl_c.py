"""Ctrl-C and SIGTERM for a command: the first stops the run, the second exits at once.

The first SIGINT or SIGTERM asks the run to stop (`platonic.core.interrupt`): training stops
between two steps and saves its resumable state; a stage with no safe point gets
KeyboardInterrupt where it is, as without this handler. The runs are then closed KILLED, and
the command exits 128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, what a shell
and a scheduler read as "stopped by that signal" (`commands.common._reported_errors`). A
second signal of either kind exits at once, with the same code: what the next run needs it
finds anyway (committed stages are cached, the saved training state is resumed, a run left
RUNNING is marked KILLED by the next run in its store).

SIGTERM is what a scheduler, a container stop or a Prefect worker's cancel sends. Prefect's
flow engine installs its own SIGTERM handler for each flow run; `over_prefect` puts this one
back inside the flow bodies of a command that handles signals.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from platonic.core import interrupt

from . import services

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WORD = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
_AGAIN = {signal.SIGINT: "Ctrl-C again", signal.SIGTERM: "SIGTERM or Ctrl-C again"}

_first: int | None = None  # the signal that asked this command to stop
_handling = False  # a command's `handled()` block is open


def _say(line: str) -> None:
    """Straight to stderr: not through `print`, which a Prefect run with log_prints logs."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def stopped_by() -> int:
    """The signal that stopped the command: SIGINT unless a SIGTERM came first (a bare
    KeyboardInterrupt, raised where no handler of ours was installed, is a Ctrl-C)."""
    return _first if _first is not None else signal.SIGINT


def exit_code() -> int:
    """128 + the stopping signal's number, the shell's convention: 130 or 143."""
    return 128 + stopped_by()


def word() -> str:
    """How the error line names the stop: "interrupted" (Ctrl-C) or "terminated" (SIGTERM)."""
    return _WORD[stopped_by()]


def on_signal(signum: int, frame: FrameType | None) -> None:
    global _first
    if interrupt.stop_requested():
        _say(f"error: {word()} twice: exiting now")
        services.exit_now(exit_code())
    _first = signum
    interrupt.request_stop()
    name = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    _say(f"{name}: stopping the run ({_AGAIN[signum]} to exit at once)")
    if not interrupt.polling():  # nothing checks the request: stop where it is
        raise KeyboardInterrupt


@contextmanager
def handled() -> Iterator[None]:
    """`on_signal` handles Ctrl-C and SIGTERM inside this block (in the main thread;
    elsewhere, where no handler can be installed, nothing changes)."""
    global _first, _handling
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupt.clear()
    _first = None
    previous = {s: signal.signal(s, on_signal) for s in SIGNALS}
    _handling = True
    try:
        yield
    finally:
        _handling = False
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def over_prefect() -> Iterator[None]:
    """Inside a flow body: where a command handles signals (`handled`), SIGTERM is handled
    by `on_signal` again. Prefect's flow engine swaps in its own SIGTERM handler for each
    flow run, which raises TerminationSignal where the code is, marks the flow crashed and
    kills the process again: exit 143 with no line, MLflow runs FAILED, no state saved.
    Where no command handles signals (a deployment run under a Prefect worker), Prefect's
    handler stays: its cancel is Prefect's to report."""
    if not _handling or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
