"""One name per attempt: `TASK #N`, a number never given twice within its task (even after a
delete, even to concurrent creators), said the same way by pages, messages, audit entries,
export names and commands. And the demo's web server start that says when it did not start."""

from __future__ import annotations

import importlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from io import StringIO

import httpx
import pytest
from django.apps import apps
from django.core.management import CommandError, call_command

from attempts.models import Attempt, AuditEntry, Outcome, Status, Task
from attempts.services.attempts import (
    attempt_export,
    attempt_rerun,
    attempts_create,
    numbered_attempt,
)
from attempts.services.deletion import attempt_delete
from tests.conftest import ROOT, _worker_database_env, new_task


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def numbers(task: Task) -> list[int]:
    return sorted(task.attempts.values_list("number", flat=True))


@pytest.mark.django_db
def test_a_deleted_attempts_number_is_never_given_again():
    task = new_task("text-utils")
    first, second, third = attempts_create(task=task, agent="noop", count=3)
    assert [a.name for a in (first, second, third)] == [f"text-utils #{n}" for n in (1, 2, 3)]
    assert attempt_delete(attempt=third, by="alice")  # the last one: its number stays taken
    assert attempts_create(task=task, agent="noop")[0].number == 4
    for attempt in task.attempts.all():
        attempt_delete(attempt=attempt, by="alice")
    assert numbers(task) == []
    fifth = attempts_create(task=task, agent="noop")[0]
    assert fifth.name == "text-utils #5"
    # An attempt numbered by hand past the counter does not make the next one collide.
    Attempt.objects.create(task=task, number=9, agent="noop")
    assert numbered_attempt(task, agent="noop").number == 10
    assert Task.objects.get(pk=task.pk).next_attempt_number == 11
    assert (
        numbers(new_task("other")) == []
        and numbered_attempt(Task.objects.get(slug="other"), agent="noop").name == "other #1"
    )


CREATOR = """
import os, sys, time
import django
django.setup()
from attempts.models import Task
from attempts.services.attempts import numbered_attempt
folder, me = sys.argv[1], sys.argv[2]
task = Task.objects.get(slug="text-utils")
open(os.path.join(folder, "ready-" + me), "w").close()
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.01)
for _ in range(5):
    numbered_attempt(task, agent="noop")
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_concurrent_creators_in_separate_processes_get_distinct_numbers(tmp_path):
    task = new_task("text-utils")
    Attempt.objects.create(task=task, number=1, agent="noop")  # made before the counter knew
    env = {**os.environ, **_worker_database_env(), "DJANGO_SETTINGS_MODULE": "boltz_web.settings"}
    creators = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, str(tmp_path), str(i)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
        )
        for i in range(4)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < len(creators):
            failed = [c for c in creators if c.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                pytest.fail(f"a creator did not start: {failed[0].stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        (tmp_path / "go").touch()  # all at once
        for creator in creators:
            _, err = creator.communicate(timeout=60)
            assert creator.returncode == 0, err.decode()[-2000:]
    finally:
        for creator in creators:
            if creator.poll() is None:
                creator.kill()
                creator.wait()
    assert numbers(task) == list(range(1, 22))
    assert Task.objects.get(pk=task.pk).next_attempt_number == 22


@pytest.mark.django_db
def test_the_migration_counts_past_every_number_a_task_gave():
    migration = importlib.import_module("attempts.migrations.0009_next_attempt_number")
    used = new_task("used")
    for n in (1, 2, 3):
        Attempt.objects.create(task=used, number=n, agent="noop")
    # #7 was deleted before the migration: the audit trail remembers it.
    AuditEntry.objects.create(
        action="delete_attempt", actor="bob", task_slug="used", attempt_number=7
    )
    fresh = new_task("fresh")
    one = new_task("one")
    Attempt.objects.create(task=one, number=2, agent="noop")
    Task.objects.update(next_attempt_number=1)
    migration.count_past_used_numbers(apps, None)
    ours = Task.objects.filter(slug__in=["used", "fresh", "one"])
    assert dict(ours.values_list("slug", "next_attempt_number")) == {
        "used": 8,
        "fresh": 1,
        "one": 3,
    }
    assert numbered_attempt(used, agent="noop").name == "used #8"
    assert numbered_attempt(fresh, agent="noop").name == "fresh #1"


@pytest.fixture
def text_utils(db):
    """Task text-utils with finished attempts #1..#5 (ids unlike their numbers)."""
    padding = new_task("padding")  # so that ids and numbers differ
    for n in range(1, 8):
        Attempt.objects.create(task=padding, number=n, agent="noop")
    task = new_task("text-utils")
    made = [
        numbered_attempt(
            task, agent="noop", status=Status.FINISHED, outcome=Outcome.FAILED, score=0.0
        )
        for _ in range(5)
    ]
    assert all(a.pk != a.number for a in made)
    return made


def test_export_audit_and_rerun_say_the_attempts_name(text_utils, admin_client):
    fifth = text_utils[4]
    response = admin_client.get(f"/attempts/{fifth.pk}/export.zip")
    assert response["Content-Disposition"] == 'attachment; filename="boltz-text-utils-5.zip"'
    bundle = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert bundle.read("README.txt").decode().splitlines()[0] == (
        "Boltz attempt bundle: text-utils #5"
    )
    assert json.loads(bundle.read("attempt.json"))["name"] == "text-utils #5"
    b"".join(attempt_export(attempt=fifth, by="alice"))
    exports = AuditEntry.objects.filter(action="export_attempt", attempt_id=fifth.pk)
    assert {e.subject for e in exports} == {"text-utils #5"}
    assert str(exports.filter(actor="alice").get()).endswith("alice export_attempt text-utils #5")

    rerun = attempt_rerun(attempt=fifth, by="alice")
    assert rerun.name == "text-utils #6"
    notes = list(rerun.events.filter(actor="reviewer").values_list("data__message", flat=True))
    assert notes == ["re-run of text-utils #5 by alice"]
    page = admin_client.get(f"/attempts/{rerun.pk}/").content.decode()
    assert "Re-run of" in page
    assert f'href="/attempts/{fifth.pk}/">text-utils #5</a>' in page
    assert f"attempt {fifth.pk}<" not in page

    attempt_delete(attempt=rerun, by="alice")
    gone = AuditEntry.objects.get(action="delete_attempt")
    assert gone.subject == "text-utils #6"
    audit_list = admin_client.get("/admin/attempts/auditentry/").content.decode()
    assert "text-utils #6" in audit_list
    assert f'<a href="/attempts/{fifth.pk}/">text-utils #5</a>' in audit_list
    attempts_list = admin_client.get("/admin/attempts/attempt/").content.decode()
    assert "text-utils #5" in attempts_list
    # The next number is past the deleted re-run's.
    assert numbered_attempt(fifth.task, agent="noop").name == "text-utils #7"


def test_commands_take_task_numbers_and_print_names_not_ids(text_utils, tmp_path):
    first, second, *_ = text_utils
    target = tmp_path / "two.zip"
    out = run("export_attempt", "text-utils #2", "-o", str(target))
    assert out.strip() == f"wrote {target} ({target.stat().st_size} bytes): text-utils #2"
    assert (
        run("export_attempt", str(second.pk), "-o", str(target)).strip().endswith(": text-utils #2")
    )
    out = run("delete_attempts", "text-utils#1", "text-utils #2", "--dry-run")
    assert out.splitlines() == [
        "would delete attempt text-utils #1: failed",
        "would delete attempt text-utils #2: failed",
        "dry run: 2 would be deleted",
    ]
    run("delete_attempts", "text-utils #5")
    with pytest.raises(CommandError) as refused:
        run("export_attempt", "text-utils#5", "-o", str(target))
    assert str(refused.value) == "no attempt text-utils #5: task text-utils has attempts #1..#4"
    out = run("run_attempts", "text-utils", "--agent", "noop", "-n", "2", "--no-wait")
    assert out.strip() == (
        "enqueued 2 attempt(s) of text-utils with agent noop: text-utils #6, text-utils #7"
    )
    assert str(first.pk) not in out.replace("text-utils", "")


def test_run_attempts_top_up_starts_only_what_is_missing(db):
    task = new_task("fix-add")
    numbered_attempt(task, agent="noop", status=Status.FINISHED, outcome=Outcome.FAILED)
    numbered_attempt(task, agent="noop", status=Status.FINISHED, outcome=Outcome.INFRA_ERROR)
    out = run("run_attempts", "fix-add", "--agent", "noop", "-n", "1", "--top-up", "--no-wait")
    assert (
        out.strip() == "fix-add already has 1 attempt(s) with agent noop (fix-add #1): none started"
    )
    assert numbers(task) == [1, 2]
    # The infrastructure error does not count: two more make three.
    out = run("run_attempts", "fix-add", "--agent", "noop", "-n", "3", "--top-up", "--no-wait")
    assert out.strip() == "enqueued 2 attempt(s) of fix-add with agent noop: fix-add #3, fix-add #4"


# --- the demo's web server: scripts/serve_web.sh, as scripts/demo.sh runs it ---------------


def serve_web(addr: str, run_dir, *extra_env: tuple[str, str], seconds: int = 60):
    env = {**os.environ, **_worker_database_env(), **dict(extra_env)}
    return subprocess.run(
        ["scripts/serve_web.sh", addr, str(run_dir), str(seconds)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 30,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.timeout(60)
def test_a_taken_port_is_refused_with_the_reason(tmp_path):
    with socket.socket() as holder:  # another program listens there, and would answer
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = serve_web(f"127.0.0.1:{port}", tmp_path)
    assert done.returncode == 1
    assert f"not running at http://127.0.0.1:{port}/" in done.stderr
    assert "Address already in use" in done.stderr and "BOLTZ_DEMO_ADDR" in done.stderr
    assert not (tmp_path / "web.pid").exists()


@pytest.mark.timeout(60)
def test_a_bad_address_is_refused(tmp_path):
    done = serve_web("127.0.0.1:http", tmp_path)
    assert done.returncode == 1
    assert "give HOST:PORT or PORT (127.0.0.1:8000)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_a_server_that_stops_is_reported_with_its_logs_last_lines(tmp_path):
    port = free_port()
    done = serve_web(f"127.0.0.1:{port}", tmp_path, ("DJANGO_SETTINGS_MODULE", "no_such_settings"))
    assert done.returncode == 1
    assert "it exited (status 2)" in done.stderr  # Django could not even load runserver
    assert f"the last lines of {tmp_path}/web.log:" in done.stderr
    assert "manage.py runserver: error: " in done.stderr
    assert not (tmp_path / "web.pid").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_the_server_is_announced_only_once_it_answers(tmp_path):
    port = free_port()
    done = serve_web(f"127.0.0.1:{port}", tmp_path)
    assert done.returncode == 0, done.stderr
    pid = int((tmp_path / "web.pid").read_text())
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/admin/login/", timeout=5).status_code == 200
    finally:
        os.kill(pid, signal.SIGTERM)
