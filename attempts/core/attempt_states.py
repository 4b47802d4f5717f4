"""An attempt's one state, as every page shows it and counts it: still going (its status), how
it ended (its outcome), or closed with no check (an API sandbox or a pool episode whose client
closed it, or whose episode ended, before any check ran). Every attempt has exactly one, so the
counts of a set of attempts by state add up to the set's size."""

from __future__ import annotations

from django.db.models import Q

from attempts.models import DONE_STATUSES, Outcome, Status

UNCHECKED = "unchecked"

# key: (label, badge class), in the order pages list counts (live first, then how they ended).
STATES: dict[str, tuple[str, str]] = {
    Status.QUEUED: ("queued", "status-queued"),
    Status.STARTING: ("starting", "status-starting"),
    Status.RUNNING: ("running", "status-running"),
    Status.CHECKING: ("checking", "status-checking"),
    Outcome.PASSED: ("passed", "outcome-passed"),
    Outcome.FAILED: ("failed", "outcome-failed"),
    Outcome.AGENT_TIMEOUT: ("agent timeout", "outcome-agent_timeout"),
    Outcome.INFRA_ERROR: ("infrastructure error", "outcome-infra_error"),
    Outcome.VERIFIER_ERROR: ("verifier error", "outcome-verifier_error"),
    Outcome.CANCELLED: ("cancelled", "status-cancelled outcome-cancelled"),
    UNCHECKED: ("closed, not checked", "status-finished"),
}
LIVE_STATES = (Status.QUEUED, Status.STARTING, Status.RUNNING, Status.CHECKING)


def state_of(status: str, outcome: str) -> str:
    """The one state of an attempt with this status and outcome (a key of STATES)."""
    if status not in DONE_STATUSES:
        return status if status in STATES else Status.RUNNING
    if outcome in STATES:
        return outcome
    return UNCHECKED


def state_filter(key: str, prefix: str = "") -> Q:
    """The attempts in state `key`, as a filter (`prefix`: the path to the attempt, such as
    `attempts__` from a task). The filters of STATES split any set of attempts: each attempt
    matches exactly one, as `state_of` says."""
    status, outcome = f"{prefix}status", f"{prefix}outcome"
    if key in LIVE_STATES:
        return Q(**{status: key})
    done = Q(**{f"{status}__in": DONE_STATUSES})
    if key == UNCHECKED:
        return done & ~Q(**{f"{outcome}__in": [k for k in STATES if k in Outcome.values]})
    return done & Q(**{outcome: key})


def state_counts(counts: dict[str, int]) -> list[dict]:
    """Counts by state as pages list them: (key, label, badge, n) in STATES' order, zeros left
    out."""
    return [
        {"key": key, "label": label, "badge": badge, "n": counts[key]}
        for key, (label, badge) in STATES.items()
        if counts.get(key)
    ]
