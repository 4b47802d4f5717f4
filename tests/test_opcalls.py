"""The operation-call channel between the web process and a host's operations worker, on the
real Redis: answers reach the caller who asked, a caller never waits past its time, a call
whose caller gave up is not done, and a crash in an operation is still an answer."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from attempts.dispatch import calls as opcalls

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


def test_an_answer_reaches_its_caller(host, serve):
    serve(lambda attempt, op, args: {"attempt": attempt, "op": op, "echo": args["x"]})
    call = opcalls.send(host, 7, "echo", {"x": "é\x00"}, timeout=10)
    assert call.get(timeout=10) == {
        "attempt": 7,
        "op": "echo",
        "echo": "é\x00",
    }
    assert 0 <= call.queued < 10  # how long it waited for a free server thread


def test_no_server_means_a_timeout_within_the_callers_time(host):
    began = time.monotonic()
    with pytest.raises(opcalls.CallTimeout):
        opcalls.call(host, 1, "exec", {}, timeout=0.5)
    assert time.monotonic() - began < 3


def test_a_call_whose_caller_gave_up_is_not_done(host, serve):
    done = []
    opcalls.send(host, 1, "late", {}, timeout=0)  # given up before any server reads it
    serve(lambda attempt, op, args: done.append(op) or {})
    assert opcalls.call(host, 2, "now", {}, timeout=10) == {}
    assert done == ["now"]


def test_a_crashing_operation_still_answers(host, serve):
    def broken(attempt, op, args):
        raise RuntimeError("boom")

    serve(broken)
    answer = opcalls.call(host, 1, "exec", {}, timeout=10)
    assert answer["error"]["status"] == 500
    assert answer["error"]["code"] == "internal"
    assert "boom" in answer["error"]["detail"]


def test_calls_run_at_once_and_come_back_in_the_order_they_finish(host, serve):
    release = {name: threading.Event() for name in ("slow", "fast")}

    def handler(attempt, op, args):
        release[op].wait(10)
        return {"op": op}

    serve(handler, threads=2)
    slow = opcalls.send(host, 1, "slow", {}, timeout=10)
    fast = opcalls.send(host, 2, "fast", {}, timeout=10)
    release["fast"].set()
    assert opcalls.first_done([slow, fast], timeout=10) is fast
    assert opcalls.first_done([slow], timeout=0.2) is None  # still running: not answered
    release["slow"].set()
    assert slow.get(timeout=10) == {"op": "slow"}
    assert fast.get(timeout=0) == {"op": "fast"}
