"""`/healthz`: Boltz's health as JSON, for load balancers and monitors (no sign-in; not part of
the API's OpenAPI document). 200 when every check passes, else 503 with each check's reason
(attempts/services/health.py)."""

from __future__ import annotations

from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from attempts.services.health import health


@never_cache
@require_safe
def healthz(request):
    report = health()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
