"""Whether a process of this host is still running (a producer's scratch, a run's owner)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` exists, someone else's process included."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
