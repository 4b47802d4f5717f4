from django.core.management.base import BaseCommand

from attempts.management.commands._common import (
    ATTEMPT_REF_HELP,
    attempt_or_error,
    cli_actor,
    open_output,
)
from attempts.services.attempts import attempt_export
from attempts.services.selectors import attempt_label


class Command(BaseCommand):
    help = "Write an attempt's bundle (zip: timeline, patch, check, outputs, workspace)."

    def add_arguments(self, parser):
        parser.add_argument("attempt", help=ATTEMPT_REF_HELP)
        parser.add_argument("-o", "--output", required=True, help="zip file to write, or -")

    def handle(self, *args, attempt, output, **options):
        attempt = attempt_or_error(attempt)
        out = open_output(output)
        size = 0
        try:
            for chunk in attempt_export(attempt=attempt, by=cli_actor()):
                out.write(chunk)
                size += len(chunk)
        finally:
            if out is not None and output != "-":
                out.close()
        if output != "-":
            self.stdout.write(f"wrote {output} ({size} bytes): {attempt_label(attempt)}")
