"""A pretrained start for a text JEPA (`train.models.<m>.init`): post-training, not training.

    folder = init_folder("all-MiniLM-L6-v2")           # the packaged weights, offline
    tok = init_tokenizer(folder)                        # its WordPiece, no padding/truncation
    model = build_model(cfg, vocab_size=..., max_len=..., bert_config=init_bert_config(folder))
    load_init_weights(model, folder)                    # every encoder weight, checked

The encoder is the checkpoint's BERT as it ships (dropout off, as every model here trains);
the JEPA projector on top is new. The architecture travels in the train artifact's model.json
(`bert_config`), so a post-trained checkpoint loads without the pretrained folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

if TYPE_CHECKING:
    from .text import TextEncoder


def init_folder(init: str) -> Path:
    """The folder of `init`: a packaged model by name (match/features.py's PACKAGED), else a
    local transformers folder holding config.json and model.safetensors."""
    from ..match.features import PACKAGED, packaged_model

    if init in PACKAGED:
        return Path(packaged_model(init)[0])
    folder = Path(init).expanduser()
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (folder / f).is_file()]
    if missing:
        raise ValueError(
            f"init {init!r}: not a packaged model ({', '.join(sorted(PACKAGED))}) nor a transformers folder "
            f"(missing {', '.join(missing)})"
        )
    return folder


def init_tokenizer(folder: Path) -> Tokenizer:
    """The checkpoint's own fast tokenizer, padding and truncation off: `tokenizer.encode`
    pads and cuts to the views' max_len itself (a tokenizer.json saved for serving often pads
    every text to a fixed length, which would make every mask full)."""
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def init_bert_config(folder: Path) -> dict:
    """The checkpoint's BertConfig as a dict, dropout off; refuses any other architecture."""
    from transformers import BertConfig

    cfg = BertConfig.from_pretrained(str(folder))
    if cfg.model_type != "bert":
        raise ValueError(f"init {str(folder)!r}: a {cfg.model_type!r} model; a text_jepa starts from a BERT encoder")
    cfg.hidden_dropout_prob = 0.0
    cfg.attention_probs_dropout_prob = 0.0
    keep = cfg.to_diff_dict()  # what differs from BertConfig's defaults: small and stable
    keep.pop("transformers_version", None)
    keep.pop("_name_or_path", None)
    # the sizes always spelled out (model.json reads as the architecture it is)
    sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    for key in (*sizes, "max_position_embeddings"):
        keep[key] = getattr(cfg, key)
    return dict(sorted(keep.items()))


def load_init_weights(model: TextEncoder, folder: Path) -> None:
    """Every weight of `model.bert` from the checkpoint (strict: none missing, none left over
    but the pooler, which a JEPA does not use)."""
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    prefix = "bert." if any(k.startswith("bert.") for k in state) else ""
    state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix) and "pooler." not in k}
    # an old BERT checkpoint keeps position_ids as a buffer: not a weight
    state.pop("embeddings.position_ids", None)
    missing, unexpected = model.bert.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"init {str(folder)!r}: weights missing {missing[:5]}, unexpected {unexpected[:5]}")
