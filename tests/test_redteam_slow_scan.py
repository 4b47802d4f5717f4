"""Red team (23c): the runner-reach scan of the agent's code has no bound of its own in time,
so an agent can run its attempt past the worker's time limit: infra_error, out of scores.

After the agent's step, `AttemptTrees.record` reads the recorded patch with
`runner_reach.scan_patch_file` (and a separate verifier's handed files go through
`runner_reach.scan_files`). Its cost is per byte, and some ordinary-looking Python is slow to
read: `getattr(a, b)(c)(d)(e)` lines scan at ~0.27 MiB/s here (no finding, so nothing stops
the scan early). The working folder may hold BOLTZ_MAX_TREE_BYTES (2 GB) and the disk
BOLTZ_DISK_LIMIT (2 GB): `yes 'getattr(a, b)(c)(d)(e)' | head -c 1G > big.py` takes the agent
seconds and the scan about an hour, far past the attempt's budget (its unused agent time plus
the check's limits plus BOLTZ_DEADLINE_MARGIN, 300 s). The soft time limit then ends the
attempt as "record: the worker's time limit for this attempt ran out": an infra_error, which
drops out of every score, instead of the agent's failure.

The pipeline test scales it down the way tests/test_redteam_harbor_steps_round2.py does (small
limits and margin, 30 MB of such code); the unit test measures the scan's rate here and sets
it against a default task's budget at full size.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings as django_settings

from attempts.core import runner_reach
from attempts.dispatch.deadlines import attempt_budget
from attempts.models import Attempt, Outcome, Task

SLOW_LINE = "getattr(a, b)(c)(d)(e)\n"


def _patch(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return (
        "diff --git a/big.py b/big.py\nnew file mode 100644\n--- /dev/null\n+++ b/big.py\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines)
    )


@pytest.mark.django_db
def test_reading_the_changes_is_bounded_in_time_and_inside_the_attempts_budget(make_task):
    """Scanning 2 GB of slow-to-read code would take ~2.5 hours (~0.25 MiB/s measured): the
    scan stops at its deadline (BOLTZ_SCAN_SECONDS) and names the file it was reading as too
    long to read, which fails the check as runner access does; the budget holds that time."""
    task = make_task()
    Task.objects.filter(pk=task.pk).update(agent_timeout=1800, check_timeout=600, setup_timeout=600)
    task.refresh_from_db()
    budget = attempt_budget(Attempt(task=task, origin="run"))
    limits = task.setup_timeout + task.agent_timeout + task.check_limits
    assert budget >= limits + django_settings.BOLTZ_SCAN_SECONDS
    patch = _patch(SLOW_LINE * ((4 << 20) // len(SLOW_LINE)))
    started = time.monotonic()
    found = runner_reach.scan_patch(patch, own_packages={"calc"})  # no deadline: read whole
    assert found == [] and time.monotonic() - started > 1  # ordinary code, slow to read
    lines = list(runner_reach.text_lines(patch))
    started = time.monotonic()
    timed = runner_reach.scan_lines(lines, own_packages={"calc"}, deadline=started + 0.5)
    assert time.monotonic() - started < 5
    assert [(f.path, f.what) for f in timed] == [("big.py", runner_reach.TIMED_OUT)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
def test_code_slow_to_scan_is_the_agents_failure_not_an_infrastructure_error(
    django_db_setup, docker_ready, redis_ready, make_task, settings
):
    """30 MB of code slow to read (~2 minutes at ~0.25 MiB/s): on a worker that reads for 5 s
    (BOLTZ_SCAN_SECONDS, and the attempt's budget counts it), the scan stops, names the file as
    too long to read, and the check fails: the agent's failure, never the worker running out
    of time (an infrastructure error, as it was)."""
    import uuid

    from tests.conftest import run_worker, wait_finished
    from tests.test_redteam import launch, verdict

    task = make_task()
    Task.objects.filter(pk=task.pk).update(setup_timeout=10, agent_timeout=20, check_timeout=20)
    task.refresh_from_db()
    settings.BOLTZ_DEADLINE_MARGIN = 10  # read when the attempt is sent (its soft time limit)
    settings.BOLTZ_SCAN_SECONDS = 5
    queue = f"slow-scan-{uuid.uuid4().hex[:8]}"
    slow = f"yes '{SLOW_LINE.strip()}' | head -c 30000000 > big.py\n"
    with run_worker(queue=queue, host="slow-scan", capacity=2, env={"BOLTZ_SCAN_SECONDS": "5"}):
        attempt, honest = wait_finished(
            [launch(task, slow, queue=queue), launch(task, "true\n", queue=queue)], timeout=300
        )
    assert honest.outcome == Outcome.FAILED, verdict(honest)
    # Observed before: infra_error, "record: the worker's time limit for this attempt ran out".
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.0, verdict(attempt)
    assert runner_reach.TIMED_OUT in attempt.failure_reason
