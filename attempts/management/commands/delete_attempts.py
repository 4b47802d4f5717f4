import time

from django.core.management.base import BaseCommand, CommandError

from attempts.management.commands._common import (
    attempts_or_error,
    cli_actor,
    parse_date,
    task_or_error,
)
from attempts.models import Attempt, Outcome, SandboxState, Status
from attempts.services.deletion import attempt_delete, sandbox_delete, task_delete
from attempts.services.selectors import attempt_label


class Command(BaseCommand):
    help = (
        "Delete attempts (container, files, timeline, results) or only their sandboxes "
        "(--sandbox-only: the record, timeline, diff and check stay). Filters combine."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "ids",
            nargs="*",
            metavar="ATTEMPT",
            help="TASK#N (fix-add#3, 'fix-add #3') or attempt ids (17)",
        )
        parser.add_argument("--task", help="attempts of this task (slug)")
        parser.add_argument("--outcome", choices=Outcome.values)
        parser.add_argument("--agent")
        parser.add_argument("--status", choices=Status.values)
        parser.add_argument("--before", help="finished before this date (ISO)")
        parser.add_argument("--sandbox-only", action="store_true")
        parser.add_argument(
            "--whole-task",
            action="store_true",
            help="with --task and no other filter: delete the task too",
        )
        parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")
        parser.add_argument(
            "--wait",
            type=float,
            default=30,
            help="seconds to wait for workers to remove containers (0: don't)",
        )

    def handle(
        self,
        *args,
        ids,
        task,
        outcome,
        agent,
        status,
        before,
        sandbox_only,
        whole_task,
        dry_run,
        wait,
        **options,
    ):
        filters = {"outcome": outcome, "agent": agent, "status": status}
        if not (ids or task or any(filters.values()) or before):
            raise CommandError("name attempt ids or at least one filter (--task, --outcome, ...)")
        attempts = Attempt.objects.select_related("task")
        if ids:
            attempts = attempts.filter(pk__in=[a.pk for a in attempts_or_error(ids)])
        task_obj = None
        if task:
            task_obj = task_or_error(task)
            attempts = attempts.filter(task=task_obj)
        attempts = attempts.filter(**{k: v for k, v in filters.items() if v})
        if before:
            attempts = attempts.filter(finished_at__lt=parse_date(before, "--before"))
        if sandbox_only:
            attempts = attempts.filter(sandbox_deleted_at__isnull=True)
        chosen = list(attempts.order_by("task__slug", "number"))
        what = "sandbox of" if sandbox_only else "attempt"
        for a in chosen:
            self.stdout.write(
                f"{'would delete' if dry_run else 'deleting'} {what} {attempt_label(a)}: "
                f"{a.outcome or a.status}"
            )
        if whole_task and not (task_obj and not ids and not any(filters.values()) and not before):
            raise CommandError("--whole-task goes with --task alone")
        if dry_run:
            self.stdout.write(f"dry run: {len(chosen)} would be deleted")
            return
        by = cli_actor()
        if whole_task:
            count = task_delete(task=task_obj, by=by)
            self.stdout.write(f"deleted task {task_obj.slug} and {count} attempt(s)")
        elif sandbox_only:
            count = sum(sandbox_delete(attempt=a, by=by) for a in chosen)
            self.stdout.write(f"deleted {count} sandbox(es)")
            self._wait(chosen, wait)
        else:
            count = sum(attempt_delete(attempt=a, by=by) for a in chosen)
            self.stdout.write(f"deleted {count} attempt(s)")

    def _wait(self, chosen, wait):
        pending = [a.pk for a in chosen if a.host]
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            pending = list(
                Attempt.objects.filter(pk__in=pending)
                .exclude(sandbox_state=SandboxState.DELETED)
                .values_list("pk", flat=True)
            )
            time.sleep(0.3)
        if pending:
            self.stdout.write(
                f"{len(pending)} container(s) not yet removed: their hosts' "
                "workers will remove them (or the reaper will)"
            )
