"""Celery tasks: thin. Each takes ids and calls one function; attempts/dispatch/queue.py names them.
Only worker processes import this module (Celery's `imports`, boltz_web/celery.py)."""

from __future__ import annotations

import logging
import math
import threading
import time

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down
from django.conf import settings

from attempts.core.ended import mark_infra_error
from attempts.core.errors import DockerUnavailable
from attempts.dispatch import calls as opcalls
from attempts.dispatch import queue as queueing
from attempts.dispatch.errors import WorkerUnreachable
from attempts.dispatch.hosts import known_hosts
from attempts.models import Attempt, SandboxState
from attempts.run import director as runner
from attempts.run import image_transfer, reaper
from attempts.run.docker import runtime
from attempts.run.image_builds import use_this_hosts_docker
from attempts.services.lost_hosts import end_lost_attempts

log = logging.getLogger(__name__)

# A worker runs on a Docker host: the imports it runs may build and inspect images there.
use_this_hosts_docker()


def _docker_here(task, attempt_id: int) -> bool:
    """Does this host's Docker answer, for an attempt or sandbox about to start here? If not,
    its message goes back to the shared queue (a host whose Docker answers takes it; this one
    stops taking attempts while its Docker is away, container_watch.py) up to
    BOLTZ_DOCKER_RETRIES times, after which the attempt ends as an infrastructure error."""
    try:
        runtime.ping()
    except DockerUnavailable as exc:
        if task.request.retries < settings.BOLTZ_DOCKER_RETRIES:
            log.warning("Docker unavailable for attempt %s, retrying: %s", attempt_id, exc.reason)
            raise task.retry(countdown=settings.BOLTZ_DOCKER_RETRY_DELAY, exc=exc) from exc
        mark_infra_error(
            attempt_id,
            f"start: Docker daemon unreachable on host {settings.BOLTZ_HOST} after "
            f"{task.request.retries + 1} tries: {exc.reason}",
        )
        return False
    return True


@shared_task(name=queueing.RUN_ATTEMPT, bind=True, acks_late=True, max_retries=None)
def run_attempt_task(self, attempt_id: int) -> None:
    """Run one attempt on this worker's Docker host. Only a Docker-daemon fault is retried."""
    if _docker_here(self, attempt_id):
        runner.run_attempt(attempt_id, host=settings.BOLTZ_HOST)


@shared_task(name=queueing.REMOVE_SANDBOX, acks_late=True)
def remove_sandbox_task(attempt_id: int) -> None:
    """On the owning host: remove an attempt's containers and record the sandbox as deleted."""
    runtime.remove_attempt_containers(attempt_id)
    Attempt.objects.filter(pk=attempt_id).update(sandbox_state=SandboxState.DELETED)


@shared_task(name=queueing.APPLY_RETENTION)
def apply_retention_task() -> dict:
    """Periodic (Celery beat): retention, then the reaper on every known host."""
    result = reaper.apply_retention()
    for host in known_hosts():
        queueing.enqueue_reap(host)
    return result


@shared_task(name=queueing.REAP_HOST)
def reap_host_task(host: str) -> dict:
    return reaper.reap_host(host)


@worker_ready.connect
def on_worker_ready(sender=None, **kwargs) -> None:
    """A (re)started worker reaps what a lost predecessor left; the reap also registers the
    host (its capacity and images)."""
    queueing.enqueue_reap(settings.BOLTZ_HOST)


@shared_task(name=queueing.RECHECK, acks_late=True)
def recheck_task(attempt_id: int, requested_by: str) -> None:
    """On the owning host: check the attempt's recorded changes again."""
    runner.recheck(attempt_id, by=requested_by)


@shared_task(name=queueing.HOLD_SANDBOX, bind=True, acks_late=True, max_retries=None)
def hold_sandbox_task(self, attempt_id: int) -> None:
    """Open an API sandbox on this host and hold it (one of the host's slots) until closed.
    Only a Docker-daemon fault is retried, as for an attempt."""
    from attempts.run.operations import hold_sandbox

    if _docker_here(self, attempt_id):
        hold_sandbox(attempt_id, host=settings.BOLTZ_HOST)


HEARTBEAT_SECONDS = 2
IMAGES_EVERY = 15  # beats between two readings of the host's images (30 s)


def _heartbeat() -> None:
    """Say the host is alive, and watch its attempts' workers: one that went silent is lost;
    so are the attempts of a host gone silent whole (services/lost_hosts.py)."""
    from attempts.run.heartbeat import register_this_host

    beats, missed_at = 0, -math.inf
    while True:
        try:
            try:
                # Its images too twice a minute: one loaded or removed by hand is known soon.
                register_this_host(images=beats % IMAGES_EVERY == 0)
            except Exception:
                missed_at = time.monotonic()
                raise
            # Silence says a worker is lost only if this beat was heard all along: while the
            # database was out of reach (locked, down), every beat was held up, not only theirs.
            heard = time.monotonic() - missed_at > settings.BOLTZ_LOST_AFTER
            if beats % 3 == 0 and heard:
                reaper.reap_silent(settings.BOLTZ_HOST)
                end_lost_attempts()  # those of any host gone silent whole
        except Exception:  # noqa: BLE001 - a missed beat is retried; it must never stop
            log.exception("heartbeat of host %s failed", settings.BOLTZ_HOST)
        beats += 1
        time.sleep(HEARTBEAT_SECONDS)


REQUEUE_SECONDS = 5


def _requeue() -> None:
    """Every few seconds: attempts queued whose message Redis lost (it restarted without its
    data) are sent again. When Redis is back after it could not be reached, the host's reaper
    runs at once: it removes the containers whose removal could not be sent meanwhile."""
    down = False
    while True:
        time.sleep(REQUEUE_SECONDS)
        try:
            lost = queueing.resend_lost()
            if down:
                log.warning("Redis is back: host %s reaps what waited", settings.BOLTZ_HOST)
                queueing.enqueue_reap(settings.BOLTZ_HOST)
            down = False
            if lost:
                log.warning("sent again %d attempt(s) Redis had lost: %s", len(lost), lost)
        except WorkerUnreachable:
            down = True  # said once by the queue module; tried again next time
        except Exception:  # noqa: BLE001 - a missed sweep is retried; it must never stop
            log.exception("sending lost attempts again failed on host %s", settings.BOLTZ_HOST)


_opcalls: opcalls.Server | None = None


@worker_ready.connect
def start_operations(sender=None, **kwargs) -> None:
    """The operations worker serves the API's calls on this host's live sandboxes (threads of
    its own, beside Celery's), says every few seconds that its host is alive (an API call on
    a sandbox whose host went quiet fails at once instead of waiting), listens to Docker's
    events (a live sandbox whose container stopped outside Boltz ends at once), and sends
    again what Redis lost (`_requeue`)."""
    global _opcalls
    if sender is not None and str(getattr(sender, "hostname", "")).startswith("ops-"):
        from attempts.run import container_watch
        from attempts.run.operations import run_operation

        _opcalls = opcalls.Server(
            settings.BOLTZ_HOST, run_operation, settings.BOLTZ_OPS_CONCURRENCY
        ).start()
        threading.Thread(target=_heartbeat, name="boltz-heartbeat", daemon=True).start()
        # This host's attempts worker (of the same run_worker) takes no attempts while this
        # host's Docker does not answer.
        attempts_node = "attempts-" + str(sender.hostname).removeprefix("ops-")
        container_watch.start(lambda taking: queueing.take_attempts(attempts_node, taking=taking))
        threading.Thread(target=_requeue, name="boltz-requeue", daemon=True).start()


@worker_shutting_down.connect
def stop_operations(sender=None, **kwargs) -> None:
    """A warm shutdown lets the calls being done finish (30 s at most)."""
    if _opcalls is not None:
        _opcalls.stop()


@shared_task(name=queueing.EXPORT_IMAGE)
def export_image_task(image: str, request_id: str) -> None:
    image_transfer.export_image(image, request_id)


@shared_task(name=queueing.DELIVER_CALLBACK)
def deliver_callback_task(attempt_id: int, try_number: int) -> None:
    """One delivery of a callback; a failed one is sent again later (1, 2, 4, 8 s ... apart)."""
    from attempts.services.callbacks import deliver

    if not deliver(attempt_id, try_number):
        queueing.enqueue_callback(
            attempt_id, try_number=try_number + 1, delay=2 ** (try_number - 1)
        )
