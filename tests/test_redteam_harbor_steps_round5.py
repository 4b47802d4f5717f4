"""Red team (23e): multi-step Harbor tasks.

(a) A later step's own user ([steps.verifier] user / [steps.agent] user) is looked up in the
    sandbox's /etc/passwd only when that step runs, after the earlier steps' agent (root in a
    Harbor task) had the sandbox: an agent that deletes that user makes the lookup raise
    TaskInvalid, which ends the attempt as infra_error ("task cannot run"): its failure drops
    out of the scores. (A single-step task looks its users up at start, before any agent.)

(b) A step stopped by a min_reward on a metric other than `reward` keeps the attempt's score
    at the steps that ran: an agent that writes reward 1 on step 1 and fails its min_reward
    metric scores 1.0 (outcome failed) though step 2 never ran; an honest agent that does
    step 1 and part of step 2 scores less. Training exports with min_score take it as good.
"""

from __future__ import annotations

import pytest

from attempts.models import Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]


def _task(tmp_path, slug: str, *, dockerfile: str, steps: list[tuple[str, str, str]]) -> Task:
    folder = tmp_path / slug
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    toml = [
        'version = "1.0"',
        'multi_step_reward_strategy = "mean"',
        "[agent]\ntimeout_sec = 30.0",
        "[verifier]\ntimeout_sec = 30.0",
        "[environment]\nallow_internet = false",
    ]
    for name, test_sh, extra in steps:
        step = folder / "steps" / name
        (step / "tests").mkdir(parents=True)
        (step / "instruction.md").write_text(f"Do step {name}.\n")
        (step / "tests" / "test.sh").write_text(test_sh)
        toml.append(f'[[steps]]\nname = "{name}"\n{extra}')
    (folder / "task.toml").write_text("\n".join(toml) + "\n")
    run_import(folder)
    return Task.objects.get(slug=slug)


REWARD_IF = (
    "#!/bin/bash\n[ -f /app/{f} ] && echo 1 > /logs/verifier/reward.txt "
    "|| echo 0 > /logs/verifier/reward.txt\n"
)


@pytest.mark.worker
def test_an_agent_that_deletes_a_later_steps_verifier_user_is_not_an_infra_error(
    worker, docker_ready, tmp_path
):
    task = _task(
        tmp_path,
        "rt23e-user",
        dockerfile="FROM python:3.12-slim-bookworm\nRUN useradd -m checker\nWORKDIR /app\n",
        steps=[
            ("s1", REWARD_IF.format(f="done-1"), ""),
            ("s2", REWARD_IF.format(f="done-2"), '[steps.verifier]\nuser = "checker"\n'),
        ],
    )
    # Does step 1, then (root, as Harbor's agent) removes step 2's verifier user.
    saboteur = "touch /app/done-1; sed -i '/^checker:/d' /etc/passwd"
    (attempt,) = wait_finished(
        [attempt_create(task=task, agent="command", command=saboteur)], timeout=300
    )
    # Observed: infra_error, "steps: task cannot run: user: ... checker ..." (no score).
    assert attempt.outcome == Outcome.FAILED, (attempt.outcome, attempt.failure_reason)


@pytest.mark.worker
def test_a_step_stopped_by_min_reward_on_another_metric_does_not_score_1(
    worker, docker_ready, tmp_path
):
    two_metrics = (
        "#!/bin/bash\nr=0; [ -f /app/done-1 ] && r=1\nl=0; [ -f /app/lint-ok ] && l=1\n"
        'printf \'{"reward": %s, "lint": %s}\\n\' "$r" "$l" > /logs/verifier/reward.json\n'
    )
    task = _task(
        tmp_path,
        "rt23e-minmetric",
        dockerfile="FROM python:3.12-slim-bookworm\nWORKDIR /app\n",
        steps=[
            ("s1", two_metrics, "min_reward = { lint = 1.0 }\n"),
            ("s2", REWARD_IF.format(f="done-2"), ""),
        ],
    )
    stopped = attempt_create(task=task, agent="command", command="touch /app/done-1")
    honest = attempt_create(
        task=task, agent="command", command="touch /app/done-1 /app/lint-ok"
    )  # does all of step 1 and none of step 2
    stopped, honest = wait_finished([stopped, honest], timeout=300)
    assert honest.score == 0.5, (honest.outcome, honest.failure_reason)
    combined = stopped.checks.get(step="")
    assert "1 of 2 steps ran" in combined.summary, combined.summary
    # Observed: stopped.score == 1.0 (outcome failed): the step that never ran counts nothing.
    assert stopped.score <= honest.score, (stopped.score, stopped.outcome, combined.summary)


# --- (c) pages: a multi-step attempt's step checks read as re-checks of the same files --------
@pytest.mark.django_db(transaction=False)
def test_the_task_pages_test_grid_does_not_call_two_steps_tests_flaky(admin_client):
    """Each step's check keeps its tests. A test named alike in two steps (Harbor steps share
    the task's tests/, or name their own test files alike) that fails in step 1 and passes in
    step 2 is a different test of different files; the task page's grid calls it flaky
    ("changed outcome between checks of the same files") and shows only the last step's."""
    from django.utils import timezone

    from attempts.models import Attempt, CheckResult, TestOutcome
    from attempts.services.selectors import test_grid
    from tests.conftest import new_task

    task = new_task("rt23e-grid", step_rewards="mean")
    now = timezone.now()
    attempt = Attempt.objects.create(
        task=task,
        number=1,
        agent="command",
        status="finished",
        outcome="failed",
        score=0.5,
        started_at=now,
        finished_at=now,
    )
    for step, outcome, score in (("s1", "failed", 0.0), ("s2", "passed", 1.0)):
        check = CheckResult.objects.create(
            attempt=attempt, step=step, passed=score == 1.0, score=score, summary=step
        )
        TestOutcome.objects.create(
            check_result=check, name="test_state.py::test_ok", outcome=outcome
        )
    CheckResult.objects.create(
        attempt=attempt, step="", passed=False, score=0.5, summary="combined"
    )
    grid = test_grid([attempt])
    page = admin_client.get("/tasks/rt23e-grid/").content.decode()
    # Observed: flaky == ["test_state.py::test_ok"], the page says "Flaky: 1 test changed
    # outcome between checks of the same files", the cell shows "passed" (step 2's).
    assert "changed outcome between checks of the same files" not in page, "page says flaky"
    assert grid["flaky"] == [], grid


# --- what held (kept as regressions) ----------------------------------------------------------
def test_harbor_tasks_fail_their_check_on_runner_access_and_step_names_stay_plain(
    docker_ready, tmp_path
):
    from attempts.core.errors import TaskInvalid
    from tests.test_harbor import HARBOR

    run_import(HARBOR / "greet-steps")
    assert Task.objects.get(slug="greet-steps").runner_access == "fail"
    from attempts.taskio.importers import harbor_config

    for odd in ("é" * 3, "x" * 101, "a b", "../x"):
        assert not harbor_config._STEP_NAME.match(odd), odd
    assert TaskInvalid  # the importer refuses them (harbor_config._steps)
