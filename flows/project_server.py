"""`platonic server`: one Prefect server per store (out_dir), and the proof a command asks of it.

The server is Prefect's own (`prefect server start --background` / `prefect server stop`),
run with PREFECT_HOME = OUT_DIR/prefect: its database (prefect.db) and its pid file live
in the store, so two checkouts, or two stores of one checkout, each have their own server,
on a port chosen when it starts (the one it had before if that is free, else any free
port) and recorded in OUT_DIR/prefect/server.json.

A command reports to that server only if it can prove the process answering on the
recorded port is the one recorded (`proven_url`): the record's pid is alive, started when
recorded (not a recycled pid), runs as this user, and holds the listening socket on
127.0.0.1:PORT (Linux: /proc/net/tcp + the pid's file descriptors). Anything else on that
port (another user's server, a squatter, a server that replaced ours after a restart) is
not attached to: nothing of a run is sent before the proof, which needs no request to the
port. Where /proc cannot say (not Linux), no server is proven and the command starts its
own temporary server, as with no server up.

Prefect's own auth string (PREFECT_SERVER_API_AUTH_STRING, which 3.9 has) proves nothing
here: the client sends it with its first request, so a squatter learns it and answers 200.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HOST = "127.0.0.1"
STARTUP_S = 180  # it answers after its database migrations (seconds to a minute)


def home(out_dir: Path) -> Path:
    """The server's PREFECT_HOME: its database and pid file (Prefect's), its record (ours)."""
    return Path(out_dir) / "prefect"


def record_path(out_dir: Path) -> Path:
    return home(out_dir) / "server.json"


@dataclass(frozen=True)
class ServerRecord:
    """Which process serves a store's Prefect API, written when `platonic server` starts it."""

    port: int
    pid: int
    pid_start: str  # the process's start time, clock ticks since boot (/proc/PID/stat field 22)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/api"

    @property
    def ui(self) -> str:
        return f"http://{HOST}:{self.port}"

    @classmethod
    def read(cls, out_dir: Path) -> ServerRecord | None:
        try:
            d = json.loads(record_path(out_dir).read_text())
            return cls(int(d["port"]), int(d["pid"]), str(d["pid_start"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, out_dir: Path) -> None:
        path = record_path(out_dir)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)
        os.replace(tmp, path)


def process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (Linux), None where unknown or gone
    (a zombie too: it has exited, only its parent has not reaped it yet)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


def listening_socket(port: int) -> tuple[int, int] | None:
    """(owner uid, socket inode) of the TCP socket listening on 127.0.0.1:PORT (or on every
    IPv4 address), from /proc/net/tcp; None if none listens or /proc cannot say."""
    wanted = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        f = line.split()
        if len(f) > 9 and f[1] in wanted and f[3] == "0A":  # 0A: LISTEN
            return int(f[7]), int(f[9])
    return None


def holds_socket(pid: int, inode: int) -> bool:
    """Whether process `pid` has the socket `inode` among its open files."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        entries = list(fds.iterdir())
    except OSError:
        return False
    for fd in entries:
        try:
            if os.readlink(fd) == f"socket:[{inode}]":
                return True
        except OSError:
            continue
    return False


def proves(rec: ServerRecord) -> str | None:
    """None when `rec`'s process is the one listening on its port (the module's docstring),
    else why not, in a few words."""
    start = process_start(rec.pid)
    if start is None:
        return f"its process {rec.pid} is gone"
    if start != rec.pid_start:
        return f"pid {rec.pid} is another process now"
    sock = listening_socket(rec.port)
    if sock is None:
        return f"nothing listens on {HOST}:{rec.port}"
    uid, inode = sock
    if uid != os.getuid() or not holds_socket(rec.pid, inode):
        return f"port {rec.port} is held by another process"
    return None


def proven_url(out_dir: Path) -> str | None:
    """The API URL of this store's running `platonic server`, if its record proves it;
    None otherwise (no record, a stale one, or a port someone else holds)."""
    rec = ServerRecord.read(out_dir)
    if rec is None or proves(rec) is not None:
        return None
    return rec.url


def free_port(preferred: int | None) -> int:
    """`preferred` if it can be bound on 127.0.0.1 now, else a port the OS picks."""
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")


# the UI's API URL: Prefect 3 reads PREFECT_SERVER_UI_API_URL, or its older name
UI_API_VARS = ("PREFECT_SERVER_UI_API_URL", "PREFECT_UI_API_URL")


def server_env(out_dir: Path, port: int | None = None) -> dict[str, str]:
    """The environment of `prefect server start/stop` for this store: its own PREFECT_HOME
    (database, pid file); a client's API URL would be meaningless there. Started on `port`,
    the server's UI is told its API is on that port: `prefect server start --port` does not
    tell it, so `/ui-settings` would name PREFECT_SERVER_API_PORT's default, 4200, and the UI
    would call whatever answers there (or nothing)."""
    drop = ("PREFECT_API_URL", "PREFECT_HOME", *UI_API_VARS)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    ui = {UI_API_VARS[0]: f"http://{HOST}:{port}/api"} if port is not None else {}
    return {**env, "PREFECT_HOME": str(home(out_dir)), **ui}


def prefect_cli(out_dir: Path, *args: str, port: int | None = None) -> subprocess.CompletedProcess:
    """`prefect ARGS` for this store's server, its output captured (said only on failure)."""
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        env=server_env(out_dir, port),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )


class ServerError(RuntimeError):
    """The store's server could not be started or stopped; the message is the one line to say."""


def _failed(verb: str, p: subprocess.CompletedProcess) -> ServerError:
    """`prefect server VERB` failed: its exit code and the last line it said."""
    said = (p.stderr.strip() or p.stdout.strip()).splitlines()
    return ServerError(f"prefect server {verb} exited {p.returncode}: {said[-1] if said else 'no output'}")


def start(out_dir: Path, answers) -> tuple[ServerRecord, bool]:
    """This store's server: the running one if its record proves it, else a new one started
    with `prefect server start --background`, waited for (`answers(url)`: its health check)
    and recorded. (record, started now). Under a file lock: a second `platonic server` of
    the same store waits for the first, then finds its server up."""
    from filelock import FileLock

    home(out_dir).mkdir(parents=True, exist_ok=True)
    with FileLock(home(out_dir) / "server.lock"):
        rec = ServerRecord.read(out_dir)
        if rec is not None and proves(rec) is None:
            return rec, False
        _clear_stale(out_dir)
        port = free_port(rec.port if rec else None)
        p = prefect_cli(
            out_dir,
            "server",
            "start",
            "--host",
            HOST,
            "--port",
            str(port),
            "--background",
            "--analytics-off",
            port=port,
        )
        pid_file = home(out_dir) / "server.pid"
        if p.returncode or not pid_file.exists():
            raise _failed("start", p)
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + STARTUP_S
        while True:
            pid_start = process_start(pid)
            if pid_start is None:
                pid_file.unlink(missing_ok=True)
                raise ServerError(f"the Prefect server (pid {pid}) exited while starting on port {port}")
            rec = ServerRecord(port, pid, pid_start)
            if proves(rec) is None and answers(rec.url):
                rec.write(out_dir)
                return rec, True
            if time.monotonic() > deadline:
                raise ServerError(f"the Prefect server did not answer at {rec.url} within {STARTUP_S} s")
            time.sleep(0.5)


def _clear_stale(out_dir: Path) -> None:
    """Prefect's pid file and our record of a server that is gone (a reboot, a kill): Prefect
    refuses to start while its pid file is there. The pid in it is not signalled: without a
    proof it may be anyone's process by now."""
    (home(out_dir) / "server.pid").unlink(missing_ok=True)
    record_path(out_dir).unlink(missing_ok=True)


def stop(out_dir: Path) -> ServerRecord | None:
    """Stop this store's server with `prefect server stop` if its record proves it (the
    record it had, or None when none was running; stale files are removed either way)."""
    from filelock import FileLock

    if not home(out_dir).is_dir():
        return None
    with FileLock(home(out_dir) / "server.lock"):
        rec = ServerRecord.read(out_dir)
        if rec is None or proves(rec) is not None:
            _clear_stale(out_dir)
            return None
        p = prefect_cli(out_dir, "server", "stop")
        if p.returncode:
            raise _failed("stop", p)
        deadline = time.monotonic() + 30
        while process_start(rec.pid) == rec.pid_start and time.monotonic() < deadline:
            time.sleep(0.2)
        record_path(out_dir).unlink(missing_ok=True)
        return rec
