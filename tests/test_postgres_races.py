"""Several processes racing on one PostgreSQL database, each calling the service functions a
worker or the web process calls (tests/racers.py), started together: claims of queued attempts,
attempt numbers of one task, a host's capacity, concurrent steps of one pool.

SQLite takes one writer at a time, so these races cannot happen there: the module is marked
`postgres`, and a run on SQLite deselects it and says so at the end (tests/conftest.py); `make
test-postgres` runs it with the rest of the suite on PostgreSQL. On a PostgreSQL run it never
skips: with CI=true a database that is not PostgreSQL is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest
from django.conf import settings
from django.db import connection

from attempts.models import Attempt, EventKind, Status, WorkerHost
from tests.conftest import (
    ROOT,
    _worker_database_env,
    new_task,
    require,
    wait_finished,
    wait_until,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),  # committed: the racers see the rows
    pytest.mark.timeout(240),
]

RACERS = 4


@pytest.fixture(autouse=True)
def _postgresql():
    require(connection.vendor == "postgresql", "these races need PostgreSQL (DATABASE_URL)")


def race(part: str, args: list[dict], timeout: float = 180) -> list:
    """Run one racer per item of `args` (tests/racers.py), each in its own process on the test
    database; once all are ready, start them together. What each returned, in order."""
    env = {**os.environ, **_worker_database_env()}
    env.setdefault("DJANGO_SETTINGS_MODULE", "boltz_web.settings")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.racers", part, json.dumps(a)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in args
    ]
    try:
        for proc in procs:  # every racer is set up and connected
            ready = proc.stdout.readline().strip()
            if ready != "ready":
                pytest.fail(f"a racer did not start: {ready}\n{proc.stderr.read()[-3000:]}")
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        answers = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                pytest.fail(f"a racer failed ({proc.returncode}):\n{err[-4000:]}")
            answers.append(json.loads(out.strip().splitlines()[-1]))
        return answers
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_each_queued_attempt_is_claimed_by_exactly_one_worker():
    task = new_task("claims")
    ids = [Attempt.objects.create(task=task, number=n, agent="noop").pk for n in range(1, 61)]
    hosts = [f"host-{k}" for k in range(RACERS)]
    got = race("claim", [{"ids": ids, "host": h} for h in hosts])
    claimed = [pk for mine in got for pk in mine]
    assert sorted(claimed) == sorted(ids), "an attempt claimed twice, or never"
    rows = dict(Attempt.objects.filter(pk__in=ids).values_list("pk", "host"))
    for host, mine in zip(hosts, got, strict=True):
        assert all(rows[pk] == host for pk in mine)  # the claimer is the one recorded
    assert not Attempt.objects.filter(pk__in=ids, status=Status.QUEUED).exists()


def test_attempt_numbers_of_one_task_have_no_duplicates_and_no_gaps():
    task = new_task("numbers")
    got = race("number", [{"task": task.pk, "count": 15}] * RACERS)
    everyone = [n for mine in got for n in mine]
    assert sorted(everyone) == list(range(1, 15 * RACERS + 1))
    assert all(mine == sorted(mine) for mine in got)  # each creator's own come in order
    numbers = task.attempts.values_list("number", flat=True)
    assert sorted(numbers) == list(range(1, 15 * RACERS + 1))
    task.refresh_from_db()
    assert task.next_attempt_number == 15 * RACERS + 1


@pytest.mark.docker
@pytest.mark.worker
def test_sandboxes_asked_for_at_once_never_outnumber_the_hosts_capacity(worker, django_user_model):
    """Five clients ask at once for a sandbox of a host of capacity 2: each gets one in turn
    (the rest wait for room), and at no moment did more than two live."""
    user = django_user_model.objects.create_user("racer")
    # The worker's heartbeat lists its images again (an earlier test's end emptied the table).
    wait_until(
        lambda: (
            settings.BOLTZ_DEFAULT_IMAGE
            in (
                WorkerHost.objects.filter(name=settings.BOLTZ_HOST)
                .values_list("images", flat=True)
                .first()
                or []
            )
        ),
        60,
        "the worker's heartbeat to list the image",
    )
    ask = {"user": user.pk, "image": settings.BOLTZ_DEFAULT_IMAGE, "ttl": 3, "wait": 200}
    got = race("sandbox", [ask] * 5, timeout=230)
    assert all("attempt" in g for g in got), got
    done = wait_finished([Attempt(pk=g["attempt"]) for g in got], timeout=120)
    spans: list[tuple[datetime, int]] = []
    for attempt in done:
        assert attempt.host == settings.BOLTZ_HOST and attempt.started_at and attempt.finished_at
        spans += [(attempt.started_at, 1), (attempt.finished_at, -1)]
    live = most = 0
    for _, change in sorted(spans, key=lambda s: (s[0], s[1])):  # an end before a start
        live += change
        most = max(most, live)
    assert most == 2  # all the room was used, never more


@pytest.mark.docker
@pytest.mark.worker
def test_concurrent_steps_of_one_pool_give_each_environment_one_action_per_step(
    worker, load_example, django_user_model
):
    """Four trainers step one pool of two environments at once. Each step gives every
    environment exactly one action: its step numbers have no duplicates and no gaps, every
    result list is in input order, and each environment's timeline has its steps in order.
    One trainer runs a command in environment 0 and writes a file in 1, the next the other
    way round: their steps take the two environments' rows in opposite orders."""
    from attempts.models import Pool
    from attempts.services.pools import pool_close, pool_create, pool_reset

    load_example("fix-add")
    user = django_user_model.objects.create_user("trainer")
    pool = pool_create(user=user, task="fix-add", size=2, max_steps=1000)
    assert all(not r["info"].get("masked") for r in pool_reset(pool, None, wait=120))

    def actions(k: int, n: int) -> list[dict]:
        run, write = {"run": f"echo {k}-{n}"}, {"write": {f"r{k}-{n}.txt": f"{k}-{n}"}}
        return [run, write] if k % 2 else [write, run]

    rounds = 6
    got = race(
        "step",
        [{"pool": pool.pk, "steps": [actions(k, n) for n in range(rounds)]} for k in range(RACERS)],
    )
    first_masked = [
        r["info"] for mine in got for results in mine for r in results if r["info"].get("masked")
    ]
    assert not first_masked, first_masked[:1]
    per_env: dict[int, list[int]] = {0: [], 1: []}
    for mine in got:
        for results in mine:
            assert [r["index"] for r in results] == [0, 1]  # input order
            assert not any(r["info"].get("masked") for r in results), results
            for r in results:
                per_env[r["index"]].append(r["step"])
    for index, steps in per_env.items():
        assert sorted(steps) == list(range(1, RACERS * rounds + 1)), (index, steps)
    for r in got[0][0]:
        attempt = Attempt.objects.get(pk=r["info"]["episode"])
        marks = [
            e.data["content"]
            for e in attempt.events.filter(kind=EventKind.MESSAGE).order_by("seq")
            if e.data.get("role") == "step"
        ]
        assert [int(m.split(":")[0].removeprefix("step ")) for m in marks] == list(
            range(1, RACERS * rounds + 1)
        )
    pool_close(Pool.objects.get(pk=pool.pk))


def test_text_with_nul_characters_is_stored_not_refused():
    """PostgreSQL's text and jsonb hold no U+0000: an agent's output or message with NUL bytes
    is stored with U+FFFD in their place (boltz_web/postgresql), as bytes that are not UTF-8
    are, instead of failing the write. A backslash followed by "u0000" is text, kept."""
    from attempts.core.timeline import Timeline

    task = new_task("nul", title="a\x00b")
    attempt = Attempt.objects.create(task=task, number=1, agent="x\x00")
    event = Timeline(attempt.pk).add(
        EventKind.MESSAGE, actor="agent", content="out\x00put", literal="\\u0000", **{"k\x00": 1}
    )
    task.refresh_from_db()
    attempt.refresh_from_db()
    event.refresh_from_db()
    assert (task.title, attempt.agent) == ("a\ufffdb", "x\ufffd")
    assert event.data["content"] == "out\ufffdput" and event.data["literal"] == "\\u0000"
    assert event.data["k\ufffd"] == 1
