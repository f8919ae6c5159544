"""A process's memory as Linux reports it in /proc/<pid>/status (VmRSS, RssAnon, …), for the benches that
measure what a build or an encode holds."""

from __future__ import annotations

from pathlib import Path


def status_bytes(pid: str, key: str) -> int:
    """Field `key` of /proc/<pid>/status in bytes (`pid` may be "self"); 0 when the kernel does not report it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0
