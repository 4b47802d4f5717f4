from django.conf import settings
from django.core.management.base import BaseCommand

from attempts.management.commands._common import exec_celery


class Command(BaseCommand):
    help = (
        "Start Celery beat: every BOLTZ_RETENTION_INTERVAL it applies retention and sends the "
        "reaper to every known Docker host. Run exactly one beat per installation."
    )

    def handle(self, *args, **options):
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        self.stdout.write(
            f"beat: retention and reaper every {settings.BOLTZ_RETENTION_INTERVAL:g}s"
        )
        exec_celery("beat", "-l", "info", "-s", settings.CELERY_BEAT_SCHEDULE_FILENAME)
