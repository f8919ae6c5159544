"""Write the sync client from the async one: infonce_search/_async/client.py -> infonce_search/_sync/client.py.

    python scripts/unasync_client.py [--out DIR]

unasync (the python-trio tool httpcore uses) drops `async` / `await` and renames by token: AsyncClient is
Client, aclose is close, the tenacity loop and the sleep are their blocking twins. The result is then
formatted with ruff, so it reads like the rest of the code. tests/app/client/test_client_generated.py runs
this into a temporary folder and checks the committed file is what it writes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "infonce_search" / "_async" / "client.py"
REPLACEMENTS = {
    "AsyncClient": "Client",  # ours and httpx's
    "aclose": "close",
    "async_retrying": "retrying",
    "asyncio": "time",  # `from asyncio import sleep` -> `from time import sleep`
}
HEADER = "# Generated from infonce_search/_async/client.py by scripts/unasync_client.py: do not edit.\n"


def generate(out_dir: Path) -> Path:
    """The sync client written into out_dir (as client.py); returns its path."""
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "_async" / "client.py"
        staged.parent.mkdir()
        shutil.copyfile(SOURCE, staged)
        rule = unasync.Rule(fromdir="/_async/", todir="/_sync/", additional_replacements=REPLACEMENTS)
        unasync.unasync_files([str(staged)], rules=[rule])
        text = (Path(tmp) / "_sync" / "client.py").read_text(encoding="utf-8")
    target = out_dir / "client.py"
    out_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(HEADER + text, encoding="utf-8")
    ruff = [sys.executable, "-m", "ruff"]
    subprocess.run([*ruff, "check", "--fix", "--quiet", str(target)], cwd=REPO, check=True)
    subprocess.run([*ruff, "format", "--quiet", str(target)], cwd=REPO, check=True)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "infonce_search" / "_sync")
    print(generate(parser.parse_args(argv).out))  # noqa: T201 - a CLI


if __name__ == "__main__":
    main()
