"""Captions scored as the captioning literature scores them: pycocoevalcap.

Every caption (candidates and references) goes through the Stanford PTB tokenizer
(lower-cased, punctuation dropped), then BLEU-1..4, METEOR 1.5, ROUGE-L and CIDEr-D
(pycocoevalcap's `Cider`: n = 4, σ = 6, clipped, document frequencies from the references
of the images scored), reported ×100 as papers do. SPICE needs Stanford CoreNLP models
downloaded at first use and cannot run offline: it is not offered.

The PTB tokenizer and METEOR are Java programs: `require_java` fails with one line where
`java` is missing. All systems are tokenized in one Java call, and METEOR runs one process
for every system, so scoring many systems costs little more than scoring one.
"""

from __future__ import annotations

import shutil

METRIC_KEYS = {
    "bleu": ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4"),
    "meteor": ("METEOR",),
    "rouge": ("ROUGE-L",),
    "cider": ("CIDEr-D",),
}


class MissingJava(RuntimeError):
    """pycocoevalcap's PTB tokenizer and METEOR need a Java runtime."""


class MissingScorer(RuntimeError):
    """pycocoevalcap is not installed."""


def require_java() -> str:
    """The `java` on PATH, or MissingJava with one line saying what to install."""
    java = shutil.which("java")
    if java is None:
        raise MissingJava(
            "java not found on PATH: captions are scored with pycocoevalcap, whose PTB tokenizer and METEOR "
            "run on Java (install a JRE, e.g. `apt-get install default-jre-headless`)"
        )
    return java


def require_scorer() -> None:
    try:
        import pycocoevalcap  # noqa: F401
    except ImportError:
        raise MissingScorer(
            "pycocoevalcap is not installed: pip install 'platonic[caption]' (captions are scored with it)"
        ) from None


def ptb_tokenize(captions: dict[str, list[str]]) -> dict[str, list[str]]:
    """key -> captions, PTB-tokenized (lower case, no punctuation): one Java call."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    require_java()
    return PTBTokenizer().tokenize({k: [{"caption": c} for c in v] for k, v in captions.items()})


def score_systems(
    references: dict[str, list[str]],
    systems: dict[str, dict[str, str]],
    metrics: list[str],
    system_references: dict[str, dict[str, list[str]]] | None = None,
) -> dict[str, dict[str, float]]:
    """Corpus scores (×100) of every system: `systems[name][image id] = caption`, scored on
    the images it captions against `references[image id]` (or, for a system named in
    `system_references`, against its own reference sets: captions decoded from a true
    caption's embedding, never scored against the caption they decoded from)."""
    require_scorer()
    system_references = system_references or {}
    # one tokenizer call for everything: keys "<system>\t<image>" and "ref\t<set>\t<image>"
    raw: dict[str, list[str]] = {}
    for i, refs in references.items():
        raw[f"ref\t\t{i}"] = refs
    for name, refs in system_references.items():
        for i, r in refs.items():
            raw[f"ref\t{name}\t{i}"] = r
    for name, caps in systems.items():
        for i, c in caps.items():
            raw[f"{name}\t{i}"] = [c]
    tok = ptb_tokenize(raw)
    scorers = _scorers(metrics)
    out: dict[str, dict[str, float]] = {}
    for name, caps in systems.items():
        own = "\t" + name if name in system_references else "\t"
        gts = {i: tok[f"ref{own}\t{i}"] for i in caps}
        res = {i: tok[f"{name}\t{i}"] for i in caps}
        out[name] = {}
        for metric, scorer in scorers.items():
            if metric == "bleu":
                value, _ = scorer.compute_score(gts, res, verbose=0)
            else:
                value, _ = scorer.compute_score(gts, res)
            values = value if isinstance(value, list) else [value]
            out[name] |= {k: 100.0 * float(v) for k, v in zip(METRIC_KEYS[metric], values, strict=True)}
    return out


def _scorers(metrics: list[str]) -> dict:
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    make = {"bleu": lambda: Bleu(4), "rouge": Rouge, "cider": Cider}
    if "meteor" in metrics:
        from pycocoevalcap.meteor.meteor import Meteor

        require_java()
        make["meteor"] = Meteor
    return {m: make[m]() for m in metrics}
