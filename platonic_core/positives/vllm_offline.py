"""vLLM offline batch, in vLLM's own environment.

vLLM pins torch and fastapi versions that conflict with Prefect and this project's torch,
so it is never imported here. For each task of a shard the backend writes the requests
(OpenAI chat messages, images as data URLs) to a JSONL file, launches
`positives.vllm_python vllm_runner.py REQUESTS RESULTS CONFIG` (a separate interpreter:
the python of a venv or conda environment, by path; the recipe validates that it is one,
and it is started without a shell or arguments of its own), and streams RESULTS back as the
runner appends them batch by batch; each batch becomes a part file, so a kill loses at most
the batches the runner finished after the last read.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .jobs import TASKS, Completion, Job

if TYPE_CHECKING:
    from ..config import PositivesConfig

RUNNER = Path(__file__).with_name("vllm_runner.py")


def check_interpreter(value: str) -> None:
    """RuntimeError (one line naming positives.vllm_python) unless `value` is a Python
    interpreter: the recipe's checks read the file (ELF, not a script, named python*); this
    one runs it, in isolated mode with a short timeout, so it happens only where the stage
    that needs it starts, never while a recipe is validated."""
    from ..config.pipeline import resolve_python_binary

    def refuse(why: str) -> RuntimeError:
        return RuntimeError(f"positives.vllm_python {value!r}: {why}")

    try:
        real = resolve_python_binary(value)  # again: the file may have changed since the recipe was read
    except ValueError as e:
        raise refuse(str(e)) from None
    try:
        said = subprocess.run(
            [str(real), "-I", "-c", "import sys; print(sys.implementation.name)"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise refuse(f"{real} did not answer as a Python interpreter ({type(e).__name__})") from None
    if said.returncode != 0 or not re.fullmatch(r"[a-z]+", said.stdout.strip()):
        raise refuse(f"{real} did not answer as a Python interpreter (sys.implementation.name)")


class VllmOfflineBackend:
    name = "vllm"

    def __init__(self, cfg: PositivesConfig, env: dict[str, str] | None = None, poll_s: float = 0.2):
        check_interpreter(cfg.vllm_python)  # the stage starts: now it may be run
        self.cfg = cfg
        self.env = env  # the child's environment (None: inherit)
        self.poll_s = poll_s
        self.info: dict = {}  # what the runner reported: vllm version, interpreter

    def generate(self, task: str, jobs: Iterable[Job], batch_size: int) -> Iterator[list[tuple[Job, Completion]]]:
        m, s = getattr(self.cfg.models, TASKS[task]), self.cfg.sampling
        with tempfile.TemporaryDirectory(prefix="platonic-vllm-") as tmp:
            d = Path(tmp)
            pending: dict[int, Job] = {}
            with open(d / "requests.jsonl", "w") as f:  # streamed: images are read one job at a time
                for i, j in enumerate(jobs):
                    f.write(json.dumps({"i": i, "messages": j.messages, "seed": j.seed}) + "\n")
                    pending[i] = Job(j.request, [], j.seed)  # keep the key, drop the image bytes
            if not pending:
                return
            (d / "config.json").write_text(
                json.dumps(
                    {
                        "model": m.id,
                        "revision": m.revision,
                        "trust_remote_code": self.cfg.trust_remote_code,
                        "seed": self.cfg.seed,
                        "temperature": s.temperature,
                        "top_p": s.top_p,
                        "max_tokens": s.max_tokens,
                        "batch_size": batch_size,
                        "llm_args": self.cfg.vllm_args,
                    }
                )
            )
            res = d / "results.jsonl"
            res.touch()
            log = open(d / "runner.log", "w")
            cmd = [
                self.cfg.vllm_python,  # an interpreter (config.PositivesConfig), never a command line
                str(RUNNER),
                str(d / "requests.jsonl"),
                str(res),
                str(d / "config.json"),
            ]
            try:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
            except OSError as e:
                raise RuntimeError(
                    f"positives.vllm_python {self.cfg.vllm_python!r} could not be started: {e}"
                ) from None
            try:
                with open(res) as f:
                    buf = ""
                    while True:
                        alive = proc.poll() is None
                        buf += f.read()
                        lines, _, buf = buf.rpartition("\n")
                        got = [json.loads(x) for x in lines.splitlines() if x.strip()]
                        for k in range(0, len(got), batch_size):
                            yield [(pending.pop(r["i"]), self._completion(r)) for r in got[k : k + batch_size]]
                        if not alive:
                            break
                        time.sleep(self.poll_s)
            finally:
                if proc.poll() is None:  # the consumer stopped early (or was interrupted)
                    proc.kill()
                proc.wait()
                log.close()
            if (d / "results.jsonl.info").is_file():
                self.info = json.loads((d / "results.jsonl.info").read_text())
            if proc.returncode != 0 or pending:
                tail = (d / "runner.log").read_text()[-2000:]
                raise RuntimeError(
                    f"the vLLM runner ({' '.join(cmd[:1])}) exited with code {proc.returncode} and "
                    f"{len(pending)} requests unanswered; finished batches are kept. Its log ends:\n{tail}"
                )

    @staticmethod
    def _completion(r: dict) -> Completion:
        if "error" in r:
            return Completion(None, f"error: {r['error']}"[:200])
        reason = "refusal" if r.get("finish_reason") == "content_filter" else None
        return Completion(
            r.get("text") if reason is None else None,
            reason,
            int(r.get("prompt_tokens", 0)),
            int(r.get("completion_tokens", 0)),
            float(r.get("seconds", 0.0)),
        )
