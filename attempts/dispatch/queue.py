"""Sending work to the workers: the one module that names Celery tasks.

Services, views and commands enqueue through these functions (after the transaction commits, so
no worker sees a row that is not there yet) and never import the tasks module: the web process
loads neither the runner nor Docker. Work for a live sandbox goes to the queue of the host that
owns its container. (An API call on a live sandbox is not a task: it is an operation call,
dispatch/calls.py.)
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from attempts.dispatch.deadlines import attempt_budget
from attempts.models import Attempt
from boltz_web.celery import app

RUN_ATTEMPT = "boltz.run_attempt"
RECHECK = "boltz.recheck"
REMOVE_SANDBOX = "boltz.remove_sandbox"
REAP_HOST = "boltz.reap_host"
APPLY_RETENTION = "boltz.apply_retention"
HOLD_SANDBOX = "boltz.hold_sandbox"
DELIVER_CALLBACK = "boltz.deliver_callback"


def host_queue(host: str) -> str:
    """The queue that only the worker of `host` consumes (operations on its live sandboxes)."""
    return f"{settings.BOLTZ_QUEUE}.host.{host}"


def callbacks_queue() -> str:
    """Callbacks go out from any host's operations worker."""
    return f"{settings.BOLTZ_QUEUE}.callbacks"


def send_on_commit(name: str, args: list, *, queue: str, **options) -> None:
    """Send a task by name once the current transaction commits."""
    transaction.on_commit(lambda: app.send_task(name, args=args, queue=queue, **options))


def enqueue_attempt(attempt: Attempt, *, queue: str | None = None) -> None:
    """Any host with room runs it; the worker's time limits follow its stage limits."""
    budget = attempt_budget(attempt)
    send_on_commit(
        RUN_ATTEMPT,
        [attempt.pk],
        queue=queue or settings.BOLTZ_QUEUE,
        soft_time_limit=budget,
        time_limit=budget * 1.2 + 60,
    )


def enqueue_recheck(attempt: Attempt, *, by: str) -> None:
    send_on_commit(RECHECK, [attempt.pk, by], queue=host_queue(attempt.host))


def enqueue_sandbox_removal(attempt_id: int, *, host: str) -> None:
    send_on_commit(REMOVE_SANDBOX, [attempt_id], queue=host_queue(host))


def enqueue_reap(host: str) -> None:
    """Now, not after a commit: the reaper reads only what is committed."""
    app.send_task(REAP_HOST, args=[host], queue=host_queue(host))


def enqueue_sandbox(attempt: Attempt) -> None:
    """An API sandbox waits for a host with room like any attempt, then is held open."""
    budget = attempt_budget(attempt)
    send_on_commit(
        HOLD_SANDBOX,
        [attempt.pk],
        queue=settings.BOLTZ_QUEUE,
        soft_time_limit=budget,
        time_limit=budget * 1.2 + 60,
    )


def enqueue_callback(attempt_id: int, *, try_number: int = 1, delay: float = 0) -> None:
    """Deliver an ended attempt's outcome to its callback URL (now, and retried later)."""
    app.send_task(
        DELIVER_CALLBACK, args=[attempt_id, try_number], queue=callbacks_queue(), countdown=delay
    )
