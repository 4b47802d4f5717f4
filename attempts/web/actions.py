"""Views that change something, each behind a confirmation step: a visit (GET) or a first POST
shows what will happen, for this attempt as it is; the confirming POST (CSRF-checked) does it.
Each calls one service. An action its service would refuse (`services.attempts.*_refusal`) is
refused at every step, the confirmation and the confirming POST alike, with the reason on the
page (409), never a 500 or a silent redirect."""

from __future__ import annotations

import functools

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from attempts.core.agents import BUILTIN_AGENTS, PATCH_COMMAND, resolve_agent
from attempts.core.attempt_states import STATES, state_of
from attempts.core.errors import TaskInvalid
from attempts.models import DONE_STATUSES, SEPARATE_VERIFIER, Agent, CheckMode, Status, Task
from attempts.services import attempts as services
from attempts.services.deletion import attempt_delete, sandbox_delete
from attempts.services.selectors import attempt_or_404
from attempts.taskio.from_image import has_check
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
    refused: str = "",
):
    """The confirmation step: the same form posted again, with confirm=yes; or, when `refused`
    says why the action cannot work, that reason and no button."""
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
            "refused": refused,
        },
        status=409 if refused else 200,
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
    if not has_check(task):  # attempts_create refuses it: said before any form
        return _confirm(
            request,
            title=f"Start attempts of {task.slug}?",
            explanation="",
            button="",
            back=task.get_absolute_url(),
            fields=[],
            refused=f"{task.slug} holds sandboxes started from an image: it has no check to run",
        )
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


def _attempt_action(permission: str, confirmation, refusal=None):
    """A view over one attempt behind a confirmation: `confirmation(attempt, **kwargs)` says
    what will happen (title, explanation, button, danger); `refusal(attempt, **kwargs)` why it
    cannot ('' when it can); the view does it when confirmed and not refused."""

    def wrap(view):
        @login_required
        @permission_required(permission, raise_exception=True)
        @visit_or_post
        @functools.wraps(view)
        def action(request, pk, **kwargs):
            attempt = attempt_or_404(pk)
            said = confirmation(attempt, **kwargs)
            refused = refusal(attempt, **kwargs) if refusal else ""
            if refused or not _confirmed(request):
                back = attempt.get_absolute_url()
                return _confirm(request, back=back, refused=refused, **said)
            return view(request, attempt, **kwargs)

        return action

    return wrap


def _cancel_confirmation(attempt) -> dict:
    if attempt.status == Status.QUEUED:
        what = "It has not started: it ends now, cancelled, and never runs."
    elif attempt.origin == "api":
        what = (
            "Its client's work stops: the command running in its sandbox is killed and its "
            "container stops, with no check; the outcome says cancelled, and by whom."
        )
    else:
        what = (
            "Its agent (or check) is stopped within a second: its processes end and its "
            "container stops, and the outcome says cancelled, and by whom. Nothing is scored."
        )
    return {
        "title": f"Cancel {attempt}?",
        "explanation": what,
        "button": "Cancel attempt",
        "danger": True,
    }


@_attempt_action(auth.CONTROL, _cancel_confirmation, services.cancel_refusal)
def cancel_attempt(request, attempt):
    if not services.attempt_cancel(attempt=attempt, by=request.user.get_username()):
        messages.info(request, "The attempt had already ended, or a cancel was already asked.")
    return redirect(attempt.get_absolute_url())


def _rerun_confirmation(attempt) -> dict:
    what = f"A new attempt at {attempt.task.slug}, numbered after the last, with the same agent"
    if attempt.agent in BUILTIN_AGENTS or attempt.agent_command == PATCH_COMMAND:
        what += f" ({attempt.agent}), command and files. This attempt stays as it is."
    else:
        what += f" ({attempt.agent}) as it is saved now. This attempt stays as it is."
    return {"title": f"Re-run {attempt}?", "explanation": what, "button": "Re-run"}


@_attempt_action(auth.CONTROL, _rerun_confirmation, services.rerun_refusal)
def rerun_attempt(request, attempt):
    try:
        new = services.attempt_rerun(attempt=attempt, by=request.user.get_username())
    except TaskInvalid as exc:
        messages.error(request, f"{exc.field}: {exc.message}")
        return redirect(attempt.get_absolute_url())
    return redirect(new.get_absolute_url())


RECHECK_PLACES = {
    CheckMode.FRESH: "The task's check runs again in a fresh container: the base, set up, "
    "with exactly the recorded changes applied, protected paths reset and hidden check files "
    "restored. The kept sandbox is not touched.",
    CheckMode.IN_PLACE: "The task's check runs again in place, in the kept sandbox: its "
    "container starts again, protected paths are reset and hidden check files restored over "
    "the agent's final files, and it is stopped and kept again afterwards.",
    SEPARATE_VERIFIER: "The task's check runs again in a new container from the verifier's "
    "image, handed the artifacts copied from the kept sandbox (Harbor's separate verifier).",
}


def _recheck_confirmation(attempt) -> dict:
    where = RECHECK_PLACES[attempt.task.check_place]
    return {
        "title": f"Re-check {attempt}?",
        "explanation": f"{where} The new result is kept beside the old; the attempt's own "
        "outcome and score stay as they are, and a test whose outcome changes is marked flaky.",
        "button": "Re-check",
    }


@_attempt_action(auth.CONTROL, _recheck_confirmation, services.recheck_refusal)
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
    explanation = DELETE_LEVELS[level]
    if attempt.status not in DONE_STATUSES:
        state = STATES[state_of(attempt.status, attempt.outcome)][0]
        explanation = f"It is still {state}: it stops. {explanation}"
    return {
        "title": f"Delete {what}{attempt}?",
        "explanation": explanation,
        "button": f"Delete {level}",
        "danger": True,
    }


def _delete_refusal(attempt, level: str) -> str:
    return services.sandbox_delete_refusal(attempt) if level == "sandbox" else ""


@_attempt_action(auth.DELETE, _delete_confirmation, _delete_refusal)
def delete_attempt(request, attempt, level):
    by = request.user.get_username()
    if level == "sandbox":
        sandbox_delete(attempt=attempt, by=by)
        return redirect(attempt.get_absolute_url())
    task = attempt.task
    attempt_delete(attempt=attempt, by=by)
    messages.success(request, f"Deleted {attempt}.")
    return redirect(task.get_absolute_url())
