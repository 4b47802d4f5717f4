import time

from django.core.management.base import BaseCommand, CommandError

from attempts.dispatch.draining import drain
from attempts.services.host_overview import host_load

PROGRESS_EVERY = 10.0  # seconds between two lines while waiting


class Command(BaseCommand):
    help = (
        "Drain a Docker host before stopping its worker: it takes no new attempts, API "
        "sandboxes or pool environments (they go to the other hosts, or wait in the queue), "
        "and what it runs goes on. With --wait, wait until it runs nothing and holds no live "
        "sandbox, saying what is left every few seconds; exits non-zero if time runs out. "
        "Starting its worker again undoes the drain."
    )

    def add_arguments(self, parser):
        parser.add_argument("host", help="the host's name (its BOLTZ_HOST; see /hosts/)")
        parser.add_argument(
            "--wait",
            type=float,
            default=0,
            metavar="SECONDS",
            help="then wait up to this long for its attempts to end and its sandboxes to close",
        )

    def handle(self, *args, host, wait, **options):
        told, silent = drain(host)
        if silent:
            raise CommandError(
                f"host {host}: these workers did not confirm in time: {', '.join(silent)}; "
                "run the command again"
            )
        if not told:
            raise CommandError(
                f"host {host}: no worker of it answers through Redis: it takes no work now; "
                "check its name on the hosts page (/hosts/)"
            )
        load = host_load(host)
        self.stdout.write(f"boltz: host {host} takes no new work ({', '.join(told)}); {load}")
        started = said = time.monotonic()
        while wait and not load.idle:
            waited = time.monotonic() - started
            if waited >= wait:
                raise CommandError(
                    f"host {host} still has {load} after {waited:.0f} s; wait longer, or stop "
                    "its worker (what it runs then ends as an infrastructure error)"
                )
            if time.monotonic() - said >= min(PROGRESS_EVERY, max(1.0, wait / 4)):
                said = time.monotonic()
                self.stdout.write(f"boltz: host {host}: {load} ({waited:.0f} s)")
            time.sleep(1)
            load = host_load(host)
        if wait:
            self.stdout.write(f"boltz: host {host} is drained: stop its worker now")
