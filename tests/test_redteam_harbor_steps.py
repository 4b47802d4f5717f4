"""Red team (23): multi-step Harbor tasks. An agent that passes step 1 and cannot do step 2
makes step 2 end without a reward (its setup.sh fails on a folder the agent left, or its
verifier hangs on a link the agent left); the step is then left out of the mean and the
attempt scores as if every step it ran had passed."""

from __future__ import annotations

import shutil

import pytest

from attempts.models import Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

STEPS = HARBOR / "greet-steps"
STEP1 = "printf 'def greet():\\n    return \"hello\"\\n' > greet.py"


def _task(tmp_path, slug: str) -> Task:
    folder = tmp_path / slug
    shutil.copytree(STEPS, folder)
    toml = folder / "task.toml"
    # A short verifier limit, so the hanging verifier below runs out quickly.
    text = toml.read_text()
    assert "[verifier]\ntimeout_sec = 60.0" in text
    toml.write_text(
        text.replace("[verifier]\ntimeout_sec = 60.0", "[verifier]\ntimeout_sec = 10.0")
    )
    run_import(folder)
    return Task.objects.get(slug=slug)


@pytest.mark.worker
def test_an_agent_that_only_does_step_1_cannot_score_more_than_half(worker, docker_ready, tmp_path):
    task = _task(tmp_path, "greet-steps-rt")
    # (a) step 1 done; a folder where step 2's setup.sh writes: setup.sh exits 1.
    sabotage_setup = f"[ -f greet.py ] || {{ {STEP1}; mkdir -p setup.log/x; }}"
    # (b) step 1 done; at step 2, greetings.txt -> /dev/zero: its verifier's
    #     `$(cat greetings.txt)` never ends, and the verifier runs out of time.
    hang_verifier = f"if [ -f greet.py ]; then ln -sf /dev/zero greetings.txt; else {STEP1}; fi"
    honest = f"[ -f greet.py ] || {STEP1}"  # the same work, no sabotage: the baseline
    setup, hang, baseline = wait_finished(
        [
            attempt_create(task=task, agent="command", command=cmd)
            for cmd in (sabotage_setup, hang_verifier, honest)
        ],
        timeout=400,
    )
    assert baseline.score == 0.5, baseline.failure_reason  # what doing step 1 only earns
    seen = {}
    for name, attempt in (("setup", setup), ("hang", hang)):
        combined = attempt.checks.get(step="")
        assert attempt.outcome in (Outcome.FAILED, Outcome.PASSED)  # scored either way
        seen[name] = (attempt.score, combined.summary, combined.output)
    # Observed before commit 1b06d52 (made while this ran): both scored 1.0 ({"reward": 1.0}),
    # the sabotaged step left out of the mean. Since then: 0.5, the step counted 0.
    assert all(score <= baseline.score for score, _, _ in seen.values()), seen


@pytest.mark.worker
def test_a_working_folder_that_links_to_itself_is_the_agents_failure(worker, docker_ready):
    """A root agent replaces the working folder with a link to itself after step 1's work:
    Docker answers 500 (`too many links`) when the step's changes are read, which Boltz takes
    for the daemon failing, and the attempt drops out of the scores."""
    run_import(STEPS)
    task = Task.objects.get(slug="greet-steps")
    loop = "cd / && rm -rf /app && ln -s /app /app"
    (attempt,) = wait_finished(
        [attempt_create(task=task, agent="command", command=loop)], timeout=240
    )
    # Observed: infra_error ("... Docker daemon unreachable or failing: 500 ... too many links").
    assert attempt.outcome == Outcome.FAILED, (attempt.outcome, attempt.failure_reason)
