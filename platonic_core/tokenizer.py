"""Tokenizer: a WordPiece vocabulary trained offline on the training texts (`tokenizers`).

All text models of one run share it, so differences between them come from the objective,
not the vocabulary. Specials: [PAD]=0, [UNK], [CLS] (start), [SEP] (end), [MASK].
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)]
    )
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, f"special token {s} is not id {i}"
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
