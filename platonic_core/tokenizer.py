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

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)


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


def encode(tok: Tokenizer, texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """texts -> (input_ids, attention_mask), both (N, T) int64, T = longest (<= max_len)."""
    encs = tok.encode_batch(texts)
    ids = [e.ids[: max_len - 1] + [SEP_ID] if len(e.ids) > max_len else e.ids for e in encs]
    t = max(len(i) for i in ids)
    out = torch.full((len(ids), t), PAD_ID, dtype=torch.long)
    for r, row in enumerate(ids):
        out[r, : len(row)] = torch.tensor(row)
    return out, (out != PAD_ID).long()
