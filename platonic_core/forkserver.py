"""A trainer fork server: one process that imports the training stack once and forks a lone
trainer per request, so trainings side by side (`train.parallel`) do not each pay for it.

Importing torch and transformers' model classes costs ~4 CPU-seconds here (transformers pulls
dynamo, sympy and scipy); the demo starts four trainers, three of them one after another on
one core. A forked child starts training at once.

    server = trainer_server()                      # python -m platonic.core.forkserver
    proc = server.run(entry_args, log=..., status=...)   # what `entry_command` runs, forked
    proc.poll(); proc.send_signal(signal.SIGTERM); proc.returncode

The server is single-threaded (forking a process with threads can copy a lock another thread
holds) and computes nothing: torch's thread pools start in the child, after the trainer's own
`set_torch_threads`, so a forked trainer trains the bytes a fresh process does. It reads one
JSON request per line on stdin, answers the child's pid, and writes each child's exit status
(`Popen.returncode`'s convention: -N for signal N) to the request's status file. When the
caller's end of the pipe closes, it exits once its children have: a flow closes it after its
trainings end, so a child still running then lost its flow (killed, crashed) and is sent
SIGTERM, a lone trainer's stop request (it saves its state; a rerun resumes there).
The client's side imports nothing heavy (this module is outside `platonic.core.train`, whose
package imports torch): a flow starts the server without paying for what the server imports.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ENTRY = ["-m", "platonic.core.train"]  # the module `entry_command` runs; its arguments follow


class ForkedTrainer:
    """A trainer the server forked: `Popen`'s poll / send_signal / returncode, read from the
    status file the server writes when it reaps the child."""

    def __init__(self, pid: int, status: Path) -> None:
        self.pid, self.status, self.returncode = pid, status, None

    def poll(self) -> int | None:
        if self.returncode is None and self.status.exists():
            self.returncode = int(self.status.read_text())
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this child's
            os.kill(self.pid, sig)


class ForkServer:
    """The client's end: `python -m platonic.core.forkserver` in a session of its own
    (a terminal's Ctrl-C reaches the flow, which relays it to each trainer)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "platonic.core.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self._lock = threading.Lock()  # pool threads launch trainers at once: one request at a time

    def run(self, args: list[str], log: Path, status: Path) -> ForkedTrainer:
        """Fork `python -m platonic.core.train ARGS` with stdout and stderr to `log`, in this
        process's working directory and environment."""
        status.unlink(missing_ok=True)
        req = {"args": args, "log": str(log), "status": str(status), "cwd": os.getcwd(), "env": dict(os.environ)}
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            try:
                self._proc.stdin.write((json.dumps(req) + "\n").encode())
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except BrokenPipeError:
                line = b""
        if not line:
            raise RuntimeError(f"the trainer fork server ended (exit {self._proc.poll()})")
        return ForkedTrainer(json.loads(line)["pid"], status)

    def close(self) -> None:
        """End the server once its children end (it exits when its stdin closes)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()


_server: ForkServer | None = None
_server_lock = threading.Lock()


def forking_available() -> bool:
    """POSIX fork, and not turned off (`PLATONIC_TRAIN_FORKSERVER=0`: a fresh process a trainer)."""
    return hasattr(os, "fork") and os.environ.get("PLATONIC_TRAIN_FORKSERVER", "1") != "0"


def trainer_server() -> ForkServer:
    """This process's fork server, started on first use (its imports then run beside the
    caller's work: `tasks.executor` starts it before the first stage of a side-by-side run)."""
    global _server
    with _server_lock:
        if _server is None or _server._proc.poll() is not None:
            _server = ForkServer()
            atexit.register(_server.close)
        return _server


def _child(req: dict) -> int:
    """In the forked child: the trainer, as `python -m platonic.core.train` would run it."""
    os.setsid()  # its own session, as `start_new_session`: the flow relays a terminal's Ctrl-C
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for sig in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [sys.executable, *req["args"]]  # argv[0] becomes the module's path, as under `python -m`
    try:  # the entry module by name, as `python -m` runs it: the server knows the trainer as a command
        runpy.run_module(ENTRY[1], run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as e:  # its exit status, or argparse's error, as the interpreter would exit
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - a trainer's crash: its traceback in its log, exit 1
        traceback.print_exc()
        return 1


def _fork(req: dict) -> int:
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            rc = _child(req)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    return pid


def _write_status(path: Path, code: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(code))
    os.replace(tmp, path)  # the client never reads half a number


def serve() -> None:
    """Fork a trainer per request line on stdin; reap them; exit when stdin closes and every
    child has ended."""
    for module in ("launch", "loop"):  # the point of the server: the entry point, torch, transformers, the loop, once
        importlib.import_module(f"{ENTRY[1]}.{module}")

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stops reach trainers through the flow, not here
    fd = sys.stdin.fileno()
    pending, children, reading = b"", {}, True
    while reading or children:
        if reading and select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 1 << 16)
            reading = bool(chunk)
            pending += chunk
            if not reading:  # the client is gone: a trainer still running has no one to report to
                for pid in children:  # its stop request: it saves its state at its next step
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                req = json.loads(line)
                pid = _fork(req)
                children[pid] = Path(req["status"])
                sys.stdout.write(json.dumps({"pid": pid}) + "\n")
                sys.stdout.flush()
        elif not reading:
            time.sleep(0.1)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in children:
                _write_status(children.pop(pid), os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    serve()
