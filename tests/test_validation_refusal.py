"""Validation's refusal quotes the line of the reference's check output that says what went
wrong, so the task's author sees why without opening the attempt."""

from __future__ import annotations

import pytest

from attempts.models import Attempt, CheckResult, Outcome, Status, Task
from attempts.services.validation import first_error_line, refresh_validation, verdict
from tests.conftest import new_task

pytestmark = pytest.mark.django_db

COLLECTION_ERROR = """\
==================================== ERRORS ====================================
_____________________ ERROR collecting tests/test_dates.py _____________________
ImportError while importing test module '/workspace/tests/test_dates.py'.
Hint: make sure your test modules/packages have valid and correct names.
Traceback:
/usr/lib/python3.11/importlib/__init__.py:126: in import_module
    return _bootstrap._gcd_import(name[level:], package)
tests/test_dates.py:1: in <module>
    import dateutil
E   ModuleNotFoundError: No module named 'dateutil'
=========================== short test summary info ============================
ERROR tests/test_dates.py
1 error in 0.05s
"""

ASSERTION_FAILURE = """\
    def test_add():
>       assert add(2, 3) == 5
E       assert -1 == 5
E        +  where -1 = add(2, 3)

tests/test_calc.py:5: AssertionError
=========================== short test summary info ============================
FAILED tests/test_calc.py::test_add - assert -1 == 5
1 failed in 0.02s
"""


def validation_pair(reference_outcome=Outcome.FAILED, outputs=(), slug="t"):
    """A task under validation: a finished reference attempt (#1) whose checks printed
    `outputs`, in order, and a noop attempt (#2) that failed."""
    task = new_task(slug)
    reference = Attempt.objects.create(
        task=task, number=1, agent="reference", status=Status.FINISHED, outcome=reference_outcome
    )
    for output in outputs:
        CheckResult.objects.create(
            attempt=reference, passed=False, score=0.0, source="exit_code", output=output
        )
    noop = Attempt.objects.create(
        task=task, number=2, agent="noop", status=Status.FINISHED, outcome=Outcome.FAILED
    )
    Task.objects.filter(pk=task.pk).update(
        validation="running", validation_reference=reference, validation_noop=noop
    )
    return task, reference, noop


def test_the_task_page_note_quotes_the_exception_of_the_failed_reference():
    task, _, _ = validation_pair(outputs=[COLLECTION_ERROR])
    refresh_validation(task.pk)
    task.refresh_from_db()
    assert task.validation == "invalid"
    assert task.validation_note == (
        "reference failed (t #1, failed): the check does not pass with the reference solution: "
        "ModuleNotFoundError: No module named 'dateutil'"
    )


def test_an_assertion_is_quoted_from_pytest_and_the_last_check_is_the_one_quoted():
    _, reference, noop = validation_pair(outputs=[COLLECTION_ERROR, ASSERTION_FAILURE])
    mark, note = verdict(reference, noop)
    assert mark == "invalid"
    assert note.endswith("with the reference solution: assert -1 == 5")


def test_a_reference_that_passes_while_noop_also_passes_quotes_nothing():
    _, reference, noop = validation_pair(reference_outcome=Outcome.PASSED)
    noop.outcome = Outcome.PASSED
    assert verdict(reference, noop) == (
        "invalid",
        "noop passed (t #2): the check passes without any change",
    )


def test_a_reference_with_no_check_output_keeps_the_plain_refusal():
    _, reference, noop = validation_pair(reference_outcome=Outcome.AGENT_TIMEOUT)
    assert verdict(reference, noop) == (
        "invalid",
        "reference failed (t #1, agent_timeout): the check does not pass with the reference solution",
    )
    CheckResult.objects.create(attempt=reference, passed=False, score=0.0, source="exit_code")
    assert verdict(reference, noop)[1].endswith("with the reference solution")


@pytest.mark.parametrize(
    ("output", "quoted"),
    [
        (COLLECTION_ERROR, "ModuleNotFoundError: No module named 'dateutil'"),
        (ASSERTION_FAILURE, "assert -1 == 5"),
        (
            'Traceback (most recent call last):\n  File "check.py", line 3, in <module>\n'
            "    data['answer']\nKeyError: 'answer'\n",
            "KeyError: 'answer'",
        ),
        ("FAIL: test_add (tests.test_calc.AddTest)\n----\nRan 1 test\n", "FAIL: test_add"),
        ("calc.c: In function 'add':\ncalc.c:3:5: error: expected ';'\n", "calc.c:3:5: error:"),
        ("checking...\nsh: 1: make: not found\n\n   \n", "sh: 1: make: not found"),
        ("Traceback (most recent call last):\n", ""),
        ("", ""),
    ],
)
def test_the_quoted_line_is_the_one_that_says_what_went_wrong(output, quoted):
    line = first_error_line(output)
    assert line.startswith(quoted) if quoted else line == ""


def test_a_long_error_line_is_clipped_to_200_characters():
    line = first_error_line("ValueError: " + "x" * 500 + "\n")
    assert len(line) == 200 and line.startswith("ValueError: xxx") and line.endswith("…")
