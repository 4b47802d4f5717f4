"""Retention and the reaper, with real workers, a real beat process and a worker SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from attempts.dispatch.queue import enqueue_reap
from attempts.models import Attempt, Outcome, SandboxState, Status, WorkerHost
from attempts.services.attempts import attempt_create
from tests.conftest import (
    ROOT,
    _worker_database_env,
    agent_printing,
    containers_of,
    run_worker,
    wait_finished,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]


def test_a_worker_killed_mid_attempt_is_marked_and_its_container_reaped(
    django_db_setup, docker_ready, redis_ready, load_example
):
    queue, host = f"lost-{uuid.uuid4().hex[:8]}", f"lost-host-{uuid.uuid4().hex[:4]}"
    task = load_example("fix-add", agent_timeout=10, check_timeout=2, setup_timeout=1)
    # Its deadline passes soon: the smallest margin, and reading its changes for runner access
    # (BOLTZ_SCAN_SECONDS, counted in the deadline) limited too.
    env = {"BOLTZ_DEADLINE_MARGIN": "1", "BOLTZ_SCAN_SECONDS": "1"}
    with run_worker(queue=queue, host=host, capacity=1, env=env) as proc:
        attempt = attempt_create(
            task=task, agent="command", command="echo go; sleep 600", queue=queue
        )
        wait_until(lambda: agent_printing(attempt.pk), what="the agent to start")
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and its pool, mid-attempt
        proc.wait()
    attempt.refresh_from_db()
    assert attempt.status == Status.RUNNING and len(containers_of(attempt.pk)) == 1
    wait_until(
        lambda: timezone.now() > Attempt.objects.get(pk=attempt.pk).deadline_at,
        timeout=60,
        what="the deadline to pass",
    )
    # A new worker on the same host reaps what its lost predecessor left, as it starts.
    with run_worker(queue=queue, host=host, capacity=1, env=env):
        wait_until(
            lambda: Attempt.objects.get(pk=attempt.pk).status == Status.FINISHED,
            what="the reaper to mark the attempt",
        )
        # The reaper removes the container first, then records it: wait for the record.
        wait_until(
            lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.DELETED,
            what="the reaper to remove the container",
        )
    assert not containers_of(attempt.pk)
    attempt.refresh_from_db()
    assert attempt.outcome == Outcome.INFRA_ERROR and attempt.score is None
    # Past its deadline (the reaper as the worker starts), or silent for BOLTZ_LOST_AFTER (its
    # heartbeat, when the worker took that long to start): either way the worker was lost.
    assert attempt.failure_reason.startswith(
        (
            f"worker lost: the attempt was still running on host {host}",
            f"worker lost: the process running the attempt on host {host}",
        )
    )
    assert attempt.sandbox_state == SandboxState.DELETED
    assert WorkerHost.objects.filter(name=host).exists()


def test_reaper_removes_containers_whose_attempt_is_gone_or_expired(worker, load_example, settings):
    task = load_example("fix-add")
    orphan, expired, kept = wait_finished(
        [attempt_create(task=task, agent="noop") for _ in range(3)]
    )
    Attempt.objects.filter(pk=orphan.pk).delete()  # behind Boltz's back: no service called
    Attempt.objects.filter(pk=expired.pk).update(finished_at=timezone.now() - timedelta(days=8))
    # A check container a lost worker left behind for a finished attempt.
    from attempts.run.docker.runtime import Sandbox, SandboxSpec

    Sandbox.create(SandboxSpec(kept.pk, task.image_name, 1, 2**28, 64, role="check")).start()
    assert len(containers_of(kept.pk)) == 2
    enqueue_reap(settings.BOLTZ_HOST)
    # The reaper may first clear containers earlier tests left; give it time.
    wait_until(lambda: not containers_of(orphan.pk), timeout=90, what="the orphan's container")
    wait_until(
        lambda: Attempt.objects.get(pk=expired.pk).sandbox_state == SandboxState.DELETED,
        timeout=90,
        what="the expired sandbox to be recorded as deleted",
    )
    wait_until(lambda: len(containers_of(kept.pk)) == 1, what="the left-over check container")
    assert not containers_of(expired.pk)
    assert containers_of(kept.pk)[0]["labels"]["boltz.role"] == "agent"
    assert Attempt.objects.get(pk=kept.pk).sandbox_state == SandboxState.STOPPED
    assert "past its retention" in Attempt.objects.get(pk=expired.pk).events.last().data["message"]
    assert "past its retention" in expired.events.last().data["message"]


def test_beat_applies_retention_to_kept_sandboxes(worker, load_example, settings):
    task = load_example("fix-add")
    old, fresh = wait_finished([attempt_create(task=task, agent="noop") for _ in range(2)])
    Attempt.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=8))
    env = {
        **os.environ,
        **_worker_database_env(),
        "BOLTZ_RETENTION_INTERVAL": "1",
        "BOLTZ_DATA_DIR": str(settings.DATA_DIR),
    }
    (ROOT / "test-results").mkdir(exist_ok=True)
    log = open(ROOT / "test-results" / f"beat-{os.getpid()}.log", "wb")  # noqa: SIM115
    beat = subprocess.Popen(
        [sys.executable, "manage.py", "run_beat"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(  # beat, then the retention task, then the host's reaper: slow when loaded
            lambda: Attempt.objects.get(pk=old.pk).sandbox_state == SandboxState.DELETED,
            timeout=150,
            what=f"retention to delete the old sandbox (beat's log: {log.name})",
        )
    finally:
        beat.terminate()
        beat.wait(timeout=20)
        log.close()
    old.refresh_from_db()
    assert old.sandbox_deleted_by == "retention" and not containers_of(old.pk)
    assert Attempt.objects.get(pk=fresh.pk).sandbox_state == SandboxState.STOPPED
    assert len(containers_of(fresh.pk)) == 1


def test_the_retention_task_sends_the_reaper_to_every_known_host(
    django_db_setup, redis_ready, monkeypatch
):
    from attempts.dispatch import queue as queueing
    from attempts.run import celery_tasks as tasks

    WorkerHost.objects.create(name="far-host")
    sent = []
    monkeypatch.setattr(queueing, "enqueue_reap", sent.append)
    assert tasks.apply_retention_task() == {"sandboxes_deleted": 0, "attempts_deleted": 0}
    assert "far-host" in sent


def test_a_killed_worker_process_is_noticed_within_a_minute(
    django_db_setup, docker_ready, redis_ready, load_example
):
    """Only the process running the attempt dies (SIGKILL, as the kernel's OOM killer does);
    the host's other workers notice its silence, end the attempt and free its slot."""
    queue, host = f"silent-{uuid.uuid4().hex[:8]}", f"silent-host-{uuid.uuid4().hex[:4]}"
    task = load_example("fix-add")
    with run_worker(queue=queue, host=host, capacity=1, env={"BOLTZ_LOST_AFTER": "10"}) as proc:
        attempt = attempt_create(
            task=task, agent="command", command="echo go; sleep 600", queue=queue
        )
        wait_until(lambda: agent_printing(attempt.pk), what="the agent to start")
        pool = _pool_children(proc.pid, "-n attempts-")
        assert len(pool) == 1
        killed_at = time.monotonic()
        os.kill(pool[0], signal.SIGKILL)
        wait_until(
            lambda: Attempt.objects.get(pk=attempt.pk).status == Status.FINISHED,
            timeout=60,
            what="the lost attempt to be noticed",
        )
        assert time.monotonic() - killed_at < 60
        wait_until(lambda: not containers_of(attempt.pk), what="its container to go")
        attempt.refresh_from_db()
        assert attempt.outcome == Outcome.INFRA_ERROR and attempt.score is None
        assert attempt.failure_reason.startswith(
            f"worker lost: the process running the attempt on host {host} gave no sign of life"
        )
        # Its slot is free again: the next attempt on that host runs.
        after = attempt_create(task=task, agent="noop", queue=queue)
        assert wait_finished([after], timeout=60)[0].outcome == Outcome.FAILED


def _pool_children(root: int, name: str) -> list[int]:
    """The pool processes of the Celery worker named `name` under the process `root`."""
    parents: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(parent, []).append(int(entry))
        commands[int(entry)] = command
    workers = [p for p in parents.get(root, []) if name in commands.get(p, "")]
    return [child for worker in workers for child in parents.get(worker, [])]


def test_the_reaper_leaves_an_imports_snapshot_container_alone_while_it_is_young(docker_ready):
    """An import reads an image's working folder from a container it creates and removes a
    second later; a reaper pass in that second must not take it away."""
    from attempts.run import reaper
    from attempts.run.docker import runtime

    labels = {
        runtime.LABEL_HOST: "test-host",
        runtime.LABEL_INSTANCE: os.environ["BOLTZ_INSTANCE"],
        runtime.LABEL_ROLE: "snapshot",
    }
    created = runtime.client().api.create_container(
        "boltz-sandbox:bookworm", command=["true"], network_disabled=True, labels=labels
    )["Id"]
    try:
        report = reaper.reap_host("test-host")
        assert runtime.inspect_container(created) is not None, report
        assert not any(r.get("why") == "an old snapshot" for r in report.get("removed", []))
    finally:
        runtime.remove_container(created)
