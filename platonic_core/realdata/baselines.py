"""Reference features for the class texts that need no trained encoder: TF-IDF of the
texts, and a text-free vector of each class's WordNet ancestors. The ancestors vector
measures how much of an alignment score the hierarchy alone explains, so it stands next
to every score on these concepts (docs/realdata.md)."""

from __future__ import annotations

import numpy as np

from .hierarchy import NounHierarchy


def tfidf_features(texts: list[str]) -> np.ndarray:
    """(N, vocabulary) dense TF-IDF of the texts (scikit-learn's defaults: word unigrams,
    smoothed idf, l2-normalised rows), the idf fitted on these texts alone."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer().fit_transform(texts).toarray().astype(np.float32)


def ancestor_vectors(hierarchy: NounHierarchy, wnids: list[str], include_self: bool = False) -> np.ndarray:
    """(N, synsets) per class, its ancestors (and itself when `include_self`) as a bag,
    TF-IDF weighted over the N classes: an ancestor most classes share (entity, object)
    weighs little, a close one (dog, working dog) much. No text is read."""
    from sklearn.feature_extraction.text import TfidfTransformer

    bags = [hierarchy.ancestors(w) | ({w} if include_self else set()) for w in wnids]
    vocab = {a: j for j, a in enumerate(sorted(set().union(*bags)))}
    counts = np.zeros((len(wnids), len(vocab)), np.float32)
    for i, bag in enumerate(bags):
        counts[i, [vocab[a] for a in bag]] = 1.0
    return TfidfTransformer().fit_transform(counts).toarray().astype(np.float32)
