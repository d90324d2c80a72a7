"""The WordNet noun hierarchy (hypernym pointers `@` and `@i`): ancestors of a synset,
descendants (the hyponym closure) of a set, for leakage removal and the dog subset."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..data.readers.wordnet import Synset, read_data_file

DOG = "n02084071"  # dog, domestic dog, Canis familiaris: its 118 ImageNet-1k descendants are the dog subset
WORDNET_NOUNS = Path("/usr/share/wordnet/data.noun")  # Debian's wordnet-base


class NounHierarchy:
    """Synsets by wnid, with their hypernym (parents) and hyponym (children) links."""

    def __init__(self, synsets: Iterable[Synset]):
        self.synsets: dict[str, Synset] = {s.wnid: s for s in synsets}
        self.parents: dict[str, tuple[str, ...]] = {w: s.hypernyms for w, s in self.synsets.items()}
        self.children: dict[str, list[str]] = {}
        for w, ps in self.parents.items():
            for p in ps:
                self.children.setdefault(p, []).append(w)

    @classmethod
    def read(cls, path: str | Path = WORDNET_NOUNS) -> NounHierarchy:
        """From a data.noun file; a missing file says how to install it."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no WordNet noun file (apt-get install wordnet-base)")
        return cls(read_data_file(path).synsets)

    def ancestors(self, wnid: str) -> set[str]:
        """Every hypernym above `wnid`, up to the root (several paths: all of them), itself excluded."""
        out: set[str] = set()
        todo = list(self.parents.get(wnid, ()))
        while todo:
            w = todo.pop()
            if w not in out:
                out.add(w)
                todo.extend(self.parents.get(w, ()))
        return out

    def descendants(self, wnids: Iterable[str]) -> set[str]:
        """The given synsets and every hyponym below them (the closure through hypernym pointers)."""
        out: set[str] = set()
        todo = list(wnids)
        while todo:
            w = todo.pop()
            if w not in out:
                out.add(w)
                todo.extend(self.children.get(w, ()))
        return out

    def subset_under(self, root: str, wnids: list[str]) -> list[int]:
        """Positions in `wnids` of the synsets at or below `root` (the dog classes under DOG)."""
        below = self.descendants([root])
        return [i for i, w in enumerate(wnids) if w in below]
