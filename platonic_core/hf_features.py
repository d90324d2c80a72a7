"""Features from any Hugging Face model, as platonic-rep extracts them.

- language models (BERT-like encoders, causal LMs such as Qwen or Llama, CLIP's text
  tower): every hidden state (embeddings first), pooled per text by the mean over real
  tokens (attention mask) or by the last real token;
- vision encoders (DINOv2, CLIP's vision tower): the CLS token of every block.

Loading goes through `from_pretrained` (a hub id with an optional revision pin, or a local
folder); `trust_remote_code` stays off unless the caller turns it on. No timm/torchvision:
images are prepared by transformers' PIL image processors.

    layers = hf_text_layer_features("Qwen/Qwen2.5-7B", texts, pooling="mean", dtype="bfloat16")
    layers = hf_image_layer_features("facebook/dinov2-base", images)
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from tqdm.auto import tqdm

from .models.pooling import pool_tokens


def _dtype(name: str) -> torch.dtype | str:
    return {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


@torch.no_grad()
def hf_text_layer_features(
    model_id: str,
    texts: list[str],
    pooling: str = "mean",
    batch_size: int = 32,
    revision: str | None = None,
    dtype: str = "auto",
    trust_remote_code: bool = False,
    max_length: int = 512,
    device: str | None = None,
    show_progress: bool = False,
    gguf_file: str | None = None,
    keep: int | None = None,
) -> list[np.ndarray]:
    """All hidden states of a text model, pooled: L+1 arrays of (N, D). `gguf_file`: load
    that GGUF file in the `model_id` folder/repo (transformers dequantises it; needs `gguf`).
    `keep`: only that layer (index into the L+1; -1 = the last), so memory holds one layer of N rows."""
    from .model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import AutoModel, AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gguf = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(model_id, revision=revision, trust_remote_code=trust_remote_code, **gguf)
    if tok.pad_token is None:  # causal LMs often have none: pad with EOS, masked out anyway
        tok.pad_token = tok.eos_token or tok.unk_token
    model = AutoModel.from_pretrained(
        model_id, revision=revision, dtype=_dtype(dtype), trust_remote_code=trust_remote_code, **gguf
    )
    if hasattr(model, "text_model") and hasattr(model, "vision_model"):  # a CLIP-like pair
        model = model.text_model
    model = model.to(device).eval()
    accepted = set(inspect.signature(model.forward).parameters)  # e.g. CLIP text takes no token_type_ids
    chunks: list[list[torch.Tensor]] = []
    for s in tqdm(range(0, len(texts), batch_size), desc=f"embed {model_id}", disable=not show_progress):
        enc = tok(
            texts[s : s + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        ).to(device)
        enc = {k: v for k, v in enc.items() if k in accepted}
        out = model(**enc, output_hidden_states=True)
        hidden = out.hidden_states if keep is None else (out.hidden_states[keep],)
        chunks.append([pool_tokens(h.float(), enc["attention_mask"], pooling).cpu() for h in hidden])
    return [torch.cat([c[i] for c in chunks]).numpy() for i in range(len(chunks[0]))]


@torch.no_grad()
def hf_image_layer_features(
    model_id: str,
    images,
    batch_size: int = 32,
    revision: str | None = None,
    dtype: str = "auto",
    trust_remote_code: bool = False,
    device: str | None = None,
    show_progress: bool = False,
    keep: int | None = None,
) -> list[np.ndarray]:
    """CLS token of every block of a vision encoder: L+1 arrays of (N, D). `images`: a
    sequence (sliced batch by batch, so it may load lazily) of PIL images or uint8 (H, W, 3)
    arrays. `keep`: only that layer (-1 = the last)."""
    from PIL import Image

    from .model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import AutoImageProcessor, AutoModel

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    proc = AutoImageProcessor.from_pretrained(model_id, revision=revision, backend="pil")  # PIL: no torchvision
    model = AutoModel.from_pretrained(
        model_id, revision=revision, dtype=_dtype(dtype), trust_remote_code=trust_remote_code
    )
    if hasattr(model, "vision_model"):  # CLIPModel -> its vision tower
        model = model.vision_model
    model = model.to(device).eval()

    def pil(im) -> Image.Image:
        return im if isinstance(im, Image.Image) else Image.fromarray(np.asarray(im, dtype=np.uint8))

    chunks: list[list[torch.Tensor]] = []
    for s in tqdm(range(0, len(images), batch_size), desc=f"embed {model_id}", disable=not show_progress):
        pics = [pil(im).convert("RGB") for im in images[s : s + batch_size]]  # one batch decoded at a time
        px = proc(images=pics, return_tensors="pt")["pixel_values"].to(device, model.dtype)
        out = model(pixel_values=px, output_hidden_states=True)
        hidden = out.hidden_states if keep is None else (out.hidden_states[keep],)
        chunks.append([h[:, 0].float().cpu() for h in hidden])  # CLS of every block
    return [torch.cat([c[i] for c in chunks]).numpy() for i in range(len(chunks[0]))]
