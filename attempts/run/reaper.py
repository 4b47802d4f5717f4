"""Keeping hosts clean: retention of kept sandboxes and attempts, and the per-host reaper that
removes containers nobody needs and ends attempts whose worker was lost."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from attempts.core.ended import mark_infra_error
from attempts.core.timeline import Timeline
from attempts.dispatch.hosts import quiet_since
from attempts.models import ACTIVE_STATUSES, DONE_STATUSES, Attempt, EventKind, SandboxState
from attempts.run.director import record_gone
from attempts.run.docker import runtime
from attempts.run.heartbeat import register_this_host
from attempts.services.deletion import attempt_delete, sandbox_delete

log = logging.getLogger(__name__)
RETENTION = "retention"


def apply_retention(now=None) -> dict:
    """Delete kept sandboxes past BOLTZ_SANDBOX_RETENTION, attempts past BOLTZ_ATTEMPT_RETENTION."""
    now = now or timezone.now()
    sandboxes = attempts = 0
    cutoff = now - timedelta(seconds=settings.BOLTZ_SANDBOX_RETENTION)
    expired = (
        Attempt.objects.filter(finished_at__lt=cutoff, sandbox_deleted_at__isnull=True)
        .exclude(sandbox_state=SandboxState.DELETED)
        .select_related("task")
    )
    for attempt in expired.iterator(chunk_size=200):
        sandboxes += sandbox_delete(attempt=attempt, by=RETENTION)
    if settings.BOLTZ_ATTEMPT_RETENTION:
        old = now - timedelta(seconds=settings.BOLTZ_ATTEMPT_RETENTION)
        for attempt in Attempt.objects.filter(finished_at__lt=old).select_related("task"):
            attempts += attempt_delete(attempt=attempt, by=RETENTION)
    return {"sandboxes_deleted": sandboxes, "attempts_deleted": attempts}


def mark_lost(attempt: Attempt) -> bool:
    reason = (
        f"worker lost: the attempt was still {attempt.status} on host {attempt.host} "
        f"past its deadline ({attempt.deadline_at:%Y-%m-%d %H:%M:%S} UTC)"
    )
    return mark_infra_error(attempt.pk, reason, expected_status=attempt.status)


def _mark_removed(attempt_id: int, why: str) -> None:
    with transaction.atomic():  # the state and the event that explains it land together
        if Attempt.objects.filter(pk=attempt_id).update(sandbox_state=SandboxState.DELETED):
            Timeline(attempt_id).add(
                EventKind.LIFECYCLE, message=f"reaper removed the sandbox: {why}"
            )


SNAPSHOT_MAX_AGE = 3600.0


def _attempt_id(container: dict) -> int | None:
    try:
        return int(container["labels"].get(runtime.LABEL_ATTEMPT, ""))
    except ValueError:
        return None


def reap_silent(host: str, now=None) -> int:
    """End the attempts of `host` whose worker process has given no sign of life for
    BOLTZ_LOST_AFTER seconds (it was killed, or ran out of memory): infrastructure errors,
    their containers removed, their slots free. Returns how many."""
    now = now or timezone.now()
    quiet = quiet_since(now)
    silent = Attempt.objects.filter(host=host, status__in=ACTIVE_STATUSES).filter(
        Q(heartbeat_at__lt=quiet) | Q(heartbeat_at__isnull=True, started_at__lt=quiet)
    )
    lost = 0
    for attempt in silent:
        reason = (
            f"worker lost: the process running the attempt on host {host} gave no sign of "
            f"life for {settings.BOLTZ_LOST_AFTER:g}s (killed, or out of memory)"
        )
        if mark_infra_error(attempt.pk, reason, expected_status=attempt.status):
            lost += 1
            runtime.remove_attempt_containers(attempt.pk)
            _mark_removed(attempt.pk, "its worker was lost")
    return lost


def reap_host(host: str | None = None, now=None) -> dict:
    """On this worker's host: end attempts whose worker was lost, then remove every Boltz
    container whose attempt is gone, deleted, lost, or past its retention."""
    host = host or settings.BOLTZ_HOST
    now = now or timezone.now()
    if host == settings.BOLTZ_HOST:
        register_this_host()
    lost = 0
    stuck = Attempt.objects.filter(host=host, status__in=ACTIVE_STATUSES, deadline_at__lt=now)
    for attempt in stuck:
        if mark_lost(attempt):
            lost += 1
            runtime.remove_attempt_containers(attempt.pk)
            _mark_removed(attempt.pk, "its worker was lost")
    cutoff = now - timedelta(seconds=settings.BOLTZ_SANDBOX_RETENTION)
    removed = []
    # Read before the containers are listed: a sandbox kept then must be in the list.
    kept = (
        Attempt.objects.filter(
            host=host, sandbox_state=SandboxState.STOPPED, sandbox_deleted_at__isnull=True
        ).values_list("pk", flat=True)
        if host == settings.BOLTZ_HOST  # only this host's containers are listed here
        else []
    )
    kept = list(kept)
    containers = [(c, _attempt_id(c)) for c in runtime.list_sandboxes()]
    gone = mark_gone(kept, containers, now=now)
    attempts = Attempt.objects.in_bulk([i for _, i in containers if i is not None])
    for container, attempt_id in containers:
        attempt = attempts.get(attempt_id)
        why = None
        if container["labels"].get(runtime.LABEL_ROLE) == "snapshot":
            # An import reading an image's working folder (a second or so); one an hour old
            # was left by an import that died.
            if time.time() - container.get("created", 0) > SNAPSHOT_MAX_AGE:
                runtime.remove_container(container["id"])
                removed.append(
                    {"container": container["name"], "attempt": None, "why": "an old snapshot"}
                )
            continue
        is_check = container["labels"].get(runtime.LABEL_ROLE) == "check"
        if is_check and (
            attempt is None
            or (attempt.status in DONE_STATUSES and attempt.sandbox_state != SandboxState.LIVE)
        ):
            # A check's container lives only while its check runs: one left over is a lost
            # worker's. The attempt's own sandbox is not touched.
            runtime.remove_container(container["id"])
            removed.append(
                {
                    "container": container["name"],
                    "attempt": attempt_id,
                    "why": "a check container its worker left behind",
                }
            )
            continue
        if attempt is None:
            why = "its attempt no longer exists"
        elif attempt.sandbox_deleted_at or attempt.sandbox_state == SandboxState.DELETED:
            why = "its sandbox was deleted"
        elif (
            attempt.status in DONE_STATUSES and attempt.finished_at and attempt.finished_at < cutoff
        ):
            why = "past its retention"
        if why is None:
            continue
        runtime.remove_container(container["id"])
        removed.append({"container": container["name"], "attempt": attempt_id, "why": why})
        if attempt is not None:
            _mark_removed(attempt.pk, why)
    for item in removed:
        log.info(
            "reaper on %s removed %s (attempt %s): %s",
            host,
            item["container"],
            item["attempt"],
            item["why"],
        )
    return {"host": host, "lost": lost, "removed": removed, "gone": gone}


def mark_gone(kept: list[int], containers: list[tuple[dict, int | None]], *, now) -> list[int]:
    """Kept sandboxes whose container is no longer on the host (removed from outside Boltz,
    with `docker rm`, while no events listener was there to see it): marked deleted, with an
    event that says so, so the page offers nothing that needs them. Returns their attempt ids."""
    present = {
        attempt_id
        for container, attempt_id in containers
        if container["labels"].get(runtime.LABEL_ROLE) != "check"
    }
    gone = [i for i in kept if i not in present and record_gone(i, kept_only=True, now=now)]
    for attempt_id in gone:
        log.warning("reaper: the kept sandbox of attempt %s was removed outside Boltz", attempt_id)
    return gone
