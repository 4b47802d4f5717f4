"""Commands that take an attempt accept its id (17) or TASK#N (fix-add#3, 'fix-add #3'), and
their summaries name it one way: `fix-add #3`."""

from __future__ import annotations

import zipfile
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from attempts.models import Attempt, Outcome, Status
from attempts.services.selectors import attempts_summary
from tests.conftest import new_task

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def fix_add():
    """Task fix-add with finished attempts #1..#4 (#1 and #4 passed) and another task's #1."""
    task = new_task("fix-add")
    attempts = [
        Attempt.objects.create(
            task=task,
            number=n,
            agent="noop",
            status=Status.FINISHED,
            outcome=Outcome.PASSED if n in (1, 4) else Outcome.FAILED,
            score=1.0 if n in (1, 4) else 0.0,
        )
        for n in range(1, 5)
    ]
    Attempt.objects.create(task=new_task("other"), number=1, agent="noop")
    return attempts


def test_export_attempt_takes_the_task_and_number_or_the_id(fix_add, tmp_path):
    third = fix_add[2]
    by_ref = tmp_path / "by-ref.zip"
    out = run("export_attempt", "fix-add#3", "-o", str(by_ref))
    assert f"wrote {by_ref} " in out and out.strip().endswith(": fix-add #3")
    by_id = tmp_path / "by-id.zip"
    assert "fix-add #3" in run("export_attempt", str(third.pk), "-o", str(by_id))
    assert zipfile.is_zipfile(by_ref) and zipfile.is_zipfile(by_id)


def test_a_missing_attempt_number_lists_the_numbers_the_task_has(fix_add, tmp_path):
    with pytest.raises(CommandError) as refused:
        run("export_attempt", "fix-add#9", "-o", str(tmp_path / "x.zip"))
    assert str(refused.value) == "no attempt fix-add #9: task fix-add has attempts #1..#4"
    fix_add[1].delete()
    with pytest.raises(CommandError, match=r"task fix-add has attempts #1, #3\.\.#4$"):
        run("export_attempt", "fix-add#2", "-o", str(tmp_path / "x.zip"))
    assert not (tmp_path / "x.zip").exists()


def test_an_unknown_task_a_task_without_attempts_and_nonsense_are_refused(fix_add, tmp_path):
    new_task("empty")
    target = str(tmp_path / "x.zip")
    with pytest.raises(CommandError, match="no attempt fix-ad #3: there is no task 'fix-ad'"):
        run("export_attempt", "fix-ad#3", "-o", target)
    with pytest.raises(CommandError, match="no attempt empty #1: task empty has no attempts"):
        run("export_attempt", "empty#1", "-o", target)
    with pytest.raises(CommandError, match=r"'fix-add' is not an attempt: use its id \(17\)"):
        run("export_attempt", "fix-add", "-o", target)
    with pytest.raises(CommandError, match=r"no attempt 999999 \(unknown, or deleted\)"):
        run("export_attempt", "999999", "-o", target)


def test_delete_attempts_mixes_ids_and_task_numbers_and_names_both(fix_add):
    first, second, third, _ = fix_add
    out = run("delete_attempts", "fix-add#2", str(third.pk), "fix-add #1", "--dry-run")
    assert out.splitlines() == [
        "would delete attempt fix-add #1: passed",
        "would delete attempt fix-add #2: failed",
        "would delete attempt fix-add #3: failed",
        "dry run: 3 would be deleted",
    ]
    out = run("delete_attempts", "fix-add#2", "--outcome", "failed")
    assert "deleting attempt fix-add #2: failed" in out
    assert "deleted 1 attempt(s)" in out
    assert sorted(
        Attempt.objects.filter(task__slug="fix-add").values_list("number", flat=True)
    ) == [
        1,
        3,
        4,
    ]


def test_delete_attempts_reports_every_bad_reference_and_deletes_nothing(fix_add):
    with pytest.raises(CommandError) as refused:
        run("delete_attempts", "fix-add#1", "fix-add#7", "ghost#1", "999999")
    assert str(refused.value) == (
        "no attempt fix-add #7: task fix-add has attempts #1..#4; "
        "no attempt ghost #1: there is no task 'ghost'; "
        "no attempt 999999 (unknown, or deleted)"
    )
    assert Attempt.objects.count() == 5


def test_run_attempts_names_the_attempts_it_enqueued_both_ways(fix_add):
    out = run("run_attempts", "fix-add", "--agent", "noop", "-n", "2", "--no-wait")
    fifth, sixth = Attempt.objects.filter(task__slug="fix-add", number__in=(5, 6)).order_by(
        "number"
    )
    assert out.strip() == (
        "enqueued 2 attempt(s) of fix-add with agent noop: fix-add #5, fix-add #6"
    )


def test_the_run_summary_names_each_attempt_by_task_number_and_id(fix_add):
    summary = attempts_summary(Attempt.objects.filter(task__slug="fix-add")).splitlines()
    assert summary[0].startswith("attempt ")
    for attempt, line in zip(fix_add, summary[1:5], strict=True):
        assert line.startswith(f"fix-add #{attempt.number}  finished")
        assert attempt.outcome in line
    assert summary[5] == "outcomes: failed 2, passed 2"
