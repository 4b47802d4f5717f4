"""A Harbor task's health check ([environment.healthcheck], or a step's), run as Harbor's
`BaseEnvironment.run_healthcheck` runs it: the command is tried until it exits 0; failures within
the start period do not count (a try every `start_interval_sec`), after it `retries` failures in
a row end the attempt before its agent runs (a try every `interval_sec`); each try may take
`timeout_sec`. A task whose environment never becomes ready is the task's failure, never the
agent's: TaskInvalid, an infrastructure error that says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from attempts.core.errors import TaskInvalid
from attempts.run.session import SandboxSession


def wait_healthy(
    session: SandboxSession,
    check: dict,
    *,
    user: str,
    where: str,
    stop_if_asked: Callable[[], None],
) -> int:
    """Run `check` (a healthcheck dict of the task's) until it passes; the number of tries.
    TaskInvalid(where) when it fails `retries` times in a row after its start period."""
    started = time.monotonic()
    failures = tries = 0
    while True:
        stop_if_asked()
        tries += 1
        run = session.exec(
            "healthcheck",
            ["bash", "-c", check["command"]],
            timeout=check["timeout_sec"],
            user=session.run_as(user),
            user_name=user,
            display=f"healthcheck: {check['command']}",
        )
        if run.result.exit_code == 0 and not run.result.timed_out:
            return tries
        if time.monotonic() - started < check["start_period_sec"]:
            time.sleep(check["start_interval_sec"])
            continue
        failures += 1
        if failures >= check["retries"]:
            how = "timed out" if run.result.timed_out else f"exited {run.result.exit_code}"
            raise TaskInvalid(
                where,
                f"the task's environment never became healthy: `{check['command']}` failed "
                f"{failures} time(s) in a row (the last {how}); Harbor ends such a trial before "
                "its agent runs, with no reward",
            )
        time.sleep(check["interval_sec"])
