"""The Docker events listener of a worker's host: a live sandbox whose container stopped or went
without Boltz stopping it (`docker kill`, `docker rm -f`, a restarted daemon), and a kept sandbox
whose container was removed, are marked at once.

It runs in the operations worker (celery_tasks.start_operations), beside the operation calls:
the one process where Boltz itself stops the container of a live API sandbox or pool episode,
inside an operation (an in-place check halts it and starts it again; a command past its time
has every process ended). So the container of a live sandbox that dies while no operation runs
on it was stopped from outside; one that dies during an operation is judged when the operation
ends, by whether it runs then.

The sandbox's holder (operations.ClientHold, in another process) reads it on its row: the
sandbox leaves "live" (stopped; deleted when its container was removed). The holder then ends the
attempt as an infrastructure error and frees its slot. A kept sandbox removed is marked gone
(director.record_gone). Pipeline attempts are not watched: their director is in a Docker call on
the container all along, which fails at once when it dies.

Events missed while the listener was not connected (the daemon restarting) are made up when it
connects again: a sweep of this host's live sandboxes, and the reaper (kept ones gone, check
containers left behind).

A daemon that stays away (stopped, crashed: every container stops with it) is noticed by a
second thread that asks it every two seconds (`watch_reach`): once it has not answered for
AWAY_SECONDS, this host's live sandboxes are marked stopped (their holders end them as
infrastructure errors, as above), and this host's attempts worker stops taking new attempts
from the shared queue, so they go to hosts whose Docker answers; it takes them again when its
Docker is back.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection, transaction

from attempts.core.errors import InfrastructureError
from attempts.core.timeline import Timeline
from attempts.dispatch import queue as queueing
from attempts.models import Attempt, EventKind, SandboxState, Status
from attempts.run.director import record_gone
from attempts.run.docker import runtime

log = logging.getLogger(__name__)

# Seconds between tries to reach a daemon that went away.
RECONNECT_SECONDS = 1.0
# Seconds between asking the daemon whether it answers, and how long it may stay away (a
# restart takes a few seconds) before this host's live sandboxes end and it takes no attempts.
REACH_SECONDS = 2.0
AWAY_SECONDS = 10.0

# A sandbox held live for its client, and not being closed, cancelled or deleted by Boltz.
HELD = {
    "status": Status.RUNNING,
    "origin": "api",
    "close_requested_at__isnull": True,
    "cancel_requested_at__isnull": True,
    "sandbox_deleted_at__isnull": True,
}

_lock = threading.Lock()
_busy: dict[int, int] = {}  # attempt id -> operations running on its sandbox in this process
_suspect: dict[int, str] = {}  # attempt id -> its container, to judge when its operations end
_full_disk: dict[int, str] = {}  # attempt id -> why Docker could not start it again


@contextlib.contextmanager
def operating(attempt_id: int):
    """Around one operation on a live sandbox: a container that stops meanwhile may be Boltz's
    own doing, so it is judged when the last operation on the sandbox ends."""
    with _lock:
        _busy[attempt_id] = _busy.get(attempt_id, 0) + 1
    try:
        yield
    finally:
        with _lock:
            left = _busy[attempt_id] = _busy[attempt_id] - 1
            if not left:
                del _busy[attempt_id]
            container = _suspect.pop(attempt_id, None) if not left else None
        if container:
            _judge_now(attempt_id, container)


def stopped_by_full_disk(attempt_id: int, reason: str) -> bool:
    """After DiskFull in an operation: True (and noted for the sandbox's holder, which ends
    it as the agent's failure) if its container is stopped, as Boltz left it when Docker could
    not start it again; its stop is then no one else's doing."""
    container = Attempt.objects.filter(pk=attempt_id).values_list("container_id", flat=True).first()
    try:
        info = runtime.inspect_container(container) if container else None
    except InfrastructureError:  # Docker away: the sweep after it returns judges the sandbox
        return False
    if info is None or info["State"].get("Running"):
        return False
    with _lock:
        _full_disk[attempt_id] = reason
        _suspect.pop(attempt_id, None)
    with transaction.atomic():
        if Attempt.objects.filter(pk=attempt_id, sandbox_state=SandboxState.LIVE, **HELD).update(
            sandbox_state=SandboxState.STOPPED
        ):
            Timeline(attempt_id).add(
                EventKind.ERROR,
                actor="agent",
                message=f"{reason}: Docker could not start the sandbox again; it ends",
            )
    return True


def full_disk_reason(attempt_id: int) -> str:
    """Why the sandbox stopped, if a full disk kept Boltz from starting it again ("" if not);
    said once, to its holder."""
    with _lock:
        return _full_disk.pop(attempt_id, "")


def suspect(attempt_id: int, container: str) -> None:
    """An operation found the sandbox's container failing: judge it when the operation ends."""
    with _lock:
        _suspect[attempt_id] = container


def _judge_now(attempt_id: int, container: str) -> None:
    """Is the sandbox's container still running? Marked stopped (or gone) if not."""
    try:
        info = runtime.inspect_container(container)
    except InfrastructureError:  # the daemon is away: the sweep after it returns judges
        return
    if info is None:
        stopped(attempt_id, container, removed=True, how="was removed")
    elif not info["State"].get("Running"):
        stopped(attempt_id, container, removed=False, how=_how(info["State"].get("ExitCode")))


def _how(exit_code) -> str:
    return "stopped" if exit_code is None else f"stopped (exit code {exit_code})"


def stopped(attempt_id: int, container: str, *, removed: bool, how: str, at=None) -> bool:
    """The container of a live sandbox stopped (or, `removed`, went) outside Boltz: its state
    leaves "live", which its holder reads; an event says what Docker saw. During an operation
    on the sandbox it is judged when the operation ends. True if marked now."""
    with _lock:
        if attempt_id in _full_disk:  # Boltz stopped it, and a full disk kept it stopped
            return False
        if _busy.get(attempt_id):
            _suspect[attempt_id] = container
            return False
    held = Attempt.objects.filter(pk=attempt_id, container_id=container, **HELD)
    was = (SandboxState.LIVE, SandboxState.STOPPED) if removed else (SandboxState.LIVE,)
    state = SandboxState.DELETED if removed else SandboxState.STOPPED
    when = datetime.datetime.fromtimestamp(at or time.time(), tz=datetime.UTC)
    with transaction.atomic():
        if not held.filter(sandbox_state__in=was).update(sandbox_state=state):
            return False
        Timeline(attempt_id).add(
            EventKind.ERROR,
            message=f"the sandbox's container {how} at {when:%H:%M:%S} UTC, and not by Boltz "
            "(docker kill or rm, or its Docker daemon restarted): the sandbox ends",
            infrastructure=True,
            container=container[:12],
            docker_event_at=when.isoformat(),
        )
    log.warning("the container of live sandbox %s %s outside Boltz", attempt_id, how)
    return True


def handle(event: runtime.ContainerEvent) -> None:
    """One event of Docker's about a container of this host's."""
    if event.attempt_id is None or event.role != "agent":
        return  # a check's, a rebuild's or an import's container: its own caller sees it
    if event.action == "oom":
        _out_of_memory(event)
        return
    removed = event.action == "destroy"
    how = "was removed" if removed else _how(event.exit_code)
    if stopped(event.attempt_id, event.container, removed=removed, how=how, at=event.at):
        return
    if removed:
        # A kept sandbox's container removed outside Boltz (or one its director had just
        # stopped to keep, while `docker rm -f` removed it).
        record_gone(event.attempt_id, kept_only=True, container=event.container)


def _out_of_memory(event: runtime.ContainerEvent) -> None:
    """The kernel killed a process of a live sandbox for want of memory: its client and
    reviewers read it on the timeline (a pipeline attempt's director says it itself)."""
    if Attempt.objects.filter(pk=event.attempt_id, container_id=event.container, **HELD).exists():
        Timeline(event.attempt_id).add(
            EventKind.ERROR,
            actor="agent",
            message="out of memory: the kernel killed a process in the sandbox (its memory "
            "limit was reached)",
        )


def sweep() -> int:
    """Live sandboxes of this host whose container is not running (events missed while the
    listener was not connected): each judged as its event would have been. Returns how many
    were marked."""
    live = list(
        Attempt.objects.filter(host=settings.BOLTZ_HOST, sandbox_state=SandboxState.LIVE, **HELD)
        .exclude(container_id="")
        .values_list("pk", "container_id")
    )
    if not live:
        return 0
    states = {c["id"]: c["status"] for c in runtime.list_sandboxes()}
    marked = 0
    for attempt_id, container in live:
        state = states.get(container)
        if state != "running":
            gone = state is None
            how = "was removed" if gone else f"is {state}"
            marked += stopped(attempt_id, container, removed=gone, how=how)
    return marked


def watch(stop: threading.Event) -> None:
    """Follow Docker's events until `stop` is set, connecting again whenever the daemon goes
    away; after each reconnection, what was missed meanwhile is swept up."""
    connected_before, said = False, ""
    while not stop.is_set():
        events = None
        try:
            events = runtime.ContainerEvents()
            sweep()
            if connected_before:  # kept sandboxes removed, check containers left meanwhile
                queueing.enqueue_reap(settings.BOLTZ_HOST)
                log.warning("Docker events of host %s followed again", settings.BOLTZ_HOST)
            connected_before, said = True, ""
            for event in events:
                if stop.is_set():
                    break
                try:
                    handle(event)
                except Exception:  # noqa: BLE001 - one event's failure never stops the listener
                    log.exception("Docker event %s not handled", event)
        except InfrastructureError as exc:
            if exc.reason != said:  # once per outage, not once a second
                log.warning("Docker events of host %s: %s", settings.BOLTZ_HOST, exc.reason)
                said = exc.reason
        except Exception:  # noqa: BLE001 - the listener must never stop (the database away)
            log.exception("Docker events listener of host %s failed", settings.BOLTZ_HOST)
        finally:
            if events is not None:
                events.close()
            connection.close()
        stop.wait(RECONNECT_SECONDS)


def end_out_of_reach(since: float) -> int:
    """This host's Docker has not answered since `since` (seconds since the epoch): its live
    sandboxes are marked stopped (every container stops with its daemon), for their holders to
    end them as infrastructure errors. Returns how many were marked now (one with an operation
    running is judged when it ends, or at the next call)."""
    live = Attempt.objects.filter(
        host=settings.BOLTZ_HOST, sandbox_state=SandboxState.LIVE, **HELD
    ).exclude(container_id="")
    when = datetime.datetime.fromtimestamp(since, tz=datetime.UTC)
    how = (
        f"is out of reach: the Docker daemon of host {settings.BOLTZ_HOST} has not answered "
        f"since {when:%H:%M:%S} UTC"
    )
    return sum(
        stopped(attempt_id, container, removed=False, how=how)
        for attempt_id, container in live.values_list("pk", "container_id")
    )


class Reach:
    """Whether this host's Docker answers, as `watch_reach` finds it, and what follows: past
    AWAY_SECONDS without an answer, the live sandboxes end and `take_attempts(False)` is called
    (again until it returns True); when it answers again, `take_attempts(True)`."""

    def __init__(self, take_attempts: Callable[[bool], bool]):
        self.take_attempts = take_attempts
        self.away_since: float | None = None  # when it first did not answer (epoch seconds)
        self.taking = True  # what the attempts worker was last asked to do
        self.told = True  # ... and whether it said it did

    def answered(self) -> None:
        if self.away_since is not None:
            log.warning("the Docker daemon of host %s answers again", settings.BOLTZ_HOST)
        self.away_since = None
        self._ask(taking=True)

    def silent(self, now: float) -> None:
        if self.away_since is None:
            self.away_since = now
        if now - self.away_since < AWAY_SECONDS:
            return
        if self.taking:
            log.warning(
                "the Docker daemon of host %s has not answered for %.0fs: its live sandboxes "
                "end and it takes no new attempts until it answers",
                settings.BOLTZ_HOST,
                now - self.away_since,
            )
        self._ask(taking=False)
        end_out_of_reach(self.away_since)

    def _ask(self, *, taking: bool) -> None:
        if self.taking != taking:
            self.taking, self.told = taking, False
        if not self.told:
            self.told = self.take_attempts(taking)


def watch_reach(stop: threading.Event, reach: Reach) -> None:
    """Ask this host's Docker every REACH_SECONDS whether it answers, until `stop` is set."""
    while not stop.is_set():
        try:
            try:
                runtime.ping()
            except InfrastructureError:
                reach.silent(time.time())
            else:
                reach.answered()
        except Exception:  # noqa: BLE001 - the watch must never stop (the database away)
            log.exception("watching the Docker daemon of host %s failed", settings.BOLTZ_HOST)
        finally:
            connection.close()
        stop.wait(REACH_SECONDS)


def start(take_attempts: Callable[[bool], bool] | None = None) -> threading.Event:
    """The listener, in a thread of this process, and the daemon's watch in another, which
    calls `take_attempts` as the daemon goes away and comes back; set the returned event to
    stop both."""
    stop = threading.Event()
    threading.Thread(target=watch, args=(stop,), name="boltz-docker-events", daemon=True).start()
    reach = Reach(take_attempts or (lambda taking: True))
    threading.Thread(
        target=watch_reach, args=(stop, reach), name="boltz-docker-reach", daemon=True
    ).start()
    return stop
