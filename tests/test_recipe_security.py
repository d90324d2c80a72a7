"""What comes from outside is data, never code (issue 19): what a recipe, a `--set` or a
deployment's parameters may make a worker do, how much YAML it may expand into, which numbers
pass validation, feature and weight files from anywhere, and the served stack's defaults
(infra/compose.yaml)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from platonic.core import config
from platonic.core.config import AblationConfig, ConfigError, PositivesConfig, load_config, read_recipe

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
VLLM = ["positives.backend=vllm", "positives.models.recaption.id=m", "positives.models.paraphrase.id=m"]


def one_line_error(call) -> str:
    with pytest.raises(ConfigError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# ---- the vLLM runner is an interpreter, not a command line --------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "sh -c 'touch /tmp/pwned' --",
        "python -c 'import os'",
        "conda run -n vllm python",
        "/bin/sh",
        "python;id",
        "/nonexistent/venv/bin/python3",
    ],
)
def test_vllm_python_must_be_an_existing_python_interpreter(value):
    msg = one_line_error(lambda: load_config(TINY, [*VLLM, f"positives.vllm_python={value}"]))
    assert "positives.vllm_python" in msg, msg


def test_vllm_python_named_python_but_linked_to_a_shell_is_refused(tmp_path):
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.symlink_to("/bin/sh")
    msg = one_line_error(lambda: load_config(TINY, [*VLLM, f"positives.vllm_python={fake}"]))
    assert "positives.vllm_python" in msg and "sh" in msg, msg


def test_vllm_python_accepts_a_real_interpreter_and_runs_it_without_a_shell(monkeypatch, tmp_path):
    cfg = load_config(TINY, [*VLLM, f"positives.vllm_python={sys.executable}"])
    assert cfg.positives.vllm_python == sys.executable
    import subprocess as sp

    from platonic.core.positives.jobs import Job
    from platonic.core.positives.vllm_offline import RUNNER, VllmOfflineBackend

    seen = {}

    class Stop(Exception):
        pass

    def popen(cmd, **kw):
        seen["cmd"], seen["shell"] = cmd, kw.get("shell", False)
        raise Stop

    backend = VllmOfflineBackend(cfg.positives)  # asks the interpreter what it is: a real Popen
    monkeypatch.setattr(sp, "Popen", popen)
    with pytest.raises(Stop):
        next(backend.generate("recap", [Job(None, [{"role": "user", "content": "x"}], 0)], 4))
    assert seen["cmd"][:2] == [sys.executable, str(RUNNER)] and not seen["shell"]


def test_vllm_python_that_is_a_script_named_python3_is_refused_and_never_run(tmp_path):
    ran = tmp_path / "ran"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ntouch {ran}\necho cpython\n")
    fake.chmod(0o755)
    msg = one_line_error(lambda: load_config(TINY, [*VLLM, f"positives.vllm_python={fake}"]))
    assert "positives.vllm_python" in msg and str(fake) in msg and "script" in msg, msg
    assert not ran.exists()
    # existence (and what the file is) is checked only when the vllm backend is on
    assert load_config(TINY, [f"positives.vllm_python={fake}"]).positives.vllm_python == str(fake)


def _compiled_python3(tmp_path: Path, marker: Path) -> Path:
    """An ELF executable named python3 (a script would be refused unread) that writes
    `marker` when it runs and answers like no Python does."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build an ELF executable with")
    src = tmp_path / "fake.c"
    src.write_text(
        "#include <stdio.h>\n"
        f'int main(void) {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); puts("NOT PYTHON"); return 0; }}\n'
    )
    exe = tmp_path / "bin" / "python3"
    exe.parent.mkdir()
    subprocess.run([cc, "-o", str(exe), str(src)], check=True, capture_output=True)
    return exe


def test_validating_a_recipe_starts_no_process_and_the_stage_checks_the_interpreter(tmp_path):
    """Issue 43: a compiled executable named python3 as positives.vllm_python was run while
    the recipe was validated (it wrote a file), even when the recipe was then refused for
    another reason. Validation now only reads the file (exists, executable, ELF, not a
    script); the run that asks it what it is happens where the positives stage starts."""
    from platonic.core.positives.vllm_offline import VllmOfflineBackend

    ran = tmp_path / "ran"
    fake = _compiled_python3(tmp_path, ran)
    # refused for another reason (no models named): nothing ran
    msg = one_line_error(lambda: load_config(TINY, ["positives.backend=vllm", f"positives.vllm_python={fake}"]))
    assert "positives.models" in msg, msg
    assert not ran.exists()
    cfg = load_config(TINY, [*VLLM, f"positives.vllm_python={fake}"])  # valid: still nothing ran
    assert not ran.exists()
    with pytest.raises(RuntimeError) as e:  # the stage that needs it asks it, and refuses it
        VllmOfflineBackend(cfg.positives)
    assert "positives.vllm_python" in str(e.value) and "did not answer as a Python interpreter" in str(e.value)
    assert "\n" not in str(e.value)
    assert ran.exists()


# ---- trust_remote_code needs the user's flag, not the recipe's say-so ----------------------


def test_a_recipe_with_trust_remote_code_is_refused_without_the_flag():
    cfg = load_config(TINY, ["positives.trust_remote_code=true"])
    msg = one_line_error(lambda: config.require_trusted(cfg, False))
    assert "positives.trust_remote_code" in msg and "--trust-remote-code" in msg, msg
    config.require_trusted(cfg, True)  # the flag allows it
    config.require_trusted(load_config(TINY), False)  # off: nothing to allow
    # the Python API's run refuses it before anything starts (no server, no MLflow)
    from platonic.flows.api import run_config

    assert "--trust-remote-code" in one_line_error(lambda: run_config(cfg))


def test_trust_remote_code_is_found_at_any_depth_of_a_recipe():
    nested = {"text_models": [{"id": "a"}, {"id": "b", "trust_remote_code": True}], "x": {"trust_remote_code": False}}
    assert config.remote_code_keys(nested) == ["text_models.1.trust_remote_code"]


@pytest.mark.e2e  # a CLI subprocess
def test_the_cli_refuses_trust_remote_code_in_one_line_naming_key_and_flag(tmp_path):
    cmd = [sys.executable, "-m", "platonic.flows.cli", "run", str(TINY), "--set", f"out_dir={tmp_path}"]
    p = subprocess.run([*cmd, "--set", "positives.trust_remote_code=true"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("error: positives.trust_remote_code") and "--trust-remote-code" in line, line
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "HOME", "MLFLOW_TRACKING_PASSWORD", "openai_api_key", ""])
def test_api_key_env_names_only_an_api_key_variable(name):
    msg = one_line_error(lambda: load_config(TINY, [f"positives.http.api_key_env={name!r}"]))
    assert "positives.http.api_key_env" in msg, msg


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "VLLM_API_KEY", "LAB2_API_KEY"])
def test_api_key_env_accepts_api_key_variables(name):
    assert load_config(TINY, [f"positives.http.api_key_env={name}"]).positives.http.api_key_env == name


def test_the_default_positives_section_is_unchanged():
    """The positives stage hashes its whole section: the defaults must serialise as before,
    or every cached positives artifact (and all downstream) would be recomputed."""
    d = PositivesConfig().model_dump(mode="json")
    assert d["vllm_python"] == "python" and d["http"]["api_key_env"] == "OPENAI_API_KEY"


# ---- deployments take only allow-listed overrides ----------------------------------------


@pytest.mark.parametrize(
    "item",
    [
        "positives.vllm_python=/usr/bin/python3",
        "positives.http.api_key_env=OPENAI_API_KEY",
        "positives.models.recaption.base_url=http://attacker.example/v1",
        "positives.trust_remote_code=true",
        "services.mlflow_tracking_uri=http://attacker.example",
        "fanout.address=tcp://attacker.example:8786",
        "out_dir=/etc",
        "positives={backend: vllm}",
        "dedup.embed.model=/tmp/somewhere",
    ],
)
def test_check_overrides_refuses_keys_outside_the_allow_list(item):
    msg = one_line_error(lambda: config.check_overrides([item], config.DEPLOYMENT_OVERRIDES))
    assert item.split("=")[0] in msg and "allow" in msg, msg


def test_check_overrides_allows_the_science_knobs():
    config.check_overrides(
        [
            "seed=1",
            "world.seed=2",
            "train.models.good.steps=150",
            "train.models.extra={kind: causal_lm, views: text}",
            "fanout.engine=dask",
            "fanout.workers=2",
            "positives.sampling.temperature=0.5",
            "evaluate.k=5",
        ],
        config.DEPLOYMENT_OVERRIDES,
    )


def test_a_deployment_run_is_refused_bad_overrides_a_config_and_outside_recipes(monkeypatch):
    from platonic.flows import pipeline as pl

    ok = pl.resolve_config(None, "tiny", ["seed=1", "train.models.good.steps=3"], deployed=True)
    assert ok.seed == 1
    msg = one_line_error(lambda: pl.resolve_config(None, "tiny", ["positives.vllm_python=python"], deployed=True))
    assert "positives.vllm_python" in msg
    one_line_error(lambda: pl.resolve_config(load_config(TINY).model_dump(mode="json"), None, None, deployed=True))
    one_line_error(lambda: pl.resolve_config(None, "/etc/passwd", None, deployed=True))
    # the operator may widen the list on the worker
    monkeypatch.setenv("PLATONIC_DEPLOYMENT_OVERRIDES", "out_dir")
    assert pl.resolve_config(None, "tiny", ["out_dir=/tmp/x"], deployed=True).out_dir == "/tmp/x"
    # the CLI's own runs (not deployed) take any override
    assert pl.resolve_config(None, str(TINY), ["positives.http.api_key_env=VLLM_API_KEY"]).name == "tiny"


def test_the_pipeline_flow_applies_the_allow_list_under_a_deployment(monkeypatch):
    from platonic.flows import pipeline as pl

    class Planned(Exception):
        pass

    def plan(*a, **k):  # reached only when the recipe was accepted
        raise Planned

    monkeypatch.setattr(pl, "plan", plan)
    monkeypatch.setattr(pl.services, "apply", lambda services: None)  # exports nothing into this process
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "7c1c6b7e-0000-4000-8000-000000000000")
    with pytest.raises(ConfigError, match="services.prefect_api_url"):
        pl.pipeline.fn(recipe="tiny", sets=["services.prefect_api_url=http://attacker.example/api"])
    with pytest.raises(Planned):
        pl.pipeline.fn(recipe="tiny", sets=["seed=2"])


# ---- YAML cannot expand without bound ------------------------------------------------------


def laughs(indent: str = "    ") -> str:
    """Billion laughs: 9 levels of 9 aliases, ~387M nodes once expanded."""
    rows = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    rows += [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    return "\n".join(indent + r for r in rows)


def test_a_billion_laughs_recipe_is_refused_fast_with_one_line(tmp_path, monkeypatch):
    """Refused from the composed node graph, before any value is built (construction would
    expand the aliases: 9^9 strings), in little CPU time of this process (CPU, not wall
    clock: other work on the machine does not move it)."""
    import yaml

    def expanded(*args, **kwargs):
        raise AssertionError("the recipe's aliases were expanded before the check refused it")

    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_document", expanded)
    p = tmp_path / "bomb.yaml"
    p.write_text(TINY.read_text() + "\npositives:\n  vllm_args:\n" + laughs() + "\n")
    t0 = time.process_time()
    msg = one_line_error(lambda: load_config(p))
    assert time.process_time() - t0 < 5 and str(p) in msg and "alias" in msg, msg


def test_a_billion_laughs_override_is_refused():
    value = "{l0: &a0 [" + ", ".join(["lol"] * 9) + "]"
    for i in range(1, 9):  # each level: 9 aliases of the one before
        value += f", l{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
    msg = one_line_error(lambda: load_config(TINY, [f"positives.vllm_args={value}}}"]))
    assert "--set" in msg and "alias" in msg, msg


def test_deep_nesting_and_self_reference_are_refused(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("train: " + "[" * 5000 + "]" * 5000 + "\n")
    assert str(deep) in one_line_error(lambda: read_recipe(deep))
    loop = tmp_path / "loop.yaml"
    loop.write_text("positives:\n  vllm_args: &a {x: *a}\n")
    assert str(loop) in one_line_error(lambda: read_recipe(loop))


def test_an_oversized_recipe_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(TINY.read_text() + "#" * (config.MAX_RECIPE_BYTES + 1) + "\n")
    msg = one_line_error(lambda: read_recipe(big))
    assert str(big) in msg and "bytes" in msg, msg


def test_ordinary_anchors_still_load(tmp_path):
    p = tmp_path / "anchors.yaml"
    p.write_text(
        TINY.read_text().replace(
            "views: {good_sources: [recap], text_sources: [recap], vocab_size: 200}",
            "views: {good_sources: &src [recap], text_sources: *src, vocab_size: 200}",
        )
    )
    assert load_config(p).views.text_sources == ["recap"]


def test_the_cli_prints_one_error_line_for_a_bomb(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(TINY.read_text() + "\npositives:\n  vllm_args:\n" + laughs() + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "platonic.flows.cli", "stages", str(p)], capture_output=True, text=True, timeout=120
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr


# ---- numbers: seeds in range, floats finite ------------------------------------------------


@pytest.mark.parametrize(
    "item, key",
    [
        ("world.seed=-1", "world.seed"),
        ("seed=100000000000000000000000000", "seed"),
        ("seed=4294967296", "seed"),
        ("positives.seed=-5", "positives.seed"),
        ("views.seed=-1", "views.seed"),
        ("dedup.near.seed=-1", "dedup.near.seed"),
        ("evaluate.ceiling.seed=-1", "evaluate.ceiling.seed"),
        ("train.models.good.optim.lr=.inf", "train.models.good.optim.lr"),
        ("train.models.good.optim.lr=.nan", "train.models.good.optim.lr"),
        ("train.models.good.lam=.nan", "train.models.good.lam"),
        ("world.concentration=.inf", "world.concentration"),
        ("positives.http.timeout_s=.inf", "positives.http.timeout_s"),
    ],
)
def test_out_of_range_seeds_and_non_finite_floats_are_refused(item, key):
    msg = one_line_error(lambda: load_config(TINY, [item]))
    assert f"'{key}'" in msg, msg


def test_the_largest_seed_is_accepted():
    assert load_config(TINY, ["seed=4294967295", "world.seed=4294967295"]).world.seed == 2**32 - 1


def test_seed_lists_are_in_range_too():
    rows = {"r": {"good_sources": ["recap"], "text_sources": ["recap"]}}
    with pytest.raises(ValueError, match="seeds"):
        AblationConfig.model_validate({"rows": rows, "seeds": [-1, 0]})


# ---- feature and weight files from anywhere ------------------------------------------------


class Pickled:
    """Not a tensor: weights_only refuses to unpickle it."""


def forged_npy(f, shape=(3_000_000, 3_000_000)) -> None:
    np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
    f.write(b"\x00" * 64)


def test_feature_files_that_are_not_features_are_one_line_errors_before_any_allocation(tmp_path):
    import io
    import zipfile

    import torch

    from platonic.core.features import load_features

    with open(tmp_path / "forged.npy", "wb") as f:
        forged_npy(f)
    member = io.BytesIO()
    forged_npy(member)
    with zipfile.ZipFile(tmp_path / "forged.npz", "w") as z:
        z.writestr("layer_0.npy", member.getvalue())
    np.save(tmp_path / "truncated.npy", np.zeros((100, 10), np.float32))
    (tmp_path / "truncated.npy").write_bytes((tmp_path / "truncated.npy").read_bytes()[:300])
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}] * 4, dtype=object), allow_pickle=True)
    (tmp_path / "notzip.npz").write_bytes(b"hello")
    (tmp_path / "corrupt.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    torch.save({"x": Pickled()}, tmp_path / "pickle.pt")
    torch.save(torch.zeros(1).expand(200_000, 200_000), tmp_path / "expanded.pt")
    cases = {
        "forged.npy": "header declares shape (3000000, 3000000)",
        "forged.npz": "member layer_0.npy: header declares shape",
        "truncated.npy": "header declares shape (100, 10)",
        "objects.npy": "Python objects",
        "notzip.npz": "not a readable feature file",
        "corrupt.pt": "not a readable torch file",
        "pickle.pt": "holds pickled Python objects",
        "expanded.pt": "a view larger than the data stored",
    }
    for name, needle in cases.items():
        with pytest.raises(ValueError) as e:
            load_features(tmp_path / name)
        msg = str(e.value)
        assert msg.startswith(f"{tmp_path / name}: ") and needle in msg and "\n" not in msg, msg
    torch.save(torch.ones(6, 4, dtype=torch.bfloat16), tmp_path / "bf16.pt")  # ordinary files still load
    np.savez(tmp_path / "ok.npz", layer_0=np.ones((6, 4)), layer_1=np.zeros((6, 2)))
    assert [a.shape for a in load_features(tmp_path / "bf16.pt")] == [(6, 4)]
    assert [a.shape for a in load_features(tmp_path / "ok.npz")] == [(6, 4), (6, 2)]


def test_efficientnet_weights_that_are_not_a_state_dict_are_one_line_errors(tmp_path):
    import torch

    from platonic.core.match.efficientnet import load_efficientnet_lite0

    (tmp_path / "corrupt.pth").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    torch.save({"_fc.weight": Pickled()}, tmp_path / "pickle.pth")
    torch.save(torch.zeros(3), tmp_path / "tensor.pth")
    (tmp_path / "corrupt.safetensors").write_bytes(b"\xff" * 16)
    for name in ("corrupt.pth", "pickle.pth", "tensor.pth", "corrupt.safetensors"):
        with pytest.raises(ValueError) as e:
            load_efficientnet_lite0(tmp_path / name)
        msg = str(e.value)
        assert msg.startswith(f"{tmp_path / name}: ") and "\n" not in msg, msg


# ---- the served stack's defaults -----------------------------------------------------------

COMPOSE = ROOT / "infra" / "compose.yaml"
SECRET_WORDS = ("PASSWORD", "SECRET", "API_KEY", "AUTH_STRING", "ACCESS_KEY", "TOKEN")


def published_host(port) -> str | None:
    """The host address of a published port, long or short syntax; None = all interfaces."""
    if isinstance(port, dict):
        return port.get("host_ip")
    parts = str(port).split(":")
    return parts[0] if len(parts) == 3 else None


def test_compose_publishes_nothing_on_all_interfaces():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert any(s.get("ports") for s in services.values()), "no port published: the test would prove nothing"
    for name, s in services.items():
        for p in s.get("ports", []):
            assert published_host(p) == "127.0.0.1", f"{name} publishes {p} on all interfaces"


def test_compose_has_no_password_defaults_and_turns_authentication_on():
    text = COMPOSE.read_text()
    # ${VAR:-default} / ${VAR-default} for anything secret: a forgotten variable must stop `up`
    for m in re.finditer(r"\$\{([A-Z0-9_]+)(:?-)[^}]*\}", text):
        assert not any(w in m.group(1) for w in SECRET_WORDS), f"default for {m.group(0)}"
    for literal in ("platonic-secret", "change-me", "password1234"):
        assert literal not in text, literal
    services = yaml.safe_load(text)["services"]
    for name, s in services.items():
        env = s.get("environment") or {}
        # a list entry without "=" passes the host's variable through (or nothing): no literal
        pairs = env.items() if isinstance(env, dict) else (e.split("=", 1) for e in env if "=" in e)
        for k, v in pairs:
            if any(w in k for w in SECRET_WORDS):
                assert str(v).startswith("${") and ":?" in str(v), f"{name}.{k} = {v!r}: not required from the env"
    mlflow = services["mlflow"]
    assert "--app-name basic-auth" in " ".join(" ".join(mlflow["command"]).split())
    assert "MLFLOW_AUTH_ADMIN_PASSWORD" in mlflow["environment"]
    assert "PREFECT_SERVER_API_AUTH_STRING" in services["prefect-server"]["environment"]
    assert "--api-key" in services["vllm"]["command"]
    for worker_var in ("MLFLOW_TRACKING_PASSWORD", "PREFECT_API_AUTH_STRING", "VLLM_API_KEY"):
        assert worker_var in services["worker"]["environment"]


def test_served_recipes_and_scripts_use_the_vllm_api_key():
    for script in ("serve_llava.sh", "serve_qwen.sh"):
        assert '--api-key "$VLLM_API_KEY"' in (ROOT / "infra" / "vllm" / script).read_text(), script
    cfg = load_config(ROOT / "infra" / "vllm" / "positives_openai.yaml")
    assert cfg.positives.http.api_key_env == "VLLM_API_KEY"
    assert "change-me" not in (ROOT / "infra" / "k8s" / "server-values.yaml").read_text()


def test_local_stack_initialises_postgres_with_password_auth():
    src = (ROOT / "infra" / "local_stack.py").read_text()
    assert '"trust"' not in src and "scram-sha-256" in src  # run for real: tests/test_stack.py
