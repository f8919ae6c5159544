"""Bodies of POST /embed and the OpenAI-compatible POST /v1/embeddings (pydantic; the OpenAPI text)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator

from app.schemas.text import Text, valid_unicode

EmbedKind = Literal["query", "document"]
# documents may be longer than queries (SEARCH_MAX_QUERY_CHARS applies to queries; every text is cut at the
# model's max length and the token budget bounds the work); this only bounds what is parsed at all
MAX_TEXT_CHARS = 32_768
EmbedText = Annotated[Text, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
_TEXT_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS}
# one text or a list of them; validated as a list, so an error names `body.input.3`, not a union branch
Texts = Annotated[
    list[EmbedText],
    BeforeValidator(lambda v: [v] if isinstance(v, str) else v),
    Field(min_length=1),
    WithJsonSchema({"anyOf": [_TEXT_SCHEMA, {"type": "array", "items": _TEXT_SCHEMA, "minItems": 1}]}),
]
# OpenAI's input forms besides text: one token-id array or several (LangChain's OpenAIEmbeddings sends these
# by default); a token array is at most what OpenAI accepts (8,192 ids), the token budget bounds the rest
MAX_TOKEN_IDS = 8192
_TOKENS_SCHEMA = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0},
    "minItems": 1,
    "maxItems": MAX_TOKEN_IDS,
}
OPENAI_INPUT_SCHEMA = {
    "anyOf": [
        _TEXT_SCHEMA,
        {"type": "array", "items": _TEXT_SCHEMA, "minItems": 1},
        _TOKENS_SCHEMA,
        {"type": "array", "items": _TOKENS_SCHEMA, "minItems": 1},
    ]
}
SPACE_DOC = (
    "Vectors are in the live index's space, exactly what /search compares: unit embeddings for an InfoNCE "
    "model (metric 'cosine', inner product = cosine); for AnInfoNCE (metric 'aninfonce') the unit embedding "
    "scaled by sqrt(Lambda), so that -1/2 * squared L2 distance is the learned similarity."
)
KIND_DOC = (
    "query: encoded by the query encoder /search uses (possibly a faster ONNX or distilled one, see GET "
    "/bundles); document: by the full model that encoded the indexed corpus."
)


class EmbedRequest(BaseModel):
    """One text or several; queries or documents."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"input": ["vitamin D and bone fractures"], "kind": "query"}]},
    )

    input: Texts = Field(description="A text, or a list of texts (answered in order).")
    kind: EmbedKind = Field("query", description=KIND_DOC)

    @property
    def texts(self) -> list[str]:
        return list(self.input)


class EmbedResponse(BaseModel):
    version: str = Field(description="Bundle version whose model produced the vectors.")
    metric: Literal["cosine", "aninfonce"] = Field(description="The learned similarity of that model.")
    kind: EmbedKind
    encoder: str = Field(description="The encoder that ran: the live query backend, or torch for documents.")
    dim: int
    embeddings: list[list[float]] = Field(description="One vector per input, in order. " + SPACE_DOC)
    encode_ms: float = Field(description="Encoding time on the server (shared by a micro-batch).")


class OpenAIEmbeddingRequest(BaseModel):
    """OpenAI's embeddings request; `model` is accepted and answered with the live bundle's version."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"input": ["vitamin D and bone fractures"], "model": "infonce-search"}]
        },
    )

    input: Annotated[Any, WithJsonSchema(OPENAI_INPUT_SCHEMA)] = Field(
        description="A text, a list of texts, a token-id array or a list of them (answered in order). "
        "Token ids are decoded to text with the encoding SEARCH_OPENAI_TOKEN_ENCODING names (default "
        "cl100k_base, what OpenAI's clients and LangChain's OpenAIEmbeddings tokenise with; `model`: the "
        "served model's own tokenizer), then encoded like text."
    )
    model: str | None = Field(
        None,
        max_length=256,
        description="The served model: `infonce-search` or the live bundle's version (GET /v1/models); "
        "another name is 404 model_not_found. Unset: the served model.",
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: JSON numbers; base64: little-endian float32 bytes, base64-encoded."
    )
    dimensions: int | None = Field(
        None,
        ge=1,
        description="At most this many components: longer vectors are cut to it (and L2-normalised again "
        "for a cosine model, as OpenAI does); a model with fewer answers with all of its own.",
    )
    user: str | None = Field(None, max_length=256, description="Ignored.")
    input_type: EmbedKind = Field("query", description="Not in OpenAI's API (as in Cohere's): " + KIND_DOC)

    @field_validator("input", mode="before")
    @classmethod
    def _texts_or_token_ids(cls, v: Any) -> list[str] | list[list[int]]:
        """Normalised to a list of texts or a list of token-id arrays; errors name the item."""
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not v:
            raise ValueError("give a text, a list of texts, a token-id array or a list of them (not empty)")
        if all(_is_id(x) for x in v):
            v = [v]  # one token array
        if all(isinstance(x, str) for x in v):
            for i, text in enumerate(v):
                if not 1 <= len(text) <= MAX_TEXT_CHARS:
                    raise ValueError(f"input[{i}]: a text of 1 to {MAX_TEXT_CHARS} characters")
                try:
                    valid_unicode(text)  # the check /embed and /search apply (app/schemas/text.py)
                except ValueError as exc:
                    raise ValueError(f"input[{i}] {exc}") from None
            return list(v)
        for i, row in enumerate(v):
            if not isinstance(row, list) or not row or not all(_is_id(x) for x in row):
                raise ValueError(
                    f"input[{i}]: all texts, or all token-id arrays (non-empty lists of integers >= 0)"
                )
            if len(row) > MAX_TOKEN_IDS:
                raise ValueError(f"input[{i}]: {len(row)} token ids, at most {MAX_TOKEN_IDS}")
        return [[int(x) for x in row] for row in v]

    @property
    def token_ids(self) -> list[list[int]] | None:
        """The token-id arrays, when the input is token ids (else None: texts)."""
        return None if isinstance(self.input[0], str) else list(self.input)


def _is_id(x: Any) -> bool:
    """A token id: an integer >= 0 (JSON's 12.0 is one too, as JSON Schema's `integer` says)."""
    if isinstance(x, float):
        return x.is_integer() and x >= 0
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="The vector, or its base64 float32 bytes. " + SPACE_DOC)


class OpenAIUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str = Field(description="The live bundle's version.")
    usage: OpenAIUsage


SERVED_MODEL = "infonce-search"  # the served model's stable name (GET /v1/models), whatever version is live


class OpenAIModel(BaseModel):
    id: str = Field(description="A name of the served model, accepted as `model` by POST /v1/embeddings.")
    object: Literal["model"] = "model"
    created: int = Field(0, description="Unix time the live bundle was published (0: not recorded).")
    owned_by: str = "infonce-search"


class OpenAIModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIModel]
