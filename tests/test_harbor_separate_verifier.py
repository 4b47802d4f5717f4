"""Harbor's separate verifier (environment_mode = "separate" / [verifier.environment]): the
verifier runs in a container of its own, from an image built from tests/Dockerfile (its /tests
inside), as its user in its working folder, handed /logs/artifacts and the task's artifact
paths from the agent's container and nothing else. Real Docker, a real worker."""

from __future__ import annotations

import pytest

from attempts.models import SEPARATE_VERIFIER, Attempt, EventKind, Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import containers_of, wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

GRADER = HARBOR / "separate-grader"


def handover(attempt: Attempt) -> dict:
    (event,) = [
        e.data
        for e in attempt.events.filter(kind=EventKind.LIFECYCLE)
        if e.data.get("check_mode") == SEPARATE_VERIFIER
    ]
    return event


def test_the_import_builds_the_verifiers_image_from_tests(docker_ready):
    out = run_import(GRADER)
    assert "built from tests/Dockerfile" in out and "given /logs/artifacts, /app/out.txt" in out
    task = Task.objects.get(slug="separate-grader")
    assert task.verifier_image.startswith("boltz-task:") and task.verifier_image != task.image
    assert (task.verifier_workdir, task.check_user, task.artifact_paths) == (
        "/grade",
        "grader",
        ["/app/out.txt"],
    )
    assert not task.check_files  # Harbor never uploads a separate verifier's tests


@pytest.mark.worker
def test_the_verifier_runs_apart_with_the_artifacts_only_and_a_link_never_crosses(
    worker, docker_ready, admin_client
):
    run_import(GRADER)
    task = Task.objects.get(slug="separate-grader")
    cheat = (
        "mkdir -p /tests && echo ready > /tests/expected.txt; "  # the agent's own /tests
        "ln -s /tests/expected.txt /app/out.txt; "  # a link to what the verifier compares
        "echo 1 > /logs/verifier/reward.txt 2>/dev/null; "  # a reward in its own container
        "ln -s /etc /logs/artifacts/etc"
    )
    reference, noop, cheater = wait_finished(
        [
            attempt_create(task=task, agent="reference"),
            attempt_create(task=task, agent="noop"),
            attempt_create(task=task, agent="command", command=cheat),
        ],
        timeout=240,
    )
    check = reference.checks.get()
    assert reference.outcome == Outcome.PASSED, (reference.failure_reason, check.output)
    assert check.mode == SEPARATE_VERIFIER and check.reward == {"reward": 1.0}
    # As the verifier's user, in its folder; the artifacts there, nothing else of the agent's.
    assert "verifier: grader in /grade" in check.output
    assert "app: out.txt" in check.output and "notes.txt" not in check.output
    assert "summary: wrote out.txt" in check.output
    assert handover(reference)["artifacts"] == ["/logs/artifacts", "/app/out.txt"]
    assert "b/out.txt" in reference.diff  # the agent's changes are recorded as ever
    page = admin_client.get(f"/attempts/{reference.pk}/").content.decode()
    assert "(checked in the verifier's own container)" in page

    assert noop.outcome == Outcome.FAILED and noop.checks.get().score == 0.0
    assert "/app/out.txt: not in the agent's container" in handover(noop)["left_out"]

    assert cheater.outcome == Outcome.FAILED and cheater.checks.get().score == 0.0
    left = handover(cheater)["left_out"]
    assert "/app/out.txt: not a file or folder" in left and any("etc" in x for x in left)
    # The verifier's containers are gone; the agent's is kept for review.
    for attempt in (reference, noop, cheater):
        assert [c["labels"]["boltz.role"] for c in containers_of(attempt.pk)] == ["agent"]


@pytest.mark.worker
def test_an_api_sandbox_checks_with_the_separate_verifier_and_goes_on_working(
    web, worker, docker_ready
):
    from tests.conftest import sdk_client

    run_import(GRADER)
    with sdk_client(web, "separate-api") as client:
        sandbox = client.sandbox(task="separate-grader")
        try:
            assert not sandbox.check().passed  # nothing written yet
            sandbox.files.write("out.txt", b"ready\n")
            check = sandbox.check()
            assert check.passed and check.reward == {"reward": 1.0}
            assert sandbox.exec("cat out.txt").stdout == "ready\n"  # its sandbox goes on
        finally:
            sandbox.close()
