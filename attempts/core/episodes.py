"""A pool environment's episode, as its record keeps it: how it ended. Both sides use it: the
web (a reset, a masked failure, closing the pool) and the worker (a submit, a budget run out)."""

from __future__ import annotations

from django.utils import timezone

from attempts.core.timeline import Timeline
from attempts.models import Attempt, EventKind


def end_episode(attempt_id: int, how: str) -> bool:
    """The episode is over (`how`: terminated, truncated, failed or reset): its sandbox closes
    with no further check and is kept for review. False if it had already ended."""
    ended = Attempt.objects.filter(pk=attempt_id, episode_end="").update(episode_end=how)
    Attempt.objects.filter(pk=attempt_id, close_requested_at__isnull=True).update(
        close_requested_at=timezone.now(), close_with_check=False
    )
    if ended:
        Timeline(attempt_id).add(EventKind.LIFECYCLE, message=f"episode {how}")
    return bool(ended)
