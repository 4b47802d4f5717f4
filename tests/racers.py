"""One racer of tests/test_postgres_races.py: a process of its own, on the test database, that
calls the service functions a worker or the web process calls. It says `ready` once Django is
set up, waits for `go` on its standard input (the test sends it to every racer at once, so they
race), does its part and prints what it got as one JSON line.

    python -m tests.racers claim '{"ids": [...], "host": "h1"}'
    python -m tests.racers number '{"task": 1, "count": 10}'
    python -m tests.racers sandbox '{"user": 1, "image": "...", "ttl": 3, "wait": 200}'
    python -m tests.racers step '{"pool": 1, "steps": [[action, ...], ...]}'
"""

from __future__ import annotations

import json
import random
import sys


def claim(ids: list[int], host: str) -> list[int]:
    """Claim every attempt it can, in an order of its own: the ones it got."""
    from attempts.run.director import claim

    order = list(ids)
    random.shuffle(order)
    return [pk for pk in order if claim(pk, host=host)]


def number(task: int, count: int) -> list[int]:
    """`count` attempts of the task, one after another: their numbers."""
    from attempts.models import Task
    from attempts.services.attempts import numbered_attempt

    found = Task.objects.get(pk=task)
    return [numbered_attempt(found, agent="racer").number for _ in range(count)]


def sandbox(user: int, image: str, ttl: float, wait: float) -> dict:
    """One API sandbox, which closes itself after `ttl` seconds: its attempt, or why not."""
    from django.contrib.auth import get_user_model

    from attempts.dispatch.errors import Refusal
    from attempts.services.sandboxes import sandbox_create

    owner = get_user_model().objects.get(pk=user)
    try:
        made = sandbox_create(user=owner, image=image, ttl=ttl, idle_timeout=ttl, wait=wait)
    except Refusal as refusal:
        return {"refused": refusal.detail}
    return {"attempt": made.pk}


def step(pool: int, steps: list[list]) -> list[list[dict]]:
    """The pool's steps, one after another: each step's results."""
    from attempts.models import Pool
    from attempts.services.pools import pool_step

    found = Pool.objects.get(pk=pool)
    return [
        [{"index": r["index"], "step": r["step"], "info": r["info"]} for r in pool_step(found, a)]
        for a in steps
    ]


RACES = {"claim": claim, "number": number, "sandbox": sandbox, "step": step}


def main() -> None:
    import django

    race, args = RACES[sys.argv[1]], json.loads(sys.argv[2])
    django.setup()
    from django.db import connection

    connection.ensure_connection()  # connected before the start: the race is the calls
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    print(json.dumps(race(**args), default=str), flush=True)


if __name__ == "__main__":
    main()
