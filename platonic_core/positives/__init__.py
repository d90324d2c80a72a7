"""Positives: extra texts per image, through one generator interface.

Two tasks, as in the paper:
- recaption: a captioner sees the image and writes a caption (LLaVA in the paper);
- paraphrase: a text-only model sees only the alt-text and rewrites it (Qwen2.5 in Table 7).

The demo's backend is the synthetic world's own captioner and paraphraser (`WorldGenerator`,
world_backend.py), run through the `Generator` protocol by `generate_positives`
(generator.py). Real models go through `ChatBackend` (jobs.py, with the `Job` a backend is
handed and the `Completion` it returns): OpenAI chat messages in, completions out, resumable
per shard (`generate_shard`, generate.py) and over a corpus (`generate_corpus`, corpus.py),
with provenance per row. Backends: `openai` (openai_http.py, any OpenAI-compatible server such
as `vllm serve`), `transformers` (transformers_backend.py, in process) and `vllm`
(vllm_offline.py, a separate interpreter; vLLM is never imported here). `make_backend(cfg)`
(backends.py, the one module that knows them all) picks one from the recipe.

Imports run one way: jobs.py <- the backends <- backends.py <- corpus.py -> generate.py -> jobs.py.
"""

from .backends import make_backend
from .corpus import generate_corpus
from .generate import generate_shard
from .generator import Generator, generate_positives
from .jobs import ChatBackend
from .world_backend import WorldGenerator

__all__ = [
    "ChatBackend",
    "Generator",
    "WorldGenerator",
    "generate_corpus",
    "generate_positives",
    "generate_shard",
    "make_backend",
]
