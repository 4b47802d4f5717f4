"""Error pages that Django would answer bare: a form whose CSRF check failed, and a plain visit
to an address that only takes a form's POST (405). Both in Boltz's layout, with a way back.
(403, 404, 400 and 500 are Django's own handlers with the templates of the same names.)"""

from __future__ import annotations

from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

API_PREFIX = "/api/"  # the API answers in JSON, its errors included


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
