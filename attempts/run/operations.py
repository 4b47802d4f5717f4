"""API sandboxes on their worker: opening one, holding it while its client drives it, each
operation a client asks for, and closing it. Worker-side: the web process sends the holder as a
Celery task to the host that owns the container (dispatch/queue.py), and each operation as an
operation call (dispatch/calls.py): a typed request of dispatch/protocol.py, answered with its
typed answer or a refusal of dispatch/errors.py.

An API sandbox is an attempt (origin "api") whose work stage is its client: the holder task
keeps one of the host's attempt slots for the sandbox's whole life, so the host never runs more
sandboxes than its capacity, and closes it when asked, idle, past its time to live, or deleted.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from attempts.core import redaction
from attempts.core.episodes import end_episode
from attempts.core.errors import (
    AttemptGone,
    DiskFull,
    InfrastructureError,
    PathUnreadable,
    SandboxGone,
    TaskInvalid,
)
from attempts.dispatch import protocol as p
from attempts.dispatch.errors import (
    ChangesUnreadable,
    FileAccessDenied,
    FileNotFound,
    InfrastructureFault,
    InvalidRequest,
    NotFound,
    Refusal,
    SandboxDeleted,
    SandboxDiskFull,
    SandboxNotLive,
    TaskNotRunnable,
    TooLarge,
)
from attempts.dispatch.limits import EXEC_TIMEOUT, PATCH_TIMEOUT
from attempts.exports.bundle import check_record
from attempts.exports.workspace import SANDBOX_UID
from attempts.models import (
    SESSION_TASK_FIELDS,
    Actor,
    Attempt,
    CheckResult,
    EventKind,
    SandboxState,
    Status,
    Task,
)
from attempts.run import container_watch
from attempts.run import session as files
from attempts.run.changes import ChangesUnavailable
from attempts.run.director import (
    STOP_FIELDS,
    AttemptRunner,
    WorkStage,
    run_claimed,
    scratch_folder,
)
from attempts.run.docker.runtime import Sandbox
from attempts.run.session import FileOpError, SandboxSession, update_attempt
from attempts.run.trees import AttemptTrees
from attempts.run.users import UserRefused
from attempts.taskio.from_image import has_check

log = logging.getLogger(__name__)

HOLD_POLL_SECONDS = 0.25
# Why a hold ended when its container stopped outside Boltz (container_watch.py).
STOPPED_OUTSIDE = "its container stopped outside Boltz"


# --- the holder ---------------------------------------------------------------------------------
def hold_sandbox(attempt_id: int, *, host: str) -> None:
    """Open an API sandbox (or a pool's episode: one whose client is the pool) and hold it
    until it is closed: the attempt director's stages, with the client's hold as the work."""
    run_claimed(attempt_id, host=host, work=ClientHold())


class ClientHold(WorkStage):
    """An API sandbox's work stage: live while its client drives it, until the client closes
    it, its time to live or idle time runs out, or a reviewer deletes it or cancels it. The
    check ends it only when the client closes it asking for one."""

    def run(self, director: AttemptRunner) -> None:
        attempt = director.attempt
        update_attempt(attempt, status=Status.RUNNING, last_used_at=timezone.now())
        director.timeline.add(
            EventKind.LIFECYCLE,
            status=Status.RUNNING,
            message=f"sandbox live for {attempt.agent or 'an API client'}",
        )
        why = self._wait_for_close(director)
        while why == STOPPED_OUTSIDE:
            self._ended_outside(director)  # raises, unless it runs again
            why = self._wait_for_close(director)
        # A container that died while live (killed, its host's fault) is no outcome of the
        # client's: the attempt is an infrastructure error. Not even memory is blamed on the
        # client here: Docker's OOMKilled says that some process of the container was killed
        # for memory at some time in its (hours-long) life, not that this is why it died.
        director.session.ensure_running()
        director.timeline.add(EventKind.LIFECYCLE, message=f"closing: {why}")
        return None

    def _ended_outside(self, director: AttemptRunner) -> None:
        """The events listener saw the container stop, and not by Boltz's doing
        (container_watch.py): the attempt ends as an infrastructure error (a pool's next step
        on it is masked as such, and ends its episode). A container running again (an operator
        started it) is live again."""
        attempt = director.attempt
        full = container_watch.full_disk_reason(attempt.pk)
        if full:  # Boltz stopped it, and Docker could not start it again: a full disk
            raise DiskFull(full)
        try:
            director.session.ensure_running()
        except InfrastructureError as exc:
            raise SandboxGone(
                "the sandbox's container stopped while it was live, and not by Boltz (docker "
                f"kill or rm, or its Docker daemon restarted): {exc.reason}"
            ) from None
        Attempt.objects.filter(pk=attempt.pk).update(sandbox_state=SandboxState.LIVE)

    def checks(self, director: AttemptRunner) -> bool:
        return director.attempt.close_with_check and has_check(director.task)

    def _wait_for_close(self, director: AttemptRunner) -> str:
        """Until the client closes the sandbox, its time to live or idle time runs out, or its
        container stops outside Boltz (returns why: STOPPED_OUTSIDE for the last), or a
        reviewer stops it (AttemptStopped, as a running agent is)."""
        while True:
            row = (
                Attempt.objects.filter(pk=director.attempt.pk)
                .values(
                    *STOP_FIELDS,
                    "close_requested_at",
                    "close_with_check",
                    "expires_at",
                    "idle_timeout",
                    "last_used_at",
                    "sandbox_state",
                )
                .first()
            )
            director.stop_if_asked(row)
            if row["sandbox_state"] != SandboxState.LIVE:
                return STOPPED_OUTSIDE
            now = timezone.now()
            if row["close_requested_at"]:
                director.attempt.close_with_check = row["close_with_check"]
                return "closed by its client"
            if row["expires_at"] and now >= row["expires_at"]:
                return "its time to live ran out"
            idle = row["idle_timeout"]
            if idle and row["last_used_at"] and (now - row["last_used_at"]).total_seconds() > idle:
                return f"idle for more than {idle:g}s"
            time.sleep(HOLD_POLL_SECONDS)


# --- operations ----------------------------------------------------------------------------------
def run_operation(attempt_id: int, request: p.Request) -> p.Answer:
    """Do one operation on a live API sandbox: its answer, or a Refusal (errors.py) raised,
    which the operation call carries back to its caller. A container that stops meanwhile is
    judged when it ends (container_watch.py); one that failed it is not a use of the sandbox
    (its idle time goes on)."""
    used = None
    with container_watch.operating(attempt_id):
        try:
            if isinstance(request, p.StepRequest):  # the web has found it live, taken the step
                used = _Use(attempt_id, request.container, None, None)
                return _step(attempt_id, request)
            attempt, session, used = _live_session(attempt_id)
            handler = OPERATIONS[type(request)]
            return handler(attempt, session, _in_workdir(request, session.workdir))
        except FileOpError as exc:
            raise _file_refusal(exc) from None
        except ChangesUnavailable as exc:
            raise ChangesUnreadable(f"changes unavailable: {exc.reason}") from None
        except PathUnreadable as exc:  # what the sandbox's commands made of its folder
            raise ChangesUnreadable(exc.reason) from None
        except TaskInvalid as exc:  # the task's user is not (any more) in the sandbox's image
            raise TaskNotRunnable(f"{exc.field}: {exc.message}") from None
        except DiskFull as exc:
            # What the sandbox wrote fills its disk. Where Boltz stopped it (to end a command
            # past its timeout) and Docker cannot start it again, the sandbox ends, as the
            # agent's failure (`_ended_outside`).
            stopped = container_watch.stopped_by_full_disk(attempt_id, exc.reason)
            raise SandboxDiskFull(
                f"{exc.reason}: "
                + ("the sandbox has ended" if stopped else "remove files to free space")
            ) from None
        except (SandboxGone, InfrastructureError) as exc:
            if used is not None:
                used.failed()
            raise InfrastructureFault(f"infrastructure error: {exc.reason}") from None
        except AttemptGone:
            raise SandboxDeleted("the sandbox was deleted") from None


@dataclasses.dataclass
class _Use:
    """One operation's use of a live sandbox: its container, and the "last used" it wrote
    (None if it wrote none) over the one before."""

    attempt_id: int
    container: str
    before: datetime | None
    wrote: datetime | None

    def failed(self) -> None:
        """The operation failed on its container: the container is judged when the operation
        ends, and the sandbox's "last used" is put back as it was."""
        container_watch.suspect(self.attempt_id, self.container)
        if self.wrote is not None:
            Attempt.objects.filter(pk=self.attempt_id, last_used_at=self.wrote).update(
                last_used_at=self.before
            )


def _in_workdir(request: p.Request, workdir: str) -> p.Request:
    """The request with its relative `path` or `cwd` in the task's working folder."""
    moved = {
        name: posixpath.normpath(posixpath.join(workdir, getattr(request, name)))
        for name in ("path", "cwd")
        if isinstance(getattr(request, name, None), str)
    }
    return dataclasses.replace(request, **moved) if moved else request


FILE_REFUSALS = {
    "file_not_found": FileNotFound,
    "permission_denied": FileAccessDenied,
    "too_large": TooLarge,
}


def _file_refusal(exc: FileOpError) -> Refusal:
    """What a file operation the sandbox refused means to its caller (the rest, such as a
    folder read as a file, are the request's own fault)."""
    refusal = FILE_REFUSALS.get(exc.code)
    if refusal is None:
        return InvalidRequest("", exc.message, code=exc.code)
    return refusal(exc.message)


# What an exec or a file operation reads of its sandbox; diff and check load the rest.
LIVE_FIELDS = (
    "id",
    "task",
    "status",
    "host",
    "container_id",
    "sandbox_state",
    "sandbox_deleted_at",
    "close_requested_at",
    "last_used_at",
    "agent_env",
)
# The sandbox's "last used" (for its idle timeout) is written at most this often.
LAST_USED_PRECISION = timedelta(seconds=1)


def _live_session(attempt_id: int) -> tuple[Attempt, SandboxSession, _Use]:
    attempt = (
        Attempt.objects.select_related("task")
        .only(*LIVE_FIELDS, *(f"task__{name}" for name in SESSION_TASK_FIELDS))
        .filter(pk=attempt_id)
        .first()
    )
    if attempt is None:
        raise NotFound(f"no sandbox {attempt_id}")
    if attempt.sandbox_deleted_at or attempt.sandbox_state == SandboxState.DELETED:
        raise SandboxDeleted(f"sandbox {attempt_id} was deleted")
    if attempt.status != Status.RUNNING or attempt.close_requested_at:
        raise SandboxNotLive(f"sandbox {attempt_id} is {attempt.status}, not live")
    if attempt.sandbox_state != SandboxState.LIVE:  # container_watch.py saw it stop
        raise InfrastructureFault(
            "infrastructure error: the sandbox is ending: its container stopped outside Boltz"
        )
    if attempt.host != settings.BOLTZ_HOST:
        raise InfrastructureFault(f"sandbox {attempt_id} lives on {attempt.host}")
    now, wrote = timezone.now(), None
    if attempt.last_used_at is None or now - attempt.last_used_at >= LAST_USED_PRECISION:
        Attempt.objects.filter(pk=attempt.pk).update(last_used_at=now)
        wrote = now
    session = SandboxSession(
        attempt, Sandbox(attempt.container_id), secrets=redaction.secrets_of(attempt)
    )
    return attempt, session, _Use(attempt.pk, attempt.container_id, attempt.last_used_at, wrote)


def _whole(attempt: Attempt) -> Attempt:
    """The attempt with all its fields and its task (a diff or a check reads them)."""
    return Attempt.objects.select_related("task").get(pk=attempt.pk)


def exec_result(run) -> p.ExecAnswer:
    return p.ExecAnswer(
        exit_code=run.result.exit_code,
        stdout=run.stdout.text(),
        stderr=run.stderr.text(),
        stdout_bytes=run.stdout.total_bytes,
        stderr_bytes=run.stderr.total_bytes,
        stdout_utf8=run.stdout.valid_utf8,
        stderr_utf8=run.stderr.valid_utf8,
        truncated=run.truncated,
        timed_out=run.result.timed_out,
        duration=round(run.result.duration, 3),
        raw=run.raw,
    )


def _exec(attempt: Attempt, session: SandboxSession, request: p.ExecRequest) -> p.ExecAnswer:
    command, display = request.command, None
    run_as = _run_as(session, request.user) if request.user else session.agent_user
    if request.stdin:
        staged = f"/tmp/.boltz-stdin-{time.monotonic_ns()}"
        session.sandbox.put_archive(
            "/",
            files.files_tar(
                {staged.lstrip("/"): request.stdin},
                mode=0o600,
                owner=tuple(int(n) for n in run_as.split(":")) if run_as else None,
            ),
        )
        if isinstance(command, str):
            script = f'exec < "$0"; rm -f "$0"; {command}'
            display, command = command, ["/bin/sh", "-c", script, staged]
        else:
            display = " ".join(command)
            command = ["/bin/sh", "-c", 'exec < "$0"; rm -f "$0"; exec "$@"', staged, *command]
    run = session.exec(
        "exec",
        command,
        timeout=request.timeout or EXEC_TIMEOUT,
        actor=Actor.AGENT,
        environment=request.env,
        workdir=request.cwd or None,
        request=request.request_id,
        display=display,
        number=request.number,
        user=run_as,
        stream_output=request.stream,
    )
    return exec_result(run)


def _run_as(session: SandboxSession, user: str) -> str:
    """`uid:gid` of a user of the sandbox's image (root only where the task allows it), from
    its own passwd file; the sandbox user's uid is Boltz's own."""
    if user == str(SANDBOX_UID):
        return f"{SANDBOX_UID}:{SANDBOX_UID}"
    try:
        return session.lookup_user(user)
    except UserRefused as exc:
        raise InvalidRequest("user", exc.message, code=exc.code) from None


def _read(attempt, session, request: p.ReadRequest) -> p.ReadAnswer:
    limit = settings.BOLTZ_MAX_FILE_BYTES if request.max_bytes is None else request.max_bytes
    data = files.read_file(
        session, request.path, max_bytes=min(limit, settings.BOLTZ_MAX_FILE_BYTES)
    )
    return p.ReadAnswer(data=data)


def _write(attempt, session, request: p.WriteRequest) -> p.WriteAnswer:
    files.write_file(session, request.path, request.data, mode=request.mode)
    return p.WriteAnswer(path=request.path, bytes=len(request.data))


def _list(attempt, session, request: p.ListRequest) -> p.ListAnswer:
    entries = files.list_folder(session, request.path)
    return p.ListAnswer(entries=[p.FileEntry(**entry) for entry in entries])


def _delete(attempt, session, request: p.DeleteRequest) -> p.DeleteAnswer:
    files.delete_path(session, request.path)
    return p.DeleteAnswer()


def _download(attempt, session, request: p.DownloadRequest) -> p.DownloadAnswer:
    data = files.download_archive(session, request.path, max_bytes=settings.BOLTZ_MAX_FILE_BYTES)
    return p.DownloadAnswer(data=data)


def _upload(attempt, session, request: p.UploadRequest) -> p.UploadAnswer:
    count = files.upload_archive(session, request.path, request.data)
    return p.UploadAnswer(path=request.path, files=count)


def _record(attempt: Attempt, session: SandboxSession, trees: AttemptTrees) -> None:
    """The changes so far, read out of the live sandbox and diffed on the worker."""
    trees.record(session)


def _diff(attempt, session, request: p.DiffRequest) -> p.DiffAnswer:
    attempt = _whole(attempt)
    with scratch_folder(attempt) as scratch:
        _record(attempt, session, AttemptTrees(attempt, scratch))
    attempt.refresh_from_db(fields=["diff", "diff_truncated", "diff_bytes"])
    return p.DiffAnswer(
        patch=attempt.diff, truncated=attempt.diff_truncated, bytes=attempt.diff_bytes
    )


def _check(attempt, session, request: p.CheckRequest) -> p.CheckAnswer:
    return p.CheckAnswer(check=_checked(attempt, session).pk)


def _checked(attempt, session) -> CheckResult:
    """The task's check on a clean copy of the changes so far, as the pipeline runs it."""
    attempt = _whole(attempt)
    # the check reads the whole attempt
    session = SandboxSession(attempt, session.sandbox, secrets=session.secrets)
    with scratch_folder(attempt) as scratch:
        runner = AttemptRunner(attempt, rechecking=True)
        runner.session, runner.trees = session, AttemptTrees(attempt, scratch)
        _record(attempt, session, runner.trees)
        return runner.check()  # in place: the sandbox is halted and started again first


# --- a pool environment's step -------------------------------------------------------------------
def _step(attempt_id: int, request: p.StepRequest) -> p.StepAnswer:
    """One action of a pool's environment, its parts in order: write files, apply a patch,
    run a command, submit (the check: its score is the reward and the episode terminates).
    A part that fails as the agent's own doing (a write refused, a patch that does not apply)
    stops the action there and is the observation; an infrastructure failure raises.

    The web process has taken the step (`step_number`, and `exec_number` for its command) and
    marked it on the timeline (`seq`: the next free place there) for every environment of the
    pool in one write; here only the action is done."""
    began = time.monotonic()
    action = request.action
    attempt = Attempt(pk=attempt_id, container_id=request.container)  # what the session reads
    if request.task:  # a task with a working folder or user of its own (a Harbor task's)
        attempt.task = Task(**request.task)
    session = SandboxSession(
        attempt, Sandbox(request.container), secrets=redaction.secrets_of(attempt)
    )
    session.timeline.expect(request.seq)
    observation: dict = {}
    reward, terminated, truncated = 0.0, False, False
    masked: dict = {"masked": False}
    left = request.episode_deadline - time.time()
    if left <= 0:
        observation["error"] = "the episode's time ran out before this step"
        truncated = True
    else:
        stopped = _write_and_patch(session, action, observation)
        if not stopped and action.run is not None:
            asked = EXEC_TIMEOUT if action.timeout is None else action.timeout
            run = p.ExecRequest(
                command=action.run, timeout=min(asked, max(left, 1.0)), number=request.exec_number
            )
            ran = _exec(attempt, session, run).to_wire()
            ran.pop("raw")  # the full output is on the attempt's page
            observation.update(ran)
        if not stopped and action.submit:
            try:
                result = _checked(attempt, session)
            except ChangesUnavailable as exc:  # as in the pipeline: the agent's, scored 0
                observation["error"] = f"changes unavailable: {exc.reason}"
                reward, terminated = 0.0, True
            else:
                observation["check"] = check_record(result)
                reward, terminated = result.as_reward, True
                if reward is None:  # the task's verifier broke: no reward, never 0
                    masked = {"masked": True, "failure_kind": "verifier_error"}
                    masked["error"] = result.summary
    if not terminated and (
        request.step_number >= request.max_steps or time.time() >= request.episode_deadline
    ):
        truncated = True
    if terminated or truncated:
        end_episode(attempt.pk, "terminated" if terminated else "truncated")
    return p.StepAnswer(
        step=request.step_number,
        observation=observation,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        info={
            "episode": attempt.pk,
            **masked,
            "duration": round(time.monotonic() - began, 3),
        },
    )


def _write_and_patch(session, action: p.StepAction, observation: dict) -> bool:
    """The action's writes and patch; True when one failed (the rest of the action is not
    done), with why in the observation."""
    written = []
    for path, text in (action.write or {}).items():
        path = posixpath.normpath(posixpath.join(session.workdir, path))
        try:
            files.write_file(session, path, text.encode("utf-8", errors="surrogateescape"))
        except FileOpError as exc:
            observation.update(written=written, write_error=exc.message)
            return True
        written.append(path)
    if written:
        observation["written"] = written
    if action.patch is not None:
        staged = f"/tmp/.boltz-patch-{time.monotonic_ns()}"
        session.sandbox.put_archive(
            "/", files.files_tar({staged.lstrip("/"): action.patch.encode()}, mode=0o600)
        )
        run = session.exec(
            "apply",
            [
                "/bin/sh",
                "-c",
                'git apply --whitespace=nowarn "$0"; s=$?; rm -f "$0"; exit $s',
                staged,
            ],
            timeout=PATCH_TIMEOUT,
            actor=Actor.AGENT,
            display="git apply (the step's patch)",
        )
        applied = run.result.exit_code == 0
        observation["patch"] = {"applied": applied, "output": run.text()}
        if not applied:
            return True
    return False


OPERATIONS = {
    p.ExecRequest: _exec,
    p.ReadRequest: _read,
    p.WriteRequest: _write,
    p.ListRequest: _list,
    p.DeleteRequest: _delete,
    p.DownloadRequest: _download,
    p.UploadRequest: _upload,
    p.DiffRequest: _diff,
    p.CheckRequest: _check,
}
