import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from attempts.core.errors import TaskInvalid
from attempts.dispatch.errors import WorkerUnreachable
from attempts.management.commands._common import task_or_error
from attempts.models import DONE_STATUSES, Attempt, Outcome, Status
from attempts.services.attempts import attempts_create
from attempts.services.selectors import attempt_label, attempts_summary


class Command(BaseCommand):
    help = "Enqueue N attempts at a task with an agent, wait for them and print a summary."

    def add_arguments(self, parser):
        parser.add_argument("task", help="task slug")
        parser.add_argument("--agent", default="noop", help="noop, reference or command")
        parser.add_argument("--command", default="", help="shell command (the command agent)")
        parser.add_argument(
            "--file",
            action="append",
            default=[],
            type=Path,
            dest="files",
            help="a file for the command agent, copied to $BOLTZ_AGENT_DIR",
        )
        parser.add_argument("-n", type=int, default=1, help="number of attempts")
        parser.add_argument("--no-wait", action="store_true", help="enqueue and return")
        parser.add_argument(
            "--top-up",
            action="store_true",
            help="start only as many as the task lacks of N attempts with this agent "
            "(cancelled attempts and infrastructure errors do not count)",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=0,
            help="stop waiting after this many seconds (0: no limit)",
        )

    def handle(self, *args, task, agent, command, files, n, no_wait, timeout, top_up, **options):
        task_obj = task_or_error(task)
        if n < 1:
            raise CommandError("-n must be at least 1")
        if top_up:
            existing = list(
                task_obj.attempts.filter(agent=agent)
                .exclude(status=Status.CANCELLED)
                .exclude(outcome=Outcome.INFRA_ERROR)
                .order_by("number")
            )
            if len(existing) >= n:
                names = ", ".join(attempt_label(a) for a in existing[:5])
                more = f" and {len(existing) - 5} more" if len(existing) > 5 else ""
                self.stdout.write(
                    f"{task_obj.slug} already has {len(existing)} attempt(s) with agent "
                    f"{agent} ({names}{more}): none started"
                )
                return
            n -= len(existing)
        uploads = {}
        for path in files:
            if not path.is_file():
                raise CommandError(f"--file {path}: not a file")
            uploads[path.name] = path.read_bytes()
        try:
            created = attempts_create(
                task=task_obj, agent=agent, command=command, files=uploads, count=n
            )
        except TaskInvalid as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        except WorkerUnreachable as exc:
            raise CommandError(exc.detail) from None
        ids = [a.pk for a in created]
        self.stdout.write(
            f"enqueued {n} attempt(s) of {task_obj.slug} with agent {agent}: "
            + ", ".join(attempt_label(a) for a in created)
        )
        if no_wait:
            return
        started = time.monotonic()
        with tqdm(total=n, desc=task_obj.slug, unit="attempt", file=self.stderr._out) as bar:
            done = 0
            while done < n:
                if timeout and time.monotonic() - started > timeout:
                    self.stderr.write("stopped waiting; the attempts go on in the workers")
                    break
                time.sleep(0.5)
                now_done = Attempt.objects.filter(pk__in=ids, status__in=DONE_STATUSES).count()
                bar.update(now_done - done)
                done = now_done
        self.stdout.write(attempts_summary(Attempt.objects.filter(pk__in=ids)))
