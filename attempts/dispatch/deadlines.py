"""How long an attempt may take in all: its deadline and its worker's time limits."""

from __future__ import annotations

from django.conf import settings

from attempts.models import Attempt


def attempt_budget(attempt: Attempt) -> float:
    """Seconds an attempt may take in all: every stage's limit (the agent's container's setup,
    its work, the check's own steps: Task.check_limits) plus room for Docker itself."""
    task = attempt.task
    # An API sandbox's work lasts as long as its client keeps it (up to its time to live).
    work = sandbox_ttl(attempt) if attempt.origin == "api" else task.agent_timeout
    return task.setup_timeout + work + task.check_limits + settings.BOLTZ_DEADLINE_MARGIN


def sandbox_ttl(attempt: Attempt) -> float:
    """Seconds an API sandbox may live: its own time to live, at most BOLTZ_SANDBOX_MAX_TTL."""
    if attempt.expires_at and attempt.created_at:
        return (attempt.expires_at - attempt.created_at).total_seconds()
    return settings.BOLTZ_SANDBOX_MAX_TTL
