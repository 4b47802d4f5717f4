"""The web process never loads Docker or the runner: only workers talk to Docker.

A separate Python process starts as the web server does (boltz_web.wsgi), signs in and uses
the pages, the admin (task form, import) and the start form, which enqueues an attempt, then
says which modules it loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import boltz_web.wsgi  # as the web server starts
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from django.contrib.auth.models import User
    from django.test import Client
    from attempts.models import Task, WorkerHost
    User.objects.create_superuser("admin", "a@b.c", "pw")
    WorkerHost.objects.create(name="h", images=["boltz-sandbox:bookworm"])
    Task.objects.create(slug="t", title="t", instruction="x", repo_url="/r",
                        base_commit="a" * 40, check_command="true")
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    seen = {}
    for url in ("/", "/tasks/t/", "/admin/attempts/task/add/", "/admin/attempts/task/import/",
                "/admin/attempts/attempt/", "/admin/attempts/agent/add/", "/api/openapi.json",
                "/admin/attempts/apitoken/add/"):
        seen[url] = client.get(url).status_code
    # Starting attempts enqueues them (Celery sends by name: no tasks module is loaded).
    seen["start"] = client.post("/tasks/t/start/", {"agent": "noop", "count": "1",
                                                    "confirm": "yes"}).status_code
    seen["attempts"] = Task.objects.get(slug="t").attempts.count()
    worker_only = ("docker", "attempts.run")  # the worker side, Docker included
    loaded = sorted(m for m in sys.modules
                    if m in worker_only or m.startswith(tuple(w + "." for w in worker_only)))
    print(json.dumps({"pages": seen, "loaded": loaded}))
    """
)


@pytest.mark.timeout(120)
def test_the_web_process_loads_neither_docker_nor_the_runner(tmp_path, redis_ready):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "boltz_web.settings",
        "BOLTZ_DATA_DIR": str(tmp_path),
        "BOLTZ_QUEUE": "web-process-test",  # no worker consumes it
        "BOLTZ_ALLOWED_HOSTS": "testserver",
    }
    env.pop("DATABASE_URL", None)
    env.pop("BOLTZ_SQLITE_PATH", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    pages = {k: v for k, v in report["pages"].items() if k != "attempts"}
    assert all(code in (200, 302) for code in pages.values()), pages
    assert report["pages"]["attempts"] == 1
