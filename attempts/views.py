"""Pages: thin views over selectors. The full review dashboard is its own issue."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, render

from .models import Attempt, Outcome, Task


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
    return render(request, "attempts/task_detail.html", {"task": task, "attempts": attempts})


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
        },
    )
