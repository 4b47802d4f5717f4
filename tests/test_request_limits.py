"""Bodies, ids, commands and links at the edges, against a real web server process (and, where
a sandbox is needed, a real worker and Docker): a body over its limit is a 413 in the API's JSON
shape (a page's as a page) and is never held whole; an id past 64 bits is a 404; a command over
its bound is refused before it reaches Docker; every 401 names its scheme; the raw output links
of an exec work with the API's token and a browser's session, for the owner only; and a create
refused for want of room leaves no attempt and uses up no number."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient

from attempts.api.tokens import token_create
from attempts.dispatch.limits import MAX_ARG_BYTES, MAX_COMMAND_BYTES, MAX_ENV_BYTES
from attempts.models import Attempt, Event, EventKind, Task
from tests.conftest import new_task, real, run_web
from tests.test_archive_limits import gzip_bomb

pytestmark = [pytest.mark.django_db(transaction=True)]

MIB = 1 << 20
HUGE = 2**64 + 5  # an id past 64 bits


@pytest.fixture
def people(db):
    """alice and bob (each with a token and a browser session), and staff."""
    model = get_user_model()
    found = {}
    for name, staff in (("alice", False), ("bob", False), ("staff", True)):
        user = model.objects.create_user(name, password="x", is_staff=staff)
        browser = DjangoClient()
        browser.force_login(user)
        found[name] = {
            "user": user,
            "token": token_create(user=user)[1],
            "session": browser.cookies[settings.SESSION_COOKIE_NAME].value,
        }
    return found


def api(web: str, person: dict | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {person['token']}"} if person else {}
    return httpx.Client(base_url=web, headers=headers, timeout=120)


def signed_in(web: str, person: dict) -> httpx.Client:
    cookies = {settings.SESSION_COOKIE_NAME: person["session"]}
    return httpx.Client(base_url=web, cookies=cookies, timeout=60)


def peak_memory(web: str) -> int:
    """The web server process's peak resident memory so far (VmHWM), in bytes."""
    port = web.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"runserver" in cmdline and f"127.0.0.1:{port}".encode() in cmdline:
            status = (proc / "status").read_text()
            return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
    raise AssertionError(f"no web server process on port {port}")


def chunks(total: int, head: bytes = b"", tail: bytes = b""):
    """A body of `total` bytes made as it is sent: `head`, spaces, `tail`."""
    yield head
    left = total - len(head) - len(tail)
    while left > 0:
        n = min(MIB, left)
        yield b" " * n
        left -= n
    yield tail


# --- request bodies -----------------------------------------------------------------------------
def test_a_100_mb_json_body_gets_a_json_413_naming_the_limit_and_is_never_held(web, people, figure):
    size, limit = 100 * 1000 * 1000, settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    before = peak_memory(web)
    with api(web, people["alice"]) as alice:
        answer = alice.post(
            "/api/sandboxes",
            content=chunks(size, b'{"task": "t", "agent": "', b'"}'),
            headers={"Content-Type": "application/json", "Content-Length": str(size)},
        )
        assert answer.status_code == 413
        assert answer.headers["Content-Type"].startswith("application/json")
        assert answer.json() == {
            "detail": f"the request's body is {size} bytes, more than the {limit} bytes this "
            "server takes (BOLTZ_MAX_FILE_BYTES + 1 MiB)",
            "code": "too_large",
        }
        # The same connection goes on: the refused body was read past, not left in the way.
        assert alice.get("/api/tasks").status_code == 200
    grown = peak_memory(web) - before
    assert grown < 16 * MIB, f"the web process's peak memory grew by {grown >> 20} MiB"
    assert not Attempt.objects.exists()
    figure(
        f"a {size / 1e6:.0f} MB JSON body: {answer.status_code}, the web process's peak memory "
        f"grew {grown / MIB:.1f} MiB, {Attempt.objects.count()} attempts made"
    )


def test_a_page_form_over_its_limit_gets_a_413_page_and_small_ones_go_on(people, figure):
    new_task("t")
    with run_web({"BOLTZ_MAX_UPLOAD_BYTES": "1m"}) as web, signed_in(web, people["staff"]) as b:
        size = 3 * MIB
        answer = b.post(
            "/tasks/t/start/",
            content=chunks(size, b"count=1&agent=noop&command="),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Content-Length": str(size),
            },
        )
        assert answer.status_code == 413
        assert answer.headers["Content-Type"].startswith("text/html")
        assert "Too large" in answer.text and "BOLTZ_MAX_UPLOAD_BYTES + 1 MiB" in answer.text
        assert "Content-Security-Policy" in answer.headers  # a page like the others
        assert b.get("/tasks/t/").status_code == 200
    assert not Attempt.objects.exists()
    figure(
        f"a {size / MIB:.0f} MiB page form over a 1 MiB limit: {answer.status_code} page, "
        f"{Attempt.objects.count()} attempts made"
    )


# --- 401 ---------------------------------------------------------------------------------------
def test_every_401_of_the_api_names_the_bearer_scheme(web, figure):
    spec = httpx.get(web + "/api/openapi.json").json()
    answers = 0
    for path, methods in spec["paths"].items():
        url = web + re.sub(r"\{\w+\}", "1", path)
        for method in methods:
            for headers in ({}, {"Authorization": "Bearer bz_not-a-token"}):
                answer = httpx.request(method.upper(), url, headers=headers, json={})
                assert answer.status_code == 401, (method, path)
                assert answer.headers["WWW-Authenticate"].startswith("Bearer"), (method, path)
                assert answer.json()["code"] == "unauthorized"
                answers += 1
    assert answers >= 2 * 25
    figure(
        f"{answers} requests on {len(spec['paths'])} API paths without a valid token: "
        f"{answers} 401s naming Bearer"
    )


# --- ids past 64 bits ---------------------------------------------------------------------------
BODIES = {  # a body each route takes, so the id is what is looked at
    "POST /api/sandboxes/{sandbox_id}/exec": {"command": "true"},
    "POST /api/sandboxes/{sandbox_id}/messages": {"content": "x"},
    "POST /api/pools/{pool_id}/step": {"actions": [None]},
    "POST /api/pools/{pool_id}/envs/{index}/step": {"action": {"run": "true"}},
}


def test_an_id_past_64_bits_is_a_404_on_every_route_and_page(web, people, figure):
    task = new_task("t")
    Attempt.objects.create(task=task, number=1, origin="api", owner=people["staff"]["user"])
    spec = httpx.get(web + "/api/openapi.json").json()
    routes = 0
    with api(web, people["staff"]) as staff:
        for path, methods in spec["paths"].items():
            if "_id}" not in path:
                continue
            url = re.sub(r"\{\w+_id\}|\{index\}", str(HUGE), path).replace("{name}", "x")
            for method in methods:
                body = BODIES.get(f"{method.upper()} {path}", {})
                answer = staff.request(method.upper(), url, params={"path": "x"}, json=body)
                assert answer.status_code == 404, (method, path, answer.text)
                assert answer.json()["code"] == "not_found"
                routes += 1
        waited = staff.post("/api/attempts/wait", json={"ids": [HUGE], "timeout": 1})
        assert waited.status_code == 400 and waited.json()["code"] == "invalid"
    assert routes >= 16
    with signed_in(web, people["staff"]) as browser:
        for url in (
            f"/tasks/t/compare/?a={HUGE}&b=1",  # was a 500 (an id the database cannot take)
            f"/tasks/t/compare/?a=1&b={HUGE}",
            f"/attempts/{HUGE}/",
            f"/attempts/{HUGE}/outputs/x",
            f"/attempts/{HUGE}/changes/{HUGE}/",
            f"/pools/{HUGE}/",
            f"/runs/{HUGE}/",
        ):
            assert browser.get(url).status_code == 404, url
        opened = browser.get(f"/attempts/{Attempt.objects.get().pk}/timeline/?open={HUGE}")
        assert opened.status_code == 200  # a poll naming no such command: nothing to show
    figure(
        f"an id past 64 bits ({HUGE}) on {routes} API routes: {routes} 404s; "
        f"in a wait: {waited.status_code}"
    )


# --- with a sandbox -----------------------------------------------------------------------------
def _sandbox(client: httpx.Client) -> int:
    made = client.post("/api/sandboxes", json={"task": "fix-add"})
    assert made.status_code == 201, made.text
    return made.json()["id"]


@real
def test_a_command_over_its_bound_is_refused_before_it_reaches_docker(
    web, worker, people, load_example, figure
):
    load_example("fix-add")
    spec = httpx.get(web + "/api/openapi.json").json()
    described = spec["components"]["schemas"]["ExecIn"]["properties"]
    assert f"at most {MAX_COMMAND_BYTES} bytes" in described["command"]["description"]
    assert f"at most {MAX_ENV_BYTES} bytes" in described["env"]["description"]
    with api(web, people["alice"]) as alice:
        sid = _sandbox(alice)
        try:
            execs = Attempt.objects.get(pk=sid).events.filter(kind=EventKind.EXEC).count
            before = execs()
            big = alice.post(f"/api/sandboxes/{sid}/exec", json={"command": "x" * 60_000_000})
            assert big.status_code == 413, big.text
            assert big.json()["code"] == "too_large"
            assert big.json()["detail"].startswith(
                f"command: 60000001 bytes, more than the {MAX_COMMAND_BYTES} a command may have "
                "(MAX_COMMAND_BYTES)"
            )
            argv = alice.post(
                f"/api/sandboxes/{sid}/exec", json={"command": ["echo", "y" * MAX_ARG_BYTES]}
            )
            assert (argv.status_code, argv.json()["code"]) == (413, "too_large")
            env = alice.post(
                f"/api/sandboxes/{sid}/exec",
                json={"command": "true", "env": {"BIG": "z" * MAX_ARG_BYTES}},
            )
            assert env.status_code == 413 and env.json()["detail"].startswith("env: ")
            assert execs() == before  # none of them reached the sandbox
            # One at the bound runs: the bound is what a sandbox's process really takes.
            command = "echo ok; : "
            command += "a" * (MAX_ARG_BYTES - 1 - len(command))
            ran = alice.post(f"/api/sandboxes/{sid}/exec", json={"command": command})
            assert ran.status_code == 200, ran.text
            assert (ran.json()["exit_code"], ran.json()["stdout"]) == (0, "ok\n")
            chunk = "c" * (64 * 1024)  # 1 MiB of arguments, as Inspect's own check sends
            ran = alice.post(
                f"/api/sandboxes/{sid}/exec",
                json={"command": ["sh", "-c", 'echo "$#"', "sh", *[chunk] * 16]},
            )
            assert (ran.status_code, ran.json()["stdout"]) == (200, "16\n"), ran.text
            env = {"BIG": "z" * (MAX_ARG_BYTES - 6)}
            ran = alice.post(
                f"/api/sandboxes/{sid}/exec", json={"command": 'echo "${#BIG}"', "env": env}
            )
            assert ran.json()["stdout"] == f"{MAX_ARG_BYTES - 6}\n"
            figure(
                f"a 60 MB command: {big.status_code}, an argv past the bound: {argv.status_code}; "
                f"{execs() - before} exec events since, all of the runs at the bound "
                f"({MAX_COMMAND_BYTES} bytes)"
            )
        finally:
            alice.post(f"/api/sandboxes/{sid}/close", json={})


@real
def test_raw_output_links_work_with_the_token_and_a_session_for_the_owner_only(
    web, worker, people, load_example, figure
):
    load_example("fix-add")
    with api(web, people["alice"]) as alice:
        sid = _sandbox(alice)
        try:
            ran = alice.post(
                f"/api/sandboxes/{sid}/exec",
                json={"command": "head -c 300000 /dev/zero | tr '\\0' a"},
            ).json()
            assert ran["truncated"] is True and ran["stdout_bytes"] == 300000
            link = ran["stdout_raw"]
            assert link.startswith(f"{web}/api/attempts/{sid}/outputs/")
            raw = alice.get(link)
            assert raw.status_code == 200 and raw.content == b"a" * 300000
            assert raw.headers["Content-Type"] == "text/plain; charset=utf-8"
            with api(web, people["bob"]) as bob:  # not bob's: as if it did not exist
                refused = bob.get(link)
                assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
            with api(web, people["staff"]) as staff:
                assert staff.get(link).content == raw.content
            anonymous = httpx.get(link)
            assert anonymous.status_code == 401
            assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
            with signed_in(web, people["alice"]) as browser:
                assert browser.get(link).content == raw.content
            with signed_in(web, people["bob"]) as browser:
                assert browser.get(link).status_code == 404
            with api(web, people["alice"]) as again:
                missing = again.get(f"/api/attempts/{sid}/outputs/no-such-output")
                assert missing.status_code == 404
            # The page's own link (for reviewers signed in to the pages) still answers.
            page = link.replace(f"/api/attempts/{sid}/", f"/attempts/{sid}/")
            with signed_in(web, people["staff"]) as browser:
                assert browser.get(page).content == raw.content
            figure(
                f"a {len(raw.content)}-byte raw output: the owner's token and session, staff "
                f"got it; another user {refused.status_code}, no token {anonymous.status_code}"
            )
        finally:
            alice.post(f"/api/sandboxes/{sid}/close", json={})


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@real
def test_an_archive_bomb_put_into_a_sandbox_is_refused_and_nothing_lands(
    web, worker, people, load_example, figure
):
    load_example("fix-add")
    with api(web, people["alice"]) as alice:
        sid = _sandbox(alice)
        try:
            bomb = gzip_bomb(200 * MIB)
            put = alice.put(f"/api/sandboxes/{sid}/archive", params={"path": "up"}, content=bomb)
            assert put.status_code == 413, put.text
            assert put.json()["code"] == "too_large"
            assert "BOLTZ_MAX_ARCHIVE_RATIO" in put.json()["detail"]
            listed = alice.get(f"/api/sandboxes/{sid}/files/list", params={"path": "."}).json()
            assert "up" not in [e["name"] for e in listed]
            ok = alice.put(
                f"/api/sandboxes/{sid}/archive",
                params={"path": "up"},
                content=_tar({"a/b.txt": b"hello\n"}),
            )
            assert ok.status_code == 200 and ok.json()["files"] == 1
            read = alice.get(f"/api/sandboxes/{sid}/files", params={"path": "up/a/b.txt"})
            assert read.content == b"hello\n"
            figure(
                f"a {len(bomb) / 1000:.0f} KB tar.gz bomb put into a sandbox: {put.status_code}, "
                f"nothing landed; a small archive after it: {ok.json()['files']} file"
            )
        finally:
            alice.post(f"/api/sandboxes/{sid}/close", json={})


@real
def test_a_create_refused_for_want_of_room_leaves_no_attempt_and_no_number(
    web, worker, people, load_example, figure
):
    task = load_example("fix-add")
    with api(web, people["alice"]) as alice:
        held = [_sandbox(alice) for _ in range(2)]  # the test worker's two slots
        try:
            rows = set(Attempt.objects.values_list("pk", flat=True))
            number = Task.objects.get(pk=task.pk).next_attempt_number
            for _ in range(3):
                full = alice.post("/api/sandboxes", json={"task": "fix-add", "wait": 1})
                assert (full.status_code, full.json()["code"]) == (429, "capacity")
                assert int(full.headers["Retry-After"]) > 0
            assert set(Attempt.objects.values_list("pk", flat=True)) == rows  # none left
            assert not Event.objects.exclude(attempt_id__in=rows).exists()
            assert Task.objects.get(pk=task.pk).next_attempt_number == number
            alice.post(f"/api/sandboxes/{held.pop()}/close", json={})
            again = alice.post("/api/sandboxes", json={"task": "fix-add", "wait": 120})
            assert again.status_code == 201, again.text
            held.append(again.json()["id"])
            assert again.json()["number"] == number  # the next one takes the number after all
            numbers = sorted(Attempt.objects.filter(task=task).values_list("number", flat=True))
            assert numbers == list(range(1, number + 1))  # none skipped
            figure(
                f"creates on a full worker: {full.status_code}, Retry-After "
                f"{full.headers['Retry-After']} s, "
                f"{Attempt.objects.exclude(pk__in=rows).exclude(pk=held[-1]).count()} rows left; "
                f"the next one got number {again.json()['number']}, none skipped"
            )
        finally:
            for sid in held:
                alice.post(f"/api/sandboxes/{sid}/close", json={})


# --- the same bounds where no sandbox is needed ---------------------------------------------------
def test_a_pool_action_and_an_attempt_command_are_held_to_the_command_bound(db):
    from attempts.core.errors import TaskInvalid
    from attempts.dispatch.errors import TooLarge
    from attempts.services.attempts import attempts_create
    from attempts.services.pools import parse_action

    with pytest.raises(TooLarge, match=r"^actions\[2\]\.run: .*MAX_ARG_BYTES"):
        parse_action({"run": "x" * MAX_ARG_BYTES}, where="actions[2]")  # one argument of sh
    assert parse_action({"run": "x" * (MAX_ARG_BYTES - 1)}, where="a") is not None
    task = new_task("t")
    with pytest.raises(TaskInvalid) as refused:
        attempts_create(task=task, agent="command", command="x" * MAX_ARG_BYTES)
    assert refused.value.field == "command" and "MAX_ARG_BYTES" in refused.value.message
    assert not Attempt.objects.exists()


def test_a_sandbox_a_worker_took_meanwhile_is_never_withdrawn(db):
    from attempts.services.attempts import attempt_withdraw, numbered_attempt

    task = new_task("t")
    queued, taken = numbered_attempt(task), numbered_attempt(task)
    Attempt.objects.filter(pk=taken.pk).update(status="starting")  # a worker's claim won
    assert attempt_withdraw(attempt_id=taken.pk) is False
    assert Attempt.objects.get(pk=taken.pk).status == "starting"
    # Withdrawn while a later number is out: the row goes, the number stays used.
    assert attempt_withdraw(attempt_id=queued.pk) is True
    assert list(Attempt.objects.values_list("number", flat=True)) == [2]
    assert Task.objects.get(pk=task.pk).next_attempt_number == 3
    last = numbered_attempt(task)
    assert attempt_withdraw(attempt_id=last.pk) is True  # the last given: its number comes back
    assert Task.objects.get(pk=task.pk).next_attempt_number == 3
    assert numbered_attempt(task).number == 3
