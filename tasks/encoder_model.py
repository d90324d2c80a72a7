"""A trained text encoder as an MLflow model whose pyfunc flavor predicts what its card says.

`mlflow.transformers` saves the encoder (model + tokenizer, `mlflow.transformers.load_model`
keeps working), but its pyfunc is a transformers pipeline: `feature-extraction` answers each
text's token states at the last layer, `text-generation` answers text. The card, the export
and the evaluation pool differently: the masked mean over tokens of `hidden_states[layer]`,
the layer being the evaluation's best (`best_layer` in the model's `platonic.json`, written by
the evaluate stage; the last layer before any evaluation). So this module is a flavor for
`mlflow.models.Model.log` that saves with mlflow.transformers and points the pyfunc flavor's
`loader_module` here: `mlflow.pyfunc.load_model(...).predict(texts)` -> (N, D) float32, the
exported model's pooled features. Loading it needs `platonic` installed (the loader and
`pool_tokens` live here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

# the logged input example: two texts, so the check MLflow runs at log time pads a batch
INPUT_EXAMPLE = ["a small red circle", "two blue squares at the top"]


def save_model(path: str, mlflow_model: Any, extras: tuple[dict, dict], **kwargs: Any) -> None:
    """mlflow.transformers.save_model, then platonic.json + the projector beside the model,
    LICENSE.txt saying what is known of its terms, and the pyfunc flavor's loader pointed at
    `_load_pyfunc` below (MLmodel rewritten)."""
    from platonic.core.model_stack import import_model_stack

    import_model_stack("mlflow.transformers")  # transformers, one thread at a time
    import mlflow.transformers

    from platonic.core.export import LICENSE_FILE, license_text, write_extras

    mlflow.transformers.save_model(path=path, mlflow_model=mlflow_model, **kwargs)
    info, tensors = extras
    write_extras(Path(path), info, tensors)
    # mlflow.transformers wrote a placeholder (no hub repository to take a license from)
    (Path(path) / LICENSE_FILE).write_text(license_text(info))
    mlflow_model.flavors["python_function"]["loader_module"] = __name__
    mlflow_model.save(str(Path(path) / "MLmodel"))


def signature(width: int) -> Any:
    """Texts in, one float32 vector of `width` per text out."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema, TensorSpec

    return ModelSignature(
        inputs=Schema([ColSpec("string")]), outputs=Schema([TensorSpec(np.dtype("float32"), (-1, width))])
    )


def layer_of(info: dict[str, Any]) -> int:
    """The layer the card names: the evaluation's best, else the last (-1)."""
    layer = info.get("best_layer")
    return -1 if layer is None else int(layer)


class PooledEncoder:
    """The pyfunc model: texts -> masked mean (or, for a decoder whose platonic.json says
    `pooling_rule: last`, the last real token) of `hidden_states[layer]`, (N, D) float32."""

    def __init__(self, path: Path):
        from platonic.core.model_stack import import_model_stack

        import_model_stack()  # transformers, one thread at a time
        from transformers import AutoModel, AutoTokenizer

        meta = path / "platonic.json"
        self.info = json.loads(meta.read_text()) if meta.is_file() else {}
        self.layer = layer_of(self.info)
        self.pooling = self.info.get("pooling_rule", "mean")
        self.model = AutoModel.from_pretrained(path / "model").eval()
        self.tok = AutoTokenizer.from_pretrained(path / "components" / "tokenizer")

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> np.ndarray:
        import torch

        from platonic.core.models.pooling import pool_tokens

        texts = _texts(model_input)
        batch = self.tok(texts, padding=True, truncation=True, return_tensors="pt")
        # input_ids and attention_mask only, as the evaluation feeds them: a generic fast
        # tokenizer also returns token_type_ids, which GPT-2 would add as embeddings
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with torch.no_grad():
            h = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[self.layer]
        return pool_tokens(h, mask, self.pooling).float().numpy()


def _texts(model_input: Any) -> list[str]:
    """What pyfunc hands over (a DataFrame of one column after the signature's check, or a
    list, Series or array when called without one) as a list of str."""
    if isinstance(model_input, str):
        return [model_input]
    if hasattr(model_input, "iloc") and getattr(model_input, "ndim", 1) == 2:  # a DataFrame: its one column
        model_input = model_input.iloc[:, 0]
    return [str(t) for t in list(model_input)]


def _load_pyfunc(path: str, model_config: dict[str, Any] | None = None) -> PooledEncoder:
    """pyfunc's entry point: the model's local folder (MLmodel, model/, components/tokenizer/)."""
    return PooledEncoder(Path(path))
