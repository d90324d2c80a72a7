"""torch, transformers and our model classes, imported into a process one thread at a time.

transformers resolves its top-level names lazily, and its submodules import each other in
cycles. Two threads of one process importing it for the first time through different names
can meet inside such a cycle; Python's import-deadlock check then hands one of them a module
that is still half-initialised: "cannot import name 'Gemma3TextConfig' from 'transformers'".
A flow's process does this: it runs its trainings' threads beside its other stages, so a
training thread logging its model with `mlflow.transformers` met the main thread's embed stage
importing our models (CI, 2026-12-07; `tests/test_model_stack.py` reproduces it).

Code other than the models package that imports transformers or `mlflow.transformers` calls
`import_model_stack` first (`tests/test_model_stack.py` checks every such function). It imports
the models package, which Python's own module lock already gives to one thread at a time (a second
importer waits for the first to finish), and then, under `TRANSFORMERS_LOCK`, the transformers names
used elsewhere and the modules a caller names. So no transformers import starts while another is
under way. Call it from a function body, never at a module's top level: a thread that holds a
module's import lock while it waits for ours could wait in a cycle Python cannot see.
"""

from __future__ import annotations

import importlib
import threading

TRANSFORMERS_LOCK = threading.Lock()
# the names this package takes from transformers outside models/ (export, dedup, the
# tokenizer, the backends of positives and features): resolved once here, under the lock
TRANSFORMERS_NAMES = ("AutoConfig", "AutoModel", "AutoTokenizer", "PreTrainedTokenizerFast")


def import_model_stack(*more: str) -> None:
    """Import torch, transformers (TRANSFORMERS_NAMES) and `platonic.core.models` (BERT, GPT-2,
    Gemma 3) into this process, and also the modules named in `more` (e.g. "mlflow.transformers").
    A thread that calls this waits until every one of these imports is finished. Imports that are
    already done cost almost nothing."""
    importlib.import_module(f"{__package__}.models")  # one thread at a time by Python's module lock
    with TRANSFORMERS_LOCK:
        import transformers

        for name in TRANSFORMERS_NAMES:
            getattr(transformers, name)
        for module in more:
            importlib.import_module(module)
