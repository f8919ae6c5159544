"""The LangChain and LlamaIndex vector stores (infonce_search/integrations/) against the real app served
by uvicorn on loopback, with the session's bundle A in a bundles folder of this module's own (the stores
write documents into its mutation log)."""

from __future__ import annotations

import numpy as np
import pytest

from app.main import create_app
from infonce_search import Client
from tests.app.conftest import make_settings, publish
from tests.servers import serve_app

KEY = "test-key"
ANIMALS = [
    (
        "zoo-axolotl",
        "Axolotls regrow whole limbs, spinal cord and parts of the heart after injury.",
        "amphibian",
    ),
    (
        "zoo-okapi",
        "Okapis are the only living relatives of the giraffe, found in Congo's rainforest.",
        "mammal",
    ),
    (
        "zoo-tardigrade",
        "Tardigrades survive boiling, freezing and the vacuum of space by drying out.",
        "micro",
    ),
]


@pytest.fixture(scope="module")
def server(staged, tmp_path_factory):
    bundles = tmp_path_factory.mktemp("integrations") / "bundles"
    version = publish(staged["A"], bundles)
    with serve_app(create_app(make_settings(bundles, reload_poll_seconds=0))) as url:
        yield url, version


def test_langchain_vector_store(server, shared_encoder):
    from langchain_core.documents import Document

    from infonce_search.integrations.langchain import InfonceSearchVectorStore

    url, _ = server
    with Client(url, api_key=KEY) as client:
        store = InfonceSearchVectorStore(client)
        ids = store.add_texts(
            [text for _, text, _ in ANIMALS],
            metadatas=[{"kind": kind, "title": doc_id} for doc_id, _, kind in ANIMALS],
            ids=[doc_id for doc_id, _, _ in ANIMALS],
        )
        assert ids == [doc_id for doc_id, _, _ in ANIMALS]

        found = store.similarity_search("Which animal regrows its limbs?", k=3)
        assert found[0].id == "zoo-axolotl" and found[0].page_content == ANIMALS[0][1]
        assert found[0].metadata["kind"] == "amphibian" and found[0].metadata["title"] == "zoo-axolotl"
        only = store.similarity_search("Which animal regrows its limbs?", k=3, filter={"kind": "mammal"})
        assert [d.id for d in only] == ["zoo-okapi"]
        scored = store.similarity_search_with_score("relatives of the giraffe", k=1)
        assert scored[0][0].id == "zoo-okapi" and 0 < scored[0][1] <= 1.0  # cosine (dense)

        vector = store.embeddings.embed_query("relatives of the giraffe")
        np.testing.assert_allclose(
            vector, shared_encoder.encode(["relatives of the giraffe"], kind="query")[0], atol=1e-5
        )
        assert store.similarity_search_by_vector(vector, k=1)[0].id == "zoo-okapi"
        retriever = store.as_retriever(search_kwargs={"k": 1})
        assert retriever.invoke("survives the vacuum of space")[0].id == "zoo-tardigrade"

        assert [d.id for d in store.get_by_ids(["zoo-okapi", "nope"])] == ["zoo-okapi"]
        assert store.delete(["zoo-okapi"]) is True
        assert store.delete(["zoo-okapi"]) is False  # already gone: not every id existed
        assert "zoo-okapi" not in [d.id for d in store.similarity_search("relatives of the giraffe", k=5)]

        more = InfonceSearchVectorStore.from_texts(
            ["Platypuses lay eggs and sense electric fields."], client=client, ids=["zoo-platypus"]
        )
        more.add_documents([Document(page_content="Naked mole-rats barely age.", id="zoo-mole-rat")])
        assert store.similarity_search("an egg-laying mammal", k=1)[0].id == "zoo-platypus"
        assert store.delete(["zoo-axolotl", "zoo-tardigrade", "zoo-platypus", "zoo-mole-rat"]) is True


def test_llama_index_vector_store(server, shared_encoder):
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    from infonce_search.integrations.llama_index import InfonceSearchEmbedding, InfonceSearchVectorStore

    url, _ = server
    with Client(url, api_key=KEY) as client:
        store = InfonceSearchVectorStore(client=client)
        embed_model = InfonceSearchEmbedding(client=client)
        source = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id="zoo-book")}
        nodes = [
            TextNode(id_=f"li-{doc_id}", text=text, metadata={"kind": kind}, relationships=source)
            for doc_id, text, kind in ANIMALS
        ]
        storage = StorageContext.from_defaults(vector_store=store)
        index = VectorStoreIndex(nodes, storage_context=storage, embed_model=embed_model)

        got = index.as_retriever(similarity_top_k=2).retrieve("Which animal regrows its limbs?")
        assert got[0].node.node_id == "li-zoo-axolotl" and got[0].node.get_content() == ANIMALS[0][1]
        assert got[0].node.metadata == {"kind": "amphibian"} and got[0].node.ref_doc_id == "zoo-book"
        assert got[0].score > got[1].score

        mammals = MetadataFilters(
            filters=[MetadataFilter(key="kind", value="mammal", operator=FilterOperator.EQ)]
        )
        filtered = index.as_retriever(similarity_top_k=3, filters=mammals).retrieve("regrows limbs")
        assert [n.node.node_id for n in filtered] == ["li-zoo-okapi"]
        query_vector = embed_model.get_query_embedding("relatives of the giraffe")
        np.testing.assert_allclose(
            query_vector, shared_encoder.encode(["relatives of the giraffe"], kind="query")[0], atol=1e-5
        )

        index.delete_ref_doc("zoo-book")  # every node of the source document
        left = index.as_retriever(similarity_top_k=5).retrieve("Which animal regrows its limbs?")
        assert not [n for n in left if n.node.node_id.startswith("li-")]
