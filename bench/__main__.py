"""`python -m bench` lists the benches; `python -m bench NAME [args...]` runs one with its own arguments."""

from __future__ import annotations

import importlib
import sys

from bench.catalog import BENCHES, summary


def listing() -> str:
    width = max(map(len, BENCHES))
    lines = ["usage: python -m bench NAME [args...]   (NAME --help for a bench's own arguments)", ""]
    return "\n".join(lines + [f"  {name:{width}s}  {summary(name)}" for name in sorted(BENCHES)])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in BENCHES:
        print(f"unknown bench {name!r}\n\n{listing()}", file=sys.stderr)
        return 2
    sys.argv = [f"python -m bench {name}", *rest]  # argparse's usage line names the bench
    result = importlib.import_module(BENCHES[name]).main(rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
