import os
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from attempts.dispatch.queue import answering_workers, worker_names

PROGRESS_EVERY = 10.0  # seconds between two "still waiting" lines (fewer for a short wait)


class Command(BaseCommand):
    help = (
        "Wait until the three workers that a `manage.py run_worker` process started answer a "
        "ping through Redis, as long as the machine needs (up to --timeout, default "
        "BOLTZ_WORKER_WAIT or 600 s), saying every few seconds which answer. Exits non-zero, "
        "saying what failed, when that process ends or the time runs out."
    )

    def add_arguments(self, parser):
        parser.add_argument("pid", type=int, help="the pid of the `manage.py run_worker` process")
        parser.add_argument("--log", help="its log, whose last lines are shown when it fails")
        parser.add_argument(
            "--timeout",
            type=float,
            default=float(os.environ.get("BOLTZ_WORKER_WAIT") or 600),
            help="seconds to wait at most (default: BOLTZ_WORKER_WAIT, else 600)",
        )

    def handle(self, *args, pid, log, timeout, **options):
        names = worker_names(pid, settings.BOLTZ_HOST)
        started = time.monotonic()
        said = started
        every = min(PROGRESS_EVERY, max(1.0, timeout / 4))
        while True:
            if not _running(pid):
                raise CommandError(
                    f"the worker process (pid {pid}) ended before its workers answered"
                    + _last_lines(log)
                )
            answered = answering_workers(list(names.values()))
            waited = time.monotonic() - started
            if answered >= set(names.values()):
                self.stdout.write(f"boltz: all {len(names)} workers answer ({waited:.0f} s)")
                return
            missing = [role for role, name in names.items() if name not in answered]
            if waited >= timeout:
                raise CommandError(
                    f"the worker process (pid {pid}) runs, but after {waited:.0f} s these of "
                    f"its workers do not answer through Redis ({settings.BOLTZ_REDIS_URL}): "
                    f"{', '.join(missing)}. A slow machine may need longer: set "
                    "BOLTZ_WORKER_WAIT (seconds)" + _last_lines(log)
                )
            if time.monotonic() - said >= every:
                said = time.monotonic()
                self.stdout.write(
                    f"boltz: waiting for the workers: {len(answered)} of {len(names)} answer "
                    f"({waited:.0f} s of at most {timeout:.0f}; still starting: "
                    f"{', '.join(missing)})"
                )
                self.stdout.flush()
            time.sleep(0.5)


def _running(pid: int) -> bool:
    """Whether the process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _last_lines(log: str | None, count: int = 15) -> str:
    if not log:
        return ""
    try:
        lines = Path(log).read_text(errors="replace").splitlines()[-count:]
    except OSError:
        return ""
    return f"\nthe last lines of {log}:\n" + "\n".join(f"  {line}" for line in lines)
