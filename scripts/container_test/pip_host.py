"""The host's pip configuration, made usable inside an image build without baking it into the image.

pip inside the build must reach the same packages as the host: its index URLs, find-links folders,
CA bundle and constraints, which may be local folders or a proxy that only the host's configuration
names. `host_build_config` reads the host's effective configuration (`pip config list`: files and PIP_*
variables, the variables winning), writes it as one pip.conf whose local paths are moved under a
mount prefix, and lists one read-only volume per local path (a file:// index with its parent folder,
where its pages' relative links lead, e.g. `../../files/x.whl`). The build mounts them with `-v`, which
lasts only while a RUN step runs, and points pip at the file with the PIP_CONFIG_FILE build argument,
which no image stores; none of it is copied into a layer.

Run alone to see what a build would get: python3 scripts/container_test/pip_host.py OUT_DIR
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

PREFIX = "/run/pip-host"
# what the build's pip needs to find and trust packages as the host does; nothing about where it installs
CARRIED = (
    "index-url",
    "extra-index-url",
    "find-links",
    "no-index",
    "trusted-host",
    "cert",
    "client-cert",
    "constraint",
    "proxy",
    "timeout",
    "default-timeout",
    "retries",
    "prefer-binary",
    "only-binary",
)
PATH_OPTIONS = ("cert", "client-cert", "constraint")  # always local paths
LOCATION_OPTIONS = ("index-url", "extra-index-url", "find-links")  # URLs, file:// URLs or local paths
SECTION_RANK = {"global": 0, "install": 1, ":env:": 2}  # a higher rank wins


def parse_config_list(text: str) -> dict[str, str]:
    """`pip config list` output (`section.option='value'` lines) as option → the winning value."""
    ranked: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        name, _, raw = line.partition("=")
        section, _, option = name.rpartition(".")
        if section not in SECTION_RANK or option not in CARRIED:
            continue
        value = raw.strip().strip("'\"")
        if option not in ranked or SECTION_RANK[section] >= ranked[option][0]:
            ranked[option] = (SECTION_RANK[section], value)
    return {option: value for option, (_, value) in ranked.items()}


@dataclass
class Mounts:
    """Host paths moved under the prefix; each mounted once, read-only."""

    prefix: str = PREFIX
    volumes: dict[str, str] = field(default_factory=dict)  # host path → container path
    dropped: list[str] = field(default_factory=list)  # named by an option but missing on the host

    def inside(self, host_path: str, *, mount: Path | None = None) -> str | None:
        """The path as the build sees it; `mount` (the path or a folder above it) is what is mounted."""
        path = Path(host_path).resolve()
        if not path.exists():
            self.dropped.append(host_path)
            return None
        top = mount or path
        self.volumes[str(top)] = f"{self.prefix}{top}"
        return f"{self.prefix}{path}"

    def location(self, value: str, *, index: bool) -> str | None:
        parsed = urlparse(value)
        if parsed.scheme == "file":
            path = Path(unquote(parsed.path)).resolve()
            target = self.inside(str(path), mount=path.parent if index else None)
            return None if target is None else "file://" + target
        if parsed.scheme:  # http(s): reached over the build's network, as on the host
            return value
        return self.inside(value)


def translate(config: dict[str, str], mounts: Mounts) -> dict[str, str]:
    """The options with every local path replaced by where the build sees it (missing ones dropped)."""
    out: dict[str, str] = {}
    for option, value in config.items():
        if option in PATH_OPTIONS:
            target = mounts.inside(value)
            if target is not None:
                out[option] = target
        elif option in LOCATION_OPTIONS:
            index = option != "find-links"
            kept = [t for t in (mounts.location(v, index=index) for v in value.split()) if t is not None]
            if kept:
                out[option] = "\n    ".join(kept)
        else:
            out[option] = value
    return out


@dataclass(frozen=True)
class BuildPip:
    volumes: list[str]  # `HOST:CONTAINER:ro`, for `podman build -v`
    config_file: str  # the PIP_CONFIG_FILE build argument
    index_url: str  # where pip looks first (the host's index-url, else PyPI)
    dropped: list[str]  # paths the host's configuration names that do not exist


def host_build_config(python: str, out_dir: Path) -> BuildPip:
    """Write out_dir/pip.conf from `python -m pip config list` and say how to mount it into a build."""
    result = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    config = parse_config_list(result.stdout) if result.returncode == 0 else {}
    mounts = Mounts()
    options = translate(config, mounts)
    out_dir.mkdir(parents=True, exist_ok=True)
    conf = out_dir / "pip.conf"
    lines = ["# written by scripts/container_test/pip_host.py from the host's `pip config list`", "[global]"]
    lines += [f"{option} = {value}" for option, value in sorted(options.items())]
    conf.write_text("\n".join(lines) + "\n")
    inside = f"{mounts.prefix}/pip.conf"
    volumes = [f"{host}:{target}:ro" for host, target in sorted(mounts.volumes.items())]
    volumes.append(f"{conf.resolve()}:{inside}:ro")
    index_url = config.get("index-url", "https://pypi.org/simple").split()[0]
    return BuildPip(volumes, inside, index_url, mounts.dropped)


if __name__ == "__main__":
    build = host_build_config(sys.executable, Path(sys.argv[1]))
    sys.stdout.write("\n".join([*build.volumes, f"PIP_CONFIG_FILE={build.config_file}"]) + "\n")
