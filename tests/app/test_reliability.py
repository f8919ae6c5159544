"""Schemathesis against the real app (issue 11): every operation of the OpenAPI spec, generated valid and
invalid requests sent with the API key, zero server errors and zero responses outside the spec.

The app is the real one (lifespan, the session's live scifact bundle, a real SQLite job queue without a
worker, a data root with a dataset). Examples are bounded (`MAX_EXAMPLES` per operation and mode) so the
whole module stays within about a minute and a half of CI on 2 cores; the token budget is lowered so no
generated search encodes more than a few hundred tokens.
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import make_settings, publish

pytestmark = pytest.mark.scifact
KEY = {"X-API-Key": "test-key"}
MAX_EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# the spec does not depend on settings: build it once, at collection, from an app that is never started
schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@pytest.fixture(scope="module")
def api(staged, tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    bundles = root / "bundles"  # its own folder: generated POST /documents must not reach other tests
    publish(staged["A"], bundles)
    data = root / "data" / "mini"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    settings = make_settings(
        bundles,
        reload_poll_seconds=0,
        encoder_backend="auto",  # the bundle's ONNX int8 encoder: the cheapest per generated query
        max_request_tokens=512,
        max_documents_batch=4,  # generated upserts are encoded: keep each one to a few short documents
        max_document_chars=200,
        data_root=root / "data",
        models_root=root / "models",
        queue_url=f"sqlite:///{root / 'jobs.db'}",
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same cases on every run: a failure in CI reproduces locally
)
def test_every_operation_answers_within_its_spec(case, api):
    kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=KEY)
    body = kwargs.pop("data", None)
    if body is not None:
        kwargs["content"] = body
    kwargs.pop("cookies", None)
    response = api.request(**kwargs)
    case.validate_response(response, checks=CHECKS)
