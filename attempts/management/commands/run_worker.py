import os

from django.conf import settings
from django.core.management.base import BaseCommand

from attempts.services import host_queue

from ._common import exec_celery


class Command(BaseCommand):
    help = (
        "Start this Docker host's Celery worker: it consumes the shared attempts queue and the "
        "host's own queue, with BOLTZ_MAX_SANDBOXES processes (its capacity)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default="info")

    def handle(self, *args, loglevel, **options):
        queues = f"{settings.BOLTZ_QUEUE},{host_queue(settings.BOLTZ_HOST)}"
        self.stdout.write(
            f"worker for host {settings.BOLTZ_HOST}: queues {queues}, "
            f"capacity {settings.BOLTZ_MAX_SANDBOXES}"
        )
        exec_celery(
            "worker",
            "-Q",
            queues,
            "-c",
            str(settings.BOLTZ_MAX_SANDBOXES),
            "-n",
            f"boltz-{os.getpid()}@{settings.BOLTZ_HOST}",
            "-l",
            loglevel,
            # Workers find their work in Redis; they need not talk to each other.
            "--without-mingle",
            "--without-gossip",
        )
