"""A task's rules, answered by the task itself (attempts/models.py): where its check runs, how
long a check may take, and which values a writer may store. The deadline, the API's check and a
pool's submit read the same answers. Pure: unsaved tasks, no Docker."""

import pytest
from django.conf import settings

from attempts.api import routes
from attempts.core.errors import TaskInvalid
from attempts.core.protected import protection_for
from attempts.core.runner_reach import check_problem
from attempts.dispatch import limits
from attempts.dispatch.deadlines import attempt_budget
from attempts.dispatch.protocol import StepAction
from attempts.models import (
    CHECK_BUDGET_FIELDS,
    CHECK_MARGIN,
    Attempt,
    CheckMode,
    CompiledFiles,
    Layout,
    RewardRules,
    RunnerAccess,
    Task,
)
from attempts.run.scoring import score_check
from attempts.services import pools

SETUP, AGENT, CHECK = 100.0, 1000.0, 10.0

# The three kinds of task: a Harbor task is checked in place whatever its check_mode says.
KINDS = {
    "fresh": {},
    "in_place": {"check_mode": CheckMode.IN_PLACE},
    "harbor": {"layout": Layout.HARBOR},
}


def task(kind: str = "fresh", **fields) -> Task:
    values = {"setup_timeout": SETUP, "agent_timeout": AGENT, "check_timeout": CHECK}
    return Task(slug=f"rules-{kind}", check_command="true", **{**values, **KINDS[kind], **fields})


def test_a_new_task_takes_every_rule_default_from_its_field():
    new = Task()
    assert (new.check_mode, new.layout, new.reward_rules) == ("fresh", "boltz", "boltz")
    assert (new.runner_access, new.compiled_files) == ("fail", "remove")
    for name in ("check_mode", "layout", "reward_rules", "runner_access", "compiled_files"):
        assert Task.rule(name) == getattr(new, name)  # what every writer stores when not told


@pytest.mark.parametrize(
    "kind, in_place, setups", [("fresh", False, 1), ("in_place", True, 0), ("harbor", True, 0)]
)
def test_where_the_check_runs_and_how_many_setups_it_runs(kind, in_place, setups):
    assert task(kind).checks_in_place is in_place
    assert task(kind).check_setups == setups
    assert task(kind).check_limits == setups * SETUP + CHECK


def test_a_harbor_task_checks_in_place_even_when_its_check_mode_says_fresh():
    harbor = task("harbor", check_mode=CheckMode.FRESH)
    assert harbor.checks_in_place is True and harbor.check_setups == 0


def test_a_rebuild_adds_its_containers_setup_and_itself_to_a_fresh_check_only():
    rebuild = "python3 setup.py build_ext --inplace"
    assert task("fresh", rebuild_command=rebuild).check_setups == 3
    assert task("in_place", rebuild_command=rebuild).check_setups == 0  # no rebuild in place


@pytest.mark.parametrize("kind", KINDS)
def test_the_check_budget_is_never_less_than_callers_waited_before(kind):
    # The API and a pool's submit waited 2 setups + the check + 120 s for every task; now
    # also the time the changes are read for runner access first (BOLTZ_SCAN_SECONDS).
    scan = settings.BOLTZ_SCAN_SECONDS
    assert task(kind).check_budget == 2 * SETUP + CHECK + CHECK_MARGIN + scan == 330 + scan
    rebuilt = task(kind, rebuild_command="make")
    expected = (4 * SETUP if kind == "fresh" else 2 * SETUP) + CHECK + 120 + scan
    assert rebuilt.check_budget == expected
    # A separate verifier's handover is read too.
    assert task(kind, verifier_image="grader:1").check_budget == 330 + 2 * scan


@pytest.mark.parametrize("kind", KINDS)
def test_the_budget_covers_the_checks_own_limits_and_its_margin(kind):
    rules = task(kind)
    assert rules.check_budget >= rules.check_limits + CHECK_MARGIN


@pytest.mark.parametrize(
    "kind, setups",
    # An in-place check sets nothing up again: only the agent's container is set up (a Harbor
    # task used to be given the second setup of a fresh check it never runs).
    [("fresh", 2), ("in_place", 1), ("harbor", 1)],
)
def test_the_deadline_counts_the_agents_setup_its_work_and_the_checks_limits(kind, setups):
    rules = task(kind)
    budget = attempt_budget(Attempt(task=rules, origin="run"))
    scan = settings.BOLTZ_SCAN_SECONDS  # the changes read for runner access
    margin = settings.BOLTZ_DEADLINE_MARGIN
    assert budget == SETUP + AGENT + rules.check_limits + scan + margin
    assert budget == setups * SETUP + AGENT + CHECK + scan + margin


class _Asked(Exception):
    pass


@pytest.mark.parametrize("kind", KINDS)
def test_the_api_check_waits_for_the_tasks_check_budget(kind, monkeypatch):
    rules, waited = task(kind), []

    def operate(attempt, request, *, timeout):
        waited.append((request.op, timeout))
        raise _Asked

    monkeypatch.setattr(routes, "sandbox_for", lambda user, sandbox_id: Attempt(task=rules))
    monkeypatch.setattr(routes.sandboxes, "operate", operate)
    request = type("Request", (), {"user": None})()
    with pytest.raises(_Asked):
        routes.check_sandbox(request, 1)
    assert waited == [("check", rules.check_budget)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_pools_submit_waits_for_the_tasks_check_budget(kind):
    rules = task(kind)
    waits = pools._answer_time(Attempt(task=rules), StepAction(submit=True), None)
    assert waits == limits.OPERATION_MARGIN + rules.check_budget


@pytest.mark.django_db
def test_a_task_loaded_with_the_budgets_fields_answers_without_another_query(
    django_assert_num_queries,
):
    saved = task("in_place", rebuild_command="make", base_commit="0" * 40)
    saved.save()
    loaded = Task.objects.only(*CHECK_BUDGET_FIELDS).get(pk=saved.pk)
    with django_assert_num_queries(0):
        assert loaded.check_budget == saved.check_budget


# --- the writers' one check -------------------------------------------------------------------


def test_a_rule_outside_its_choices_is_refused_naming_them():
    with pytest.raises(TaskInvalid) as refused:
        Task.rule("check_mode", "sideways")
    assert refused.value.field == "check_mode"
    assert refused.value.message == (
        "'sideways': expected \"fresh\" (the base with the agent's changes applied) or "
        '"in_place" (in the agent\'s own container)'
    )
    with pytest.raises(TaskInvalid) as refused:
        Task.rule("runner_access", "warn", field="row.runner_access")
    assert refused.value.field == "row.runner_access"
    assert refused.value.message == (
        "'warn': expected \"fail\" (the check fails when the agent's code reaches into the test "
        'runner) or "report" (it is only listed in the tamper report)'
    )


@pytest.mark.parametrize("value", [["fresh"], 1, True, ""])
def test_a_rule_that_is_not_one_of_the_strings_is_refused_not_crashed_on(value):
    with pytest.raises(TaskInvalid, match="expected"):
        Task.rule("check_mode", value)


@pytest.mark.parametrize(
    "name, choices",
    [
        ("check_mode", CheckMode),
        ("layout", Layout),
        ("reward_rules", RewardRules),
        ("runner_access", RunnerAccess),
        ("compiled_files", CompiledFiles),
    ],
)
def test_every_choice_of_a_rule_is_accepted_as_it_is(name, choices):
    for choice in choices:
        assert Task.rule(name, choice.value) == choice


# --- the pure modules read the same values ------------------------------------------------------


def test_the_pure_modules_read_the_rules_values():
    """The scanner, the protection and the scoring take a task's rule as its stored string."""
    tamper = {"runner_access": [{"path": "calc.py", "line": 1, "what": "os._exit", "text": ""}]}
    assert check_problem(tamper, RunnerAccess.FAIL)
    assert check_problem(tamper, RunnerAccess.REPORT) == ""
    assert protection_for([], compiled_files=CompiledFiles.REMOVE).compiled is True
    assert protection_for([], compiled_files=CompiledFiles.ALLOW).compiled is False
    missing = {"exit_code": 0, "timed_out": False, "files": {}, "reward_file": True}
    assert score_check(**missing, rules=RewardRules.BOLTZ).error == ""
    assert score_check(**missing, rules=RewardRules.HARBOR).error  # Harbor: a verifier error
