"""A retrieval dataset built from the installed manual pages: a corpus unlike scifact and the docstrings.

Each man(7)-format page under `/usr/share/man/man<N>/` (English pages only: the locale folders are
skipped) gives one retrieval pair:

- query    = the summary of its NAME line (`ls \\- list directory contents` → "list directory contents");
- document = its DESCRIPTION section as plain text (roff requests and escapes removed), titled with the
             page's name and section (`ls(1)`).

The roff source is read directly (gzip or plain), never rendered: `groff` output depends on the terminal
and the installed version, and rendering thousands of pages takes minutes. Pages that only include another
page (`.so`), symlinked aliases, mdoc(7) pages (BSD's macro set, a few dozen here), pages without both
sections, short summaries or descriptions, duplicate summaries or descriptions, and descriptions that
contain their own summary are dropped (the first in sorted path order is kept), and at most
MAX_PER_FAMILY pages of one family (the name up to its first `_` or `-`) are kept. A seeded sample of
`n_docs` pages forms the corpus and their queries are split into disjoint, seeded train and test sets, as
the demo dataset does (training/data/demo_data.py, whose writer this shares). The output is
byte-identical for the same installed pages, size and seed.
"""

from __future__ import annotations

import functools
import gzip
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from training.data.demo_data import DistinctPairs, DocPair, files_table, sample_and_write

logger = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/usr/share/man")
DEFAULT_DOCS = 2500
DEFAULT_TEST_QUERIES = 500
DEFAULT_SEED = 0
MIN_SUMMARY_WORDS = 3
MIN_BODY_WORDS = 20
MAX_BODY_CHARS = 1000  # as the demo dataset: about the 256 tokens the encoder reads
# pages per family (the name up to its first '_' or '-'): gcloud alone has ~1,400 templated pages here,
# which would make a third of the corpus one generator's output
MAX_PER_FAMILY = 150
MAX_READ_BYTES = 400_000  # a page's source; larger ones (a few generated references) are cut here

_SECTION = re.compile(r'^\.SH\s+"?([^"\n]*)"?\s*$', re.MULTILINE)
# font and size changes, special characters, strings, and other escapes without visible text
_ESCAPES = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # \fB \fI \fR \fP \f(CW \f[B]
    (re.compile(r"\\s[+-]?\d+"), ""),  # \s-1 point size
    (re.compile(r"\\\*(\[[^\]]*\]|\(..|.)"), ""),  # \*(lq string registers
    (re.compile(r"\\\((em|en|hy)"), "-"),
    (re.compile(r"\\\((lq|rq|dq|oq|cq|aq)"), '"'),
    (re.compile(r"\\\(bu"), ""),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),  # other special characters
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\[&|^/,%c:)]"), ""),
    (re.compile(r'\\".*$', re.MULTILINE), ""),  # comment to end of line
]
# requests whose arguments are running text (font alternation and the like); other requests are dropped
_TEXT_REQUESTS = re.compile(r"^\.(B|I|BR|BI|IB|IR|RB|RI|SM|SB|SS|IP|TP|TQ|UR|MT|OP|EX|EE)\b\s*(.*)$")


def _unescape(text: str) -> str:
    for pattern, repl in _ESCAPES:
        text = pattern.sub(repl, text)
    return text


def _request_text(line: str) -> str:
    """The running text of one source line: plain text as is, a text request's arguments, else ''."""
    if not line.startswith((".", "'")):
        return line
    m = _TEXT_REQUESTS.match(line)
    if not m:
        return ""
    args = m.group(2)
    if m.group(1) in ("IP", "TP", "TQ"):  # tag and indent: the tag (if any) is text
        args = args.split('"')[1] if args.startswith('"') and args.count('"') >= 2 else ""
    return args.replace('"', "")


def plain_text(source: str) -> str:
    """Roff source of a section → one line of text (requests and escapes removed, spaces collapsed)."""
    words = " ".join(_request_text(line) for line in source.splitlines())
    return " ".join(_unescape(words).split())


def _sections(source: str) -> dict[str, str]:
    """{SECTION NAME (upper case): its source}; the first of a repeated name wins."""
    marks = list(_SECTION.finditer(source))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(source)
        out.setdefault(m.group(1).strip().upper(), source[m.end() : end])
    return out


def parse_page(source: str) -> tuple[str, str] | None:
    """(summary, description) of a man(7) page's source, or None when it lacks either."""
    if source.lstrip().startswith(".so ") or re.search(r"^\.(Dd|Sh)\b", source, re.MULTILINE):
        return None  # an include of another page, or an mdoc(7) page
    sections = _sections(source)
    name, description = sections.get("NAME"), sections.get("DESCRIPTION")
    if not name or not description:
        return None
    name_line = plain_text(name)
    parts = name_line.split(" - ")
    if len(parts) != 2:  # no summary, or several pages' names and summaries on one NAME line
        return None
    summary = parts[1]
    body = plain_text(description)
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS].rsplit(" ", 1)[0]
    return summary.strip(), body


def _page_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(title `name(section)`, path) of every regular page file under root/man<N>/, in sorted order."""
    for folder in sorted(p for p in root.glob("man[0-9]*") if p.is_dir()):
        for path in sorted(folder.iterdir()):
            if path.is_symlink() or not path.is_file():
                continue
            stem = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
            name, dot, section = stem.rpartition(".")
            if dot and name:
                yield f"{name}({section})", path


def _read(path: Path) -> str | None:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            return f.read(MAX_READ_BYTES).decode("utf-8", "replace")
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


def harvest(root: Path | None = None) -> list[DocPair]:
    """Every usable (title, summary, description) under root, deduplicated, in path order."""
    return list(_harvest(root or DEFAULT_ROOT))


@functools.lru_cache(maxsize=4)
def _harvest(root: Path) -> tuple[DocPair, ...]:  # reading ~20k gzip files takes seconds: once per process
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no manual pages here (install man-db and manpages to build this)")
    pairs: list[DocPair] = []
    distinct = DistinctPairs(MIN_SUMMARY_WORDS, MIN_BODY_WORDS)
    families: dict[str, int] = {}
    for title, path in _page_files(root):
        family = re.split(r"[_\-(]", title, maxsplit=1)[0]
        if families.get(family, 0) >= MAX_PER_FAMILY:
            continue
        source = _read(path)
        parsed = parse_page(source) if source else None
        if parsed is None:
            continue
        summary, body = parsed
        if not distinct.admit(summary, body):
            continue
        families[family] = families.get(family, 0) + 1
        pairs.append(DocPair(title, summary, body))
    return tuple(pairs)


def build_man_dataset(
    out_dir: str | Path,
    *,
    n_docs: int = DEFAULT_DOCS,
    n_test: int = DEFAULT_TEST_QUERIES,
    seed: int = DEFAULT_SEED,
    root: Path | None = None,
) -> Path:
    """Write a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv, README.md) to out_dir.

    FileNotFoundError when `root` has no manual pages; written to a temp folder and renamed into place."""
    root = root or DEFAULT_ROOT
    pairs = harvest(root)
    return sample_and_write(
        out_dir,
        pairs,
        n_docs=n_docs,
        n_test=n_test,
        seed=seed,
        readme=functools.partial(_readme, root),
        what="manual-page dataset",
    )


def _readme(root: Path, n_usable: int, n_docs: int, n_train: int, n_test: int, seed: int) -> str:
    return f"""# manpages: the installed manual pages as a retrieval dataset

Built by `python -m training man-data` (training/data/man_pages.py) from the man(7) sources under
`{root.name}/man<N>/` of the building machine (read as roff, not rendered). Deterministic: the same
installed pages, size and seed give byte-identical files.

- **query**: the summary of a page's NAME line (`ls - list directory contents` → "list directory contents");
- **relevant document**: its DESCRIPTION section as plain text (cut at {MAX_BODY_CHARS} characters),
  titled with the page's name and section (e.g. `ls(1)`);
- kept: summaries of at least {MIN_SUMMARY_WORDS} words and descriptions of at least {MIN_BODY_WORDS} words; `.so`
  includes, symlinked aliases, mdoc pages, duplicate summaries or descriptions, and descriptions that repeat
  their summary are dropped, and at most {MAX_PER_FAMILY} pages of one family (name up to its first `_` or `-`) kept;
- {n_usable} usable pages; a sample of {n_docs} (seed {seed}) forms the corpus, one relevant document per query.

{files_table(n_docs, n_train, n_test, seed)}"""
