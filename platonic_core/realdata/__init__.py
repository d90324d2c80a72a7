"""Real text against real vision models, offline: the ImageNet-1k classes as an eval set of
concepts. Text side: each class's WordNet 3.0 synset (lemmas + definition, or its names in
prompt templates); image side: an ImageNet classifier's class prototypes (the rows of its
final layer). See docs/realdata.md for the method and its limits.

Modules: `hierarchy` (the noun hypernym graph: ancestors, descendants, the dog subset),
`imagenet` (the 1,000 class wnids in the classifiers' row order, their names),
`concepts` (the eval set: class texts from a template, the leakage set), `prototypes`
(a classifier's class prototypes), `baselines` (TF-IDF of the class texts, the text-free
WordNet-ancestors vector).
"""

from .baselines import ancestor_vectors, tfidf_features
from .concepts import TEMPLATES, ConceptSet, load_concepts, name_prompts
from .hierarchy import DOG, NounHierarchy
from .imagenet import imagenet_names, imagenet_wnids
from .prototypes import CLASSIFIERS, classifier_prototypes

__all__ = [
    "CLASSIFIERS",
    "ConceptSet",
    "DOG",
    "NounHierarchy",
    "TEMPLATES",
    "ancestor_vectors",
    "classifier_prototypes",
    "imagenet_names",
    "imagenet_wnids",
    "load_concepts",
    "name_prompts",
    "tfidf_features",
]
