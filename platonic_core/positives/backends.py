"""The recipe's LLM backend: `positives.backend` -> a `ChatBackend` (openai, transformers or
vllm; each is imported only when chosen)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import PositivesConfig
    from .jobs import ChatBackend


def make_backend(cfg: PositivesConfig) -> ChatBackend:
    """The recipe's LLM backend (`positives.backend`: openai | transformers | vllm)."""
    if cfg.backend == "openai":
        from .openai_http import OpenAIChatBackend

        return OpenAIChatBackend(cfg)
    if cfg.backend == "transformers":
        from .transformers_backend import TransformersBackend

        return TransformersBackend(cfg)
    if cfg.backend == "vllm":
        from .vllm_offline import VllmOfflineBackend

        return VllmOfflineBackend(cfg)
    raise ValueError(f"positives.backend {cfg.backend!r} is not an LLM backend (the world backend has its own path)")
