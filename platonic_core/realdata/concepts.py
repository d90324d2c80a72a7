"""The ImageNet-1k concept eval set: one item per class, its text from a template over the
class's WordNet synset, its image side a classifier's prototype row (`prototypes`). Items
are concepts, not image–caption pairs (docs/realdata.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ..match.data import prompts
from .hierarchy import DOG, NounHierarchy
from .imagenet import imagenet_names, imagenet_wnids

# the class text, from the synset's lemma list and definition
TEMPLATES = {
    "lemmas_definition": "{lemmas}: {definition}",  # the default
    "lemmas": "{lemmas}",
    "definition": "{definition}",
}


@dataclass(frozen=True)
class ConceptSet:
    wnids: list[str]  # in the classifier's row order
    texts: list[str]  # one per class, from `template`
    template: str
    hierarchy: NounHierarchy

    def leakage(self) -> set[str]:
        """The eval synsets and all their descendants: what training must not see."""
        return self.hierarchy.descendants(self.wnids)

    def subset(self, root: str = DOG) -> list[int]:
        """Class positions at or below `root` (DOG: the 118 dog classes)."""
        return self.hierarchy.subset_under(root, self.wnids)


def class_text(hierarchy: NounHierarchy, wnid: str, template: str = "lemmas_definition") -> str:
    if template not in TEMPLATES:
        raise ValueError(f"class text template {template!r} is not one of {sorted(TEMPLATES)}")
    s = hierarchy.synsets[wnid]
    return TEMPLATES[template].format(lemmas=s.lemma_text, definition=s.definition)


def load_concepts(
    hierarchy: NounHierarchy, template: str = "lemmas_definition", wnids: list[str] | None = None
) -> ConceptSet:
    """The ImageNet-1k classes (or `wnids`) with their texts; every wnid must be a synset."""
    wnids = list(imagenet_wnids() if wnids is None else wnids)
    missing = [w for w in wnids if w not in hierarchy.synsets]
    if missing:
        raise ValueError(f"{len(missing)} class wnids are not WordNet noun synsets (first: {missing[:3]})")
    return ConceptSet(wnids, [class_text(hierarchy, w, template) for w in wnids], template, hierarchy)


def name_prompts(templates: list[str], names: list[str] | None = None) -> list[str]:
    """The class names in prompt templates ("a photo of a {}."), class-major: class c's
    prompts are rows c·T .. c·T+T-1 (average them with match.matcher.class_features)."""
    return prompts(list(imagenet_names() if names is None else names), templates)
