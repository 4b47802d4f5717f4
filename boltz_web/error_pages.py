"""Every error a page can meet, as a page in Boltz's layout that says what went wrong and links
back (where the user came from, or the tasks): a query the page cannot answer (400, `BadQuery`),
a permission missing (403), an object that does not exist (404, `NotFound` or Django's Http404),
a form whose CSRF check failed, and a plain visit to an address that only takes a form's POST
(405). 500 is Django's own handler with the template of that name; 413 and 503 are rendered by
their middleware (request_limits.py, attempts/web/middleware.py) with `back_url`."""

from __future__ import annotations

from django.core.exceptions import BadRequest
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

API_PREFIX = "/api/"  # the API answers in JSON, its errors included


class BadQuery(BadRequest):
    """A page asked with query parameters it cannot answer (missing, not a number, not one of
    its choices): a 400 page that says which, and links `back` (the page without them)."""

    def __init__(self, message: str, *, back: str = ""):
        super().__init__(message)
        self.back = back


class NotFound(Http404):
    """What a page was asked for does not exist: a 404 page that names it and links `back`."""

    def __init__(self, message: str, *, back: str = ""):
        super().__init__(message)
        self.back = back


def _message(exception, kind: type[Exception]) -> str:
    """The exception's own message when it is one of `kind` and says something (a resolver's
    404 carries the URL patterns tried, a DisallowedHost the header it refused: neither shown)."""
    if isinstance(exception, kind) and exception.args and isinstance(exception.args[0], str):
        return exception.args[0]
    return ""


def bad_request(request, exception=None):
    """handler400. A BadQuery or BadRequest says what was wrong; anything else Django refuses
    before a view (a disallowed Host header) gets the general words and a link to the tasks,
    since the request's own host cannot be trusted to build the way back."""
    said = _message(exception, BadRequest)
    back = (getattr(exception, "back", "") or back_url(request)) if said else ""
    return render(request, "400.html", {"detail": said, "back": back}, status=400)


def permission_denied(request, exception=None):
    """handler403: who is signed in lacks the permission (or nobody is)."""
    return render(request, "403.html", {"back": back_url(request)}, status=403)


def page_not_found(request, exception=None):
    """handler404: what was not found, when the view said, and a way back."""
    back = getattr(exception, "back", "") or back_url(request)
    return render(
        request, "404.html", {"detail": _message(exception, Http404), "back": back}, status=404
    )


def back_url(request) -> str:
    """Where the user came from, when that is a page of this site; else the tasks list."""
    referer = request.META.get("HTTP_REFERER", "")
    if (
        referer
        and referer != request.build_absolute_uri()
        and url_has_allowed_host_and_scheme(
            referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return referer
    return reverse("attempts:tasks")


def csrf_failure(request, reason: str = ""):
    """settings.CSRF_FAILURE_VIEW: nothing was done; reload the form and send it again."""
    return render(
        request, "403_csrf.html", {"reason": reason, "back": back_url(request)}, status=403
    )


class MethodNotAllowedPages:
    """A bare 405 from a page's URL becomes a page saying what to do instead; the Allow header
    stays. The API's 405 answers, and answers that already have a body, pass unchanged."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code != 405
            or response.streaming
            or response.content
            or request.path.startswith(API_PREFIX)
        ):
            return response
        page = render(
            request,
            "405.html",
            {"method": request.method, "back": back_url(request)},
            status=405,
        )
        if response.has_header("Allow"):
            page["Allow"] = response["Allow"]
        return page
