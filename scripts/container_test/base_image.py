"""The image both Dockerfile stages start from (its BASE_IMAGE build argument).

The Dockerfile's default (python:3.11-slim-bookworm) when the engine has it or can pull it; where no
registry answers, Debian bookworm made with mmdebstrap from the Debian archive (minbase + python3,
python3-venv, python-is-python3, ca-certificates) and imported. The rootfs tarball is kept in the cache
folder and rebuilt after MAX_AGE_DAYS (security updates); the imported image is kept by the engine,
and with it every build layer on top of it.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from engine import Engine
from proc import Failure, run, say

SUITE = "bookworm"  # the Dockerfile's default is python:3.11-slim-bookworm: same Debian, same Python 3.11
PACKAGES = ["python3", "python3-venv", "python-is-python3", "ca-certificates"]
MAX_AGE_DAYS = 30
# what slim images leave out too; copyright files stay
DPKG_EXCLUDES = ["/usr/share/man/*", "/usr/share/doc/*", "/usr/share/info/*", "/usr/share/locale/*"]


def dockerfile_default(dockerfile: Path) -> str:
    match = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile.read_text(), re.MULTILINE)
    if not match:
        raise Failure(f"{dockerfile} has no `ARG BASE_IMAGE=<default>`")
    return match.group(1)


def _qualified(ref: str) -> str:
    first = ref.split("/")[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    return ref if ("." in first or ":" in first or first == "localhost") else f"docker.io/{ref}"


def _host_debian_sources(suite: str) -> list[str]:
    """The host's apt source files for the suite, when the host runs it (its mirror, maybe a proxy)."""
    release = Path("/etc/os-release")
    if not release.exists() or f"VERSION_CODENAME={suite}" not in release.read_text():
        return []
    candidates = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    candidates += sorted(Path("/etc/apt/sources.list.d").glob("*.list"))
    return [
        str(path)
        for path in candidates
        if path.is_file() and re.search(rf"\b{suite}\b", text := path.read_text()) and "/debian" in text
    ]


def _mmdebstrap(tarball: Path, suite: str, log: Path) -> None:
    tmp = tarball.with_suffix(".tmp.tar")
    cmd = ["nice", "-n", "10", "mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}"]
    cmd += [f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES]
    cmd += [
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        suite,
        str(tmp),
        *_host_debian_sources(suite),
    ]
    run(cmd, log=log, timeout=1800, what="mmdebstrap (the base image's Debian rootfs)")
    os.replace(tmp, tarball)


def resolve(engine: Engine, dockerfile: Path, cache: Path, log: Path, given: str | None) -> tuple[str, str]:
    """(image reference, how it was had)."""
    if given:
        return given, "given (--base-image)"
    default = dockerfile_default(dockerfile)
    for ref in (default, _qualified(default)):
        if engine.image_exists(ref):
            return ref, "the Dockerfile's default, already in the engine"
    pulled = engine("pull", "-q", _qualified(default), check=False, timeout=600, log=log)
    if pulled.returncode == 0:
        return _qualified(default), "the Dockerfile's default, pulled"
    say(f"   no registry answers for {_qualified(default)}: Debian {SUITE} from the Debian archive")
    tarball = cache / f"base-{SUITE}.tar"
    image = f"localhost/infonce-search-base:{SUITE}"
    age_days = (time.time() - tarball.stat().st_mtime) / 86400 if tarball.exists() else None
    rebuilt = age_days is None or age_days > MAX_AGE_DAYS
    if rebuilt:
        say(f"   mmdebstrap {SUITE} → {tarball}")
        _mmdebstrap(tarball, SUITE, log)
    if rebuilt or not engine.image_exists(image):
        changes = ["--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]']
        engine("import", *changes, str(tarball), image, log=log, what="importing the base rootfs")
        return image, f"mmdebstrap {SUITE}, {'built' if rebuilt else 'cached rootfs'}, imported"
    return image, f"mmdebstrap {SUITE}, cached ({age_days:.0f} days old)"
