"""The hosts page's numbers: each Docker host a worker reported (attempts/dispatch/hosts.py),
with its capacity, live sandboxes, the pool environments among them, the messages waiting for
it in Redis, its last heartbeat and its Docker's version. Read from the database and Redis only:
the web process never asks Docker."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from attempts.dispatch import calls, queue
from attempts.dispatch.errors import WorkerUnreachable
from attempts.dispatch.hosts import quiet_since
from attempts.models import ACTIVE_STATUSES, Attempt, SandboxState, Status, WorkerHost


@dataclass
class HostRow:
    name: str
    capacity: int | None  # None: a host holding sandboxes whose worker never reported
    last_seen: datetime | None
    docker_version: str
    lost: bool
    live: int = 0  # sandboxes live on it (pipeline attempts, API sandboxes, pool environments)
    pool_envs: int = 0  # of which pool environments, held open between steps
    active: int = 0  # attempts it is running (starting, running, checking)
    own_waiting: int | None = None  # messages in its own queue (None: Redis did not answer)
    calls_waiting: int | None = None  # API operation calls waiting for one of its threads


@dataclass
class Overview:
    hosts: list[HostRow]
    lost_after: float
    queued: int  # attempts queued in the database, waiting for a host with room
    shared: dict[str, int | None] = field(default_factory=dict)  # shared queue -> waiting
    redis_error: str = ""  # why the queue depths are unknown


def host_overview(*, now: datetime | None = None) -> Overview:
    now = now or timezone.now()
    lost_after = settings.BOLTZ_LOST_AFTER
    quiet = quiet_since(now)
    rows = {
        h.name: HostRow(h.name, h.capacity, h.last_seen, h.docker_version, h.last_seen < quiet)
        for h in WorkerHost.objects.all()
    }
    counts = (
        Attempt.objects.exclude(host="")
        .filter(Q(sandbox_state=SandboxState.LIVE) | Q(status__in=ACTIVE_STATUSES))
        .values("host")
        .annotate(
            live=Count("pk", filter=Q(sandbox_state=SandboxState.LIVE)),
            pool_envs=Count("pk", filter=Q(sandbox_state=SandboxState.LIVE, pool__isnull=False)),
            active=Count("pk", filter=Q(status__in=ACTIVE_STATUSES)),
        )
        .order_by("host")
    )
    for count in counts:
        row = rows.get(count["host"])
        if row is None:  # its worker never reported (or its row was removed): still shown
            row = rows[count["host"]] = HostRow(count["host"], None, None, "", True)
        row.live, row.pool_envs, row.active = count["live"], count["pool_envs"], count["active"]
    queued = Attempt.objects.filter(status=Status.QUEUED)
    shared_names = sorted(
        {settings.BOLTZ_QUEUE}
        | {q for q in queued.exclude(queue="").values_list("queue", flat=True).distinct()}
    )
    overview = Overview(
        hosts=sorted(rows.values(), key=lambda r: r.name),
        lost_after=lost_after,
        queued=queued.count(),
        shared=dict.fromkeys(shared_names),
    )
    _read_queue_depths(overview)
    return overview


def _read_queue_depths(overview: Overview) -> None:
    own = {row.name: queue.host_queue(row.name) for row in overview.hosts}
    opcalls = {row.name: calls.requests_key(row.name) for row in overview.hosts}
    try:
        waiting = queue.waiting_counts([*overview.shared, *own.values(), *opcalls.values()])
    except WorkerUnreachable as exc:
        overview.redis_error = exc.detail
        return
    overview.shared = {name: waiting[name] for name in overview.shared}
    for row in overview.hosts:
        row.own_waiting = waiting[own[row.name]]
        row.calls_waiting = waiting[opcalls[row.name]]


@dataclass
class HostLoad:
    """What a host runs now (for draining it: manage.py drain_host)."""

    active: int  # attempts starting, running or checking
    live: int  # live sandboxes: API sandboxes and pool environments included

    @property
    def idle(self) -> bool:
        return not (self.active or self.live)

    def __str__(self) -> str:
        return f"{self.active} attempt(s) running and {self.live} live sandbox(es)"


def host_load(host: str) -> HostLoad:
    on_host = Attempt.objects.filter(host=host)
    return HostLoad(
        active=on_host.filter(status__in=ACTIVE_STATUSES).count(),
        live=on_host.filter(sandbox_state=SandboxState.LIVE).count(),
    )
