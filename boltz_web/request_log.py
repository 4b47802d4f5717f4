"""One log line per request, written when its answer has been sent (so a streamed exec or a
download is logged with its whole duration): method, path (never its query string, which may
hold a token), status, duration in ms, the user's id (from a session or an API token) and a
request id. The id is the client's X-Request-ID when it sends a plain one (a proxy's), else a
new one; either way the answer carries it back in X-Request-ID."""

from __future__ import annotations

import logging
import re
import time
import uuid
from urllib.parse import quote

log = logging.getLogger("boltz_web.requests")

_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_MAX_PATH = 500


def request_id(request) -> str:
    given = request.headers.get("X-Request-ID", "")
    return given if _CLIENT_ID.match(given) else uuid.uuid4().hex


def user_id(request) -> int | None:
    user = getattr(request, "user", None)  # set by the session's middleware or the API's token
    return user.pk if user is not None and user.is_authenticated else None


class RequestLogMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        began = time.monotonic()
        request.request_id = request_id(request)
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        # Called by the server once the last byte has gone (or the client left): a streamed
        # answer is logged with its whole time. Django's own hook for closing what an answer
        # holds; the test client calls it too.
        response._resource_closers.append(lambda: self.log(request, response, began))
        return response

    @staticmethod
    def log(request, response, began: float) -> None:
        path = quote(request.path, safe="/:@!$&'()*+,;=-._~")[:_MAX_PATH]
        duration = round((time.monotonic() - began) * 1000, 1)
        fields = {
            "method": request.method,
            "path": path,
            "status": response.status_code,
            "duration_ms": duration,
            "user_id": user_id(request),
            "request_id": request.request_id,
        }
        if response.streaming:
            fields["streamed"] = True
        log.info(
            "%s %s %s %.1fms",
            request.method,
            path,
            response.status_code,
            duration,
            extra={"fields": fields},
        )
