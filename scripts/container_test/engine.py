"""The container engine: docker when its daemon answers, podman otherwise (installed from the Debian
archive when missing), its compose tool, and health checks driven through it.

Podman on a host without systemd never runs health checks by itself (it schedules them with systemd
timers), so `HealthDriver` does what the timer would: `podman healthcheck run` once per interval of the
container's own check. Podman then applies the start period, timeout and retries and records the
status; docker's daemon does all of it itself.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from proc import Failure, last_line, run, say

PODMAN_PACKAGES = ["podman", "buildah", "runc", "catatonit", "mmdebstrap"]  # Debian's
PODMAN_COMPOSE = "podman-compose==1.6.0"  # PyPI; Debian bookworm's 1.0.3 is the fallback
# the most processes per container: on CI's machines runc may not set RLIMIT_NPROC above 32768 even where
# the host's hard limit is higher (probed: 32768 starts a container, 32769 is refused)
NPROC_CAP = 32768


def _installed(package: str) -> bool:
    result = run(["dpkg-query", "-W", "-f=${Status}", package], check=False)
    return result.returncode == 0 and result.stdout.endswith("install ok installed")


def _apt_install(packages: list[str], log: Path) -> None:
    if os.geteuid() != 0:
        raise Failure(
            f"{' '.join(packages)} not installed and this is not root: apt-get install -y {' '.join(packages)}"
        )
    if shutil.which("apt-get") is None:
        raise Failure(f"{' '.join(packages)} not installed and there is no apt-get on this host")
    say(f"   apt-get install {' '.join(packages)}")
    run(["apt-get", "update", "-qq"], log=log, timeout=600, what="apt-get update")
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    run([*env, "apt-get", "install", "-y", "-qq", *packages], log=log, timeout=1200, what="apt-get install")


def containers_conf(path: Path) -> Path:
    """Podman settings for hosts like CI's: runc (crun refuses hybrid cgroup v1/v2 hosts), explicit file
    and process limits (podman raises both to values such sandboxes refuse), cgroupfs and file logs
    where systemd is not PID 1."""
    limits = []
    for name, which, cap in (
        ("nofile", resource.RLIMIT_NOFILE, None),
        ("nproc", resource.RLIMIT_NPROC, NPROC_CAP),
    ):
        hard = resource.getrlimit(which)[1]
        value = cap if hard == resource.RLIM_INFINITY else min(hard, cap or hard)
        if value:
            limits.append(f'"{name}={value}:{value}"')
    lines = ["# written by scripts/container_test/engine.py", "[containers]", 'log_driver = "k8s-file"']
    lines.append(f"default_ulimits = [{', '.join(limits)}]")
    lines += ["[engine]", 'events_logger = "file"']
    if shutil.which("runc"):
        lines.append('runtime = "runc"')
    if not Path("/run/systemd/system").is_dir():
        lines.append('cgroup_manager = "cgroupfs"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _podman_compose(cache: Path, log: Path) -> list[str]:
    tools = cache / "tools"
    binary = tools / "bin" / "podman-compose"
    version = PODMAN_COMPOSE.split("==")[1]
    if binary.exists() and version in run([str(binary), "--version"], check=False).stdout:
        return [str(binary)]
    say(f"   pip install {PODMAN_COMPOSE} into {tools}")
    made = run(["python3", "-m", "venv", "--clear", str(tools)], log=log, check=False).returncode == 0
    if (
        made
        and run(
            [str(tools / "bin" / "pip"), "install", "-q", PODMAN_COMPOSE], log=log, check=False
        ).returncode
        == 0
    ):
        return [str(binary)]
    say("   PyPI's podman-compose could not be installed: Debian's instead")
    if shutil.which("podman-compose") is None:
        _apt_install(["podman-compose"], log)
    return ["podman-compose"]


@dataclass
class Engine:
    name: str  # docker | podman
    compose: list[str]  # the compose command
    log: Path

    def __call__(self, *args: str, **kwargs: Any) -> Any:
        return run([self.name, *args], log=kwargs.pop("log", None), **kwargs)

    def image_exists(self, ref: str) -> bool:
        return self("image", "inspect", ref, check=False).returncode == 0

    def image_id(self, ref: str) -> str | None:
        result = self("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        return result.stdout.strip() or None if result.returncode == 0 else None

    def inspect(self, container: str) -> dict[str, Any]:
        result = self("container", "inspect", container, check=False)
        if result.returncode != 0:
            raise Failure(f"container {container} is gone: {last_line(result.stderr)}")
        data: list[dict[str, Any]] = json.loads(result.stdout)
        return data[0]

    def containers(self, project: str, service: str | None = None) -> list[str]:
        filters = ["--filter", f"label=com.docker.compose.project={project}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        result = self("ps", "-a", *filters, "--format", "{{.Names}}")
        return sorted(result.stdout.split())

    def container(self, project: str, service: str) -> str:
        names = self.containers(project, service)
        if not names:
            raise Failure(f"compose created no {service} container (project {project})")
        return names[0]

    def logs(self, container: str, lines: int = 30) -> str:
        result = self("logs", "--tail", str(lines), container, check=False)
        return (result.stdout or "") + (result.stderr or "")


def setup(choice: str, cache: Path, log: Path) -> Engine:
    """The engine to use, ready: installed, configured, answering."""
    name = choice
    if name == "auto":
        docker_ok = (
            shutil.which("docker") and run(["docker", "info"], check=False, timeout=30).returncode == 0
        )
        name = "docker" if docker_ok else "podman"
        if not docker_ok and shutil.which("docker"):
            say("   docker is installed but its daemon does not answer (docker info): podman instead")
    if name == "docker":
        if run(["docker", "info"], check=False, timeout=30).returncode != 0:
            raise Failure("the docker daemon does not answer (docker info)")
        if run(["docker", "compose", "version"], check=False).returncode == 0:
            return Engine("docker", ["docker", "compose"], log)
        if shutil.which("docker-compose"):
            return Engine("docker", ["docker-compose"], log)
        raise Failure("docker answers but has no compose (docker compose plugin or docker-compose)")
    missing = [p for p in PODMAN_PACKAGES if not _installed(p)]
    if missing:
        _apt_install(missing, log)
    os.environ["CONTAINERS_CONF"] = str(containers_conf(cache / "containers.conf"))
    info = run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}}"], check=False
    )
    if info.returncode != 0:
        raise Failure(f"podman cannot start on this machine: {last_line(info.stderr)}")
    say(
        f"   podman {run(['podman', '--version']).stdout.split()[-1]}: runtime, storage = {info.stdout.strip()}"
    )
    return Engine("podman", _podman_compose(cache, log), log)


def _seconds(ns: Any, default: float) -> float:
    return float(ns) / 1e9 if ns else default


def _time(text: str) -> datetime:
    """RFC 3339 with nanoseconds (both engines' JSON) → datetime; Python reads microseconds at most."""
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", text)
    if not match:
        return datetime.min
    stamp, fraction, zone = match.groups()
    zone = "+00:00" if zone in (None, "Z") else zone
    return datetime.fromisoformat(f"{stamp}.{(fraction or '0')[:6]:0<6}{zone}")


class HealthDriver(threading.Thread):
    """Podman without systemd: run the container's health check once per its interval, as the timer would."""

    def __init__(self, engine: Engine, container: str):
        super().__init__(daemon=True, name=f"health-{container}")
        self.engine = engine
        self.container = container
        self.stop = threading.Event()
        check = engine.inspect(container)["Config"].get("Healthcheck") or {}
        self.interval = _seconds(check.get("Interval"), 30.0)

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.engine("healthcheck", "run", self.container, check=False, timeout=120)


def wait_healthy(engine: Engine, container: str, service: str) -> float:
    """Seconds until the engine reports the container healthy, from a check run since it (re)started.
    A Failure when it turns unhealthy, stops, or stays unready past start period + retries."""
    t0 = time.monotonic()
    check = engine.inspect(container)["Config"].get("Healthcheck") or {}
    interval = _seconds(check.get("Interval"), 30.0)
    budget = (
        _seconds(check.get("StartPeriod"), 0.0)
        + interval * (int(check.get("Retries") or 3) + 2)
        + _seconds(check.get("Timeout"), 30.0)
        + 60
    )
    while True:
        state = engine.inspect(container)["State"]
        health = state.get("Health") or state.get("Healthcheck") or {}
        probes = health.get("Log") or []
        last = probes[-1] if probes else None
        fresh = last is not None and _time(last.get("Start", "")) >= _time(state.get("StartedAt", ""))
        said = last_line(last.get("Output", "")) if last else "no check has run yet"
        status = health.get("Status")
        if status == "healthy" and fresh and last and last.get("ExitCode") == 0:
            return time.monotonic() - t0
        if status == "unhealthy" and fresh:
            raise Failure(f"{service} turned unhealthy: {said}")
        if not state.get("Running"):
            say(engine.logs(container))
            raise Failure(f"{service} stopped (exit {state.get('ExitCode')}) before turning healthy")
        if time.monotonic() - t0 > budget:
            raise Failure(
                f"{service} never turned healthy in {budget:.0f} s (status {status}): last check: {said}"
            )
        time.sleep(2)
