"""The openai backend's retries (tenacity): which answers are retried, how long it waits
(backoff, or the server's Retry-After in seconds or as an HTTP date), and what a request that
still fails reports. A mock transport answers, so no server or model is needed."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import pytest

from platonic.core.config import PositivesConfig
from platonic.core.positives.jobs import Job, Request
from platonic.core.positives.openai_http import OpenAIChatBackend, retry_after_seconds

OK = {"choices": [{"message": {"content": "a red cube"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}


def backend(answers: list, max_retries: int = 3, backoff_s: float = 0.001) -> tuple[OpenAIChatBackend, list]:
    """A backend whose requests get `answers` in turn: (status, headers) or an exception."""
    sent: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(time.perf_counter())
        status, headers = answers[min(len(sent), len(answers)) - 1]
        if isinstance(status, Exception):
            raise status
        return httpx.Response(status, headers=headers, json=OK if status == 200 else {"error": "no"})

    url = "http://127.0.0.1:1/v1"
    cfg = PositivesConfig.model_validate(
        {
            "backend": "openai",
            "models": {"recaption": {"id": "cap", "base_url": url}, "paraphrase": {"id": "lm", "base_url": url}},
            "http": {"timeout_s": 5, "max_retries": max_retries, "backoff_s": backoff_s, "concurrency": 2},
        }
    )
    return OpenAIChatBackend(cfg, transport=httpx.MockTransport(handle)), sent


def complete(b: OpenAIChatBackend):
    job = Job(Request("img0", "paraphrase", 0, 0, "a cube"), [{"role": "user", "content": "say it again"}], 1)
    [[(_, c)]] = list(b.generate("paraphrase", [job], 1))
    return c


def test_retry_after_in_seconds_is_honoured():
    b, sent = backend([(429, {"Retry-After": "0.4"}), (200, {})])
    c = complete(b)
    assert c.text == "a red cube" and c.reason is None and b.attempts == len(sent) == 2
    assert sent[1] - sent[0] >= 0.4  # the backoff alone would have waited about a millisecond
    assert c.seconds >= 0.4


def test_retry_after_as_an_http_date_is_honoured():
    when = datetime.now(timezone.utc) + timedelta(seconds=2)
    b, sent = backend([(503, {"Retry-After": format_datetime(when, usegmt=True)}), (200, {})])
    assert complete(b).text == "a red cube"
    assert sent[1] - sent[0] >= 0.9  # the date has whole seconds: at least 1 s - rounding


def test_what_still_fails_reports_its_last_reason_after_every_attempt():
    b, sent = backend([(500, {}), (503, {})], max_retries=3)
    c = complete(b)
    assert (c.text, c.reason, b.attempts, len(sent)) == (None, "http_503", 4, 4)
    b, sent = backend([(httpx.ConnectError("refused"), {})], max_retries=1)
    assert complete(b).reason == "connection_error" and len(sent) == 2
    b, sent = backend([(httpx.ReadTimeout("slow"), {}), (200, {})], max_retries=1)
    assert complete(b).text == "a red cube" and len(sent) == 2


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_client_error_is_not_retried(status):
    b, sent = backend([(status, {}), (200, {})])
    assert complete(b).reason == f"http_{status}" and len(sent) == 1


def test_retry_after_parsing():
    now = datetime(2026, 12, 5, 0, 0, 0, tzinfo=timezone.utc)
    assert retry_after_seconds("7", now) == 7.0 and retry_after_seconds("1.5", now) == 1.5
    assert retry_after_seconds("Sat, 05 Dec 2026 00:00:30 GMT", now) == 30.0
    assert retry_after_seconds("Fri, 04 Dec 2026 23:59:00 GMT", now) == 0.0  # past: no wait
    assert retry_after_seconds("soon", now) is None and retry_after_seconds(None, now) is None
