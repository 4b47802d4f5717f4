"""Red team round 4: what an API client's check and a pool's submit wait for leaves out the
runner-reach scan (BOLTZ_SCAN_SECONDS, twice for a separate verifier).

Round 3 bounded the scan at BOLTZ_SCAN_SECONDS and added that time to the attempt's own budget
(deadlines.attempt_budget: `reading`). The web's waits were left as they were:
`POST /sandboxes/{id}/check` waits `Task.check_budget` (routes.check_sandbox) and a pool's
submit waits OPERATION_MARGIN + `Task.check_budget` (pools._answer_time), and check_budget is
check_limits + the copying setups + CHECK_MARGIN (120 s): no scan. Before the check of a
sandbox or episode, its changes are recorded and scanned (up to BOLTZ_SCAN_SECONDS = 120 s, the
whole of CHECK_MARGIN), and a separate verifier's handover is scanned again (another 120 s).
Ordinary code slow to read (`getattr(a, b)(c)(d)(e)` lines, tests/test_redteam_slow_scan.py)
lets the agent spend that time on purpose, and code under test that sleeps spends the check's
own limit: the web stops waiting before the worker answers. For a pool that is
`_masked(..., "timeout")`: reward None and a masked step ("an infrastructure failure: no
reward (never 0)"), instead of the reward 0 the check (TIMED_OUT: runner access) would give.
For an API client, a TimedOut while the check goes on.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from attempts.dispatch.deadlines import attempt_budget
from attempts.models import Attempt, Task


@pytest.mark.django_db
@pytest.mark.parametrize("separate", [False, True], ids=["in-sandbox", "separate-verifier"])
def test_hole_the_apis_check_wait_leaves_out_the_scan(make_task, separate):
    task = make_task()
    if separate:
        Task.objects.filter(pk=task.pk).update(verifier_image="boltz-base:bookworm")
        task.refresh_from_db()
    scans = settings.BOLTZ_SCAN_SECONDS * (2 if separate else 1)
    copying = (2 if task.checks_in_place else 1) * task.setup_timeout
    # What the worker may spend before it answers, without any of Docker's own time.
    worker_may_take = scans + task.check_limits + copying
    # The attempt's own budget counts the scan (round 3)...
    api = Attempt(task=task, origin="api")
    assert attempt_budget(api) >= task.check_limits + scans
    # ... the web's wait for that same check must too, with room for containers and trees.
    assert task.check_budget > worker_may_take + 60, (
        f"check_budget {task.check_budget:g}s; the worker may spend {worker_may_take:g}s "
        f"(scan {scans:g}s + check limits {task.check_limits:g}s + copying {copying:g}s) "
        "before it answers: the client/pool stops waiting first (pool: masked, reward None)"
    )
