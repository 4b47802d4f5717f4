"""Fuzzed answers to the SDK: what a server, a proxy in front of it or a cut connection may send
back (any status, any headers, any body; exec streams of any lines), through the SDK's real
transport over an httpx MockTransport. Each call gives its typed result or raises a BoltzError
with a message; never a raw KeyError, TypeError, ValueError or RecursionError. See
tests/fuzz_inputs.py.
"""

from __future__ import annotations

import json

import httpx
from hypothesis import example, given, settings
from hypothesis import strategies as st

import boltz
from boltz.errors import BoltzError, error_from_response, parse_retry_after
from tests.fuzz_inputs import DEEP_JSON, LONG_INTEGER, bytes_like, examples, json_bytes, json_values

EXAMPLES = examples(60)
URL = "http://boltz.test"
SANDBOX = {"id": 7, "attempt": 70, "task": "t", "name": "t#1", "state": "live", "url": URL}

statuses = st.one_of(
    st.sampled_from([200, 201, 204, 302, 400, 401, 404, 409, 429, 500, 502, 504]),
    st.integers(100, 599),
)
headers = st.dictionaries(
    st.sampled_from(["content-type", "retry-after", "location", "x-other"]),
    st.one_of(
        st.sampled_from(["application/json", "application/x-ndjson", "text/html", "1e999", "nan"]),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
    ),
)
bodies = bytes_like(
    json_values.map(json_bytes),
    st.fixed_dictionaries(
        {}, optional={"detail": json_values, "code": json_values, "status": json_values}
    ).map(json_bytes),
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "stream": json_values,
                    "text": json_values,
                    "result": json_values,
                    "code": json_values,
                    "detail": json_values,
                    "status": json_values,
                },
            ).map(json_bytes),
            bytes_like(),
        ),
        max_size=4,
    ).map(b"\n".join),
)


def _client(status: int, head: dict, body: bytes) -> boltz.Client:
    def server(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/api/sandboxes/7":
            return httpx.Response(200, json=SANDBOX)
        return httpx.Response(status, headers=head, content=body)

    return boltz.Client(URL, token="t", transport=httpx.MockTransport(server))


CALLS = {
    "exec": lambda sb: sb.exec("true"),
    "exec streamed": lambda sb: sb.exec("true", on_output=lambda stream, text: None),
    "check": lambda sb: sb.check(),
    "diff": lambda sb: sb.diff(),
    "files.list": lambda sb: sb.files.list(),
    "files.read": lambda sb: sb.files.read("x"),
    "refresh": lambda sb: sb.refresh(),
}


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(sorted(CALLS)), statuses, headers, bodies)
@example("exec streamed", 200, {"content-type": "application/x-ndjson"}, DEEP_JSON)
@example(
    "exec streamed", 200, {"content-type": "application/x-ndjson"}, b'{"code": "x", "status": {}}'
)
@example("exec", 400, {}, DEEP_JSON)  # was RecursionError reading the error's detail
@example("exec", 200, {}, b'{"exit_code": ' + LONG_INTEGER + b"}")
@example("files.list", 200, {}, b"NaN")  # was TypeError: a list answer that is not a list
@example("files.list", 200, {}, b'{"name": "x"}')
def test_an_answer_is_a_result_or_a_boltz_error(call, status, head, body):
    with _client(status, head, body) as client:
        sandbox = client.get_sandbox(7)
        try:
            CALLS[call](sandbox)
        except BoltzError as exc:
            assert str(exc)


@settings(max_examples=EXAMPLES, deadline=None)
@given(statuses, headers, bodies)
@example(500, {}, DEEP_JSON)  # was RecursionError
@example(400, {"retry-after": "1e999"}, b'{"detail": {"a": 1}, "code": ["x"]}')
def test_an_error_answer_is_a_boltz_error(status, head, body):
    error = error_from_response(status, body, httpx.Headers(head))
    assert isinstance(error, BoltzError) and error.detail and str(error)
    retry = parse_retry_after(head.get("retry-after"))
    assert retry is None or retry >= 0


def test_tasks_from_a_proxy_page_are_a_boltz_error():
    with _client(200, {"content-type": "text/html"}, b"<html>proxy</html>") as client:
        try:
            client.tasks()
        except BoltzError as exc:
            assert "not JSON" in str(exc)
        else:
            raise AssertionError("an HTML page was read as tasks")
    assert json.loads(json_bytes([1])) == [1]
