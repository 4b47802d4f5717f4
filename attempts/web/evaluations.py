"""SWE-bench prediction runs on the dashboard: the runs, one run's instances and report, and two
runs compared (what one resolved and the other did not). Thin views over predictions.py and
the selectors."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from attempts.models import Evaluation, Task
from attempts.services.predictions import (
    current_report,
    evaluation_counts,
    evaluation_refresh,
    report_filename,
    with_base_url,
)
from attempts.services.selectors import run_names, runs_compared
from attempts.web.query_params import page_of, without
from attempts.web.views import view_required
from boltz_web.error_pages import BadQuery, NotFound

RUNS_PER_PAGE = 50
RESULT_BADGES = {
    "resolved": "outcome-passed",
    "unresolved": "outcome-failed",
    "empty": "",
    "error": "outcome-infra_error",
    "running": "status-running",
}


@login_required
@view_required
def run_list(request):
    runs = Evaluation.objects.order_by("-created_at", "-pk")
    page = page_of(request, runs, RUNS_PER_PAGE)
    rows = list(page.object_list)
    for evaluation in rows:
        evaluation.counts = evaluation_counts(evaluation)
    return render(
        request,
        "attempts/run_list.html",
        {"page": page, "runs": rows, "names": run_names()},
    )


@login_required
@view_required
def run_detail(request, pk):
    evaluation = evaluation_refresh(get_object_or_404(Evaluation, pk=pk))
    report = current_report(evaluation)
    instances = []
    for instance_id, info in sorted(report["boltz"]["instances"].items()):
        instances.append(
            {"instance_id": instance_id, **info, "badge": RESULT_BADGES.get(info["result"], "")}
        )
    return render(
        request,
        "attempts/run_detail.html",
        {
            "evaluation": evaluation,
            "report": report,
            "instances": instances,
            "counts": evaluation_counts(evaluation),
            "live": evaluation.state != Evaluation.State.FINISHED,
            "names": [n for n in run_names() if n != evaluation.run_id],
        },
    )


@login_required
@view_required
def run_report(request, pk):
    """The run's report as the harness writes it ({model}.{run_id}.json), links absolute."""
    evaluation = evaluation_refresh(get_object_or_404(Evaluation, pk=pk))
    report = with_base_url(current_report(evaluation), request.build_absolute_uri("/")[:-1])
    response = HttpResponse(json.dumps(report, indent=4), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{report_filename(evaluation)}"'
    return response


@login_required
@view_required
def runs_compare(request):
    a, b = request.GET.get("a", "").strip(), request.GET.get("b", "").strip()
    back = reverse("attempts:runs")
    if not a or not b:
        raise BadQuery(
            "Pick two runs to compare: ?a=RUN&b=RUN (and &task=SLUG for one task); the runs "
            "page's Compare form does.",
            back=back,
        )
    for name in (a, b):
        if not Evaluation.objects.filter(run_id=name).exists():
            raise NotFound(f"There is no run named “{name[:200]}”.", back=back)
    slug = request.GET.get("task", "").strip()
    task = Task.objects.filter(slug=slug).first() if slug else None
    if slug and task is None:
        raise NotFound(f"There is no task “{slug[:200]}”.", back=without(request, "task"))
    compared = runs_compared(a, b, task=task)
    for side in ("only_a", "only_b"):
        for row in compared[side]:
            row["badge_a"] = RESULT_BADGES.get(row["ra"], "")
            row["badge_b"] = RESULT_BADGES.get(row["rb"], "")
    return render(
        request,
        "attempts/runs_compare.html",
        {**compared, "task": task, "names": run_names()},
    )
