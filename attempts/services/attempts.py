"""Writes on attempts that the command line, the pages, the admin and the API share: create,
enqueue, cancel, end as an infrastructure error, re-run, re-check and export; keyword-only
services."""

from __future__ import annotations

import re

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from attempts.core import agents
from attempts.core.ended import announce
from attempts.core.errors import TaskInvalid
from attempts.core.storage import read_stored
from attempts.core.timeline import Timeline
from attempts.dispatch import queue as queueing
from attempts.dispatch.limits import command_too_long
from attempts.exports.bundle import stream_bundle
from attempts.exports.datasets import ExportSpec, select_attempts
from attempts.models import (
    DONE_STATUSES,
    Actor,
    Attempt,
    AuditEntry,
    CheckMode,
    EventKind,
    Outcome,
    SandboxState,
    Status,
    Task,
)
from attempts.services.deletion import record_audit
from attempts.taskio.from_image import has_check, require_check

MAX_AGENT_FILES_BYTES = 64 * 1024 * 1024
SAFE_FILE_NAME = re.compile(r"^[\w][\w.-]{0,99}$")


def attempt_create(
    *,
    task: Task,
    agent: str,
    command: str = "",
    files: dict[str, bytes] | None = None,
    queue: str | None = None,
) -> Attempt:
    """Create a queued attempt and enqueue it once the transaction commits. `agent` is noop,
    reference, command (with `command` and optional `files`) or the name of a saved agent."""
    return attempts_create(task=task, agent=agent, command=command, files=files, queue=queue)[0]


def attempts_create(
    *,
    task: Task,
    agent: str,
    command: str = "",
    files: dict[str, bytes] | None = None,
    queue: str | None = None,
    count: int = 1,
) -> list[Attempt]:
    """`count` attempts with the same agent, which is resolved and checked once. While the
    workers' queue (Redis) cannot be reached, none is created: WorkerUnreachable."""
    require_check(task)
    choice = agents.resolve_agent(task, agent, command, files)
    if why := command_too_long(choice.command):
        raise TaskInvalid("command", why)
    if sum(len(d) for d in choice.files.values()) > MAX_AGENT_FILES_BYTES:
        raise TaskInvalid("files", f"agent files may add up to {MAX_AGENT_FILES_BYTES} bytes")
    for name in choice.files:
        if not SAFE_FILE_NAME.match(name):
            raise TaskInvalid("files", f"{name!r}: use a plain file name (letters, digits, . _ -)")
    queueing.require_queue()
    made = [_create_one(task, choice, queueing.attempts_queue(queue)) for _ in range(count)]
    attempts_enqueue(attempts=made)
    return made


def numbered_attempt(task: Task, **fields) -> Attempt:
    """A new attempt of `task` with the next number of its own, never one given before (even
    to an attempt deleted since). The number comes from the task row: the UPDATE locks that
    row (PostgreSQL) or takes the database's write lock (SQLite) until the attempt exists, so
    concurrent creators, in any process, each get their own."""
    with transaction.atomic():
        tasks = Task.objects.filter(pk=task.pk)
        tasks.update(next_attempt_number=F("next_attempt_number") + 1)
        number = tasks.values_list("next_attempt_number", flat=True).get() - 1
        # An attempt numbered outside this function (imported, or made by hand) may hold it.
        top = task.attempts.aggregate(m=Max("number"))["m"] or 0
        if number <= top:
            number = top + 1
            tasks.update(next_attempt_number=number + 1)
        attempt = Attempt.objects.create(task=task, number=number, **fields)
    task.next_attempt_number = number + 1
    return attempt


def attempt_withdraw(*, attempt_id: int) -> bool:
    """Undo `numbered_attempt` for an attempt no worker took (a sandbox refused for want of
    room): its row and timeline go, and its number goes back to its task when no later attempt
    has taken one since, so a refusal leaves nothing behind. A compare-and-set on `queued`:
    False, and nothing done, when a worker took it meanwhile."""
    with transaction.atomic():
        row = Attempt.objects.filter(pk=attempt_id).values("task_id", "number").first()
        # Out of `queued` first: a worker's claim (from `queued` only) can no longer take it.
        if row is None or not Attempt.objects.filter(pk=attempt_id, status=Status.QUEUED).update(
            status=Status.CANCELLED
        ):
            return False
        Attempt.objects.filter(pk=attempt_id).delete()
        Task.objects.filter(pk=row["task_id"], next_attempt_number=row["number"] + 1).update(
            next_attempt_number=row["number"]
        )
    return True


def _create_one(task: Task, choice: agents.AgentChoice, queue: str) -> Attempt:
    agent, command, files = choice.label, choice.command, choice.files
    attempt = numbered_attempt(
        task, agent=agent, agent_command=command, agent_env=choice.environment, queue=queue
    )
    if files:
        stored = []
        for name, data in files.items():
            storage = default_storage.save(f"attempts/{attempt.pk}/agent/{name}", ContentFile(data))
            stored.append({"name": name, "storage": storage, "bytes": len(data)})
        attempt.agent_files = stored
        attempt.save(update_fields=["agent_files"])
    Timeline(attempt.pk).add(
        EventKind.LIFECYCLE,
        actor=Actor.SYSTEM,
        status="queued",
        message=f"queued with agent {agent}",
        agent=agent,
        command=command,
        files=sorted(files),
    )
    return attempt


def attempts_enqueue(*, attempts: list[Attempt]) -> None:
    """Send the attempts to the workers after commit, so no worker sees an uncommitted row. If
    Redis cannot take them, they end at once, "not started" (WorkerUnreachable is raised)."""
    queueing.enqueue_attempts(attempts)


def attempt_export(*, attempt: Attempt, by: str):
    """The attempt's bundle as a stream of zip bytes; the export is recorded."""
    record_audit(action=AuditEntry.Action.EXPORT_ATTEMPT, actor=by, attempt=attempt)
    return stream_bundle(attempt)


def task_export(*, task: Task, spec: ExportSpec, by: str, **filters):
    """The attempts a task export writes (`datasets.write_export` / `export_lines` write
    them as `spec` says); the export is recorded."""
    attempts = select_attempts(task.attempts.all(), **filters)
    shown = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in filters.items() if v}
    record_audit(
        action=AuditEntry.Action.EXPORT_TASK,
        actor=by,
        task=task,
        format=spec.fmt,
        flavour=spec.flavour,
        **shown,
    )
    return attempts


# --- what each action on one attempt would refuse, said before it is offered -------------------
# Each `*_refusal` is '' when the action can work on the attempt as it is now, else why not, in
# words a reviewer reads; the pages offer an action only when it is '' (or show it disabled with
# the reason), and the service refuses the same cases.


def cancel_refusal(attempt: Attempt) -> str:
    if attempt.status in DONE_STATUSES:
        return "it has already ended"
    if attempt.cancel_requested_at:
        return f"{attempt.cancel_requested_by or 'someone'} already asked to cancel it"
    return ""


def rerun_refusal(attempt: Attempt) -> str:
    if attempt.origin == "api":
        what = "a pool episode" if attempt.pool_index is not None else "an API sandbox"
        return f"it is {what}: its client did the work, so Boltz has nothing to run again"
    if not has_check(attempt.task):
        return f"{attempt.task.slug} has no check (it holds sandboxes started from an image)"
    return ""


def recheck_refusal(attempt: Attempt) -> str:
    """Why the attempt's check cannot run again now: not ended, a task with no check or with
    steps, its sandbox gone or busy, or (for a check in a fresh container) its changes never
    recorded."""
    task = attempt.task
    if attempt.status not in DONE_STATUSES:
        return "a re-check waits until the attempt has finished"
    if not has_check(task):
        return f"{task.slug} has no check (it holds sandboxes started from an image)"
    if task.multi_step:
        return (
            "each step of a multi-step task was verified as it ended; the final files are "
            "not what any one step's verifier saw, so there is nothing to check again"
        )
    if attempt.sandbox_deleted_at or attempt.sandbox_state in (
        SandboxState.NONE,
        SandboxState.DELETED,
    ):
        return "its sandbox is gone, and a re-check needs its files"
    if not attempt.host or not attempt.container_id:
        return "its sandbox is gone, and a re-check needs its files"
    if attempt.sandbox_state == SandboxState.LIVE:
        return "a re-check is already running; wait for its result"
    if task.check_place == CheckMode.FRESH and (
        attempt.changes_state != "recorded" or not attempt.diff_file
    ):
        why = f" ({attempt.changes_error})" if attempt.changes_error else ""
        return (
            f"its changes were never recorded{why}, and the check runs on the recorded "
            "changes applied to the base in a fresh container"
        )
    return ""


def sandbox_delete_refusal(attempt: Attempt) -> str:
    if attempt.sandbox_deleted_at:
        return "its sandbox was deleted already"
    if attempt.status in DONE_STATUSES and not attempt.host:
        return "it never had a sandbox: it ended before one started"
    return ""


def attempt_cancel(*, attempt: Attempt, by: str) -> bool:
    """Cancel a queued or running attempt. A queued one ends at once; a running one is stopped
    by its worker within a second (its processes and container stop). False if it had ended."""
    now = timezone.now()
    with transaction.atomic():
        if Attempt.objects.filter(pk=attempt.pk, status=Status.QUEUED).update(
            status=Status.CANCELLED,
            outcome=Outcome.CANCELLED,
            finished_at=now,
            cancel_requested_at=now,
            cancel_requested_by=by,
            failure_reason=f"cancelled by {by} before it started",
        ):
            Timeline(attempt.pk).reviewer(
                "cancel", by, f"cancelled by {by} before it started", status=Status.CANCELLED
            )
            announce(attempt.pk, attempt.task_id)
            return True
        updated = (
            Attempt.objects.filter(pk=attempt.pk, cancel_requested_at__isnull=True)
            .exclude(status__in=DONE_STATUSES)
            .update(cancel_requested_at=now, cancel_requested_by=by)
        )
        if updated:
            Timeline(attempt.pk).reviewer("cancel", by, f"cancel requested by {by}")
    return bool(updated)


def attempt_rerun(*, attempt: Attempt, by: str) -> Attempt:
    """A new attempt at the same task with the same agent, command and files."""
    patched = attempt.agent_command == agents.PATCH_COMMAND  # labelled with its model's name
    if attempt.agent in agents.BUILTIN_AGENTS or patched:
        files = read_stored(attempt.agent_files)
        new = attempt_create(
            task=attempt.task,
            agent="patch" if patched else attempt.agent,
            command=attempt.agent_command,
            files=files,
        )
        if patched:
            Attempt.objects.filter(pk=new.pk).update(agent=attempt.agent)
    else:  # a saved agent: as it is saved now
        new = attempt_create(task=attempt.task, agent=attempt.agent)
    Attempt.objects.filter(pk=new.pk).update(rerun_of=attempt)
    Timeline(new.pk).reviewer("rerun", by, f"re-run of {attempt.name} by {by}")
    return new


def attempt_recheck(*, attempt: Attempt, by: str) -> None:
    """Check the attempt's final files again where its task's check runs (a fresh container
    from the recorded changes, in place in its kept sandbox, or a separate verifier's own
    container), on the worker of the host that kept its sandbox. TaskInvalid as
    `recheck_refusal` says."""
    if why := recheck_refusal(attempt):
        raise TaskInvalid("attempt", why)
    # Claim the kept sandbox (stopped -> live) so a second request is refused at once.
    claimed = Attempt.objects.filter(
        pk=attempt.pk, sandbox_state=SandboxState.STOPPED, sandbox_deleted_at__isnull=True
    ).update(sandbox_state=SandboxState.LIVE)
    if not claimed:
        attempt.refresh_from_db(fields=["sandbox_state", "sandbox_deleted_at"])
        if attempt.sandbox_state == SandboxState.LIVE and not attempt.sandbox_deleted_at:
            raise TaskInvalid("attempt", "a re-check is already running; wait for its result")
        raise TaskInvalid("attempt", "its sandbox is gone, and a re-check needs its files")
    attempt.sandbox_state = SandboxState.LIVE

    def give_back(refusal) -> None:  # not sent: the kept sandbox can be re-checked later
        Attempt.objects.filter(pk=attempt.pk, sandbox_state=SandboxState.LIVE).update(
            sandbox_state=SandboxState.STOPPED
        )
        attempt.sandbox_state = SandboxState.STOPPED

    queueing.enqueue_recheck(attempt, by=by, unsent=give_back)
