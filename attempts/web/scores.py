"""Scores per agent on the dashboard: the task page's live scores panel and the leaderboard
(agents x tasks, sortable, as CSV). Thin views over the selectors; the maths is agent_scores.py."""

from __future__ import annotations

import csv

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from attempts.core.agent_scores import SORTS, TASK_SORT, leaderboard_csv, sort_key
from attempts.models import Task
from attempts.services.selectors import leaderboard as leaderboard_rows
from attempts.services.selectors import plot_points
from attempts.web.query_params import choice, without
from attempts.web.views import view_required
from boltz_web.error_pages import BadQuery

LEADERBOARD_COLUMNS = (
    ("agent", "Agent"),
    ("tasks", "Tasks"),
    ("attempts", "Scored attempts"),
    ("pass_rate", "Pass rate"),
    ("pass_at_1", "pass@1"),
    ("pass_at_k", "pass@{k}"),
    ("mean_score", "Mean score"),
)


def sort_header(key: str, label: str, column: str, descending: bool) -> dict:
    """A sortable column's header: its link's sort parameter (a click on the sorted column
    turns it around; numbers start best first, names A to Z) and its aria-sort."""
    if key == column:
        return {
            "key": key,
            "label": label,
            "sort": key if descending else f"-{key}",
            "aria": "descending" if descending else "ascending",
        }
    return {"key": key, "label": label, "sort": key if key == "agent" else f"-{key}", "aria": ""}


@login_required
@view_required
def task_scores_partial(request, slug):
    """The task page's scores panel alone: polled while any attempt of the task runs."""
    task = get_object_or_404(Task, slug=slug)
    return render(request, "attempts/_task_scores.html", {"task": task, "plot": plot_points(task)})


@login_required
@view_required
def leaderboard(request):
    search = request.GET.get("q", "").strip()
    sort = request.GET.get("sort") or "-pass_at_1"
    if sort_key(sort)[0] != sort.lstrip("-"):  # what sort_key would quietly replace
        raise BadQuery(
            f"sort={sort[:100]!r} is not a column of the leaderboard: one of "
            f"{', '.join(SORTS)} or {TASK_SORT}SLUG, with - before it for the other way round",
            back=without(request, "sort"),
        )
    csv_wanted = choice(request, "format", ["csv"]) == "csv"
    board = leaderboard_rows(search=search, sort=sort)
    if csv_wanted:
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        stamp = timezone.localtime().strftime("%Y%m%d-%H%M")
        response["Content-Disposition"] = f'attachment; filename="boltz-leaderboard-{stamp}.csv"'
        csv.writer(response).writerows(leaderboard_csv(board["groups"], board["tasks"]))
        return response
    column, descending = board["column"], board["descending"]
    headers = [
        sort_header(key, label.format(k=board["k"]), column, descending)
        for key, label in LEADERBOARD_COLUMNS
    ]
    task_headers = [
        sort_header(f"task:{slug}", slug, column, descending) for slug in board["shown_tasks"]
    ]
    return render(
        request,
        "attempts/leaderboard.html",
        {
            **board,
            "headers": headers,
            "task_headers": task_headers,
            "width": len(headers) + len(task_headers),
            "q": search,
        },
    )
