"""Signs of life: of the worker process that runs an attempt or holds a sandbox, and of a
worker's host (`register_this_host`, read by attempts/dispatch/hosts.py).

While it runs, a thread of that process writes `Attempt.heartbeat_at` every few seconds. A
process that dies (killed, out of memory) stops writing, and its host's operations worker,
which watches, ends the attempt as an infrastructure error within BOLTZ_LOST_AFTER seconds. A
host gone silent whole is noticed by any other host's worker or the web process
(attempts/services/lost_hosts.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading

from django.conf import settings
from django.db import connection
from django.utils import timezone

from attempts.core.errors import InfrastructureError
from attempts.dispatch import hosts
from attempts.models import Attempt
from attempts.run.docker import runtime

log = logging.getLogger(__name__)

BEAT_SECONDS = 5.0


@contextlib.contextmanager
def beating(attempt_id: int):
    """Keep saying that this process is running the attempt, until the block ends."""
    done = threading.Event()

    def beat() -> None:
        try:
            while True:
                try:
                    Attempt.objects.filter(pk=attempt_id).update(heartbeat_at=timezone.now())
                except Exception:  # noqa: BLE001 - a missed beat is retried, never fatal
                    log.exception("heartbeat of attempt %s failed", attempt_id)
                if done.wait(BEAT_SECONDS):
                    return
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"attempt-{attempt_id}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=BEAT_SECONDS * 2)


# This process's last reading of its Docker's version: read again with the images (the reaper,
# a minute or so apart), not on every two-second beat.
_docker_version: str | None = None


def register_this_host(*, images: bool = True) -> None:
    """Say this worker's host is alive now, with its capacity, its Docker's version (read with
    `images`, or when this process has none yet) and (with `images`) its images."""
    global _docker_version
    names = None
    if images:
        try:
            names = runtime.list_image_names()
        except InfrastructureError:
            names = []
    if images or _docker_version is None:
        # Docker down: the last version read stays (the host's sandboxes say the rest).
        with contextlib.suppress(InfrastructureError):
            _docker_version = runtime.server_version()[:100]
    hosts.register_host(
        settings.BOLTZ_HOST,
        settings.BOLTZ_MAX_SANDBOXES,
        images=names,
        docker_version=_docker_version,
    )
