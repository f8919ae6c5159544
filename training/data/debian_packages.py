"""A retrieval dataset built from the installed Debian packages' descriptions: a software catalogue, a kind
of text unlike scientific abstracts, docstrings and manual pages.

Every stanza of dpkg's status file (`/var/lib/dpkg/status`, present on any Debian or Ubuntu machine) that
describes an installed package gives one retrieval pair:

- query    = the package's one-line synopsis (`Description:`'s first line, "GNU C Library: Shared libraries");
- document = its extended description as plain text (continuation lines joined, ` .` paragraph breaks
             become spaces), titled with the package's name (`libc6`).

Packages without an extended description, transitional and dummy packages (their text only points at
another package), short synopses or descriptions, duplicate synopses or descriptions (a source's binary
packages often share one), and descriptions that contain their own synopsis are dropped (the first in
file order is kept). A seeded sample of `n_docs` packages forms the corpus and their queries are split into
disjoint, seeded train and test sets, as the demo dataset does (training/data/demo_data.py, whose writer
this shares). The output is byte-identical for the same status file, size and seed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

from training.data.demo_data import DistinctPairs, DocPair, files_table, sample_and_write

DEFAULT_STATUS = Path("/var/lib/dpkg/status")
# 773 usable packages of 897 installed on the machine this was built on: 750 documents, 250 test queries
DEFAULT_DOCS = 750
DEFAULT_TEST_QUERIES = 250
DEFAULT_SEED = 0
MIN_SUMMARY_WORDS = 2  # synopses are terse ("Python HTTP library"); one word is a name, not a need
MIN_BODY_WORDS = 15
MAX_BODY_CHARS = 1000  # as the demo dataset: about the 256 tokens the encoder reads
# text that only redirects to another package: nothing to retrieve by
_BOILERPLATE = re.compile(r"\b(transitional|dummy) package\b", re.IGNORECASE)


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    """{field: value} of every stanza (continuation lines kept, newline-joined, leading space removed)."""
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        last = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and last is not None:
                fields[last] += "\n" + line[1:]
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        if fields:
            yield fields


def parse_description(description: str) -> tuple[str, str] | None:
    """(synopsis, extended description as one line) of a `Description:` value, or None without either."""
    synopsis, _, extended = description.partition("\n")
    # a line of "." alone is an empty line (a paragraph break) in deb-control(5)'s format
    words = " ".join(line for line in extended.splitlines() if line.strip() != ".")
    body = " ".join(words.split())
    synopsis = " ".join(synopsis.split())
    if not synopsis or not body:
        return None
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS].rsplit(" ", 1)[0]
    return synopsis, body


def harvest(status: Path | None = None) -> list[DocPair]:
    """Every usable (package, synopsis, description) of the status file, deduplicated, in file order."""
    return list(_harvest(status or DEFAULT_STATUS))


@functools.lru_cache(maxsize=4)
def _harvest(status: Path) -> tuple[DocPair, ...]:
    if not status.is_file():
        raise FileNotFoundError(f"{status}: no dpkg status file here (a Debian or Ubuntu machine has one)")
    distinct = DistinctPairs(MIN_SUMMARY_WORDS, MIN_BODY_WORDS)
    pairs: list[DocPair] = []
    for fields in _stanzas(status.read_text(encoding="utf-8", errors="replace")):
        if "installed" not in fields.get("Status", "").split() or "Package" not in fields:
            continue  # removed packages keep a stanza (config-files) with their old description
        parsed = parse_description(fields.get("Description", ""))
        if parsed is None or _BOILERPLATE.search(" ".join(parsed)):
            continue
        synopsis, body = parsed
        if distinct.admit(synopsis, body):
            pairs.append(DocPair(fields["Package"], synopsis, body))
    return tuple(pairs)


def build_packages_dataset(
    out_dir: str | Path,
    *,
    n_docs: int = DEFAULT_DOCS,
    n_test: int = DEFAULT_TEST_QUERIES,
    seed: int = DEFAULT_SEED,
    status: Path | None = None,
) -> Path:
    """Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv, README.md) to out_dir.

    FileNotFoundError when the status file is missing; written to a temp folder and renamed into place."""
    status = status or DEFAULT_STATUS
    return sample_and_write(
        out_dir,
        harvest(status),
        n_docs=n_docs,
        n_test=n_test,
        seed=seed,
        readme=functools.partial(_readme, status),
        what="package-description dataset",
    )


def _readme(status: Path, n_usable: int, n_docs: int, n_train: int, n_test: int, seed: int) -> str:
    return f"""# debpkgs: the installed Debian packages' descriptions as a retrieval dataset

Built by training/data/debian_packages.py from the dpkg status file (`{status.name}`) of the building
machine. Deterministic: the same status file, size and seed give byte-identical files.

- **query**: a package's one-line synopsis ("GNU C Library: Shared libraries");
- **relevant document**: its extended description as plain text (cut at {MAX_BODY_CHARS} characters), titled
  with the package's name (e.g. `libc6`);
- kept: installed packages with synopses of at least {MIN_SUMMARY_WORDS} words and descriptions of at least
  {MIN_BODY_WORDS} words; transitional and dummy packages, duplicate synopses or descriptions, and descriptions
  that repeat their synopsis are dropped;
- {n_usable} usable packages; a sample of {n_docs} (seed {seed}) forms the corpus, one relevant document per query.

{files_table(n_docs, n_train, n_test, seed)}"""
