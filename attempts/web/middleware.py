"""Security headers for every page: a Content-Security-Policy that forbids inline scripts; and a
look, now and then, for attempts lost with their host."""

from attempts.services.lost_hosts import end_lost_attempts_now_and_then

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
