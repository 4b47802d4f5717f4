"""The operation-call channel between the web process and a host's operations worker, on the
real Redis: typed answers reach the caller who asked, a refusal comes back as itself, a caller
never waits past its time, a call whose caller gave up is not done, and a crash in an
operation is still an answer."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from attempts.dispatch import calls as opcalls
from attempts.dispatch.errors import FileNotFound, InternalError
from attempts.dispatch.protocol import (
    DiffAnswer,
    DiffRequest,
    ExecRequest,
    FileEntry,
    ListAnswer,
    ListRequest,
    ReadAnswer,
    ReadRequest,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def host(redis_ready):
    return f"opcalls-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def serve(host):
    servers = []

    def start(handler, threads: int = 2):
        server = opcalls.Server(host, handler, threads).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop(timeout=10)


def echo(attempt, request):
    """Lists one entry that names the sandbox and the path it was asked for."""
    entry = FileEntry(name=str(attempt), path=request.path, type="file", size=0, mode="644")
    return ListAnswer(entries=[entry])


def test_an_answer_reaches_its_caller(host, serve):
    serve(echo)
    call = opcalls.send(host, 7, ListRequest(path="é\x00"), timeout=10)
    assert call.get(timeout=10) == ListAnswer(
        entries=[FileEntry(name="7", path="é\x00", type="file", size=0, mode="644")]
    )
    assert 0 <= call.queued < 10  # how long it waited for a free server thread


def test_bytes_cross_whole_and_a_refusal_comes_back_as_itself(host, serve):
    def read(attempt, request):
        if request.path == "missing":
            raise FileNotFound("missing does not exist in the sandbox")
        return ReadAnswer(data=bytes(range(256)))

    serve(read)
    assert opcalls.call(host, 1, ReadRequest(path="x"), timeout=10).data == bytes(range(256))
    with pytest.raises(FileNotFound) as refused:
        opcalls.call(host, 1, ReadRequest(path="missing"), timeout=10)
    assert refused.value.detail == "missing does not exist in the sandbox"
    assert refused.value.code == "file_not_found"


def test_no_server_means_a_timeout_within_the_callers_time(host):
    began = time.monotonic()
    with pytest.raises(opcalls.CallTimeout):
        opcalls.call(host, 1, DiffRequest(), timeout=0.5)
    assert time.monotonic() - began < 3


def test_a_call_whose_caller_gave_up_is_not_done(host, serve):
    done = []
    opcalls.send(host, 1, ReadRequest(path="late"), timeout=0)  # given up before any server
    serve(lambda attempt, request: done.append(request.path) or ReadAnswer(data=b""))
    assert opcalls.call(host, 2, ReadRequest(path="now"), timeout=10) == ReadAnswer(data=b"")
    assert done == ["now"]


def test_a_crashing_operation_still_answers(host, serve):
    def broken(attempt, request):
        raise RuntimeError("boom")

    serve(broken)
    with pytest.raises(InternalError) as crashed:  # the API answers it as 500 (test_protocol)
        opcalls.call(host, 1, DiffRequest(), timeout=10)
    assert crashed.value.code == "internal"
    assert "boom" in crashed.value.detail


def test_calls_run_at_once_and_come_back_in_the_order_they_finish(host, serve):
    release = {name: threading.Event() for name in ("slow", "fast")}

    def handler(attempt, request):
        release[request.path].wait(10)
        return ReadAnswer(data=request.path.encode())

    serve(handler, threads=2)
    slow = opcalls.send(host, 1, ReadRequest(path="slow"), timeout=10)
    fast = opcalls.send(host, 2, ReadRequest(path="fast"), timeout=10)
    release["fast"].set()
    assert opcalls.first_done([slow, fast], timeout=10) is fast
    assert opcalls.first_done([slow], timeout=0.2) is None  # still running: not answered
    release["slow"].set()
    assert slow.get(timeout=10) == ReadAnswer(data=b"slow")
    assert fast.get(timeout=0) == ReadAnswer(data=b"fast")


def test_an_answer_of_another_operations_type_is_a_crash_not_a_wrong_answer(host, serve):
    serve(lambda attempt, request: DiffAnswer(patch="", truncated=False, bytes=0))
    with pytest.raises(InternalError) as crashed:
        opcalls.call(host, 1, ExecRequest(command="true"), timeout=10)
    assert "DiffAnswer" in crashed.value.detail
