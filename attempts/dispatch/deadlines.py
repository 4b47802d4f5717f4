"""How long an attempt may take in all: its deadline and its worker's time limits."""

from __future__ import annotations

from django.conf import settings

from attempts.models import Attempt


def attempt_budget(attempt: Attempt) -> float:
    """Seconds an attempt may take in all: every stage's limit plus room for Docker itself."""
    task = attempt.task
    setups = 1 if task.check_mode == "in_place" else 2  # a fresh check container is set up too
    # An API sandbox's work lasts as long as its client keeps it (up to its time to live).
    work = sandbox_ttl(attempt) if attempt.origin == "api" else task.agent_timeout
    return setups * task.setup_timeout + work + task.check_timeout + settings.BOLTZ_DEADLINE_MARGIN


def sandbox_ttl(attempt: Attempt) -> float:
    """Seconds an API sandbox may live: its own time to live, at most BOLTZ_SANDBOX_MAX_TTL."""
    if attempt.expires_at and attempt.created_at:
        return (attempt.expires_at - attempt.created_at).total_seconds()
    return settings.BOLTZ_SANDBOX_MAX_TTL
