"""LangChain (langchain-core) on the infonce-search API: a `VectorStore` and an `Embeddings`.

    from infonce_search import Client
    from infonce_search.integrations.langchain import InfonceSearchVectorStore

    store = InfonceSearchVectorStore(Client("http://localhost:8000", api_key="..."))
    store.add_texts(["Axolotls regrow limbs."], metadatas=[{"group": "zoo"}], ids=["ax-1"])
    docs = store.similarity_search("which animal regrows limbs?", k=4, filter={"group": "zoo"})

The server encodes documents and queries itself, with the model it fine-tuned (documents by the full
model, queries by the live query encoder): `add_texts` upserts text (POST /documents, API key) and the
searches send text (POST /search, in the store's `mode`), so no embedding model runs on the caller's side.
`embeddings` (`InfonceSearchEmbeddings`, POST /embed) gives the same vectors for chains that want them.
Install: `pip install "./clients/python[langchain]"` (langchain-core).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from infonce_search.client import Client
from infonce_search.models import Hit, Mode

INCLUDE = ("title", "text", "metadata")


class InfonceSearchEmbeddings(Embeddings):
    """Vectors in the live index's space (POST /embed): documents by the model that encoded the corpus,
    queries by the live query encoder."""

    def __init__(self, client: Client):
        self.client = client

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.client.embed(texts, kind="document").embeddings if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.client.embed([text], kind="query").embeddings[0]


def to_document(hit: Hit) -> Document:
    """A hit as LangChain's Document: its text, its metadata (with `title` and `score` added), its id."""
    metadata = dict(hit.metadata or {})
    metadata.setdefault("title", hit.title or "")
    metadata["score"] = hit.score
    return Document(page_content=hit.text or "", metadata=metadata, id=hit.id)


class InfonceSearchVectorStore(VectorStore):
    """A collection of an infonce-search server as a LangChain vector store.

    `client`: an `infonce_search.Client` (its API key authorises writes; `client.collection("name")` for
    another collection). `mode`: dense, lexical or hybrid for every search (None: the bundle's default).
    `filter` arguments are the API's metadata filters (`{"field": value}`, `{"field": [a, b]}`,
    `{"field": {"gte": 1}}`). Scores are the server's: see `similarity_search_with_score`."""

    def __init__(self, client: Client, *, mode: Mode | None = None):
        self.client = client
        self.mode = mode
        self._embeddings = InfonceSearchEmbeddings(client)

    @property
    def embeddings(self) -> Embeddings:
        return self._embeddings

    # -- writes ----------------------------------------------------------------------------------------------
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Upsert the texts (one request; an id given again replaces its document). `metadata["title"]`,
        when present, becomes the document's title (encoded in front of the text, as in the corpus)."""
        texts = list(texts)
        ids = list(ids) if ids is not None else [str(uuid.uuid4()) for _ in texts]
        metadatas = metadatas or [{} for _ in texts]
        if not len(texts) == len(ids) == len(metadatas):
            raise ValueError(
                f"{len(texts)} texts, {len(ids)} ids and {len(metadatas)} metadatas: give one each"
            )
        documents = []
        for doc_id, text, metadata in zip(ids, texts, metadatas, strict=True):
            meta = dict(metadata)
            documents.append(
                {"id": doc_id, "text": text, "title": str(meta.pop("title", "")), "metadata": meta}
            )
        if documents:
            self.client.upsert_documents(documents)
        return ids

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        ids = kwargs.pop("ids", None) or [d.id or str(uuid.uuid4()) for d in documents]
        return self.add_texts([d.page_content for d in documents], [d.metadata for d in documents], ids=ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete by id; True when every id existed (unknown ids are not an error on the server)."""
        if not ids:
            return None
        return not self.client.delete_documents(ids).not_found

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents that exist, in the order given (missing ids are left out, as LangChain asks)."""
        from infonce_search.errors import NotFound

        found = []
        for doc_id in ids:
            try:
                doc = self.client.get_document(doc_id)
            except NotFound:
                continue
            metadata = {**doc.metadata, "title": doc.title}
            found.append(Document(page_content=doc.text, metadata=metadata, id=doc.id))
        return found

    # -- searches --------------------------------------------------------------------------------------------
    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Best first, with the server's score: dense the learned similarity (cosine for InfoNCE models),
        lexical BM25, hybrid the fused score (the answer's `mode` and `metric` say which)."""
        answer = self.client.search(query, top_k=k, filter=filter, include=INCLUDE, mode=self.mode)
        return [(to_document(h), h.score) for h in answer.hits]

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter)]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """A vector in the index's space (from `embeddings`): always a dense search."""
        answer = self.client.search(vector=embedding, top_k=k, filter=filter, include=INCLUDE)
        return [to_document(h) for h in answer.hits]

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        client: Client | None = None,
        url: str = "http://localhost:8000",
        api_key: str | None = None,
        mode: Mode | None = None,
        **kwargs: Any,
    ) -> InfonceSearchVectorStore:
        """A store on `client` (or a new Client on `url` with `api_key`) holding `texts`. `embedding` is
        not used: the server encodes with its own model."""
        store = cls(client or Client(url, api_key=api_key), mode=mode)
        store.add_texts(texts, metadatas, ids=ids)
        return store
