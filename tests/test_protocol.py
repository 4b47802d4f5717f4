"""The typed protocol between the web process and a worker, without Redis or Docker: every
operation's request and answer come through their JSON wire form unchanged, every refusal
comes back as itself, and the API answers each refusal with its HTTP status, body and
Retry-After, as docs/API.md says."""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory

from attempts.api.errors import STATUSES, status_of
from attempts.api.routes import api
from attempts.core.errors import TaskInvalid
from attempts.dispatch import errors
from attempts.dispatch import protocol as p
from attempts.dispatch.errors import Refusal

ENTRY = p.FileEntry(name="a.py", path="/workspace/a.py", type="file", size=3, mode="644")
ACTION = p.StepAction(write={"a.py": "x = 1\n"}, run=["pytest", "-q"], timeout=5.0, submit=True)

# One request and one answer of every operation, each field away from its default.
SAMPLES: dict[type[p.Request], tuple[p.Request, p.Answer]] = {
    p.ExecRequest: (
        p.ExecRequest(
            command=["/bin/sh", "-c", "cat"],
            cwd="src",
            env={"K": "v"},
            timeout=12.5,
            stdin=b"\x00\xffin",
            user="nobody",
            request_id="abc",
            number=3,
            stream=True,
        ),
        p.ExecAnswer(
            exit_code=1,
            stdout="out",
            stderr="é",
            stdout_bytes=3,
            stderr_bytes=2,
            stdout_utf8=True,
            stderr_utf8=False,
            truncated=True,
            timed_out=True,
            duration=0.25,
            raw={"stdout": "raw/1/out", "stderr": ""},
        ),
    ),
    p.ReadRequest: (p.ReadRequest(path="a.py", max_bytes=10), p.ReadAnswer(data=b"\x00\x01")),
    p.WriteRequest: (
        p.WriteRequest(path="/tmp/x", data=b"\xfe", mode=0o600),
        p.WriteAnswer(path="/tmp/x", bytes=1),
    ),
    p.ListRequest: (p.ListRequest(path="."), p.ListAnswer(entries=[ENTRY, ENTRY])),
    p.DeleteRequest: (p.DeleteRequest(path="a.py"), p.DeleteAnswer()),
    p.DownloadRequest: (p.DownloadRequest(path="src"), p.DownloadAnswer(data=b"tar" * 100)),
    p.UploadRequest: (
        p.UploadRequest(path="src", data=b"tar"),
        p.UploadAnswer(path="/workspace/src", files=2),
    ),
    p.DiffRequest: (p.DiffRequest(), p.DiffAnswer(patch="--- a\n", truncated=True, bytes=6)),
    p.CheckRequest: (p.CheckRequest(), p.CheckAnswer(check=42)),
    p.StepRequest: (
        p.StepRequest(
            action=ACTION,
            max_steps=10,
            episode_deadline=1e9,
            container="c0ffee",
            task={"id": 1, "workdir": "/app"},
            step_number=2,
            exec_number=4,
            seq=17,
        ),
        p.StepAnswer(
            step=2,
            observation={"exit_code": 0, "written": ["/app/a.py"]},
            reward=None,
            terminated=False,
            truncated=True,
            info={"episode": 9, "masked": False},
        ),
    ),
}


def through_the_wire(wire: dict) -> dict:
    """What the other side reads: the message as JSON text, read back."""
    return json.loads(json.dumps(wire))


def test_every_operation_has_a_request_an_answer_and_a_sample_here():
    assert set(SAMPLES) == set(p.OPERATIONS)
    assert sorted(p.REQUESTS) == sorted(request.op for request in p.OPERATIONS)
    for request, answer in SAMPLES.values():
        assert type(answer) is p.answer_type(request)


@pytest.mark.parametrize("operation", list(SAMPLES), ids=lambda r: r.op)
def test_each_request_and_answer_come_through_the_wire_unchanged(operation):
    request, answer = SAMPLES[operation]
    assert p.request_from_wire(request.op, through_the_wire(request.to_wire())) == request
    assert type(answer).from_wire(through_the_wire(answer.to_wire())) == answer


def test_defaults_come_through_the_wire_too():
    for request in (
        p.ExecRequest(command="true"),
        p.ReadRequest(path="a"),
        p.StepRequest(
            action=p.StepAction(run="ls"), max_steps=1, episode_deadline=0, container="c"
        ),
    ):
        assert p.request_from_wire(request.op, through_the_wire(request.to_wire())) == request


def test_bytes_travel_as_base64_text():
    assert p.WriteRequest(path="x", data=b"\xff").to_wire()["data"] == "/w=="
    assert p.ExecRequest(command="cat", stdin=b"hi").to_wire()["stdin"] == "aGk="
    assert p.ExecRequest(command="cat").to_wire()["stdin"] is None


def test_an_action_carries_only_the_parts_it_was_given_in_their_order():
    assert p.StepAction(run="ls").to_wire() == {"run": "ls"}
    assert p.StepAction(write={}, submit=True).to_wire() == {"write": {}, "submit": True}
    assert p.StepAction(write={}, submit=True).parts() == ["write", "submit"]
    assert ACTION.parts() == ["write", "run", "submit"]


def test_an_unknown_operation_is_an_invalid_request():
    with pytest.raises(errors.InvalidRequest) as refused:
        p.request_from_wire("format_disk", {})
    assert refused.value.detail == "no operation 'format_disk'"


# --- refusals ------------------------------------------------------------------------------------
# Every kind of refusal, what the API answers for it (docs/API.md's table), and its code.
REFUSALS = [
    (errors.InvalidRequest("path", "give a file name"), 400, "invalid"),
    (errors.InvalidRequest("user", "no such user", code="user_not_found"), 400, "user_not_found"),
    (errors.InvalidRequest("", "a.py is a folder", code="is_a_directory"), 400, "is_a_directory"),
    (errors.FileAccessDenied("the sandbox user may not"), 403, "permission_denied"),
    (errors.NotFound("no sandbox 7"), 404, "not_found"),
    (errors.FileNotFound("a.py does not exist in the sandbox"), 404, "file_not_found"),
    (errors.SandboxNotLive("sandbox 7 is finished, not live"), 409, "closed"),
    (errors.PoolClosed("pool 3 is closed"), 409, "closed"),
    (errors.ChangesUnreadable("changes unavailable: too big"), 409, "changes_unavailable"),
    (errors.TaskNotRunnable("user: not in the image"), 409, "task_invalid"),
    (errors.NoCheck("sandbox 7 was started from an image"), 409, "no_check"),
    (errors.SandboxDiskFull("the sandbox's disk is at its limit"), 409, "disk_full"),
    (errors.SandboxDeleted("sandbox 7 was deleted"), 410, "gone"),
    (errors.TooLarge("larger than 10 bytes"), 413, "too_large"),
    (errors.NoCapacity("every host is at capacity", retry_after=10), 429, "capacity"),
    (errors.InternalError("internal error in Boltz: boom"), 500, "internal"),
    (errors.InfrastructureFault("infrastructure error: died"), 502, "infrastructure"),
    (errors.WorkerUnreachable("infrastructure error: Redis"), 503, "infrastructure"),
    (errors.TimedOut("the exec did not answer within 630s"), 504, "timeout"),
]


def _kinds(cls: type) -> set[type]:
    return {cls} | {kind for sub in cls.__subclasses__() for kind in _kinds(sub)}


def test_every_kind_of_refusal_is_tested_here_and_has_a_status():
    tested = {type(refusal) for refusal, _, _ in REFUSALS}
    assert _kinds(Refusal) - {Refusal, errors.WrongState} == tested
    assert set(STATUSES) <= _kinds(Refusal)


@pytest.mark.parametrize(("refusal", "status", "code"), REFUSALS, ids=lambda r: str(r)[:20])
def test_each_refusal_comes_through_the_wire_as_itself(refusal, status, code):
    back = Refusal.from_wire(through_the_wire(refusal.to_wire()))
    assert type(back) is type(refusal)
    assert back.to_wire() == refusal.to_wire()
    assert (back.code, back.detail) == (code, refusal.detail)


def test_a_refusal_of_a_kind_this_side_does_not_know_is_an_internal_error():
    back = Refusal.from_wire({"kind": "Vanished", "code": "x", "detail": "went away"})
    assert type(back) is errors.InternalError and back.detail == "went away"
    assert status_of(back) == 500


def _answer(exc: Exception):
    request = RequestFactory().get("/api/sandboxes/7")
    return api.on_exception(request, exc)


@pytest.mark.parametrize(("refusal", "status", "code"), REFUSALS, ids=lambda r: str(r)[:20])
def test_the_api_answers_each_refusal_with_its_status_and_body(refusal, status, code):
    assert status_of(refusal) == status
    response = _answer(refusal)
    assert response.status_code == status
    assert json.loads(response.content) == {"detail": refusal.detail, "code": code}
    if isinstance(refusal, errors.NoCapacity):
        assert response["Retry-After"] == "10"
    elif isinstance(refusal, errors.WorkerUnreachable):  # Redis down: retry shortly
        assert response["Retry-After"] == "5"
    else:
        assert not response.has_header("Retry-After")


def test_a_task_the_caller_gave_that_cannot_run_is_a_bad_request():
    response = _answer(TaskInvalid("image", "no such image"))
    assert response.status_code == 400
    assert json.loads(response.content) == {"detail": "image: no such image", "code": "invalid"}


def test_an_invalid_request_names_its_field_in_the_detail():
    refusal = errors.InvalidRequest("actions[2].timeout", "a timeout needs a run")
    assert refusal.detail == str(refusal) == "actions[2].timeout: a timeout needs a run"
    assert refusal.field == "actions[2].timeout"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("file_not_found", 404),
        ("permission_denied", 403),
        ("too_large", 413),
        ("is_a_directory", 400),
        ("not_a_directory", 400),
        ("timeout", 400),
        ("invalid", 400),
    ],
)
def test_a_file_operation_the_sandbox_refused_keeps_its_code_and_status(code, status):
    from attempts.run.operations import _file_refusal
    from attempts.run.session import FileOpError

    refusal = _file_refusal(FileOpError(code, "/workspace/a.py: why"))
    assert (refusal.code, refusal.detail, status_of(refusal)) == (
        code,
        "/workspace/a.py: why",
        status,
    )
