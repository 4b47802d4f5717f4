"""The HTTP API under /api/ (django-ninja): thin handlers over services/sandboxes.py and
services/attempts.py. Described by /api/openapi.json; docs/API.md says what each call does.
Its defaults and limits come from dispatch/limits.py, its errors' statuses from errors.py."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Query, Schema
from ninja.security import HttpBearer, django_auth
from pydantic import Field

from attempts.api import errors
from attempts.api.document import BoltzAPI
from attempts.api.errors import CAPACITY_ERRORS, ERRORS, OPERATION_ERRORS, ObjectBodies
from attempts.api.fields import PATH_RULE, Body, documented, one_of, path_query
from attempts.api.pools import router as pools_router
from attempts.api.tokens import callback_key, token_user
from attempts.core.diffview import split_files
from attempts.dispatch import limits
from attempts.dispatch.errors import InvalidRequest, NoCheck, NotFound, TimedOut, TooLarge
from attempts.dispatch.protocol import ExecAnswer
from attempts.exports.bundle import check_record
from attempts.exports.outputs import raw_output_response
from attempts.models import DONE_STATUSES, Attempt, CheckResult, Task
from attempts.services import attempts as services
from attempts.services import deletion, sandboxes
from attempts.services.callback_targets import callback_target
from attempts.services.callbacks import attempt_payload
from attempts.services.lost_hosts import end_lost_attempts_now_and_then
from attempts.services.sandboxes import sandbox_for
from attempts.taskio.from_image import has_check


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        user = token_user(token)
        if user is not None:
            request.user = user
            request.callback_key = callback_key(token)
        return user


api = BoltzAPI(
    title="Boltz",
    version="1",
    description="Sandboxes for AI-agent attempts at coding tasks. See docs/API.md.",
    auth=TokenAuth(),
    urls_namespace="api",
    parser=ObjectBodies(),
)
api.add_router("/pools", pools_router)
api.add_router("/evaluations", "attempts.api.evaluations.router")
errors.install(api)


# --- schemas ------------------------------------------------------------------------------------
class TaskOut(Schema):
    slug: str
    title: str
    instruction: str
    image: str
    check_mode: str


SECONDS_OR_DEFAULT = {"anyOf": [{"type": "number", "minimum": 1}, {"const": 0}, {"type": "null"}]}


class SandboxIn(Body):
    """Give exactly one of `task` (a task's slug) and `image` (an image on the worker hosts)."""

    model_config = one_of(("task", "image"))
    task: str = ""
    image: str = ""
    labels: dict[str, str] = {}
    agent: str = ""
    ttl: float | None = Field(
        None,
        description="seconds it may live (0 or null: BOLTZ_SANDBOX_DEFAULT_TTL; cut to "
        "BOLTZ_SANDBOX_MAX_TTL)",
        json_schema_extra=SECONDS_OR_DEFAULT,
    )
    idle_timeout: float | None = Field(
        None,
        description="seconds without a call before it is closed (0 or null: "
        "BOLTZ_SANDBOX_IDLE_TIMEOUT)",
        json_schema_extra=SECONDS_OR_DEFAULT,
    )
    wait: float = Field(
        limits.SANDBOX_WAIT,
        description="seconds to wait for a host with room (at most "
        f"{limits.MAX_SANDBOX_WAIT:g}); past that, 429 with Retry-After",
    )


class TestOut(Schema):
    name: str
    outcome: str
    message: str = ""


class CheckOut(Schema):
    id: int
    passed: bool
    score: float | None
    source: str
    mode: str
    summary: str
    problem: str
    verifier_error: bool = False
    reward: dict | None = None
    exit_code: int | None
    timed_out: bool
    duration: float
    output: str
    tests: list[TestOut]


class SandboxOut(Schema):
    id: int
    attempt: int
    task: str
    number: int
    name: str
    status: str
    state: str
    outcome: str
    score: float | None
    labels: dict[str, str]
    agent: str
    host: str
    cwd: str = "/workspace"
    created_at: datetime
    expires_at: datetime | None
    url: str
    check: CheckOut | None = None


COMMAND_BOUND = (
    f"at most {limits.MAX_COMMAND_BYTES} bytes (its argv's items together), each argument (a "
    f"string command is one) at most {limits.MAX_ARG_BYTES}; longer: 413 too_large. A long "
    "script goes in as a file or as stdin"
)


class ExecIn(Body):
    command: str | list[str] = Field(
        description=f"a shell command (run by /bin/sh -c) or an argv list; {COMMAND_BOUND}",
        json_schema_extra={
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": limits.MAX_ARG_BYTES},
                {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "maxLength": limits.MAX_ARG_BYTES},
                },
            ]
        },
    )
    cwd: str = Field(
        ".",
        description="the folder it runs in (empty: the working folder)",
        json_schema_extra=PATH_RULE,
    )
    env: dict[str, str] = Field(
        {},
        description="variables added to the command's environment: at most "
        f"{limits.MAX_ENV_BYTES} bytes of NAME=value together (longer: 413 too_large)",
    )
    timeout: float | None = documented(
        limits.EXEC_TIMEOUT,
        f"seconds the command may run (0 or null: {limits.EXEC_TIMEOUT:g}; at most a day)",
        ge=0,
        le=limits.MAX_COMMAND_SECONDS,
    )
    stdin: str | None = None
    stdin_base64: str | None = None
    user: str | None = Field(
        None,
        description="another user of the image to run as, by name or uid (never root)",
        json_schema_extra={"pattern": f"^({sandboxes.USER_NAME.pattern})?$"},
    )
    max_output: int | None = documented(
        None,
        "streams up to this many bytes come back whole (else their head and tail)",
        ge=0,
        le=settings.BOLTZ_MAX_FILE_BYTES,
    )
    stream: bool = False


class ExecOut(Schema):
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_utf8: bool
    stderr_utf8: bool
    truncated: bool
    timed_out: bool
    duration: float
    stdout_raw: str
    stderr_raw: str


class FileEntry(Schema):
    name: str
    path: str
    type: str
    size: int
    mode: str


class Written(Schema):
    path: str
    bytes: int = 0
    files: int = 0


class DiffFileOut(Schema):
    path: str
    old_path: str
    status: str  # added, deleted, renamed, modified, or mode (its mode alone changed)
    added: int
    removed: int
    binary: bool = False
    old_mode: str = ""  # git's: 100644, 100755 (executable), 120000 (link); "" if none
    new_mode: str = ""
    similarity: int | None = None  # a rename's, in percent


class DiffOut(Schema):
    patch: str
    truncated: bool
    bytes: int
    files: list[DiffFileOut]


class MessageIn(Body):
    role: str = "assistant"
    content: str


class CloseIn(Body):
    check: bool = False


class AttemptsIn(Body):
    """`agent`: a built-in agent (`command` runs `command`; the others take none) or the name
    of a saved agent (admin: Agents), which brings its own command."""

    model_config = {
        "json_schema_extra": {
            "oneOf": [
                {
                    "properties": {"agent": {"const": "command"}, "command": {"pattern": r"\S"}},
                    "required": ["agent", "command"],
                },
                {
                    "properties": {
                        "agent": {"not": {"const": "command"}},
                        "command": {"pattern": r"^\s*$"},
                    },
                },
            ]
        }
    }
    agent: str = Field(
        description="noop, reference, command, or a saved agent's name",
        json_schema_extra={"minLength": 1},
    )
    command: str = Field(
        "",
        description=f"the command agent's command: at most "
        f"{limits.MAX_ARG_BYTES} bytes (longer: 400 invalid)",
        json_schema_extra={"maxLength": limits.MAX_ARG_BYTES},
    )
    n: int = documented(1, "attempts to start", ge=1, le=limits.MAX_ATTEMPTS_AT_ONCE)
    callback_url: str = Field(
        "",
        description="where each attempt's outcome is POSTed (a public http(s) URL; docs/API.md)",
        json_schema_extra={"maxLength": 1000, "pattern": "^(https?://.*)?$"},
    )


class AttemptOut(Schema):
    id: int
    task: str
    number: int
    name: str
    agent: str
    status: str
    outcome: str
    score: float | None
    failure_reason: str
    tests: list[TestOut]
    url: str


class WaitIn(Body):
    ids: list[int] = Field(
        description="the attempts to wait for",
        json_schema_extra={
            "minItems": 1,
            "maxItems": limits.MAX_WAIT_IDS,
            "items": {"type": "integer", "minimum": 1, "maximum": limits.MAX_ID},
        },
    )
    timeout: float = documented(
        limits.ATTEMPTS_WAIT,
        "seconds to wait for every attempt to end",
        gt=0,
        le=limits.MAX_ATTEMPTS_WAIT,
    )


# --- presenting ---------------------------------------------------------------------------------
def _url(request, attempt: Attempt) -> str:
    return request.build_absolute_uri(reverse("attempts:attempt", args=[attempt.pk]))


def check_out(check: CheckResult) -> dict:
    return check_record(check)


def sandbox_out(request, attempt: Attempt, check: CheckResult | None = None) -> dict:
    return {
        "id": attempt.pk,
        "attempt": attempt.pk,
        "task": attempt.task.slug,
        "number": attempt.number,
        "name": attempt.name,
        "status": attempt.status,
        "state": sandboxes.sandbox_state(attempt),
        "outcome": attempt.outcome,
        "score": attempt.score,
        "labels": attempt.labels,
        "agent": attempt.agent,
        "host": attempt.host,
        "cwd": attempt.task.workdir or "/workspace",
        "created_at": attempt.created_at,
        "expires_at": attempt.expires_at,
        "url": _url(request, attempt),
        "check": check_out(check) if check else None,
    }


def attempt_out(request, attempt: Attempt) -> dict:
    return attempt_payload(attempt, base_url=request.build_absolute_uri("/").rstrip("/"))


# --- tasks and attempts ---------------------------------------------------------------------------
@api.get("/tasks", response=list[TaskOut], tags=["tasks"])
def list_tasks(request):
    return [
        {
            "slug": t.slug,
            "title": t.title,
            "instruction": t.instruction,
            "image": t.image_name,
            "check_mode": t.check_mode,
        }
        for t in Task.objects.all()
    ]


@api.post("/tasks/{slug}/attempts", response={201: list[AttemptOut], **ERRORS}, tags=["attempts"])
def start_attempts(request, slug: str, body: AttemptsIn):
    task = Task.objects.filter(slug=slug).first()
    if task is None:
        raise NotFound(f"no task {slug!r}")
    if not 1 <= body.n <= limits.MAX_ATTEMPTS_AT_ONCE:
        raise InvalidRequest(
            "n", f"start between 1 and {limits.MAX_ATTEMPTS_AT_ONCE} attempts at once"
        )
    url = body.callback_url
    if url:
        callback_target(url)  # refused with the reason (InvalidRequest) unless it may receive one
    with transaction.atomic():  # enqueued once owner and callback are in place
        made = services.attempts_create(
            task=task, agent=body.agent, command=body.command, count=body.n
        )
        Attempt.objects.filter(pk__in=[a.pk for a in made]).update(
            owner=request.user,
            callback_url=url,
            callback_key=request.callback_key if url else "",
        )
    return 201, [attempt_out(request, a) for a in made]


@api.post("/attempts/wait", response={200: list[AttemptOut], **ERRORS}, tags=["attempts"])
def wait_attempts(request, body: WaitIn):
    if not 0 < body.timeout <= limits.MAX_ATTEMPTS_WAIT:
        raise InvalidRequest("timeout", "give seconds up to an hour")
    many = limits.MAX_WAIT_IDS
    if not body.ids or len(body.ids) > many or not all(0 < i <= limits.MAX_ID for i in body.ids):
        raise InvalidRequest("ids", f"give 1 to {many} attempt ids")
    visible = sandboxes.visible_attempts(request.user).filter(pk__in=body.ids)
    if visible.count() != len(set(body.ids)):
        raise NotFound("some of those attempts do not exist (or are not yours)")
    deadline = time.monotonic() + body.timeout
    while visible.exclude(status__in=DONE_STATUSES).exists():
        if time.monotonic() > deadline:
            raise TimedOut(f"not every attempt ended within {body.timeout:g}s")
        time.sleep(0.2)
        end_lost_attempts_now_and_then()  # with no worker left, no one else would
    return [attempt_out(request, a) for a in visible.order_by("pk")]


@api.get("/attempts/{attempt_id}", response={200: AttemptOut, **ERRORS}, tags=["attempts"])
def get_attempt(request, attempt_id: int):
    found = sandboxes.visible_attempts(request.user).filter(pk=attempt_id).first()
    if found is None:
        raise NotFound(f"no attempt {attempt_id}")
    return attempt_out(request, found)


# --- sandboxes ----------------------------------------------------------------------------------
@api.post("/sandboxes", response={201: SandboxOut, **CAPACITY_ERRORS}, tags=["sandboxes"])
def create_sandbox(request, body: SandboxIn):
    attempt = sandboxes.sandbox_create(
        user=request.user,
        task=body.task,
        image=body.image,
        labels=body.labels,
        agent=body.agent,
        ttl=body.ttl,
        idle_timeout=body.idle_timeout,
        wait=body.wait,
    )
    return 201, sandbox_out(request, attempt)


MODE = re.compile(r"^0?[0-7]{1,3}$")
LABELS = Query([], description="k=v; give several to match every one")


@api.get("/sandboxes", response=list[SandboxOut], tags=["sandboxes"])
def list_sandboxes(
    request,
    task: str = "",
    label: list[str] = LABELS,
    status: str = "",
):
    """Sandboxes, filtered by task, by labels (`label=k=v`, every one must match) and by
    status or state."""
    found = sandboxes.visible_attempts(request.user).filter(origin="api").order_by("pk")
    if task:
        found = found.filter(task__slug=task)
    for pair in label:
        key, _, value = pair.partition("=")
        found = found.filter(**{f"labels__{key}": value}) if key.isidentifier() else found.none()
    rows = [sandbox_out(request, a) for a in found[:1000]]
    return [r for r in rows if not status or r["state"] == status or r["status"] == status]


@api.get("/sandboxes/{sandbox_id}", response={200: SandboxOut, **ERRORS}, tags=["sandboxes"])
def get_sandbox(request, sandbox_id: int):
    return sandbox_out(request, sandbox_for(request.user, sandbox_id))


@api.post(
    "/sandboxes/{sandbox_id}/exec", response={200: ExecOut, **OPERATION_ERRORS}, tags=["sandboxes"]
)
def exec_command(request, sandbox_id: int, body: ExecIn):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    stdin = sandboxes.exec_stdin(body.stdin, body.stdin_base64)
    answer = sandboxes.sandbox_exec(
        attempt,
        command=body.command,
        cwd=body.cwd,
        env=body.env,
        timeout=body.timeout,
        stdin=stdin,
        user=body.user,
        stream=body.stream,
        max_output=body.max_output,
    )
    if body.stream:

        def lines():
            for item in answer:
                if "result" in item:
                    item = {"result": _exec_out(request, attempt, item["result"])}
                elif "error" in item:
                    item = {"error": errors.refusal_body(item["error"])}
                yield json.dumps(item).encode() + b"\n"

        return StreamingHttpResponse(lines(), content_type="application/x-ndjson")
    return _exec_out(request, attempt, answer)


def _exec_out(request, attempt: Attempt, answer: ExecAnswer) -> dict:
    out = dataclasses.asdict(answer)
    raw = out.pop("raw")
    for stream in ("stdout", "stderr"):
        name = raw.get(stream, "")
        out[f"{stream}_raw"] = (
            request.build_absolute_uri(
                reverse("api:raw_output", args=[attempt.pk, name.rsplit("/", 1)[-1]])
            )
            if name
            else ""
        )
    return out


@api.get(
    "/attempts/{attempt_id}/outputs/{name}",
    response={200: None, **ERRORS},
    tags=["attempts"],
    auth=[TokenAuth(), django_auth],
    url_name="raw_output",
)
def raw_output(request, attempt_id: int, name: str):
    """A command's whole raw output as text: the link an exec answers with in `stdout_raw` and
    `stderr_raw`. Read with the API token, or in a browser signed in to the pages; either way
    only its owner (or staff) may."""
    found = sandboxes.visible_attempts(request.user).filter(pk=attempt_id).first()
    response = raw_output_response(found.pk, name) if found else None
    if response is None:
        raise NotFound(f"attempt {attempt_id} has no output {name!r} (or is not yours)")
    return response


@api.get("/sandboxes/{sandbox_id}/files", response={200: None, **OPERATION_ERRORS}, tags=["files"])
def read_file(
    request,
    sandbox_id: int,
    path: str = path_query(),
    max_bytes: int | None = Query(
        None, description="at most this many bytes (more: 413 too_large)", ge=0
    ),
):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    data = sandboxes.sandbox_read(attempt, path=path, max_bytes=max_bytes)
    return HttpResponse(data, content_type="application/octet-stream")


@api.put(
    "/sandboxes/{sandbox_id}/files", response={200: Written, **OPERATION_ERRORS}, tags=["files"]
)
def write_file(
    request,
    sandbox_id: int,
    path: str = path_query(),
    mode: str = Query("644", description="octal permissions", pattern=MODE.pattern),
):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    if not MODE.search(mode):  # int(mode, 8) alone takes " 644", "+644", "0o644", "6_44"
        raise InvalidRequest("mode", "give octal permissions such as 644")
    bits = int(mode, 8)
    data = _body(request)
    return dataclasses.asdict(sandboxes.sandbox_write(attempt, path=path, data=data, mode=bits))


@api.get(
    "/sandboxes/{sandbox_id}/files/list",
    response={200: list[FileEntry], **OPERATION_ERRORS},
    tags=["files"],
)
def list_files(request, sandbox_id: int, path: str = path_query(".")):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    return [dataclasses.asdict(entry) for entry in sandboxes.sandbox_list(attempt, path=path)]


@api.delete(
    "/sandboxes/{sandbox_id}/files", response={204: None, **OPERATION_ERRORS}, tags=["files"]
)
def delete_file(request, sandbox_id: int, path: str = path_query()):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    sandboxes.sandbox_remove(attempt, path=path)
    return 204, None


@api.get(
    "/sandboxes/{sandbox_id}/archive", response={200: None, **OPERATION_ERRORS}, tags=["files"]
)
def download_archive(request, sandbox_id: int, path: str = path_query(".")):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    data = sandboxes.sandbox_download(attempt, path=path)
    return HttpResponse(data, content_type="application/x-tar")


@api.put(
    "/sandboxes/{sandbox_id}/archive", response={200: Written, **OPERATION_ERRORS}, tags=["files"]
)
def upload_archive(request, sandbox_id: int, path: str = path_query(".")):
    attempt = sandbox_for(request.user, sandbox_id, routing_only=True)
    path = sandboxes.workspace_path(path)  # a bad path is refused before the body is read
    return dataclasses.asdict(sandboxes.sandbox_upload(attempt, path=path, data=_body(request)))


@api.post("/sandboxes/{sandbox_id}/check", response={200: CheckOut, **ERRORS}, tags=["sandboxes"])
def check_sandbox(request, sandbox_id: int):
    attempt = sandbox_for(request.user, sandbox_id)
    if not has_check(attempt.task):
        raise NoCheck(
            f"sandbox {attempt.pk} was started from an image, without a task: it has no check"
        )
    check = sandboxes.sandbox_check(attempt, timeout=attempt.task.check_budget)
    return check_out(CheckResult.objects.get(pk=check))


@api.get("/sandboxes/{sandbox_id}/diff", response={200: DiffOut, **ERRORS}, tags=["sandboxes"])
def diff_sandbox(request, sandbox_id: int):
    attempt = sandbox_for(request.user, sandbox_id)
    answer = dataclasses.asdict(sandboxes.sandbox_diff(attempt))
    answer["files"] = [
        {
            "path": f.path,
            "old_path": f.old_path,
            "status": f.status,
            "added": f.added,
            "removed": f.removed,
            "binary": f.binary,
            "old_mode": f.old_mode,
            "new_mode": f.new_mode,
            "similarity": f.similarity,
        }
        for f in _diff_files(answer["patch"])
    ]
    return answer


def _diff_files(patch: str):
    try:
        return split_files(patch)
    except Exception:  # noqa: BLE001 - a patch cut at the page's cap: the stats are partial
        return []


@api.post("/sandboxes/{sandbox_id}/messages", response={201: None, **ERRORS}, tags=["sandboxes"])
def add_message(request, sandbox_id: int, body: MessageIn):
    attempt = sandbox_for(request.user, sandbox_id)
    sandboxes.sandbox_message(attempt, role=body.role, content=body.content)
    return 201, None


@api.post("/sandboxes/{sandbox_id}/close", response={200: SandboxOut, **ERRORS}, tags=["sandboxes"])
def close_sandbox(request, sandbox_id: int, body: CloseIn):
    attempt = sandbox_for(request.user, sandbox_id)
    before = attempt.checks.order_by("-pk").values_list("pk", flat=True).first()
    closed = sandboxes.sandbox_close(attempt, check=body.check)
    last = closed.checks.order_by("-pk").first()
    return sandbox_out(request, closed, last if last and last.pk != before else None)


@api.delete("/sandboxes/{sandbox_id}", response={204: None, **ERRORS}, tags=["sandboxes"])
def delete_sandbox(request, sandbox_id: int):
    attempt = sandbox_for(request.user, sandbox_id)
    # Its container and kept files go at once (a live one is stopped by its holder); the record,
    # timeline, diff and checks stay, and operations on it are refused (SandboxDeleted).
    deletion.sandbox_delete(attempt=attempt, by=request.user.get_username())
    return 204, None


def _body(request) -> bytes:
    size = int(request.headers.get("Content-Length") or 0)
    if size > settings.BOLTZ_MAX_FILE_BYTES:
        raise TooLarge(f"larger than {settings.BOLTZ_MAX_FILE_BYTES} bytes (BOLTZ_MAX_FILE_BYTES)")
    return request.body
