"""Unit tests of the Python SDK (`boltz/`) against httpx.MockTransport: no server, no Docker."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

import boltz
from boltz import errors
from boltz.archives import safe_extract, tar_directory

ROOT = Path(__file__).resolve().parent.parent
URL = "http://boltz.test"

SANDBOX = {
    "id": 7,
    "attempt": 70,
    "task": "fix-add",
    "number": 3,
    "name": "fix-add#3",
    "status": "running",
    "state": "live",
    "labels": {"run": "unit"},
    "agent": "sdk-test",
    "host": "h1",
    "created_at": "2025-01-01T00:00:00Z",
    "expires_at": None,
    "url": f"{URL}/attempts/70/",
    "a_field_added_later": True,
}

EXEC_RESULT = {
    "exit_code": 0,
    "stdout": "hello\n",
    "stderr": "",
    "stdout_bytes": 6,
    "stderr_bytes": 0,
    "truncated": False,
    "timed_out": False,
    "duration": 0.1,
    "stdout_raw": f"{URL}/raw/1",
    "stderr_raw": f"{URL}/raw/2",
}


def run_async(coroutine):
    """Run a coroutine on a loop of its own thread: a test before this one (Playwright's sync
    API) may have left an event loop running in this thread."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class FakeServer:
    """Routes `(method, path)` to handlers and records every request it gets."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], object] = {}
        self.requests: list[httpx.Request] = []
        self.route("POST", "/api/sandboxes", lambda r: httpx.Response(201, json=SANDBOX))
        self.route("POST", "/api/sandboxes/7/close", self.closed)

    def route(self, method: str, path: str, answer) -> None:
        self.routes[(method, path)] = answer

    @staticmethod
    def closed(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={**SANDBOX, "state": "closed", "status": "finished"})

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"detail": "no such route", "code": "not_found"})
        if isinstance(answer, httpx.Response):
            return answer
        return answer(request)

    def calls(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    def client(self, **kwargs) -> boltz.Client:
        return boltz.Client(URL, token="tok", transport=httpx.MockTransport(self), **kwargs)

    def async_client(self, **kwargs) -> boltz.AsyncClient:
        return boltz.AsyncClient(URL, token="tok", transport=httpx.MockTransport(self), **kwargs)


def error(status: int, code: str | None, detail: str = "what went wrong", **headers):
    body = {"detail": detail}
    if code:
        body["code"] = code
    return lambda request: httpx.Response(status, json=body, headers=headers)


def ndjson(*items: dict) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in items)


# Errors


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "invalid", boltz.InvalidRequest),
        (422, None, boltz.InvalidRequest),
        (401, "unauthorized", boltz.AuthError),
        (404, "not_found", boltz.NotFound),
        (404, "file_not_found", boltz.BoltzFileNotFoundError),
        (400, "is_a_directory", boltz.BoltzIsADirectoryError),
        (403, "permission_denied", boltz.BoltzPermissionError),
        (409, "closed", boltz.SandboxClosed),
        (410, "gone", boltz.SandboxGone),
        (413, "too_large", boltz.FileTooLarge),
        (429, "capacity", boltz.CapacityError),
        (502, "infrastructure", boltz.InfrastructureError),
        (503, None, boltz.InfrastructureError),
        (504, "timeout", boltz.OperationTimeout),
        (500, None, boltz.BoltzError),
        (418, "something_new", boltz.BoltzError),
    ],
)
def test_each_error_status_and_code_maps_to_its_exception(status, code, cls):
    server = FakeServer()
    server.route("GET", "/api/sandboxes/7", error(status, code, "the detail"))
    with server.client() as client, pytest.raises(cls) as caught:
        client.get_sandbox(7)
    exc = caught.value
    assert type(exc) is cls
    assert isinstance(exc, boltz.BoltzError)
    assert (exc.status, exc.code, exc.detail) == (status, code, "the detail")
    assert "the detail" in str(exc)


def test_errors_are_also_the_builtin_exceptions():
    assert issubclass(boltz.BoltzFileNotFoundError, FileNotFoundError)
    assert issubclass(boltz.BoltzIsADirectoryError, IsADirectoryError)
    assert issubclass(boltz.BoltzPermissionError, PermissionError)
    assert issubclass(boltz.OperationTimeout, TimeoutError)
    assert issubclass(boltz.ConnectionFailed, ConnectionError)
    assert boltz.BoltzError is errors.BoltzError


def test_capacity_error_carries_retry_after():
    server = FakeServer()
    server.route(
        "POST",
        "/api/sandboxes",
        error(429, "capacity", "no host had room", **{"Retry-After": "12"}),
    )
    with server.client() as client, pytest.raises(boltz.CapacityError) as caught:
        client.sandbox(task="fix-add", wait=5)
    assert caught.value.retry_after == 12.0
    assert json.loads(server.requests[0].content) == {"task": "fix-add", "wait": 5}


def test_an_error_answer_that_is_not_json_still_maps_by_status():
    server = FakeServer()
    server.route("GET", "/api/tasks", httpx.Response(502, text="<html>Bad Gateway</html>"))
    with server.client() as client, pytest.raises(boltz.InfrastructureError) as caught:
        client.tasks()
    assert caught.value.status == 502 and caught.value.code is None


def test_file_errors_are_caught_as_builtin_exceptions():
    server = FakeServer()
    files = "/api/sandboxes/7/files"
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        server.route("GET", files, error(404, "file_not_found", "no such file: nope.py"))
        try:
            sb.files.read("nope.py")
        except FileNotFoundError as exc:
            assert exc.filename == "nope.py"
            assert isinstance(exc, boltz.BoltzError)
        else:
            pytest.fail("FileNotFoundError not raised")
        server.route("GET", files, error(400, "is_a_directory", "tests is a folder"))
        with pytest.raises(IsADirectoryError):
            sb.files.read("tests")
        server.route("PUT", files, error(403, "permission_denied", "not yours"))
        with pytest.raises(PermissionError):
            sb.files.write("/etc/passwd", "x")
        server.route("GET", "/api/sandboxes/7/files/list", error(404, "file_not_found", "gone"))
        with pytest.raises(FileNotFoundError):
            sb.files.list("missing")


def test_unreachable_server_names_the_url():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    client = boltz.Client("http://127.0.0.1:9", token="t", transport=httpx.MockTransport(refuse))
    with client, pytest.raises(boltz.ConnectionFailed) as caught:
        client.tasks()
    assert "http://127.0.0.1:9" in str(caught.value)
    assert isinstance(caught.value, ConnectionError)


def test_a_client_side_timeout_is_an_operation_timeout():
    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    client = boltz.Client(URL, transport=httpx.MockTransport(slow))
    with client, pytest.raises(boltz.OperationTimeout) as caught:
        client.attempt(1)
    assert isinstance(caught.value, TimeoutError)
    assert URL in str(caught.value)


def test_401_without_a_token_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("BOLTZ_TOKEN", raising=False)
    server = FakeServer()
    server.route("GET", "/api/tasks", error(401, "unauthorized", "no valid token"))
    client = boltz.Client(URL, transport=httpx.MockTransport(server))
    with client, pytest.raises(boltz.AuthError, match="BOLTZ_TOKEN"):
        client.tasks()
    assert "authorization" not in server.requests[0].headers


# Configuration


def test_url_and_token_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("BOLTZ_URL", "http://from-env:8123/")
    monkeypatch.setenv("BOLTZ_TOKEN", "env-token")
    seen = []

    def answer(request):
        seen.append(request)
        return httpx.Response(200, json=[])

    with boltz.Client(transport=httpx.MockTransport(answer)) as client:
        assert client.url == "http://from-env:8123"
        client.tasks()
    assert str(seen[0].url) == "http://from-env:8123/api/tasks"
    assert seen[0].headers["authorization"] == "Bearer env-token"

    with boltz.Client("explicit:9000", "arg-token", transport=httpx.MockTransport(answer)) as c:
        c.tasks()
    assert str(seen[1].url) == "http://explicit:9000/api/tasks"
    assert seen[1].headers["authorization"] == "Bearer arg-token"


def test_default_url_when_nothing_is_configured(monkeypatch):
    monkeypatch.delenv("BOLTZ_URL", raising=False)
    with boltz.Client() as client:
        assert client.url == "http://127.0.0.1:8000"
    with boltz.Client("http://host:8000/api/") as client:
        assert client.url == "http://host:8000"


# Sandboxes


def test_sandbox_context_manager_closes_on_exit():
    server = FakeServer()
    with server.client() as client:
        with client.sandbox(task="fix-add", labels={"run": "unit"}, agent="me", ttl=60) as sb:
            assert (sb.id, sb.name, sb.state, sb.labels) == (
                7,
                "fix-add#3",
                "live",
                SANDBOX["labels"],
            )
            assert sb.url == SANDBOX["url"]
            assert sb.info.raw["a_field_added_later"] is True
        closes = server.calls("POST", "/api/sandboxes/7/close")
        assert len(closes) == 1
        assert json.loads(closes[0].content) == {"check": False}
        assert sb.state == "closed"
    body = json.loads(server.calls("POST", "/api/sandboxes")[0].content)
    assert body == {"task": "fix-add", "labels": {"run": "unit"}, "agent": "me", "ttl": 60}
    assert server.requests[0].headers["authorization"] == "Bearer tok"


def test_sandbox_context_manager_closes_on_an_exception_and_keeps_it():
    server = FakeServer()
    client = server.client()
    with client, pytest.raises(ValueError, match="agent bug"), client.sandbox(task="fix-add"):
        raise ValueError("agent bug")
    assert len(server.calls("POST", "/api/sandboxes/7/close")) == 1


def test_a_failing_close_never_hides_the_first_error():
    server = FakeServer()
    server.route("POST", "/api/sandboxes/7/close", error(502, "infrastructure", "docker died"))
    with server.client() as client:
        with pytest.raises(KeyError) as caught, client.sandbox(task="fix-add"):
            raise KeyError("first")
        notes = getattr(caught.value, "__notes__", None)
        if notes is not None:  # Python 3.11+: the close failure is noted on the first error
            assert any("docker died" in note for note in notes)
        # Without an error inside, the close failure itself is raised.
        with pytest.raises(boltz.InfrastructureError), client.sandbox(task="fix-add"):
            pass


def test_exit_ignores_a_sandbox_already_closed_or_deleted():
    server = FakeServer()
    server.route("POST", "/api/sandboxes/7/close", error(409, "closed", "already closed"))
    server.route("DELETE", "/api/sandboxes/7", httpx.Response(204))
    with server.client() as client:
        with client.sandbox(task="fix-add"):
            pass  # closed elsewhere: the 409 at exit is not an error
        with client.sandbox(task="fix-add") as sb:
            sb.delete()
        assert len(server.calls("POST", "/api/sandboxes/7/close")) == 1
        assert sb.state == "deleted"


def test_explicit_close_with_check_returns_the_final_check_and_exit_does_not_close_again():
    server = FakeServer()
    check = {"id": 5, "passed": True, "score": 1.0, "tests": [{"name": "t", "outcome": "passed"}]}
    server.route(
        "POST",
        "/api/sandboxes/7/close",
        httpx.Response(200, json={**SANDBOX, "state": "closed", "check": check}),
    )
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        info = sb.close(check=True)
        assert info.state == "closed"
        assert info.check.passed and info.check.tests[0].passed
    assert len(server.calls("POST", "/api/sandboxes/7/close")) == 1
    request = server.calls("POST", "/api/sandboxes/7/close")[0]
    assert json.loads(request.content) == {"check": True}
    assert request.extensions["timeout"]["read"] > 60  # waits for the check


def test_exec_sends_the_options_and_parses_the_result():
    server = FakeServer()
    server.route(
        "POST",
        "/api/sandboxes/7/exec",
        httpx.Response(200, json={**EXEC_RESULT, "exit_code": 1, "new": "ignored"}),
    )
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        result = sb.exec(
            ["python3", "-m", "pytest"], cwd="/workspace", env={"A": "1"}, timeout=30, stdin=b"in"
        )
    assert result.exit_code == 1 and not result.ok and result.stdout == "hello\n"
    assert result.stdout_raw == f"{URL}/raw/1"
    request = server.calls("POST", "/api/sandboxes/7/exec")[0]
    assert json.loads(request.content) == {
        "command": ["python3", "-m", "pytest"],
        "cwd": "/workspace",
        "env": {"A": "1"},
        "timeout": 30,
        "stdin_base64": "aW4=",  # bytes go as they are
    }
    assert request.extensions["timeout"]["read"] == 60 + 30


def test_exec_stream_calls_on_output_per_line_and_returns_the_result():
    server = FakeServer()
    body = ndjson(
        {"stream": "stdout", "text": "collecting\n"},
        {"stream": "stderr", "text": "warning\n"},
        {"stream": "stdout", "text": "1 passed\n"},
        {"result": {**EXEC_RESULT, "stdout": "collecting\n1 passed\n"}},
    )
    # Delivered in awkward chunks, splitting lines and even a JSON object.
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]
    server.route(
        "POST",
        "/api/sandboxes/7/exec",
        lambda r: httpx.Response(
            200, content=iter(chunks), headers={"Content-Type": "application/x-ndjson"}
        ),
    )
    seen = []
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        result = sb.exec("pytest", on_output=lambda stream, text: seen.append((stream, text)))
    assert seen == [("stdout", "collecting\n"), ("stderr", "warning\n"), ("stdout", "1 passed\n")]
    assert result.ok and result.stdout == "collecting\n1 passed\n"
    assert json.loads(server.calls("POST", "/api/sandboxes/7/exec")[0].content)["stream"] is True


def test_exec_stream_without_callback_prints_and_a_cut_stream_is_an_error(capsys):
    server = FakeServer()
    server.route(
        "POST",
        "/api/sandboxes/7/exec",
        lambda r: httpx.Response(200, content=ndjson({"stream": "stdout", "text": "live\n"})),
    )
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        with pytest.raises(boltz.BoltzError, match="without a result"):
            sb.exec("pytest", stream=True)
        assert capsys.readouterr().out == "live\n"
        server.route("POST", "/api/sandboxes/7/exec", error(409, "closed", "the sandbox is closed"))
        with pytest.raises(boltz.SandboxClosed):
            sb.exec("pytest", stream=True)


def test_files_calls():
    server = FakeServer()
    base = "/api/sandboxes/7"
    server.route("GET", f"{base}/files", httpx.Response(200, content=b"def add(a, b):\n"))
    server.route("PUT", f"{base}/files", lambda r: httpx.Response(200, json={"bytes": 3}))
    server.route("DELETE", f"{base}/files", httpx.Response(204))
    listing = [{"name": "calc.py", "path": "calc.py", "type": "file", "size": 9, "mode": 420}]
    server.route("GET", f"{base}/files/list", httpx.Response(200, json=listing))
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        assert sb.files.read("calc.py") == b"def add(a, b):\n"
        assert sb.files.read("calc.py", text=True) == "def add(a, b):\n"
        assert sb.files.write("run.sh", "é!", mode=0o755) == 3
        entries = sb.files.list()
        assert entries[0].is_file and entries[0].name == "calc.py"
        sb.files.delete("old.txt")
    put = server.calls("PUT", f"{base}/files")[0]
    assert put.content == "é!".encode()
    assert put.url.params["path"] == "run.sh" and put.url.params["mode"] == "0755"
    assert server.calls("GET", f"{base}/files/list")[0].url.params["path"] == "."
    assert server.calls("DELETE", f"{base}/files")[0].url.params["path"] == "old.txt"


def test_upload_and_download_a_folder(tmp_path):
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    (source / "top.txt").write_text("top\n")
    server = FakeServer()
    base = "/api/sandboxes/7"
    uploaded = {}

    def put_archive(request):
        uploaded["tar"] = request.content
        return httpx.Response(200, json={"path": request.url.params["path"], "files": 2})

    server.route("PUT", f"{base}/archive", put_archive)
    server.route("GET", f"{base}/files", error(400, "is_a_directory", "a folder"))
    server.route("GET", f"{base}/archive", lambda r: httpx.Response(200, content=uploaded["tar"]))
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        assert sb.files.upload(source, "vendor") == 2
        with tarfile.open(fileobj=io.BytesIO(uploaded["tar"])) as archive:
            assert sorted(archive.getnames()) == ["pkg", "pkg/mod.py", "top.txt"]
        target = sb.files.download("vendor", tmp_path / "back")
    assert (target / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (target / "top.txt").read_text() == "top\n"


def test_upload_and_download_a_file(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    server = FakeServer()
    base = "/api/sandboxes/7"
    server.route("PUT", f"{base}/files", lambda r: httpx.Response(200, json={"bytes": 10}))
    server.route("GET", f"{base}/files", httpx.Response(200, content=b"data"))
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        assert sb.files.upload(script, "bin/") == 1
        folder = tmp_path / "out"
        folder.mkdir()
        assert sb.files.download("sub/calc.py", folder) == folder / "calc.py"
        assert sb.files.download("calc.py", tmp_path / "x" / "y.py").read_bytes() == b"data"
    put = server.calls("PUT", f"{base}/files")[0]
    assert put.url.params["path"] == "bin/run.sh" and put.url.params["mode"] == "0750"
    assert (folder / "calc.py").read_bytes() == b"data"


def test_check_diff_message_refresh_delete():
    server = FakeServer()
    base = "/api/sandboxes/7"
    check = {
        "id": 1,
        "passed": False,
        "score": 0.5,
        "source": "junit",
        "mode": "clean",
        "summary": "1 of 2 passed",
        "problem": "",
        "exit_code": 1,
        "timed_out": False,
        "duration": 1.5,
        "output": "F.",
        "tests": [{"name": "test_add", "outcome": "failed", "message": "assert -1 == 5"}],
        "extra": 1,
    }
    server.route("POST", f"{base}/check", httpx.Response(200, json=check))
    diff = {
        "patch": "diff --git a/calc.py b/calc.py\n",
        "truncated": False,
        "files": [{"path": "calc.py", "status": "modified", "added": 1, "removed": 1}],
    }
    server.route("GET", f"{base}/diff", httpx.Response(200, json=diff))
    server.route("POST", f"{base}/messages", httpx.Response(201))
    server.route("GET", base, httpx.Response(200, json={**SANDBOX, "state": "closed"}))
    server.route("DELETE", base, httpx.Response(204))
    with server.client() as client:
        sb = client.sandbox(task="fix-add")
        result = sb.check()
        assert (result.passed, result.score, result.summary) == (False, 0.5, "1 of 2 passed")
        assert result.tests[0].name == "test_add" and result.tests[0].message == "assert -1 == 5"
        assert server.calls("POST", f"{base}/check")[0].extensions["timeout"]["read"] > 60
        changes = sb.diff()
        assert changes.files[0].path == "calc.py" and changes.files[0].added == 1
        sb.message("assistant", "fixed add()")
        assert json.loads(server.calls("POST", f"{base}/messages")[0].content) == {
            "role": "assistant",
            "content": "fixed add()",
        }
        assert sb.refresh().state == "closed" and sb.state == "closed"
        sb.delete()
        assert sb.state == "deleted"


def test_listing_sandboxes_tasks_and_attempts():
    server = FakeServer()
    server.route("GET", "/api/sandboxes", httpx.Response(200, json=[SANDBOX]))
    task = {"slug": "fix-add", "title": "Fix add()", "instruction": "...", "image": "img"}
    server.route("GET", "/api/tasks", httpx.Response(200, json=[task]))

    def attempt(i, status="finished"):
        return {"id": i, "task": "fix-add", "number": i, "status": status, "outcome": "passed"}

    server.route(
        "POST", "/api/tasks/fix-add/attempts", httpx.Response(201, json=[attempt(1, "queued")])
    )
    server.route("GET", "/api/attempts/1", httpx.Response(200, json=attempt(1)))
    # The server answers in another order: the SDK gives them back in the order asked for.
    server.route("POST", "/api/attempts/wait", httpx.Response(200, json=[attempt(2), attempt(1)]))
    with server.client() as client:
        found = client.sandboxes(task="fix-add", labels={"run": "unit", "k": "v"}, status="live")
        assert [sb.name for sb in found] == ["fix-add#3"]
        params = server.calls("GET", "/api/sandboxes")[0].url.params
        assert params.get_list("label") == ["run=unit", "k=v"]
        assert params["task"] == "fix-add" and params["status"] == "live"
        assert client.tasks()[0].slug == "fix-add"
        attempts = client.run("fix-add", "reference", n=1, callback_url="http://cb")
        assert attempts[0].status == "queued" and not attempts[0].ended
        body = json.loads(server.calls("POST", "/api/tasks/fix-add/attempts")[0].content)
        assert body == {"agent": "reference", "n": 1, "callback_url": "http://cb"}
        assert client.attempt(1).ended
        done = client.wait([attempts[0], 2], timeout=30)
        assert [a.id for a in done] == [1, 2]
        request = server.calls("POST", "/api/attempts/wait")[0]
        assert json.loads(request.content) == {"ids": [1, 2], "timeout": 30}
        assert request.extensions["timeout"]["read"] == 60 + 30


# Archives


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            else:
                archive.addfile(info)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind=tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


@pytest.mark.parametrize(
    "members",
    [
        [_file("../escape.txt")],
        [_file("a/../../escape.txt")],
        [_file("/tmp/absolute.txt")],
        [_link("up", "../outside")],
        [_link("abs", "/etc/passwd")],
        [_link("hard", "../outside", tarfile.LNKTYPE)],
        [_link("dev", "", tarfile.CHRTYPE)],
        # A chain only a check at extraction time sees: "s1" is ".", so "s1/s2" -> ".." is outside.
        [_link("s1", "."), _link("s1/s2", "..")],
        # Refused before anything is written, even after safe members.
        [_file("fine.txt"), _file("../escape.txt")],
    ],
    ids=[
        "dotdot",
        "nested-dotdot",
        "absolute",
        "symlink-out",
        "symlink-absolute",
        "hardlink-out",
        "device",
        "symlink-chain",
        "after-safe-members",
    ],
)
def test_safe_extract_refuses_members_that_escape(tmp_path, members):
    target = tmp_path / "deep" / "target"
    with pytest.raises(boltz.UnsafeArchive):
        safe_extract(_tar(*members), target)
    assert not (target / "fine.txt").exists()
    outside = [p for p in tmp_path.rglob("*") if not str(p).startswith(str(target))]
    assert sorted(p.name for p in outside) == ["deep"]


def test_safe_extract_never_writes_through_a_link_already_in_the_target(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "out").symlink_to(outside)
    (target / "victim").symlink_to(outside / "victim.txt")
    with pytest.raises(boltz.UnsafeArchive):
        safe_extract(_tar(_file("out/planted.txt")), target)
    safe_extract(_tar(_file("victim", b"replaced")), target)  # the link is replaced, not followed
    assert list(outside.iterdir()) == []
    assert not (target / "victim").is_symlink()
    assert (target / "victim").read_bytes() == b"replaced"


def test_safe_extract_keeps_what_is_inside(tmp_path):
    data = _tar(
        _file("./pkg/mod.py", b"x = 1\n"),
        _link("pkg/alias.py", "mod.py"),
        _link("pkg/copy.py", "pkg/mod.py", tarfile.LNKTYPE),
        _file("top.txt", b"top"),
    )
    target = tmp_path / "out"
    safe_extract(data, target)
    assert (target / "pkg" / "mod.py").read_bytes() == b"x = 1\n"
    assert os.readlink(target / "pkg" / "alias.py") == "mod.py"
    assert (target / "pkg" / "copy.py").read_bytes() == b"x = 1\n"
    assert (target / "top.txt").read_bytes() == b"top"


def test_download_refuses_an_escaping_archive(tmp_path):
    server = FakeServer()
    base = "/api/sandboxes/7"
    server.route("GET", f"{base}/files", error(400, "is_a_directory", "a folder"))
    evil = _tar(_file("../../evil.txt"))
    server.route("GET", f"{base}/archive", httpx.Response(200, content=evil))
    client = server.client()
    with client, client.sandbox(task="fix-add") as sb, pytest.raises(boltz.UnsafeArchive):
        sb.files.download("dir", tmp_path / "a" / "b")
    assert not (tmp_path / "evil.txt").exists()


def test_tar_directory_round_trips(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "f.txt").write_text("f")
    (tmp_path / "src" / "sub" / "link").symlink_to("f.txt")
    safe_extract(tar_directory(tmp_path / "src"), tmp_path / "dst")
    assert (tmp_path / "dst" / "sub" / "link").read_text() == "f"


# Typed results


def test_results_ignore_unknown_keys_and_fill_defaults():
    result = boltz.ExecResult.from_json({"exit_code": 0, "brand_new": [1]})
    assert result.ok and result.stdout == "" and result.raw["brand_new"] == [1]
    assert not boltz.ExecResult.from_json({"exit_code": 0, "timed_out": True}).ok
    info = boltz.SandboxInfo.from_json({"id": 1, "labels": None, "check": None})
    assert info.labels == {} and info.check is None
    assert boltz.Attempt.from_json({"tests": None}).tests == []


# Async


def test_async_client_basics():
    server = FakeServer()
    base = "/api/sandboxes/7"
    server.route("POST", f"{base}/exec", httpx.Response(200, json=EXEC_RESULT))
    server.route("GET", f"{base}/files", error(404, "file_not_found", "no such file"))
    server.route("GET", "/api/tasks", httpx.Response(200, json=[{"slug": "fix-add"}]))

    async def main():
        async with server.async_client() as client:
            assert [t.slug for t in await client.tasks()] == ["fix-add"]
            async with client.sandbox(task="fix-add") as sb:
                assert sb.name == "fix-add#3"
                result = await sb.exec("echo hello")
                assert result.ok and result.stdout == "hello\n"
                with pytest.raises(FileNotFoundError):
                    await sb.files.read("nope.py")
            assert len(server.calls("POST", f"{base}/close")) == 1
            with pytest.raises(RuntimeError, match="inside"):
                async with client.sandbox(task="fix-add"):
                    raise RuntimeError("inside")
            assert len(server.calls("POST", f"{base}/close")) == 2
            sb = await client.sandbox(task="fix-add")
            assert (await sb.close()).state == "closed"

    run_async(main())


def test_async_exec_stream_with_an_async_callback():
    server = FakeServer()
    body = ndjson(
        {"stream": "stdout", "text": "a\n"},
        {"stream": "stdout", "text": "b\n"},
        {"result": EXEC_RESULT},
    )
    server.route("POST", "/api/sandboxes/7/exec", httpx.Response(200, content=body))
    seen = []

    async def on_output(stream, text):
        await asyncio.sleep(0)
        seen.append(text)

    async def main():
        async with server.async_client() as client, client.sandbox(task="fix-add") as sb:
            return await sb.exec("cat", on_output=on_output)

    assert run_async(main()).ok
    assert seen == ["a\n", "b\n"]


def test_async_unreachable_server():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    async def main():
        client = boltz.AsyncClient("http://nowhere.test", transport=httpx.MockTransport(refuse))
        async with client:
            await client.tasks()

    with pytest.raises(boltz.ConnectionFailed, match="http://nowhere.test"):
        run_async(main())


# Packaging


def _plain_environ() -> dict[str, str]:
    """The environment without the test run's Django settings."""
    return {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}


def test_the_sdk_imports_neither_django_nor_the_server():
    code = (
        "import sys, boltz; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'attempts', 'boltz_web', 'celery', 'docker')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    env = _plain_environ()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


# The worked example (docs/SDK.md, examples/sdk_fix_add.py)


def test_the_documented_script_is_the_example_file():
    doc = (ROOT / "docs" / "SDK.md").read_text()
    section = doc.split("## Worked example", 1)[1]
    blocks = [part.split("\n", 1)[1] for part in section.split("```python")[1:]]
    script = (ROOT / "examples" / "sdk_fix_add.py").read_text()
    assert any(block.split("```", 1)[0] == script for block in blocks)


def test_the_worked_example_fixes_the_task(tmp_path, monkeypatch, capsys):
    """Runs examples/sdk_fix_add.py against a fake server that runs its commands in a copy of
    examples/fix-add/repo and checks with the task's check tests."""
    import importlib.util
    import shutil

    task = ROOT / "examples" / "fix-add"
    workspace = tmp_path / "workspace"
    shutil.copytree(task / "repo", workspace)
    server = FakeServer()
    base = "/api/sandboxes/7"

    def run(command: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
        command = command.replace("python3 ", f"{sys.executable} ", 1)
        return subprocess.run(
            command,
            shell=True,
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**_plain_environ(), **(env or {})},
        )

    def execute(request):
        body = json.loads(request.content)
        done = run(body["command"], workspace, body.get("env"))
        return httpx.Response(
            200,
            json={
                **EXEC_RESULT,
                "exit_code": done.returncode,
                "stdout": done.stdout,
                "stderr": done.stderr,
            },
        )

    def read(request):
        return httpx.Response(200, content=(workspace / request.url.params["path"]).read_bytes())

    def write(request):
        (workspace / request.url.params["path"]).write_bytes(request.content)
        return httpx.Response(
            200, json={"path": request.url.params["path"], "bytes": len(request.content)}
        )

    def check(request):
        clean = tmp_path / "check"
        shutil.copytree(workspace, clean)
        shutil.rmtree(clean / "tests")
        shutil.copytree(task / "check" / "tests", clean / "tests")
        done = run("python3 -m pytest -q -p no:cacheprovider tests", clean)
        return httpx.Response(
            200, json={"passed": done.returncode == 0, "score": 1.0, "summary": "ok", "tests": []}
        )

    server.route("POST", f"{base}/exec", execute)
    server.route("GET", f"{base}/files", read)
    server.route("PUT", f"{base}/files", write)
    server.route("POST", f"{base}/messages", httpx.Response(201))
    server.route("POST", f"{base}/check", check)
    server.route(
        "GET",
        f"{base}/diff",
        httpx.Response(200, json={"patch": "-    return a - b\n+    return a + b\n", "files": []}),
    )

    spec = importlib.util.spec_from_file_location(
        "sdk_fix_add", ROOT / "examples" / "sdk_fix_add.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(example, "Client", lambda: server.client())
    assert example.main() == 0
    printed = capsys.readouterr().out
    assert "FAILED tests/test_calc.py::test_add" in printed and "check: PASSED" in printed
    assert "return a + b" in (workspace / "calc.py").read_text()
    assert len(server.calls("POST", f"{base}/close")) == 1
    messages = [json.loads(r.content)["content"] for r in server.calls("POST", f"{base}/messages")]
    assert "test_add" in messages[0]


def test_a_streaming_exec_answered_in_one_piece_still_reports_its_output():
    server = FakeServer()
    answer = {**EXEC_RESULT, "stdout": "out\n", "stderr": "err\n"}
    server.route("POST", "/api/sandboxes/7/exec", httpx.Response(200, json=answer))
    seen = []
    with server.client() as client, client.sandbox(task="fix-add") as sb:
        result = sb.exec("x", on_output=lambda stream, text: seen.append((stream, text)))
    assert result.stdout == "out\n"
    assert seen == [("stdout", "out\n"), ("stderr", "err\n")]


# One description, two transports: every call of the SDK sends the same requests, and gives the
# same result or exception, whether made with the sync or the async client.


def _tar_of(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


POOL = {
    "id": 3,
    "name": "p",
    "size": 2,
    "tasks": ["fix-add"],
    "url": f"{URL}/pools/3/",
    "envs": [{"index": 0, "task": "fix-add", "state": "live"}],
    "groups": [{"task": "fix-add", "envs": [0, 1], "rewards": [1.0, None], "n": 1}],
}
STEP = {
    "index": 0,
    "step": 1,
    "observation": {"exit_code": 0, "stdout": "ok\n", "patch": {"applied": True}},
    "reward": 0.0,
    "info": {"episode": 70},
}
ATTEMPT = {"id": 1, "task": "fix-add", "status": "finished", "outcome": "passed"}


class EveryRoute:
    """A server for every call of the API, recording what it is sent. Its answers depend only
    on the requests, so two clients that send the same get the same."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.evaluation_polls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        method, path = request.method, request.url.path
        target = request.url.params.get("path")
        sandbox = "/api/sandboxes/7"
        if target == "missing.txt":
            return error(404, "file_not_found", f"no such file: {target}")(request)
        if target == "folder" and path == f"{sandbox}/files":
            return error(400, "is_a_directory", "a folder")(request)
        body = json.loads(request.content) if request.content[:1] in (b"{", b"[") else None
        answers = {
            ("POST", "/api/sandboxes"): lambda: SANDBOX,
            ("GET", "/api/sandboxes"): lambda: [SANDBOX],
            ("GET", sandbox): lambda: SANDBOX,
            ("DELETE", sandbox): lambda: None,
            ("POST", f"{sandbox}/check"): lambda: {"passed": True, "score": 1.0},
            ("GET", f"{sandbox}/diff"): lambda: {"patch": "p", "files": [{"path": "a.py"}]},
            ("POST", f"{sandbox}/messages"): lambda: None,
            ("POST", f"{sandbox}/close"): lambda: {**SANDBOX, "state": "closed"},
            ("GET", f"{sandbox}/files"): lambda: b"data",
            ("PUT", f"{sandbox}/files"): lambda: {"bytes": len(request.content)},
            ("DELETE", f"{sandbox}/files"): lambda: None,
            ("GET", f"{sandbox}/files/list"): lambda: [{"name": "a.py", "type": "file"}],
            ("GET", f"{sandbox}/archive"): lambda: _tar_of("inner.txt", b"in"),
            ("PUT", f"{sandbox}/archive"): lambda: {"files": 2},
            ("GET", "/api/tasks"): lambda: [{"slug": "fix-add"}],
            ("POST", "/api/tasks/fix-add/attempts"): lambda: [ATTEMPT],
            ("GET", "/api/attempts/1"): lambda: ATTEMPT,
            ("POST", "/api/attempts/wait"): lambda: [{**ATTEMPT, "id": 2}, ATTEMPT],
            ("POST", "/api/pools"): lambda: POOL,
            ("GET", "/api/pools/3"): lambda: POOL,
            ("POST", "/api/pools/3/reset"): lambda: [
                {"index": 0, "observation": {"instruction": "fix"}, "info": {"episode": 70}}
            ],
            ("POST", "/api/pools/3/step"): lambda: [STEP, {**STEP, "index": 1}],
            ("POST", "/api/pools/3/envs/1/step"): lambda: {**STEP, "index": 1},
            ("POST", "/api/pools/3/close"): lambda: {**POOL, "closed_at": "now"},
            ("POST", "/api/evaluations"): lambda: {"id": 4, "state": "running"},
            ("GET", "/api/evaluations/4"): self.evaluation,
        }
        if (method, path) == ("POST", f"{sandbox}/exec"):
            if body.get("stream"):
                lines = ndjson({"stream": "stdout", "text": "hello\n"}, {"result": EXEC_RESULT})
                return httpx.Response(200, content=lines)
            return httpx.Response(200, json=EXEC_RESULT)
        answer = answers[(method, path)]()
        if answer is None:
            return httpx.Response(204)
        if isinstance(answer, bytes):
            return httpx.Response(200, content=answer)
        return httpx.Response(200, json=answer)

    def evaluation(self) -> dict:
        self.evaluation_polls += 1  # running at the first poll, finished at the second
        state = "finished" if self.evaluation_polls > 1 else "running"
        report = {"resolved_ids": ["x"]} if state == "finished" else None
        return {"id": 4, "state": state, "report": report}


def _seen(request: httpx.Request) -> tuple:
    """All of a request that a server can tell apart."""
    return (
        request.method,
        str(request.url),
        sorted(request.headers.items()),
        request.content,
        request.extensions["timeout"],
    )


def _plain(value):
    """A result as comparable data: handles by their class's role and their description."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, (boltz.Sandbox, boltz.AsyncSandbox, boltz.Pool, boltz.AsyncPool)):
        return ("handle", type(value).__name__.replace("Async", ""), value.info)
    return value


# (operation, what it is called on, the call): each operation of boltz._calls at least once,
# with its options set, and through its error paths.
CALLS = [
    ("ClientCalls.sandbox", "client", lambda c: c.sandbox("fix-add", labels={"a": "b"}, ttl=60)),
    (
        "ClientCalls.sandbox",
        "client",
        lambda c: c.sandbox(
            image="img", agent="me", idle_timeout=datetime.timedelta(seconds=90), wait=2.5
        ),
    ),
    ("ClientCalls.get_sandbox", "client", lambda c: c.get_sandbox(7)),
    (
        "ClientCalls.sandboxes",
        "client",
        lambda c: c.sandboxes(task="fix-add", labels={"run": "u", "k": "v"}, status="live"),
    ),
    ("ClientCalls.tasks", "client", lambda c: c.tasks()),
    (
        "ClientCalls.run",
        "client",
        lambda c: c.run("fix-add", "reference", n=2, command="x", callback_url="http://cb"),
    ),
    ("ClientCalls.attempt", "client", lambda c: c.attempt(1)),
    ("ClientCalls.wait", "client", lambda c: c.wait([boltz.Attempt(id=1), 2], timeout=30)),
    (
        "ClientCalls.pool",
        "client",
        lambda c: c.pool(
            "fix-add",
            size=2,
            labels={"a": "b"},
            agent="a",
            name="p",
            max_steps=5,
            episode_seconds=60,
        ),
    ),
    ("ClientCalls.pool", "client", lambda c: c.pool(tasks=["fix-add", "other"])),
    ("ClientCalls.get_pool", "client", lambda c: c.get_pool(3)),
    (
        "ClientCalls.evaluate",
        "client",
        lambda c: c.evaluate([{"instance_id": "x"}], [{"instance_id": "x"}], run_id="r"),
    ),
    ("ClientCalls.evaluate", "client", lambda c: c.evaluate('[{"a": 1}]', "[]", wait=False)),
    ("ClientCalls.evaluation", "client", lambda c: c.evaluation(4, wait=True, timeout=30)),
    ("ClientCalls.evaluation", "client", lambda c: c.evaluation(4)),
    (
        "SandboxCalls.exec",
        "sandbox",
        lambda sb: sb.exec(
            ["python3", "-c", "1"],
            cwd="/w",
            env={"A": 1},
            timeout=5,
            stdin=b"\x00",
            user="u",
            max_output=10,
        ),
    ),
    ("SandboxCalls.exec", "sandbox", lambda sb: sb.exec("ls", stdin="text")),
    (
        "SandboxCalls.exec",
        "sandbox",
        lambda sb: sb.exec("ls", on_output=lambda stream, text: None),
    ),
    ("SandboxCalls.check", "sandbox", lambda sb: sb.check()),
    ("SandboxCalls.diff", "sandbox", lambda sb: sb.diff()),
    ("SandboxCalls.message", "sandbox", lambda sb: sb.message("assistant", "done")),
    ("SandboxCalls.close", "sandbox", lambda sb: sb.close(check=True)),
    ("SandboxCalls.close", "sandbox", lambda sb: sb.close()),
    ("SandboxCalls.delete", "sandbox", lambda sb: sb.delete()),
    ("SandboxCalls.refresh", "sandbox", lambda sb: sb.refresh()),
    ("SandboxCalls._leave", "sandbox", lambda sb: sb._leave(None)),
    ("FilesCalls.read", "files", lambda f: f.read("a b/c.py", text=True, max_bytes=100)),
    ("FilesCalls.read", "files", lambda f: f.read("missing.txt")),
    ("FilesCalls.write", "files", lambda f: f.write("run.sh", "é", mode=0o755)),
    ("FilesCalls.write", "files", lambda f: f.write("raw", b"\x00\x01", mode=None)),
    ("FilesCalls.list", "files", lambda f: f.list()),
    ("FilesCalls.list", "files", lambda f: f.list("missing.txt")),
    ("FilesCalls.delete", "files", lambda f: f.delete("old.txt")),
    ("FilesCalls.upload", "files", lambda f: f.upload(UPLOADS / "folder", "vendor")),
    ("FilesCalls.upload", "files", lambda f: f.upload(UPLOADS / "file.sh", "bin/")),
    ("FilesCalls.download", "files", lambda f: f.download("folder", DOWNLOADS / "folder")),
    ("FilesCalls.download", "files", lambda f: f.download("sub/c.py", DOWNLOADS)),
    ("PoolCalls.reset", "pool", lambda p: p.reset([0], wait=5)),
    ("PoolCalls.reset", "pool", lambda p: p.reset()),
    (
        "PoolCalls.step",
        "pool",
        lambda p: p.step([boltz.Action(run="ls", write={"a": "b"}, submit=True), None]),
    ),
    ("PoolCalls.step", "pool", lambda p: p.step(["ls", {"run": "pwd"}], timeout=9)),
    ("PoolCalls.step_one", "pool", lambda p: p.step_one(1, "ls", timeout=3)),
    ("PoolCalls.refresh", "pool", lambda p: p.refresh()),
    ("PoolCalls._close", "pool", lambda p: p.close()),
]
# Relative to the folder each side runs in (see the test).
UPLOADS = Path("uploads")
DOWNLOADS = Path("downloads")


def _on(client, where: str):
    return {
        "client": lambda: client,
        "sandbox": lambda: client.get_sandbox(7),
        "files": lambda: client.get_sandbox(7),
        "pool": lambda: client.get_pool(3),
    }[where]()


def _outcome(call, handle):
    try:
        return "result", _plain(call(handle))
    except Exception as exc:  # the same exception, with the same message and file name
        return "error", type(exc), str(exc), getattr(exc, "filename", None)


async def _async_outcome(call, handle):
    try:
        result = call(handle)
        return "result", _plain(await result)
    except Exception as exc:
        return "error", type(exc), str(exc), getattr(exc, "filename", None)


def _sync_run(where: str, call) -> tuple[list, tuple]:
    server = EveryRoute()
    with boltz.Client(URL, token="tok", transport=httpx.MockTransport(server)) as client:
        handle = _on(client, where)
        handle = handle.files if where == "files" else handle
        server.requests.clear()
        outcome = _outcome(call, handle)
    return [_seen(r) for r in server.requests], outcome


def _async_run(where: str, call) -> tuple[list, tuple]:
    server = EveryRoute()

    async def main():
        transport = httpx.MockTransport(server)
        async with boltz.AsyncClient(URL, token="tok", transport=transport) as client:
            handle = await _on(client, where) if where != "client" else client
            handle = handle.files if where == "files" else handle
            server.requests.clear()
            return await _async_outcome(call, handle)

    outcome = run_async(main())
    return [_seen(r) for r in server.requests], outcome


@pytest.mark.parametrize(("operation", "where", "call"), CALLS, ids=[c[0] for c in CALLS])
def test_the_sync_and_async_clients_send_the_same_requests_and_give_the_same_results(
    operation, where, call, tmp_path, monkeypatch
):
    from boltz.evaluations import Waiting

    monkeypatch.setattr(Waiting, "POLL_SECONDS", 0.01)
    seen = {}
    for side, run in (("sync", _sync_run), ("async", _async_run)):
        folder = tmp_path / side
        (folder / UPLOADS / "folder" / "pkg").mkdir(parents=True)
        (folder / UPLOADS / "folder" / "pkg" / "mod.py").write_text("x = 1\n")
        (folder / UPLOADS / "file.sh").write_text("#!/bin/sh\n")
        (folder / UPLOADS / "file.sh").chmod(0o750)
        for made in (folder / UPLOADS).rglob("*"):
            os.utime(made, (1_700_000_000, 1_700_000_000))  # the same tar for both sides
        (folder / DOWNLOADS).mkdir()
        monkeypatch.chdir(folder)
        requests, outcome = run(where, call)
        files = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        seen[side] = (requests, outcome, files)
    assert seen["sync"][0], "the call sent nothing"
    assert seen["async"] == seen["sync"]


def test_every_described_call_is_compared_above():
    from boltz._calls import ClientCalls, FilesCalls, PoolCalls, SandboxCalls
    from boltz._core import operation

    described = {
        f"{cls.__name__}.{name}"
        for cls in (ClientCalls, FilesCalls, PoolCalls, SandboxCalls)
        for name, value in vars(cls).items()
        if isinstance(value, operation)
    }
    assert described == {name for name, _where, _call in CALLS}


@pytest.mark.parametrize(
    ("sync", "asynchronous"),
    [
        (boltz.Client, boltz.AsyncClient),
        (boltz.Sandbox, boltz.AsyncSandbox),
        (boltz.Files, boltz.AsyncFiles),
        (boltz.Pool, boltz.AsyncPool),
    ],
)
def test_the_async_surface_is_the_sync_one_with_coroutines(sync, asynchronous):
    def public(cls):
        return {name for name in dir(cls) if not name.startswith("_")}

    assert public(asynchronous) - {"aclose"} == public(sync)
    for name in public(sync):
        plain, coroutine = getattr(sync, name), getattr(asynchronous, name)
        if isinstance(plain, property) or not callable(plain):
            continue
        assert inspect.signature(plain).parameters == inspect.signature(coroutine).parameters
        assert plain.__doc__ == coroutine.__doc__ or name in ("close", "submit", "results")
        assert not inspect.iscoroutinefunction(plain)
        if (sync, name) in ((boltz.Client, "sandbox"), (boltz.Pool, "results")):
            continue  # an Opening to await or enter; an async iterator
        assert inspect.iscoroutinefunction(coroutine), name
