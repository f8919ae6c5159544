"""The client needs only httpx, pydantic and tenacity: importing it loads no server code (torch, faiss,
numpy, app, training, contract), and its own distribution (clients/python/pyproject.toml) installs into a
fresh virtual environment with nothing else and works there."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER_SIDE = ("torch", "faiss", "numpy", "sentence_transformers", "app", "training", "contract")
PROBE = """
import json, sys
import infonce_search, infonce_search.client, infonce_search.models, infonce_search.retries
from infonce_search import Client, RetryPolicy, ServerUnreachable
try:
    Client("http://127.0.0.1:9", retry=RetryPolicy(attempts=2, initial=0.01)).ready()
except ServerUnreachable as exc:
    down = type(exc).__name__
print(json.dumps({"file": infonce_search.__file__, "down": down,
                  "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def probe(python: str, cwd: Path) -> dict:
    out = subprocess.run([python, "-I", "-c", PROBE], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_importing_the_client_loads_no_server_code(tmp_path):
    seen = probe(sys.executable, tmp_path)  # -I: no cwd or PYTHONPATH on sys.path, the installed package
    assert seen["down"] == "ServerUnreachable"
    assert not set(SERVER_SIDE) & set(seen["loaded"]), seen["loaded"]
    assert {"httpx", "pydantic", "tenacity"} <= set(seen["loaded"])


@pytest.mark.slow
def test_the_client_distribution_installs_alone_in_a_fresh_venv(tmp_path):
    """pip installs clients/python (from a copy, so the build leaves nothing in the tree) with its
    dependencies from the package index; the venv then holds nothing but the client and those."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "clients" / "python", src / "clients" / "python")
    shutil.copytree(
        ROOT / "infonce_search", src / "infonce_search", ignore=shutil.ignore_patterns("__pycache__")
    )
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(src / "clients" / "python")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, timeout=120
    )
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert "infonce-search-client" in names
    assert not names & {"torch", "faiss-cpu", "numpy", "sentence-transformers", "fastapi", "infonce-search"}
    seen = probe(python, tmp_path)
    assert seen["file"].startswith(str(env_dir)) and seen["down"] == "ServerUnreachable"
    assert (Path(seen["file"]).parent / "py.typed").is_file()  # typed for mypy / pyright users
    assert not set(SERVER_SIDE) & set(seen["loaded"])


USE = """from infonce_search import Client
from infonce_search.models import SearchResponse

def top(client: Client) -> SearchResponse:
    return client.search("vitamin d", top_k=3)

reveal_type(Client("http://localhost:8000").search)
"""
# the files each distribution builds from (copied, so the build leaves nothing in the tree)
SOURCES = {
    "client": ["clients/python", "infonce_search"],
    "server": ["pyproject.toml", "README.md", "app", "contract", "training", "infonce_search"],
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dist", "project", "options"),
    [
        ("client", "clients/python", []),
        # `make install`'s form: setuptools' default editable install of a flat layout is an import hook,
        # which mypy does not run (import-not-found, issue 44 item 6); compat mode is a path entry
        ("server", ".", ["--config-settings", "editable_mode=compat"]),
    ],
)
def test_mypy_sees_the_typed_client_of_an_editable_install_from_outside_the_repo(
    tmp_path, dist, project, options
):
    src = tmp_path / "src"
    for part in SOURCES[dist]:
        if (ROOT / part).is_dir():
            shutil.copytree(
                ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            (src / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / part, src / part)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(src / project), *options],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "elsewhere"  # a project of the user's, outside the repo
    elsewhere.mkdir()
    (elsewhere / "use.py").write_text(USE)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", python, "--no-incremental", "--strict",
         "--cache-dir", str(tmp_path / "mypy-cache"), "use.py"],
        cwd=elsewhere, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert '-> infonce_search.models.SearchResponse"' in checked.stdout, checked.stdout
