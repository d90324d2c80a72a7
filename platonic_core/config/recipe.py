"""What a recipe is and how one is read, for every flow: `ConfigError`, the `Section` base
every section derives from and the field types they share (`Seed`, `Threads`), the bounded
YAML loader, `--set` overrides, validation with one-line errors, and the stable hash that
cache keys are made of. The flows' sections live beside this module (see __init__.py)."""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from ..resources import read_resource

if TYPE_CHECKING:
    from .pipeline import PipelineConfig


class ConfigError(ValueError):
    """A bad recipe or override. The message is one line, meant for the user."""


class Section(BaseModel):
    # no float field of a recipe means anything at inf or NaN: refused here, not deep in a stage
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # fields added after cache keys were published: left out of the dump (the cache keys, the
    # MLflow params) while they hold their default, so adding a knob to a section leaves every
    # recipe that does not set it on its cached artifacts; set, they are keyed as any field
    added_fields: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_added_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in self.added_fields:
            if name in data and getattr(self, name) == type(self).model_fields[name].default:
                del data[name]
        return data


# every seed reaches numpy, torch or scikit-learn; numpy's legacy seeding and scikit-learn's
# random_state take 0 .. 2**32 - 1 (the code adds offsets only inside SeedSequences and
# torch generators, which take far more)
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


# MLflow's own limits (mlflow.utils.validation: MAX_EXPERIMENT_NAME_LENGTH and
# MAX_ENTITY_KEY_LENGTH, for param, metric and tag keys), written here so that validating a
# recipe imports no MLflow; tests/test_config.py checks them against MLflow's. A recipe value
# past them was accepted, and the run failed at its first MLflow call, after Prefect started.
MLFLOW_EXPERIMENT_NAME_MAX = 500
MLFLOW_KEY_MAX = 250


def _experiment_name(v: str) -> str:
    if not 1 <= len(v) <= MLFLOW_EXPERIMENT_NAME_MAX:
        raise ValueError(f"an MLflow experiment name takes 1 to {MLFLOW_EXPERIMENT_NAME_MAX} characters, not {len(v)}")
    return v


ExperimentName = Annotated[str, AfterValidator(_experiment_name)]


# torch intra-op threads: a count, or `auto` (the CPUs this process may use: affinity mask and
# cgroup quota; platonic_core/cpus.py). Not in any cache key.
Threads = Annotated[int, Field(ge=1)] | Literal["auto"]


# --------------------------------------------------------------------------------------
# loading, overrides, hashing


def _format_validation_error(err: ValidationError, origin: str) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{origin}: unknown key '{loc}'"
    if kind == "missing":
        return f"{origin}: missing key '{loc}'"
    got = first.get("input")
    got_s = "" if isinstance(got, dict) else f" (got {got!r})"
    msg = first["msg"].removeprefix("Value error, ")
    if not loc:  # a check across sections
        return f"{origin}: {msg}"
    return f"{origin}: '{loc}': {msg}{got_s}"


# Bounds on what a recipe's YAML may become, checked on the composed node graph before any
# Python object is built: aliases let a few hundred bytes name ~10^9 nodes (billion laughs),
# which validation, hashing and the stages would then walk. The packaged recipes are under
# 3 KiB, under 200 nodes and at most 6 levels deep.
MAX_RECIPE_BYTES = 1 << 20
MAX_YAML_NODES = 100_000  # with every alias expanded
MAX_YAML_DEPTH = 64


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, origin: str) -> None:
    """Refuse a node graph whose alias-expanded tree exceeds MAX_YAML_NODES nodes or
    MAX_YAML_DEPTH levels, or that refers to itself. Iterative, each distinct node once."""
    size: dict[int, int] = {}  # id(node) -> nodes in its expanded subtree
    height: dict[int, int] = {}
    open_: set[int] = set()  # on the current path: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids = _node_children(node)
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in kids)
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            if size[key] > MAX_YAML_NODES:
                raise ConfigError(
                    f"{origin}: its aliases expand to more than {MAX_YAML_NODES:,} YAML nodes "
                    f"(line {node.start_mark.line + 1}); a recipe is refused before it can blow up"
                )
            if height[key] > MAX_YAML_DEPTH:
                raise ConfigError(
                    f"{origin}: nested deeper than {MAX_YAML_DEPTH} levels (line {node.start_mark.line + 1})"
                )
            continue
        if key in size:
            continue
        if key in open_:
            raise ConfigError(f"{origin}: an alias refers to itself (line {node.start_mark.line + 1})")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(kids) if id(c) not in size)


def load_yaml(text: str, origin: str) -> Any:
    """YAML (safe tags only) from an untrusted source, bounded in size, alias expansion and
    depth before anything is constructed. Every failure is one ConfigError line naming `origin`."""
    if len(text.encode()) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{origin}: {len(text.encode()):,} bytes, more than a recipe may hold ({MAX_RECIPE_BYTES:,})")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, origin)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{origin}: not valid YAML ({' '.join(str(e).split())})") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{origin}: nested deeper than {MAX_YAML_DEPTH} levels") from None
    finally:
        loader.dispose()


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    path = [p for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"--set {item!r}: empty key segment")
    value = load_yaml(raw, f"--set {key.strip()}") if raw.strip() else ""
    return path, value


def check_overrides(overrides: list[str], allowed: tuple[str, ...] | list[str]) -> None:
    """Refuse any `key=value` whose dotted key matches no pattern of `allowed`."""
    for item in overrides:
        path, _ = parse_override(item)
        key = ".".join(path)
        if not any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed):
            raise ConfigError(
                f"--set {item!r}: '{key}' is not an override a deployment run may send (allowed: {', '.join(allowed)})"
            )


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    for item in overrides:
        path, value = parse_override(item)
        node = out
        for i, part in enumerate(path[:-1]):
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = {}
                node[part] = nxt
            elif not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: '{'.'.join(path[: i + 1])}' is not a section")
            node = nxt
        node[path[-1]] = value
    return out


def read_recipe(path: str | Path | None, relative_to: Path | None = None) -> tuple[dict[str, Any], str]:
    """A recipe's raw mapping and where it came from. `path`: a YAML file (relative paths are
    tried against the cwd, then `relative_to`), or the name of a packaged recipe ("demo");
    None is the packaged demo."""
    name = "demo" if path is None else str(path)
    candidates = [Path(name)] + ([relative_to / name] if relative_to is not None else [])
    found = next((p for p in candidates if p.is_file()), None)
    if found is not None:
        size = found.stat().st_size
        if size > MAX_RECIPE_BYTES:  # refused before it is read
            raise ConfigError(f"{found}: {size:,} bytes, more than a recipe may hold ({MAX_RECIPE_BYTES:,})")
        origin = str(found)
        try:
            text = found.read_bytes().decode()
        except UnicodeDecodeError as e:
            raise ConfigError(f"{origin}: not UTF-8 text (byte {e.start})") from None
    elif "/" not in name and not name.endswith((".yaml", ".yml")):
        try:
            text, origin = read_resource("configs", f"{name}.yaml"), f"configs/{name}.yaml"
        except FileNotFoundError:
            raise ConfigError(f"{name}: no such recipe file, and no packaged recipe of that name") from None
    else:
        raise ConfigError(f"{name}: no such recipe file")
    raw = load_yaml(text, origin)
    if raw is None or raw == {}:
        # empty, comments only, `{}` or `null`: a caption recipe then validated (every field has
        # a default) and ran the defaults without a word (issue 43); a mistake, not a choice
        raise ConfigError(
            f"{origin}: the recipe is empty (no keys), which would run every default; "
            "write the keys it sets, or name a packaged recipe (configs/*.yaml)"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: a recipe is a mapping of sections")
    return raw, origin


def validate_as(model: type[Section], raw: dict[str, Any], origin: str, overrides: list[str] | None = None):
    """Apply `--set` overrides to a raw recipe and validate it as `model` (a flow's recipe type;
    `platonic.core.config.validate_recipe` defaults it to the pipeline's)."""
    raw = apply_overrides(raw, overrides or [])
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, origin)) from None


def to_plain(obj: Any) -> Any:
    """A config (or section, or value) as plain JSON-able data."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, (list, tuple)):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def stable_hash(obj: Any, n: int = 16) -> str:
    """sha256 of canonical JSON (sorted keys): the same config always hashes the same."""
    blob = json.dumps(to_plain(obj), sort_keys=True, separators=(",", ":"), default=to_plain)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def get_path(cfg: PipelineConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


TRUST_FLAG = "--trust-remote-code"


def remote_code_keys(obj: Any, prefix: str = "") -> list[str]:
    """Dotted keys of every `trust_remote_code` that is true in a validated recipe (any
    section, any depth: a model list's entries are `section.models.0.trust_remote_code`)."""
    if isinstance(obj, BaseModel):
        items = [(name, getattr(obj, name)) for name in type(obj).model_fields]
    elif isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, (list, tuple)):
        items = list(enumerate(obj))
    else:
        return []
    found: list[str] = []
    for name, value in items:
        key = f"{prefix}{name}"
        if name == "trust_remote_code" and value is True:
            found.append(key)
        else:
            found += remote_code_keys(value, key + ".")
    return found


def require_trusted(recipe: Any, trusted: bool) -> None:
    """A recipe may make transformers or vLLM run a model repository's own Python code only
    when the user says so on the command line: without `--trust-remote-code`, ConfigError
    naming the key and the flag."""
    if trusted or not (keys := remote_code_keys(recipe)):
        return
    more = f" (and {', '.join(keys[1:])})" if len(keys) > 1 else ""
    raise ConfigError(
        f"{keys[0]}{more} is true: the recipe would run a model repository's own code; pass {TRUST_FLAG} to allow it"
    )
