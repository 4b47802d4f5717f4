"""Unit tests of the Python SDK (`boltz/`) against httpx.MockTransport: no server, no Docker."""

from __future__ import annotations

import asyncio
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
