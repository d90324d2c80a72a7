"""A trained text encoder as a Hugging Face folder any code can load.

    platonic export RUN_ID DIR          # the CLI: a train stage run's artifact -> DIR
    AutoModel.from_pretrained(DIR); AutoTokenizer.from_pretrained(DIR)

text_jepa: the BERT encoder (`BertModel`) or, post-trained from a decoder, the Gemma-3 text
model (`Gemma3TextModel`, what AutoModel gives for its config), its tokenizer, and
`projector.safetensors` (the JEPA head, not part of the encoder); causal_lm: the GPT-2 (`GPT2LMHeadModel`; AutoModel
gives its transformer). `platonic.json` says how the project pooled it: the masked mean of a
layer's hidden states over tokens (the evaluation takes the best layer, `hidden_states[i]`),
or for a decoder whose recipe says `pooling: last` the last real token (`pooling_rule`).
With provenance (the CLI gathers it from MLflow), the folder is hub-ready: `platonic.json`
also holds the train run, the commit, the recipe digest, the scores and the best layer;
`config.json` carries `platonic_pooling` and `platonic_layer` (what `model.config` shows a
transformers user); `README.md` is a model card with the metadata header the hub reads.
`modules.json`, `sentence_bert_config.json` and `1_Pooling/` make the folder a
sentence-transformers model too: `SentenceTransformer(DIR)` gives the masked mean of the last
layer (the card's features when the evaluation's layer is the last, as post-training scores it).
The image encoder is not a transformers model and is not exported this way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import ModelConfig

# the hub ids of the packaged weights a post-training run starts from (`init:`, match/features.py's PACKAGED)
HUB_IDS = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2", "gemma-3-270m": "google/gemma-3-270m"}
# their licenses as the hub names them (their model cards' `license:`)
BASE_LICENSES = {"sentence-transformers/all-MiniLM-L6-v2": "apache-2.0", "google/gemma-3-270m": "gemma"}
LICENSE_FILE = "LICENSE.txt"  # the name mlflow.transformers gives its license file: ours replaces its placeholder


def pretrained_parts(train_dir: Path, cfg: ModelConfig) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """(transformers model, tokenizer, platonic.json, extra tensor files) of a train artifact."""
    from .model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers import PreTrainedTokenizerFast

    if cfg.kind not in ("text_jepa", "causal_lm"):
        raise ValueError(f"a {cfg.kind} model is not a transformers model: only text encoders export")
    from .models import DecoderEncoder, load_checkpoint

    model = load_checkpoint(Path(train_dir), cfg)
    decoder = isinstance(model, DecoderEncoder)
    net = model.decoder if decoder else model.bert if cfg.kind == "text_jepa" else model.lm
    if cfg.kind == "text_jepa" and not decoder and net.pooler is None:
        _add_unused_pooler(net)
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(Path(train_dir) / "tokenizer.json"),
        **_special_tokens(Path(train_dir) / "tokenizer.json", decoder),
        model_max_length=json.loads((Path(train_dir) / "model.json").read_text())["max_len"],
    )
    rule = model.pooling if decoder else "mean"
    how = "masked mean over tokens" if rule == "mean" else "the last real token"
    info = {
        "kind": cfg.kind,
        "views": cfg.views,
        "pooling": f"{how} of hidden_states[layer] (the evaluation takes the best layer)",
        "architecture": type(net).__name__,
        "last_layer": net.config.num_hidden_layers,  # hidden_states[last_layer]: what sentence-transformers pools
    }
    if decoder:  # new keys only where there were none before (BERT exports unchanged)
        info["pooling_rule"] = rule
    if cfg.init is not None:
        info["objective"] = cfg.objective
    if cfg.init in HUB_IDS:  # post-trained from weights a package ships: the hub model they are
        info["base_model"] = HUB_IDS[cfg.init]
    tensors = {}
    if cfg.kind == "text_jepa":
        tensors["projector.safetensors"] = {k: v.contiguous() for k, v in model.proj.state_dict().items()}
        info["projector"] = "projector.safetensors (Linear-BN-GELU-Linear state dict; not part of the encoder)"
    return net, tok, info, tensors


def _special_tokens(tokenizer_file: Path, decoder: bool) -> dict[str, str]:
    """The tokenizer's special tokens by role, as PreTrainedTokenizerFast names them: a BERT's
    [CLS]/[SEP], a decoder's <bos>/<eos> (tokenizer.py's special_ids finds either)."""
    from tokenizers import Tokenizer

    from .tokenizer import special_ids

    tok = Tokenizer.from_file(str(tokenizer_file))
    name = {role: tok.id_to_token(i) for role, i in special_ids(tok).items()}
    bos, eos = ("bos_token", "eos_token") if decoder else ("cls_token", "sep_token")
    return {
        "pad_token": name["pad"],
        "unk_token": name["unk"],
        bos: name["cls"],
        eos: name["sep"],
        "mask_token": name["mask"],
    }


def _add_unused_pooler(net: Any) -> None:
    """The encoder is trained without BERT's pooler (it is pooled by a masked mean), but
    AutoModel builds BertModel with one, and a checkpoint without its weights reloads with
    "pooler.dense.* newly initialized". Ship a zero pooler instead: nothing is initialised at
    random on load, and `pooler_output` is plainly not a feature (all zeros, not trained)."""
    import torch

    from .model_stack import import_model_stack

    import_model_stack()  # transformers, one thread at a time
    from transformers.models.bert.modeling_bert import BertPooler

    pooler = BertPooler(net.config)
    with torch.no_grad():
        pooler.dense.weight.zero_()
        pooler.dense.bias.zero_()
    net.pooler = pooler


def write_extras(dest: Path, info: dict[str, Any], tensors: dict[str, Any]) -> None:
    """platonic.json and the tensors that are not part of the transformers model."""
    from safetensors.torch import save_file

    for name, state in tensors.items():
        save_file(state, str(Path(dest) / name))
    (Path(dest) / "platonic.json").write_text(json.dumps(info, indent=1))


def write_sentence_transformers(dest: Path, dim: int, max_len: int, pooling: str = "mean") -> None:
    """The files `SentenceTransformer(dest)` reads: transformers' model in the folder itself,
    then mean pooling over the real tokens of its last hidden state, or its last real token
    (`pooling: last`) (no normalisation)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (dest / "modules.json").write_text(json.dumps(modules, indent=1))
    (dest / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_len, "do_lower_case": False}))
    modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens"]
    if pooling != "mean":  # the key is written only where it is used (mean exports unchanged)
        modes.append("lasttoken")
    want = "mean_tokens" if pooling == "mean" else "lasttoken"
    flags = {f"pooling_mode_{m}": m == want for m in modes}
    (dest / "1_Pooling").mkdir()
    (dest / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": dim, **flags}, indent=1))


def check_dest(dest: Path) -> Path:
    """`dest` as a Path if it is a new or empty folder, else ValueError naming it. Reads
    nothing: `platonic export` calls it before it loads MLflow and the model."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{dest}: not a folder; give a new or empty folder")
    # a folder cannot be made below a file: save_pretrained's NotADirectoryError was a traceback
    if above := next((p for p in dest.parents if p.exists() and not p.is_dir()), None):
        raise ValueError(f"{dest}: {above} is a file, not a folder; give a new or empty folder")
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest}: not empty; give a new or empty folder")
    return dest


def export_pretrained(
    train_dir: Path, cfg: ModelConfig, dest: Path, provenance: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write `dest` (created; must be new or empty); returns what platonic.json says.
    `provenance`: where the model came from and how it scored (run ids, commit, recipe
    digest, `scores`, `best_layer`), written to platonic.json, config.json and the card."""
    dest = check_dest(dest)
    net, tok, info, tensors = pretrained_parts(train_dir, cfg)
    info = {**info, **(provenance or {})}
    # what a transformers user sees in model.config: how to pool, and which layer scored best
    rule = info.get("pooling_rule", "mean")
    net.config.platonic_pooling = "masked_mean" if rule == "mean" else "last_token"
    if info.get("best_layer") is not None:
        net.config.platonic_layer = int(info["best_layer"])
    net.save_pretrained(dest)
    tok.save_pretrained(dest)
    write_extras(dest, info, tensors)
    write_sentence_transformers(dest, net.config.hidden_size, tok.model_max_length, rule)
    (dest / LICENSE_FILE).write_text(license_text(info))
    (dest / "README.md").write_text(model_card(info, folder=dest.resolve()))
    return info


def license_text(info: dict[str, Any]) -> str:
    """LICENSE.txt: what is known of the weights' terms. platonic declares no license (its
    pyproject.toml has no `license` field, its repository no LICENSE file), so the file says
    so instead of naming one; weights post-trained from a hub model keep that model's terms."""
    lines = [
        "No license is declared for these weights.",
        "",
        "They were trained by platonic (Proving and Improving the Platonic Representation Hypothesis with",
        "JEPAs), which declares no license: its pyproject.toml has no `license` field and its repository",
        "holds no LICENSE file. No terms are granted here; ask the authors before reusing the weights.",
    ]
    if base := info.get("base_model"):
        lines += [
            "",
            f"They were post-trained from {base} (https://huggingface.co/{base}), whose license",
            f"({BASE_LICENSES.get(base, 'see its model card')}) applies to what they keep of it.",
        ]
    return "\n".join(lines) + "\n"


def model_card(info: dict[str, Any], folder: Path | None = None) -> str:
    """A Hugging Face model card: the YAML header the hub reads (library, pipeline tag,
    tags, license, base model, training data), then how to load and pool the encoder, its
    scores beside their references, and where it came from. `folder`: where the card is
    written (the code then loads that folder as printed); without it the code names a
    placeholder to replace."""
    causal = info["kind"] == "causal_lm"
    last = info.get("pooling_rule") == "last"
    decoder = info["architecture"].startswith("Gemma3")
    encoder = "Gemma-3 decoder" if decoder else "BERT encoder"
    objective = "next-token prediction (GPT-2)" if causal else f"JEPA, {info['views']} views ({encoder})"
    if info.get("objective") in ("infonce", "next_token"):  # a post-trained encoder's own objective
        own = {"infonce": "in-batch InfoNCE", "next_token": "next-token prediction"}[info["objective"]]
        objective = f"{own} on {info['views']} views ({encoder})"
    name = info.get("registered_name") or f"platonic-{info['kind']}-{info['views']}"
    layer = info.get("best_layer")
    header = [
        "---",
        "library_name: transformers",
        f"pipeline_tag: {'text-generation' if causal else 'feature-extraction'}",
        "tags:",
        "- platonic",
        "- platonic-representation-hypothesis",
        "- sentence-transformers",
        f"- {'next-token' if causal else 'jepa'}",
        # no license is declared (license_text): `other`, named and linked to the file that says so
        "license: other",
        "license_name: none-declared",
        f"license_link: {LICENSE_FILE}",
        *([f"base_model: {info['base_model']}"] if info.get("base_model") else []),
        *(["datasets:", *(f"- {d}" for d in info["datasets"])] if info.get("datasets") else []),
        "---",
    ]
    where = (
        f"folder = {str(folder)!r}  # this card's folder"
        if folder is not None
        else 'folder = "path/to/model"  # replace: the folder holding this card (platonic export RUN_ID DIR wrote it)'
    )
    use = "layer = model.config.platonic_layer  # the evaluation's best layer"
    if layer is None:
        use = "layer = -1  # no evaluation recorded: the last layer"
    body = [
        f"# {name}",
        "",
        f"A text encoder trained by `platonic` (Proving and Improving the Platonic Representation Hypothesis "
        f"with JEPAs): {objective}. Architecture `{info['architecture']}`.",
        "",
        "## Use",
        "",
        (
            "The features are the last real token of one layer's hidden states (`hidden_states[layer]`)."
            if last
            else "The features are the masked mean over tokens of one layer's hidden states "
            "(`hidden_states[layer]`), not the pooler"
            + (" (it is all zeros and was never trained)." if not (causal or decoder) else ".")
        ),
        "",
        "```python",
        "import torch",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        where,
        "model, tok = AutoModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)",
        use,
        'batch = tok(["a small red circle"], padding=True, return_tensors="pt")',
        "with torch.no_grad():",
        "    h = model(**batch, output_hidden_states=True).hidden_states[layer]",
        *(
            [
                'last = batch["attention_mask"].sum(1) - 1  # right padding: the last real position',
                "features = h[torch.arange(h.size(0)), last]",
            ]
            if last
            else [
                'mask = batch["attention_mask"].unsqueeze(-1).to(h.dtype)',
                "features = (h * mask).sum(1) / mask.sum(1)",
            ]
        ),
        "```",
        "",
        "With sentence-transformers, `SentenceTransformer(folder).encode(texts)` gives the "
        + ("last real token" if last else "masked mean")
        + " of the last layer (`hidden_states[-1]`)"
        + (
            " (the evaluation's layer)."
            if layer is None or layer == info.get("last_layer")
            else f"; the evaluation's layer is {layer}, above."
        ),
        "",
    ]
    if (versions := info.get("registered_versions")) and info.get("registered_name"):
        uri = f"models:/{info['registered_name']}/{versions[-1]['version']}"
        body += [
            f'From the MLflow store it was logged to (`MLFLOW_TRACKING_URI`), `mlflow.pyfunc.load_model("{uri}")'
            '.predict(["a small red circle"])` gives the same features, at the evaluation\'s layer.',
            "",
        ]
    scores = info.get("scores") or {}
    if scores:
        body += ["## Evaluation", "", "| metric | value |", "|---|---|"]
        for k, v in sorted(scores.items()):  # layers are indices; the rest are scores
            body.append(f"| {k} | {int(v)} |" if "layer" in k else f"| {k} | {v:.4f} |")
        body += [
            "",
            "`mutual_knn`: mutual k-nearest-neighbour alignment with the recipe's image encoder "
            "(Huh et al. 2024), with its 95% bootstrap interval; `chance` is k / (n - 1); `fraction_of_ceiling`: "
            "the score over the learned ceiling of the synthetic world. Scores of tiny or synthetic recipes "
            "are not claims about real data.",
            "",
        ]
    else:
        body += ["## Evaluation", "", "No evaluation run of this model was found in its MLflow store.", ""]
    keys = ("run_id", "model_id", "evaluation_run_id", "flow_run_id", "prefect_flow_run_id")
    keys += ("recipe", "config_digest", "git_commit")
    prov = [f"| {k} | `{info[k]}` |" for k in (*keys, "cache_key", "digest") if info.get(k)]
    if prov:
        body += ["## Provenance", "", "| field | value |", "|---|---|", *prov, ""]
    body += ["Everything above is also in `platonic.json`.", ""]
    return "\n".join(header + body)
