"""Operations: `/healthz` for load balancers (the database, Redis, a live worker; bounded when
Redis is away) and the hosts page (each host's capacity, live sandboxes, queue depth, last
heartbeat and Docker version), on the real services."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import timedelta

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from attempts.models import Attempt, SandboxState, WorkerHost
from tests.conftest import real, require, run_web, sdk_client, wait_until
from tests.test_redis_faults import SLOW, free_port


def heard_from(host: str) -> bool:
    since = timezone.now() - timedelta(seconds=settings.BOLTZ_LOST_AFTER)
    return WorkerHost.objects.filter(name=host, last_seen__gte=since).exists()


def viewer_client(django_user_model, username: str = "operator") -> Client:
    user = django_user_model.objects.create_user(username)
    user.user_permissions.add(Permission.objects.get(codename="view_attempt"))
    client = Client()
    client.force_login(user)
    return client


def docker_server_version() -> str:
    found = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    require(found.returncode == 0, f"docker version failed: {found.stderr}")
    return found.stdout.strip()


@real
def test_healthz_is_ok_without_signing_in_while_a_worker_beats(worker, web):
    wait_until(lambda: heard_from(settings.BOLTZ_HOST), timeout=60, what="the worker's heartbeat")
    started = time.monotonic()
    answer = httpx.get(web + "/healthz", timeout=30)
    assert answer.status_code == 200, answer.text
    assert time.monotonic() - started < SLOW
    assert answer.headers["content-type"] == "application/json"
    assert "no-cache" in answer.headers["cache-control"]
    body = answer.json()
    assert body["status"] == "ok"
    assert {name: check["ok"] for name, check in body["checks"].items()} == {
        "database": True,
        "broker": True,
        "workers": True,
    }
    assert body["checks"]["workers"]["hosts"] >= 1
    # Public, so it says nothing of where things are or how to reach them.
    for secret in (settings.SECRET_KEY, settings.BOLTZ_REDIS_URL, settings.BOLTZ_HOST):
        assert secret not in answer.text
    # Not one of the API's operations: the OpenAPI document (and schemathesis) never meets it.
    document = httpx.get(web + "/api/openapi.json", timeout=30).json()
    assert not [p for p in document["paths"] if "healthz" in p]


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_healthz_is_503_naming_the_workers_when_no_host_beat_lately(client, redis_ready):
    WorkerHost.objects.all().delete()
    answer = client.get("/healthz")
    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "failing"
    assert body["checks"]["database"]["ok"] and body["checks"]["broker"]["ok"]
    assert not body["checks"]["workers"]["ok"]
    assert "no worker host has ever reported" in body["checks"]["workers"]["detail"]

    WorkerHost.objects.create(name="gone", last_seen=timezone.now() - timedelta(hours=1))
    body = client.get("/healthz").json()
    workers = body["checks"]["workers"]
    assert not workers["ok"] and workers["hosts"] == 0
    assert f"within {settings.BOLTZ_LOST_AFTER:g}s" in workers["detail"]
    assert "last heartbeat was 3600s ago" in workers["detail"]
    assert "gone" not in json.dumps(body)
    assert client.post("/healthz").status_code == 405
    assert client.head("/healthz").status_code == 503


@pytest.mark.django_db
@pytest.mark.timeout(60)
def test_healthz_answers_plain_http_probes_where_everything_else_goes_to_https(
    client, settings, redis_ready
):
    settings.SECURE_SSL_REDIRECT = True  # BOLTZ_HTTPS=1; the exemption is the settings' own
    assert client.get("/tasks/").status_code == 301
    assert client.get("/healthz").status_code in (200, 503)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_with_redis_unreachable_healthz_is_503_naming_the_broker_and_hosts_still_render(
    django_user_model,
):
    """A served web process whose Redis is a closed port: /healthz answers within seconds,
    the broker check saying why (not where), and the hosts page renders, its queue depth said
    to be unknown."""
    WorkerHost.objects.create(
        name="far-host", capacity=3, last_seen=timezone.now(), docker_version="99.0.1"
    )
    port = free_port()
    session = viewer_client(django_user_model).cookies["sessionid"].value
    with run_web({"BOLTZ_REDIS_URL": f"redis://127.0.0.1:{port}/0"}) as url:
        started = time.monotonic()
        answer = httpx.get(url + "/healthz", timeout=30)
        assert time.monotonic() - started < SLOW
        assert answer.status_code == 503, answer.text
        checks = answer.json()["checks"]
        assert checks["database"]["ok"] and checks["workers"]["ok"]
        assert not checks["broker"]["ok"]
        assert "Redis" in checks["broker"]["detail"]
        assert "cannot be reached" in checks["broker"]["detail"]
        assert str(port) not in answer.text

        started = time.monotonic()
        page = httpx.get(url + "/hosts/", cookies={"sessionid": session}, timeout=30)
        assert time.monotonic() - started < SLOW
        assert page.status_code == 200, page.text[-2000:]
        assert "Queue depth unknown" in page.text
        assert "far-host" in page.text and "99.0.1" in page.text
        assert str(port) not in page.text


@real
def test_the_hosts_page_shows_the_workers_host_its_docker_version_and_its_live_sandboxes(
    worker, web, make_task, django_user_model
):
    task = make_task()
    viewer = viewer_client(django_user_model)
    version = docker_server_version()
    wait_until(
        lambda: WorkerHost.objects.filter(
            name=settings.BOLTZ_HOST, docker_version=version
        ).exists(),
        timeout=60,
        what="the worker to record its Docker's version",
    )
    with sdk_client(web, "ops-sandbox") as client:
        sandbox = client.sandbox(task=task.slug)
        try:
            live = Attempt.objects.filter(
                host=settings.BOLTZ_HOST, sandbox_state=SandboxState.LIVE
            ).count()
            assert live >= 1
            row = host_row(viewer, settings.BOLTZ_HOST)
            assert row["state"] == "live"
            assert row["capacity"] == "2"
            assert row["live sandboxes"] == str(live)
            assert row["docker"] == version
            assert row["own queue"] == "0"
            assert "ago" in row["last heartbeat"]
        finally:
            sandbox.delete()
    wait_until(
        lambda: not Attempt.objects.filter(pk=sandbox.id, sandbox_state=SandboxState.LIVE).exists(),
        timeout=60,
        what="the sandbox to be deleted",
    )
    row = host_row(viewer, settings.BOLTZ_HOST)
    assert row["live sandboxes"] == str(live - 1)


def host_row(viewer: Client, host: str) -> dict[str, str]:
    """The hosts page's row for `host`, as {column heading (lower case): cell text}."""
    import html.parser

    class Table(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.headings, self.rows, self.cell = [], [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag in ("th", "td"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag in ("th", "td") and self.cell is not None:
                self.rows[-1].append(" ".join(self.cell.split()))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    page = viewer.get("/hosts/")
    assert page.status_code == 200
    table = Table()
    table.feed(page.content.decode())
    headings = [h.lower() for h in table.rows[0]]
    rows = [dict(zip(headings, row, strict=True)) for row in table.rows[1:] if len(row) > 1]
    found = [row for row in rows if row["host"] == host]
    assert len(found) == 1, f"no row for {host} in {rows}"
    return found[0]
