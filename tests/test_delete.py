"""Deleting sandboxes, attempts and tasks: idempotent, safe while running, audited."""

from __future__ import annotations

import time

import pytest
from django.core.files.storage import default_storage
from django.core.management import CommandError, call_command

from attempts.models import (
    Attempt,
    AuditEntry,
    CheckResult,
    Event,
    Outcome,
    SandboxState,
    Status,
    Task,
)
from attempts.services.attempts import attempt_create
from attempts.services.deletion import attempt_delete, sandbox_delete, task_delete
from tests.conftest import agent_printing, containers_of, new_task, wait_finished, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]


def wait_running(attempt):
    wait_until(
        lambda: agent_printing(attempt.pk),
        what="the agent to start",
    )


def test_delete_sandbox_keeps_the_record_and_is_idempotent(worker, load_example, admin_client):
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="reference")])[0]
    assert len(containers_of(attempt.pk)) == 1
    assert default_storage.exists(attempt.workspace_file)

    asked = admin_client.get(f"/attempts/{attempt.pk}/delete/sandbox/")
    assert b"Delete sandbox</button>" in asked.content  # a GET only asks
    assert len(containers_of(attempt.pk)) == 1
    page = admin_client.post(f"/attempts/{attempt.pk}/delete/sandbox/")
    assert page.status_code == 200 and b"Delete sandbox</button>" in page.content
    assert len(containers_of(attempt.pk)) == 1  # the first POST only asks
    response = admin_client.post(f"/attempts/{attempt.pk}/delete/sandbox/", {"confirm": "yes"})
    assert response.status_code == 302
    assert sandbox_delete(attempt=attempt, by="again") is False  # second call: nothing to do

    wait_until(lambda: not containers_of(attempt.pk), what="the container to go")
    attempt.refresh_from_db()
    wait_until(lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.DELETED)
    assert attempt.sandbox_deleted_by == "admin" and attempt.outcome == Outcome.PASSED
    assert not default_storage.exists(attempt.workspace_file)
    assert attempt.diff and CheckResult.objects.filter(attempt=attempt).exists()
    html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "deleted " in html and " by admin" in html
    event = attempt.events.filter(actor="reviewer").get()
    assert event.data["action"] == "delete_sandbox" and event.data["by"] == "admin"
    assert AuditEntry.objects.filter(action="delete_sandbox", attempt_id=attempt.pk).count() == 1


def test_delete_attempt_removes_everything_but_the_audit_entry(worker, load_example):
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="command", command="echo x")])[0]
    files = (
        default_storage.listdir(f"attempts/{attempt.pk}")[1]
        + default_storage.listdir(f"attempts/{attempt.pk}/outputs")[1]
    )
    assert files
    assert attempt_delete(attempt=attempt, by="alice") is True
    assert attempt_delete(attempt=attempt, by="alice") is False
    assert not Attempt.objects.filter(pk=attempt.pk).exists()
    assert not Event.objects.filter(attempt_id=attempt.pk).exists()
    assert not CheckResult.objects.filter(attempt_id=attempt.pk).exists()
    assert not default_storage.exists(f"attempts/{attempt.pk}/outputs")
    wait_until(lambda: not containers_of(attempt.pk), what="the container to go")
    entry = AuditEntry.objects.get(action="delete_attempt")
    assert (entry.actor, entry.attempt_id, entry.task_slug) == ("alice", attempt.pk, "fix-add")


def test_deleting_the_sandbox_of_a_running_attempt_cancels_it(worker, load_example):
    task = load_example("fix-add")
    attempt = attempt_create(task=task, agent="command", command="echo go; sleep 60")
    wait_running(attempt)
    sandbox_delete(attempt=attempt, by="bob")
    attempt = wait_finished([attempt], timeout=60)[0]
    assert (attempt.status, attempt.outcome) == (Status.CANCELLED, Outcome.CANCELLED)
    assert "deleted by bob" in attempt.failure_reason
    assert attempt.score is None
    wait_until(lambda: not containers_of(attempt.pk), what="the container to go")


def test_deleting_a_running_attempt_leaves_nothing_and_the_worker_goes_on(worker, load_example):
    task = load_example("fix-add")
    attempt = attempt_create(task=task, agent="command", command="echo go; sleep 60")
    wait_running(attempt)
    attempt_delete(attempt=attempt, by="carol")
    wait_until(lambda: not containers_of(attempt.pk), what="the container to go")
    time.sleep(1)
    assert not Event.objects.filter(attempt_id=attempt.pk).exists()
    assert not default_storage.exists(f"attempts/{attempt.pk}")
    after = wait_finished([attempt_create(task=task, agent="reference")])[0]
    assert after.outcome == Outcome.PASSED  # the worker was not harmed


def test_delete_attempts_command_filters_and_dry_runs(worker, load_example, capsys):
    task = load_example("fix-add")
    ref, noop = wait_finished(
        [attempt_create(task=task, agent="reference"), attempt_create(task=task, agent="noop")]
    )
    call_command("delete_attempts", "--task", "fix-add", "--outcome", "failed", "--dry-run")
    out = capsys.readouterr().out
    assert f"would delete attempt fix-add #{noop.number}: failed" in out
    assert f"fix-add #{ref.number}" not in out
    assert Attempt.objects.count() == 2
    call_command("delete_attempts", "--task", "fix-add", "--outcome", "failed")
    assert list(Attempt.objects.values_list("pk", flat=True)) == [ref.pk]
    call_command("delete_attempts", str(ref.pk), "--sandbox-only")
    assert "deleted 1 sandbox(es)" in capsys.readouterr().out
    assert Attempt.objects.get(pk=ref.pk).sandbox_state == SandboxState.DELETED
    with pytest.raises(CommandError, match=f"no attempt {noop.pk}"):
        call_command("delete_attempts", str(noop.pk))
    with pytest.raises(CommandError, match="name attempt ids or at least one filter"):
        call_command("delete_attempts")


def test_deleting_a_task_deletes_its_attempts_and_containers(worker, load_example):
    task = load_example("fix-add")
    attempts = wait_finished([attempt_create(task=task, agent="noop") for _ in range(2)])
    assert task_delete(task=task, by="dave") == 2
    assert not Task.objects.exists() and not Attempt.objects.exists()
    for a in attempts:
        wait_until(lambda a=a: not containers_of(a.pk), what="the containers to go")
    assert AuditEntry.objects.filter(action="delete_task", task_slug="fix-add").exists()


def test_unknown_attempt_delete_page_is_404(db, admin_client):
    assert admin_client.post("/attempts/424242/delete/attempt/").status_code == 404
    assert (
        admin_client.post("/attempts/424242/delete/sandbox/", {"confirm": "yes"}).status_code == 404
    )


def test_delete_needs_permission_and_post(db, client, django_user_model):
    task = new_task()
    attempt = Attempt.objects.create(task=task, number=1, agent="noop")
    django_user_model.objects.create_user("viewer", password="pw")
    client.login(username="viewer", password="pw")
    assert client.get(f"/attempts/{attempt.pk}/").status_code == 403  # no view permission
    assert (
        client.post(f"/attempts/{attempt.pk}/delete/attempt/", {"confirm": "yes"}).status_code
        == 403
    )
    assert client.get(f"/attempts/{attempt.pk}/export.zip").status_code == 403
    assert Attempt.objects.filter(pk=attempt.pk).exists()
