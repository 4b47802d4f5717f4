from django.core.management.base import BaseCommand

from attempts.datasets import FORMATS
from attempts.models import Outcome
from attempts.services import task_export

from ._common import cli_actor, open_output, parse_date, task_or_error


class Command(BaseCommand):
    help = "Export a task's attempts as JSONL: attempt records, SFT conversations or RL data."

    def add_arguments(self, parser):
        parser.add_argument("task", help="task slug")
        parser.add_argument("--format", choices=FORMATS, default="attempts")
        parser.add_argument("--outcome", choices=Outcome.values)
        parser.add_argument("--agent")
        parser.add_argument("--since", help="attempts created on or after (ISO date)")
        parser.add_argument("--until", help="attempts created before (ISO date)")
        parser.add_argument("-o", "--output", required=True, help="file to write, or -")

    def handle(self, *args, task, format, outcome, agent, since, until, output, **options):
        task_obj = task_or_error(task)
        lines = task_export(
            task=task_obj,
            fmt=format,
            by=cli_actor(),
            outcome=outcome,
            agent=agent,
            since=parse_date(since, "--since"),
            until=parse_date(until, "--until"),
        )
        out = open_output(output)
        count = 0
        try:
            for line in lines:
                out.write(line)
                count += 1
        finally:
            if output != "-":
                out.close()
        if output != "-":
            self.stdout.write(f"wrote {count} {format} line(s) of {task_obj.slug} to {output}")
