"""Text models: a BERT encoder for JEPAs and a GPT-2 of the same size for next-token.

Both are real transformers models built from a config (no hub download), so the same code
loads `bert-base-uncased`-sized presets later.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

from ..objectives import next_token_loss
from .pooling import masked_mean
from .projector import projector
from .unpadded import bert_hidden, gpt2_hidden, supports_bert, supports_gpt2


class TextEncoder(nn.Module):
    """BERT encoder; embedding = mean of the last hidden state over tokens."""

    def __init__(
        self,
        vocab_size: int,
        width: int,
        layers: int,
        heads: int,
        proj_dim: int,
        max_len: int,
        attention: str = "eager",
        special_ids: dict[str, int] | None = None,
        proj_hidden: Sequence[int] | None = None,
        proj_act: str = "gelu",
        bert_config: dict | None = None,
    ):
        """`bert_config`: a pretrained encoder's architecture (models/pretrained.py), which
        then replaces vocab_size/width/layers/heads/max_len; its weights are loaded after."""
        super().__init__()
        sp = special_ids or {}
        if bert_config is not None:
            config = BertConfig(**bert_config)
            config._attn_implementation = attention
        else:
            config = BertConfig(
                attn_implementation=attention,
                vocab_size=vocab_size,
                hidden_size=width,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                intermediate_size=4 * width,
                max_position_embeddings=max_len,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
                pad_token_id=sp.get("pad", 0),
            )
        self.bert = BertModel(config, add_pooling_layer=False)
        self.proj = projector(config.hidden_size, proj_dim, proj_hidden, proj_act)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if supports_bert(self.bert):  # padding costs no work (models/unpadded.py)
            h = bert_hidden(self.bert, input_ids, attention_mask)  # (B, T, D)
        else:
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        emb = masked_mean(h, attention_mask)  # (B, D)
        return emb, self.proj(emb)  # (B, D), (B, K)

    @torch.no_grad()
    def layer_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return [masked_mean(h, attention_mask) for h in out.hidden_states]  # L+1 x (B, D)


class CausalLM(nn.Module):
    """GPT-2 language model of the encoder's width and depth."""

    def __init__(
        self,
        vocab_size: int,
        width: int,
        layers: int,
        heads: int,
        max_len: int,
        attention: str = "eager",
        special_ids: dict[str, int] | None = None,
        tie_embeddings: bool = True,
    ):
        super().__init__()
        sp = special_ids or {}
        self.lm = GPT2LMHeadModel(
            GPT2Config(
                attn_implementation=attention,
                vocab_size=vocab_size,
                n_embd=width,
                n_layer=layers,
                n_head=heads,
                n_positions=max_len,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                bos_token_id=sp.get("cls", 2),
                eos_token_id=sp.get("sep", 3),
                pad_token_id=sp.get("pad", 0),
                tie_word_embeddings=tie_embeddings,
                # GPT-2's tanh GELU as one fused kernel (gelu_new is the same formula in five ops)
                activation_function="gelu_pytorch_tanh",
            )
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, loss: str | None = None) -> torch.Tensor:
        """The logits (B, T, V); with `loss` ("mean" or "sum") the next-token loss instead, the
        output layer fused into it (no (B, T, V) logits kept): how training calls it, so the
        call goes through forward (DDP, torch.compile) and only real targets meet the vocabulary."""
        tr = self.lm.transformer
        if supports_gpt2(tr):  # padding costs no work (models/unpadded.py)
            h = gpt2_hidden(tr, input_ids, attention_mask)  # (B, T, D)
        else:
            h = tr(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if loss is None:
            return self.lm.lm_head(h)  # (B, T, V)
        return next_token_loss(h, self.lm.lm_head.weight, input_ids, attention_mask, loss)

    @torch.no_grad()
    def layer_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        out = self.lm.transformer(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return [masked_mean(h, attention_mask) for h in out.hidden_states]  # L+1 x (B, D)
