"""Shared bits of the command-line tools."""

from __future__ import annotations

import getpass
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
