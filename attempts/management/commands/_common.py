"""Shared bits of the command-line tools."""

from __future__ import annotations

import getpass
import re
from datetime import UTC, datetime

from django.core.management.base import CommandError
from django.utils import timezone


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no user name in some containers
        return "cli"


def parse_date(value: str | None, option: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(
            f"{option} {value!r}: use a date like 2026-12-01 or 2026-12-01T10:00"
        ) from None
    return parsed if parsed.tzinfo else timezone.make_aware(parsed, UTC)


def task_or_error(slug: str):
    """The task with this slug, or a CommandError naming it."""
    from attempts.models import Task

    task = Task.objects.filter(slug=slug).first()
    if task is None:
        raise CommandError(f"no task {slug!r}; load one with `manage.py load_task DIR`")
    return task


ATTEMPT_REF_HELP = (
    "an attempt: TASK#N, its task's slug and number (fix-add#3 or 'fix-add #3'), or its id (17)"
)
_TASK_REF = re.compile(r"^(?P<slug>[-\w]+)\s*#\s*(?P<number>\d+)$")


def attempts_or_error(refs: list[str]):
    """The attempts these references name, in the same order: each is TASK#N (`fix-add#3`, or
    `fix-add #3` as pages and summaries name it) or a global attempt id (`17`, as in its page's
    URL). Every reference that names no attempt is reported at once in a CommandError that says
    why."""
    from attempts.models import Attempt, Task, attempt_name

    found, problems = [], []
    for ref in refs:
        text = str(ref).strip()
        if text.isdigit():
            attempt = Attempt.objects.select_related("task").filter(pk=int(text)).first()
            if attempt is None:
                problems.append(f"no attempt {text} (unknown, or deleted)")
            else:
                found.append(attempt)
            continue
        match = _TASK_REF.match(text)
        if match is None:
            problems.append(f"{text!r} is not an attempt: use its id (17) or TASK#N (fix-add#3)")
            continue
        slug, number = match["slug"], int(match["number"])
        name = attempt_name(slug, number)
        task = Task.objects.filter(slug=slug).first()
        if task is None:
            problems.append(f"no attempt {name}: there is no task {slug!r}")
            continue
        attempt = task.attempts.select_related("task").filter(number=number).first()
        if attempt is None:
            numbers = list(task.attempts.order_by("number").values_list("number", flat=True))
            has = f"has attempts {_number_ranges(numbers)}" if numbers else "has no attempts"
            problems.append(f"no attempt {name}: task {slug} {has}")
            continue
        found.append(attempt)
    if problems:
        raise CommandError("; ".join(problems))
    return found


def attempt_or_error(ref: str):
    """The attempt one reference names (see attempts_or_error), or a CommandError."""
    return attempts_or_error([ref])[0]


def _number_ranges(numbers: list[int], most: int = 8) -> str:
    """Sorted attempt numbers as runs: [1, 2, 3, 5] -> '#1..#3, #5' (at most `most` runs)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    parts = [f"#{a}" if a == b else f"#{a}..#{b}" for a, b in runs]
    if len(parts) > most:
        parts = [*parts[: most - 1], "...", parts[-1]]
    return ", ".join(parts)


def open_output(path: str):
    """A binary file to write to ('-' is standard output)."""
    import sys

    if path == "-":
        return sys.stdout.buffer
    try:
        return open(path, "wb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise CommandError(f"-o {path}: {exc.strerror}") from None


def exec_celery(*args: str) -> None:
    """Replace this process with `celery -A boltz_web ARGS` (signals then reach Celery itself)."""
    import os
    import sys

    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "celery", "-A", "boltz_web", *args])
