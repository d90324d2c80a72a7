"""A decoder trained on text only: caption = LM(prefix(text embedding of that caption)).

Why a prefix: one conditioning vector becomes `prefix_len` input vectors in front of the
caption's tokens (ClipCap; CapDec trains it on text alone). It works with any transformers
causal LM as it is (only `inputs_embeds`), whereas cross-attention needs new, untrained
layers inside the LM and an architecture that has a slot for them. The LM never sees an
image: it learns to write a caption back from the frozen text encoder's embedding of it, and
at test time reads a mapped image feature in that embedding's place.

The conditioning is standardised per dimension with the training captions' statistics, and
while training Gaussian noise of std `noise` (in those units) is added to it (CapDec's
trick): a mapped image feature is never exactly a caption's embedding.

    dec = train_decoder(features, texts, cfg, seed, out)      # features: (N, D) of texts
    captions = generate(load_decoder(out), features_of_images)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

if TYPE_CHECKING:
    from ..config import DecoderConfig


class PrefixDecoder(nn.Module):
    """A causal LM whose input starts with `prefix_len` vectors made from one embedding."""

    def __init__(self, lm: nn.Module, cond_dim: int, prefix_len: int):
        super().__init__()
        self.lm = lm
        self.prefix_len = prefix_len
        width = lm.get_input_embeddings().embedding_dim
        hidden = max(width, prefix_len * width // 2)
        # ClipCap's MLP: embedding -> P input vectors of the LM's width
        self.prefix = nn.Sequential(nn.Linear(cond_dim, hidden), nn.Tanh(), nn.Linear(hidden, prefix_len * width))
        self.register_buffer("cond_mean", torch.zeros(cond_dim))
        self.register_buffer("cond_std", torch.ones(cond_dim))

    def prefix_embeds(self, cond: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        """(B, Dc) -> (B, P, W)."""
        z = (cond - self.cond_mean) / self.cond_std  # (B, Dc), unit spread per dimension
        if noise > 0:
            z = z + noise * torch.randn_like(z)
        return self.prefix(z).view(len(cond), self.prefix_len, -1)

    def loss(self, cond: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        """Next-token cross-entropy of the caption (`ids` = start, words, end; (B, T)) after the prefix."""
        pre = self.prefix_embeds(cond, noise)  # (B, P, W)
        tok = self.lm.get_input_embeddings()(ids)  # (B, T, W)
        x = torch.cat([pre, tok], 1)  # (B, P + T, W)
        am = torch.cat([torch.ones_like(mask[:, :1]).expand(-1, self.prefix_len), mask], 1)  # (B, P + T)
        logits = self.lm(inputs_embeds=x, attention_mask=am).logits  # (B, P + T, V)
        # the start token's position predicts the first word, ..., the last word predicts the end
        pred = logits[:, self.prefix_len : -1]  # (B, T - 1, V)
        target = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)  # (B, T - 1)
        return nn.functional.cross_entropy(pred.reshape(-1, pred.size(-1)), target.reshape(-1), ignore_index=-100)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_tokenizer(texts: list[str], cfg: DecoderConfig):
    """The decoder's tokenizer as a transformers fast tokenizer: a word-level vocabulary of
    the decoder texts (`scratch`, tokenizer.py: deterministic) or the LM's own (`hf`)."""
    from ..model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if cfg.source == "hf":
        tok = AutoTokenizer.from_pretrained(cfg.id, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
        if tok.eos_token_id is None:
            raise ValueError(f"decoder.id {cfg.id!r}: its tokenizer has no end-of-text token")
        return tok
    from ..tokenizer import train_tokenizer

    return PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(texts, cfg.vocab_size),
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[CLS]",
        eos_token="[SEP]",
        mask_token="[MASK]",
    )


def encode_captions(tok, texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """texts -> (ids, mask), (N, T): start token, the words (cut to fit), end token, padding."""
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows = [[start, *w[: max_len - 2], tok.eos_token_id] for w in tok(texts, add_special_tokens=False)["input_ids"]]
    t = max(len(r) for r in rows)
    ids = torch.full((len(rows), t), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), t), dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, : len(r)] = torch.tensor(r)
        mask[k, : len(r)] = 1
    return ids, mask


def build_lm(cfg: DecoderConfig, tok) -> nn.Module:
    from ..model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    if cfg.source == "hf":
        return AutoModelForCausalLM.from_pretrained(
            cfg.id, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code
        )
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok),
            n_embd=cfg.width,
            n_layer=cfg.layers,
            n_head=cfg.heads,
            n_positions=cfg.max_len + cfg.prefix_len,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    )


def heldout_split(groups: list[str], frac: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out rows) of texts whose images are `groups`: `frac` of the
    distinct images held out, every caption of an image on one side (a held-out caption's
    scene is never read in training). Fixed by `seed`, not by the decoder's seed: every seed
    is selected on the same split. `frac` 0: no held-out rows; any other `frac` holds out at
    least one image (a small corpus, e.g. the tiny stand-ins' 16 images at COCO's 1%)."""
    rows = np.arange(len(groups))
    if frac <= 0:
        return rows, rows[:0]
    images = sorted(set(groups))
    k = max(1, int(round(frac * len(images))))
    if not 1 <= k < len(images):
        raise ValueError(
            f"decoder.heldout {frac}: {len(images)} images cannot be split into training and held-out captions"
        )
    held = {images[j] for j in np.random.default_rng(seed).choice(len(images), k, replace=False)}
    out = np.array([g in held for g in groups])
    return rows[~out], rows[out]


class EarlyStopping:
    """The held-out losses of one training: the best so far (its step and a copy of the
    weights) and whether `patience` measurements in a row failed to improve on it."""

    def __init__(self, patience: int | None):
        self.patience = patience
        self.curve: list[tuple[int, float]] = []
        self.best_step, self.best_loss, self.best_state = -1, math.inf, None
        self.since_best = 0

    def update(self, step: int, loss: float, state: Callable[[], dict] | None = None) -> bool:
        """Record the held-out loss after `step`; True when it is the best so far (then
        `state()`, the weights to keep, is called)."""
        self.curve.append((step, loss))
        if loss < self.best_loss:
            self.best_step, self.best_loss, self.since_best = step, loss, 0
            self.best_state = state() if state is not None else None
            return True
        self.since_best += 1
        return False

    @property
    def stop(self) -> bool:
        return self.patience is not None and self.since_best >= self.patience


@torch.no_grad()
def heldout_loss(
    model: PrefixDecoder, cond: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, batch_size: int
) -> float:
    """Next-token cross-entropy per predicted token over all rows (clean conditioning, no
    noise: the selection must not depend on a noise draw)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for s in range(0, len(ids), batch_size):
        m = mask[s : s + batch_size]
        t = int(m.sum(1).max())
        n = int(m[:, 1:t].sum())  # the tokens predicted (all but each caption's start)
        loss = model.loss(
            cond[s : s + batch_size].to(device), ids[s : s + batch_size, :t].to(device), m[:, :t].to(device)
        )
        total, count = total + float(loss) * n, count + n
    model.train(was_training)
    return total / max(count, 1)


def train_decoder(
    cond: np.ndarray,
    texts: list[str],
    cfg: DecoderConfig,
    seed: int,
    out: Path,
    tok=None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    groups: list[str] | None = None,
) -> dict:
    """Fit the decoder on (embedding of a caption, that caption) and save it under `out`
    (lm/ via save_pretrained in safetensors, with the tokenizer; prefix.safetensors;
    decoder.json). cond: (N, Dc); `groups`: each text's image (None: one per text), so that
    the held-out split (cfg.heldout) keeps an image's captions together. Saved: the step with
    the lowest held-out loss (the last step when nothing is held out). Returns a summary
    (losses, steps, the held-out curve, the step kept)."""
    if len(cond) != len(texts):
        raise ValueError(f"{len(cond)} embeddings for {len(texts)} texts")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    tok = tok if tok is not None else build_tokenizer(texts, cfg)
    device = _device(cfg.device)
    train_rows, held_rows = heldout_split(groups if groups is not None else [str(k) for k in range(len(texts))],
                                          cfg.heldout)  # fmt: skip
    model = PrefixDecoder(build_lm(cfg, tok), cond.shape[1], cfg.prefix_len)
    c_all = torch.from_numpy(np.ascontiguousarray(cond, dtype=np.float32))  # (N, Dc)
    ids_all, mask_all = encode_captions(tok, texts, cfg.max_len)  # (N, T)
    c, ids, mask = c_all[train_rows], ids_all[train_rows], mask_all[train_rows]
    model.cond_mean.copy_(c.mean(0))
    model.cond_std.copy_(c.std(0).clamp_min(1e-6))
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warm = max(1, int(cfg.warmup_frac * cfg.steps))

    def lr_at(step: int) -> float:  # linear warmup, then cosine to a tenth at the budget
        if step < warm:
            return (step + 1) / warm
        p = (step - warm) / max(1, cfg.steps - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    stopper = EarlyStopping(cfg.patience)

    def weights() -> dict:
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    losses = []
    for step in range(cfg.steps):
        b = torch.randint(len(c), (cfg.batch_size,), generator=g)
        t = int(mask[b].sum(1).max())  # this batch's longest caption
        loss = model.loss(c[b].to(device), ids[b, :t].to(device), mask[b, :t].to(device), cfg.noise)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        done = step + 1
        logged = {}
        if len(held_rows) and (done % cfg.eval_every == 0 or done == cfg.steps):
            h = heldout_loss(model, c_all[held_rows], ids_all[held_rows], mask_all[held_rows], cfg.batch_size)
            stopper.update(done, h, weights)
            logged["heldout_loss"] = h
        if on_log is not None and (step % 50 == 0 or done == cfg.steps or logged):
            on_log(step, {"loss": float(np.mean(losses[-50:])), **logged})
        if stopper.stop:
            break
    if stopper.best_state is not None:
        model.load_state_dict(stopper.best_state)
    save_decoder(model.cpu(), tok, out)
    return {
        "steps": len(losses),
        "budget": cfg.steps,
        "stopped_early": len(losses) < cfg.steps,
        "kept_step": stopper.best_step if stopper.best_state is not None else len(losses),
        "heldout_loss": None if stopper.best_state is None else stopper.best_loss,
        "heldout_curve": stopper.curve,
        "heldout_texts": int(len(held_rows)),
        "train_texts": int(len(train_rows)),
        "final_loss": float(np.mean(losses[-50:])),
        "first_loss": losses[0],
    }


def save_decoder(model: PrefixDecoder, tok, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.lm.save_pretrained(out / "lm", safe_serialization=True)
    tok.save_pretrained(out / "lm")
    prefix = {f"prefix.{k}": v.contiguous() for k, v in model.prefix.state_dict().items()}
    save_file(prefix | {"cond_mean": model.cond_mean, "cond_std": model.cond_std}, str(out / "prefix.safetensors"))
    (out / "decoder.json").write_text(
        json.dumps({"cond_dim": int(model.cond_mean.numel()), "prefix_len": model.prefix_len}, indent=1)
    )


def load_decoder(folder: Path, device: str = "auto") -> tuple[PrefixDecoder, object]:
    """(decoder in eval mode, its tokenizer) from `save_decoder`'s folder: local files only,
    no remote code."""
    from ..model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = json.loads((folder / "decoder.json").read_text())
    lm = AutoModelForCausalLM.from_pretrained(folder / "lm", trust_remote_code=False)
    tok = AutoTokenizer.from_pretrained(folder / "lm", trust_remote_code=False)
    model = PrefixDecoder(lm, meta["cond_dim"], meta["prefix_len"])
    state = load_file(str(folder / "prefix.safetensors"))
    model.prefix.load_state_dict({k.removeprefix("prefix."): v for k, v in state.items() if k.startswith("prefix.")})
    model.cond_mean.copy_(state["cond_mean"])
    model.cond_std.copy_(state["cond_std"])
    return model.to(_device(device)).eval(), tok


@torch.no_grad()
def generate(
    model: PrefixDecoder, tok, cond: np.ndarray, max_new_tokens: int = 40, num_beams: int = 1, batch_size: int = 256
) -> list[str]:
    """A caption for each row of `cond` (N, Dc): the prefix, the start token, then greedy (or
    beam) decoding until the end token."""
    device = next(model.parameters()).device
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    emb = model.lm.get_input_embeddings()
    out: list[str] = []
    for s in range(0, len(cond), batch_size):
        c = torch.from_numpy(np.ascontiguousarray(cond[s : s + batch_size], dtype=np.float32)).to(device)
        pre = model.prefix_embeds(c)  # (B, P, W)
        first = emb(torch.full((len(c), 1), start, dtype=torch.long, device=device))  # (B, 1, W)
        x = torch.cat([pre, first], 1)  # (B, P + 1, W)
        ids = model.lm.generate(
            inputs_embeds=x,
            attention_mask=torch.ones(x.shape[:2], dtype=torch.long, device=device),
            max_new_tokens=max_new_tokens,
            num_beams=num_beams,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=pad,
        )  # (B, new tokens): with inputs_embeds only, generate returns the new tokens
        out += [t.strip() for t in tok.batch_decode(ids, skip_special_tokens=True)]
    return [_rejoin(t) for t in out] if _word_level(tok) else out


def _word_level(tok) -> bool:
    """A scratch decoder's tokenizer: words and punctuation split apart (tokenizer.py)."""
    from tokenizers.models import WordLevel

    return isinstance(getattr(getattr(tok, "backend_tokenizer", None), "model", None), WordLevel)


def _rejoin(text: str) -> str:
    """Undo the word-level split of hyphenated words ("left - hand" -> "left-hand"), which a
    PTB tokenizer would otherwise score as two words against references' one."""
    return re.sub(r"\s*-\s*", "-", text)
