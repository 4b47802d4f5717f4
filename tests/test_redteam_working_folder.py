"""Red team (23b): a root agent (Harbor's default) replaces its working folder with a file.
The check then ends every agent process by stopping the container and starting it again
(kill_all_processes, or the separate verifier's `agent.start()` afterwards); Docker makes the
container's working folder at each start and cannot: `500 ... /start: Internal Server Error
("Cannot mkdir: /app is not a directory")`, read as the daemon failing. The agent did not do
the task; its attempt becomes an infrastructure error, out of the scores.

Round 1 made a working folder Docker cannot *read* (PathUnreadable) the agent's failure; a
container Docker cannot *start* because of what the agent left is not covered."""

from __future__ import annotations

import pytest

from attempts.models import Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

BREAK = "cd / && rm -rf /app && echo x > /app"


@pytest.mark.worker
@pytest.mark.parametrize("example", ["csv-sum", "separate-grader"])
def test_a_working_folder_replaced_by_a_file_is_the_agents_failure(example, worker, docker_ready):
    run_import(HARBOR / example)
    task = Task.objects.get(slug=example)
    (attempt,) = wait_finished([attempt_create(task=task, agent="command", command=BREAK)], 240)
    # Observed (csv-sum, in place): infra_error, "check: Docker daemon unreachable or failing:
    # 500 Server Error ... /start: Internal Server Error ("Cannot mkdir: /app is not a
    # directory")", score None.
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.0, (
        attempt.outcome,
        attempt.failure_reason,
    )
