"""A pretrained start for a text JEPA (`train.models.<m>.init`): post-training, not training.

    folder = init_folder("all-MiniLM-L6-v2")           # the packaged weights, offline
    tok = init_tokenizer(folder)                        # its WordPiece, no padding/truncation
    model = build_model(cfg, vocab_size=..., max_len=..., bert_config=init_bert_config(folder))
    load_init_weights(model, folder)                    # every encoder weight, checked

The encoder is the checkpoint's BERT as it ships (dropout off, as every model here trains);
the JEPA projector on top is new. The architecture travels in the train artifact's model.json
(`bert_config`), so a post-trained checkpoint loads without the pretrained folder.

A decoder starts the same way (`init: gemma-3-270m`, the GGUF a package ships, dequantised to
float32 by transformers as the reference row loads it; or a local folder whose config.json is
a `gemma3_text` one): `init_kind` tells the two apart, `init_decoder_config` is its model.json
architecture (`decoder_config`), and the encoder is models/decoder.py's `DecoderEncoder`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

if TYPE_CHECKING:
    from .decoder import DecoderEncoder
    from .text import TextEncoder


def init_source(init: str) -> tuple[Path, str | None]:
    """(folder, GGUF file name in it or None) of `init`: see init_folder."""
    from ..match.features import PACKAGED, packaged_model

    if init in PACKAGED:
        folder, gguf = packaged_model(init)
        return Path(folder), gguf
    return init_folder(init), None


def init_folder(init: str) -> Path:
    """The folder of `init`: a packaged model by name (match/features.py's PACKAGED; Gemma's is
    the folder of its GGUF file), else a local transformers folder holding config.json,
    model.safetensors and tokenizer.json."""
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


def init_tokenizer(folder: Path, gguf: str | None = None) -> Tokenizer:
    """The checkpoint's own fast tokenizer, padding and truncation off: `tokenizer.encode`
    pads and cuts to the views' max_len itself (a tokenizer.json saved for serving often pads
    every text to a fixed length, which would make every mask full). `gguf`: the tokenizer a
    GGUF file holds, as transformers converts it (Gemma's adds <bos>, as the reference row's)."""
    if gguf is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf).backend_tokenizer
    else:
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


def init_kind(folder: Path, gguf: str | None = None) -> str:
    """ "bert" (models/text.py's TextEncoder) or "decoder" (models/decoder.py's DecoderEncoder):
    what the checkpoint's config.json (or GGUF header) names; any other architecture refused."""
    from transformers import AutoConfig

    from .decoder import DECODER_TYPES

    model_type = AutoConfig.from_pretrained(str(folder), **({"gguf_file": gguf} if gguf else {})).model_type
    if model_type == "bert":
        return "bert"
    if model_type in DECODER_TYPES:
        return "decoder"
    raise ValueError(
        f"init {str(folder)!r}: a {model_type!r} model; a text_jepa starts from a BERT encoder or a "
        f"decoder of {', '.join(DECODER_TYPES)} (a multimodal gemma3 checkpoint: give its text model)"
    )


def init_decoder_config(folder: Path, gguf: str | None = None) -> dict:
    """The decoder's config as a dict (what model.json keeps as `decoder_config`): what
    differs from the config class's defaults, the sizes spelled out, dropout off."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(folder), **({"gguf_file": gguf} if gguf else {}))
    cfg.attention_dropout = 0.0
    cfg.use_cache = False  # a cache is for generation: training and features never reuse one
    keep = cfg.to_diff_dict()
    for key in ("transformers_version", "_name_or_path", "_model_name_or_path", "architectures", "dtype"):
        keep.pop(key, None)
    sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    for key in (*sizes, "head_dim", "intermediate_size", "max_position_embeddings", "tie_word_embeddings"):
        keep[key] = getattr(cfg, key)
    keep["model_type"] = cfg.model_type
    return dict(sorted(keep.items()))


def load_init_decoder(model: DecoderEncoder, folder: Path, gguf: str | None = None) -> None:
    """Every weight of `model.decoder` from the checkpoint, strict. A GGUF goes through
    transformers' `from_pretrained` (dequantised to float32, as the reference row loads it);
    a folder's model.safetensors is read as is (a causal LM's `model.` prefix dropped, its
    output layer only if it is the tied embeddings, which the encoder keeps once)."""
    import torch

    if gguf is not None:
        from transformers import AutoModel

        loaded = AutoModel.from_pretrained(str(folder), gguf_file=gguf, dtype=torch.float32)
        state = loaded.state_dict()
        del loaded
    else:
        from safetensors.torch import load_file

        state = load_file(str(folder / "model.safetensors"))
        if any(k.startswith("model.") for k in state):
            state = {k[len("model.") :] if k.startswith("model.") else k: v for k, v in state.items()}
        head = state.pop("lm_head.weight", None)
        if head is not None and not torch.equal(head, state.get("embed_tokens.weight", head[:0])):
            raise ValueError(
                f"init {str(folder)!r}: its output layer is not the tied embeddings (untied heads are not supported)"
            )
    try:
        model.decoder.load_state_dict(state, strict=True)
    except RuntimeError as err:
        why = " ".join(str(err).split())[:500]  # one line: transformers' message has tabs and newlines
        raise ValueError(f"init {str(folder)!r}: its weights do not fit the decoder: {why}") from None


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
