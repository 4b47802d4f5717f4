"""Red team (23b): multi-step Harbor tasks. How an agent's own failure becomes an
infrastructure error (which drops out of scores):

The attempt's time budget (attempt_budget: the worker's soft time limit, the reaper's
deadline) counts the task's [agent] and [verifier] limits once, whatever the number of steps;
each step has its own agent and verifier limits (and its setup.sh, limited by the step's agent
limit, and its healthcheck). An agent that uses its time in every step (slow, or stuck) runs
the attempt past the budget: "the worker's time limit for this attempt ran out", infra_error.
(Another way, the working folder replaced by a file, is not special to steps: see
test_zz_redteam_23b_workdir.py.)
"""

from __future__ import annotations

import pytest

from attempts.dispatch.deadlines import attempt_budget
from attempts.models import Attempt, Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]


def _steps_task(tmp_path, slug: str, *, steps: int, agent: float, verifier: float) -> Task:
    """A task of `steps` steps, each with its own agent and verifier limits; a step's verifier
    rewards /app/done-<n>; no min_reward (Harbor goes on after a step that scored 0)."""
    folder = tmp_path / slug
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim-bookworm\nWORKDIR /app\n"
    )
    toml = [
        'version = "1.0"',
        "[agent]\ntimeout_sec = 10.0",
        "[verifier]\ntimeout_sec = 10.0",
        "[environment]\nallow_internet = false",
    ]
    for n in range(1, steps + 1):
        step = folder / "steps" / f"s{n}"
        (step / "tests").mkdir(parents=True)
        (step / "instruction.md").write_text(f"Create /app/done-{n}.\n")
        (step / "tests" / "test.sh").write_text(
            f"#!/bin/bash\n[ -f /app/done-{n} ] && echo 1 > /logs/verifier/reward.txt "
            "|| echo 0 > /logs/verifier/reward.txt\n"
        )
        toml.append(
            f'[[steps]]\nname = "s{n}"\n[steps.agent]\ntimeout_sec = {agent}\n'
            f"[steps.verifier]\ntimeout_sec = {verifier}"
        )
    (folder / "task.toml").write_text("\n".join(toml) + "\n")
    run_import(folder)
    return Task.objects.get(slug=slug)


def test_the_attempts_budget_holds_every_steps_limits(docker_ready, tmp_path):
    """Harbor's default limits, four steps: the steps alone may take 4 x (600 + 600) s."""
    task = _steps_task(tmp_path, "rt23b-budget", steps=4, agent=600.0, verifier=600.0)
    steps = list(task.steps.all())
    needed = sum(s.agent_timeout + s.check_timeout for s in steps)
    budget = attempt_budget(Attempt(task=task, origin="run"))
    # Observed: budget 920 s (setup 600 + the task's [agent] 10 + [verifier] 10 + margin
    # 300), against 4800 s of step limits.
    assert budget >= needed, f"budget {budget:g}s < {needed:g}s the steps' limits allow"


@pytest.mark.worker
def test_an_agent_that_runs_out_of_time_in_every_step_fails_not_infra_error(
    worker, docker_ready, tmp_path, settings
):
    """The same at a small scale: three steps of 20 s each. The setup limit (600 s, a
    Harbor task has no other) and the deadline margin are scaled down with the rest so the
    test is quick; the shape is the real one: the budget counts one step's limits."""
    task = _steps_task(tmp_path, "rt23b-slow", steps=3, agent=20.0, verifier=10.0)
    Task.objects.filter(pk=task.pk).update(setup_timeout=5)
    settings.BOLTZ_DEADLINE_MARGIN = 10  # read when the attempt is sent (its soft time limit)
    task.refresh_from_db()
    slow = attempt_create(task=task, agent="command", command="sleep 1000")
    (slow,) = wait_finished([slow], timeout=240)
    # Observed: infra_error, "work: the worker's time limit for this attempt ran out" (or the
    # reaper's "worker lost ... past its deadline"): the agent's timeouts drop out of scores.
    assert slow.outcome in (Outcome.FAILED, Outcome.AGENT_TIMEOUT), (
        slow.outcome,
        slow.failure_reason,
    )
    assert slow.score == 0.0
