"""How the API says what went wrong: every error is `{"detail", "code"}` JSON (its shape, for
the OpenAPI document, is `Error`), and the refusals of the services and the worker
(dispatch/errors.py) get their HTTP status here, and only here (`STATUSES`)."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpResponse, JsonResponse
from ninja import NinjaAPI, Schema
from ninja.errors import HttpError, ValidationError
from ninja.parser import Parser

from attempts.core.errors import TaskInvalid
from attempts.dispatch.errors import (
    FileAccessDenied,
    InfrastructureFault,
    InternalError,
    InvalidRequest,
    NoCapacity,
    NotFound,
    Refusal,
    SandboxDeleted,
    TimedOut,
    TooLarge,
    WorkerUnreachable,
    WrongState,
)
from attempts.dispatch.limits import UNREACHABLE_RETRY_AFTER


class Error(Schema):
    detail: str
    code: str


# What a handler's refusals answer; document.py adds what every route may answer (401, and 400 and
# 422 for a parameter or body of the wrong shape). OPERATION_ERRORS: a call run by the
# sandbox's user (its file permissions may refuse it), CAPACITY_ERRORS: one waiting for room.
ERRORS = {
    400: Error,
    404: Error,
    409: Error,
    410: Error,
    413: Error,
    502: Error,
    503: Error,
    504: Error,
}
OPERATION_ERRORS = {**ERRORS, 403: Error}
CAPACITY_ERRORS = {**ERRORS, 429: Error}

# Each kind of refusal and its HTTP status; a kind's own kinds (FileNotFound is a NotFound,
# SandboxNotLive a WrongState, ...) answer as it does.
STATUSES: dict[type[Refusal], int] = {
    InvalidRequest: 400,
    FileAccessDenied: 403,
    NotFound: 404,
    WrongState: 409,
    SandboxDeleted: 410,
    TooLarge: 413,
    NoCapacity: 429,
    InternalError: 500,
    InfrastructureFault: 502,
    WorkerUnreachable: 503,
    TimedOut: 504,
}

JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
JSON_KINDS[type(None)] = "null"


class NotAnObject(ValueError):
    """A request's body that is not one JSON object."""


class ObjectBodies(Parser):
    """Reads a route's JSON body, which must be one object (every body the API takes is):
    anything else (`[null]`, `3`, `"x"`, not JSON at all) is refused, 400 `invalid`, before
    any handler runs, rather than read as an object with every field left at its default."""

    def parse_body(self, request):
        try:
            body = json.loads(request.body, parse_float=_number)
        except (ValueError, RecursionError):
            raise NotAnObject("the request's body is not JSON: send one JSON object") from None
        if not isinstance(body, dict):
            kind = JSON_KINDS.get(type(body), "value")
            raise NotAnObject(
                f'the request\'s body is a JSON {kind}, not an object: send {{"field": value, ...}}'
            )
        return body


def _number(text: str) -> int | float:
    """A JSON number: an int when it has no fraction (`3.0`), as JSON Schema counts it."""
    value = float(text)
    return int(value) if value.is_integer() else value


# Django Ninja's own refusals (a body it cannot parse, no token), in the same shape as ours.
HTTP_CODES = {400: "invalid", 401: "unauthorized", 403: "forbidden", 404: "not_found"}
NO_TOKEN = "no valid API token: send Authorization: Bearer <token> (manage.py create_token)"


def status_of(refusal: Refusal) -> int:
    """The HTTP status that says `refusal`: that of its nearest kind in STATUSES."""
    for kind in type(refusal).__mro__:
        if kind in STATUSES:
            return STATUSES[kind]
    return 500


def refusal_body(refusal: Refusal) -> dict:
    """A refusal said inside an answer that has begun (an exec stream's last line): the
    error's shape with its status, as the SDK reads it."""
    return {"detail": refusal.detail, "code": refusal.code, "status": status_of(refusal)}


def too_large_response(detail: str) -> HttpResponse:
    """A body refused before any handler ran (by boltz_web/request_limits.py), in the shape
    and with the status a handler's TooLarge gets."""
    refusal = TooLarge(detail)
    return JsonResponse({"detail": refusal.detail, "code": refusal.code}, status=status_of(refusal))


def install(api: NinjaAPI) -> None:
    """Answer every error the handlers of `api` let through as the API does."""

    def refused(request, exc: Refusal):
        response = api.create_response(
            request, {"detail": exc.detail, "code": exc.code}, status=status_of(exc)
        )
        if isinstance(exc, NoCapacity):
            response["Retry-After"] = str(exc.retry_after)
        elif isinstance(exc, WorkerUnreachable):  # Redis down: nothing was done, try again
            response["Retry-After"] = str(UNREACHABLE_RETRY_AFTER)
        return response

    def task_invalid(request, exc: TaskInvalid):  # a task the caller gave that cannot run
        return refused(request, InvalidRequest("", f"{exc.field}: {exc.message}"))

    def invalid_input(request, exc: ValidationError):
        where = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg', 'invalid')}"
            for e in exc.errors[:10]
        )
        return api.create_response(request, {"detail": where, "code": "invalid"}, status=422)

    def http_error(request, exc: HttpError):
        code = HTTP_CODES.get(exc.status_code, "invalid")
        detail = NO_TOKEN if exc.status_code == 401 else str(exc)
        if isinstance(exc.__cause__, NotAnObject):  # its reason, rather than "Cannot parse"
            detail = str(exc.__cause__)
        response = api.create_response(
            request, {"detail": detail, "code": code}, status=exc.status_code
        )
        if exc.status_code == 401:  # RFC 9110: a 401 names the scheme that would do
            response["WWW-Authenticate"] = 'Bearer realm="boltz"'
        return response

    def body_too_big(request, exc: RequestDataTooBig):  # past DATA_UPLOAD_MAX_MEMORY_SIZE
        return refused(
            request,
            TooLarge(
                f"the request's body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} "
                "bytes (BOLTZ_MAX_FILE_BYTES + 1 MiB)"
            ),
        )

    def not_found(request, exc: Http404):
        return refused(request, NotFound("not found"))

    api.add_exception_handler(Refusal, refused)
    api.add_exception_handler(TaskInvalid, task_invalid)
    api.add_exception_handler(ValidationError, invalid_input)
    api.add_exception_handler(HttpError, http_error)
    api.add_exception_handler(Http404, not_found)
    api.add_exception_handler(RequestDataTooBig, body_too_big)
