"""Sending work to the workers: the one module that names Celery tasks.

Services, views and commands enqueue through these functions (after the transaction commits, so
no worker sees a row that is not there yet) and never import the tasks module: the web process
loads neither the runner nor Docker. Work for a live sandbox goes to the queue of the host that
owns its container. (An API call on a live sandbox is not a task: it is an operation call,
dispatch/calls.py.)

When Redis cannot be reached (it refuses, or it accepts and never answers), a send fails within
a few seconds (BOLTZ_REDIS_TIMEOUT) as WorkerUnreachable, which the API answers 503 and pages
answer with a 503 page; for a few seconds after, sends fail at once. Nothing is left waiting for
a message that was never sent:
- attempts and API sandboxes: `require_queue` refuses before any is created; one whose send
  failed all the same (Redis went away between the two) is ended at once, "not started", as an
  infrastructure error, so its creator, told 503, finds it ended (a worker that got it after
  all finds it no longer queued and does nothing);
- a re-check gives its sandbox back (the caller's `unsent`); a removal is left to the host's
  reaper, which removes every container whose sandbox or attempt was deleted; a callback that
  could not be sent is said on the attempt's timeline;
- what Redis lost (a restart without persistence) is found by `resend_lost`, which every host's
  operations worker runs every few seconds: an attempt queued with no message for it, neither
  in its queue nor in a worker's hands, is sent again (a message delivered twice does nothing:
  a worker claims an attempt by compare-and-set from `queued`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Callable
from datetime import timedelta

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from attempts.core.ended import mark_infra_error
from attempts.core.timeline import Timeline
from attempts.dispatch import calls as opcalls
from attempts.dispatch.deadlines import attempt_budget
from attempts.dispatch.errors import WorkerUnreachable
from attempts.models import Attempt, EventKind, Status
from boltz_web.celery import app

log = logging.getLogger(__name__)

RUN_ATTEMPT = "boltz.run_attempt"
RECHECK = "boltz.recheck"
REMOVE_SANDBOX = "boltz.remove_sandbox"
REAP_HOST = "boltz.reap_host"
APPLY_RETENTION = "boltz.apply_retention"
HOLD_SANDBOX = "boltz.hold_sandbox"
DELIVER_CALLBACK = "boltz.deliver_callback"
EXPORT_IMAGE = "boltz.export_image"

# What a send that could not reach Redis raises (kombu says most as OperationalError).
SEND_ERRORS = (OperationalError, redis.RedisError, OSError)
DOWN_SECONDS = 2.0  # after a failure, sends fail at once for this long: no second wait on Redis
LOST_AFTER = 15.0  # seconds queued, past which an attempt with no message in Redis is lost


def host_queue(host: str) -> str:
    """The queue that only the worker of `host` consumes (operations on its live sandboxes)."""
    return f"{settings.BOLTZ_QUEUE}.host.{host}"


def callbacks_queue() -> str:
    """Callbacks go out from any host's operations worker."""
    return f"{settings.BOLTZ_QUEUE}.callbacks"


WORKER_ROLES = ("attempts", "host", "ops")  # the three workers `manage.py run_worker` starts


def worker_names(pid: int, host: str) -> dict[str, str]:
    """The Celery node name of each worker that the `run_worker` process `pid` starts."""
    return {role: f"{role}-{pid}@{host}" for role in WORKER_ROLES}


def answering_workers(names: list[str], *, timeout: float = 1.0) -> set[str]:
    """Which of these Celery nodes answer a ping now (none when Redis cannot be reached)."""
    try:
        replies = app.control.ping(destination=names, timeout=timeout)
    except SEND_ERRORS:
        return set()
    return {name for reply in replies or [] for name in reply}


def take_attempts(node: str, *, taking: bool, timeout: float = 2.0) -> bool:
    """Have the attempts worker `node` (worker_names' "attempts") stop taking new attempts
    from the shared queue (`taking=False`: its host's Docker cannot be reached, so they go to a
    host whose Docker answers) or take them again. True when the worker said it did (it says
    so also when it was so already); False when it did not answer, or Redis could not be
    reached: ask again."""
    control = app.control.add_consumer if taking else app.control.cancel_consumer
    try:
        replies = control(settings.BOLTZ_QUEUE, destination=[node], reply=True, timeout=timeout)
    except SEND_ERRORS:
        return False
    return any(node in reply for reply in replies or [])


def attempts_queue(queue: str | None = None) -> str:
    """The queue a new attempt goes to (kept on its row, where `resend_lost` looks for it)."""
    return queue or settings.BOLTZ_QUEUE


# --- sending, and Redis down -------------------------------------------------------------------
_down_until = 0.0
_down_why = ""


def _went_down(exc: Exception) -> WorkerUnreachable:
    """Redis failed: the refusal that says so (without its address), for DOWN_SECONDS."""
    global _down_until, _down_why
    log.warning("Redis cannot be reached: %s", exc)
    text = f"{type(exc).__name__}: {exc}".lower()
    if "timeout" in text or "timed out" in text:
        how = f"it did not answer within {settings.BOLTZ_REDIS_TIMEOUT:g}s"
    elif "refused" in text:
        how = "it refused the connection"
    else:
        how = type(exc).__name__
    _down_why = f"Boltz's queue to its workers (Redis) cannot be reached ({how}); retry shortly"
    _down_until = time.monotonic() + DOWN_SECONDS
    return WorkerUnreachable(_down_why)


def _still_down() -> None:
    if time.monotonic() < _down_until:
        raise WorkerUnreachable(_down_why)


def require_queue() -> None:
    """Refuse (WorkerUnreachable) before anything is created when Redis does not answer."""
    _still_down()
    try:
        opcalls.ping_redis()
    except opcalls.ChannelDown as exc:
        raise _went_down(exc) from None


def _send(name: str, args: list, *, queue: str, **options) -> None:
    """Send a task by name now; WorkerUnreachable within seconds if Redis cannot take it."""
    _still_down()
    try:
        app.send_task(name, args=args, queue=queue, **options)
    except SEND_ERRORS as exc:
        raise _went_down(exc) from None


def send_on_commit(
    name: str,
    args: list,
    *,
    queue: str,
    unsent: Callable[[WorkerUnreachable], None] | None = None,
    **options,
) -> None:
    """Send a task by name once the current transaction commits. If Redis cannot take it,
    `unsent` undoes what waited for it, then the WorkerUnreachable reaches the caller."""

    def send() -> None:
        try:
            _send(name, args, queue=queue, **options)
        except WorkerUnreachable as refusal:
            if unsent is not None:
                unsent(refusal)
            raise

    transaction.on_commit(send)


# --- attempts and API sandboxes ----------------------------------------------------------------
def enqueue_attempts(attempts: list[Attempt]) -> None:
    """Send attempts (a pipeline attempt runs; an API sandbox or a pool's episode is opened and
    held) to their queue once the transaction commits: any host with room takes each, with its
    worker's time limits following its stage limits. If Redis cannot take them all, every one
    not yet taken by a worker is ended, "not started", and WorkerUnreachable is raised."""
    attempts = list(attempts)
    transaction.on_commit(lambda: _send_all(attempts))


def _send_all(attempts: list[Attempt]) -> None:
    try:
        for attempt in attempts:
            _send_attempt(attempt)
    except WorkerUnreachable as refusal:
        # The creator hears 503 for them all: none may run unseen (a compare-and-set from
        # `queued`: one a worker took meanwhile goes on, and its owner sees it running).
        ended = [a.pk for a in attempts if mark_infra_error(a.pk, f"not started: {refusal}")]
        if ended:
            raise


def _send_attempt(attempt: Attempt) -> None:
    budget = attempt_budget(attempt)
    _send(
        HOLD_SANDBOX if attempt.origin == "api" else RUN_ATTEMPT,
        [attempt.pk],
        queue=attempt.queue or settings.BOLTZ_QUEUE,
        soft_time_limit=budget,
        time_limit=budget * 1.2 + 60,
    )


def resend_lost(*, queue: str | None = None, confirm_after: float = 1.0) -> list[int]:
    """Attempts of `queue` (this worker's) queued for LOST_AFTER seconds or more whose message
    Redis no longer holds (it restarted without its data, or a sender died between its commit
    and its send): sent again. Their ids. WorkerUnreachable while Redis cannot be reached.

    A worker takes a message out of its queue a moment before it records it as taken (and
    before it claims the attempt): one found missing is looked for again `confirm_after`
    seconds later, so a message being taken is seldom sent twice (twice does nothing)."""
    queue = queue or settings.BOLTZ_QUEUE
    lost = _missing(queue)
    if lost and confirm_after:
        time.sleep(confirm_after)
        again = {attempt.pk for attempt in _missing(queue)}
        lost = [attempt for attempt in lost if attempt.pk in again]
    for attempt in lost:
        _send_attempt(attempt)
    return [attempt.pk for attempt in lost]


def _missing(queue: str) -> list[Attempt]:
    """The attempts of `queue` queued for LOST_AFTER seconds or more with no message in Redis."""
    queued = list(
        Attempt.objects.filter(
            status=Status.QUEUED,
            queue=queue,
            created_at__lt=timezone.now() - timedelta(seconds=LOST_AFTER),
        ).select_related("task")
    )
    if not queued:
        return []
    held = _attempts_in_redis(queue)
    return [attempt for attempt in queued if attempt.pk not in held]


def _attempts_in_redis(queue: str) -> set[int]:
    """The attempts whose message Redis holds for `queue`: waiting in it (kombu's Redis transport
    keeps a queue's messages in a list of its name; Boltz gives none a priority, which would put
    it in another) or taken from it by a worker and not yet acknowledged (the `unacked` hash,
    shared by all queues: each entry is [message, exchange, routing key], and a message sent to a
    queue is routed by the queue's name)."""
    try:
        with app.connection_for_read() as connection:
            channel = connection.default_channel
            waiting = channel.client.lrange(queue, 0, -1)
            taken = channel.client.hvals(channel.unacked_key)
    except SEND_ERRORS as exc:
        raise _went_down(exc) from None
    messages = [_loads(raw) for raw in waiting]
    messages += [
        entry[0]
        for entry in map(_loads, taken)
        if isinstance(entry, list) and len(entry) == 3 and entry[2] == queue
    ]
    return {found for found in map(_attempt_of, messages) if found is not None}


def waiting_counts(queues: list[str]) -> dict[str, int]:
    """How many messages wait in each of these queues, not yet taken by a worker (read as
    `_attempts_in_redis` reads them). WorkerUnreachable, within BOLTZ_REDIS_TIMEOUT, while Redis
    cannot be reached."""
    _still_down()
    try:
        with app.connection_for_read() as connection:
            pipe = connection.default_channel.client.pipeline(transaction=False)
            for queue in queues:
                pipe.llen(queue)
            counts = pipe.execute()
    except SEND_ERRORS as exc:
        raise _went_down(exc) from None
    return dict(zip(queues, (int(n) for n in counts), strict=True))


def _loads(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _attempt_of(message) -> int | None:
    """The attempt a run or hold message is for (its first argument), else None."""
    if not isinstance(message, dict):
        return None
    if (message.get("headers") or {}).get("task") not in (RUN_ATTEMPT, HOLD_SANDBOX):
        return None
    try:
        body = message["body"]
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        return int(json.loads(body)[0][0])
    except (KeyError, IndexError, TypeError, ValueError, binascii.Error):
        return None


# --- the other tasks ---------------------------------------------------------------------------
def enqueue_recheck(attempt: Attempt, *, by: str, unsent: Callable | None = None) -> None:
    send_on_commit(RECHECK, [attempt.pk, by], queue=host_queue(attempt.host), unsent=unsent)


def enqueue_sandbox_removal(attempt_id: int, *, host: str) -> None:
    """The container goes on its host. If Redis cannot take this, the deletion stands all the
    same: the host's reaper removes the container when it next runs (when Redis is back)."""

    def send() -> None:
        try:
            _send(REMOVE_SANDBOX, [attempt_id], queue=host_queue(host))
        except WorkerUnreachable as refusal:
            log.warning(
                "the container of attempt %s is left to the reaper of host %s: %s",
                attempt_id,
                host,
                refusal,
            )

    transaction.on_commit(send)


def request_image(host: str, image: str, request_id: str) -> None:
    """Ask the worker of `host` to put its `image` in the file storage (run/image_transfer.py),
    for a host that lacks it; now, not after a commit."""
    _send(EXPORT_IMAGE, [image, request_id], queue=host_queue(host))


def enqueue_reap(host: str) -> None:
    """Now, not after a commit: the reaper reads only what is committed."""
    _send(REAP_HOST, [host], queue=host_queue(host))


def enqueue_callback(attempt_id: int, *, try_number: int = 1, delay: float = 0) -> None:
    """Deliver an ended attempt's outcome to its callback URL (now, and retried later). One
    that cannot be sent (Redis down) is said on the attempt's timeline."""
    try:
        _send(DELIVER_CALLBACK, [attempt_id, try_number], queue=callbacks_queue(), countdown=delay)
    except WorkerUnreachable as refusal:
        Timeline(attempt_id).add(
            EventKind.LIFECYCLE,
            action="callback",
            delivery=try_number,
            delivered=False,
            message=f"callback {try_number} not sent: {refusal}",
        )
