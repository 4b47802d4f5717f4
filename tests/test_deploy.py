"""docs/DEPLOY.md, held to what it says: draining a host (manage.py drain_host) before its
worker stops, the systemd units run as systemd runs them, and the environment table."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from attempts.models import Outcome, Status
from attempts.services.attempts import attempt_create
from tests.conftest import (
    ROOT,
    _worker_database_env,
    agent_printing,
    run_worker,
    wait_finished,
    wait_until,
)


def manage(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **_worker_database_env()},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(420)
def test_a_drained_host_ends_what_it_runs_and_takes_nothing_new(
    load_example, docker_ready, redis_ready
):
    task = load_example("fix-add")
    queue, tag = f"drain-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:4]
    first, second = f"drain-a-{tag}", f"drain-b-{tag}"
    with run_worker(queue=queue, host=first, capacity=2):
        running = attempt_create(
            task=task, agent="command", command="echo go; sleep 8", queue=queue
        )
        wait_until(lambda: agent_printing(running.pk), 120, "the agent to start")
        told = manage("drain_host", first)
        assert told.returncode == 0, told.stderr
        assert f"boltz: host {first} takes no new work (attempts-" in told.stdout
        assert "1 attempt(s) running and 1 live sandbox(es)" in told.stdout
        # It has a free slot, yet takes nothing new.
        waiting = attempt_create(task=task, agent="command", command="true", queue=queue)
        drained = manage("drain_host", first, "--wait", "150")
        assert drained.returncode == 0, drained.stderr
        assert drained.stdout.rstrip().endswith(
            f"boltz: host {first} is drained: stop its worker now"
        )
        running.refresh_from_db()
        assert running.status == Status.FINISHED and running.outcome == Outcome.FAILED
        waiting.refresh_from_db()
        assert waiting.status == Status.QUEUED and not waiting.host
    # Its worker stopped; another host takes what waited.
    with run_worker(queue=queue, host=second, capacity=1):
        (done,) = wait_finished([waiting])
    assert done.host == second and done.outcome == Outcome.FAILED


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_draining_a_host_no_worker_of_which_answers_says_so(redis_ready):
    refused = manage("drain_host", "no-such-host")
    assert refused.returncode == 1
    assert "host no-such-host: no worker of it answers through Redis" in refused.stderr
