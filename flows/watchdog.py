"""Stop a child process when its parent dies, however it dies.

A parent killed by SIGKILL (or SIGTERM, which Python does not handle) runs no `atexit`
handler, so the children it meant to stop keep running: Prefect's temporary server outlived
every `kill -9` of `platonic run`, still listening (about 220 MB). A watchdog is a second
child, stdlib only, started beside the one it guards:

    python -m platonic.flows.watchdog PARENT PID MARK [MARK ...]

It polls its own parent; once that is no longer PARENT (the parent is gone) it stops PID
(SIGTERM, then SIGKILL after a grace period), provided PID is still the process it was
started for: every MARK is an argument of its command line, so a pid the OS gave to another
process is left alone. It exits by itself once PID is gone. (Linux's PR_SET_PDEATHSIG would
need a hook into how the child is spawned, and fires when the spawning *thread* exits.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5
GRACE_S = 5.0


def watch(pid: int, marks: list[str]) -> subprocess.Popen:
    """Start a watchdog over this process's child `pid`, identified by `marks` (arguments of
    its command line). It runs in its own session, so a signal to the parent's process group
    (Ctrl-C, a job manager's kill) does not take it down first; kill it once the child has
    been stopped normally."""
    return subprocess.Popen(
        [sys.executable, "-m", "platonic.flows.watchdog", str(os.getpid()), str(pid), *marks],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def is_guarded(pid: int, marks: list[str]) -> bool:
    """Whether `pid` is running and is the process the marks describe (on Linux, where
    /proc tells; elsewhere: whether it exists)."""
    proc = Path("/proc")
    if proc.is_dir():
        try:
            args = (proc / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return False
        return all(m in args for m in marks)  # a zombie's command line is empty
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def stop(pid: int, marks: list[str]) -> None:
    """SIGTERM, then SIGKILL if it is still there after GRACE_S."""
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not is_guarded(pid, marks):
                return
            time.sleep(0.1)


def main(argv: list[str]) -> None:
    parent, pid, marks = int(argv[0]), int(argv[1]), argv[2:]
    while is_guarded(pid, marks):
        if os.getppid() != parent:
            stop(pid, marks)
            return
        time.sleep(POLL_S)


if __name__ == "__main__":
    main(sys.argv[1:])
