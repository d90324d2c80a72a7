"""The served stack as plain processes on loopback: what `infra/compose.yaml` runs in
containers, for a machine without a container engine (and for the stack test and CI).

    python infra/local_stack.py up   --dir /tmp/platonic-stack   # prints the variables to export
    python infra/local_stack.py down --dir /tmp/platonic-stack

- PostgreSQL (the Debian package's binaries): databases `prefect` and `mlflow`, password
  authentication (scram-sha-256) with a generated password kept in <pg dir>/password (0600)
- an S3-compatible object store: moto's server (MinIO's binaries are not on the package
  registries this project may use; compose.yaml runs MinIO)
- `prefect server start` on Postgres, a `process` work pool, `prefect worker start`
- `mlflow server` with the Postgres backend store and the S3 artifact store, artifacts
  proxied through the server (clients need no S3 credentials)

Every process logs to <dir>/logs/<name>.log; a service that does not come up names its log.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

BUCKET = "platonic-artifacts"
POOL = "platonic-process"
S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "platonic",
    "AWS_SECRET_ACCESS_KEY": "platonic-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# `up` starts the servers from threads: one at a time records a pid and writes stack.json
_RECORD = threading.RLock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, name: str, log: Path, timeout: float = 120, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            timeout = 0
            break
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log.exists() else "(no log)"
    why = "exited" if timeout == 0 else f"did not answer {url} within {timeout:.0f}s"
    raise RuntimeError(f"{name} {why}; its log {log}:\n{tail}")


def _bin(name: str) -> str:
    """A PostgreSQL server binary: the Debian package keeps them off PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: install PostgreSQL (Debian: apt-get install postgresql)")
    return path


@dataclass
class Stack:
    dir: Path
    pg_port: int = 0
    s3_port: int = 0
    prefect_port: int = 0
    mlflow_port: int = 0
    pg_dir: str = ""  # PostgreSQL's data and socket folder (its own: the postgres user must reach it)
    pids: dict[str, int] = field(default_factory=dict)

    # ---- what clients export
    def env(self) -> dict[str, str]:
        return {
            "PREFECT_API_URL": f"http://127.0.0.1:{self.prefect_port}/api",
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{self.mlflow_port}",
        }

    def server_env(self) -> dict[str, str]:
        return {
            **os.environ,
            **S3_KEYS,
            "MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "PREFECT_HOME": str(self.dir / "prefect-home"),
        }

    @property
    def pg_password_file(self) -> Path:
        return Path(self.pg_dir) / "password"

    def pg_url(self, db: str, driver: str = "postgresql") -> str:
        """The database URL, password included: give it to a server through its environment,
        never on a command line (`ps` shows those to every user)."""
        password = self.pg_password_file.read_text().strip()
        return f"{driver}://postgres:{password}@127.0.0.1:{self.pg_port}/{db}"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def save(self) -> None:
        with _RECORD:
            d = asdict(self)
            d["dir"] = str(self.dir)
            (self.dir / "stack.json").write_text(json.dumps(d, indent=1))

    @classmethod
    def load(cls, folder: Path) -> Stack:
        d = json.loads((Path(folder) / "stack.json").read_text())
        d["dir"] = Path(d["dir"])
        return cls(**d)

    def spawn(self, name: str, cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = (self.logs / f"{name}.log").open("ab")
        p = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env or self.server_env(), cwd=cwd, start_new_session=True
        )  # its own process group: `down` stops its children too
        with _RECORD:
            self.pids[name] = p.pid
            self.save()
        return p

    # ---- services
    def start_postgres(self) -> None:
        as_root = os.geteuid() == 0
        run_as = ["runuser", "-u", "postgres", "--"] if as_root else []  # postgres refuses to run as root
        self.dir.mkdir(parents=True, exist_ok=True)
        # as root, a folder of the postgres user's own under /tmp: test folders are 0700 root
        self.pg_dir = tempfile.mkdtemp(prefix="platonic-pg-") if as_root else str(self.dir / "pg")
        self.save()
        pg = Path(self.pg_dir)
        pg.mkdir(exist_ok=True)
        if as_root:
            shutil.chown(pg, "postgres")
        data = pg / "data"
        # password authentication, never `trust`: on a shared machine every local user reaches
        # 127.0.0.1. The password is generated here and readable by its owner only.
        fd = os.open(self.pg_password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24) + "\n")
        if as_root:
            shutil.chown(self.pg_password_file, "postgres")  # initdb runs as postgres and reads it
        subprocess.run(
            [
                *run_as,
                _bin("initdb"),
                "-D",
                str(data),
                "-A",
                "scram-sha-256",
                "-U",
                "postgres",
                f"--pwfile={self.pg_password_file}",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )
        p = subprocess.run(
            [
                *run_as,
                _bin("pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-t",
                "60",
                "-l",
                str(pg / "postgres.log"),
                "-o",
                f"-p {self.pg_port} -k {pg} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                "start",
            ],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            log = (pg / "postgres.log").read_text()[-2000:] if (pg / "postgres.log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {p.stderr.strip()}\n{log}")
        for db in ("prefect", "mlflow"):
            subprocess.run(
                [
                    _bin("psql"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.pg_port),
                    "-U",
                    "postgres",
                    "-c",
                    f"CREATE DATABASE {db}",
                ],
                capture_output=True,
                env={**os.environ, "PGPASSWORD": self.pg_password_file.read_text().strip()},
            )

    def start_s3(self) -> None:
        exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
        p = self.spawn("s3", [exe, "-H", "127.0.0.1", "-p", str(self.s3_port)])
        wait_http(f"http://127.0.0.1:{self.s3_port}/", "the S3 store (moto)", self.logs / "s3.log", proc=p)
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.s3_port}",
            **{k.lower().replace("aws_default_region", "region_name"): v for k, v in S3_KEYS.items()},
        )
        s3.create_bucket(Bucket=BUCKET)

    def start_prefect(self) -> None:
        env = {
            **self.server_env(),
            "PREFECT_API_DATABASE_CONNECTION_URL": self.pg_url("prefect", "postgresql+asyncpg"),
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(self.prefect_port),
            "PREFECT_UI_ENABLED": "false",
        }
        p = self.spawn(
            "prefect-server",
            [
                sys.executable,
                "-m",
                "prefect",
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.prefect_port),
                "--no-ui",
            ],
            env=env,
        )
        wait_http(
            f"http://127.0.0.1:{self.prefect_port}/api/health",
            "prefect server",
            self.logs / "prefect-server.log",
            180,
            p,
        )
        subprocess.run(
            [sys.executable, "-m", "prefect", "work-pool", "create", POOL, "--type", "process", "--overwrite"],
            env={**self.server_env(), **self.env()},
            check=True,
            capture_output=True,
        )

    def start_mlflow(self) -> None:
        p = self.spawn(
            "mlflow-server",
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.mlflow_port),
                "--artifacts-destination",
                f"s3://{BUCKET}/mlflow",
                "--serve-artifacts",
                "--workers",
                "2",
            ],
            env={**self.server_env(), "MLFLOW_BACKEND_STORE_URI": self.pg_url("mlflow", "postgresql+psycopg2")},
        )
        wait_http(
            f"http://127.0.0.1:{self.mlflow_port}/health", "mlflow server", self.logs / "mlflow-server.log", 180, p
        )

    def start_worker(self, name: str = "worker", cwd: Path | None = None) -> subprocess.Popen:
        """A process worker of the pool: runs each flow run in a subprocess. Its environment
        holds the endpoints only (artifacts go through the MLflow server)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MLFLOW_S3"))}
        env.update(
            self.env(),
            PREFECT_HOME=str(self.dir / "prefect-home"),
            DO_NOT_TRACK="1",
            MLFLOW_DISABLE_TELEMETRY="true",
            OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
            # the stack test sends each run's out_dir as a deployment override: allowed here by
            # the operator (the worker's environment), not by default (docs/operations.md)
            PLATONIC_DEPLOYMENT_OVERRIDES="out_dir",
        )
        return self.spawn(
            name,
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--name", name, "--limit", "4"],
            env=env,
            cwd=cwd,
        )

    def stop(self, name: str) -> None:
        pid = self.pids.pop(name, None)
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.save()


def up(folder: Path, worker: bool = True) -> Stack:
    folder = Path(folder).resolve()
    st = Stack(folder, *(free_port() for _ in range(4)))
    try:
        st.start_postgres()
        # the servers need only Postgres to start: side by side, each ~15 s of imports and
        # migrations (MLflow's and Prefect's), so the stack is up in the time of the slowest
        with ThreadPoolExecutor(3) as pool:
            for started in [pool.submit(start) for start in (st.start_s3, st.start_prefect, st.start_mlflow)]:
                started.result()
        if worker:
            st.start_worker()
    except BaseException:
        down(folder)
        raise
    return st


def down(folder: Path) -> None:
    folder = Path(folder).resolve()
    if not (folder / "stack.json").exists():
        return
    st = Stack.load(folder)
    for name in list(st.pids):
        st.stop(name)
    data = Path(st.pg_dir) / "data"
    if st.pg_dir and data.exists():
        run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*run_as, _bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(st.pg_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/platonic-stack"))
    ap.add_argument("--no-worker", action="store_true")
    a = ap.parse_args()
    if a.action == "down":
        down(a.dir)
        return
    st = up(a.dir, worker=not a.no_worker)
    for k, v in st.env().items():
        print(f"export {k}={v}")
    print(f"# logs: {st.logs}; stop with: python {sys.argv[0]} down --dir {a.dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
