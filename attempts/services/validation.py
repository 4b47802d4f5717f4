"""Task validation: a task is valid when its reference passes and doing nothing fails.

A task that fails either half cannot be checked honestly: its numbers would mean nothing.
"""

from __future__ import annotations

import re

from django.db import transaction

from attempts.core import canary_rules as canaries
from attempts.models import DONE_STATUSES, Attempt, Outcome, Task, Validation
from attempts.services.attempts import attempt_create

# Lines that say what went wrong, best first: an exception with its message, then the
# markers test runners and compilers print.
_ERROR_LINES = (
    re.compile(r"^(?:E\s{2,})?[\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::|$)"),
    re.compile(r"^E\s{2,}\S"),
    re.compile(r"\b(?:error|ERROR|Error)\b\s*:|\bFAILED\b|\bFAIL\b|\bfatal:"),
    re.compile(r"Error|Exception"),
)
_NOT_QUOTED = re.compile(  # says nothing by itself: a traceback's start, a truncation mark
    r"^\s*Traceback \(most recent call last\)|^\[\.\.\. \d+ bytes omitted \.\.\.\]$"
)
_PYTEST_MARK = re.compile(r"^E\s{2,}")
QUOTE_CHARS = 200


def task_validate(*, task: Task, by: str) -> Task:
    """Start a reference and a noop attempt; the mark follows when both have finished.
    Running it again replaces the mark."""
    if not task.has_reference:
        Task.objects.filter(pk=task.pk).update(
            validation=Validation.INVALID,
            validation_reference=None,
            validation_noop=None,
            validation_note="no reference solution: give the task a reference patch",
        )
        task.refresh_from_db()
        return task
    with transaction.atomic():
        reference = attempt_create(task=task, agent="reference")
        noop = attempt_create(task=task, agent="noop")
        Task.objects.filter(pk=task.pk).update(
            validation=Validation.RUNNING,
            validation_reference=reference,
            validation_noop=noop,
            validation_note=f"validating (requested by {by})",
        )
    task.refresh_from_db()
    return task


def verdict(reference: Attempt | None, noop: Attempt | None) -> tuple[str, str] | None:
    """(mark, note) once both attempts have ended; None while either still runs."""
    if reference is None or noop is None:
        return Validation.INVALID, "a validation attempt was deleted: validate again"
    if reference.status not in DONE_STATUSES or noop.status not in DONE_STATUSES:
        return None
    problems = []
    for name, attempt in (("reference", reference), ("noop", noop)):
        if attempt.outcome in (Outcome.INFRA_ERROR, Outcome.CANCELLED, Outcome.VERIFIER_ERROR):
            problems.append(
                f"the {name} attempt ({attempt.name}) could not run: "
                f"{attempt.failure_reason or attempt.outcome}"
            )
    if problems:
        return Validation.INVALID, "; ".join(problems)
    if reference.outcome != Outcome.PASSED:
        problem = (
            f"reference failed ({reference.name}, {reference.outcome}): the "
            "check does not pass with the reference solution"
        )
        check = reference.checks.order_by("created_at", "pk").only("output").last()
        # The attempt's reason says it in words when the environment is the cause (a tool the
        # image lacks, a permission withheld, no network), else the check's first error line.
        quote = reference.failure_reason or (first_error_line(check.output) if check else "")
        problems.append(f"{problem}: {quote}" if quote else problem)
    if noop.outcome == Outcome.PASSED:
        problems.append(f"noop passed ({noop.name}): the check passes without any change")
    if problems:
        return Validation.INVALID, "; ".join(problems)
    return Validation.VALID, f"reference passed ({reference.name}) and noop failed ({noop.name})"


def first_error_line(output: str, limit: int = QUOTE_CHARS) -> str:
    """The line of a check's output that best says what went wrong, clipped to `limit`
    characters: the first exception line (`ModuleNotFoundError: No module named 'x'`), else
    the first pytest `E   ` line, `error:` or FAILED line, else the last non-empty line."""
    lines = [line.strip() for line in output.splitlines()]
    lines = [line for line in lines if line and not _NOT_QUOTED.match(line)]
    if not lines:
        return ""
    chosen = lines[-1]
    for pattern in _ERROR_LINES:
        found = next((line for line in lines if pattern.search(line)), None)
        if found is not None:
            chosen = found
            break
    chosen = _PYTEST_MARK.sub("", chosen)  # pytest's "E   " is not part of the message
    return chosen if len(chosen) <= limit else chosen[: limit - 1].rstrip() + "…"


def on_attempt_ended(sender, *, task_id: int, **kwargs) -> None:
    """Subscribed to "an attempt ended" (core/ended.py)."""
    refresh_validation(task_id)


def refresh_validation(task_id: int) -> None:
    """Called as attempts end: set the task's mark once both validation attempts are done."""
    task = (
        Task.objects.filter(pk=task_id, validation=Validation.RUNNING)
        .select_related("validation_reference", "validation_noop")
        .first()
    )
    if task is None:
        return
    result = verdict(task.validation_reference, task.validation_noop)
    if result is None:
        return
    mark, note = result
    learnt = {}
    if mark == Validation.VALID:
        pool, pinned, said = learn_tests(task, task.validation_reference)
        learnt = {"canary_pool": pool, "pinned_tests": pinned}
        note = f"{note}; {said}"
    Task.objects.filter(pk=task.pk, validation=Validation.RUNNING).update(
        validation=mark, validation_note=note, **learnt
    )


def learn_tests(task: Task, reference: Attempt) -> tuple[list[str], list[str], str]:
    """What the reference's check says of the task's tests: the canaries that correct code
    fails (run/canaries.py), the tests every check must run (each passed here), in words."""
    check = reference.checks.order_by("created_at", "pk").last()
    if check is None:
        return [], [], "no check of the reference to learn its tests from"
    passed = set(check.tests.filter(outcome="passed").values_list("name", flat=True))
    pool, said = canaries.learnt(check.protection or {}, passed)
    pinned = canaries.pinned(task, passed, task.workdir)
    return pool, pinned, f"{said}; {len(pinned)} pinned test(s)"
