"""`python -m training feedback FILE --url URL`: send a file of relevance judgments to a running server.

The one command that talks HTTP: judgments are the served model's traffic, so they go where it serves
(POST /feedback, or /collections/{name}/feedback), through the project's own client (infonce_search:
retries on 429/503, errors in one shape). The file is read and checked whole first
(training/data/judgments_file.py); it is sent in batches, each stored all or none by the server, and a
refused judgment is named by its file and line, not by its place in a request body.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from contract.errors import InfonceSearchError
from infonce_search import Client
from infonce_search.errors import ApiError
from infonce_search.errors import InfonceSearchError as ClientError
from training.cli.support import fail
from training.data.judgments_file import JudgmentLine, load_judgments

# judgments per request: POST /feedback takes up to 1000 (app/schemas/feedback.py); half keeps each
# request's store transaction short beside other writers
DEFAULT_BATCH = 500
ITEM = re.compile(r"body\.judgments\[(\d+)\]\.?")


def feedback_cmd(
    file: Annotated[
        Path, typer.Argument(help="Judgments: .jsonl ({query, document_id, relevant, search_id?}) or .tsv.")
    ],
    url: Annotated[
        str, typer.Option("--url", help="The server, e.g. http://localhost:8000.")
    ] = "http://localhost:8000",
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            envvar=["SEARCH_FEEDBACK_KEY", "SEARCH_API_KEY"],
            help="The server's SEARCH_FEEDBACK_KEY or SEARCH_API_KEY (read from those variables when not given).",
        ),
    ] = None,
    collection: Annotated[
        str | None, typer.Option("--collection", help="A collection or alias; default: the default one.")
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=1000, help="Judgments per request.")
    ] = DEFAULT_BATCH,
) -> None:
    """Send judgments to POST /feedback; prints how many were stored."""
    try:
        rows = load_judgments(file)
    except InfonceSearchError as exc:
        fail(str(exc))
    if not key:
        fail("no key: pass --key or set SEARCH_FEEDBACK_KEY or SEARCH_API_KEY (the server's)")
    stored, total = 0, 0
    with Client(url, api_key=key) as client:
        target = client.collection(collection) if collection else client
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            try:
                answer = target.feedback([r.as_json() for r in chunk])
            except ApiError as exc:
                sent = f"; the {stored} judgments before it are stored" if stored else "; nothing stored"
                fail(f"{_where(file, chunk, exc.message)} ({exc.status_code} {exc.code}){sent}")
            except ClientError as exc:
                fail(
                    f"{url}: {exc}"
                    + (f"; the {stored} judgments before line {chunk[0].line} are stored" if stored else "")
                )
            stored += answer.stored
            total = answer.total
    typer.echo(f"stored {stored} judgments from {file} ({total} kept by the collection now)")


def _where(file: Path, chunk: list[JudgmentLine], message: str) -> str:
    """`body.judgments[3].document_id: …` as `FILE:LINE: field 'document_id' …`."""
    m = ITEM.search(message)
    if m is None or int(m.group(1)) >= len(chunk):
        return f"{file}: {message}"
    line = chunk[int(m.group(1))].line
    rest = message[m.end() :]
    field, sep, reason = rest.partition(":")
    if sep and field and " " not in field:  # as DataError words it: FILE:LINE: field 'x' reason
        return f"{file}:{line}: field '{field}' {reason.strip()}"
    return f"{file}:{line}: {rest.lstrip(': ')}"
