"""The end of an attempt, announced in one place. Whoever ends one (its worker's director, a
cancel before it started, the reaper for a lost worker) calls `announce`, and knows nothing of
what follows: that subscribes here, connected in apps.py. It is the task's validation mark
(services/validation.py), the report of the predictions evaluation the attempt belongs to
(services/predictions.py) and the attempt's callback (services/callbacks.py), so no module that
ends attempts imports them.
"""

from __future__ import annotations

from django.dispatch import Signal

from attempts.models import Attempt

# Sent with sender=Attempt and the keyword arguments attempt_id and task_id.
attempt_ended = Signal()


def announce(attempt_id: int, task_id: int) -> None:
    """Say that the attempt has ended (its final status is committed or about to be). A
    subscriber's error reaches the caller, as any error of its own would."""
    attempt_ended.send(sender=Attempt, attempt_id=attempt_id, task_id=task_id)
