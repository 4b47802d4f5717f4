import os
import signal
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from attempts.core.errors import InfrastructureError
from attempts.dispatch.calls import requests_key
from attempts.dispatch.queue import callbacks_queue, host_queue, worker_names
from attempts.run.docker import tools


class Command(BaseCommand):
    help = (
        "Start this Docker host's workers: one consumes the shared attempts queue with "
        "BOLTZ_MAX_SANDBOXES processes (the host's capacity); a second, of one process, "
        "consumes the host's own queue (deletes, re-checks, the reaper), so those never wait "
        "behind running attempts; a third serves API calls on the host's live sandboxes with "
        "BOLTZ_OPS_CONCURRENCY threads, and callbacks. Stopping this command stops them all."
    )

    def add_arguments(self, parser):
        parser.add_argument("--loglevel", default="info")

    def handle(self, *args, loglevel, **options):
        host, capacity = settings.BOLTZ_HOST, settings.BOLTZ_MAX_SANDBOXES
        # Every sandbox runs Boltz's own busybox (a read-only mount): no host without it works.
        try:
            self.stdout.write(f"sandbox tools (mounted at {tools.TOOLS_DIR}): {tools.ensure()}")
        except InfrastructureError as exc:
            raise CommandError(f"the workers cannot start: {exc.reason}") from None
        base = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "boltz_web",
            "worker",
            "-l",
            loglevel,
            # Workers find their work in Redis; they need not talk to each other.
            "--without-mingle",
            "--without-gossip",
        ]
        names = worker_names(os.getpid(), host)
        workers = {
            "attempts": [
                *base,
                "-Q",
                settings.BOLTZ_QUEUE,
                "-c",
                str(capacity),
                "-n",
                names["attempts"],
            ],
            "host": [*base, "-Q", host_queue(host), "-c", "1", "-n", names["host"]],
            # API calls on live sandboxes (BOLTZ_OPS_CONCURRENCY threads of its own, so one
            # slow exec holds up no other call), the host's heartbeat, and callbacks.
            "ops": [
                *base,
                "-Q",
                callbacks_queue(),
                "-P",
                "threads",
                "-c",
                "2",
                "-n",
                names["ops"],
            ],
        }
        self.stdout.write(
            f"workers for host {host}: queue {settings.BOLTZ_QUEUE} with capacity "
            f"{capacity}; queue {host_queue(host)} for host operations; "
            f"{settings.BOLTZ_OPS_CONCURRENCY} threads on {requests_key(host)} for API calls on "
            "its live sandboxes"
        )
        self.stdout.flush()
        children = [subprocess.Popen(argv) for argv in workers.values()]

        def stop(signum, _frame):
            for child in children:
                if child.poll() is None:
                    child.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        # When either worker ends, stop the other: the host is only whole with both.
        while all(child.poll() is None for child in children):
            try:
                os.wait()
            except ChildProcessError:
                break
        stop(signal.SIGTERM, None)
        for child in children:
            child.wait()
