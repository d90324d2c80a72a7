"""Ctrl-C for a command: the first stops the run, the second exits at once.

The first SIGINT asks the run to stop (`platonic.core.interrupt`): training stops between
two steps and saves its resumable state; a stage with no safe point gets KeyboardInterrupt
where it is, as without this handler. The runs are then closed KILLED, and the command
exits 130 (`commands.common._reported_errors`). A second SIGINT exits at once, also 130:
what the next run needs it finds anyway (committed stages are cached, the saved training
state is resumed, a run left RUNNING is marked KILLED by the next run in its store).
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

EXIT_CODE = 130  # 128 + SIGINT, what a shell reports for a command Ctrl-C stopped


def _say(line: str) -> None:
    """Straight to stderr: not through `print`, which a Prefect run with log_prints logs."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def on_sigint(signum: int, frame: FrameType | None) -> None:
    if interrupt.stop_requested():
        _say("error: interrupted twice: exiting now")
        services.exit_now(EXIT_CODE)
    interrupt.request_stop()
    _say("interrupted: stopping the run (Ctrl-C again to exit at once)")
    if not interrupt.polling():  # nothing checks the request: stop where it is
        raise KeyboardInterrupt


@contextmanager
def handled() -> Iterator[None]:
    """`on_sigint` handles Ctrl-C inside this block (in the main thread; elsewhere, where no
    handler can be installed, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupt.clear()
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
