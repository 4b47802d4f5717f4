"""The end of an attempt, announced in one place. Whoever ends one (its worker's director, a
cancel before it started, the reaper for a lost worker, a send to the workers that failed) calls
`announce`, and knows nothing of what follows: that subscribes here, connected in apps.py. It
is the task's validation mark (services/validation.py), the report of the predictions
evaluation the attempt belongs to (services/predictions.py) and the attempt's callback
(services/callbacks.py), so no module that ends attempts imports them. `mark_infra_error` ends
an attempt that no worker runs (lost, or never sent) as an infrastructure error.
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from attempts.core.timeline import Timeline
from attempts.models import Attempt, EventKind, Outcome, Status

# Sent with sender=Attempt and the keyword arguments attempt_id and task_id.
attempt_ended = Signal()


def announce(attempt_id: int, task_id: int) -> None:
    """Say that the attempt has ended (its final status is committed or about to be). A
    subscriber's error reaches the caller, as any error of its own would."""
    attempt_ended.send(sender=Attempt, attempt_id=attempt_id, task_id=task_id)


def mark_infra_error(
    attempt_id: int, reason: str, *, expected_status: str = Status.QUEUED, **fields
) -> bool:
    """End an attempt that no worker is running (still `expected_status`) as an
    infrastructure error with `reason` (and `fields`, written with it). A compare-and-set:
    False if its status moved on. Both sides use it: the worker (Docker unreachable, a lost
    worker process) and the web process (a lost host, services/lost_hosts.py; a send to the
    workers that failed, dispatch/queue.py)."""
    with transaction.atomic():  # the final status and its events land together
        updated = Attempt.objects.filter(pk=attempt_id, status=expected_status).update(
            status=Status.FINISHED,
            outcome=Outcome.INFRA_ERROR,
            failure_reason=reason,
            finished_at=timezone.now(),
            **fields,
        )
        if updated:
            timeline = Timeline(attempt_id)
            timeline.add(EventKind.ERROR, message=reason, infrastructure=True)
            timeline.add(
                EventKind.LIFECYCLE,
                status=Status.FINISHED,
                outcome=Outcome.INFRA_ERROR,
                reason=reason,
                message=f"finished: {Outcome.INFRA_ERROR}",
            )
    if updated:
        task_id = Attempt.objects.filter(pk=attempt_id).values_list("task_id", flat=True).first()
        if task_id:
            announce(attempt_id, task_id)
    return bool(updated)
