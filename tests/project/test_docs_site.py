"""The documentation: a README that reads in ten minutes, pages that link to what exists, a site that
builds offline with --strict, and the benchmark plots drawn from the committed results."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [REPO / "README.md", REPO / "clients" / "python" / "README.md", *sorted(DOCS.glob("*.md"))]


def test_the_readme_is_at_most_300_lines_with_a_two_command_quickstart():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    quickstart = text.split("## Quickstart", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quickstart.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]


def test_every_relative_link_points_at_a_file_that_exists():
    broken = []
    for page in _pages():
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_every_page_is_in_the_site_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = {page for entry in config["nav"] for page in entry.values()}
    assert in_nav == {p.name for p in DOCS.glob("*.md")}


def test_the_site_builds_strict(tmp_path):
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    out = subprocess.run(
        mkdocs, cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "benchmarks.html").is_file()


def test_the_plot_script_draws_every_plot_the_benchmarks_page_shows(tmp_path):
    script = [sys.executable, "scripts/benchmark_plots.py", "--out", str(tmp_path)]
    subprocess.run(script, cwd=REPO, check=True, capture_output=True)
    shown = set(re.findall(r"\]\(benchmarks/([\w.-]+\.png)\)", (DOCS / "benchmarks.md").read_text()))
    assert shown and shown <= {p.name for p in tmp_path.glob("*.png")}
    # the committed PNGs are the ones the script draws from the committed results
    for name in shown:
        assert (tmp_path / name).read_bytes() == (DOCS / "benchmarks" / name).read_bytes(), name


def test_the_settings_page_shows_the_table_the_settings_class_prints():
    from app.settings import settings_table

    assert settings_table().strip() in (DOCS / "settings.md").read_text(encoding="utf-8")
