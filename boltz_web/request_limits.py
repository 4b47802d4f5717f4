"""Every request's body bounded before anything reads it: a Content-Length over the limit is
refused at once (413), the API's in its JSON error shape and a page's as a page, and the body
is read past in small chunks and thrown away, never held (so the client, which sends its whole
body before it reads an answer, gets the answer, and the server reads no more into memory than
a chunk). A body without a Content-Length is empty to Django under WSGI.

The limits: the API's is BOLTZ_MAX_FILE_BYTES + 1 MiB (a file or archive whole, with room for
its JSON); a page's (a form with an uploaded archive) is BOLTZ_MAX_UPLOAD_BYTES + 1 MiB."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import render

from attempts.api.errors import too_large_response
from boltz_web.error_pages import API_PREFIX, back_url

DRAIN_CHUNK = 1 << 16
MIB = 1 << 20


def body_limit(path: str) -> tuple[int, str]:
    """The largest body a request to `path` may send, and the settings it comes from."""
    if path.startswith(API_PREFIX):  # Django's limit of a body read whole: the same
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "BOLTZ_MAX_FILE_BYTES + 1 MiB"
    return settings.BOLTZ_MAX_UPLOAD_BYTES + MIB, "BOLTZ_MAX_UPLOAD_BYTES + 1 MiB"


class RequestBodyLimit:
    """Refuses a request whose Content-Length is over its limit (`body_limit`) before the
    body is read (last in MIDDLEWARE: none above it reads a body, and its answer gets their
    headers)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # Django reads such a body as empty
        limit, source = body_limit(request.path)
        if length <= limit:
            return self.get_response(request)
        _drain(request.META.get("wsgi.input"), length)
        detail = (
            f"the request's body is {length} bytes, more than the {limit} bytes this server "
            f"takes ({source})"
        )
        if request.path.startswith(API_PREFIX):
            return too_large_response(detail)
        return render(
            request, "413.html", {"detail": detail, "back": back_url(request)}, status=413
        )


def _drain(stream, length: int) -> None:
    """Read past a refused body a chunk at a time, keeping nothing."""
    if stream is None:
        return
    left = length
    while left > 0:
        chunk = stream.read(min(DRAIN_CHUNK, left))
        if not chunk:
            return
        left -= len(chunk)
