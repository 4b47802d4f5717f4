"""Views that change something, each behind a confirmation step: a visit (GET) or a first POST
shows what will happen; the confirming POST (CSRF-checked) does it. Each calls one service."""

from __future__ import annotations

import functools

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from attempts.core.agents import resolve_agent
from attempts.core.errors import TaskInvalid
from attempts.models import Agent, Task
from attempts.services import attempts as services
from attempts.services.deletion import attempt_delete, sandbox_delete
from attempts.services.selectors import attempt_or_404
from attempts.web import auth
from attempts.web.task_forms import StartAttemptsForm

# A visit shows the confirmation (or the form); only a POST can do anything.
visit_or_post = require_http_methods(["GET", "HEAD", "POST"])


def _confirm(
    request,
    *,
    title: str,
    explanation: str,
    button: str,
    danger: bool = False,
    back: str,
    fields: list[tuple[str, str]] | None = None,
):
    """The confirmation step: the same form posted again, with confirm=yes."""
    if fields is None:
        fields = [
            (k, v) for k, v in request.POST.items() if k not in ("csrfmiddlewaretoken", "confirm")
        ]
    return render(
        request,
        "attempts/confirm.html",
        {
            "title": title,
            "explanation": explanation,
            "button": button,
            "danger": danger,
            "fields": fields,
            "back": back,
            "action": request.path,
        },
    )


def _confirmed(request) -> bool:
    return request.method == "POST" and request.POST.get("confirm") == "yes"


def _start_page(request, task, form, status=200):
    """The start form on a page of its own: on a visit, and again with its errors beside
    their fields when what was sent cannot start."""
    return render(
        request,
        "attempts/start.html",
        {
            "task": task,
            "start_form": form,
            "saved_agents": Agent.objects.order_by("name").values_list("name", flat=True),
        },
        status=status,
    )


@login_required
@permission_required(auth.CONTROL, raise_exception=True)
@visit_or_post
def start_attempts(request, slug):
    task = get_object_or_404(Task, slug=slug)
    if request.method != "POST":
        return _start_page(request, task, StartAttemptsForm())
    form = StartAttemptsForm(request.POST, request.FILES)
    if not form.is_valid():
        return _start_page(request, task, form, status=400)
    data = form.cleaned_data
    count, agent, command = data["count"], data["agent"], data["command"]
    try:  # what the service would refuse is said beside its field before the confirmation
        resolve_agent(task, agent, command, data["files"])
    except TaskInvalid as exc:
        form.apply_error(exc)
        return _start_page(request, task, form, status=400)
    if not _confirmed(request):
        what = f"{count} attempt(s) of {task.slug} with the {agent} agent"
        if command:
            what += f" running: {command}"
        if data["files"]:
            what += f" (files: {', '.join(sorted(data['files']))})"
        return _confirm(
            request,
            title="Start attempts?",
            explanation=f"Enqueue {what}.",
            button=f"Start {count}",
            back=task.get_absolute_url(),
            fields=form.carried_fields(),
        )
    try:
        services.attempts_create(
            task=task, agent=agent, command=command, files=data["files"], count=count
        )
    except TaskInvalid as exc:
        form.apply_error(exc)
        return _start_page(request, task, form, status=400)
    messages.success(request, f"Enqueued {count} attempt(s) with {agent}.")
    return redirect(task.get_absolute_url())


def _attempt_action(permission: str, confirmation):
    """A view over one attempt behind a confirmation: `confirmation(attempt, **kwargs)` says
    what will happen (title, explanation, button, danger); the view does it when confirmed."""

    def wrap(view):
        @login_required
        @permission_required(permission, raise_exception=True)
        @visit_or_post
        @functools.wraps(view)
        def action(request, pk, **kwargs):
            attempt = attempt_or_404(pk)
            said = confirmation(attempt, **kwargs)
            if not _confirmed(request):
                return _confirm(request, back=attempt.get_absolute_url(), **said)
            return view(request, attempt, **kwargs)

        return action

    return wrap


@_attempt_action(
    auth.CONTROL,
    lambda attempt: {
        "title": f"Cancel {attempt}?",
        "explanation": "Its processes and container stop; the outcome says cancelled, and by whom.",
        "button": "Cancel attempt",
        "danger": True,
    },
)
def cancel_attempt(request, attempt):
    if not services.attempt_cancel(attempt=attempt, by=request.user.get_username()):
        messages.info(request, "The attempt had already ended.")
    return redirect(attempt.get_absolute_url())


@_attempt_action(
    auth.CONTROL,
    lambda attempt: {
        "title": f"Re-run {attempt}?",
        "explanation": f"A new attempt at {attempt.task.slug} with the same agent "
        f"({attempt.agent}), command and files.",
        "button": "Re-run",
    },
)
def rerun_attempt(request, attempt):
    try:
        new = services.attempt_rerun(attempt=attempt, by=request.user.get_username())
    except TaskInvalid as exc:
        messages.error(request, f"{exc.field}: {exc.message}")
        return redirect(attempt.get_absolute_url())
    return redirect(new.get_absolute_url())


@_attempt_action(
    auth.CONTROL,
    lambda attempt: {
        "title": f"Re-check {attempt}?",
        "explanation": "The check runs again on the same final files in the kept sandbox; the "
        "new result is kept beside the old.",
        "button": "Re-check",
    },
)
def recheck_attempt(request, attempt):
    try:
        services.attempt_recheck(attempt=attempt, by=request.user.get_username())
    except TaskInvalid as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Re-check enqueued; its result appears under Check.")
    return redirect(attempt.get_absolute_url() + "?view=check")


DELETE_LEVELS = {
    "sandbox": "The container and its kept workspace go; the record, timeline, diff and "
    "check stay.",
    "attempt": "Its container, stored files, timeline and results go. This cannot be undone.",
}


def _delete_confirmation(attempt, level: str) -> dict:
    if level not in DELETE_LEVELS:
        raise Http404("delete the sandbox or the attempt")
    what = "the sandbox of " if level == "sandbox" else ""
    return {
        "title": f"Delete {what}{attempt}?",
        "explanation": DELETE_LEVELS[level],
        "button": f"Delete {level}",
        "danger": True,
    }


@_attempt_action(auth.DELETE, _delete_confirmation)
def delete_attempt(request, attempt, level):
    by = request.user.get_username()
    if level == "sandbox":
        sandbox_delete(attempt=attempt, by=by)
        return redirect(attempt.get_absolute_url())
    task = attempt.task
    attempt_delete(attempt=attempt, by=by)
    messages.success(request, f"Deleted {attempt}.")
    return redirect(task.get_absolute_url())
