"""Boltz through its HTTP API and Python SDK against the same container work in plain Docker
SDK (docker-py) calls, in the same run.

    .venv/bin/python bench/api.py [-n 100] [--creates 10] [--write docs/PERFORMANCE.md]

It starts what it needs itself, on 127.0.0.1 only, in a scratch data folder: the database
(migrated), the fix-add example task, a user and an API token, a worker (`manage.py
run_worker`, on a queue and Redis database of its own) and a web server (`manage.py
runserver`). At the end, also on errors, it stops both and removes every container it made;
then the scratch folder, unless something failed (it holds their logs).

Measured, Boltz against raw, rounds interleaved (alternating which goes first):
- an exec round trip of `true`: `sb.exec("true")` against `container.exec_run("true")`;
- writing and reading 1 KB and 10 MB: `sb.files.write/read` against `put_archive` (the bytes
  as a one-file tar) and `get_archive` (the file taken out of the tar);
- create to first exec: `client.sandbox(task="fix-add")` until its first exec answered,
  against `containers.create` + `put_archive` of the same workspace tar + `start` + the first
  `exec_run`.
The raw containers are created with the same options as bench/sandbox.py's raw path.
Targets (from the issue): exec overhead under 15 ms at p50; create to first exec under 1.3
times raw.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

from _setup import ROOT, create_raw_container, django_in_scratch, machine

REDIS_URL = "redis://127.0.0.1:6379/14"
EXEC_TARGET_MS = 15.0
CREATE_TARGET_RATIO = 1.3
SIZES = {"1 KB": 1024, "10 MB": 10 * 1024 * 1024}


def stats(samples: list[float]) -> dict:
    ms = [s * 1000 for s in samples]
    p95 = statistics.quantiles(ms, n=20, method="inclusive")[18] if len(ms) > 1 else ms[0]
    return {"p50": statistics.median(ms), "p95": p95, "n": len(ms)}


def interleaved(boltz, raw, rounds: int) -> tuple[dict, dict]:
    """Time `boltz` and `raw` `rounds` times each, alternating which goes first."""
    times: dict = {boltz: [], raw: []}
    for i in range(rounds):
        for fn in (boltz, raw) if i % 2 == 0 else (raw, boltz):
            start = time.perf_counter()
            fn()
            times[fn].append(time.perf_counter() - start)
    return stats(times[boltz]), stats(times[raw])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_process(argv: list[str], log_path: Path, env: dict) -> subprocess.Popen:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole at the end
        )


def stop_process(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for(ready, proc: subprocess.Popen, log_path: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.2)


def one_file_tar(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.uid, info.gid = len(data), 0o644, 1000, 1000
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def file_from_tar(chunks) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r") as tar:
        member = tar.next()
        return tar.extractfile(member).read()


@contextlib.contextmanager
def served(
    instance: str = "api",
    worker_env: dict[str, str] | None = None,
    web_argv: list[str] | None = None,
):
    """Django in a scratch folder with the fix-add task, a user and a token; a worker and a web
    server process on 127.0.0.1. Yields a namespace: url, token, task, workspace (the tar every
    sandbox of the task starts from), docker (a docker-py client), raw_label (the label to give
    raw containers), data (the folder). Stops both processes and removes every container made,
    also on errors. `worker_env` adds to the worker's environment only (e.g. its capacity,
    BOLTZ_MAX_SANDBOXES, and its operation threads, BOLTZ_OPS_CONCURRENCY)."""
    queue = f"boltz-bench-{instance}-{os.getpid()}"
    # Before Django reads its settings: this process and its children share them.
    os.environ.update({"BOLTZ_QUEUE": queue, "BOLTZ_REDIS_URL": REDIS_URL})
    data = django_in_scratch(instance)
    import docker
    import httpx
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from attempts.api.tokens import token_create
    from attempts.taskio import repos
    from attempts.taskio.folders import load_task_dir

    task, _ = load_task_dir(ROOT / "examples" / "fix-add")
    user = get_user_model().objects.create_user("bench", password=None)
    _, token = token_create(user=user, name="bench")
    raw_label = f"boltz-bench-{instance}-{os.getpid()}"
    docker_client = docker.from_env(timeout=120)
    broker = redis.Redis.from_url(REDIS_URL)
    broker.flushdb()  # this benchmark's own database: no message of an earlier run is left
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    worker = web = None
    done = False
    try:
        worker_log = data / "worker.log"
        worker = start_process(
            [sys.executable, "manage.py", "run_worker"], worker_log, {**env, **(worker_env or {})}
        )
        wait_for(
            lambda: worker_log.read_bytes().count(b" ready.") >= 3,
            worker,
            worker_log,
            "the worker",
            60,
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        web_log = data / "web.log"
        argv = web_argv or [sys.executable, "manage.py", "runserver", "{addr}", "--noreload"]
        web = start_process(
            [a.replace("{addr}", f"127.0.0.1:{port}").replace("{port}", str(port)) for a in argv],
            web_log,
            env,
        )

        def web_ready() -> bool:
            try:
                return httpx.get(url + "/api/openapi.json", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(web_ready, web, web_log, "the web server", 30)
        workspace = repos.cached_workspace_archive(task.repo_url, task.base_commit).read_bytes()
        yield types.SimpleNamespace(
            url=url,
            token=token,
            task=task,
            workspace=workspace,
            docker=docker_client,
            raw_label=raw_label,
            data=data,
        )
        done = True
    finally:
        stop_process(web)
        stop_process(worker)
        removed = 0
        for label in (f"boltz.instance={settings.BOLTZ_INSTANCE}", f"boltz.bench={raw_label}"):
            for container in docker_client.containers.list(all=True, filters={"label": label}):
                container.remove(force=True, v=True)
                removed += 1
        broker.flushdb()
        print(f"stopped the worker and the web server; removed {removed} containers")
        if done:
            shutil.rmtree(data, ignore_errors=True)
        else:
            print(f"the scratch folder with the worker's and web server's logs: {data}")


def raw_container(env, *, start: bool = True):
    """A container made as bench/sandbox.py's raw path makes it; started with the workspace
    copied in unless `start` is false."""
    container = create_raw_container(env.docker, env.task, label=env.raw_label)
    if start:
        container.put_archive("/", env.workspace)
        container.start()
    return container


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=100, help="rounds of exec and file operations")
    parser.add_argument("--creates", type=int, default=10, help="rounds of create to first exec")
    parser.add_argument("--write")
    args = parser.parse_args()
    from boltz import Client

    with served() as env, Client(env.url, token=env.token, timeout=120) as client:
        rows, notes = measure(client, env, args)

    for name, boltz_t, raw_t in rows:
        print(
            f"{name}: Boltz p50 {boltz_t['p50']:.1f} ms p95 {boltz_t['p95']:.1f} ms; "
            f"raw p50 {raw_t['p50']:.1f} ms p95 {raw_t['p95']:.1f} ms; "
            f"x{boltz_t['p50'] / raw_t['p50']:.2f}"
        )
    print(notes["summary"])
    if args.write:
        from pages import write_section

        body = (
            "| operation | Boltz p50 | Boltz p95 | raw p50 | raw p95 | ratio (p50) |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: |\n"
        )
        for name, boltz_t, raw_t in rows:
            body += (
                f"| {name} | {boltz_t['p50']:.1f} ms | {boltz_t['p95']:.1f} ms | "
                f"{raw_t['p50']:.1f} ms | {raw_t['p95']:.1f} ms | "
                f"×{boltz_t['p50'] / raw_t['p50']:.2f} |\n"
            )
        body += (
            f"\n{notes['summary']} Boltz does more than the raw path: each call goes from the "
            "SDK over HTTP to the web process (token checked, sandbox looked up, host's "
            "liveness read), through Redis to the operations worker of the host that owns "
            "the container, to Docker, and back the same way; every call lands on the "
            "sandbox's timeline (an exec's start and end, its output kept capped at head and "
            "tail, the full raw output stored); files travel base64-encoded through Redis and "
            "are written or read as the sandbox user (a staged tar then a `cat` for a write, "
            "a `cat` for a read). A new sandbox is an attempt: numbered, queued for a host "
            "with room, held in one of its slots, its container created after removing any "
            "stale one of the same name. The raw path is docker-py in this process with the "
            "same container options, nothing recorded.\n\n"
            f"`python bench/api.py -n {args.n} --creates {args.creates}` on {machine()}, "
            f"Docker Engine {notes['docker']}, the web server `manage.py runserver` and the "
            "worker `manage.py run_worker` on this machine, SQLite, Redis on 127.0.0.1; "
            "rounds interleaved."
        )
        write_section(args.write, "API against plain Docker", body)


def measure(client, env, args):
    rows = []
    sb = client.sandbox(task="fix-add", agent="bench")
    raw = raw_container(env)
    try:
        # 1. exec round trip
        def boltz_exec():
            assert sb.exec("true").exit_code == 0

        def raw_exec():
            assert raw.exec_run("true").exit_code == 0

        boltz_exec(), raw_exec()  # warm: connections, the worker's Docker client
        boltz_t, raw_t = interleaved(boltz_exec, raw_exec, args.n)
        rows.append(("exec `true`", boltz_t, raw_t))
        exec_overhead = boltz_t["p50"] - raw_t["p50"]

        # 2. files
        for label, size in SIZES.items():
            payload = os.urandom(size)
            name = f"bench-{size}.bin"

            def boltz_write(payload=payload, name=name):
                sb.files.write(name, payload)

            def raw_write(payload=payload, name=name):
                assert raw.put_archive("/workspace", one_file_tar(name, payload))

            def boltz_read(payload=payload, name=name):
                assert len(sb.files.read(name)) == len(payload)

            def raw_read(payload=payload, name=name):
                stream, _ = raw.get_archive(f"/workspace/{name}")
                assert len(file_from_tar(stream)) == len(payload)

            boltz_write(), raw_write()
            assert sb.files.read(name) == payload
            stream, _ = raw.get_archive(f"/workspace/{name}")
            assert file_from_tar(stream) == payload
            rows.append((f"write {label}", *interleaved(boltz_write, raw_write, args.n)))
            rows.append((f"read {label}", *interleaved(boltz_read, raw_read, args.n)))
    finally:
        raw.remove(force=True)
        sb.close()

    # 3. create to first exec (each Boltz sandbox closed after, untimed, to free its slot)
    made = []

    def boltz_create():
        made.append(client.sandbox(task="fix-add", agent="bench"))
        assert made[-1].exec("true").exit_code == 0

    def raw_create():
        container = raw_container(env, start=False)
        made.append(container)
        container.put_archive("/", env.workspace)
        container.start()
        assert container.exec_run("true").exit_code == 0

    def untimed_cleanup():
        while made:
            thing = made.pop()
            if hasattr(thing, "close"):
                thing.close()
            else:
                thing.remove(force=True)

    boltz_create(), raw_create(), untimed_cleanup()
    times: dict = {"boltz": [], "raw": []}
    for i in range(args.creates):
        order = ("boltz", "raw") if i % 2 == 0 else ("raw", "boltz")
        for which in order:
            fn = boltz_create if which == "boltz" else raw_create
            start = time.perf_counter()
            fn()
            times[which].append(time.perf_counter() - start)
            untimed_cleanup()
    boltz_t, raw_t = stats(times["boltz"]), stats(times["raw"])
    rows.append(("create to first exec", boltz_t, raw_t))
    create_ratio = boltz_t["p50"] / raw_t["p50"]

    exec_ok = "meets" if exec_overhead < EXEC_TARGET_MS else "misses"
    create_ok = "meets" if create_ratio < CREATE_TARGET_RATIO else "misses"
    summary = (
        f"Exec overhead (Boltz p50 minus raw p50): {exec_overhead:.1f} ms, which {exec_ok} "
        f"the target of under {EXEC_TARGET_MS:.0f} ms. Create to first exec: ×{create_ratio:.2f} "
        f"raw, which {create_ok} the target of under ×{CREATE_TARGET_RATIO}. {args.n} rounds "
        f"of each exec and file operation, {args.creates} of create to first exec."
    )
    return rows, {"summary": summary, "docker": env.docker.version()["Version"]}


if __name__ == "__main__":
    main()
