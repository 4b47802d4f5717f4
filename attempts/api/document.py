"""The API's OpenAPI document (/api/openapi.json), completed with what django-ninja does not
write from the handlers' signatures: the statuses every route answers (401 with its
WWW-Authenticate header; 422 for a parameter or body of the wrong shape; 400 for a body that is
not a JSON object), the Retry-After header of 429 and 503, the answers that are not JSON (a
file's bytes, a tar, a raw output, the exec stream) and the bodies a handler reads itself (a
file, an archive). The request schemas' own constraints are in routes.py and pools.py."""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
BYTES = {"type": "string", "format": "binary"}

WWW_AUTHENTICATE = {
    "WWW-Authenticate": {
        "description": "the scheme that would do: Bearer",
        "required": True,
        "schema": {"type": "string", "pattern": "^Bearer"},
    }
}
RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}

# Answers that are not JSON, by operation: their media type for status 200.
NOT_JSON = {
    ("get", "/api/sandboxes/{sandbox_id}/files"): ("application/octet-stream", BYTES),
    ("get", "/api/sandboxes/{sandbox_id}/archive"): ("application/x-tar", BYTES),
    ("get", "/api/attempts/{attempt_id}/outputs/{name}"): ("text/plain", {"type": "string"}),
}
# The exec's answer with "stream": true, besides its JSON one.
STREAM = ("post", "/api/sandboxes/{sandbox_id}/exec")
STREAM_LINES = {
    "type": "string",
    "description": 'one JSON object a line: {"stream": "stdout" or "stderr", "text"} while '
    'the command runs, then {"result": ExecResult}, or {"error": {"detail", "code", "status"}} '
    "when it could not answer once the stream had begun",
}
# Bodies a handler reads as bytes.
RAW_BODIES = {
    ("put", "/api/sandboxes/{sandbox_id}/files"): "the file's bytes",
    ("put", "/api/sandboxes/{sandbox_id}/archive"): "a tar archive (plain, gzip, bzip2 or xz)",
}


class BoltzAPI(NinjaAPI):
    """The API, whose document says everything its routes answer (`completed`)."""

    def get_openapi_schema(self, **kwargs) -> Any:
        return completed(super().get_openapi_schema(**kwargs))


def completed(schema: dict) -> dict:
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            _complete(operation, (method, path))
    return schema


def _complete(operation: dict, key: tuple[str, str]) -> None:
    responses = operation["responses"]
    if key in RAW_BODIES:
        operation["requestBody"] = {
            "description": RAW_BODIES[key],
            "content": {"application/octet-stream": {"schema": BYTES}},
        }
    _add(responses, 401, "no valid API token", headers=WWW_AUTHENTICATE)
    if operation.get("parameters") or "requestBody" in operation:
        _add(responses, 422, "a parameter or the body is not of the documented type or shape")
    if "application/json" in operation.get("requestBody", {}).get("content", {}):
        _add(responses, 400, "the body is not one JSON object, or a value is refused")
    for status in (429, 503):
        if status in responses:
            responses[status]["headers"] = RETRY_AFTER
    if key in NOT_JSON:
        media_type, answer = NOT_JSON[key]
        responses[200]["content"] = {media_type: {"schema": answer}}
    if key == STREAM:
        responses[200]["content"]["application/x-ndjson"] = {"schema": STREAM_LINES}


def _add(responses: dict, status: int, description: str, headers: dict | None = None) -> None:
    answer = responses.setdefault(status, {"description": description, "content": ERROR})
    if headers:
        answer["headers"] = headers
