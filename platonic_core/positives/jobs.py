"""What every positives backend and the shard loop share: a request, the job a backend is
handed (the request, its OpenAI chat messages, its seed), the completion it returns, and the
`ChatBackend` protocol. The backends (openai_http, transformers_backend, vllm_offline) and
generate.py import these from here, so no backend imports the shard loop that drives it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

# task (the source_kind of the rows it makes) -> the prompt / model key in the recipe
TASKS = {"recap": "recaption", "paraphrase": "paraphrase"}


@dataclass(frozen=True)
class Request:
    image_id: str
    task: str  # recap | paraphrase
    index: int
    source_row: int
    text: str | None = None  # paraphrase: the alt-text; recap: None (the image is fetched by id)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.image_id, self.task, self.index)

    @property
    def text_id(self) -> str:
        return f"{self.image_id}:{self.task}:{self.index}"


@dataclass
class Completion:
    text: str | None
    reason: str | None = None  # None: fine
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


@dataclass
class Job:
    request: Request
    messages: list[dict]
    seed: int


class ChatBackend(Protocol):
    """A generator of chat completions. `generate` consumes `jobs` lazily (images are read
    as jobs are drawn) and yields each finished batch of at most `batch_size` jobs."""

    name: str

    def generate(self, task: str, jobs: Iterable[Job], batch_size: int) -> Iterator[list[tuple[Job, Completion]]]: ...


ImageSource = Callable[[str], tuple[bytes, str]]  # image id -> (bytes, MIME type)
