"""Multi-step Harbor tasks ([[steps]]) run as Harbor's MultiStepTrial runs them, on a real
worker and Docker: each step's files and setup.sh, instruction, agent run and verifier in order
in one sandbox; a step below its min_reward ends the attempt; the attempt's reward is the mean
of the steps' (metric by metric, a missing metric counted 0) or the last step's."""

from __future__ import annotations

import shutil

import pytest

from attempts.exports.bundle import attempt_record
from attempts.models import Attempt, EventKind, Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

STEPS = HARBOR / "greet-steps"
# Makes greet.py as step 1 asks, and nothing of step 2: passes the first step only.
HALFWAY = "[ -f greet.py ] || printf 'def greet():\\n    return \"hello\"\\n' > greet.py"


def checks_by_step(attempt: Attempt) -> dict[str, tuple[float | None, dict | None]]:
    return {c.step: (c.score, c.reward) for c in attempt.checks.order_by("pk")}


def told(attempt: Attempt) -> list[str]:
    """What the agent was told at each step (its BOLTZ_INSTRUCTION, as it printed it)."""
    return [
        e.data["stdout"]["head"]
        for e in attempt.events.filter(kind=EventKind.EXEC).order_by("seq")
        if e.data.get("phase") == "end" and e.data.get("step") == "agent"
    ]


def test_the_import_keeps_each_steps_instruction_tests_solution_files_and_limits(docker_ready):
    out = run_import(STEPS)
    assert "created greet-steps" in out
    task = Task.objects.get(slug="greet-steps")
    assert task.multi_step and task.step_rewards == "mean"
    scaffold, implement = task.steps.order_by("position")
    assert (scaffold.name, scaffold.min_reward, scaffold.check_timeout) == (
        "scaffold",
        {"reward": 1.0},
        30.0,
    )
    assert (implement.name, implement.min_reward, implement.agent_timeout) == (
        "implement",
        None,
        45.0,
    )
    assert implement.check_timeout == 60.0  # [verifier]'s, as Harbor's docs say
    assert implement.verifier_env == {"GREETING": "hello"}
    assert "## Step 1: scaffold" in task.instruction and "## Step 2: implement" in task.instruction
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(bytes(implement.check_files))) as tar:
        names = tar.getnames()
    assert {"tests/reward.sh", "tests/test.sh"} <= set(names)  # the task's, the step's over it


@pytest.mark.worker
def test_reference_passes_every_step_and_noop_stops_at_the_first_below_its_min_reward(
    worker, docker_ready, admin_client
):
    run_import(STEPS)
    task = Task.objects.get(slug="greet-steps")
    reference, noop = wait_finished(
        [attempt_create(task=task, agent="reference"), attempt_create(task=task, agent="noop")],
        timeout=180,
    )
    assert reference.outcome == Outcome.PASSED, reference.failure_reason
    assert checks_by_step(reference) == {
        "scaffold": (1.0, {"reward": 1.0}),
        "implement": (1.0, {"reward": 1.0, "style": 1.0}),
        "": (1.0, {"reward": 1.0, "style": 0.5}),  # the mean: scaffold wrote no style (0)
    }
    # The step's files and its setup.sh came before its agent; the diff holds the work.
    assert "b/greetings.txt" in reference.diff and "b/greet.py" in reference.diff
    messages = [e.data.get("message", "") for e in reference.events.order_by("seq")]
    assert "step 1 of 2: scaffold" in messages and "step 2 of 2: implement" in messages
    assert any("step implement's files" in m for m in messages)

    assert noop.outcome == Outcome.FAILED
    assert checks_by_step(noop) == {"scaffold": (0.0, {"reward": 0.0}), "": (0.0, {"reward": 0.0})}
    final = noop.checks.get(step="")
    assert "step implement: not run" in final.output
    assert "stopped after step scaffold: reward 0 < min_reward 1" in final.summary
    assert any(
        "the steps after it do not run, as in Harbor (implement)" in e.data.get("message", "")
        for e in noop.events.filter(kind=EventKind.LIFECYCLE)
    )
    # The attempt page says each step's verdict, and which never ran; so does the export.
    page = admin_client.get(f"/attempts/{noop.pk}/").content.decode()
    assert "<strong>scaffold</strong>" in page and "reward 0 from reward.txt" in page
    assert '<strong>implement</strong> <span class="muted">not run: an earlier step' in page
    task_page = admin_client.get("/tasks/greet-steps/").content.decode()
    assert "<strong>scaffold</strong>" in task_page and "min_reward reward 1.0" in task_page
    checks_page = admin_client.get(f"/attempts/{reference.pk}/?view=check").content.decode()
    assert "Step scaffold" in checks_page and "Every step, combined" in checks_page
    assert [s["step"] for s in attempt_record(reference)["steps"]] == ["scaffold", "implement"]
    assert attempt_record(reference)["steps"][1]["reward"] == {"reward": 1.0, "style": 1.0}


@pytest.mark.worker
def test_a_partial_agent_scores_the_mean_or_the_final_step_as_harbor_computes(
    worker, docker_ready, tmp_path
):
    final = tmp_path / "greet-final"
    shutil.copytree(STEPS, final)
    toml = final / "task.toml"
    toml.write_text(toml.read_text().replace('= "mean"', '= "final"'))
    run_import(STEPS)
    run_import(final)
    command = f'echo "$BOLTZ_INSTRUCTION" | head -1; {HALFWAY}'
    mean, last = wait_finished(
        [
            attempt_create(task=Task.objects.get(slug=slug), agent="command", command=command)
            for slug in ("greet-steps", "greet-final")
        ],
        timeout=180,
    )
    # Each step told the agent its own instruction.
    assert told(mean) == [
        "Create /app/greet.py with a function `greet()` that returns the string `hello`.\n",
        "The task put names.txt in /app. Change `greet` to take a name and return `hello, NAME`, and\n",
    ]
    assert checks_by_step(mean)[""] == (0.5, {"reward": 0.5, "style": 0.0})
    assert mean.outcome == Outcome.FAILED and mean.score == 0.5
    assert checks_by_step(last)[""] == (0.0, {"reward": 0.0, "style": 0.0})
    assert last.score == 0.0


@pytest.mark.worker
def test_an_agent_that_breaks_the_next_steps_setup_gets_a_0_for_it_not_a_mean_of_its_passes(
    worker, docker_ready
):
    """Harbor leaves a step without a reward out of the mean: an agent that passes step 1 and
    then makes step 2's setup.sh fail would score 1. In Boltz that step counts 0."""
    run_import(STEPS)
    task = Task.objects.get(slug="greet-steps")
    (saboteur,) = wait_finished(
        [attempt_create(task=task, agent="command", command=f"{HALFWAY}; mkdir -p setup.log")],
        timeout=180,
    )
    final = saboteur.checks.get(step="")
    assert (final.score, final.passed) == (0.5, False)
    assert "step implement: no reward, counted 0 (step implement: the task's setup.sh exited" in (
        final.output
    )
    assert saboteur.outcome == Outcome.FAILED and saboteur.score == 0.5


def test_api_sandboxes_pools_and_rechecks_say_a_multi_step_task_runs_as_an_attempt(docker_ready):
    from django.contrib.auth import get_user_model

    from attempts.dispatch.errors import InvalidRequest
    from attempts.services.pools import pool_create
    from attempts.services.sandboxes import sandbox_create

    run_import(STEPS)
    user = get_user_model().objects.create_user("stepper")
    with pytest.raises(InvalidRequest, match="greet-steps is a multi-step task"):
        sandbox_create(user=user, task="greet-steps")
    with pytest.raises(InvalidRequest, match="run as an attempt"):
        pool_create(user=user, task="greet-steps", size=1)


# --- Harbor's rules, as pure logic -------------------------------------------------------------
def test_the_mean_counts_a_missing_metric_as_0_and_skips_steps_without_rewards():
    from attempts.run.steps import combine, headline

    per_step = [{"reward": 1.0}, None, {"reward": 0.0, "style": 1.0}]
    assert combine(per_step, "mean") == {"reward": 0.5, "style": 0.5}
    assert combine(per_step, "final") == {"reward": 0.0, "style": 1.0}
    assert combine([{"reward": 1.0}, None], "final") is None  # the last that ran gave none
    assert combine([None], "mean") is None
    assert headline({"style": 0.25, "speed": 0.75}) == 0.5 and headline({"reward": 0.2}) == 0.2


def test_a_step_left_without_a_reward_counts_0():
    from attempts.run.steps import step_rewards

    assert step_rewards(None) == {"reward": 0.0}


def test_min_reward_stops_below_it_and_on_a_metric_the_step_did_not_write():
    from attempts.run.steps import below_minimum

    assert below_minimum({"reward": 0.5}, {"reward": 0.5}) == ""
    assert below_minimum({"reward": 0.4}, {"reward": 0.5}) == "reward 0.4 < min_reward 0.5"
    assert below_minimum({"reward": 1.0}, {"style": 0.5}) == "it wrote no 'style' (min_reward 0.5)"
    assert below_minimum(None, None) == ""
