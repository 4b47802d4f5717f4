"""docs/DEPLOY.md, held to what it says: draining a host (manage.py drain_host) before its
worker stops, the systemd units run as systemd runs them, and the environment table."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from attempts.models import Outcome, Status
from attempts.services.attempts import attempt_create
from tests.conftest import (
    ROOT,
    _worker_database_env,
    agent_printing,
    require,
    run_worker,
    wait_finished,
    wait_until,
)
from tests.test_redis_faults import free_port


def manage(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **_worker_database_env()},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(420)
def test_a_drained_host_ends_what_it_runs_and_takes_nothing_new(
    load_example, docker_ready, redis_ready
):
    task = load_example("fix-add")
    queue, tag = f"drain-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:4]
    first, second = f"drain-a-{tag}", f"drain-b-{tag}"
    with run_worker(queue=queue, host=first, capacity=2):
        running = attempt_create(
            task=task, agent="command", command="echo go; sleep 8", queue=queue
        )
        wait_until(lambda: agent_printing(running.pk), 120, "the agent to start")
        told = manage("drain_host", first)
        assert told.returncode == 0, told.stderr
        assert f"boltz: host {first} takes no new work (attempts-" in told.stdout
        assert "1 attempt(s) running and 1 live sandbox(es)" in told.stdout
        # It has a free slot, yet takes nothing new.
        waiting = attempt_create(task=task, agent="command", command="true", queue=queue)
        drained = manage("drain_host", first, "--wait", "150")
        assert drained.returncode == 0, drained.stderr
        assert drained.stdout.rstrip().endswith(
            f"boltz: host {first} is drained: stop its worker now"
        )
        running.refresh_from_db()
        assert running.status == Status.FINISHED and running.outcome == Outcome.FAILED
        waiting.refresh_from_db()
        assert waiting.status == Status.QUEUED and not waiting.host
    # Its worker stopped; another host takes what waited.
    with run_worker(queue=queue, host=second, capacity=1):
        (done,) = wait_finished([waiting])
    assert done.host == second and done.outcome == Outcome.FAILED


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_draining_a_host_no_worker_of_which_answers_says_so(redis_ready):
    refused = manage("drain_host", "no-such-host")
    assert refused.returncode == 1
    assert "host no-such-host: no worker of it answers through Redis" in refused.stderr


def unit_lines(path: Path) -> dict[str, list[str]]:
    """A systemd unit's [Service] settings, each key with its values in order."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def unit_env(unit: dict[str, list[str]]) -> dict[str, str]:
    """The environment systemd gives a unit's commands: its own PATH, the EnvironmentFile,
    then Environment= lines (nothing of the caller's: no venv activated, no HOME)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for env_file in unit.get("EnvironmentFile", []):
        for line in Path(env_file).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                name, _, value = line.partition("=")
                env[name.strip()] = value.strip()
    for assignment in unit.get("Environment", []):
        name, _, value = assignment.partition("=")
        env[name] = value
    return env


def start_unit(unit: dict[str, list[str]], log: Path) -> subprocess.Popen:
    """What systemd does to start a unit: each ExecStartPre in turn (any failure stops it),
    then ExecStart, in its WorkingDirectory and environment."""
    cwd, env = unit["WorkingDirectory"][0], unit_env(unit)
    for command in unit.get("ExecStartPre", []):
        done = subprocess.run(
            shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    with log.open("wb") as out:
        return subprocess.Popen(
            shlex.split(unit["ExecStart"][0]), cwd=cwd, env=env, stdout=out, stderr=out
        )


def stop_unit(unit: dict[str, list[str]], process: subprocess.Popen) -> int:
    """systemd's stop: KillSignal, then TimeoutStopSec to end (else SIGKILL, a failure here)."""
    process.send_signal(getattr(signal, unit["KillSignal"][0]))
    try:
        return process.wait(timeout=float(unit["TimeoutStopSec"][0]))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{unit['ExecStart'][0]} did not stop within TimeoutStopSec") from None


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(420)
def test_the_systemd_units_serve_run_attempts_and_stop_as_systemd_runs_them(
    tmp_path, load_example, docker_ready, redis_ready
):
    require(
        shutil.which("systemd-analyze"), "systemd-analyze is missing: scripts/services.sh install"
    )
    task = load_example("fix-add")
    port, tag = free_port(), uuid.uuid4().hex[:6]
    env_file = tmp_path / "boltz.env"
    settings_lines = {
        "BOLTZ_SECRET_KEY": secrets.token_urlsafe(50),
        "BOLTZ_ALLOWED_HOSTS": "127.0.0.1",
        "BOLTZ_WEB_ADDR": f"127.0.0.1:{port}",
        "BOLTZ_WEB_WORKERS": "1",
        "BOLTZ_REDIS_URL": settings.BOLTZ_REDIS_URL,
        "BOLTZ_DATA_DIR": str(settings.DATA_DIR),
        "BOLTZ_STATIC_ROOT": str(tmp_path / "static"),
        "BOLTZ_INSTANCE": settings.BOLTZ_INSTANCE,
        "BOLTZ_QUEUE": f"units-{tag}",
        "BOLTZ_HOST": f"units-{tag}",
        "BOLTZ_MAX_SANDBOXES": "1",
        "BOLTZ_LOG_FORMAT": "json",
        **_worker_database_env(),
    }
    if "DATABASE_URL" not in settings_lines:
        settings_lines["BOLTZ_ALLOW_SQLITE"] = "1"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings_lines.items()))
    made = subprocess.run(
        ["scripts/systemd_units.sh", str(tmp_path / "units"), str(env_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    units = {
        name: unit_lines(tmp_path / "units" / f"boltz-{name}.service")
        for name in ("worker", "beat", "web")
    }
    assert all(u["Environment"] == ["BOLTZ_ENV=production"] for u in units.values())
    running = {}
    try:
        for name in ("worker", "beat", "web"):
            running[name] = start_unit(units[name], tmp_path / f"{name}.log")
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(url + "/healthz", timeout=10).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 120, "the web unit to answer /healthz with its worker heard")
        assert httpx.get(url + "/login/", timeout=10).headers["Server"].startswith("gunicorn")
        attempt = attempt_create(
            task=task, agent="command", command="true", queue=settings_lines["BOLTZ_QUEUE"]
        )
        (done,) = wait_finished([attempt])
        assert done.host == settings_lines["BOLTZ_HOST"] and done.outcome == Outcome.FAILED
        wait_until(
            lambda: (
                "Scheduler: Sending due task" in (tmp_path / "beat.log").read_text()
                or "beat: Starting" in (tmp_path / "beat.log").read_text()
            ),
            60,
            "the beat unit to start",
        )
    finally:
        codes = {name: stop_unit(units[name], process) for name, process in running.items()}
    assert codes == {"worker": 0, "beat": 0, "web": 0}, codes
