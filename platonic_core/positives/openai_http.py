"""OpenAI-compatible chat completions over HTTP: what `vllm serve` (and many others) expose.

Requests of one batch run concurrently (at most `http.concurrency` in flight), each with a
timeout; 429, 5xx, 408, 409, 425, timeouts and connection errors are retried by tenacity
with exponential backoff and full jitter, or after the server's `Retry-After` (seconds or an
HTTP date) where that is longer. What still fails comes back as a Completion with a reason:
timeout, http_<code>, connection_error, refusal, bad_response; an empty answer becomes
empty_output downstream.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from itertools import islice
from typing import TYPE_CHECKING

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from .jobs import TASKS, Completion, Job

if TYPE_CHECKING:
    from ..config import PositivesConfig

RETRY_STATUS = {408, 409, 425, 429}  # and every 5xx


class Retryable(Exception):
    """One failed attempt worth another: its reason, and the server's Retry-After in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A Retry-After header: delay-seconds or an HTTP date (RFC 9110 10.2.3); None if neither."""
    value = (value or "").strip()
    if value.replace(".", "", 1).isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


class BackoffOrRetryAfter:
    """tenacity's wait: exponential backoff with full jitter, or the failed attempt's
    Retry-After where that is longer."""

    def __init__(self, backoff_s: float):
        self.backoff = wait_random_exponential(multiplier=backoff_s)

    def __call__(self, state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        return max(self.backoff(state), getattr(failure, "retry_after", None) or 0.0)


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
        t0 = time.perf_counter()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(h.max_retries + 1),
            wait=BackoffOrRetryAfter(h.backoff_s),
            retry=retry_if_exception_type(Retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    async with sem:  # the limit covers requests in flight, not backoff sleeps
                        c = await self._attempt(client, url, payload)
        except Retryable as e:
            c = Completion(None, e.reason)
        c.seconds = time.perf_counter() - t0
        return c

    async def _attempt(self, client: httpx.AsyncClient, url: str, payload: dict) -> Completion:
        """One request: a Completion, or Retryable for 429, 5xx, 408, 409, 425, timeouts and
        connection errors (400, 401, 404: retrying won't help, a Completion with the code)."""
        self.attempts += 1
        try:
            resp = await client.post(url, json=payload, timeout=self.cfg.http.timeout_s)
        except httpx.TimeoutException:
            raise Retryable("timeout") from None
        except httpx.TransportError:
            raise Retryable("connection_error") from None
        if resp.status_code == 200:
            try:
                return parse_completion(resp.json())
            except ValueError:
                return Completion(None, "bad_response")
        reason = f"http_{resp.status_code}"
        if resp.status_code < 500 and resp.status_code not in RETRY_STATUS:
            return Completion(None, reason)
        raise Retryable(reason, retry_after_seconds(resp.headers.get("retry-after")))

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
