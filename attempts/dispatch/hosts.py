"""The Docker hosts whose workers have been seen: their capacity and the images they have.

Read by the web process (the task form offers the images, imports check them) without ever
asking Docker itself; each worker reports its own host when its reaper runs.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from attempts.core.errors import InfrastructureError
from attempts.models import ACTIVE_STATUSES, Attempt, SandboxState, WorkerHost


def known_hosts() -> list[str]:
    """Hosts the reaper should visit: workers seen lately, and hosts holding sandboxes."""
    recent = timezone.now() - timedelta(days=30)
    names = set(WorkerHost.objects.filter(last_seen__gte=recent).values_list("name", flat=True))
    names |= set(
        Attempt.objects.exclude(host="")
        .filter(
            Q(status__in=ACTIVE_STATUSES)
            | Q(sandbox_state__in=[SandboxState.LIVE, SandboxState.STOPPED])
        )
        .order_by("host")
        .values_list("host", flat=True)
        .distinct()
    )
    return sorted(names)


def register_host(host: str, capacity: int, *, images: bool = True) -> None:
    """Record this worker's host as seen now, its capacity and (with `images`) the images it
    has, for task forms."""
    defaults = {"capacity": capacity, "last_seen": timezone.now()}
    if images:
        from attempts.run.docker import runtime  # only a worker registers its own host

        try:
            defaults["images"] = runtime.list_image_names()
        except InfrastructureError:
            defaults["images"] = []
    WorkerHost.objects.update_or_create(name=host, defaults=defaults)


# When this process last found each host alive: a burst of calls reads the database once a second.
_alive_seen: dict[str, float] = {}
ALIVE_REREAD_SECONDS = 1.0


def host_alive(host: str, *, within: float = 10.0, wait: float = 5.0) -> bool:
    """Has the operations worker of `host` been heard from in the last `within` seconds?
    (It says so every two seconds; a beat that is late is waited for, `wait` seconds at most.)"""
    now = time.monotonic()
    if now - _alive_seen.get(host, -ALIVE_REREAD_SECONDS) < ALIVE_REREAD_SECONDS:
        return True
    deadline = now + wait
    while True:
        since = timezone.now() - timedelta(seconds=within)
        if WorkerHost.objects.filter(name=host, last_seen__gte=since).exists():
            _alive_seen[host] = time.monotonic()
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def known_images() -> list[str]:
    """Every image some worker host reported having."""
    recent = timezone.now() - timedelta(days=30)
    return sorted(
        {
            i
            for images in WorkerHost.objects.filter(last_seen__gte=recent).values_list(
                "images", flat=True
            )
            for i in images
        }
    )


def image_known(name: str) -> bool:
    """Does a worker host have this image? Reported hosts answer first; outside the web process
    (a worker, the command line on a Docker host) the local Docker is asked too. The web
    process never asks Docker: it holds no Docker socket."""
    if name in known_images():
        return True
    if os.environ.get("BOLTZ_ROLE") == "web":
        return False
    from attempts.run.docker import runtime

    return runtime.image_exists(name)
