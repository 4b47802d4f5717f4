"""API sandboxes, as the web process handles them: create, find, operate through the owning
host's worker, close, delete. Never touches Docker: every operation is sent to the worker of the
host that owns the container (an operation call, dispatch/calls.py, carrying a typed request of
dispatch/protocol.py) with a finite wait.

What cannot be done is raised as a refusal of dispatch/errors.py, in the domain's terms; the
API says each as its HTTP status.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import math
import posixpath
import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.core.files.storage import default_storage
from django.db.models import QuerySet
from django.utils import timezone

from attempts.core.ended import announce
from attempts.core.errors import MULTI_STEP_ATTEMPTS_ONLY, TaskInvalid
from attempts.core.timeline import Timeline, clip
from attempts.dispatch import calls as opcalls
from attempts.dispatch import protocol as p
from attempts.dispatch import queue as queueing
from attempts.dispatch.errors import (
    InfrastructureFault,
    InvalidRequest,
    NoCapacity,
    NotFound,
    Refusal,
    SandboxDeleted,
    SandboxNotLive,
    TimedOut,
    TooLarge,
    WorkerUnreachable,
)
from attempts.dispatch.hosts import host_alive
from attempts.dispatch.limits import (
    ARCHIVE_WAIT,
    CAPACITY_RETRY_AFTER,
    CLOSE_WAIT,
    DIFF_WAIT,
    EXEC_TIMEOUT,
    FILE_WAIT,
    MAX_COMMAND_SECONDS,
    MAX_SANDBOX_WAIT,
    OPERATION_MARGIN,
    SANDBOX_WAIT,
    STARTING_GRACE,
    command_too_long,
    environment_too_long,
)
from attempts.exports.workspace import SANDBOX_UID
from attempts.models import (
    DONE_STATUSES,
    Actor,
    Attempt,
    Event,
    EventKind,
    Outcome,
    SandboxState,
    Status,
    Task,
)
from attempts.services.attempts import attempt_withdraw, numbered_attempt
from attempts.taskio.from_image import image_task

WORKSPACE = "/workspace"


def visible_attempts(user) -> QuerySet:
    attempts = Attempt.objects.select_related("task")
    return attempts if user.is_staff else attempts.filter(owner=user)


# What sending an operation to a sandbox's worker reads of it (an exec or a file need no more).
ROUTING_FIELDS = (
    "id",
    "origin",
    "owner",
    "status",
    "host",
    "sandbox_state",
    "sandbox_deleted_at",
    "sandbox_deleted_by",
    "close_requested_at",
    "outcome",
    "failure_reason",
)


def sandbox_for(user, sandbox_id: int, *, routing_only: bool = False) -> Attempt:
    """The user's sandbox (else NotFound); `routing_only` loads only ROUTING_FIELDS."""
    found = visible_attempts(user)
    if routing_only:
        found = found.select_related(None).only(*ROUTING_FIELDS)
    found = found.filter(pk=sandbox_id, origin="api").first()
    if found is None:
        raise NotFound(f"no sandbox {sandbox_id}")
    return found


def sandbox_state(attempt: Attempt) -> str:
    if attempt.sandbox_deleted_at or attempt.sandbox_state == SandboxState.DELETED:
        return "deleted"
    if attempt.status in DONE_STATUSES:
        return "closed"
    if attempt.status == Status.RUNNING and not attempt.close_requested_at:
        # Its container stopped outside Boltz (the worker's events listener saw it): its
        # holder is ending it as an infrastructure error.
        return "live" if attempt.sandbox_state == SandboxState.LIVE else "closing"
    if attempt.close_requested_at:
        return "closing"
    return "starting"


def workspace_path(path: str) -> str:
    """A path inside the sandbox, normalized: relative ones stay relative, and the worker
    puts them in the task's working folder (/workspace, or a Harbor task's /app)."""
    if not isinstance(path, str) or not path or "\x00" in path or len(path) > 4096:
        raise InvalidRequest("path", "give a file name (no NUL, at most 4096 characters)")
    joined = posixpath.normpath(path)
    return "/" + joined.lstrip("/") if path.startswith("/") else joined


def sandbox_create(
    *,
    user,
    task: str = "",
    image: str = "",
    labels: dict[str, str] | None = None,
    agent: str = "",
    ttl: float | None = None,
    idle_timeout: float | None = None,
    wait: float = SANDBOX_WAIT,
) -> Attempt:
    """A new sandbox from a task (or, with `image` and no task, an empty one from that image),
    live when this returns. Over capacity it waits up to `wait` seconds for a host with room,
    then gives up: NoCapacity, with a time to retry."""
    if bool(task) == bool(image):
        raise InvalidRequest(
            "task or image", "give a task's name, or an image for a task-less sandbox"
        )
    if image:
        try:
            found = image_task(image)
        except TaskInvalid as exc:
            raise InvalidRequest("", exc.message) from None
    else:
        found = Task.objects.filter(slug=task).first()
    if found is None:
        raise NotFound(f"no task {task!r}: GET /api/tasks lists them")
    if found.multi_step:
        raise InvalidRequest("task", MULTI_STEP_ATTEMPTS_ONLY.format(slug=found.slug))
    labels = {str(k)[:100]: str(v)[:300] for k, v in (labels or {}).items()}
    ttl = min(float(ttl or settings.BOLTZ_SANDBOX_DEFAULT_TTL), settings.BOLTZ_SANDBOX_MAX_TTL)
    idle = float(idle_timeout or settings.BOLTZ_SANDBOX_IDLE_TIMEOUT)
    if ttl < 1 or idle < 1 or not math.isfinite(ttl + idle):
        raise InvalidRequest("ttl and idle_timeout", "give numbers of seconds, 1 or more")
    queueing.require_queue()  # Redis down: refused before anything is made
    attempt = sandbox_attempt(
        found, user=user, agent=agent or "api", labels=labels, ttl=ttl, idle=idle
    )
    queueing.enqueue_attempts([attempt])
    return wait_live(attempt, wait=wait)


def sandbox_attempt(
    task: Task, *, user, agent: str, labels: dict, ttl: float, idle: float, **fields
):
    """A new API sandbox's attempt, queued (not yet sent to a worker)."""
    now = timezone.now()
    attempt = numbered_attempt(
        task,
        agent=agent[:100],
        origin="api",
        queue=queueing.attempts_queue(),
        owner=user,
        labels=labels,
        created_at=now,
        expires_at=now + timedelta(seconds=ttl),
        idle_timeout=idle,
        **fields,
    )
    Timeline(attempt.pk).add(
        EventKind.LIFECYCLE,
        status="queued",
        message=f"sandbox requested through the API by {user.get_username()}",
        agent=agent,
        labels=labels,
    )
    return attempt


def wait_live(attempt: Attempt, *, wait: float) -> Attempt:
    """The sandbox once it is live; the Refusal that says why not if it could not start, or
    NoCapacity when no host had room within `wait` seconds (it is then withdrawn: no attempt
    is left of it, and its number is not used up)."""
    got = wait_live_all([attempt], wait=wait, withdraw=True)[attempt.pk]
    if isinstance(got, Refusal):
        raise got
    return got


def wait_live_all(
    attempts: list[Attempt], *, wait: float, withdraw: bool = False
) -> dict[int, Attempt | Refusal]:
    """Wait for several sandboxes at once: for each, the live Attempt or the Refusal that says
    why not (as `wait_live`). One that found no room within `wait` is cancelled (a pool's
    episode keeps its record), or with `withdraw` removed as if never asked for."""
    wait = max(0.0, min(wait, MAX_SANDBOX_WAIT))
    pending = {a.pk for a in attempts}
    got: dict[int, Attempt | Refusal] = {}
    deadline = time.monotonic() + wait
    setting_up_until: float | None = None  # started before the deadline: given some more
    while pending:
        rows = Attempt.objects.filter(pk__in=pending).values_list(
            "pk", "status", "outcome", "failure_reason"
        )
        seen = set()
        for pk, status, outcome, reason in rows:
            seen.add(pk)
            # Live, or live and closed already (its time ran out before we looked): started.
            if status == Status.RUNNING or (
                status == Status.FINISHED and outcome != Outcome.INFRA_ERROR
            ):
                got[pk] = None  # loaded whole below
                pending.discard(pk)
            elif status in DONE_STATUSES:
                got[pk] = InfrastructureFault(f"the sandbox could not start: {reason}")
                pending.discard(pk)
        for pk in pending - seen:  # deleted meanwhile
            got[pk] = SandboxDeleted(f"sandbox {pk} was deleted")
            pending.discard(pk)
        now = time.monotonic()
        if pending and now >= deadline:
            for pk in list(pending):
                if attempt_withdraw(attempt_id=pk) if withdraw else _give_up_queued(pk, wait):
                    got[pk] = NoCapacity(
                        f"every host is at capacity; no sandbox was free within {wait:g}s: "
                        "retry later or wait longer",
                        retry_after=CAPACITY_RETRY_AFTER,
                    )
                    pending.discard(pk)
            if setting_up_until is None:
                setting_up_until = now + STARTING_GRACE
            elif now >= setting_up_until:
                for pk in pending:
                    got[pk] = TimedOut(
                        f"sandbox {pk} started but was not live within {STARTING_GRACE:g}s more"
                    )
                pending.clear()
        if pending:
            time.sleep(0.01)
    live = [pk for pk, value in got.items() if value is None]
    for attempt in Attempt.objects.select_related("task").filter(pk__in=live):
        got[attempt.pk] = attempt
    for pk in live:
        if got[pk] is None:
            got[pk] = SandboxDeleted(f"sandbox {pk} was deleted")
    return got


def _give_up_queued(pk: int, wait: float) -> bool:
    """Cancel a sandbox still queued (compare-and-set: one that started meanwhile goes on)."""
    reason = f"no host had room within {wait:g}s"
    gave_up = Attempt.objects.filter(pk=pk, status=Status.QUEUED).update(
        status=Status.CANCELLED,
        outcome=Outcome.CANCELLED,
        finished_at=timezone.now(),
        failure_reason=reason,
    )
    if gave_up:
        Timeline(pk).add(EventKind.LIFECYCLE, status=Status.CANCELLED, message=reason)
        task_id = Attempt.objects.filter(pk=pk).values_list("task_id", flat=True).first()
        announce(pk, task_id)  # it ended too: its callback, if it asked for one, says so
    return bool(gave_up)


def _ready(attempt: Attempt) -> None:
    state = sandbox_state(attempt)
    if state == "deleted":
        by = f" by {attempt.sandbox_deleted_by}" if attempt.sandbox_deleted_by else ""
        raise SandboxDeleted(f"sandbox {attempt.pk} was deleted{by}")
    if state != "live":
        _raise_if_infrastructure_ended(attempt)
        raise SandboxNotLive(f"sandbox {attempt.pk} is {state}, not live")
    if not host_alive(attempt.host):
        raise InfrastructureFault(f"the sandbox's host {attempt.host} has not been heard from")


def _raise_if_infrastructure_ended(attempt: Attempt) -> None:
    """A sandbox that an infrastructure fault ended (its container killed outside Boltz, its
    Docker daemon restarted) answers as the fault did, with its reason: never as one its client
    closed. (One whose container is gone was deleted: 410, saying by whom.)"""
    if attempt.outcome == Outcome.INFRA_ERROR:
        raise InfrastructureFault(
            f"infrastructure error: the sandbox ended: {attempt.failure_reason}"
        )
    if attempt.status == Status.RUNNING and attempt.sandbox_state != SandboxState.LIVE:
        raise InfrastructureFault(
            "infrastructure error: the sandbox is ending: its container stopped outside Boltz"
        )


def operate(attempt: Attempt, request: p.Request, *, timeout: float) -> p.Answer:
    """Run an operation on the sandbox's worker and wait at most `timeout` seconds: its
    answer, or the Refusal that says why not."""
    _ready(attempt)
    with _channel(request.op, timeout):
        return opcalls.call(attempt.host, attempt.pk, request, timeout=timeout)


@contextlib.contextmanager
def _channel(op: str, timeout: float):
    """A call that went unanswered or could not be sent, said in the domain's terms."""
    try:
        yield
    except opcalls.CallTimeout:
        raise TimedOut(f"the {op} did not answer within {timeout:g}s") from None
    except opcalls.ChannelDown as exc:
        raise WorkerUnreachable(f"infrastructure error: {exc}") from None


# --- files -----------------------------------------------------------------------------------
def sandbox_read(attempt: Attempt, *, path: str, max_bytes: int | None = None) -> bytes:
    """A file's bytes (at most `max_bytes`, never more than BOLTZ_MAX_FILE_BYTES)."""
    path = workspace_path(path)
    if max_bytes is not None and max_bytes < 0:
        raise InvalidRequest("max_bytes", "give a number of bytes (0 or more)")
    return operate(attempt, p.ReadRequest(path=path, max_bytes=max_bytes), timeout=FILE_WAIT).data


def sandbox_write(attempt: Attempt, *, path: str, data: bytes, mode: int) -> p.WriteAnswer:
    request = p.WriteRequest(path=workspace_path(path), data=data, mode=mode)
    return operate(attempt, request, timeout=FILE_WAIT)


def sandbox_list(attempt: Attempt, *, path: str) -> list[p.FileEntry]:
    request = p.ListRequest(path=workspace_path(path))
    return operate(attempt, request, timeout=FILE_WAIT).entries


def sandbox_remove(attempt: Attempt, *, path: str) -> None:
    """A file or folder of the sandbox removed (`sandbox_delete` deletes the sandbox)."""
    operate(attempt, p.DeleteRequest(path=workspace_path(path)), timeout=FILE_WAIT)


def sandbox_download(attempt: Attempt, *, path: str) -> bytes:
    """A file or folder as a tar archive."""
    request = p.DownloadRequest(path=workspace_path(path))
    return operate(attempt, request, timeout=ARCHIVE_WAIT).data


def sandbox_upload(attempt: Attempt, *, path: str, data: bytes) -> p.UploadAnswer:
    """A tar archive unpacked into the folder `path`."""
    request = p.UploadRequest(path=workspace_path(path), data=data)
    return operate(attempt, request, timeout=ARCHIVE_WAIT)


# --- changes and check -----------------------------------------------------------------------
def sandbox_diff(attempt: Attempt) -> p.DiffAnswer:
    """The changes so far: read out of a live sandbox, as recorded of one that is not."""
    if sandbox_state(attempt) != "live":
        return p.DiffAnswer(
            patch=attempt.diff, truncated=attempt.diff_truncated, bytes=attempt.diff_bytes
        )
    return operate(attempt, p.DiffRequest(), timeout=DIFF_WAIT)


def sandbox_check(attempt: Attempt, *, timeout: float) -> int:
    """The task's check on a clean copy of the changes so far: its CheckResult's id."""
    return operate(attempt, p.CheckRequest(), timeout=timeout).check


# --- exec ------------------------------------------------------------------------------------
def exec_stream(attempt: Attempt, request: p.ExecRequest, *, timeout: float) -> Iterator[dict]:
    """An exec whose output comes as it is made: {"stream", "text"} items read from the
    timeline (the worker writes them there as the command runs), then {"result": answer}.
    What refuses it before it runs (a closed or deleted sandbox, Redis down) is raised here,
    before the stream begins, so it is answered as the plain exec's refusal is."""
    _ready(attempt)
    with _channel(request.op, timeout):
        started = opcalls.send(attempt.host, attempt.pk, request, timeout=timeout)
    return _streamed(attempt, request, started, timeout=timeout)


def _streamed(attempt: Attempt, request: p.ExecRequest, started, *, timeout: float):
    deadline = time.monotonic() + timeout
    number, after = None, 0
    while True:
        try:
            done = started.done()
        except opcalls.ChannelDown as exc:
            yield _stream_error(WorkerUnreachable(f"infrastructure error: {exc}"))
            return
        if number is None:
            start = Event.objects.filter(
                attempt_id=attempt.pk, kind=EventKind.EXEC, data__request=request.request_id
            ).first()
            if start is not None:
                number, after = start.data["exec"], start.seq
        if number is not None:
            for event in Event.objects.filter(
                attempt_id=attempt.pk, kind=EventKind.OUTPUT, seq__gt=after, data__exec=number
            ).order_by("seq"):
                after = event.seq
                yield {"stream": event.data["stream"], "text": event.data["text"]}
        if done:
            try:
                yield {"result": started.get(timeout=0)}
            except Refusal as exc:
                yield _stream_error(exc)
            return
        if time.monotonic() > deadline:
            yield _stream_error(TimedOut(f"no answer within {timeout:g}s"))
            return
        time.sleep(0.1)


def _stream_error(refusal: Refusal) -> dict:
    """A stream's last item when its exec cannot answer: the stream has begun, so the
    refusal is said in it (the API writes it in its errors' shape, with the status)."""
    return {"error": refusal}


def sandbox_exec(
    attempt: Attempt,
    *,
    command,
    cwd,
    env,
    timeout,
    stdin,
    user,
    stream: bool = False,
    max_output: int | None = None,
):
    """Run a command; its ExecAnswer, or (with `stream`) an iterator of output then result.
    `stdin`: base64 (as `exec_stdin` gives it) or None. `max_output`: streams up to this many
    bytes come back whole (else head and tail)."""
    if max_output is not None and not 0 <= max_output <= settings.BOLTZ_MAX_FILE_BYTES:
        raise InvalidRequest(
            "max_output",
            f"give bytes up to {settings.BOLTZ_MAX_FILE_BYTES} (BOLTZ_MAX_FILE_BYTES)",
        )
    user = exec_user(
        user,
        allow_root=lambda: Task.objects.filter(attempts=attempt.pk, allow_root=True).exists(),
    )
    if isinstance(command, list) and not command or command == "":
        raise InvalidRequest("command", "give a shell command or a non-empty argv")
    for field, why in (
        ("command", command_too_long(command)),
        ("env", environment_too_long(env or {})),
    ):
        if why:
            raise TooLarge(f"{field}: {why}")
    timeout = float(timeout or EXEC_TIMEOUT)
    if not math.isfinite(timeout) or timeout <= 0 or timeout > MAX_COMMAND_SECONDS:
        raise InvalidRequest("timeout", "give a number of seconds up to a day")
    request = p.ExecRequest(
        command=command,
        cwd=workspace_path(cwd or "."),
        env={str(k): str(v) for k, v in (env or {}).items()},
        timeout=timeout,
        stdin=base64.b64decode(stdin) if stdin else None,
        user=user,
        request_id=uuid.uuid4().hex,
        stream=stream,  # the worker writes its output as it comes, for the stream
    )
    if stream:
        return (
            {"result": whole_output(item["result"], max_output)} if "result" in item else item
            for item in exec_stream(attempt, request, timeout=timeout + OPERATION_MARGIN)
        )
    answer = operate(attempt, request, timeout=timeout + OPERATION_MARGIN)
    return whole_output(answer, max_output)


def exec_stdin(text: str | None, encoded: str | None) -> str | None:
    """An exec's standard input as base64: text, or bytes given as base64; None for none (an
    empty input reads as end of file either way)."""
    if text is not None and encoded is not None:
        raise InvalidRequest("stdin, stdin_base64", "give one of them, not both")
    if encoded is None:
        return base64.b64encode(text.encode()).decode() if text else None
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("stdin_base64", "not valid base64") from None
    return encoded if data else None


def whole_output(answer: p.ExecAnswer, max_output: int | None) -> p.ExecAnswer:
    """An exec's answer with each stream of at most `max_output` bytes whole, read from the
    raw output the worker stored (the answer itself carries only its head and tail)."""
    if not max_output or not answer.truncated:
        return answer
    whole, streams = True, {}
    for stream in ("stdout", "stderr"):
        size, name = getattr(answer, f"{stream}_bytes"), answer.raw.get(stream, "")
        if not size:
            continue
        if size > max_output or not name:
            whole = False
            continue
        with default_storage.open(name) as handle:
            data = handle.read(size + 1)
        if len(data) != size:
            whole = False
            continue
        streams[stream] = data.decode("utf-8", errors="replace")
    return dataclasses.replace(answer, **streams, truncated=not whole)


USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")


def exec_user(user: str | None, *, allow_root=lambda: False) -> str:
    """Who a command runs as: "" for the task's agent user (the sandbox user), else a user
    name or uid the worker looks up in the sandbox. Root only where the task allows it (a
    Harbor task whose image runs as root; `allow_root()` says), and never with capabilities."""
    user = user or ""  # as given: " bob" is not a user name (the API's document says so)
    if not user:
        return ""
    if user in ("sandbox", str(SANDBOX_UID)):  # asked for by name: that user, not the task's
        return str(SANDBOX_UID)
    if not USER_NAME.fullmatch(user):
        raise InvalidRequest("user", "give a user name or a uid (no group)")
    if user in ("root", "0") and not allow_root():
        raise InvalidRequest(
            "user",
            "commands never run as root in a Boltz sandbox (uid 0); give a non-root user",
            code="user_not_allowed",
        )
    return user


def sandbox_message(attempt: Attempt, *, role: str, content: str) -> None:
    if sandbox_state(attempt) in ("deleted",):
        raise SandboxDeleted(f"sandbox {attempt.pk} was deleted")
    Timeline(attempt.pk).add(
        EventKind.MESSAGE, actor=Actor.AGENT, role=role[:50], text=clip(content)
    )


def sandbox_close(attempt: Attempt, *, check: bool, wait: float = CLOSE_WAIT) -> Attempt:
    """Ask the holder to close the sandbox (final check if asked), and wait until it has."""
    state = sandbox_state(attempt)
    if state == "deleted":
        raise SandboxDeleted(f"sandbox {attempt.pk} was deleted")
    Attempt.objects.filter(pk=attempt.pk, close_requested_at__isnull=True).update(
        close_requested_at=timezone.now(), close_with_check=check
    )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        attempt.refresh_from_db()
        if attempt.status in DONE_STATUSES:
            return attempt
        time.sleep(0.1)
    raise TimedOut(f"sandbox {attempt.pk} did not close within {wait:g}s")
