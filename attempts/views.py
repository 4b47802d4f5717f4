"""Pages: thin views over selectors and services. The full review dashboard is its own issue."""

from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Count, Q
from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from . import services
from .bundle import bundle_filename
from .datasets import FORMATS
from .deletion import attempt_delete, sandbox_delete
from .models import Attempt, AuditEntry, Outcome, Task


@login_required
def task_list(request):
    tasks = Task.objects.annotate(
        n_attempts=Count("attempts"),
        n_passed=Count("attempts", filter=Q(attempts__outcome=Outcome.PASSED)),
        n_failed=Count(
            "attempts", filter=Q(attempts__outcome__in=[Outcome.FAILED, Outcome.AGENT_TIMEOUT])
        ),
        n_infra=Count("attempts", filter=Q(attempts__outcome=Outcome.INFRA_ERROR)),
    )
    return render(request, "attempts/task_list.html", {"tasks": tasks})


@login_required
def task_detail(request, slug):
    task = get_object_or_404(Task, slug=slug)
    attempts = task.attempts.order_by("-number")[:500]
    return render(
        request,
        "attempts/task_detail.html",
        {
            "task": task,
            "attempts": attempts,
            "formats": FORMATS,
            "outcomes": Outcome.choices,
        },
    )


@login_required
def attempt_detail(request, pk):
    attempt = get_object_or_404(Attempt.objects.select_related("task"), pk=pk)
    return render(
        request,
        "attempts/attempt_detail.html",
        {
            "attempt": attempt,
            "events": attempt.events.order_by("seq"),
            "checks": attempt.checks.prefetch_related("tests"),
            "audit": AuditEntry.objects.filter(attempt_id=attempt.pk),
        },
    )


@login_required
@permission_required("attempts.export_attempt", raise_exception=True)
def attempt_export(request, pk):
    attempt = get_object_or_404(Attempt.objects.select_related("task"), pk=pk)
    response = StreamingHttpResponse(
        services.attempt_export(attempt=attempt, by=request.user.get_username()),
        content_type="application/zip",
    )
    response["Content-Disposition"] = f'attachment; filename="{bundle_filename(attempt)}"'
    return response


@login_required
@permission_required("attempts.export_attempt", raise_exception=True)
def task_export(request, slug):
    task = get_object_or_404(Task, slug=slug)
    fmt = request.GET.get("format", "attempts")
    outcome = request.GET.get("outcome") or None
    if fmt not in FORMATS or (outcome and outcome not in Outcome.values):
        return HttpResponseBadRequest(
            f"format must be one of {', '.join(FORMATS)}; "
            f"outcome one of {', '.join(Outcome.values)}",
            content_type="text/plain",
        )
    lines = services.task_export(
        task=task,
        fmt=fmt,
        by=request.user.get_username(),
        outcome=outcome,
        agent=request.GET.get("agent") or None,
    )
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="boltz-{task.slug}-{fmt}.jsonl"'
    return response


DELETE_LEVELS = {
    "sandbox": "Delete the sandbox: the container and its workspace go; the record, timeline, "
    "diff and check stay.",
    "attempt": "Delete the attempt: its container, stored files, timeline and results go.",
}


@login_required
@permission_required("attempts.delete_attempt", raise_exception=True)
@require_http_methods(["GET", "POST"])
def attempt_delete_view(request, pk, level):
    attempt = get_object_or_404(Attempt.objects.select_related("task"), pk=pk)
    if level not in DELETE_LEVELS:
        return HttpResponseBadRequest("level must be sandbox or attempt", content_type="text/plain")
    if request.method == "GET":  # the confirmation step; nothing changes
        return render(
            request,
            "attempts/confirm_delete.html",
            {
                "attempt": attempt,
                "level": level,
                "explanation": DELETE_LEVELS[level],
            },
        )
    by = request.user.get_username()
    if level == "sandbox":
        sandbox_delete(attempt=attempt, by=by)
        return redirect(attempt.get_absolute_url())
    task = attempt.task
    attempt_delete(attempt=attempt, by=by)
    return redirect(task.get_absolute_url())
