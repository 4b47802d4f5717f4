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


def register_this_host(*, images: bool = True) -> None:
    """Say this worker's host is alive now, with its capacity and (with `images`) its images."""
    names = None
    if images:
        try:
            names = runtime.list_image_names()
        except InfrastructureError:
            names = []
    hosts.register_host(settings.BOLTZ_HOST, settings.BOLTZ_MAX_SANDBOXES, images=names)
