"""A trained text encoder as a Hugging Face folder any code can load.

    platonic export RUN_ID DIR          # the CLI: a train stage run's artifact -> DIR
    AutoModel.from_pretrained(DIR); AutoTokenizer.from_pretrained(DIR)

text_jepa: the BERT encoder (`BertModel`), its tokenizer, and `projector.safetensors` (the
JEPA head, not part of the encoder); causal_lm: the GPT-2 (`GPT2LMHeadModel`; AutoModel
gives its transformer). `platonic.json` says how the project pooled it: the masked mean of a
layer's hidden states over tokens (the evaluation takes the best layer, `hidden_states[i]`).
The image encoder is not a transformers model and is not exported this way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import ModelConfig


def pretrained_parts(train_dir: Path, cfg: ModelConfig) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """(transformers model, tokenizer, platonic.json, extra tensor files) of a train artifact."""
    from transformers import PreTrainedTokenizerFast

    from .models import load_checkpoint

    if cfg.kind not in ("text_jepa", "causal_lm"):
        raise ValueError(f"a {cfg.kind} model is not a transformers model: only text encoders export")
    model = load_checkpoint(Path(train_dir), cfg)
    net = model.bert if cfg.kind == "text_jepa" else model.lm
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(Path(train_dir) / "tokenizer.json"),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=json.loads((Path(train_dir) / "model.json").read_text())["max_len"],
    )
    info = {
        "kind": cfg.kind,
        "views": cfg.views,
        "pooling": "masked mean over tokens of hidden_states[layer] (the evaluation takes the best layer)",
        "architecture": type(net).__name__,
    }
    tensors = {}
    if cfg.kind == "text_jepa":
        tensors["projector.safetensors"] = {k: v.contiguous() for k, v in model.proj.state_dict().items()}
        info["projector"] = "projector.safetensors (Linear-BN-GELU-Linear state dict; not part of the encoder)"
    return net, tok, info, tensors


def write_extras(dest: Path, info: dict[str, Any], tensors: dict[str, Any]) -> None:
    """platonic.json and the tensors that are not part of the transformers model."""
    from safetensors.torch import save_file

    for name, state in tensors.items():
        save_file(state, str(Path(dest) / name))
    (Path(dest) / "platonic.json").write_text(json.dumps(info, indent=1))


def export_pretrained(train_dir: Path, cfg: ModelConfig, dest: Path) -> dict[str, Any]:
    """Write `dest` (created; must be new or empty); returns what platonic.json says."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest}: not empty; give a new or empty folder")
    net, tok, info, tensors = pretrained_parts(train_dir, cfg)
    net.save_pretrained(dest)
    tok.save_pretrained(dest)
    write_extras(dest, info, tensors)
    return info
