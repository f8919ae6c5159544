"""Schemathesis against the real app (issues 11 and 27): every operation of the OpenAPI spec, generated
valid and invalid requests sent with the API key, and every check schemathesis has but `ignored_auth`
(see below), positive data acceptance (a request the spec calls valid is not refused with a 4xx the spec
does not allow) and negative data rejection included; then its stateful phase (sequences of calls linked through responses).

The app is the real one (lifespan, the session's live demo-dataset bundle, a real SQLite job queue without a
worker, a data root with a dataset), driven through a TestClient. The spec is the one this app serves,
so it states this server's limits (app/api/openapi.py). Examples are bounded (`MAX_EXAMPLES` per operation and mode,
`STATEFUL_*` for the stateful phase) so the module stays within a few minutes of CI on 2 cores; the token
budget is lowered so no generated search encodes more than a few hundred tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.main import create_app
from tests.app.conftest import make_settings, publish

KEY = {"X-API-Key": "test-key"}
MAX_EXAMPLES = 12
STATEFUL_EXAMPLES = 6
STATEFUL_STEPS = 6


# this server's limits: the spec states them (app/api/openapi.py), so it is built from the same settings
LIMITS = dict(
    reload_poll_seconds=0,
    encoder_backend="auto",  # the bundle's ONNX int8 encoder: the cheapest per generated query
    max_request_tokens=512,
    max_documents_batch=4,  # generated upserts are encoded: keep each one to a few short documents
    max_document_chars=200,
)
# the spec depends on settings only, not on what is loaded: built once, at collection, from an app that
# is never started (pytest 9 broke schemathesis.pytest.from_fixture, which could have taken the fixture's)
SPEC_SETTINGS = make_settings(Path("unused"), **LIMITS)
schema = schemathesis.openapi.from_dict(create_app(SPEC_SETTINGS).openapi())
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
# 413: within every limit the spec states, over a budget JSON Schema cannot state (a request's tokens, an
# answer's bytes: app/errors.py TooLargeError); every other 4xx to a valid request fails the check
schema.config.checks.positive_data_acceptance.expected_statuses = [
    *schema.config.checks.positive_data_acceptance.expected_statuses,
    "413",
]
# `ignored_auth` proves the key is enforced by sending probes without it through schemathesis's own
# transport, which cannot reach this TestClient's app (with its lifespan). tests/app/test_openapi_surface.py
# proves the same for every operation whose spec declares the key: 401 without it, 403 with a wrong one.
schema.config.checks.update(excluded_check_names=["ignored_auth"])


@schema.hook
def filter_body(ctx, body):
    """Rules across fields, which JSON Schema cannot compare (the spec states them in words): TrainConfig's
    (app/api/openapi.py CROSS_FIELD_RULES), and a search's offset + top_k within SEARCH_MAX_TOP_K (its
    `offset` description). Generated bodies that break one are not sent."""
    if not isinstance(body, dict):
        return True
    offset, top_k = body.get("offset", 0), body.get("top_k", 10)
    if isinstance(offset, int) and isinstance(top_k, int) and offset + top_k > SPEC_SETTINGS.max_top_k:
        return False
    options = body.get("options")
    # a retrain job's options, or a new collection's (POST /collections: no `type`, retrain options)
    if not isinstance(options, dict) or body.get("type", "retrain") != "retrain":
        return True
    low, high = options.get("hard_negative_rank_min", 10), options.get("hard_negative_rank_max", 100)
    # 202691.0 is the integer 202691 in JSON Schema (schemathesis sends such values)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)) and high <= low:
        return False
    infonce_only = options.get("decoupled") is True or _positive(options.get("debiased_tau_plus"))
    if options.get("loss") == "aninfonce" and (infonce_only or options.get("learn_temperature") is True):
        return False
    return not (options.get("decoupled") is True and _positive(options.get("debiased_tau_plus")))


def _positive(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


@pytest.fixture(scope="module")
def api(staged, tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    bundles = root / "bundles"  # its own folder: generated POST /documents must not reach other tests
    publish(staged["A"], bundles)
    data = root / "data" / "mini"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    settings_ = make_settings(
        bundles,
        data_root=root / "data",
        models_root=root / "models",
        queue_url=f"sqlite:///{root / 'jobs.db'}",
        **LIMITS,
    )
    with TestClient(create_app(settings_), raise_server_exceptions=False) as client:
        yield client


def unready_answers(response: Response) -> list:
    """The checks to leave out for this response: a 503 `no_live_bundle` is the documented answer of a
    collection with nothing published yet (a generated POST /collections makes one), not a server fault;
    every other 5xx still fails `not_a_server_error`."""
    if response.status_code != 503:
        return []
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return []
    return [not_a_server_error] if code == "no_live_bundle" else []


def send(api: TestClient, case) -> Response:
    kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=KEY)
    # the spec's security schemes let schemathesis generate a Bearer key too: only the right key is sent
    kwargs["headers"] = {k: v for k, v in kwargs["headers"].items() if k.lower() != "authorization"}
    body = kwargs.pop("data", None)
    if body is not None:
        kwargs["content"] = body
    kwargs.pop("cookies", None)
    return Response.from_any(api.request(**kwargs))


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same cases on every run: a failure in CI reproduces locally
)
def test_every_operation_answers_within_its_spec(case, api):
    response = send(api, case)
    case.validate_response(response, excluded_checks=unready_answers(response))  # every other check


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES, deadline=None, phases=[Phase.explicit], suppress_health_check=list(HealthCheck)
)
def test_the_spec_examples_answer_within_the_spec(case, api):
    """The spec's own examples, and the bodies schemathesis assembles from its defaults. Those assembled
    bodies do not pass through `filter_body`, so they may break a TrainConfig rule across fields, which
    no spec can state: positive data acceptance is the one check left out here (the generated cases
    above run it)."""
    response = send(api, case)
    case.validate_response(response, excluded_checks=[positive_data_acceptance, *unready_answers(response)])


def test_stateful_sequences_answer_within_the_spec(api):
    """Sequences of calls where one response's values feed the next request (links schemathesis infers
    from the spec: a written document's id read back, a job's id cancelled, …), every check on each."""

    class WithKey(schema.as_state_machine()):  # type: ignore[misc]
        def call(self, case, **kwargs):
            return send(api, case)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, excluded_checks=unready_answers(response))

    WithKey.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
    )
