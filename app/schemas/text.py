"""The one check every text that can reach a tokenizer passes: /search queries, /embed and
/v1/embeddings inputs, documents written through the API (and their metadata strings).

JSON can carry a lone surrogate (`"\\udfff"` is a valid escape) that is not valid Unicode: Python holds it,
but nothing downstream can encode it (the tokenizers raise, SQLite refuses it), so it is refused here with
a 422 naming the field and the character. Control characters are valid text and pass: the tokenizers
treat them as any other character (tests/app/test_bad_input.py sends them to every text route).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def valid_unicode(text: str) -> str:
    """`text`, or ValueError when it holds a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid Unicode (lone surrogate at character {exc.start})") from None
    return text


Text = Annotated[str, AfterValidator(valid_unicode)]
