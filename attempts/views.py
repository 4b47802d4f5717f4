"""Pages and their live partials: thin views over selectors and presenters."""

from __future__ import annotations

import posixpath

import unidiff
from django.contrib.auth.decorators import login_required, permission_required
from django.core.files.storage import default_storage
from django.core.paginator import Paginator
from django.db.models import F
from django.http import FileResponse, Http404, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render

from . import auth, diffview, services
from .bundle import bundle_filename
from .datasets import FORMATS
from .models import DONE_STATUSES, Agent, Attempt, AuditEntry, EventKind, Outcome, Task
from .presenters import timeline_items
from .selectors import (
    attempt_or_404,
    latest_checks,
    plot_points,
    run_names,
    task_rows,
    test_grid,
)

ATTEMPTS_PER_PAGE = 50
view_required = permission_required(auth.VIEW, raise_exception=True)


@login_required
@view_required
def task_list(request):
    sort = request.GET.get("sort", "slug")
    search = request.GET.get("q", "").strip()
    return render(
        request,
        "attempts/task_list.html",
        {
            "rows": task_rows(search=search, sort=sort),
            "sort": sort,
            "q": search,
        },
    )


def _task_attempts_context(request, task: Task) -> dict:
    outcome = request.GET.get("outcome", "")
    agent = request.GET.get("agent", "")
    run = request.GET.get("run", "")
    attempts = (
        task.attempts.defer("diff").annotate(run_id=F("evaluation__run_id")).order_by("-number")
    )
    if outcome:
        attempts = attempts.filter(outcome=outcome)
    if agent:
        attempts = attempts.filter(agent=agent)
    if run:
        attempts = attempts.filter(evaluation__run_id=run)
    page = Paginator(attempts, ATTEMPTS_PER_PAGE).get_page(request.GET.get("page"))
    rows = list(page.object_list)
    checks = latest_checks([a.pk for a in rows])
    for a in rows:
        a.last_check = checks.get(a.pk)
    query = request.GET.copy()
    query.pop("page", None)
    return {
        "task": task,
        "page": page,
        "attempts": rows,
        "outcome": outcome,
        "agent": agent,
        "run": run,
        "live": any(a.status not in DONE_STATUSES for a in rows),
        "query": query.urlencode(),
    }


@login_required
@view_required
def task_detail(request, slug):
    task = get_object_or_404(Task, slug=slug)
    context = _task_attempts_context(request, task)
    context.update(
        {
            "grid": test_grid(list(reversed(context["attempts"]))),
            "plot": plot_points(task),
            "formats": FORMATS,
            "outcomes": Outcome.choices,
            "saved_agents": list(Agent.objects.values_list("name", flat=True)),
            "agents": list(
                task.attempts.order_by("agent").values_list("agent", flat=True).distinct()
            ),
            "numbers": list(
                task.attempts.order_by("-number").values_list("number", flat=True)[:200]
            ),
            "runs": run_names(task=task),
        }
    )
    return render(request, "attempts/task_detail.html", context)


@login_required
@view_required
def task_attempts_partial(request, slug):
    """The attempts table alone: polled while any attempt on it is still going."""
    task = get_object_or_404(Task, slug=slug)
    return render(request, "attempts/_attempts_table.html", _task_attempts_context(request, task))


VIEWS = ("timeline", "changes", "check")


def _header_context(attempt: Attempt) -> dict:
    live = attempt.status not in DONE_STATUSES
    last_check = latest_checks([attempt.pk]).get(attempt.pk)
    return {"attempt": attempt, "live": live, "poll": live, "last_check": last_check}


@login_required
@view_required
def attempt_detail(request, pk):
    view = request.GET.get("view", "timeline")
    if view not in VIEWS:
        view = "timeline"
    attempt = attempt_or_404(pk, diff=view == "changes")
    context = {
        **_header_context(attempt),
        "view": view,
        "audit": AuditEntry.objects.filter(attempt_id=attempt.pk)[:50],
    }
    if view == "timeline":
        kind = request.GET.get("kind", "")
        events = attempt.events.order_by("seq")
        if kind:
            events = events.filter(kind=kind)
        events = list(events)
        if events and not kind:  # the whole timeline is here: no need to ask again
            start, last = events[0].time, events[-1].seq
        else:
            start = attempt.events.order_by("seq").values_list("time", flat=True).first()
            last = attempt.events.order_by("-seq").values_list("seq", flat=True).first() or 0
        context.update(
            {
                "items": timeline_items(events, start),
                "kind": kind,
                "after": last,
                "kinds": EventKind.values,
            }
        )
    elif view == "changes":
        context.update(_changes_context(attempt))
    else:
        context["checks"] = list(attempt.checks.prefetch_related("tests"))
    return render(request, "attempts/attempt_detail.html", context)


@login_required
@view_required
def attempt_timeline_partial(request, pk):
    """New events after `after`, the header (out of band), and the next poll if still live."""
    attempt = attempt_or_404(pk)
    try:
        after = int(request.GET.get("after", 0))
    except ValueError:
        return HttpResponseBadRequest("after must be a number", content_type="text/plain")
    kind = request.GET.get("kind", "")
    events = attempt.events.filter(seq__gt=after).order_by("seq")
    if kind:
        events = events.filter(kind=kind)
    events = list(events[:1000])
    start = attempt.events.order_by("seq").values_list("time", flat=True).first()
    last = attempt.events.order_by("-seq").values_list("seq", flat=True).first() or after
    if events and events[-1].seq < last:
        last = events[-1].seq  # more to fetch: the next poll takes them
    return render(
        request,
        "attempts/_timeline_update.html",
        {
            **_header_context(attempt),
            "items": timeline_items(events, start),
            "after": last,
            "kind": kind,
            "poll": attempt.status not in DONE_STATUSES or last > after,
        },
    )


def _changes_context(attempt: Attempt) -> dict:
    try:
        files = diffview.split_files(attempt.diff)
    except unidiff.UnidiffParseError as exc:
        return {"diff_error": str(exc), "raw_diff": attempt.diff}
    plan = []
    for f, inline in diffview.plan_page(files):
        rows = None
        if inline:
            try:
                rows = diffview.rows_html(diffview.side_by_side(f))
            except unidiff.UnidiffParseError:
                rows = None
        plan.append({"file": f, "rows": rows, "inline": inline})
    return {
        "files": files,
        "plan": plan,
        "added": sum(f.added for f in files),
        "removed": sum(f.removed for f in files),
    }


@login_required
@view_required
def attempt_diff_file(request, pk, index):
    """One file's side-by-side diff, loaded on request (large files, or past the page budget)."""
    attempt = attempt_or_404(pk, diff=True)
    try:
        files = diffview.split_files(attempt.diff)
    except unidiff.UnidiffParseError:
        raise Http404("the diff could not be parsed") from None
    if not 0 <= index < len(files):
        raise Http404("no such file in the diff")
    try:
        rows = diffview.rows_html(diffview.side_by_side(files[index]))
    except unidiff.UnidiffParseError:
        rows = None
    return render(request, "attempts/_diff_rows.html", {"file": files[index], "rows": rows})


@login_required
@view_required
def raw_output(request, pk, name):
    """A command's full raw output, as stored (never rendered as HTML)."""
    attempt = attempt_or_404(pk)
    if "/" in name or name.startswith("."):
        raise Http404("no such output")
    stored = posixpath.join(f"attempts/{attempt.pk}/outputs", name)
    if not default_storage.exists(stored):
        raise Http404("no such output")
    response = FileResponse(
        default_storage.open(stored, "rb"), content_type="text/plain; charset=utf-8"
    )
    response["Content-Disposition"] = f'inline; filename="{name}"'
    return response


@login_required
@view_required
def compare(request, slug):
    task = get_object_or_404(Task, slug=slug)
    try:
        numbers = [int(request.GET["a"]), int(request.GET["b"])]
    except (KeyError, ValueError):
        return HttpResponseBadRequest(
            "pick two attempts: ?a=NUMBER&b=NUMBER", content_type="text/plain"
        )
    found = {a.number: a for a in task.attempts.filter(number__in=numbers)}
    if len(found) != len(set(numbers)):
        raise Http404("no such attempt")
    a, b = found[numbers[0]], found[numbers[1]]
    sides = []
    for attempt in (a, b):
        try:
            files = {f.path: f for f in diffview.split_files(attempt.diff)}
        except unidiff.UnidiffParseError:
            files = {}
        sides.append(files)
    paths = sorted(set(sides[0]) | set(sides[1]))
    per_file = [
        {
            "path": p,
            "a": sides[0].get(p),
            "b": sides[1].get(p),
            "same": (
                sides[0].get(p)
                and sides[1].get(p)
                and sides[0][p].text.split("\n", 2)[-1] == sides[1][p].text.split("\n", 2)[-1]
            ),
        }
        for p in paths
    ]
    checks = latest_checks([a.pk, b.pk])
    tests = {}
    for side, attempt in (("a", a), ("b", b)):
        check = checks.get(attempt.pk)
        for t in check.tests.all() if check else []:
            tests.setdefault(t.name, {"a": "not run", "b": "not run"})[side] = t.outcome
    test_rows = [{"name": n, **o, "differs": o["a"] != o["b"]} for n, o in sorted(tests.items())]
    return render(
        request,
        "attempts/compare.html",
        {
            "task": task,
            "a": a,
            "b": b,
            "files": per_file,
            "tests": test_rows,
            "check_a": checks.get(a.pk),
            "check_b": checks.get(b.pk),
        },
    )


@login_required
@permission_required(auth.EXPORT, raise_exception=True)
def attempt_export(request, pk):
    attempt = attempt_or_404(pk)
    response = StreamingHttpResponse(
        services.attempt_export(attempt=attempt, by=request.user.get_username()),
        content_type="application/zip",
    )
    response["Content-Disposition"] = f'attachment; filename="{bundle_filename(attempt)}"'
    return response


@login_required
@permission_required(auth.EXPORT, raise_exception=True)
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
