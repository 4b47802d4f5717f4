"""One attempt lifecycle: every kind of attempt (a pipeline attempt, an API sandbox, a pool's
episode) ends through the same director, so an error ends each kind with the same outcome,
reason and score; and the end is announced in one place that validation, predictions and
callbacks follow. The API sandboxes here hit the error branches the director shares with the
pipeline: a task that cannot run, a reviewer's cancel, the worker's time limit, a check that
cannot start."""

from __future__ import annotations

import uuid

import httpx
import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth import get_user_model

from attempts.api.tokens import token_create
from attempts.core.ended import announce
from attempts.core.errors import AttemptStopped, InfrastructureError, SandboxGone, TaskInvalid
from attempts.dispatch import queue as queueing
from attempts.models import Attempt, EventKind, Outcome, SandboxState, Status, Task
from attempts.run.changes import ChangesUnavailable
from attempts.run.director import NETWORK_REFUSED, outcome_of
from attempts.services.attempts import attempt_cancel
from tests.conftest import containers_of, new_task, real, wait_finished


# --- the one mapping from errors to outcomes ------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "stage", "expected"),
    [
        (
            ChangesUnavailable("the workspace holds more than 102400 bytes of files"),
            "record",
            (
                Outcome.FAILED,
                "changes unavailable: the workspace holds more than 102400 bytes of files",
                0.0,
            ),
        ),
        (
            AttemptStopped("cancelled by erin"),
            "work",
            (Outcome.CANCELLED, "cancelled by erin", None),
        ),
        (
            SandboxGone("container 0123456789ab is not running (exit code 137)"),
            "work",
            (
                Outcome.INFRA_ERROR,
                "work: container 0123456789ab is not running (exit code 137)",
                None,
            ),
        ),
        (
            TaskInvalid("network", NETWORK_REFUSED),
            "start",
            (Outcome.INFRA_ERROR, f"start: task cannot run: network: {NETWORK_REFUSED}", None),
        ),
        (
            SoftTimeLimitExceeded(),
            "check",
            (Outcome.INFRA_ERROR, "check: the worker's time limit for this attempt ran out", None),
        ),
        (
            KeyError("oops"),
            "record",
            (Outcome.INFRA_ERROR, "record: internal error in Boltz: KeyError('oops')", None),
        ),
    ],
)
def test_every_error_that_ends_the_stages_has_one_outcome_reason_and_score(error, stage, expected):
    assert outcome_of(error, stage) == expected


def test_an_infrastructure_error_after_a_reviewer_stopped_the_attempt_is_a_cancel():
    why = "its sandbox was deleted by erin while the attempt ran"
    ended = outcome_of(InfrastructureError("no such container"), "work", stopped=lambda: why)
    assert ended == (Outcome.CANCELLED, why, None)


# --- the end, announced ----------------------------------------------------------------------------
@pytest.mark.django_db
def test_announcing_an_end_sets_the_validation_mark_and_sends_the_callback(
    monkeypatch, django_capture_on_commit_callbacks
):
    task = new_task("validated")
    done = {"status": Status.FINISHED}
    reference = Attempt.objects.create(
        task=task, number=1, agent="reference", outcome=Outcome.PASSED, **done
    )
    noop = Attempt.objects.create(
        task=task,
        number=2,
        agent="noop",
        outcome=Outcome.FAILED,
        callback_url="http://127.0.0.1:9/done",
        **done,
    )
    Task.objects.filter(pk=task.pk).update(
        validation="running", validation_reference=reference, validation_noop=noop
    )
    sent = []
    monkeypatch.setattr(queueing, "enqueue_callback", lambda pk, **kwargs: sent.append(pk))
    with django_capture_on_commit_callbacks(execute=True):
        announce(noop.pk, task.pk)
    task.refresh_from_db()
    assert task.validation == "valid"
    assert task.validation_note.startswith("reference passed")
    assert sent == [noop.pk]


@pytest.mark.django_db
def test_a_sandbox_given_up_while_queued_is_announced_so_its_callback_goes(
    monkeypatch, django_capture_on_commit_callbacks
):
    from attempts.services.sandboxes import _give_up_queued

    task = new_task("no-room")
    queued = Attempt.objects.create(
        task=task, number=1, agent="client", callback_url="http://127.0.0.1:9/done"
    )
    sent = []
    monkeypatch.setattr(queueing, "enqueue_callback", lambda pk, **kwargs: sent.append(pk))
    with django_capture_on_commit_callbacks(execute=True):
        assert _give_up_queued(queued.pk, 30.0)
    queued.refresh_from_db()
    assert (queued.status, queued.outcome) == (Status.CANCELLED, Outcome.CANCELLED)
    assert queued.failure_reason == "no host had room within 30s"
    assert sent == [queued.pk]


# --- API sandboxes end as the pipeline's attempts do ----------------------------------------------
def _client(web: str) -> httpx.Client:
    user = get_user_model().objects.create_user(f"client-{uuid.uuid4().hex[:6]}")
    token = token_create(user=user)[1]
    return httpx.Client(base_url=web, headers={"Authorization": f"Bearer {token}"}, timeout=120)


@real
def test_a_sandbox_of_a_task_that_cannot_run_says_why_and_never_blames_boltz(
    web, worker, load_example
):
    load_example("fix-add", network=True)  # this installation runs no networked tasks
    with _client(web) as client:
        made = client.post("/api/sandboxes", json={"task": "fix-add"})
    assert (made.status_code, made.json()["code"]) == (502, "infrastructure")
    assert "start: task cannot run: network: the task needs network" in made.json()["detail"]
    attempt = Attempt.objects.get(origin="api")
    assert (attempt.status, attempt.outcome, attempt.score) == (
        Status.FINISHED,
        Outcome.INFRA_ERROR,
        None,
    )
    assert attempt.failure_reason == f"start: task cannot run: network: {NETWORK_REFUSED}"
    assert "internal error" not in attempt.failure_reason


@real
def test_cancelling_a_live_sandbox_closes_it_as_cancelled_and_keeps_it(web, worker, load_example):
    load_example("fix-add")
    with _client(web) as client:
        sid = client.post("/api/sandboxes", json={"task": "fix-add"}).json()["id"]
        assert attempt_cancel(attempt=Attempt.objects.get(pk=sid), by="erin") is True
        attempt = wait_finished([Attempt(pk=sid)], timeout=30)[0]
        assert client.get(f"/api/sandboxes/{sid}").json()["state"] == "closed"
        refused = client.post(f"/api/sandboxes/{sid}/exec", json={"command": "true"})
        assert refused.status_code == 409, refused.text
    assert (attempt.status, attempt.outcome, attempt.score) == (
        Status.CANCELLED,
        Outcome.CANCELLED,
        None,
    )
    assert attempt.failure_reason == "cancelled by erin"
    assert attempt.sandbox_state == SandboxState.STOPPED
    assert [c["status"] for c in containers_of(sid)] == ["exited"]


@real
def test_a_sandbox_whose_check_cannot_start_is_an_infrastructure_error_of_the_check(
    web, worker, load_example
):
    from attempts.run.docker import runtime

    tag = f"boltz-test-vanishing-{uuid.uuid4().hex[:8]}:latest"
    runtime.client().images.get(settings.BOLTZ_DEFAULT_IMAGE).tag(tag)
    try:
        load_example("fix-add", image=tag)
        with _client(web) as client:
            sid = client.post("/api/sandboxes", json={"task": "fix-add"}).json()["id"]
            runtime.client().images.remove(tag)  # the check's fresh container has no image now
            closed = client.post(f"/api/sandboxes/{sid}/close", json={"check": True}).json()
    finally:
        if runtime.image_exists(tag):
            runtime.client().images.remove(tag)
    assert closed["outcome"] == Outcome.INFRA_ERROR
    attempt = Attempt.objects.get(pk=sid)
    assert (attempt.status, attempt.score) == (Status.FINISHED, None)
    assert attempt.failure_reason == f"check: image {tag!r} is not on host {settings.BOLTZ_HOST}"
    assert attempt.events.filter(kind=EventKind.ERROR, data__infrastructure=True).count() == 1
    assert attempt.sandbox_state == SandboxState.STOPPED


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
def test_a_sandbox_held_past_the_workers_time_limit_is_an_infrastructure_error(
    load_example, monkeypatch
):
    from attempts.run import operations
    from attempts.services.sandboxes import sandbox_attempt

    task = load_example("fix-add")
    user = get_user_model().objects.create_user("holder")
    attempt = sandbox_attempt(task, user=user, agent="api", labels={}, ttl=600, idle=600)

    def out_of_time(self, director):  # Celery's soft limit, raised while the client holds it
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(operations.ClientHold, "_wait_for_close", out_of_time)
    operations.hold_sandbox(attempt.pk, host=settings.BOLTZ_HOST)
    attempt.refresh_from_db()
    assert (attempt.status, attempt.outcome, attempt.score) == (
        Status.FINISHED,
        Outcome.INFRA_ERROR,
        None,
    )
    assert attempt.failure_reason == "work: the worker's time limit for this attempt ran out"
    assert attempt.sandbox_state == SandboxState.STOPPED
    assert set(attempt.timings) == {"start", "total"}
