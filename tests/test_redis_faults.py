"""Redis down, on the real services: a served web process and a worker on a redis-server of this
test's own, stopped (it refuses connections, and loses what it held, as a restart without
persistence does), then replaced by a listener that accepts connections and never answers, then
started again.

While Redis is down, every route of the API (the OpenAPI document's) answers within seconds:
a JSON 503 with Retry-After where it needs Redis, its usual answer where it does not, never a
500 and never a hang; the dashboard's start button answers a 503 page; nothing is created. Once
Redis is back, the attempts it had lost run to completion: queued = finished + marked, and no
Boltz container is left without an attempt. docs/API.md ("Errors") says what a client sees.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import uuid

import httpx
import pytest
from django.conf import settings

from attempts.dispatch import queue as queueing
from attempts.dispatch.errors import WorkerUnreachable
from attempts.models import DONE_STATUSES, Attempt, Outcome, Pool, SandboxState, Status
from tests.conftest import require, run_web, run_worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

SLOW = 6.0  # no answer may take longer while Redis is down: one BOLTZ_REDIS_TIMEOUT (3 s), and room
LOST = 4  # attempts queued behind a full host when Redis loses its data


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnRedis:
    """A redis-server of the test's own on a spare port, without persistence; or, in its place,
    a listener on that port that accepts connections and never answers."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.server: subprocess.Popen | None = None
        self.listener: socket.socket | None = None
        self.held: list[socket.socket] = []

    def start(self) -> None:
        binary = shutil.which("redis-server")
        require(binary is not None, "redis-server is not installed (apt-get install redis-server)")
        self.server = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1)
        wait_until(lambda: self._answers(client), timeout=20, what="redis-server to start")

    @staticmethod
    def _answers(client) -> bool:
        try:
            return client.ping()
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=20)
            self.server = None

    def hang(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(128)

        def accept_and_hold(listener: socket.socket) -> None:
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return  # closed by unhang
                self.held.append(connection)

        threading.Thread(target=accept_and_hold, args=(self.listener,), daemon=True).start()

    def unhang(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        for connection in self.held:
            connection.close()
        self.held.clear()

    def close(self) -> None:
        self.unhang()
        self.stop()


def tar_of(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# Each route of the API, what it is sent while Redis is down, and what it must answer: 503 where
# it needs Redis (a send to the workers' queue, or an operation on a live sandbox), else its own
# answer. A route missing here fails the test: say what it needs.
ROUTES = {
    ("GET", "/api/tasks"): (None, {200}),
    ("POST", "/api/tasks/{slug}/attempts"): ({"agent": "noop", "n": 2}, {503}),
    ("POST", "/api/attempts/wait"): ({"ids": "{queued}", "timeout": 1}, {504}),
    ("GET", "/api/attempts/{attempt_id}"): (None, {200}),
    ("GET", "/api/attempts/{attempt_id}/outputs/{name}"): (None, {404}),  # it ran no command
    ("POST", "/api/sandboxes"): ({"task": "{slug}", "wait": 5}, {503}),
    ("GET", "/api/sandboxes"): (None, {200}),
    ("GET", "/api/sandboxes/{sandbox_id}"): (None, {200}),
    ("POST", "/api/sandboxes/{sandbox_id}/exec"): ({"command": "true"}, {503}),
    ("GET", "/api/sandboxes/{sandbox_id}/files"): ({"path": "calc.py"}, {503}),
    ("PUT", "/api/sandboxes/{sandbox_id}/files"): ({"path": "new.txt"}, {503}),
    ("DELETE", "/api/sandboxes/{sandbox_id}/files"): ({"path": "calc.py"}, {503}),
    ("GET", "/api/sandboxes/{sandbox_id}/files/list"): (None, {503}),
    ("GET", "/api/sandboxes/{sandbox_id}/archive"): (None, {503}),
    ("PUT", "/api/sandboxes/{sandbox_id}/archive"): (None, {503}),
    ("POST", "/api/sandboxes/{sandbox_id}/check"): (None, {503}),
    ("GET", "/api/sandboxes/{sandbox_id}/diff"): (None, {503}),
    ("POST", "/api/sandboxes/{sandbox_id}/messages"): ({"content": "hello"}, {201}),
    ("POST", "/api/pools"): ({"task": "{slug}", "size": 1}, {201}),
    ("GET", "/api/pools"): (None, {200}),
    ("GET", "/api/pools/{pool_id}"): (None, {200}),
    ("POST", "/api/pools/{pool_id}/reset"): ({"wait": 5}, {503}),
    ("POST", "/api/pools/{pool_id}/step"): ({"actions": [{"run": "true"}]}, {503}),
    ("POST", "/api/pools/{pool_id}/envs/{index}/step"): ({"action": {"run": "true"}}, {503}),
    ("POST", "/api/evaluations"): ({"predictions": "[]", "dataset": "[]"}, {400}),
    ("GET", "/api/evaluations/{evaluation_id}"): (None, {404}),
    # Last: they end the sandbox and the pool (no Redis needed; the container is removed by its
    # host's reaper once Redis is back).
    ("POST", "/api/pools/{pool_id}/close"): (None, {200}),
    ("POST", "/api/sandboxes/{sandbox_id}/close"): ({"check": False}, {200}),
    ("DELETE", "/api/sandboxes/{sandbox_id}"): (None, {204}),
}
NEEDS_REDIS = {route for route, (_, statuses) in ROUTES.items() if statuses == {503}}


def try_every_route(client: httpx.Client, ids: dict, midway) -> list[dict]:
    """Every route of the OpenAPI document, in ROUTES' order: what each answered, and when.
    `midway()` is done after the sandboxes' operations: their calls wait out a hanging Redis
    each time, so what follows them finds sends no longer failing at once (DOWN_SECONDS)."""
    document = client.get("/api/openapi.json").json()
    listed = {(m.upper(), path) for path, ops in document["paths"].items() for m in ops}
    assert listed == set(ROUTES), f"routes not classified here: {listed ^ set(ROUTES)}"
    answers = []
    for (method, path), (given, statuses) in ROUTES.items():
        if (method, path) == ("POST", "/api/pools"):
            midway()
        url = path.format(**ids)
        params, body, content = {}, None, None
        if isinstance(given, dict) and "path" in given:
            params = given
        elif given is not None:
            body = {
                k: (ids[v[1:-1]] if v in ("{queued}", "{slug}") else v) for k, v in given.items()
            }
        if method == "PUT":
            content = tar_of("a.txt", b"x") if path.endswith("archive") else b"x"
        began = time.monotonic()
        response = client.request(method, url, params=params, json=body, content=content)
        took = time.monotonic() - began
        answers.append(
            {
                "route": f"{method} {path}",
                "status": response.status_code,
                "seconds": round(took, 2),
                "type": response.headers.get("content-type", ""),
                "retry_after": response.headers.get("Retry-After"),
                "body": response.text[:300],
                "expected": statuses,
                "needs_redis": (method, path) in NEEDS_REDIS,
            }
        )
    return answers


def check_answers(answers: list[dict], phase: str) -> None:
    wrong = [a for a in answers if a["status"] not in a["expected"]]
    assert not wrong, f"{phase}: {json.dumps(wrong, indent=1, default=list)}"
    for a in answers:
        # A close waits for its sandbox's changes to be recorded: Docker's time, not Redis's.
        if not a["route"].endswith("/close"):
            assert a["seconds"] < SLOW, f"{phase}: {a['route']} took {a['seconds']}s"
        if a["body"]:
            assert a["type"].startswith("application/json"), f"{phase}: {a}"
        if a["status"] == 503:
            error = json.loads(a["body"])
            assert error["code"] == "infrastructure" and "Redis" in error["detail"], a
            assert a["retry_after"] == "5", a


def start_button(url: str, session: str, slug: str) -> tuple[int, str, float]:
    """The dashboard's start button, confirmed, as a signed-in reviewer presses it."""
    with httpx.Client(base_url=url, cookies={"sessionid": session}, timeout=60) as browser:
        form = browser.get(f"/tasks/{slug}/start/")
        assert form.status_code == 200
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        began = time.monotonic()
        pressed = browser.post(
            f"/tasks/{slug}/start/",
            data={
                "csrfmiddlewaretoken": token,
                "agent": "noop",
                "count": "2",
                "confirm": "yes",
            },
            headers={"Referer": f"{url}/tasks/{slug}/start/"},
        )
        return pressed.status_code, pressed.text, time.monotonic() - began


@pytest.mark.timeout(600)
def test_redis_refusing_then_hanging_then_back_loses_nothing(
    django_db_setup, docker_ready, load_example, figure
):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from attempts.api.tokens import token_create
    from attempts.run.docker import runtime

    redis_server = OwnRedis()
    redis_server.start()
    queue, host = f"redisfault-{uuid.uuid4().hex[:8]}", f"redisfault-host-{uuid.uuid4().hex[:4]}"
    env = {"BOLTZ_REDIS_URL": redis_server.url, "BOLTZ_QUEUE": queue}
    task = load_example("fix-add")
    users = get_user_model()
    _row, token = token_create(user=users.objects.create_user("client"))
    reviewer = users.objects.create_superuser("reviewer", "", "pass")
    pages = Client()
    pages.force_login(reviewer)
    session = pages.cookies["sessionid"].value
    figures: dict = {}
    with contextlib.ExitStack() as stack:
        stack.callback(redis_server.close)
        url = stack.enter_context(run_web(env))
        stack.enter_context(run_worker(queue=queue, host=host, capacity=2, env=env))
        api = stack.enter_context(
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        )
        # Redis up: two live sandboxes fill the host; LOST attempts queue behind them.
        sandboxes = []
        for _ in range(2):
            made = api.post("/api/sandboxes", json={"task": task.slug, "wait": 120})
            assert made.status_code == 201, made.text
            sandboxes.append(made.json()["id"])
        started = api.post(f"/api/tasks/{task.slug}/attempts", json={"agent": "noop", "n": LOST})
        assert started.status_code == 201, started.text
        queued = [a["id"] for a in started.json()]
        pool = api.post("/api/pools", json={"task": task.slug, "size": 1}).json()["id"]
        assert Attempt.objects.filter(pk__in=queued, status=Status.QUEUED).count() == LOST
        before = Attempt.objects.count()

        # (a) Redis refuses connections (and has lost what it held).
        redis_server.stop()
        ids = {"slug": task.slug, "queued": queued[:1], "attempt_id": queued[0], "index": 0}
        ids["name"] = "stdout-1.txt"
        ids.update(sandbox_id=sandboxes[0], pool_id=pool, evaluation_id=2**40)
        pressed = []  # the dashboard's start button, pressed midway through the routes

        def press() -> None:
            pressed.append(start_button(url, session, task.slug))

        refused = try_every_route(api, ids, press)
        check_answers(refused, "refused")

        # (b) A Redis that accepts connections and never answers.
        redis_server.hang()
        # The pool made in (a) is still open (a pool is a row: it needs no Redis).
        ids.update(sandbox_id=sandboxes[1], pool_id=Pool.objects.latest("pk").pk)
        hanging = try_every_route(api, ids, press)
        check_answers(hanging, "hanging")
        for status, page, took in pressed:
            assert status == 503 and "The workers cannot be reached" in page, page[:2000]
            assert "Something went wrong" not in page and took < SLOW

        # Nothing was created while Redis was down but the pools asked for (a pool is a row that
        # needs no Redis, and its creator got its id).
        assert Attempt.objects.count() == before
        figures.update(
            routes=len(ROUTES),
            needing_redis=len(NEEDS_REDIS),
            refused_max_seconds=max(a["seconds"] for a in refused),
            hanging_max_seconds=max(a["seconds"] for a in hanging),
            start_button_seconds=[round(took, 2) for _, _, took in pressed],
        )

        # (c) Redis back, empty: what it lost runs to completion.
        redis_server.unhang()
        redis_server.start()
        back = time.monotonic()
        wait_until(
            lambda: (
                set(Attempt.objects.filter(pk__in=queued).values_list("status", flat=True))
                <= set(DONE_STATUSES)
            ),
            timeout=300,
            what="the attempts Redis lost to be sent again and finish",
        )
        ran = time.monotonic() - back
        ours = Attempt.objects.filter(task=task)
        marked = ours.filter(outcome__in=[Outcome.INFRA_ERROR, Outcome.CANCELLED]).count()
        finished = ours.filter(status=Status.FINISHED).exclude(outcome=Outcome.INFRA_ERROR)
        assert not ours.exclude(status__in=DONE_STATUSES).exists()
        assert ours.count() == finished.count() + marked
        # The lost attempts ran (noop on a failing task: the check fails), none was marked.
        lost = Attempt.objects.filter(pk__in=queued)
        assert set(lost.values_list("outcome", flat=True)) == {Outcome.FAILED}, list(
            lost.values_list("pk", "status", "outcome", "failure_reason")
        )
        # No container of this host is left without an attempt whose sandbox is kept.
        wait_until(
            lambda: not strays(runtime, host),
            timeout=120,
            what=f"the containers of deleted sandboxes to be removed: {strays(runtime, host)}",
        )
        figures.update(
            queued=LOST,
            lost=lost.exclude(outcome=Outcome.FAILED).count(),
            finished_seconds_after_redis_back=round(ran, 1),
            close_seconds=[a["seconds"] for a in refused + hanging if "/close" in a["route"]],
            sandbox_timings=list(
                Attempt.objects.filter(pk__in=sandboxes).values_list("pk", "timings")
            ),
        )
    print("redis faults:", json.dumps(figures))
    f = figures
    figure(
        f"{f['routes']} API routes tried with Redis refusing and with Redis hanging: no 500, "
        f"all JSON, {f['needing_redis']} answered 503 + Retry-After; slowest answer "
        f"{f['refused_max_seconds']:.1f} s refusing, {f['hanging_max_seconds']:.1f} s hanging; "
        f"start button: a 503 page in {max(f['start_button_seconds']):.1f} s at most; "
        f"0 attempts created while down; {f['queued']} attempts Redis lost sent again and "
        f"finished {f['finished_seconds_after_redis_back']:.0f} s after it was back, "
        f"{f['lost']} lost; 0 containers of deleted sandboxes left"
    )


def strays(runtime, host: str) -> list[str]:
    """Containers of `host` whose attempt is gone or whose sandbox was deleted."""
    found = []
    for container in runtime.list_sandboxes(all_hosts=True):
        if container["labels"].get(runtime.LABEL_HOST) != host:
            continue
        attempt_id = container["labels"].get(runtime.LABEL_ATTEMPT, "")
        attempt = Attempt.objects.filter(pk=int(attempt_id or 0)).first()
        if (
            attempt is None
            or attempt.sandbox_deleted_at
            or (attempt.sandbox_state == SandboxState.DELETED)
        ):
            found.append(f"{container['name']} (attempt {attempt_id})")
    return found


# --- a send that fails after its attempts were made --------------------------------------------
@pytest.mark.timeout(60)
def test_attempts_whose_send_failed_end_at_once_and_say_why(
    django_db_setup, redis_ready, monkeypatch, figure
):
    """Redis answered the check before they were made, then refused their send: each ends at
    once, "not started", an infrastructure error its creator can see (never queued for
    nobody); and a message that reaches a worker after all does nothing (not queued)."""
    from celery import Celery

    from tests.conftest import new_task

    task = new_task("send-fails")
    made = [
        Attempt.objects.create(task=task, number=n, agent="noop", queue=settings.BOLTZ_QUEUE)
        for n in (1, 2)
    ]
    dead = Celery("dead")
    dead.config_from_object("django.conf:settings", namespace="CELERY")
    dead.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    monkeypatch.setattr(queueing, "app", dead)
    monkeypatch.setattr(queueing, "_down_until", 0.0)
    began = time.monotonic()
    with pytest.raises(WorkerUnreachable) as refused:
        queueing.enqueue_attempts(made)  # outside a transaction: sent (or not) now
    assert time.monotonic() - began < 5
    assert "Redis" in refused.value.detail and "refused" in refused.value.detail
    for attempt in made:
        attempt.refresh_from_db()
        assert (attempt.status, attempt.outcome) == (Status.FINISHED, Outcome.INFRA_ERROR)
        assert attempt.failure_reason.startswith("not started: Boltz's queue to its workers")
    figure(f"2 of 2 attempts whose send failed ended at once ({time.monotonic() - began:.2f} s)")
    # Within a moment, a second send fails at once, without waiting on Redis again.
    began = time.monotonic()
    with pytest.raises(WorkerUnreachable):
        queueing.enqueue_reap("any-host")
    assert time.monotonic() - began < 0.1


# --- what Redis lost is found, what it holds is not sent twice ---------------------------------
@pytest.mark.timeout(60)
def test_only_attempts_whose_message_redis_lost_are_sent_again(
    django_db_setup, redis_ready, figure
):
    from datetime import timedelta

    from django.utils import timezone

    from tests.conftest import new_task

    queue = f"resend-{uuid.uuid4().hex[:8]}"  # no worker consumes it
    task = new_task("resend")
    old = timezone.now() - timedelta(seconds=queueing.LOST_AFTER + 1)
    held, lost, fresh = (
        Attempt.objects.create(task=task, number=n, agent="noop", queue=queue, created_at=when)
        for n, when in ((1, old), (2, old), (3, timezone.now()))
    )
    queueing.enqueue_attempts([held])  # its message waits in the queue
    assert queueing.resend_lost(queue=queue) == [lost.pk]  # sent again; `fresh` may be sending
    assert queueing.resend_lost(queue=queue) == []  # now both are there: nothing twice
    assert queueing._attempts_in_redis(queue) == {held.pk, lost.pk}
    figure("1 lost message of 3 queued attempts sent again, 0 sent twice")
