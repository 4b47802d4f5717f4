"""Served properly (issue 25): the production web process is gunicorn (boltz_web/gunicorn_conf.py,
as `make serve` starts it) serving pages, hashed static files from WhiteNoise with far-future
caching, and a streamed exec past gunicorn's timeout; BOLTZ_ENV=production refuses to start
without its settings, saying which; one log line per request and per attempt stage, JSON when
asked."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from attempts.api.tokens import token_create
from tests.conftest import ROOT, containers_of, run_web, wait_until

STRONG_KEY = "a-Long-random-key-0123456789-made-for-these-tests-only"
NOT_PRODUCTION = ("BOLTZ_DEBUG", "BOLTZ_SECRET_KEY", "BOLTZ_ALLOWED_HOSTS", "DATABASE_URL")


def web_log(url: str) -> list[str]:
    port = url.rsplit(":", 1)[1]
    return (ROOT / "test-results" / "web" / f"web-{port}.log").read_text().splitlines()


def json_lines(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_gunicorn_serves_pages_hashed_static_files_and_a_stream_past_its_timeout(
    tmp_path, worker, load_example
):
    load_example("fix-add")
    alice = get_user_model().objects.create_user("alice", password="x")
    token = token_create(user=alice)[1]
    static_root = tmp_path / "static"
    env = {"BOLTZ_STATIC_ROOT": str(static_root), "BOLTZ_LOG_FORMAT": "json"}
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    # A 3 s heartbeat timeout, one process: the 6 s stream below outlives it.
    env |= {"BOLTZ_WEB_TIMEOUT": "3", "BOLTZ_WEB_WORKERS": "1", "BOLTZ_WEB_THREADS": "4"}
    with run_web(env, server="gunicorn") as url:
        page = httpx.get(url + "/login/", timeout=30)
        assert page.status_code == 200 and page.headers["Server"].startswith("gunicorn")
        # The page names its stylesheet by content hash; WhiteNoise serves it for ten years.
        css = re.search(r'href="(/static/css/boltz\.[0-9a-f]{12}\.css)"', page.text)
        assert css, page.text[:2000]
        static = httpx.get(url + css[1], headers={"Accept-Encoding": "gzip"}, timeout=30)
        assert static.status_code == 200
        assert static.headers["Cache-Control"] == "max-age=315360000, public, immutable"
        assert static.headers["Content-Encoding"] == "gzip" and ".page" in static.text

        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        with api:
            made = api.post(
                "/api/sandboxes", json={"task": "fix-add"}, headers={"X-Request-ID": "r-1"}
            )
            assert made.status_code == 201, made.text
            assert made.headers["X-Request-ID"] == "r-1"
            sid = made.json()["id"]
            command = "for i in 1 2 3 4 5 6; do echo line$i; sleep 1; done"
            arrived = []
            with api.stream(
                "POST", f"/api/sandboxes/{sid}/exec", json={"command": command, "stream": True}
            ) as streamed:
                assert streamed.status_code == 200
                for line in streamed.iter_lines():
                    if line:
                        arrived.append((time.monotonic(), json.loads(line)))
            texts = "".join(item["text"] for _, item in arrived if "text" in item)
            assert texts == "".join(f"line{i}\n" for i in range(1, 7))
            assert arrived[-1][1]["result"]["exit_code"] == 0
            # Streamed as it ran, not held until the end.
            assert arrived[-1][0] - arrived[0][0] > 4
            assert api.post(f"/api/sandboxes/{sid}/close", json={}).status_code == 200
        lines = web_log(url)
    assert not any("WORKER TIMEOUT" in line for line in lines), lines
    logged = json_lines(lines)
    create = next(r for r in logged if r.get("request_id") == "r-1")
    assert {k: create[k] for k in ("method", "path", "status", "user_id")} == {
        "method": "POST",
        "path": "/api/sandboxes",
        "status": 201,
        "user_id": alice.pk,
    }
    stream = next(r for r in logged if r.get("path") == f"/api/sandboxes/{sid}/exec")
    assert stream["streamed"] is True and stream["duration_ms"] > 5000  # logged once sent
    assert not any("line3" in line for line in lines)  # the agent's output is never logged
    # The worker logged the attempt's stages, each with its outcome and time.
    wait_until(
        lambda: f"attempt {sid} total" in worker.log_path.read_text(), 60, "the attempt's end"
    )
    found = re.findall(rf"attempt {sid} (\w+) (\w+) [\d.]+ms", worker.log_path.read_text())
    assert found == [  # each once: Celery's worker no longer echoes them in its own format
        ("start", "ok"),
        ("work", "ok"),
        ("record", "ok"),
        ("total", "none"),
    ]
    assert [c["status"] for c in containers_of(sid)] in ([], ["exited"])


def test_a_stage_line_is_one_json_object_and_text_lines_cannot_be_forged():
    from boltz_web.log_lines import LineFormatter

    record = logging.LogRecord("attempts.run.director", logging.INFO, "", 0, "attempt 7", (), None)
    record.fields = {"attempt_id": 7, "stage": "check", "outcome": "ok", "duration_ms": 12.5}
    line = LineFormatter("json").format(record)
    assert "\n" not in line
    assert json.loads(line) | {"time": None} == {
        "time": None,
        "level": "INFO",
        "logger": "attempts.run.director",
        "message": "attempt 7",
        "attempt_id": 7,
        "stage": "check",
        "outcome": "ok",
        "duration_ms": 12.5,
    }
    record.fields = {"path": "/x\nINFO forged line", "user_id": None}
    text = LineFormatter("text").format(record)
    assert "\n" not in text and 'path="/x\\nINFO forged line"' in text


def production_check(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in NOT_PRODUCTION}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**base, "BOLTZ_ENV": "production", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_refuses_to_start_without_its_settings_and_names_each():
    done = production_check()
    assert done.returncode != 0
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("django.core.exceptions.ImproperlyConfigured: BOLTZ_ENV=production")
    for name in ("BOLTZ_SECRET_KEY", "BOLTZ_ALLOWED_HOSTS", "DATABASE_URL", "BOLTZ_ALLOW_SQLITE"):
        assert name in said, said
    # Given a key and hosts, only the database is missing.
    given = {"BOLTZ_SECRET_KEY": STRONG_KEY, "BOLTZ_ALLOWED_HOSTS": "boltz.example.org"}
    done = production_check(**given)
    assert done.returncode != 0 and "DATABASE_URL" in done.stderr
    assert "BOLTZ_SECRET_KEY is not set" not in done.stderr
    # A placeholder left in the key is refused, with how to make one.
    done = production_check(**given | {"BOLTZ_SECRET_KEY": "change-me"}, BOLTZ_ALLOW_SQLITE="1")
    assert done.returncode != 0
    assert "BOLTZ_SECRET_KEY is too weak (9 characters" in done.stderr
    assert "secrets.token_urlsafe(50)" in done.stderr
    # Debug pages are refused in production too.
    done = production_check(**given, BOLTZ_ALLOW_SQLITE="1", BOLTZ_DEBUG="1")
    assert done.returncode != 0 and "BOLTZ_DEBUG is on" in done.stderr


def test_production_starts_with_them_or_with_sqlite_on_purpose():
    given = {"BOLTZ_SECRET_KEY": STRONG_KEY, "BOLTZ_ALLOWED_HOSTS": "boltz.example.org"}
    done = production_check(**given, BOLTZ_ALLOW_SQLITE="1")
    assert done.returncode == 0, done.stderr
    # A database server's URL is enough; `check` does not connect to it.
    done = production_check(**given, DATABASE_URL="postgres://boltz@db.internal:5432/boltz")
    assert done.returncode == 0, done.stderr
    assert settings.BOLTZ_ENV == "development"  # the test run's own settings: the default


def test_make_serve_says_what_production_needs_before_it_starts_anything(tmp_path):
    """`make serve` (scripts/serve.sh) in production without its settings: one line saying each
    missing one, no traceback, and no process started (no pid file)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("BOLTZ_SECRET_KEY", "BOLTZ_ALLOWED_HOSTS", "DATABASE_URL", "BOLTZ_ENV")
    }
    done = subprocess.run(
        ["scripts/serve.sh"],
        cwd=ROOT,
        env={**env, "BOLTZ_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("boltz: BOLTZ_ENV=production will not start: "), done.stderr
    assert "BOLTZ_SECRET_KEY is not set" in done.stderr and "Traceback" not in done.stderr
    assert "worker running" not in done.stdout
