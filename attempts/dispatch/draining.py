"""Draining a Docker host before it is stopped (an upgrade, a reboot, taking it out): its
attempts worker stops taking work from the shared queue, so new attempts, API sandboxes and
pool environments go to the other hosts, while what it runs goes on to its end. Then its worker
can stop without ending anything as an infrastructure error (docs/DEPLOY.md, "Upgrading").

The worker takes work again when it starts again (a drained host is one whose worker was told,
not a setting of its own), or when its Docker came back after it had been away."""

from __future__ import annotations

from attempts.dispatch.queue import SEND_ERRORS
from boltz_web.celery import app


def attempts_workers(host: str, *, timeout: float = 2.0) -> list[str]:
    """The attempts workers (worker_names' "attempts") of `host` that answer a ping now: one
    per `manage.py run_worker` process there (none when Redis cannot be reached)."""
    try:
        replies = app.control.ping(timeout=timeout)
    except SEND_ERRORS:
        return []
    return sorted(
        name
        for reply in replies or []
        for name in reply
        if name.startswith("attempts-") and name.endswith(f"@{host}")
    )


def drain(host: str, *, timeout: float = 5.0) -> tuple[list[str], list[str]]:
    """Tell every attempts worker of `host` to take no new work from any queue it consumes
    (its BOLTZ_QUEUE, whatever this process's is); (those that said they took none, those
    that did not answer in time)."""
    told, silent = [], []
    for node in attempts_workers(host):
        try:
            consuming = app.control.inspect([node], timeout=timeout).active_queues() or {}
            for queue in consuming.get(node, []):
                app.control.cancel_consumer(
                    queue["name"], destination=[node], reply=True, timeout=timeout
                )
            left = app.control.inspect([node], timeout=timeout).active_queues() or {}
        except SEND_ERRORS:
            left = {}
        (told if node in left and not left[node] else silent).append(node)
    return told, silent
