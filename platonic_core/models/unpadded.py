"""Padding-free forwards of transformers' BERT and GPT-2, through their own modules.

A batch of texts is padded to its longest text, and on the world and WordNet about 40% of
its positions are padding. Every position-wise layer (embeddings, the Q/K/V and output
projections, the MLP, the LayerNorms: most of a step's FLOPs) is computed here on the real
tokens only, packed into one (n, D) matrix; only attention, which mixes positions, sees the
padded (B, H, T, T) layout. The weights are the models' own (`BertModel`, `GPT2Model`), so
checkpoints, exports and `from_pretrained` are unchanged, and the result at every real
token equals the model's own forward (tests/test_unpadded.py: to 1e-5, values and gradients).

    h = bert_hidden(bert, input_ids, attention_mask)       # (B, T, D), zeros at padding
    h = gpt2_hidden(gpt2.transformer, input_ids, attention_mask)

Models whose config leaves the absolute-position, eager/sdpa layout these follow (relative
positions, cross-attention, a decoder BERT) fall back to their own forward (`supports_*`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from transformers import BertModel, GPT2Model


def _pad(x: torch.Tensor, real: torch.Tensor, b: int, t: int) -> torch.Tensor:
    """(n, C) rows of the real tokens -> (B, T, C), zeros at padding (differentiable)."""
    return x.new_zeros(b * t, x.size(-1)).index_copy(0, real, x).view(b, t, -1)


def _unpad(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """(B, T, C) -> (n, C): the real tokens' rows, in row-major order."""
    return x.reshape(-1, x.size(-1)).index_select(0, real)


class _Group(NamedTuple):
    """Texts of similar length padded to their own longest: attention's (B_g, H, T_g, T_g)."""

    rows: torch.Tensor  # (n_g,) their tokens' rows in the packed (n, ·) matrix
    real: torch.Tensor  # (n_g,) those tokens' flat positions in the group's (B_g, T_g) layout
    b: int
    t: int
    bias: torch.Tensor  # (B_g, 1, 1 or T_g, T_g): 0 where a query may attend, the dtype's min elsewhere


# Attention costs B·T² on the padded layout, and a batch's texts are ragged (the world's and
# WordNet's range about 3× in length): texts sorted by length, in up to this many equal-count
# groups, each padded to its own longest, cost 0.55-0.6 of one padded block on the demo's
# batches. Groups below MIN_GROUP texts are not worth a kernel call of their own.
GROUPS, MIN_GROUP = 3, 32


def attention_groups(attention_mask: torch.Tensor, causal: bool, dtype: torch.dtype) -> list[_Group]:
    """The batch's texts in groups by length (see GROUPS); the rows of each group's tokens in
    the packed matrix, whose order (row-major over (B, T)) is unchanged."""
    b, t = attention_mask.shape
    mask = attention_mask != 0
    width = (mask * torch.arange(1, t + 1, device=mask.device)).amax(1)  # (B,) last real position + 1
    k = max(1, min(GROUPS, b // MIN_GROUP))
    packed = torch.full((b, t), -1, dtype=torch.long, device=mask.device)
    packed[mask] = torch.arange(int(mask.sum()), device=mask.device)  # (B, T): row in the packed matrix
    lowest = torch.finfo(dtype).min
    groups = []
    order = width.argsort(stable=True) if k > 1 else torch.arange(b, device=mask.device)
    for seqs in order.tensor_split(k):  # equal counts, shortest first (one group: the batch as it is)
        t_g = int(width[seqs].max())
        m = mask[seqs, :t_g]  # (B_g, T_g)
        allowed = m[:, None, None, :]  # (B_g, 1, 1, T_g): keys that are real
        if causal:
            allowed = allowed & torch.ones(t_g, t_g, dtype=torch.bool, device=m.device).tril()  # (B_g, 1, T_g, T_g)
        bias = torch.zeros(allowed.shape, dtype=dtype, device=m.device).masked_fill(~allowed, lowest)
        real = m.reshape(-1).nonzero().squeeze(1)
        groups.append(_Group(packed[seqs, :t_g].reshape(-1)[real], real, len(seqs), t_g, bias))
    return groups


def _attend(qkv: torch.Tensor, groups: list[_Group], heads: int, scaling: float, dropout) -> torch.Tensor:
    """Multi-head attention of packed (n, 3D) q|k|v rows: softmax(q kᵀ · scaling + bias) v per
    group of texts (`attention_groups`), by torch's fused kernel; (n, D) in the packed order.
    Under CPU bf16 autocast it runs in fp32: torch's CPU kernel is slower in bf16 than in fp32
    (its backward; docs/training.md), and the GEMMs around it keep their bf16."""
    if qkv.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            return _attend(qkv.float(), groups, heads, scaling, dropout)
    d = qkv.size(-1) // 3
    p = dropout.p if dropout.training else 0.0
    outs = []
    for g in groups:
        x = qkv.index_select(0, g.rows)  # (n_g, 3D)
        qkv_g = _pad(x, g.real, g.b, g.t).view(g.b, g.t, 3, heads, d // heads)
        q, k, v = qkv_g.permute(2, 0, 3, 1, 4)  # 3 x (B_g, H, T_g, dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=g.bias, dropout_p=p, scale=scaling)  # (B_g, H, T_g, dh)
        outs.append(_unpad(out.transpose(1, 2).reshape(g.b, g.t, d), g.real))  # (n_g, D)
    if len(groups) == 1:
        return outs[0]
    order = torch.cat([g.rows for g in groups])  # packed row of each concatenated output row
    return torch.cat(outs).index_select(0, order.argsort())  # (n, D) in the packed order


def supports_bert(bert: BertModel) -> bool:
    c = bert.config
    return (
        getattr(c, "position_embedding_type", "absolute") == "absolute"
        and not c.is_decoder
        and not c.add_cross_attention
        and c._attn_implementation in ("eager", "sdpa")
    )


def bert_hidden(bert: BertModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """BertModel's last hidden state (B, T, D) at the real tokens, zeros at padding."""
    b, t = input_ids.shape
    real = attention_mask.reshape(-1).nonzero().squeeze(1)  # (n,) flat indices of real tokens
    emb = bert.embeddings
    x = (
        emb.word_embeddings(input_ids.reshape(-1).index_select(0, real))
        + emb.position_embeddings(real % t)  # absolute positions: the column
        + emb.token_type_embeddings.weight[0]  # one segment
    )
    x = emb.dropout(emb.LayerNorm(x))  # (n, D)
    groups = attention_groups(attention_mask, causal=False, dtype=x.dtype)
    for layer in bert.encoder.layer:
        sa, so = layer.attention.self, layer.attention.output
        w = torch.cat([sa.query.weight, sa.key.weight, sa.value.weight])  # (3D, D): one GEMM
        bq = torch.cat([sa.query.bias, sa.key.bias, sa.value.bias])
        a = _attend(F.linear(x, w, bq), groups, sa.num_attention_heads, sa.scaling, sa.dropout)
        x = so.LayerNorm(so.dropout(so.dense(a)) + x)  # post-LN residual
        h = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(x))  # (n, 4D)
        x = layer.output.LayerNorm(layer.output.dropout(layer.output.dense(h)) + x)
    return _pad(x, real, b, t)


def supports_gpt2(gpt2: GPT2Model) -> bool:
    c = gpt2.config
    return not c.add_cross_attention and not c.reorder_and_upcast_attn and c._attn_implementation in ("eager", "sdpa")


def gpt2_hidden(gpt2: GPT2Model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """GPT2Model's last hidden state (after ln_f), (B, T, D) at the real tokens, zeros at padding."""
    b, t = input_ids.shape
    real = attention_mask.reshape(-1).nonzero().squeeze(1)  # (n,)
    x = gpt2.drop(gpt2.wte(input_ids.reshape(-1).index_select(0, real)) + gpt2.wpe(real % t))  # (n, D)
    groups = attention_groups(attention_mask, causal=True, dtype=x.dtype)
    for block in gpt2.h:
        at, mlp = block.attn, block.mlp
        a = _attend(at.c_attn(block.ln_1(x)), groups, at.num_heads, at.scaling, at.attn_dropout)
        x = x + at.resid_dropout(at.c_proj(a))  # pre-LN residual
        x = x + mlp.dropout(mlp.c_proj(mlp.act(mlp.c_fc(block.ln_2(x)))))
    return _pad(gpt2.ln_f(x), real, b, t)
