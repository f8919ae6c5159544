"""LlamaIndex (llama-index-core) on the infonce-search API: a vector store and an embedding model.

    from llama_index.core import StorageContext, VectorStoreIndex
    from infonce_search import Client
    from infonce_search.integrations.llama_index import InfonceSearchEmbedding, InfonceSearchVectorStore

    client = Client("http://localhost:8000", api_key="...")
    storage = StorageContext.from_defaults(vector_store=InfonceSearchVectorStore(client=client))
    index = VectorStoreIndex(nodes, storage_context=storage, embed_model=InfonceSearchEmbedding(client=client))
    nodes = index.as_retriever(similarity_top_k=5).retrieve("which animal regrows limbs?")

The server encodes with the model it fine-tuned: `add` upserts each node's text and metadata (POST
/documents; the vectors LlamaIndex computed are not sent, the server's document encoder makes them), and
`query` searches with the query's text (POST /search, in the store's `mode`), or with its vector when there
is no text. `InfonceSearchEmbedding` (POST /embed) makes LlamaIndex's own vectors the server's, so nothing
calls another embedding service. Install: `pip install "./clients/python[llama-index]"`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from infonce_search.client import Client
from infonce_search.models import Mode

REF_DOC_KEY = "ref_doc_id"  # the source document's id, kept in each node's metadata (for delete(ref_doc_id))
RANGE_OPS = {
    FilterOperator.GT: "gt",
    FilterOperator.GTE: "gte",
    FilterOperator.LT: "lt",
    FilterOperator.LTE: "lte",
}


class InfonceSearchEmbedding(BaseEmbedding):
    """Vectors in the live index's space (POST /embed): queries by the live query encoder, texts by the
    model that encoded the corpus."""

    model_name: str = "infonce-search"
    _client: Client = PrivateAttr()

    def __init__(self, client: Client, **kwargs: Any):
        super().__init__(**kwargs)
        self._client = client

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._client.embed([query], kind="query").embeddings[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._client.embed([text], kind="document").embeddings[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._client.embed(texts, kind="document").embeddings if texts else []


def server_filter(filters: MetadataFilters | None) -> dict[str, Any] | None:
    """LlamaIndex's metadata filters as the API's (AND of ==, in, >, >=, <, <=); others raise."""
    if filters is None or not filters.filters:
        return None
    if filters.condition not in (None, FilterCondition.AND):
        raise NotImplementedError("infonce-search filters combine conditions with AND only")
    out: dict[str, Any] = {}
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            raise NotImplementedError("nested metadata filters are not supported by infonce-search")
        if f.operator == FilterOperator.EQ:
            out[f.key] = f.value
        elif f.operator == FilterOperator.IN:
            out[f.key] = list(f.value) if isinstance(f.value, list | tuple) else [f.value]
        elif f.operator in RANGE_OPS:
            out.setdefault(f.key, {})[RANGE_OPS[f.operator]] = f.value
        else:
            raise NotImplementedError(f"filter operator {f.operator} is not supported by infonce-search")
    return out


class InfonceSearchVectorStore(BasePydanticVectorStore):
    """A collection of an infonce-search server as a LlamaIndex vector store (it stores the text)."""

    stores_text: bool = True
    is_embedding_query: bool = True
    mode: Mode | None = Field(
        default=None, description="dense, lexical or hybrid (None: the bundle's default)."
    )
    _client: Client = PrivateAttr()

    def __init__(self, client: Client, mode: Mode | None = None, **kwargs: Any):
        super().__init__(mode=mode, **kwargs)
        self._client = client

    @property
    def client(self) -> Client:
        return self._client

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Upsert the nodes' texts and metadata in one request (the server encodes them)."""
        documents = []
        for node in nodes:
            metadata = dict(node.metadata)
            if node.ref_doc_id is not None:
                metadata[REF_DOC_KEY] = node.ref_doc_id
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            documents.append({"id": node.node_id, "text": text, "metadata": metadata})
        if documents:
            self._client.upsert_documents(documents)
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of source document `ref_doc_id` (found by a filtered search, in pages)."""
        while True:
            answer = self._client.search(
                vector=None, query=ref_doc_id, top_k=100, filter={REF_DOC_KEY: ref_doc_id}, mode="dense"
            )
            ids = [h.id for h in answer.hits]
            if not ids:
                return
            self._client.delete_documents(ids)

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> None:
        if filters is not None:
            raise NotImplementedError("delete by filter: delete by node id instead")
        if node_ids:
            self._client.delete_documents(node_ids)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Search with the query's text (the store's mode), or its vector (dense) when it has no text."""
        filter = server_filter(query.filters)
        include = ("text", "metadata")
        k = query.similarity_top_k
        if query.query_str:
            answer = self._client.search(
                query.query_str, top_k=k, filter=filter, include=include, mode=self.mode
            )
        elif query.query_embedding is not None:
            answer = self._client.search(
                vector=query.query_embedding, top_k=k, filter=filter, include=include
            )
        else:
            raise ValueError("a VectorStoreQuery with neither query_str nor query_embedding")
        nodes: list[BaseNode] = []
        for hit in answer.hits:
            metadata = dict(hit.metadata or {})
            ref = metadata.pop(REF_DOC_KEY, None)
            source = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=str(ref))} if ref is not None else {}
            nodes.append(TextNode(id_=hit.id, text=hit.text or "", metadata=metadata, relationships=source))
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[h.score for h in answer.hits], ids=[h.id for h in answer.hits]
        )
