"""The Docker events listener's judgement, event by event, on database rows (no worker): which
sandboxes a container that stopped or went ends, which it leaves alone, and that one stopping
during an operation on its sandbox is judged only when the operation ends."""

from __future__ import annotations

import pytest

from attempts.models import Attempt, EventKind, SandboxState, Status
from attempts.run import container_watch
from attempts.run.director import GONE_BY
from attempts.run.docker import runtime
from tests.conftest import new_task

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]

CONTAINER = "c0ffee" * 10 + "abcd"


def sandbox(**fields) -> Attempt:
    values = {
        "number": Attempt.objects.count() + 1,
        "origin": "api",
        "status": Status.RUNNING,
        "host": "here",
        "container_id": CONTAINER,
        "sandbox_state": SandboxState.LIVE,
        **fields,
    }
    task = new_task("t") if not Attempt.objects.exists() else Attempt.objects.first().task
    return Attempt.objects.create(task=task, **values)


def event(
    action: str, attempt: Attempt, role: str = "agent", **attributes
) -> runtime.ContainerEvent:
    raw = {
        "Type": "container",
        "Action": action,
        "Actor": {
            "ID": attempt.container_id,
            "Attributes": {
                runtime.LABEL_ATTEMPT: str(attempt.pk),
                runtime.LABEL_ROLE: role,
                **attributes,
            },
        },
        "time": 1700000000,
        "timeNano": 1700000000_250000000,
    }
    return runtime._container_event(raw)


def test_a_docker_event_is_read_with_its_attempt_exit_code_and_time():
    read = runtime._container_event(
        {
            "Action": "die",
            "Actor": {"ID": "abc", "Attributes": {"boltz.attempt": "7", "exitCode": "137"}},
            "timeNano": 1700000000_500000000,
        }
    )
    assert (read.action, read.container, read.attempt_id, read.exit_code) == ("die", "abc", 7, 137)
    assert read.at == 1700000000.5 and read.role == ""
    odd = runtime._container_event(
        {"Action": "destroy", "id": "abc", "Actor": {"Attributes": {"boltz.attempt": "x"}}}
    )
    assert odd.attempt_id is None and odd.exit_code is None and odd.container == "abc"


def test_a_live_sandboxs_container_that_dies_marks_it_stopped_with_what_docker_saw():
    live = sandbox()
    container_watch.handle(event("die", live, exitCode="137"))
    live.refresh_from_db()
    assert live.sandbox_state == SandboxState.STOPPED and live.status == Status.RUNNING
    (said,) = live.events.filter(kind=EventKind.ERROR)
    assert said.data["infrastructure"] and said.data["docker_event_at"].startswith("2023-11-14")
    assert said.data["message"].startswith("the sandbox's container stopped (exit code 137)")
    # Its removal that follows says it is gone; nothing is said twice.
    container_watch.handle(event("destroy", live))
    live.refresh_from_db()
    assert live.sandbox_state == SandboxState.DELETED and live.events.count() == 2


@pytest.mark.parametrize(
    "fields",
    [
        {"close_requested_at": "2024-01-01T00:00:00Z"},  # closing: Boltz halts it
        {"cancel_requested_at": "2024-01-01T00:00:00Z"},  # cancelled by a reviewer
        {"sandbox_deleted_at": "2024-01-01T00:00:00Z"},  # deleted by a reviewer
        {"status": Status.CHECKING},  # its final check: Boltz halts it
        {"origin": "run"},  # a pipeline attempt: its director sees it
        {"container_id": "another"},  # an older container of the attempt
    ],
)
def test_a_container_that_boltz_itself_stops_is_left_alone(fields):
    quiet = sandbox(**fields)
    container_watch.handle(event("die", Attempt(pk=quiet.pk, container_id=CONTAINER)))
    quiet.refresh_from_db()
    assert quiet.sandbox_state == SandboxState.LIVE and not quiet.events.exists()


def test_a_check_containers_events_are_its_checks_own():
    live = sandbox()
    container_watch.handle(event("die", live, role="check"))
    container_watch.handle(event("destroy", live, role="check"))
    assert Attempt.objects.get(pk=live.pk).sandbox_state == SandboxState.LIVE


@pytest.mark.docker
def test_a_container_that_dies_during_an_operation_is_judged_when_it_ends(docker_ready):
    live = sandbox()
    with container_watch.operating(live.pk):
        container_watch.handle(event("die", live, exitCode="137"))
        # An in-place check halts it and starts it again: nothing is decided meanwhile.
        assert Attempt.objects.get(pk=live.pk).sandbox_state == SandboxState.LIVE
    # The operation ended, and Docker knows no such container: it went.
    assert Attempt.objects.get(pk=live.pk).sandbox_state == SandboxState.DELETED


def test_a_kept_sandbox_whose_container_is_removed_is_marked_gone_once():
    kept = sandbox(status=Status.FINISHED, sandbox_state=SandboxState.STOPPED)
    container_watch.handle(event("destroy", kept))
    container_watch.handle(event("destroy", kept))
    kept.refresh_from_db()
    assert kept.sandbox_state == SandboxState.DELETED and kept.sandbox_deleted_by == GONE_BY
    assert kept.events.filter(data__sandbox="gone").count() == 1
    # One deleted by a reviewer stays theirs.
    deleted = sandbox(
        status=Status.FINISHED,
        sandbox_state=SandboxState.STOPPED,
        sandbox_deleted_at="2024-01-01T00:00:00Z",
        sandbox_deleted_by="alice",
    )
    container_watch.handle(event("destroy", deleted))
    assert Attempt.objects.get(pk=deleted.pk).sandbox_deleted_by == "alice"
