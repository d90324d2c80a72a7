"""Tokenizer: a word-level vocabulary built offline from the training texts (`tokenizers`).

All text models of one run share it, so differences between them come from the objective,
not the vocabulary. Specials: [PAD]=0, [UNK], [CLS] (start), [SEP] (end), [MASK].

Why word-level and built by hand: `tokenizers`' WordPiece/BPE trainers break frequency ties
in hash-map order, so the same texts give a different vocabulary in another process. That
breaks content addressing (the views artifact's digest) and bit-for-bit reruns. Here the
vocabulary is the `vocab_size − 5` most frequent words, ties broken alphabetically: the same
texts always give the same bytes. The synthetic world's vocabulary is closed (a few hundred
words); real corpora use a pretrained tokenizer (later issue).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

if TYPE_CHECKING:
    from .config import ViewsConfig

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)
DEFAULT_SPECIALS = {"pad": PAD_ID, "unk": UNK_ID, "cls": CLS_ID, "sep": SEP_ID, "mask": MASK_ID}


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    counts = Counter(w for t in texts for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(t)))
    words = sorted(counts, key=lambda w: (-counts[w], w))[: max(0, vocab_size - len(SPECIALS))]
    vocab = {s: i for i, s in enumerate(SPECIALS)} | {w: i + len(SPECIALS) for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)]
    )
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))


def encode(
    tok: Tokenizer, texts: list[str], max_len: int, specials: dict[str, int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """texts -> (input_ids, attention_mask), both (N, T) int64, T = longest (<= max_len)."""
    sp = specials or DEFAULT_SPECIALS
    encs = tok.encode_batch(texts)
    ids = [e.ids[: max_len - 1] + [sp["sep"]] if len(e.ids) > max_len else e.ids for e in encs]
    t = max(len(i) for i in ids)
    out = torch.full((len(ids), t), sp["pad"], dtype=torch.long)
    mask = torch.zeros((len(ids), t), dtype=torch.long)
    for r, row in enumerate(ids):
        out[r, : len(row)] = torch.tensor(row)
        mask[r, : len(row)] = 1
    return out, mask  # the mask from lengths: a pretrained vocabulary may reuse the pad id


# ---- subword tokenizers (trained offline) and pretrained ones by hub name ------

# in order of preference: Gemma's vocabulary has <bos>/<eos> and also "<s>"/"</s>" as
# ordinary tokens (ids 203/212), so its own names come before those
_SPECIAL_NAMES = {
    "pad": ["[PAD]", "<pad>", "<|pad|>"],
    "unk": ["[UNK]", "<unk>"],
    "cls": ["[CLS]", "<bos>", "<s>", "<|startoftext|>"],
    "sep": ["[SEP]", "<eos>", "</s>", "<|endoftext|>"],
    "mask": ["[MASK]", "<mask>"],
}


def special_ids(tok: Tokenizer) -> dict[str, int]:
    """pad/unk/cls/sep/mask ids of `tok`, by their usual names. Tokenizers built here have
    the built-in layout (0..4); a pretrained one keeps its own ids (bert-base-uncased: pad 0,
    unk 100, cls 101, sep 102, mask 103)."""
    out = {}
    for role, names in _SPECIAL_NAMES.items():
        ids = [tok.token_to_id(n) for n in names if tok.token_to_id(n) is not None]
        if not ids:
            raise ValueError(f"tokenizer has no {role} token (looked for {names})")
        out[role] = ids[0]
    return out


def train_subword_tokenizer(texts: list[str], vocab_size: int, kind: str) -> Tokenizer:
    """A WordPiece or byte-level-free BPE vocabulary trained on `texts` with `tokenizers`,
    specials at ids 0..4 as the word-level one. Its trainer breaks frequency ties in
    hash-map order, so rebuild it in one process (see the module note)."""
    from tokenizers import trainers

    normalizer = normalizers.BertNormalizer(lowercase=True)
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
        tok.decoder = decoders.WordPiece()
    elif kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
        tok.decoder = decoders.BPEDecoder()
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r} (word, wordpiece, bpe)")
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(sorted(texts), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)]
    )
    return tok


def pretrained_tokenizer(name: str) -> Tokenizer:
    """A pretrained fast tokenizer by hub name (or local folder), as a `tokenizers.Tokenizer`
    saved with the views. Needs the hub (or its cache); offline it fails with one line."""
    try:
        from .model_stack import import_model_stack

        import_model_stack()  # transformers, one thread at a time
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise RuntimeError(
            f"tokenizer {name!r} could not be loaded ({type(err).__name__}); it needs the Hugging Face hub or a "
            "local copy (HF_HOME cache or a folder path). Offline, use views.tokenizer: word|wordpiece|bpe"
        ) from err
    if not getattr(hf, "is_fast", False):
        raise RuntimeError(f"tokenizer {name!r} has no fast (tokenizers) version")
    tok = hf.backend_tokenizer
    # a causal LM's vocabulary (GPT-2) has no pad or mask token: add them at the end so
    # padding and bad-view masking have ids of their own
    for role, token in (("pad", "[PAD]"), ("mask", "[MASK]"), ("cls", "[CLS]"), ("sep", "[SEP]")):
        if not any(tok.token_to_id(n) is not None for n in _SPECIAL_NAMES[role]):
            tok.add_special_tokens([token])
    return tok


def build_tokenizer(texts: list[str], cfg: ViewsConfig) -> Tokenizer:
    """The views' tokenizer from `ViewsConfig`: pretrained by name, else trained here."""
    if cfg.tokenizer_name:
        return pretrained_tokenizer(cfg.tokenizer_name)
    if cfg.tokenizer == "word":
        return train_tokenizer(texts, cfg.vocab_size)
    return train_subword_tokenizer(texts, cfg.vocab_size, cfg.tokenizer)
