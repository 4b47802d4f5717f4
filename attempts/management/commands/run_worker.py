import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand

from attempts.services import host_queue


class Command(BaseCommand):
    help = (
        "Start this Docker host's Celery worker: it consumes the shared attempts queue and the "
        "host's own queue, with BOLTZ_MAX_SANDBOXES processes (its capacity)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default="info")
        parser.add_argument(
            "--queue", help="the shared queue only (default: BOLTZ_QUEUE and the host's own queue)"
        )

    def handle(self, *args, loglevel, queue=None, **options):
        queues = queue or f"{settings.BOLTZ_QUEUE},{host_queue(settings.BOLTZ_HOST)}"
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "boltz_web",
            "worker",
            "-Q",
            queues,
            "-c",
            str(settings.BOLTZ_MAX_SANDBOXES),
            "-n",
            f"boltz@{settings.BOLTZ_HOST}",
            "-l",
            loglevel,
        ]
        self.stdout.write(
            f"worker for host {settings.BOLTZ_HOST}: queues {queues}, "
            f"capacity {settings.BOLTZ_MAX_SANDBOXES}"
        )
        self.stdout.flush()
        os.execv(sys.executable, argv)
