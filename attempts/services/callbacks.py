"""Callbacks: when an attempt that asked for one ends, its outcome goes as JSON to its
callback URL, signed with an HMAC whose key only the token's holder (and Boltz) knows:
sha256 of the token, in hex. Failed deliveries are retried with backoff; each one is on the
attempt's timeline. Only public internet addresses, or those the operator allows, receive
callbacks (callback_targets.py).

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
from attempts.dispatch.errors import InvalidRequest
from attempts.models import Attempt, EventKind
from attempts.services.callback_targets import Resolver, Target, callback_target, resolve_host

TRIES = 5
TIMEOUT = 10.0
NO_ANSWER = f"no HTTP answer (no connection, or no answer within {TIMEOUT:g} s)"


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


def deliver(attempt_id: int, try_number: int, *, resolve: Resolver = resolve_host) -> bool:
    """One delivery of an ended attempt's outcome. True when it was taken (2xx), or when
    there is nothing to send; False to try again. The URL is checked again first (its name
    may resolve elsewhere by now: callback_targets.py) and the POST goes to the address that
    check found."""
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
    try:
        target = callback_target(attempt.callback_url, resolve=resolve)
    except InvalidRequest as refused:
        ok, result = False, f"not sent: {refused.message}"
    else:
        ok, result = post_to(target, body, headers)
    last = try_number >= TRIES
    Timeline(attempt.pk).add(
        EventKind.LIFECYCLE,
        action="callback",
        url=attempt.callback_url[:1000],
        delivery=try_number,
        delivered=ok,
        message=f"callback {try_number} of at most {TRIES} to {attempt.callback_url[:200]}: "
        f"{result}" + ("" if ok or not last else "; giving up"),
    )
    return ok or last


def post_to(target: Target, body: bytes, headers: dict[str, str]) -> tuple[bool, str]:
    """POST `body` to the checked address of `target`: whether a 2xx answered, and what to
    record. Redirects are not followed and no proxy is used (it would resolve the name
    again). Every failure short of an HTTP answer is recorded the same way, so the timeline
    never tells a closed port from a silent one."""
    try:
        with httpx.Client(trust_env=False, follow_redirects=False, timeout=TIMEOUT) as http:
            request = http.build_request(
                "POST",
                target.pinned_url,
                content=body,
                headers={**headers, "Host": target.netloc},
                extensions=target.extensions,
            )
            answer = http.send(request, stream=True)
            status = answer.status_code
            answer.close()  # its body is never read
    except (httpx.HTTPError, httpx.InvalidURL):
        return False, NO_ANSWER
    if 300 <= status < 400:
        return False, f"answered {status}; redirects are not followed"
    return 200 <= status < 300, f"answered {status}"


def on_attempt_ended(sender, *, attempt_id: int, **kwargs) -> None:
    """Subscribed to "an attempt ended" (core/ended.py): an attempt that asked for a callback
    has its first delivery sent once the end is committed."""
    if Attempt.objects.filter(pk=attempt_id).exclude(callback_url="").exists():
        transaction.on_commit(lambda: queueing.enqueue_callback(attempt_id))
