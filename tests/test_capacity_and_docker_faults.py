"""Worker capacity and Docker-daemon faults, each with a worker process of its own."""

from __future__ import annotations

import uuid

import pytest

from attempts.models import EventKind, Outcome, SandboxState
from attempts.services.attempts import attempt_create
from tests.conftest import agent_printing, run_worker, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]


def test_with_capacity_one_two_attempts_never_run_at_once(
    django_db_setup, docker_ready, redis_ready, load_example, settings
):
    queue = f"capacity-{uuid.uuid4().hex[:8]}"
    task = load_example("fix-add")
    with run_worker(queue=queue, host="capacity-host", capacity=1):
        attempts = [
            attempt_create(task=task, agent="command", command="sleep 2", queue=queue)
            for _ in range(2)
        ]
        first, second = sorted(wait_finished(attempts), key=lambda a: a.started_at)
    assert first.outcome == second.outcome == Outcome.FAILED
    assert first.host == second.host == "capacity-host"
    assert first.finished_at <= second.started_at, "the second attempt started while the first ran"


def test_an_unreachable_docker_daemon_is_an_infrastructure_error(
    django_db_setup, docker_ready, redis_ready, load_example, tmp_path
):
    queue = f"nodocker-{uuid.uuid4().hex[:8]}"
    task = load_example("fix-add")
    env = {
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
        "BOLTZ_DOCKER_RETRIES": "2",
        "BOLTZ_DOCKER_RETRY_DELAY": "0.2",
    }
    with run_worker(queue=queue, host="broken-host", capacity=1, env=env):
        attempt = wait_finished([attempt_create(task=task, agent="noop", queue=queue)])[0]
    assert attempt.outcome == Outcome.INFRA_ERROR
    assert attempt.score is None
    assert "Docker daemon unreachable on host broken-host after 3 tries" in attempt.failure_reason
    assert attempt.sandbox_state == SandboxState.NONE
    assert attempt.checks.count() == 0
    assert attempt.events.filter(kind=EventKind.ERROR, data__infrastructure=True).count() == 1


def test_host_operations_do_not_wait_behind_running_attempts(
    django_db_setup, docker_ready, redis_ready, load_example, settings
):
    from attempts.services.attempts import attempt_cancel
    from attempts.services.deletion import sandbox_delete
    from tests.conftest import containers_of, wait_until

    queue = f"busy-{uuid.uuid4().hex[:8]}"
    settings.BOLTZ_QUEUE = queue  # host queues are named after it: <queue>.host.<host>
    task = load_example("fix-add")
    with run_worker(queue=queue, host="busy-host", capacity=1):
        done = wait_finished([attempt_create(task=task, agent="noop", queue=queue)])[0]
        busy = attempt_create(task=task, agent="command", command="echo go; sleep 60", queue=queue)
        wait_until(lambda: agent_printing(busy.pk), what="busy")
        sandbox_delete(attempt=done, by="tester")
        wait_until(
            lambda: not containers_of(done.pk),
            timeout=30,  # well inside the busy attempt's 60 s: the delete did not queue behind it
            what="the delete while the host is at capacity",
        )
        busy.refresh_from_db()
        assert busy.status == "running"  # it was still going: the delete did not wait for it
        attempt_cancel(attempt=busy, by="tester")
        wait_finished([busy], timeout=30)
