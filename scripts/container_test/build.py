"""Build the project image (and the Debian Redis and Milvus images) the way a user would, reusing the layer cache.

With podman the build runs in two passes so that the host's pip configuration never reaches the final
image: the builder stage alone with the host's pip files mounted (`-v`, pip_host.py), then the whole
Dockerfile without any mount, which takes the builder stage from the layer cache (mounts are not part
of a layer's cache key) and runs the final stage's own steps clean. `--format docker`, because the OCI
image format has no HEALTHCHECK and podman would drop it.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pip_host
from engine import Engine
from proc import Failure, run, say

CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
NICE = ["nice", "-n", "10"]  # two cores shared with the developers' and CI's other work


def _reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _pip_python(repo: Path) -> str:
    venv = repo / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else "python3"


def build_project(
    engine: Engine, repo: Path, base: str, image: str, cache: Path, log: Path, torch_index: str | None
) -> None:
    args = ["--build-arg", f"BASE_IMAGE={base}"]
    if not torch_index and _reachable(f"{CPU_TORCH_INDEX}/"):
        torch_index = CPU_TORCH_INDEX
    volumes: list[str] = []
    if engine.name == "podman":
        pip = pip_host.host_build_config(_pip_python(repo), cache / "pip")
        for path in pip.dropped:
            say(f"   the host's pip configuration names {path}, which does not exist: left out")
        volumes = [flag for volume in pip.volumes for flag in ("-v", volume)]
        args += ["--build-arg", f"PIP_CONFIG_FILE={pip.config_file}"]
        torch_index = torch_index or pip.index_url
        if len(pip.volumes) > 1:
            say(f"   pip in the build: the host's configuration ({len(pip.volumes) - 1} read-only mounts)")
        else:
            say("   pip in the build: pip's defaults (the host's `pip config list` named nothing to carry)")
    if torch_index:
        args += ["--build-arg", f"TORCH_INDEX_URL={torch_index}"]
        if torch_index != CPU_TORCH_INDEX:
            say(
                f"   {CPU_TORCH_INDEX} unreachable: torch from {torch_index} (the Dockerfile's guard fails a CUDA build)"
            )
    builder = f"{image.rsplit(':', 1)[0]}-builder:{image.rsplit(':', 1)[1]}"
    old = [engine.image_id(image), engine.image_id(builder)]
    if engine.name == "podman":
        fmt = ["--format", "docker", "--layers"]
        run([*NICE, "podman", "build", *fmt, "--target", "builder", *volumes, *args, "-t", builder, str(repo)],
            log=log, timeout=3600, what="podman build (builder stage)")  # fmt: skip
        run([*NICE, "podman", "build", *fmt, *args, "-t", image, str(repo)],
            log=log, timeout=3600, what="podman build (final stage)")  # fmt: skip
    else:
        run(
            [*NICE, "docker", "build", *args, "-t", image, str(repo)],
            log=log,
            timeout=3600,
            what="docker build",
        )
    # the previous run's images, when replaced: the final one's venv layer alone is ~2 GB
    for previous, now in zip(old, [engine.image_id(image), engine.image_id(builder)], strict=True):
        if previous and now != previous:
            engine("rmi", previous, check=False)


def check_project_image(engine: Engine, image: str) -> int:
    """HEALTHCHECK kept, no pip configuration left in the image, CPU torch; returns the size in bytes."""
    meta = json.loads(engine("image", "inspect", image).stdout)[0]
    check = meta.get("Healthcheck") or (meta.get("Config") or {}).get("Healthcheck")  # podman | docker
    if not check or not check.get("Test"):
        raise Failure(
            f"{image} has no HEALTHCHECK (an OCI-format build drops it: build with --format docker)"
        )
    probe = (
        "test ! -e /run/pip-host && test ! -e /etc/pip.conf && "
        "python -c \"import sys, torch; sys.exit(f'CUDA torch {torch.__version__}' if torch.version.cuda else 0)\""
    )
    engine(
        "run",
        "--rm",
        "--no-healthcheck",
        image,
        "sh",
        "-c",
        probe,
        what="image check (no pip config, CPU torch)",
    )
    say(f"   HEALTHCHECK {' '.join(check['Test'][1:])}; no build-time pip files; CPU torch")
    return int(meta["Size"])


def build_redis(engine: Engine, repo: Path, base: str, image: str, log: Path) -> None:
    fmt = ["--format", "docker"] if engine.name == "podman" else []
    dockerfile = repo / "docker" / "redis.Dockerfile"
    cmd = [*NICE, engine.name, "build", *fmt, "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={base}"]
    run([*cmd, "-t", image, str(dockerfile.parent)], log=log, timeout=1800, what="redis image build")


def build_milvus(engine: Engine, repo: Path, base: str, image: str, cache: Path, log: Path) -> None:
    """docker/milvus.Dockerfile: PyPI's `milvus` package reached as the host reaches it (podman: the
    same two passes as the project image, so no pip file reaches the final image)."""
    dockerfile = repo / "docker" / "milvus.Dockerfile"
    cmd = [*NICE, engine.name, "build", "-f", str(dockerfile), "--build-arg", f"BASE_IMAGE={base}"]
    if engine.name != "podman":
        run([*cmd, "-t", image, str(dockerfile.parent)], log=log, timeout=1800, what="milvus image build")
        return
    pip = pip_host.host_build_config(_pip_python(repo), cache / "pip")
    volumes = [flag for volume in pip.volumes for flag in ("-v", volume)]
    cmd += ["--format", "docker", "--layers", "--build-arg", f"PIP_CONFIG_FILE={pip.config_file}"]
    builder = f"{image.rsplit(':', 1)[0]}-builder:{image.rsplit(':', 1)[1]}"
    run([*cmd, "--target", "builder", *volumes, "-t", builder, str(dockerfile.parent)],
        log=log, timeout=1800, what="milvus image build (builder stage)")  # fmt: skip
    run([*cmd, "-t", image, str(dockerfile.parent)], log=log, timeout=1800, what="milvus image build")
