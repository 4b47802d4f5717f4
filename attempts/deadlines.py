"""How long an attempt may take in all: its deadline and its worker's time limits."""

from __future__ import annotations

from django.conf import settings

from .models import Attempt


def attempt_budget(attempt: Attempt) -> float:
    """Seconds an attempt may take in all: every stage's limit plus room for Docker itself."""
    task = attempt.task
    setups = 1 if task.check_mode == "in_place" else 2  # a fresh check container is set up too
    return (
        setups * task.setup_timeout
        + task.agent_timeout
        + task.check_timeout
        + settings.BOLTZ_DEADLINE_MARGIN
    )
