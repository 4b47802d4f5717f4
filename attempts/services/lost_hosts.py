"""Hosts whose worker is gone: their attempts end as infrastructure errors and their sandboxes
are given up, so no page, API client or pool waits on them.

Two signs of life say that a host still runs an attempt: its operations worker writes
`WorkerHost.last_seen` every two seconds, and the process running the attempt writes the
attempt's `heartbeat_at` every five. When both have been silent for BOLTZ_LOST_AFTER seconds,
nothing on that host can finish it (its workers were killed, its machine is down): the attempt
is lost. Any process that reads the database can tell, and each that can does: every worker's
heartbeat (another host's, or the lost host's own replacement) and the web process on its
requests (a few seconds apart at most), so a host lost while no worker runs anywhere is noticed
too. The web process never talks to Docker: the container stays on the lost host until its
worker comes back, and that worker removes it (the removal waits in its host's queue, and its
reaper removes the containers of given-up sandboxes as it starts).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from attempts.core.ended import mark_infra_error
from attempts.dispatch.hosts import heard_hosts, quiet_since
from attempts.dispatch.queue import enqueue_sandbox_removal
from attempts.models import ACTIVE_STATUSES, Attempt, WorkerHost

log = logging.getLogger(__name__)

# Who gave up the sandbox of an attempt lost with its host (its `sandbox_deleted_by`).
LOST_BY = "Boltz (its host was lost)"


def lost_attempts(*, now=None):
    """Active attempts whose host and own process have both been silent for BOLTZ_LOST_AFTER."""
    quiet = quiet_since(now)
    heard = heard_hosts(now).values("name")
    return (
        Attempt.objects.filter(status__in=ACTIVE_STATUSES)
        .exclude(host="")
        .exclude(host__in=heard)
        .filter(Q(heartbeat_at__lt=quiet) | Q(heartbeat_at__isnull=True, started_at__lt=quiet))
    )


def end_lost_attempts(*, now=None) -> list[int]:
    """End every lost attempt (see above) as an infrastructure error, its sandbox given up and
    its container's removal sent to its host. Returns their ids. Safe to run anywhere, at once
    in several processes: each attempt is ended once (a compare-and-set on its status)."""
    now = now or timezone.now()
    lost = list(lost_attempts(now=now).only("pk", "status", "host"))
    if not lost:  # the usual case: one query
        return []
    hosts = {attempt.host for attempt in lost}
    seen = dict(WorkerHost.objects.filter(name__in=hosts).values_list("name", "last_seen"))
    ended = []
    for attempt in lost:
        last = seen.get(attempt.host)
        since = f"since {last:%Y-%m-%d %H:%M:%S} UTC" if last else "at all"
        reason = (
            f"worker lost: host {attempt.host} has not been heard from {since} (for more than "
            f"{settings.BOLTZ_LOST_AFTER:g}s): its worker was killed or its machine is down; "
            "the sandbox was given up and its container is removed when the host's worker "
            "comes back"
        )
        if mark_infra_error(
            attempt.pk,
            reason,
            expected_status=attempt.status,
            sandbox_deleted_at=now,
            sandbox_deleted_by=LOST_BY,
        ):
            ended.append(attempt.pk)
            try:  # waits in the host's own queue; its reaper removes it as it starts anyway
                enqueue_sandbox_removal(attempt.pk, host=attempt.host)
            except Exception:  # noqa: BLE001 - the broker down: the reaper is enough
                log.warning("could not send the removal of attempt %s's sandbox", attempt.pk)
    for pk in ended:
        log.warning("attempt %s was lost with its host: ended as an infrastructure error", pk)
    return ended


# The web process looks at most this often (seconds), on the requests it serves.
LOOK_EVERY = 5.0
_looked = {"at": -LOOK_EVERY}
_looking = threading.Lock()


def end_lost_attempts_now_and_then() -> None:
    """`end_lost_attempts`, at most every LOOK_EVERY seconds in this process, never raising: a
    request it runs on goes on whatever it finds."""
    if time.monotonic() - _looked["at"] < LOOK_EVERY or not _looking.acquire(blocking=False):
        return
    try:
        _looked["at"] = time.monotonic()
        end_lost_attempts()
    except Exception:  # noqa: BLE001 - the database or the broker down: the request goes on
        log.exception("could not look for attempts lost with their host")
    finally:
        _looking.release()
