"""`make demo` waits for its workers as long as the machine needs and says truthfully what
failed (scripts/demo.sh runs `manage.py wait_for_workers`): it waits on the workers answering a
ping through Redis, never on a fixed time, says its progress, and tells apart a worker process
that ended from workers that never answered."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def wait_for_workers(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "wait_for_workers", *args],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(90)
def test_running_workers_are_announced_once_all_three_answer(worker):
    done = wait_for_workers(str(worker.pid), "--timeout", "30")
    assert done.returncode == 0, done.stderr
    assert "boltz: all 3 workers answer" in done.stdout


@pytest.mark.timeout(60)
def test_workers_that_never_answer_are_named_with_progress_and_the_setting(tmp_path, redis_ready):
    log = tmp_path / "worker.log"
    log.write_text("celery: still importing\n")
    silent = subprocess.Popen(["sleep", "60"])  # runs, but no worker of it answers
    try:
        done = wait_for_workers(str(silent.pid), "--log", str(log), "--timeout", "4")
    finally:
        silent.kill()
        silent.wait()
    assert done.returncode == 1
    assert "waiting for the workers: 0 of 3 answer" in done.stdout  # progress, while it waits
    assert f"the worker process (pid {silent.pid}) runs, but after 4 s" in done.stderr
    assert "do not answer through Redis" in done.stderr
    assert "attempts, host, ops" in done.stderr and "BOLTZ_WORKER_WAIT" in done.stderr
    assert "celery: still importing" in done.stderr  # the log's last lines


@pytest.mark.timeout(60)
def test_a_worker_process_that_ended_is_said_at_once_with_its_logs_last_lines(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("Traceback (most recent call last):\nImportError: no module named celery\n")
    ended = subprocess.Popen(["true"])
    ended.wait()
    done = wait_for_workers(str(ended.pid), "--log", str(log), "--timeout", "600")
    assert done.returncode == 1
    assert f"the worker process (pid {ended.pid}) ended before its workers answered" in (
        done.stderr
    )
    assert "ImportError: no module named celery" in done.stderr
