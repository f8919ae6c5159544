"""`--help` for the benches that read key=value arguments rather than argparse flags."""

from __future__ import annotations


def asked_for_help(argv: list[str], doc: str | None) -> bool:
    """True (the module's docstring printed, as argparse prints its usage) when argv asks for help."""
    if not {"-h", "--help"} & set(argv[:1]):
        return False
    print(doc or "")
    return True
