"""scripts/container_test/pip_host.py: the host's pip configuration as an image build sees it.

The build itself (pip inside `podman build` reaching the host's index through these mounts) is proven by
`make container-test`; these pin the translation: which value wins, what gets mounted, what is dropped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pip_host() -> Iterator[ModuleType]:
    path = REPO / "scripts" / "container_test" / "pip_host.py"
    spec = importlib.util.spec_from_file_location("pip_host", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["pip_host"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["pip_host"]


def test_variables_win_over_files_and_install_over_global(pip_host: ModuleType) -> None:
    listing = "\n".join(
        [
            "global.index-url='https://mirror.example/simple'",
            "install.index-url='https://install.example/simple'",
            ":env:.find-links='/opt/wheels'",
            "global.find-links='/elsewhere'",
            "global.user='true'",  # where pip installs: not carried into the build
            "global.require-virtualenv='true'",
        ]
    )
    assert pip_host.parse_config_list(listing) == {
        "index-url": "https://install.example/simple",
        "find-links": "/opt/wheels",
    }


def test_local_paths_move_under_the_prefix_and_are_mounted_read_only(
    pip_host: ModuleType, tmp_path: Path
) -> None:
    index = tmp_path / "pypi" / "simple"
    (tmp_path / "pypi" / "files").mkdir(parents=True)
    index.mkdir()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    ca = tmp_path / "ca.pem"
    ca.write_text("cert")
    config = {
        "index-url": "https://pypi.org/simple",
        "extra-index-url": f"file://{index} https://other.example/simple",
        "find-links": str(wheels),
        "cert": str(ca),
        "default-timeout": "180",
    }
    mounts = pip_host.Mounts(prefix="/run/pip-host")
    out = pip_host.translate(config, mounts)
    assert out["index-url"] == "https://pypi.org/simple"  # reached over the network, as on the host
    assert out["extra-index-url"] == f"file:///run/pip-host{index}\n    https://other.example/simple"
    assert out["find-links"] == f"/run/pip-host{wheels}"
    assert out["cert"] == f"/run/pip-host{ca}"
    assert out["default-timeout"] == "180"
    # a local index's pages link to ../../files/...: its parent folder is what gets mounted
    assert mounts.volumes == {
        str(tmp_path / "pypi"): f"/run/pip-host{tmp_path / 'pypi'}",
        str(wheels): f"/run/pip-host{wheels}",
        str(ca): f"/run/pip-host{ca}",
    }
    assert mounts.dropped == []


def test_paths_missing_on_the_host_are_dropped_and_named(pip_host: ModuleType, tmp_path: Path) -> None:
    mounts = pip_host.Mounts()
    out = pip_host.translate({"find-links": str(tmp_path / "nope"), "cert": str(tmp_path / "no.pem")}, mounts)
    assert out == {}
    assert mounts.volumes == {}
    assert sorted(mounts.dropped) == sorted([str(tmp_path / "nope"), str(tmp_path / "no.pem")])


def test_written_config_is_one_pip_reads(
    pip_host: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a real `pip config list` to a pip.conf that pip itself parses back to the moved values."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    host_conf = tmp_path / "host.conf"
    host_conf.write_text(f"[global]\nfind-links = {wheels}\nindex-url = https://mirror.example/simple\n")
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(host_conf))
    build = pip_host.host_build_config(sys.executable, tmp_path / "out")
    assert build.config_file == "/run/pip-host/pip.conf"
    assert build.index_url == "https://mirror.example/simple"
    assert f"{wheels}:/run/pip-host{wheels}:ro" in build.volumes
    assert f"{tmp_path / 'out' / 'pip.conf'}:/run/pip-host/pip.conf:ro" in build.volumes
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "out" / "pip.conf"))
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert f"global.find-links='/run/pip-host{wheels}'" in listing
    assert "global.index-url='https://mirror.example/simple'" in listing
