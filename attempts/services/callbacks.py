"""Callbacks: when an attempt that asked for one ends, its outcome goes as JSON to its
callback URL, signed with an HMAC whose key only the token's holder (and Boltz) knows:
sha256 of the token, in hex. Failed deliveries are retried with backoff; each one is on the
attempt's timeline.

    X-Boltz-Signature: sha256=<hex HMAC-SHA256 of the body, key = sha256(token).hexdigest()>
"""

from __future__ import annotations

import hashlib
import hmac
import json

import httpx
from django.db import transaction
from django.urls import reverse

from attempts.core.timeline import Timeline
from attempts.dispatch import queue as queueing
from attempts.models import Attempt, EventKind

TRIES = 5
TIMEOUT = 10.0


def attempt_payload(attempt: Attempt, *, base_url: str = "") -> dict:
    """An attempt as the API and its callbacks show it."""
    last = attempt.checks.order_by("-pk").first()
    tests = list(last.tests.all()) if last else []
    return {
        "id": attempt.pk,
        "task": attempt.task.slug,
        "number": attempt.number,
        "name": attempt.name,
        "agent": attempt.agent,
        "status": attempt.status,
        "outcome": attempt.outcome,
        "score": attempt.score,
        "failure_reason": attempt.failure_reason,
        "tests": [{"name": t.name, "outcome": t.outcome, "message": t.message} for t in tests],
        "url": base_url + reverse("attempts:attempt", args=[attempt.pk]),
    }


def signature(body: bytes, key: str) -> str:
    return "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def deliver(attempt_id: int, try_number: int) -> bool:
    """One delivery of an ended attempt's outcome. True when it was taken (2xx), or when
    there is nothing to send; False to try again."""
    attempt = Attempt.objects.select_related("task").filter(pk=attempt_id).first()
    if attempt is None or not attempt.callback_url:
        return True
    body = json.dumps(attempt_payload(attempt)).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Boltz",
        "X-Boltz-Attempt": str(attempt.pk),
        "X-Boltz-Delivery": str(try_number),
        "X-Boltz-Signature": signature(body, attempt.callback_key),
    }
    timeline = Timeline(attempt.pk)
    try:
        answer = httpx.post(attempt.callback_url, content=body, headers=headers, timeout=TIMEOUT)
    except httpx.HTTPError as exc:
        result, ok = f"failed: {exc.__class__.__name__}: {exc}"[:500], False
    else:
        ok = 200 <= answer.status_code < 300
        result = f"answered {answer.status_code}"
    last = try_number >= TRIES
    timeline.add(
        EventKind.LIFECYCLE,
        action="callback",
        url=attempt.callback_url[:1000],
        delivery=try_number,
        delivered=ok,
        message=f"callback {try_number} of at most {TRIES} to {attempt.callback_url[:200]}: "
        f"{result}" + ("" if ok or not last else "; giving up"),
    )
    return ok or last


def on_attempt_ended(sender, *, attempt_id: int, **kwargs) -> None:
    """Subscribed to "an attempt ended" (core/ended.py): an attempt that asked for a callback
    has its first delivery sent once the end is committed."""
    if Attempt.objects.filter(pk=attempt_id).exclude(callback_url="").exists():
        transaction.on_commit(lambda: queueing.enqueue_callback(attempt_id))
