"""docs/DEPLOY.md, held to what it says: draining a host (manage.py drain_host) before its
worker stops, the systemd units run as systemd runs them, and the environment table."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse, urlunparse

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
    stop_group,
    wait_finished,
    wait_until,
)
from tests.test_redis_faults import free_port


def manage(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """manage.py in this test run's environment, on its database."""
    return manage_with({**os.environ, **_worker_database_env()}, *args, timeout=timeout)


def manage_with(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess:
    """manage.py with only these settings (and PATH), as a unit would run it."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


DOC = ROOT / "docs" / "DEPLOY.md"
# Commands of docs/DEPLOY.md that .ci/run runs on a fresh clone (directly, or as what `make
# test` makes first); every other command there is run by a test below, from the doc's text.
RUN_BY_CI = {
    "scripts/services.sh install": "scripts/services.sh install",
    "scripts/services.sh start": "scripts/services.sh start",
    "make install image": "make test",
    "make install": "make test",
}


def doc_commands() -> list[str]:
    """Every command of docs/DEPLOY.md: the lines of its ```sh blocks."""
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def doc_command(start: str) -> str:
    """The one command of docs/DEPLOY.md starting so (a test runs it from the doc's text)."""
    found = [line for line in doc_commands() if line.startswith(start)]
    assert len(found) == 1, f"docs/DEPLOY.md has {len(found)} commands starting {start!r}"
    return found[0]


def here(command: str, paths: dict[str, str]) -> str:
    """A command of the doc with its places (/etc/boltz/..., port 8000, host docker-2, an
    hour's wait) moved to this test's."""
    theirs = re.compile("|".join(re.escape(k) for k in sorted(paths, key=len, reverse=True)))
    return theirs.sub(lambda found: paths[found[0]], command)  # in one pass, longest first


def run_doc(command: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def deploy_settings(tmp_path: Path, **more: str) -> dict[str, str]:
    """An environment file's values for processes of this test run (its database, Redis,
    data folder and container label), with a host and queue of their own."""
    tag = uuid.uuid4().hex[:6]
    values = {
        "BOLTZ_SECRET_KEY": secrets.token_urlsafe(50),
        "BOLTZ_ALLOWED_HOSTS": "127.0.0.1",
        "BOLTZ_REDIS_URL": settings.BOLTZ_REDIS_URL,
        "BOLTZ_DATA_DIR": str(settings.DATA_DIR),
        "BOLTZ_STATIC_ROOT": str(tmp_path / "static"),
        "BOLTZ_INSTANCE": settings.BOLTZ_INSTANCE,
        "BOLTZ_QUEUE": f"deploy-{tag}",
        "BOLTZ_HOST": f"deploy-{tag}",
        "BOLTZ_MAX_SANDBOXES": "1",
        "BOLTZ_LOG_FORMAT": "json",
        **_worker_database_env(),
        **more,
    }
    if "DATABASE_URL" not in values:
        values["BOLTZ_ALLOW_SQLITE"] = "1"
    return values


def write_env_file(path: Path, values: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


@pytest.mark.django_db(transaction=True)
@pytest.mark.docker
@pytest.mark.worker
@pytest.mark.timeout(420)
def test_a_drained_host_ends_what_it_runs_and_takes_nothing_new(
    tmp_path, load_example, docker_ready, redis_ready
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
        env_file = write_env_file(tmp_path / "boltz.env", deploy_settings(tmp_path))
        drained = run_doc(
            here(
                doc_command(
                    "set -a; . /etc/boltz/boltz.env; set +a; .venv/bin/python manage.py drain_host"
                ),
                {"/etc/boltz/boltz.env": str(env_file), "docker-2": first, "3600": "150"},
            ),
            timeout=200,
            BOLTZ_QUEUE=queue,
        )
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
def test_one_host_as_deploy_md_says_serves_runs_attempts_and_stops_as_systemd_would(
    tmp_path, load_example, docker_ready, redis_ready, django_user_model
):
    require(
        shutil.which("systemd-analyze"), "systemd-analyze is missing: scripts/services.sh install"
    )
    task = load_example("fix-add")
    port = free_port()
    etc = tmp_path / "etc" / "boltz"
    paths = {
        "/etc/systemd/system": str(tmp_path / "units"),
        "/etc/boltz/boltz.env": str(etc / "boltz.env"),
        "/etc/boltz": str(etc),
        "127.0.0.1:8000": f"127.0.0.1:{port}",
    }
    # The settings steps: the example file, readable by root alone; a key made as it says.
    for command in (
        doc_command("mkdir -p /etc/boltz"),
        doc_command("install -m 600 deploy/boltz.env.example"),
    ):
        done = run_doc(here(command, paths))
        assert done.returncode == 0, done.stderr
    assert (etc / "boltz.env").stat().st_mode & 0o777 == 0o600
    made_key = run_doc(doc_command('.venv/bin/python -c "import secrets'))
    key = made_key.stdout.strip()
    assert made_key.returncode == 0 and len(key) >= 50 and len(set(key)) >= 5
    # The example as copied, placeholder key and all, is refused by the web unit's first step.
    example = dict(
        line.split("=", 1)
        for line in (etc / "boltz.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    refused = manage_with({**example, "BOLTZ_ENV": "production"}, "check", "--deploy")
    assert refused.returncode == 1 and "BOLTZ_SECRET_KEY is too weak" in refused.stderr
    values = deploy_settings(tmp_path, BOLTZ_SECRET_KEY=key, BOLTZ_WEB_ADDR=f"127.0.0.1:{port}")
    values["BOLTZ_WEB_WORKERS"] = "1"
    write_env_file(etc / "boltz.env", values)
    # The units, written and checked as the doc says (--enable then needs systemd as pid 1,
    # which this machine lacks: it says so, and this test starts them as systemd would).
    made = run_doc(here(doc_command("scripts/systemd_units.sh --enable"), paths))
    assert "(checked)" in made.stdout, made.stderr
    if Path("/proc/1/comm").read_text().strip() != "systemd":
        assert made.returncode == 1 and "systemd does not run this machine" in made.stderr
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
        healthz = here(doc_command("curl -fsS http://127.0.0.1:8000/healthz"), paths)
        wait_until(
            lambda: run_doc(healthz, timeout=30).returncode == 0,
            120,
            "the web unit to answer /healthz with its worker heard",
        )
        assert httpx.get(url + "/login/", timeout=10).headers["Server"].startswith("gunicorn")
        first_user = run_doc(
            here(
                doc_command("set -a; . /etc/boltz/boltz.env; set +a; DJANGO_SUPERUSER_PASSWORD"),
                paths,
            )
        )
        assert first_user.returncode == 0, first_user.stderr
        assert django_user_model.objects.get(username="admin").is_superuser
        attempt = attempt_create(
            task=task, agent="command", command="true", queue=values["BOLTZ_QUEUE"]
        )
        (done,) = wait_finished([attempt])
        assert done.host == values["BOLTZ_HOST"] and done.outcome == Outcome.FAILED
        wait_until(
            lambda: "beat: Starting" in (tmp_path / "beat.log").read_text(),
            60,
            "the beat unit to start",
        )
    finally:
        codes = {name: stop_unit(units[name], process) for name, process in running.items()}
    assert codes == {"worker": 0, "beat": 0, "web": 0}, codes


@pytest.mark.timeout(120)
def test_a_second_host_gets_the_worker_unit_alone(tmp_path):
    require(
        shutil.which("systemd-analyze"), "systemd-analyze is missing: scripts/services.sh install"
    )
    env_file = write_env_file(tmp_path / "boltz.env", {"BOLTZ_HOST": "docker-2"})
    paths = {"/etc/systemd/system": str(tmp_path / "units"), "/etc/boltz/boltz.env": str(env_file)}
    made = run_doc(here(doc_command("BOLTZ_UNITS=worker scripts/systemd_units.sh"), paths))
    assert "(checked)" in made.stdout, made.stderr
    assert sorted(p.name for p in (tmp_path / "units").iterdir()) == ["boltz-worker.service"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
@pytest.mark.timeout(240)
def test_flower_as_deploy_md_starts_it_lists_the_workers_and_the_tasks_they_ran(
    tmp_path, worker, load_example
):
    require(importlib.util.find_spec("flower"), "flower is not installed: make install")
    port = free_port()
    env_file = write_env_file(
        tmp_path / "boltz.env",
        deploy_settings(tmp_path, BOLTZ_QUEUE=settings.BOLTZ_QUEUE, BOLTZ_HOST=settings.BOLTZ_HOST),
    )
    command = here(
        doc_command("set -a; . /etc/boltz/boltz.env; set +a; .venv/bin/celery -A boltz_web flower"),
        {"/etc/boltz/boltz.env": str(env_file), "--port=5555": f"--port={port}"},
    )
    with (tmp_path / "flower.log").open("wb") as log:
        flower = subprocess.Popen(
            ["bash", "-c", command],
            cwd=ROOT,
            env={**os.environ, "FLOWER_UNAUTHENTICATED_API": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def workers() -> dict:
        try:
            return httpx.get(url + "/api/workers", params={"refresh": "1"}, timeout=20).json()
        except httpx.HTTPError:
            return {}

    def tasks() -> dict:
        return httpx.get(url + "/api/tasks", timeout=20).json()

    try:
        wait_until(lambda: len(workers()) == 3, 90, "Flower to list the host's three workers")
        names = sorted(name.split("-")[0] for name in workers())
        assert names == ["attempts", "host", "ops"]
        assert all(name.endswith(f"@{settings.BOLTZ_HOST}") for name in workers())
        attempt = attempt_create(task=load_example("fix-add"), agent="command", command="true")
        wait_finished([attempt], timeout=150)
        wait_until(
            lambda: any(
                t["name"] == "boltz.run_attempt" and t["state"] == "SUCCESS"
                for t in tasks().values()
            ),
            60,
            "Flower to list the attempt's task as done",
        )
    finally:
        stop_group(flower, timeout=30)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_the_backup_of_deploy_md_copies_the_database(tmp_path, django_user_model):
    import sqlite3

    from django.db import connection

    django_user_model.objects.create_user("kept-in-the-backup")
    env_file = write_env_file(tmp_path / "boltz.env", deploy_settings(tmp_path))
    dump, copy = tmp_path / "boltz.dump", tmp_path / "boltz-backup.sqlite3"
    paths = {
        "/etc/boltz/boltz.env": str(env_file),
        "--file=boltz.dump": f"--file={dump}",
        " boltz-backup.sqlite3": f" {copy}",
    }
    if connection.vendor == "postgresql":
        done = run_doc(here(doc_command("set -a; . /etc/boltz/boltz.env; set +a; pg_dump"), paths))
        assert done.returncode == 0, done.stderr
        # Restored as the doc says into an empty database of its own: the user is there.
        url = urlparse(connection_url())
        scratch = f"restore_{uuid.uuid4().hex[:8]}"
        psql = ["psql", urlunparse(url._replace(path="/postgres")), "-qc"]
        subprocess.run([*psql, f"create database {scratch}"], check=True, timeout=60)
        try:
            restore_env = write_env_file(
                tmp_path / "restore.env",
                {"DATABASE_URL": urlunparse(url._replace(path=f"/{scratch}"))},
            )
            restored = run_doc(
                here(
                    doc_command("set -a; . /etc/boltz/boltz.env; set +a; pg_restore"),
                    {"/etc/boltz/boltz.env": str(restore_env), " boltz.dump": f" {dump}"},
                )
            )
            assert restored.returncode == 0, restored.stderr
            names = subprocess.run(
                ["psql", urlunparse(url._replace(path=f"/{scratch}")), "-tAc"]
                + ["select username from auth_user"],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.split()
            assert "kept-in-the-backup" in names
        finally:
            subprocess.run([*psql, f"drop database {scratch}"], timeout=60)
        return
    require(connection.vendor == "sqlite", connection.vendor)
    done = run_doc(
        here(
            doc_command(
                'set -a; . /etc/boltz/boltz.env; set +a; .venv/bin/python -c "import sqlite3'
            ),
            paths,
        )
    )
    assert done.returncode == 0, done.stderr
    with contextlib.closing(sqlite3.connect(copy)) as backup:
        names = backup.execute("select username from auth_user").fetchall()
    assert ("kept-in-the-backup",) in names


def test_every_command_of_deploy_md_is_run_by_a_test_here_or_by_ci():
    """Each command is claimed: by .ci/run (RUN_BY_CI), or by a test of this module that runs
    it from the doc's text (`doc_command`, whose callers are read from this file)."""
    source = ast.parse(Path(__file__).read_text())
    claimed = {
        node.args[0].value
        for node in ast.walk(source)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "doc_command"
        and isinstance(node.args[0], ast.Constant)
    }
    unclaimed = [
        line
        for line in doc_commands()
        if line not in RUN_BY_CI and not any(line.startswith(start) for start in claimed)
    ]
    assert not unclaimed, f"commands of docs/DEPLOY.md no test runs: {unclaimed}"
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(RUN_BY_CI[line] in ci for line in RUN_BY_CI if line in doc_commands())
    test_target = re.search(r"^test: (.*)$", (ROOT / "Makefile").read_text(), re.M)[1].split()
    assert {"install", "image"} <= set(test_target)  # `make test` makes them first


# Read from the environment by Boltz's processes and scripts; sandbox-side and test-run-only
# names are not settings.
SETTING = re.compile(r"^(BOLTZ_(?!TEST_|WITNESS_)[A-Z0-9_]+|DATABASE_URL)$")
# Read by the libraries underneath (the Docker SDK, boto3), named in the table all the same.
READ_BY_LIBRARIES = {"DOCKER_HOST", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def settings_read() -> dict[str, set]:
    """Every setting the code reads, with the defaults it gives it where they are constants."""
    found: dict[str, set] = {}
    python = [p for d in ("attempts", "boltz_web", "boltz") for p in (ROOT / d).rglob("*.py")]
    for path in [*python, ROOT / "manage.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            called = getattr(func, "id", "") or getattr(func, "attr", "")
            if not (called.startswith("env_") or called in ("get", "getenv")):
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if not SETTING.match(first.value):
                continue
            default = node.args[1] if len(node.args) > 1 else None
            value = default.value if isinstance(default, ast.Constant) else ...
            found.setdefault(first.value, set()).add(value)
    for path in [*(ROOT / "scripts").glob("*.sh"), ROOT / "Makefile"]:
        for name in re.findall(r"\$\{?(BOLTZ_[A-Z0-9_]+)", path.read_text()):
            found.setdefault(name, set()).add(...)
    return found


def settings_table() -> dict[str, str]:
    text = DOC.read_text().split("## Every setting", 1)[1]
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \|([^|]*)\|", text, re.M)
    return {name: default.strip() for name, default in rows}


def test_every_setting_is_in_deploy_md_with_the_codes_default():
    read, table = settings_read(), settings_table()
    assert {"BOLTZ_WEB_WORKERS", "BOLTZ_STORAGE", "BOLTZ_TASK_EVENTS"} <= set(read)  # found
    missing = sorted(set(read) - set(table))
    assert not missing, f"settings the code reads that docs/DEPLOY.md's table lacks: {missing}"
    stale = sorted(set(table) - set(read) - READ_BY_LIBRARIES)
    assert not stale, f"rows of docs/DEPLOY.md's table no code reads: {stale}"
    wrong = []
    for name, defaults in read.items():
        constants = {d for d in defaults if d is not ... and d is not None}
        if len(constants) != 1:
            continue  # computed, or read in two ways
        (default,) = constants
        if isinstance(default, bool):
            expected = f"`{str(default).lower()}`"
        elif default == "":
            continue  # "(none)" and the like: said in words
        else:
            expected = f"`{default}`"
        if expected not in table[name]:
            wrong.append(f"{name}: the code's default is {expected}, the table says {table[name]}")
    assert not wrong, wrong


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_the_upgrades_migrate_of_deploy_md_runs_on_the_database(tmp_path):
    env_file = write_env_file(tmp_path / "boltz.env", deploy_settings(tmp_path))
    done = run_doc(
        here(
            doc_command(
                "set -a; . /etc/boltz/boltz.env; set +a; .venv/bin/python manage.py migrate"
            ),
            {"/etc/boltz/boltz.env": str(env_file)},
        )
    )
    assert done.returncode == 0, done.stderr
    assert "No migrations to apply." in done.stdout


def connection_url() -> str:
    return _worker_database_env()["DATABASE_URL"]
