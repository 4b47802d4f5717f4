"""Deleting sandboxes, attempts and tasks, and the audit trail of exports and deletions.

Every function here is idempotent and safe while a worker still runs the attempt: the
database changes first (so the worker sees them between steps), and the container itself is
removed by the worker of the host that owns it (only workers talk to Docker).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from attempts.core.storage import delete_tree
from attempts.core.timeline import Timeline
from attempts.dispatch.queue import enqueue_sandbox_removal
from attempts.models import Attempt, AuditEntry, SandboxState, Task


def record_audit(
    *,
    action: str,
    actor: str,
    attempt: Attempt | None = None,
    task: Task | None = None,
    in_timeline: bool = True,
    **details,
) -> AuditEntry:
    """Write who did what and when; while the attempt exists, its timeline says so too
    (unless `in_timeline` is False: the attempt is about to go)."""
    task = task or (attempt.task if attempt else None)
    entry = AuditEntry.objects.create(
        action=action,
        actor=actor,
        task_slug=task.slug if task else "",
        attempt_id=attempt.pk if attempt else None,
        attempt_number=attempt.number if attempt else None,
        details=details,
    )
    if in_timeline and attempt is not None and Attempt.objects.filter(pk=attempt.pk).exists():
        Timeline(attempt.pk).reviewer(
            action, actor, f"{entry.get_action_display()} by {actor}", **details
        )
    return entry


def _remove_container_later(attempt_id: int, host: str) -> None:
    enqueue_sandbox_removal(attempt_id, host=host)


def sandbox_delete(*, attempt: Attempt, by: str) -> bool:
    """Delete the container and the kept workspace; the record, timeline, diff and check stay.
    Returns False when the sandbox was already deleted (nothing to do)."""
    now = timezone.now()
    with transaction.atomic():
        claimed = Attempt.objects.filter(pk=attempt.pk, sandbox_deleted_at__isnull=True).update(
            sandbox_deleted_at=now, sandbox_deleted_by=by
        )
        if not claimed:
            return False
        attempt.refresh_from_db()
        record_audit(action=AuditEntry.Action.DELETE_SANDBOX, actor=by, attempt=attempt)
        if attempt.host:
            _remove_container_later(attempt.pk, attempt.host)
        else:  # never reached a host: there is no container
            Attempt.objects.filter(pk=attempt.pk).update(sandbox_state=SandboxState.DELETED)
    if attempt.workspace_file:
        from django.core.files.storage import default_storage

        default_storage.delete(attempt.workspace_file)
    return True


def attempt_delete(*, attempt: Attempt, by: str) -> bool:
    """Delete the attempt whole: container, stored files, events and results.
    Returns False when it was already gone."""
    with transaction.atomic():
        fields = ("pk", "number", "host", "outcome", "agent")
        row = Attempt.objects.select_for_update().only(*fields).filter(pk=attempt.pk).first()
        if row is None:
            return False
        record_audit(
            action=AuditEntry.Action.DELETE_ATTEMPT,
            actor=by,
            attempt=row,
            task=attempt.task,
            in_timeline=False,
            outcome=row.outcome,
            agent=row.agent,
        )
        if row.host:
            _remove_container_later(row.pk, row.host)
        row.delete()
    delete_tree(f"attempts/{attempt.pk}/")
    return True


def task_delete(*, task: Task, by: str) -> int:
    """Delete a task and every attempt of it, the same way. Returns the attempts deleted."""
    count = 0
    for attempt in list(task.attempts.defer("diff")):  # each knows its task: no query
        count += attempt_delete(attempt=attempt, by=by)
    with transaction.atomic():
        record_audit(action=AuditEntry.Action.DELETE_TASK, actor=by, task=task, attempts=count)
        Task.objects.filter(pk=task.pk).delete()
    return count
