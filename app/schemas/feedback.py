"""Bodies of POST /feedback: relevance judgments on documents, in batches."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.schemas.documents import MAX_ID_CHARS
from app.schemas.search import Text
from contract.defaults import MAX_QUERY_CHARS

# judgments per request: a page of results judged for a few queries fits many times over, and a batch is
# one SQLite transaction that holds the store's write lock, so it stays short for the other replicas
MAX_FEEDBACK_BATCH = 1000
MAX_SEARCH_ID_CHARS = 200_000  # MAX_DEPTH ids of MAX_ID_CHARS each, base64url: the longest id /search makes


def _grade(value: Any) -> Any:
    # true/false are the binary judgment (3/0: relevant at the top grade, TREC's graded scale 0-3)
    if isinstance(value, bool):
        return 3 if value else 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        raise ValueError("must be a boolean or an integer grade 0-3, not a string")
    return value


Grade = Annotated[int, Field(ge=0, le=3), BeforeValidator(_grade)]


class Judgment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[Text, Field(min_length=1, max_length=MAX_QUERY_CHARS)] = Field(
        description="The query text the document was judged for."
    )
    document_id: Annotated[Text, Field(min_length=1, max_length=MAX_ID_CHARS)] = Field(
        description="A document of the collection."
    )
    relevant: bool | Grade = Field(
        description="true / false, or a graded relevance 0 (not relevant) to 3 (true is 3, false is 0)."
    )
    search_id: Annotated[str, Field(min_length=1, max_length=MAX_SEARCH_ID_CHARS)] | None = Field(
        None, description="The `search_id` of the /search result the document was shown in."
    )

    @property
    def grade(self) -> int:
        return _grade(self.relevant)


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judgments: list[Judgment] = Field(min_length=1, max_length=MAX_FEEDBACK_BATCH)


class FeedbackResponse(BaseModel):
    stored: int = Field(description="Judgments stored (all of the batch).")
    first_seq: int
    last_seq: int
    total: int = Field(description="Judgments the collection keeps now.")
