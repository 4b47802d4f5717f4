"""Cancel, re-run and re-check with a real worker."""

from __future__ import annotations

import pytest

from attempts.core.errors import TaskInvalid
from attempts.models import Attempt, EventKind, Outcome, SandboxState, Status
from attempts.services.attempts import (
    attempt_cancel,
    attempt_create,
    attempt_recheck,
    attempt_rerun,
)
from tests.conftest import agent_printing, containers_of, new_task, wait_finished, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

# A check whose first run passes both tests and whose re-runs fail one: flaky on purpose.
FLAKY_CHECK = (
    "if [ -e /tmp/checked-once ]; then b='<failure message=\"flaky\"/>'; sleep 2; else b=''; fi; "
    "touch /tmp/checked-once; "
    'printf \'<testsuite><testcase classname="t" name="stable"/>'
    '<testcase classname="t" name="shaky">%s</testcase></testsuite>\' "$b" '
    "> $BOLTZ_CHECK_DIR/junit.xml"
)


def test_cancelling_a_queued_attempt_ends_it_at_once(db):

    task = new_task()
    attempt = Attempt.objects.create(task=task, number=1, agent="noop")
    assert attempt_cancel(attempt=attempt, by="erin") is True
    attempt.refresh_from_db()
    assert (attempt.status, attempt.outcome) == (Status.CANCELLED, Outcome.CANCELLED)
    assert attempt.failure_reason == "cancelled by erin before it started"
    assert attempt_cancel(attempt=attempt, by="erin") is False


def test_cancelling_a_running_attempt_stops_its_process_and_container(worker, load_example):
    task = load_example("fix-add")
    attempt = attempt_create(task=task, agent="command", command="echo go; sleep 300")
    wait_until(lambda: agent_printing(attempt.pk), what="the agent")
    assert attempt_cancel(attempt=attempt, by="frank") is True
    attempt = wait_finished([attempt], timeout=30)[0]
    assert (attempt.status, attempt.outcome) == (Status.CANCELLED, Outcome.CANCELLED)
    assert attempt.failure_reason == "cancelled by frank" and attempt.score is None
    assert attempt.duration < 20
    assert attempt.sandbox_state == SandboxState.STOPPED  # kept for review, not running
    (container,) = containers_of(attempt.pk)
    assert container["status"] == "exited"
    # The command the cancel cut short still has its end, with the output it printed.
    (end,) = attempt.events.filter(kind=EventKind.EXEC, data__step="agent", data__phase="end")
    assert end.data["stopped"] == "cancelled by frank" and end.data["exit_code"] is None
    assert end.data["stdout"]["head"].startswith("go")


def test_rerun_makes_a_new_attempt_with_the_same_agent(worker, load_example):
    task = load_example("fix-add")
    first = wait_finished(
        [
            attempt_create(
                task=task,
                agent="command",
                command="sh $BOLTZ_AGENT_DIR/fix.sh",
                files={"fix.sh": b"sed -i 's/a - b/a + b/' calc.py\n"},
            )
        ]
    )[0]
    again = wait_finished([attempt_rerun(attempt=first, by="gina")])[0]
    assert again.number == first.number + 1 and again.rerun_of_id == first.pk
    assert (again.agent, again.agent_command) == ("command", first.agent_command)
    assert [f["name"] for f in again.agent_files] == ["fix.sh"]
    assert again.outcome == Outcome.PASSED == first.outcome


def test_recheck_keeps_both_results_and_flags_the_tests_that_flipped(worker, load_example):
    # In place: the flaky check remembers, in /tmp, that it ran before.
    task = load_example("fix-add", check_command=FLAKY_CHECK, check_mode="in_place")
    attempt = wait_finished([attempt_create(task=task, agent="noop")])[0]
    assert attempt.outcome == Outcome.PASSED
    attempt_recheck(attempt=attempt, by="hana")
    wait_until(
        lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.LIVE,
        what="the sandbox to run again",
    )
    with pytest.raises(TaskInvalid, match="already running"):
        attempt_recheck(attempt=Attempt.objects.get(pk=attempt.pk), by="hana")
    wait_until(lambda: attempt.checks.count() == 2, what="the re-check")
    requested = attempt.events.get(actor="reviewer", data__action="recheck")
    assert requested.data["message"] == "re-check of the same files by hana"
    first, second = attempt.checks.order_by("pk")
    assert first.passed is True and second.passed is False
    assert second.requested_by == "hana" and second.outcome_changed is True
    flaky = set(second.tests.filter(flaky=True).values_list("name", flat=True))
    assert flaky == {"t::shaky"}
    assert first.tests.get(name="t::shaky").flaky is True
    attempt.refresh_from_db()
    assert attempt.outcome == Outcome.PASSED  # the attempt's own result stays as it was
    wait_until(lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.STOPPED)
    assert containers_of(attempt.pk)[0]["status"] == "exited"


def test_recheck_needs_the_sandbox(worker, load_example):
    from attempts.services.deletion import sandbox_delete

    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="noop")])[0]
    sandbox_delete(attempt=attempt, by="ivan")
    attempt.refresh_from_db()
    with pytest.raises(TaskInvalid, match="sandbox is gone"):
        attempt_recheck(attempt=attempt, by="ivan")


def test_a_recheck_runs_on_the_recorded_changes_in_a_fresh_container(worker, load_example):
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="reference")])[0]
    attempt_recheck(attempt=attempt, by="hana")
    wait_until(lambda: attempt.checks.count() == 2, what="the re-check")
    wait_until(lambda: Attempt.objects.get(pk=attempt.pk).sandbox_state == SandboxState.STOPPED)
    first, second = attempt.checks.order_by("pk")
    assert (first.mode, second.mode) == ("fresh", "fresh")
    assert first.passed and second.passed and second.requested_by == "hana"
    # Exec numbers go on from the first run's: the timeline never shows two exec 3s.
    starts = list(
        attempt.events.filter(kind="exec", data__phase="start").values_list("data", flat=True)
    )
    numbers = [d["exec"] for d in starts]
    assert numbers == sorted(set(numbers))
    assert [c["status"] for c in containers_of(attempt.pk)] == ["exited"]  # the check's went
