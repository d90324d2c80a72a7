"""Tiny local stand-ins for the paper's comparison, so `platonic compare` runs offline.

No weights can be downloaded here, so the comparison recipe is exercised on models built
from configs and saved with `save_pretrained` (the same `from_pretrained` path real models
take), and on an eval set in the PRH Parquet format made from the synthetic world:

- `text-bert` (BertModel), `lm-gpt2` (GPT2Model): the "HF LLM" rows
- `clip` (CLIPModel): its text tower is a row, its vision tower a column
- `dinov2` (Dinov2Model): the DINOv2 column
- `prh-world/`: N world scenes as {image, text: [caption]} rows, like `minhuh/prh`
- `karpathy-world/`: 2N world scenes with two captions each in the Karpathy JSON layout
  (half `train`, half `test`), for the Flickr retrieval protocol

Their numbers mean nothing (random weights); the real recipe swaps in hub ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def build_standins(out: Path, world_dir: Path | None = None, n: int = 64, seed: int = 0) -> dict[str, str]:
    import datasets
    import torch
    from PIL import Image

    from platonic.core.model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import (
        BertConfig,
        BertModel,
        BitImageProcessor,
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        Dinov2Config,
        Dinov2Model,
        GPT2Config,
        GPT2Model,
        PreTrainedTokenizerFast,
    )

    from platonic.core.config import WorldConfig
    from platonic.core.tokenizer import train_tokenizer
    from platonic.core.world import generate_world

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if world_dir is None:
        world_dir = out / "world"
        generate_world(WorldConfig(n_train=n, n_eval=n, seed=seed, eval_leak=0.0), world_dir)
    import pyarrow.parquet as pq

    caps = pq.read_table(world_dir / "eval_captions.parquet").to_pydict()
    scenes = pq.read_table(world_dir / "scenes.parquet").to_pydict()
    row = dict(zip(scenes["scene_id"], scenes["render_row"], strict=True))
    renders = np.load(world_dir / "renders.npy", mmap_mode="r")
    ids, texts = caps["scene_id"][:n], caps["text"][:n]
    images = [Image.fromarray(np.asarray(renders[row[i], 0])).resize((64, 64), Image.NEAREST) for i in ids]
    prh = out / "prh-world"
    prh.mkdir(exist_ok=True)
    datasets.Dataset.from_dict(
        {"image": images, "text": [[t] for t in texts]},
        features=datasets.Features({"image": datasets.Image(), "text": datasets.Sequence(datasets.Value("string"))}),
    ).to_parquet(str(prh / "train-00000-of-00001.parquet"))

    # a Karpathy-layout set: two recaptions per scene, train/test halves (Flickr protocol)
    from platonic.core.world import load_scenes, recaption, scene_rng

    kp = out / "karpathy-world"
    (kp / "images").mkdir(parents=True, exist_ok=True)
    wcfg = WorldConfig(seed=seed)
    all_scenes = load_scenes(world_dir)
    entries = []
    for k, sid in enumerate(sorted(all_scenes)[: 2 * n]):
        idx, scene, _ = all_scenes[sid]
        Image.fromarray(np.asarray(renders[row[sid], 0])).resize((64, 64), Image.NEAREST).save(
            kp / "images" / f"{sid}.png"
        )
        entries.append(
            {
                "filename": f"{sid}.png",
                "filepath": "images",
                "imgid": k,
                "split": "train" if k < n else "test",
                "sentences": [{"raw": recaption(scene, wcfg, scene_rng(seed, idx, 30, j))} for j in range(2)],
            }
        )
    (kp / "dataset_world.json").write_text(json.dumps({"images": entries}))
    texts_all = texts + [x["raw"] for e in entries for x in e["sentences"]]

    tok = train_tokenizer(texts_all, 300)
    specials = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")

    def save_tok(path: Path, **kw) -> None:
        PreTrainedTokenizerFast(tokenizer_object=tok, **specials, **kw).save_pretrained(path)

    vocab = tok.get_vocab_size()
    paths = {k: out / k for k in ("text-bert", "lm-gpt2", "clip", "dinov2")}
    BertModel(
        BertConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    ).save_pretrained(paths["text-bert"])
    save_tok(paths["text-bert"])
    GPT2Model(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=128)).save_pretrained(
        paths["lm-gpt2"]
    )
    save_tok(paths["lm-gpt2"])
    CLIPModel(
        CLIPConfig(
            text_config={
                "vocab_size": vocab,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "max_position_embeddings": 128,
                "pad_token_id": 0,
                "bos_token_id": 2,
                "eos_token_id": 3,
            },
            vision_config={
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "image_size": 32,
                "patch_size": 8,
            },
            projection_dim=16,
        )
    ).save_pretrained(paths["clip"])
    save_tok(paths["clip"], model_input_names=["input_ids", "attention_mask"])
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(paths["clip"])
    Dinov2Model(
        Dinov2Config(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
        )
    ).save_pretrained(paths["dinov2"])
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        paths["dinov2"]
    )
    return {k: str(v) for k, v in {**paths, "prh": prh, "karpathy": kp / "dataset_world.json"}.items()}


def build_generation_standins(out: Path, texts: list[str], seed: int = 0) -> dict[str, str]:
    """Tiny generators for the positives backends, built from configs (random weights) and
    saved with `save_pretrained`, so the real `from_pretrained` path runs offline:

    - `gen-lm/`: a GPT-2 causal LM (paraphrase) with a word-level tokenizer trained on `texts`;
    - `gen-captioner/`: a ViT encoder + GPT-2 decoder (VisionEncoderDecoderModel, captioning).

    Their outputs are word salad from the vocabulary of `texts`; they exercise the plumbing."""
    import torch

    from platonic.core.model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
        ViTImageProcessor,
    )

    from platonic.core.tokenizer import CLS_ID, PAD_ID, SEP_ID, train_tokenizer

    torch.manual_seed(seed)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(texts, 200),
        pad_token="[PAD]",
        unk_token="[UNK]",
        bos_token="[CLS]",
        eos_token="[SEP]",
        mask_token="[MASK]",
    )
    ids = {"vocab_size": len(tok), "bos_token_id": CLS_ID, "eos_token_id": SEP_ID, "pad_token_id": PAD_ID}
    small = {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 512}
    paths = {"lm": Path(out) / "gen-lm", "captioner": Path(out) / "gen-captioner"}
    GPT2LMHeadModel(GPT2Config(**small, **ids)).save_pretrained(paths["lm"])
    tok.save_pretrained(paths["lm"])
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
        ),
        GPT2Config(**small, **ids, add_cross_attention=True, is_decoder=True),
    )
    cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = CLS_ID, PAD_ID, SEP_ID
    VisionEncoderDecoderModel(cfg).save_pretrained(paths["captioner"])
    tok.save_pretrained(paths["captioner"])
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(paths["captioner"])
    return {k: str(v) for k, v in paths.items()}
