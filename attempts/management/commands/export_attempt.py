from django.core.management.base import BaseCommand, CommandError

from attempts.models import Attempt
from attempts.services import attempt_export

from ._common import cli_actor, open_output


class Command(BaseCommand):
    help = "Write an attempt's bundle (zip: timeline, patch, check, outputs, workspace)."

    def add_arguments(self, parser):
        parser.add_argument("attempt_id", type=int)
        parser.add_argument("-o", "--output", required=True, help="zip file to write, or -")

    def handle(self, *args, attempt_id, output, **options):
        attempt = Attempt.objects.select_related("task").filter(pk=attempt_id).first()
        if attempt is None:
            raise CommandError(f"no attempt {attempt_id} (unknown, or deleted)")
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
            self.stdout.write(f"wrote {output} ({size} bytes): {attempt}")
