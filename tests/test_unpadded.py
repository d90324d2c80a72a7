"""The padding-free forwards (platonic_core/models/unpadded.py) against transformers' own:
the same hidden states at every real token and the same gradients, for BERT and GPT-2, with
ragged right padding, a one-token text and a full-length one."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

from platonic.core.models.unpadded import bert_hidden, gpt2_hidden


def _batch(b: int = 5, t: int = 9, vocab: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    lengths = torch.tensor([t, 1, 4, t - 1, 6])[:b]
    mask = (torch.arange(t)[None] < lengths[:, None]).long()  # (B, T)
    return ids.masked_fill(mask == 0, 0), mask


def _bert(attention: str) -> BertModel:
    torch.manual_seed(1)
    cfg = BertConfig(
        vocab_size=40,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation=attention,
    )
    return BertModel(cfg, add_pooling_layer=False)


def _gpt2(attention: str, activation: str = "gelu_pytorch_tanh", inverse_idx: bool = False) -> GPT2Model:
    torch.manual_seed(2)
    cfg = GPT2Config(
        vocab_size=40,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=16,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        activation_function=activation,
        attn_implementation=attention,
        scale_attn_by_inverse_layer_idx=inverse_idx,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=0,
    )
    return GPT2Model(cfg)


def _check(model, ours, ids, mask) -> None:
    real = mask.bool()
    theirs = model(input_ids=ids, attention_mask=mask).last_hidden_state
    mine = ours(model, ids, mask)
    torch.testing.assert_close(mine[real], theirs[real], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(mine[~real]) == 0  # padding: zeros
    # gradients of a loss over the real tokens, for every parameter
    w = torch.randn(theirs.shape[-1])
    g_theirs = torch.autograd.grad((theirs[real] @ w).square().sum(), list(model.parameters()), allow_unused=True)
    g_mine = torch.autograd.grad((mine[real] @ w).square().sum(), list(model.parameters()), allow_unused=True)
    for (name, _), a, b in zip(model.named_parameters(), g_theirs, g_mine, strict=True):
        if a is None or b is None:
            assert a is None or torch.count_nonzero(a) == 0, name  # unused by ours: unused by theirs
            continue
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_bert_hidden_equals_bert_model(attention):
    _check(_bert(attention), bert_hidden, *_batch())


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("inverse_idx", [False, True])
def test_gpt2_hidden_equals_gpt2_model(attention, inverse_idx):
    _check(_gpt2(attention, inverse_idx=inverse_idx), gpt2_hidden, *_batch())


def test_gpt2_hidden_with_gpt2s_own_gelu():
    _check(_gpt2("eager", activation="gelu_new"), gpt2_hidden, *_batch())


def test_a_change_at_a_padded_position_changes_nothing():
    """What sits under padding is never read: ids there do not move any real token."""
    ids, mask = _batch()
    model = _bert("eager")
    before = bert_hidden(model, ids, mask)
    ids2 = ids.masked_fill(mask == 0, 7)
    torch.testing.assert_close(bert_hidden(model, ids2, mask), before)
    gpt = _gpt2("eager")
    torch.testing.assert_close(gpt2_hidden(gpt, ids2, mask), gpt2_hidden(gpt, ids, mask))


def test_attention_runs_in_fp32_under_cpu_bf16_autocast(monkeypatch):
    """Under CPU bf16 autocast the projections run in bf16 and attention in fp32 (torch's CPU
    attention backward is slower in bf16): the kernel sees fp32 q, k, v; the hidden states
    are those of the fp32 model up to bf16 rounding of the projections."""
    import platonic.core.models.unpadded as unpadded

    seen = []
    sdpa = unpadded.F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append(q.dtype)
        return sdpa(q, k, v, **kw)

    monkeypatch.setattr(unpadded.F, "scaled_dot_product_attention", spy)
    ids, mask = _batch()
    model = _bert("sdpa")
    fp32 = bert_hidden(model, ids, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = bert_hidden(model, ids, mask)
    assert seen and set(seen) == {torch.float32}, seen
    torch.testing.assert_close(mixed.float(), fp32, rtol=0.05, atol=0.05)
    assert not torch.equal(mixed.float(), fp32)  # the projections did run in bf16
