"""How long an attempt may take in all: its deadline and its worker's time limits."""

from __future__ import annotations

from django.conf import settings

from attempts.models import Attempt


def attempt_budget(attempt: Attempt) -> float:
    """Seconds an attempt may take in all: every stage's limit (the agent's container's setup,
    its health check, its work, the check's own steps: Task.check_limits; for a multi-step
    task every step's) plus room for Docker itself."""
    task = attempt.task
    ready = healthcheck_seconds(task.healthcheck)
    if task.multi_step and attempt.origin != "api":
        steps = sum(step_seconds(step, task) for step in task.steps.all())
        return task.setup_timeout + ready + steps + settings.BOLTZ_DEADLINE_MARGIN
    # An API sandbox's work lasts as long as its client keeps it (up to its time to live).
    work = sandbox_ttl(attempt) if attempt.origin == "api" else task.agent_timeout
    return (
        task.setup_timeout
        + ready
        + work
        + task.reading_limit
        + task.check_limits
        + settings.BOLTZ_DEADLINE_MARGIN
    )


def step_seconds(step, task) -> float:
    """One step's limits added up: its setup.sh (the step's agent limit bounds it), its
    health check, its agent, the recording (and reading) of its changes and its check."""
    setup = step.agent_timeout if step.workdir_files else 0.0
    copying = 2 * task.setup_timeout  # recording, and saving the tree around the check
    return (
        setup
        + healthcheck_seconds(step.healthcheck)
        + step.agent_timeout
        + copying
        + settings.BOLTZ_SCAN_SECONDS  # reading the step's changes for runner access
        + step.check_timeout
    )


def healthcheck_seconds(check: dict | None) -> float:
    """The longest a health check may take (attempts/run/healthcheck.py): its tries within
    the start period, then `retries` failures in a row, each try up to its timeout."""
    if not check:
        return 0.0
    period, timeout = check["start_period_sec"], check["timeout_sec"]
    early = (period / check["start_interval_sec"] + 1) * timeout + period
    return early + check["retries"] * (timeout + check["interval_sec"])


def sandbox_ttl(attempt: Attempt) -> float:
    """Seconds an API sandbox may live: its own time to live, at most BOLTZ_SANDBOX_MAX_TTL."""
    if attempt.expires_at and attempt.created_at:
        return (attempt.expires_at - attempt.created_at).total_seconds()
    return settings.BOLTZ_SANDBOX_MAX_TTL
