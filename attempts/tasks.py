"""Celery tasks: thin. Each takes ids, and calls one function of the runner."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from . import runner
from .errors import DockerUnavailable
from .sandbox import runtime

log = logging.getLogger(__name__)


@shared_task(name="boltz.run_attempt", bind=True, acks_late=True, max_retries=None)
def run_attempt(self, attempt_id: int) -> None:
    """Run one attempt on this worker's Docker host. Only a Docker-daemon fault is retried."""
    try:
        runtime.ping()
    except DockerUnavailable as exc:
        if self.request.retries < settings.BOLTZ_DOCKER_RETRIES:
            log.warning("Docker unavailable for attempt %s, retrying: %s", attempt_id, exc.reason)
            raise self.retry(countdown=settings.BOLTZ_DOCKER_RETRY_DELAY, exc=exc) from exc
        runner.mark_infra_error(
            attempt_id,
            f"start: Docker daemon unreachable on host {settings.BOLTZ_HOST} after "
            f"{self.request.retries + 1} tries: {exc.reason}",
        )
        return
    runner.run_attempt(attempt_id, host=settings.BOLTZ_HOST)
