"""Is this Boltz able to work? The checks behind `/healthz`, for load balancers and monitors.

Three checks, each answered within seconds whatever is down: the database answers a query,
Redis (Celery's broker and the operation calls' channel) answers within BOLTZ_REDIS_TIMEOUT,
and at least one worker host has been heard from within BOLTZ_LOST_AFTER (each host's
operations worker writes its `WorkerHost.last_seen` every two seconds). What a failing check
says names the kind of failure, never an address, a user name or a password: the answer is
public.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from attempts.dispatch import queue
from attempts.dispatch.errors import WorkerUnreachable
from attempts.dispatch.hosts import heard_hosts
from attempts.models import WorkerHost

log = logging.getLogger(__name__)


def health() -> dict:
    """{"status": "ok" or "failing", "checks": {name: {"ok", "detail", ...}}}."""
    database = _database()
    checks = {
        "database": database,
        "broker": _broker(),
        "workers": _workers() if database["ok"] else _unknown("the database did not answer"),
    }
    ok = all(check["ok"] for check in checks.values())
    return {"status": "ok" if ok else "failing", "checks": checks}


def _unknown(why: str) -> dict:
    return {"ok": False, "detail": f"unknown: {why}"}


def _database() -> dict:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the database's
        log.warning("health: the database did not answer: %s", exc)
        # Its message may name the server and the user: only the kind of failure is said.
        return {"ok": False, "detail": f"the database did not answer ({type(exc).__name__})"}
    return {"ok": True, "detail": "the database answered"}


def _broker() -> dict:
    try:
        queue.require_queue()
    except WorkerUnreachable as exc:
        return {"ok": False, "detail": exc.detail}
    return {"ok": True, "detail": "Redis answered"}


def _workers() -> dict:
    try:
        within = settings.BOLTZ_LOST_AFTER
        heard = heard_hosts().count()
        last = None if heard else WorkerHost.objects.aggregate(last=Max("last_seen"))["last"]
    except Exception as exc:  # noqa: BLE001 - the database went away between two checks
        log.warning("health: the worker hosts could not be read: %s", exc)
        return _unknown(f"the worker hosts could not be read ({type(exc).__name__})")
    if heard:
        return {
            "ok": True,
            "detail": f"{heard} worker host(s) heard from within {within:g}s",
            "hosts": heard,
        }
    if last is None:
        why = "no worker host has ever reported: start one (manage.py run_worker)"
    else:
        ago = (timezone.now() - last).total_seconds()
        why = (
            f"no worker host heard from within {within:g}s "
            f"(the last heartbeat was {ago:.0f}s ago): no worker would take an attempt"
        )
    return {"ok": False, "detail": why, "hosts": 0}
