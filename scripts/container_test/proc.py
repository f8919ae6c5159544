"""Running commands, saying what happens, timing steps, and failing with one clear line."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class Failure(Exception):
    """The smoke test failed; the message is the one line printed last."""


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def run(
    cmd: Sequence[str],
    *,
    timeout: float = 600,
    log: Path | None = None,
    check: bool = True,
    what: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, its output captured (and appended to `log` when given). check: a non-zero exit is a
    Failure naming `what` (or the command) and the output's last line; the output's tail is printed first."""
    try:
        if log is None:
            result = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
        else:
            with log.open("a") as out:
                out.write(f"\n$ {' '.join(cmd)}\n")
                out.flush()
                start = out.tell()
                result = subprocess.run(
                    list(cmd), stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout
                )
            with log.open(errors="replace") as written:
                written.seek(start)
                result.stdout = written.read()  # this command's output alone
    except subprocess.TimeoutExpired:
        raise Failure(
            f"{what or cmd[0]}: still running after {timeout:.0f} s ({' '.join(cmd[:4])} ...)"
        ) from None
    except FileNotFoundError:
        raise Failure(f"{what or cmd[0]}: {cmd[0]} is not installed") from None
    if check and result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        say(tail(output) + (f"\n(full output: {log})" if log else ""))
        raise Failure(f"{what or ' '.join(cmd[:3])} failed (exit {result.returncode}): {last_line(output)}")
    return result


class Clock:
    """Wall time of each step, printed as it ends and as a table at the end."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.steps: list[tuple[str, float]] = []

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        say(f"== {name}")
        t0 = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - t0
            self.steps.append((name, seconds))
            say(f"   {seconds:.1f} s")

    def table(self) -> str:
        width = max([len(name) for name, _ in self.steps] + [10])
        rows = [f"  {name:<{width}}  {seconds:8.1f} s" for name, seconds in self.steps]
        rows.append(f"  {'total':<{width}}  {time.monotonic() - self.start:8.1f} s")
        return "\n".join(rows)
