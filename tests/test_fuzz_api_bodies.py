"""Fuzzed API bodies and path parameters, in the web process as it serves them (Django's test
client, no worker, no Docker, as the web has none): every operation of the OpenAPI document
that takes a body gets arbitrary bytes, JSON of any shape, and objects with the schema's own
keys holding values of the wrong type, size or sign; path ids of any size. Each answers a 4xx
with the API's JSON error shape (`{"detail", "code"}`), never a 5xx or an HTML page.

The bodies go to sandboxes, pools and tasks that do not exist, so nothing is created but an
evaluation's record; tests/test_schemathesis.py fuzzes the same document against live
sandboxes on a served web process and a worker.
"""

from __future__ import annotations

import json

import pytest
from django import forms
from django.contrib.auth import get_user_model
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attempts.admin import AgentForm
from attempts.api.routes import api
from attempts.api.tokens import token_create
from attempts.dispatch import hosts
from tests.fuzz_inputs import (
    DEEP_JSON,
    DEEP_OBJECT,
    LONG_INTEGER,
    bytes_like,
    examples,
    json_values,
)

pytestmark = pytest.mark.django_db

EXAMPLES = examples(60)
SCHEMA = api.get_openapi_schema()
MISSING_ID = 2**31 - 7  # no sandbox, pool, attempt or evaluation has it


def _resolve(schema: dict) -> dict:
    while "$ref" in schema:
        schema = SCHEMA["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _bodies() -> list[tuple[str, str, dict]]:
    """(method, path, schema of the JSON body) of every operation that takes a body."""
    found = []
    for path, operations in SCHEMA["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                found.append((method, path, _resolve(content["application/json"]["schema"])))
            elif content:  # files and archives: raw bytes
                found.append((method, path, {}))
    return sorted(found, key=lambda op: (op[1], op[0]))


OPERATIONS = _bodies()


def _wrong_values(schema: dict) -> st.SearchStrategy:
    """Values for a schema's property, of its type and not: numbers past every bound and NaN,
    strings with NUL and of kilobytes, nested objects, lists of the wrong items."""
    return st.one_of(
        json_values,
        st.sampled_from([0, -1, 2**63, 2**64, -(2**63) - 1, 1e308, -1e-308, 10**30]),
        st.sampled_from(["", "\0", "x" * 5000, "../../etc/passwd", "http://127.0.0.1/x"]),
        st.lists(st.text(max_size=5), max_size=3),
        st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    )


@st.composite
def requests(draw) -> tuple[str, str, str, bytes]:
    method, path, schema = draw(st.sampled_from(OPERATIONS))
    fields = sorted(_resolve(schema).get("properties", {}))
    body = draw(
        st.one_of(
            bytes_like(),
            json_values.map(lambda v: json.dumps(v).encode()),
            st.dictionaries(
                st.sampled_from(fields or ["x"]), _wrong_values(schema), max_size=5
            ).map(lambda v: json.dumps(v).encode()),
        )
    )
    content_type = "application/octet-stream" if not schema else "application/json"
    return method, path, content_type, body


def _fill(path: str, value: str) -> str:
    for name in ("sandbox_id", "pool_id", "attempt_id", "evaluation_id", "index", "slug"):
        path = path.replace("{" + name + "}", value if name != "slug" else "no-such-task")
    return path


_clients: list[Client] = []  # this test's client, made at its first example


def _client() -> Client:
    """A client with a token of a user with no sandbox."""
    if not _clients:
        user, _ = get_user_model().objects.get_or_create(username="fuzzer")
        _clients.append(Client(HTTP_AUTHORIZATION=f"Bearer {token_create(user=user)[1]}"))
    return _clients[0]


def _send(method: str, url: str, body: bytes, content_type: str):
    if method in ("get", "delete"):
        return getattr(_client(), method)(url)
    return getattr(_client(), method)(url, data=body, content_type=content_type)


def assert_json_refusal_or_success(response, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.content[:300]!r}"
    assert response["Content-Type"].startswith("application/json"), what
    if response.status_code >= 400:
        answer = json.loads(response.content)
        assert isinstance(answer.get("detail"), str) and answer["detail"], what
        assert isinstance(answer.get("code"), str) and answer["code"], what


@pytest.fixture(autouse=True)
def _as_the_web_process():
    """This process plays the web process, which has no Docker of its own to ask about
    images; and each test makes its own client (its user is rolled back after it)."""
    before = hosts.local_docker()
    hosts.use_local_docker(None)
    _clients.clear()
    yield
    hosts.use_local_docker(before)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(requests(), st.sampled_from([str(MISSING_ID), "0", "-1", str(2**64), "1e3", "x"]))
@example(("post", "/api/sandboxes", "application/json", DEEP_JSON), "1")
@example(("post", "/api/sandboxes", "application/json", b'{"task": ' + LONG_INTEGER + b"}"), "1")
@example(("post", "/api/sandboxes", "application/json", b'{"image": "\\u0000"}'), "1")
@example(("post", "/api/sandboxes", "application/json", b'{"task": "t", "ttl": 1e999}'), "1")
def test_a_body_is_answered_with_json_never_a_server_error(request, path_id):
    method, path, content_type, body = request
    url = _fill(path, path_id)
    response = _send(method, url, body, content_type)
    assert_json_refusal_or_success(response, f"{method.upper()} {url} {body[:200]!r}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.sampled_from(sorted({p for _, p, _ in OPERATIONS} | set(SCHEMA["paths"]))),
    st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10),
    ),
)
@example("/api/sandboxes/{sandbox_id}", str(2**64))
def test_a_path_id_of_any_size_is_a_json_refusal(path, value):
    if "{" not in path:
        return
    url = _fill(path, value.replace("/", "_").replace("?", "_").replace("#", "_"))
    for method in SCHEMA["paths"][path]:
        response = _send(method, url, b"{}", "application/json")
        assert_json_refusal_or_success(response, f"{method.upper()} {url}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.one_of(
        json_values.map(json.dumps),
        st.text(max_size=60),
        st.lists(st.text(max_size=10).map(lambda t: t + "=" + t), max_size=4).map("\n".join),
    )
)
@example(DEEP_OBJECT.decode())  # was RecursionError: a 500 on the admin page
def test_a_saved_agents_environment_is_names_or_a_form_error(raw):
    """The admin's environment field of a saved agent (staff type it, or paste it as JSON)."""
    try:
        env = AgentForm._given_environment(raw)
    except forms.ValidationError as exc:
        assert exc.messages
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
