"""Containers killed or removed from outside Boltz, on the real services (Docker, Redis, a worker
process, the served web): a live API sandbox, pool episode or pipeline attempt whose container is
killed (`docker kill`) or removed (`docker rm -f`) ends at once as an infrastructure error (never
the agent's failure, never a score of 0) and frees its slot; a kept sandbox removed is marked
gone at once and its page offers nothing that needs it; one removed while no worker watched is
marked when the worker starts. A Docker daemon restarted mid-attempt (a second dockerd of the
test's own, never the machine's) ends the attempt and the live sandbox on it as infrastructure
errors with their reason, nothing hangs, and afterwards every container has its attempt. Each
test records its figure (seconds from the fault to the mark) for docs/RELIABILITY.md."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from attempts.api.tokens import token_create
from attempts.dispatch import protocol as p
from attempts.dispatch.errors import InfrastructureFault
from attempts.models import DONE_STATUSES, Attempt, EventKind, Outcome, SandboxState, Status
from attempts.services.attempts import attempt_create
from tests.conftest import (
    agent_printing,
    containers_of,
    require,
    run_web,
    run_worker,
    sdk_client,
    wait_finished,
    wait_until,
)
from tests.daemons import SecondDaemon

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.docker,
    pytest.mark.worker,
    pytest.mark.timeout(180),
]

GONE_BY = "outside Boltz (its container was removed)"


def docker_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)


def fault(kind: str, container: str) -> None:
    """What an operator does from outside: `docker kill` or `docker rm -f`."""
    argv = ("kill", container) if kind == "kill" else ("rm", "-f", container)
    assert docker_cli(*argv).returncode == 0


def seconds_since(when, attempt_id: int, field: str = "finished_at") -> float:
    return round((getattr(Attempt.objects.get(pk=attempt_id), field) - when).total_seconds(), 3)


def seconds_to_mark(when, attempt: Attempt) -> float:
    """From the fault to the event that marks the sandbox as no longer live (the events
    listener's, with what Docker saw and when)."""
    (marked,) = attempt.events.filter(data__has_key="docker_event_at")
    assert marked.data["infrastructure"] and "not by Boltz" in marked.data["message"]
    return round((marked.time - when).total_seconds(), 3)


# "At once", on a machine shared by many: seconds within which a fault must be marked.
AT_ONCE = 10


def assert_infra_error(attempt: Attempt) -> None:
    assert attempt.status == Status.FINISHED, attempt.status
    assert attempt.outcome == Outcome.INFRA_ERROR and attempt.score is None
    assert attempt.checks.count() == 0


@pytest.fixture(scope="module")
def host(django_db_setup, django_db_blocker, docker_ready, redis_ready):
    """A worker of capacity 1 on a queue and host of its own, and a web process sending there:
    a slot not freed shows at once, as the next sandbox cannot start."""
    queue, name = f"faults-{uuid.uuid4().hex[:8]}", f"faults-{uuid.uuid4().hex[:4]}"
    with run_worker(queue=queue, host=name, capacity=1), run_web({"BOLTZ_QUEUE": queue}) as url:
        yield SimpleNamespace(queue=queue, name=name, url=url)


@contextlib.contextmanager
def api(url: str, username: str):
    user = get_user_model().objects.create_user(username)
    token = token_create(user=user)[1]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        yield client


@pytest.mark.parametrize("kind", ["kill", "rm"])
def test_a_live_api_sandbox_whose_container_goes_ends_at_once_and_frees_its_slot(
    host, load_example, figure, kind
):
    load_example("fix-add")
    with api(host.url, f"alice-{kind}") as alice:
        created = alice.post("/api/sandboxes", json={"task": "fix-add", "idle_timeout": 600})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        ran = alice.post(f"/api/sandboxes/{sid}/exec", json={"command": "echo hi"}).json()
        assert ran["stdout"] == "hi\n"
        attempt = Attempt.objects.get(pk=sid)
        used = attempt.last_used_at
        at = timezone.now()
        fault(kind, attempt.container_id)
        (ended,) = wait_finished([attempt], timeout=60)
        marked, took = seconds_to_mark(at, ended), seconds_since(at, sid)
        assert_infra_error(ended)
        assert ended.failure_reason.startswith(
            "work: the sandbox's container stopped while it was live, and not by Boltz"
        ), ended.failure_reason
        if kind == "kill":
            assert ended.failure_reason.endswith("is not running (exit code 137)")
        assert marked < AT_ONCE, marked
        # Calls now say why the sandbox ended (the infrastructure's doing, not its client's;
        # one removed is gone), with no worker asked, and leave its idle timer as it was.
        answer = alice.post(f"/api/sandboxes/{sid}/exec", json={"command": "true"})
        if kind == "rm":
            assert (answer.status_code, answer.json()["code"]) == (410, "gone")
            assert answer.json()["detail"] == f"sandbox {sid} was deleted by {GONE_BY}"
        else:
            assert (answer.status_code, answer.json()["code"]) == (502, "infrastructure")
            assert answer.json()["detail"] == (
                f"infrastructure error: the sandbox ended: {ended.failure_reason}"
            )
        state = alice.get(f"/api/sandboxes/{sid}").json()["state"]
        assert state == ("deleted" if kind == "rm" else "closed")
        assert Attempt.objects.get(pk=sid).last_used_at == used
        # Its slot is free: on this host of capacity 1, the next sandbox goes live at once.
        began = time.monotonic()
        again = alice.post("/api/sandboxes", json={"task": "fix-add", "wait": 20})
        assert again.status_code == 201, again.text
        next_live = round(time.monotonic() - began, 3)
        assert alice.delete(f"/api/sandboxes/{again.json()['id']}").status_code == 204
    assert len(containers_of(sid)) == (0 if kind == "rm" else 1)  # a killed one is kept
    figure(
        f"docker {kind} of a live API sandbox: marked in {marked:.2f} s, ended in {took:.2f} s, "
        f"the next sandbox live on its slot in {next_live:.2f} s"
    )


def test_a_pool_episode_killed_between_steps_fails_at_once_and_the_pool_resets_it(
    host, load_example, figure
):
    load_example("fix-add")
    with sdk_client(host.url, "trainer") as client, client.pool(task="fix-add", size=1) as pool:
        pool.reset()
        episode = Attempt.objects.get(pool_id=pool.id, pool_index=0)
        at = timezone.now()
        fault("kill", episode.container_id)
        (ended,) = wait_finished([episode], timeout=60)
        marked, took = seconds_to_mark(at, ended), seconds_since(at, episode.pk)
        assert marked < AT_ONCE, marked
        assert_infra_error(ended)
        assert "not by Boltz" in ended.failure_reason
        assert pool.refresh().envs[0].state == "failed"
        # Its next step is masked as the infrastructure's (once), never a reward of 0.
        (step,) = pool.step(["echo after"])
        assert step.masked and step.reward is None and step.truncated
        assert step.info["failure_kind"] == "infrastructure"
        assert "not by Boltz" in step.info["error"]
        (step,) = pool.step(["echo again"])
        assert step.reward is None and step.info["failure_kind"] == "refused"
        assert pool.refresh().masked == 1
        # Its slot is free: the environment's next episode starts on this host of capacity 1.
        pool.reset()
        fresh = Attempt.objects.get(pool_id=pool.id, pool_index=0, status=Status.RUNNING)
        assert fresh.pk != episode.pk
        (step,) = pool.step(["echo fresh"])
        assert step.observation.stdout == "fresh\n" and not step.masked
    figure(
        f"docker kill of a pool episode between steps: marked in {marked:.2f} s, failed in {took:.2f} s"
    )


@pytest.mark.parametrize("kind", ["kill", "rm"])
def test_a_pipeline_attempt_whose_container_goes_mid_step_is_an_infrastructure_error(
    host, load_example, figure, kind
):
    task = load_example("fix-add")
    attempt = attempt_create(
        task=task, agent="command", command="echo go; sleep 600", queue=host.queue
    )
    wait_until(lambda: agent_printing(attempt.pk), timeout=120, what="the agent to start")
    attempt.refresh_from_db()
    at = timezone.now()
    fault(kind, attempt.container_id)
    (ended,) = wait_finished([attempt], timeout=60)
    took = seconds_since(at, attempt.pk)
    assert_infra_error(ended)
    assert ended.failure_reason.startswith("work: "), ended.failure_reason
    assert ended.events.filter(kind=EventKind.ERROR, data__infrastructure=True).exists()
    if kind == "kill":
        assert "is not running (exit code 137)" in ended.failure_reason
        assert ended.sandbox_state == SandboxState.STOPPED and len(containers_of(attempt.pk)) == 1
    else:
        assert "no longer exists" in ended.failure_reason or "not running" in ended.failure_reason
        assert ended.sandbox_state == SandboxState.DELETED and ended.sandbox_deleted_by == GONE_BY
        assert not containers_of(attempt.pk)
    assert took < AT_ONCE, took
    figure(f"docker {kind} of a pipeline attempt mid-step: ended in {took:.2f} s")


@contextlib.contextmanager
def signed_in(url: str, username: str):
    """A browser-like client of the served web, signed in as a new superuser (who is offered
    every action a page has)."""
    get_user_model().objects.create_superuser(username, "", "review-pass")
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/login/")
        answer = client.post(
            "/login/",
            data={
                "username": username,
                "password": "review-pass",
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            headers={"Referer": url + "/login/"},
        )
        assert answer.status_code == 302, answer.text[:500]
        yield client


def test_a_kept_sandbox_removed_outside_boltz_is_marked_gone_at_once(host, load_example, figure):
    task = load_example("fix-add")
    (attempt,) = wait_finished([attempt_create(task=task, agent="noop", queue=host.queue)])
    assert attempt.sandbox_state == SandboxState.STOPPED
    with signed_in(host.url, "reviewer") as browser:
        page = browser.get(f"/attempts/{attempt.pk}/").text
        assert "Re-check</button>" in page and "Delete sandbox</button>" in page
        # A kept sandbox is stopped: `docker kill` has nothing to kill, and nothing changes.
        assert docker_cli("kill", attempt.container_id).returncode != 0
        assert Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.STOPPED
        at = timezone.now()
        assert docker_cli("rm", attempt.container_id).returncode == 0
        wait_until(
            lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.DELETED,
            timeout=AT_ONCE * 2,
            what="the kept sandbox to be marked gone",
        )
        took = seconds_since(at, attempt.pk, "sandbox_deleted_at")
        attempt.refresh_from_db()
        assert attempt.sandbox_deleted_by == GONE_BY and attempt.outcome == Outcome.FAILED
        page = browser.get(f"/attempts/{attempt.pk}/").text
        assert "gone: removed outside Boltz" in page
        assert "Re-check</button>" not in page and "Delete sandbox</button>" not in page
        assert "removed outside Boltz" in page  # on its timeline too
    assert took < AT_ONCE, took
    figure(f"docker rm of a kept sandbox: marked gone in {took:.2f} s, no Re-check offered")


def test_a_kept_sandbox_removed_while_no_worker_watched_is_marked_when_one_starts(
    django_db_setup, docker_ready, redis_ready, load_example, figure
):
    queue, name = f"missed-{uuid.uuid4().hex[:8]}", f"missed-{uuid.uuid4().hex[:4]}"
    task = load_example("fix-add")
    with run_worker(queue=queue, host=name, capacity=1):
        (attempt,) = wait_finished([attempt_create(task=task, agent="noop", queue=queue)])
    assert attempt.sandbox_state == SandboxState.STOPPED
    assert docker_cli("rm", attempt.container_id).returncode == 0
    began = timezone.now()
    with run_worker(queue=queue, host=name, capacity=1):
        wait_until(
            lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.DELETED,
            timeout=60,
            what="the reaper of the starting worker to mark it",
        )
    took = seconds_since(began, attempt.pk, "sandbox_deleted_at")
    assert Attempt.objects.get(pk=attempt.pk).sandbox_deleted_by == GONE_BY
    figure(
        f"docker rm of a kept sandbox while no worker ran: marked gone {took:.1f} s after one started"
    )


def test_a_call_that_fails_on_a_dead_container_marks_it_and_leaves_its_idle_timer(
    docker_ready, load_example, settings
):
    """With no listener at all (no worker of this host): the operation that finds the
    container dead judges it when it ends, and its failure is no use of the sandbox."""
    from attempts.run import operations
    from attempts.run.director import sandbox_spec
    from attempts.run.docker.runtime import Sandbox

    settings.BOLTZ_HOST = f"unwatched-{uuid.uuid4().hex[:4]}"
    task = load_example("fix-add")
    before = timezone.now() - timedelta(seconds=100)
    attempt = Attempt.objects.create(
        task=task,
        number=1,
        origin="api",
        status=Status.RUNNING,
        host=settings.BOLTZ_HOST,
        last_used_at=before,
        idle_timeout=600,
    )
    sandbox = Sandbox.create(sandbox_spec(attempt, "agent"))
    sandbox.start()
    Attempt.objects.filter(pk=attempt.pk).update(
        container_id=sandbox.id, sandbox_state=SandboxState.LIVE
    )
    try:
        ran = operations.run_operation(attempt.pk, p.ExecRequest(command="echo hi"))
        assert ran.stdout == "hi\n"
        assert Attempt.objects.get(pk=attempt.pk).last_used_at > before
        Attempt.objects.filter(pk=attempt.pk).update(last_used_at=before)
        fault("kill", sandbox.id)
        with pytest.raises(InfrastructureFault):
            operations.run_operation(attempt.pk, p.ExecRequest(command="echo hi"))
        attempt.refresh_from_db()
        assert attempt.last_used_at == before
        assert attempt.sandbox_state == SandboxState.STOPPED  # its holder ends it
        assert attempt.events.filter(data__infrastructure=True).count() == 1
    finally:
        sandbox.remove()


def test_a_process_killed_for_memory_is_noted_and_its_sandbox_lives_on(host, load_example):
    """Out of memory kills a client's process, never the sandbox: its init is out of reach,
    so no container dies; the kill is said on the timeline."""
    load_example("fix-add", memory_bytes=128 * 2**20)
    with api(host.url, "hungry") as client:
        created = client.post("/api/sandboxes", json={"task": "fix-add"})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        hog = "python3 -c \"b = b'x' * (512 * 2**20)\""
        ran = client.post(f"/api/sandboxes/{sid}/exec", json={"command": hog}).json()
        assert ran["exit_code"] == 137, ran
        wait_until(
            lambda: (
                Attempt.objects.get(pk=sid)
                .events.filter(data__message__startswith="out of memory: the kernel killed")
                .exists()
            ),
            timeout=AT_ONCE,
            what="the out-of-memory note",
        )
        alive = client.post(f"/api/sandboxes/{sid}/exec", json={"command": "echo alive"}).json()
        assert alive["stdout"] == "alive\n"
        assert Attempt.objects.get(pk=sid).status == Status.RUNNING
        assert client.delete(f"/api/sandboxes/{sid}").status_code == 204


# --- a Docker daemon restarted mid-attempt ---------------------------------------------------------
@pytest.fixture(scope="module")
def daemon(docker_ready):
    """The test's own dockerd (tests/daemons.py: never the machine's), with the sandbox image
    loaded from the machine's; removed with its containers at the end."""
    require(os.geteuid() == 0 and bool(shutil.which("dockerd")), "needs root and dockerd")
    second = SecondDaemon("restart")
    try:
        second.start()
        second.load_image(settings.BOLTZ_DEFAULT_IMAGE)
        yield second
    finally:
        second.remove()


def boltz_containers(daemon: SecondDaemon) -> list[dict]:
    return daemon.containers()


@pytest.mark.timeout(420)
def test_a_docker_daemon_restarted_mid_attempt_ends_it_as_an_infrastructure_error(
    daemon, django_db_setup, redis_ready, load_example, figure
):
    queue, host = f"restart-{uuid.uuid4().hex[:8]}", f"restart-{uuid.uuid4().hex[:4]}"
    task = load_example("fix-add")
    env = {"DOCKER_HOST": daemon.url}
    with (
        run_worker(queue=queue, host=host, capacity=3, env=env),
        run_web({"BOLTZ_QUEUE": queue}) as url,
    ):
        (kept,) = wait_finished([attempt_create(task=task, agent="noop", queue=queue)], 120)
        assert kept.sandbox_state == SandboxState.STOPPED
        pipeline = attempt_create(
            task=task, agent="command", command="echo go; sleep 600", queue=queue
        )
        token = token_create(user=get_user_model().objects.create_user("client"))[1]
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as client:
            created = client.post("/api/sandboxes", json={"task": "fix-add", "wait": 120})
            assert created.status_code == 201, created.text
            sandbox = Attempt.objects.get(pk=created.json()["id"])
            wait_until(lambda: agent_printing(pipeline.pk), timeout=120, what="the agent")

            at = timezone.now()
            daemon.stop()
            daemon.start()
            restarted = round((timezone.now() - at).total_seconds(), 3)

            # Nothing hangs: both end, as infrastructure errors with their reason.
            ended = wait_finished([pipeline, sandbox], timeout=120)
            took = {a.pk: round((a.finished_at - at).total_seconds(), 3) for a in ended}
            for attempt in ended:
                assert attempt.status == Status.FINISHED, attempt
                assert attempt.outcome == Outcome.INFRA_ERROR and attempt.score is None
                assert attempt.checks.count() == 0
                assert attempt.failure_reason.startswith("work: "), attempt.failure_reason
                assert attempt.sandbox_state in (SandboxState.STOPPED, SandboxState.DELETED)
            pipeline, sandbox = ended
            # Its reason says what happened: the daemon went, or the container stopped with it.
            assert (
                "Docker daemon unreachable (stopped, or restarting" in pipeline.failure_reason
                or "is not running (exit code" in pipeline.failure_reason
            ), pipeline.failure_reason
            assert "not by Boltz" in sandbox.failure_reason
            answer = client.post(f"/api/sandboxes/{sandbox.pk}/exec", json={"command": "true"})
            assert (answer.status_code, answer.json()["code"]) == (502, "infrastructure")
            assert sandbox.failure_reason in answer.json()["detail"]

        # The host works again: a new attempt runs there.
        (after,) = wait_finished([attempt_create(task=task, agent="noop", queue=queue)], 120)
        assert after.outcome == Outcome.FAILED and after.checks.count() == 1

        # No Boltz container without its attempt; a sandbox kept is there, stopped.
        def tidy() -> bool:
            containers = boltz_containers(daemon)
            ids = {int(c["Labels"]["boltz.attempt"]) for c in containers}
            kept_ids = set(
                Attempt.objects.filter(sandbox_state=SandboxState.STOPPED).values_list(
                    "pk", flat=True
                )
            )
            return all(c["Labels"].get("boltz.role") == "agent" for c in containers) and (
                ids == kept_ids
            )

        wait_until(tidy, timeout=AT_ONCE * 6, what="every container to have its kept attempt")
        assert all(c["State"] != "running" for c in boltz_containers(daemon))
        kept.refresh_from_db()
        assert kept.sandbox_state == SandboxState.STOPPED
    attempts = Attempt.objects.all()
    assert attempts.count() == attempts.filter(status__in=DONE_STATUSES).count() == 4
    figure(
        f"dockerd restarted mid-attempt (down {restarted:.1f} s): the attempt ended in "
        f"{took[pipeline.pk]:.2f} s and the live sandbox in {took[sandbox.pk]:.2f} s after the "
        "restart began, as infrastructure errors; 4 attempts queued, 4 finished, 0 containers "
        "without an attempt"
    )
