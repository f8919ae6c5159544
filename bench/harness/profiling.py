"""What the benches that profile a running server share: CPU times from /proc, the py-spy executable, and
the live bundle's recorded timing queries."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def stat_cpu_s(stat_file: str | Path) -> float:
    """utime + stime, in seconds, of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat file (fields 14 and
    15; the command name in parentheses may hold spaces, so fields are counted after its closing one)."""
    fields = Path(stat_file).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def py_spy() -> Path | None:
    """The py-spy executable (the dev extra installs it beside this Python), or None."""
    exe = Path(shutil.which("py-spy") or Path(sys.executable).parent / "py-spy")
    return exe if exe.exists() else None


def live_timing_queries(bundles: Path) -> list[str]:
    """The queries the live bundle of `bundles` recorded for timing its encoders (may be empty); exits
    naming the folder when nothing is live."""
    from contract.bundles.bundle import read_manifest
    from contract.encoding.query_encoders import timing_queries
    from training.bundle.store import BundleStore

    store = BundleStore(bundles)
    live = store.current_version()
    if live is None:
        raise SystemExit(f"no live bundle in {bundles}: run `make demo` first, or pass --bundles")
    return list(timing_queries(read_manifest(store.version_path(str(live))).extras))
