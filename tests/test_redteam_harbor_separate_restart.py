"""Red team (23e): Harbor's separate verifier restarts the agent's container after the check
(check.py _check_separate finally), then the attempt keeps it stopped for review. An agent
(root) that leaves its container unable to start again: does the attempt still end with its
own outcome (not infra_error) and a sandbox that is stopped and kept?"""

from __future__ import annotations

import pytest

from attempts.models import Outcome, SandboxState, Task
from attempts.services.attempts import attempt_create
from tests.conftest import containers_of, wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]


@pytest.mark.worker
def test_a_container_that_cannot_start_again_after_a_separate_check(worker, docker_ready):
    run_import(HARBOR / "separate-grader")
    task = Task.objects.get(slug="separate-grader")
    commands = [
        "mv /etc /etc.x && /etc.x/../bin/mkdir -p /etc/hostname /etc/hosts /etc/resolv.conf",
        "mv /etc /etc.x && : > /etc",
        "rm -f /sbin && ln -s /sbin /sbin",
    ]
    done = wait_finished(
        [attempt_create(task=task, agent="command", command=c) for c in commands], timeout=300
    )
    seen = []
    for attempt in done:
        attempt.refresh_from_db()
        boxes = [c for c in containers_of(attempt.pk)]
        seen.append(
            (
                attempt.outcome,
                attempt.failure_reason[:200],
                attempt.sandbox_state,
                [(c.get("role"), c.get("status")) for c in boxes],
            )
        )
    assert all(o == Outcome.FAILED for o, *_ in seen), seen
    assert all(s == SandboxState.STOPPED for _, _, s, _ in seen), seen
