"""OpenAI-compatible chat completions over HTTP: what `vllm serve` (and many others) expose.

Requests of one batch run concurrently (at most `http.concurrency` in flight), each with a
timeout; 429, 5xx, 408, timeouts and connection errors are retried with exponential
backoff and jitter (a `Retry-After` header is honoured). What still fails comes back as a
Completion with a reason: timeout, http_<code>, connection_error, refusal, bad_response;
an empty answer becomes empty_output downstream.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

import httpx

from .jobs import TASKS, Completion, Job

if TYPE_CHECKING:
    from ..config import PositivesConfig

RETRY_STATUS = {408, 409, 425, 429}  # and every 5xx


def parse_completion(data: dict) -> Completion:
    """A chat.completion body -> Completion (refusals and filtered answers are failures)."""
    try:
        choice = data["choices"][0]
        msg = choice.get("message") or {}
    except (KeyError, IndexError, TypeError):
        return Completion(None, "bad_response")
    usage = data.get("usage") or {}
    tokens = {
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "completion_tokens": int(usage.get("completion_tokens") or 0),
    }
    if msg.get("refusal") or choice.get("finish_reason") == "content_filter":
        return Completion(None, "refusal", **tokens)
    content = msg.get("content")
    if isinstance(content, list):  # some servers answer in parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return Completion(content if isinstance(content, str) else None, None, **tokens)


class OpenAIChatBackend:
    name = "openai"

    def __init__(self, cfg: PositivesConfig, transport: httpx.AsyncBaseTransport | None = None):
        self.cfg = cfg
        self.transport = transport  # tests may inject one; None = real sockets
        key = os.environ.get(cfg.http.api_key_env, "")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.attempts = 0  # HTTP requests sent, retries included (for reports and tests)

    def _payload(self, task: str, job: Job) -> dict:
        s = self.cfg.sampling
        return {
            "model": getattr(self.cfg.models, TASKS[task]).id,
            "messages": job.messages,
            "n": 1,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "seed": job.seed,
        }

    async def _one(self, client: httpx.AsyncClient, url: str, payload: dict, sem: asyncio.Semaphore) -> Completion:
        h = self.cfg.http
        reason = "error"
        t0 = time.perf_counter()
        for attempt in range(h.max_retries + 1):
            wait = h.backoff_s * (2**attempt) * (0.5 + random.random())  # jitter: no thundering herd
            async with sem:  # the limit covers requests in flight, not backoff sleeps
                self.attempts += 1
                try:
                    resp = await client.post(url, json=payload, timeout=h.timeout_s)
                except httpx.TimeoutException:
                    reason = "timeout"
                except httpx.TransportError:
                    reason = "connection_error"
                else:
                    if resp.status_code == 200:
                        try:
                            c = parse_completion(resp.json())
                        except ValueError:
                            c = Completion(None, "bad_response")
                        c.seconds = time.perf_counter() - t0
                        return c
                    reason = f"http_{resp.status_code}"
                    if resp.status_code < 500 and resp.status_code not in RETRY_STATUS:
                        return Completion(
                            None, reason, seconds=time.perf_counter() - t0
                        )  # 400, 401, 404: retrying won't help
                    retry_after = resp.headers.get("retry-after", "")
                    if retry_after.replace(".", "", 1).isdigit():
                        wait = max(wait, float(retry_after))
            if attempt < h.max_retries:
                await asyncio.sleep(wait)
        return Completion(None, reason, seconds=time.perf_counter() - t0)

    async def _batch(self, client: httpx.AsyncClient, task: str, jobs: list[Job], sem) -> list[Completion]:
        url = getattr(self.cfg.models, TASKS[task]).base_url.rstrip("/") + "/chat/completions"
        return await asyncio.gather(*(self._one(client, url, self._payload(task, j), sem) for j in jobs))

    def generate(self, task: str, jobs: Iterable[Job], batch_size: int) -> Iterator[list[tuple[Job, Completion]]]:
        it = iter(jobs)
        loop = asyncio.new_event_loop()
        limits = httpx.Limits(
            max_connections=self.cfg.http.concurrency, max_keepalive_connections=self.cfg.http.concurrency
        )
        client = httpx.AsyncClient(headers=self.headers, limits=limits, transport=self.transport)
        sem = asyncio.Semaphore(self.cfg.http.concurrency)
        try:
            while batch := list(islice(it, batch_size)):
                comps = loop.run_until_complete(self._batch(client, task, batch, sem))
                yield list(zip(batch, comps, strict=True))
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()
