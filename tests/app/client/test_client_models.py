"""The client's models (infonce_search/models.py, written by hand) against the live server's OpenAPI spec:
every model has exactly the fields of the server's component of the same name, and demands none that the
server may leave out. Real answers are read through them in tests/app/client/test_client.py."""

from __future__ import annotations

import inspect

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from infonce_search import models
from tests.app.conftest import make_settings

CLIENT_MODELS = {
    name: cls
    for name, cls in inspect.getmembers(models, inspect.isclass)
    if issubclass(cls, models.Model) and cls is not models.Model
}


@pytest.fixture(scope="module")
def components(tmp_path_factory) -> dict[str, dict]:
    """The spec's schemas as the server serves them (output side: FastAPI may suffix `-Output`)."""
    settings = make_settings(tmp_path_factory.mktemp("spec") / "bundles")
    with TestClient(create_app(settings)) as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    return {
        name.removesuffix("-Output"): schema
        for name, schema in schemas.items()
        if not name.endswith("-Input")
    }


def test_every_response_of_the_client_has_a_model():
    routes = {"SearchResponse", "EmbedResponse", "OpenAIEmbeddingResponse", "OpenAIModelList", "OpenAIModel",
              "GapResponse", "ReadyWithCollections", "BundlesResponse", "ActivateResponse", "MutationResponse",
              "DocumentOut", "JobDetail", "JobSummary", "JobList"}  # fmt: skip
    assert routes <= set(CLIENT_MODELS)


@pytest.mark.parametrize("name", sorted(CLIENT_MODELS))
def test_model_matches_the_servers_component(name, components):
    assert name in components, f"the server's spec has no component {name}"
    schema = components[name]
    model = CLIENT_MODELS[name]
    assert set(model.model_fields) == set(schema.get("properties", {})), name
    demanded = {f for f, info in model.model_fields.items() if info.is_required()}
    assert demanded <= set(schema.get("required", [])), f"{name}: the client demands what the server may omit"
