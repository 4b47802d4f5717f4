"""Every page's answer, finished here: security headers (a Content-Security-Policy that forbids
inline scripts); a look, now and then, for attempts lost with their host; and a 503 page when
Boltz's queue to its workers (Redis) cannot be reached."""

from django.shortcuts import render

from attempts.dispatch.errors import WorkerUnreachable
from attempts.dispatch.limits import UNREACHABLE_RETRY_AFTER
from attempts.services.lost_hosts import end_lost_attempts_now_and_then
from boltz_web.error_pages import back_url

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


class SecurityHeadersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response


class LostHostsMiddleware:
    """Before a request is answered, the attempts of hosts gone silent are ended (at most
    every few seconds): with no worker running anywhere, the web process is the one that
    notices, and a page, a list or an API call never shows such an attempt live."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        end_lost_attempts_now_and_then()
        return self.get_response(request)


class WorkersUnreachablePages:
    """A page (the start button, re-run, re-check, the admin's actions) that needed the workers'
    queue while Redis was down: a 503 page that says nothing was started, not a 500. (The API
    answers its own errors: a JSON 503, api/errors.py.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, WorkerUnreachable):
            return None
        page = render(
            request,
            "503.html",
            {"detail": exception.detail, "back": back_url(request)},
            status=503,
        )
        page["Retry-After"] = str(UNREACHABLE_RETRY_AFTER)
        return page
