"""The step director: runs one attempt's stages in its sandbox and records every step.

start (container, repository, setup) -> work (the agent) -> diff -> check -> keep the sandbox.
Infrastructure faults end the attempt as `infra_error` with the reason; they are never the
agent's failure. Every command's output is streamed into the timeline and kept honestly.
"""

from __future__ import annotations

import io
import logging
import shlex
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from . import agents, repos, scoring
from .capture import StreamCapture
from .errors import AttemptGone, AttemptStopped, InfrastructureError, SandboxGone, TaskInvalid
from .models import (
    DONE_STATUSES,
    Actor,
    Attempt,
    CheckResult,
    EventKind,
    Outcome,
    SandboxState,
    Status,
    TestOutcome,
)
from .sandbox.runtime import ExecResult, Sandbox, SandboxSpec
from .storage import delete_tree
from .timeline import Timeline, clip
from .validation import refresh_validation
from .workspace import ChunkReader, filter_workspace, sandbox_owned

log = logging.getLogger(__name__)

CHECK_DIR = "/tmp/boltz-check"
BOLTZ_DIR = "/tmp/boltz"
LIVE_FLUSH_BYTES = 4096
LIVE_FLUSH_SECONDS = 0.5
STOP_CHECK_SECONDS = 1.0
MAX_CHECK_FILE = 8 * 1024 * 1024

_DIFF_SCRIPT = r"""
set -e
GIT_INDEX_FILE="/tmp/.boltz-diff-index.$$"
export GIT_INDEX_FILE
trap 'rm -f "$GIT_INDEX_FILE"' EXIT
git -c core.hooksPath=/dev/null -c core.fsmonitor=false read-tree "$1"
git -c core.hooksPath=/dev/null -c core.fsmonitor=false add --all
git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.quotepath=false \
    -c diff.noprefix=false -c diff.external= diff --cached --binary --no-color --no-ext-diff -M "$1"
rm -rf /tmp/.boltz-meta && mkdir -p /tmp/.boltz-meta
git ls-files -z > /tmp/.boltz-meta/files
git -c core.hooksPath=/dev/null log -z --max-count=200 --format='%H%x09%an%x09%s' "$1"..HEAD \
    > /tmp/.boltz-meta/commits 2>/dev/null || true
"""

_CLEAR_FOR_CHECK = r"""
for p in "$@"; do
  d="$p"
  while [ "$d" != "." ] && [ "$d" != "/" ]; do
    if [ -L "$d" ]; then rm -f -- "$d"; fi
    d=$(dirname -- "$d")
  done
done
rm -rf -- "$@"
rm -rf -- "$BOLTZ_CHECK_DIR"
mkdir -p -- "$BOLTZ_CHECK_DIR"
"""


@dataclass
class CommandRun:
    result: ExecResult
    stdout: StreamCapture
    stderr: StreamCapture
    raw: dict[str, str]  # stream -> storage name of the full raw bytes

    def text(self) -> str:
        out, err = self.stdout.text(), self.stderr.text()
        return out + (("\n" if out and not out.endswith("\n") else "") + err if err else "")

    @property
    def truncated(self) -> bool:
        return self.stdout.truncated or self.stderr.truncated


def _tar(entries: dict[str, bytes], *, mode: int = 0o644) -> bytes:
    """A tar of files (path -> bytes) owned by the sandbox user, with their parent folders."""
    buffer = io.BytesIO()
    folders: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in entries.items():
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folder = "/".join(parts[:i])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(sandbox_owned(info))
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(sandbox_owned(info), io.BytesIO(data))
    return buffer.getvalue()


class AttemptRunner:
    def __init__(self, attempt: Attempt):
        self.attempt = attempt
        self.task = attempt.task
        self.timeline = Timeline(attempt.pk)
        self.sandbox: Sandbox | None = None
        self.timings: dict[str, float] = {}
        self._exec_count = 0
        self._last_stop_check = 0.0
        self.rechecking = False

    # --- bookkeeping -------------------------------------------------------------------------
    def _set(self, **fields) -> None:
        if not Attempt.objects.filter(pk=self.attempt.pk).update(**fields):
            raise AttemptGone(f"attempt {self.attempt.pk} was deleted")
        for name, value in fields.items():
            setattr(self.attempt, name, value)

    def _stop_if_asked(self) -> None:
        """Between steps and while commands run: has a reviewer cancelled this attempt, or
        deleted its sandbox, meanwhile?"""
        self._last_stop_check = time.monotonic()
        row = (
            Attempt.objects.filter(pk=self.attempt.pk)
            .values(
                "sandbox_deleted_at",
                "sandbox_deleted_by",
                "cancel_requested_by",
                "cancel_requested_at",
            )
            .first()
        )
        if row is None:
            raise AttemptGone(f"attempt {self.attempt.pk} was deleted")
        if row["cancel_requested_at"] and not self.rechecking:
            raise AttemptStopped(f"cancelled by {row['cancel_requested_by']}")
        if row["sandbox_deleted_at"]:
            raise AttemptStopped(
                f"its sandbox was deleted by {row['sandbox_deleted_by']} while the attempt ran"
            )

    def _status(self, status: str, message: str) -> None:
        self._stop_if_asked()
        self._set(status=status)
        self.timeline.add(EventKind.LIFECYCLE, status=status, message=message)

    def _storage_name(self, name: str) -> str:
        return f"attempts/{self.attempt.pk}/{name}"

    # --- commands ------------------------------------------------------------------------------
    def exec(
        self,
        step: str,
        command: list[str] | str,
        *,
        timeout: float,
        actor: str = Actor.SYSTEM,
        environment: dict[str, str] | None = None,
        live: bool = True,
        head_limit: int | None = None,
        tail_limit: int | None = None,
        display: str | None = None,
    ) -> CommandRun:
        """Run a command in the sandbox with events for its start, live output and end."""
        assert self.sandbox is not None
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else command
        shown = display or (command if isinstance(command, str) else shlex.join(command))
        self._exec_count += 1
        number = self._exec_count
        base = {"step": step, "exec": number, "command": clip(shown)}
        self.timeline.add(EventKind.EXEC, actor=actor, phase="start", timeout=timeout, **base)
        head = settings.BOLTZ_OUTPUT_HEAD_BYTES if head_limit is None else head_limit
        tail = settings.BOLTZ_OUTPUT_TAIL_BYTES if tail_limit is None else tail_limit
        with tempfile.TemporaryFile() as raw_out, tempfile.TemporaryFile() as raw_err:
            captures = {
                "stdout": StreamCapture(
                    head_limit=head,
                    tail_limit=tail,
                    raw_file=raw_out,
                    raw_limit=settings.BOLTZ_MAX_RAW_OUTPUT_BYTES,
                ),
                "stderr": StreamCapture(
                    head_limit=head,
                    tail_limit=tail,
                    raw_file=raw_err,
                    raw_limit=settings.BOLTZ_MAX_RAW_OUTPUT_BYTES,
                ),
            }
            pending = {"stdout": [], "stderr": []}
            pending_size = {"stdout": 0, "stderr": 0}
            last_flush = [time.monotonic()]

            def flush() -> None:
                for stream, parts in pending.items():
                    if parts:
                        self.timeline.add(
                            EventKind.OUTPUT,
                            actor=actor,
                            exec=number,
                            stream=stream,
                            text="".join(parts),
                        )
                        parts.clear()
                        pending_size[stream] = 0
                last_flush[0] = time.monotonic()

            def on_output(stream: str, data: bytes) -> None:
                text = captures[stream].feed(data)
                if live and text:
                    pending[stream].append(text)
                    pending_size[stream] += len(text)
                    if pending_size[stream] >= LIVE_FLUSH_BYTES:
                        flush()

            def on_tick() -> None:
                if live and time.monotonic() - last_flush[0] >= LIVE_FLUSH_SECONDS:
                    flush()
                if time.monotonic() - self._last_stop_check >= STOP_CHECK_SECONDS:
                    self._stop_if_asked()  # raises to end the command at once

            began = time.monotonic()
            stopped = None
            try:
                result = self.sandbox.exec(
                    argv,
                    timeout=timeout,
                    on_output=on_output,
                    on_tick=on_tick,
                    environment=environment,
                )
            except AttemptStopped as exc:
                # Cancelled mid-command: the output so far and the end still belong in the record.
                stopped = exc
                result = ExecResult(None, False, time.monotonic() - began)
            if live:
                flush()
            raw_names = {}
            for stream, handle in (("stdout", raw_out), ("stderr", raw_err)):
                if captures[stream].total_bytes:
                    handle.seek(0)
                    raw_names[stream] = default_storage.save(
                        self._storage_name(f"outputs/{number:03d}-{step}.{stream}"), File(handle)
                    )
        run = CommandRun(result, captures["stdout"], captures["stderr"], raw_names)
        self.timeline.add(
            EventKind.EXEC,
            actor=actor,
            phase="end",
            **base,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            killed_by_host=result.killed_by_host,
            stopped=stopped.reason if stopped else "",
            duration=round(result.duration, 3),
            stdout={**run.stdout.summary(), "raw": raw_names.get("stdout", "")},
            stderr={**run.stderr.summary(), "raw": raw_names.get("stderr", "")},
        )
        if stopped is not None:
            raise stopped
        return run

    # --- stages ------------------------------------------------------------------------------
    def start(self) -> None:
        task = self.task
        self.timeline.add(
            EventKind.LIFECYCLE,
            status=Status.STARTING,
            host=settings.BOLTZ_HOST,
            message=f"creating a sandbox from {task.image_name}",
        )
        self.sandbox = Sandbox.create(
            SandboxSpec(
                attempt_id=self.attempt.pk,
                image=task.image_name,
                cpus=task.cpus,
                memory_bytes=task.memory_bytes,
                pids_limit=task.pids_limit,
                network=task.network,
                environment={"BOLTZ_ATTEMPT": str(self.attempt.pk), "BOLTZ_TASK": task.slug},
            )
        )
        self._set(
            container_id=self.sandbox.id,
            sandbox_state=SandboxState.LIVE,
            image=task.image_name,
            base_commit=task.base_commit,
        )
        self._stop_if_asked()
        try:
            archive = repos.cached_workspace_archive(task.repo_url, task.base_commit)
        except TaskInvalid as exc:
            raise InfrastructureError(f"repository unavailable on this host: {exc}") from exc
        with archive.open("rb") as handle:
            self.sandbox.put_archive("/", handle)
        size = archive.stat().st_size
        self.sandbox.start()
        self.timeline.add(
            EventKind.LIFECYCLE,
            status=Status.STARTING,
            container=self.sandbox.id[:12],
            message=f"sandbox started with {task.repo_url} at "
            f"{task.base_commit[:12]} in /workspace ({size} bytes)",
        )
        if task.setup_command.strip():
            run = self.exec("setup", task.setup_command, timeout=task.setup_timeout)
            if run.result.timed_out or run.result.exit_code != 0:
                why = "timed out" if run.result.timed_out else f"exited {run.result.exit_code}"
                raise InfrastructureError(f"the task's setup command {why}")

    def work(self) -> CommandRun | None:
        plan = agents.plan_for(self.attempt)
        self._status(Status.RUNNING, f"agent {plan.description}")
        instruction = self.task.instruction
        files = {
            f"{agents.AGENT_DIR.lstrip('/')}/{name}": data for name, data in plan.files.items()
        }
        files[f"{BOLTZ_DIR.lstrip('/')}/instruction.md"] = instruction.encode()
        self.sandbox.put_archive("/", _tar(files, mode=0o755))
        for name in plan.files:
            self.timeline.add(
                EventKind.FILE,
                actor=Actor.AGENT,
                action="upload",
                path=f"{agents.AGENT_DIR}/{name}",
                bytes=len(plan.files[name]),
            )
        if plan.command is None:
            return None
        return self.exec(
            "agent",
            plan.command,
            timeout=self.task.agent_timeout,
            actor=Actor.AGENT,
            environment={
                **(self.attempt.agent_env or {}),
                "BOLTZ_INSTRUCTION": instruction,
                "BOLTZ_AGENT_DIR": agents.AGENT_DIR,
            },
        )

    def store_diff(self) -> None:
        limit = settings.BOLTZ_MAX_DIFF_BYTES
        run = self.exec(
            "diff",
            ["/bin/sh", "-c", _DIFF_SCRIPT, "boltz-diff", self.task.base_commit],
            timeout=300,
            live=False,
            head_limit=limit,
            tail_limit=0,
            display=f"git diff --binary -M {self.task.base_commit[:12]} (own index)",
        )
        if run.result.exit_code != 0:
            self.timeline.add(
                EventKind.ERROR,
                message="the diff could not be computed",
                detail=clip(run.stderr.text(), 4000),
            )
            return
        raw = run.stdout.head_text()
        self._set(
            diff=raw,
            diff_truncated=run.stdout.truncated,
            diff_bytes=run.stdout.total_bytes,
            diff_file=run.raw.get("stdout", ""),
        )
        files = raw.count("\ndiff --git ") + (1 if raw.startswith("diff --git ") else 0)
        self.timeline.add(
            EventKind.FILE,
            action="diff",
            files=files,
            bytes=run.stdout.total_bytes,
            truncated=run.stdout.truncated,
        )
        self.snapshot_workspace()

    def snapshot_workspace(self) -> None:
        """Keep the agent's final files (those the diff covers) as workspace.tar.gz."""
        meta = self.sandbox.read_files("/tmp/.boltz-meta", max_bytes=64 * 1024 * 1024)
        names = meta.get("files", b"")
        keep = {n.decode("utf-8", errors="surrogateescape") for n in names.split(b"\0") if n}
        stream = self.sandbox.get_archive("/workspace")
        if stream is None:
            return
        with tempfile.TemporaryFile() as out:
            copied, omitted = filter_workspace(
                io.BufferedReader(ChunkReader(stream), buffer_size=1024 * 1024),
                out,
                keep=keep,
                max_bytes=settings.BOLTZ_MAX_WORKSPACE_BYTES,
            )
            out.seek(0)
            name = default_storage.save(self._storage_name("workspace.tar.gz"), File(out))
        commits = []
        for raw in meta.get("commits", b"")[: 1 << 20].split(b"\0"):
            parts = raw.decode("utf-8", errors="replace").strip("\n").split("\t", 2)
            if len(parts) == 3:
                commits.append(
                    {"id": parts[0], "author": parts[1][:200], "subject": parts[2][:500]}
                )
        self._set(
            workspace_file=name,
            workspace_bytes=copied,
            workspace_omitted=omitted[:1000],
            commits=commits,
        )
        self.timeline.add(
            EventKind.FILE, action="snapshot", files=len(keep), bytes=copied, omitted=len(omitted)
        )

    def check(self, *, requested_by: str = "") -> CheckResult:
        task = self.task
        if requested_by:
            self.timeline.reviewer(
                "recheck", requested_by, f"re-check of the same files by {requested_by}"
            )
        else:
            self._status(
                Status.CHECKING, "ending the agent's processes, restoring hidden check files"
            )
        # No process of the agent's may outlive its stage and touch the files under check.
        self.sandbox.kill_all_processes()
        env = {"BOLTZ_CHECK_DIR": CHECK_DIR}
        paths = list(task.check_file_paths)
        self.exec(
            "restore",
            ["/bin/sh", "-c", _CLEAR_FOR_CHECK, "boltz-clear", *paths],
            timeout=120,
            live=False,
            environment=env,
            display=f"clear {len(paths)} hidden check path(s) and {CHECK_DIR}",
        )
        if task.check_files:
            self.sandbox.put_archive("/", bytes(task.check_files))
        self.timeline.add(EventKind.FILE, action="restore", paths=paths[:200], count=len(paths))
        run = self.exec("check", task.check_command, timeout=task.check_timeout, environment=env)
        files = self.sandbox.read_files(CHECK_DIR, max_bytes=MAX_CHECK_FILE)
        score = scoring.score_check(
            exit_code=run.result.exit_code,
            timed_out=run.result.timed_out,
            files=files,
            required=task.required_tests,
        )
        junit = next((data for _, data in scoring.junit_files(files)), b"")
        with transaction.atomic():
            result = CheckResult.objects.create(
                attempt=self.attempt,
                passed=score.passed,
                score=score.score,
                source=score.source,
                exit_code=run.result.exit_code,
                timed_out=run.result.timed_out,
                duration=run.result.duration,
                output=run.text(),
                output_truncated=run.truncated,
                junit_xml=junit.decode("utf-8", errors="replace"),
                reward=score.reward,
                tests_total=score.tests_counted,
                tests_passed=score.tests_passed,
                requested_by=requested_by,
            )
            TestOutcome.objects.bulk_create(
                TestOutcome(
                    check_result=result,
                    name=t.name,
                    outcome=t.outcome,
                    duration=t.duration,
                    message=t.message,
                )
                for t in score.tests
            )
            flipped = mark_flaky(result) if requested_by else []
        self.timeline.add(
            EventKind.CHECK,
            flipped=flipped[:100],
            passed=score.passed,
            score=score.score,
            source=score.source,
            tests_passed=score.tests_passed,
            tests_total=score.tests_counted,
            notes=score.notes,
            timed_out=run.result.timed_out,
            check=result.pk,
        )
        return result

    def keep_sandbox(self) -> None:
        if self.sandbox is None:
            return
        row = Attempt.objects.filter(pk=self.attempt.pk).values("sandbox_deleted_at").first()
        if row is None or row["sandbox_deleted_at"]:
            self.sandbox.remove()
            if row is not None:
                self._set(sandbox_state=SandboxState.DELETED)
            return
        try:
            self.sandbox.stop()
            self._set(sandbox_state=SandboxState.STOPPED)
            self.timeline.add(EventKind.LIFECYCLE, message="sandbox stopped and kept for review")
        except SandboxGone:
            self._set(sandbox_state=SandboxState.DELETED)
        except InfrastructureError as exc:
            self.timeline.add(EventKind.ERROR, message=f"could not stop the sandbox: {exc.reason}")

    # --- the whole attempt ----------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except AttemptGone:
            log.info("attempt %s was deleted while it ran; cleaning up", self.attempt.pk)
            if self.sandbox is not None:
                self.sandbox.remove()
            delete_tree(self._storage_name(""))
        except Exception as exc:
            # Even the bookkeeping failed: never leave the attempt looking alive.
            log.exception("attempt %s could not be finished normally", self.attempt.pk)
            Attempt.objects.filter(pk=self.attempt.pk).exclude(status__in=DONE_STATUSES).update(
                status=Status.FINISHED,
                outcome=Outcome.INFRA_ERROR,
                finished_at=timezone.now(),
                failure_reason=f"internal error in Boltz while finishing: {exc!r}",
            )
            raise

    def _run(self) -> None:
        began = time.monotonic()
        outcome, reason, score = Outcome.INFRA_ERROR, "", None
        stage = "start"
        try:
            mark = time.monotonic()
            self.start()
            self.timings["start"] = round(time.monotonic() - mark, 3)
            stage, mark = "work", time.monotonic()
            agent = self.work()
            self.timings["work"] = round(time.monotonic() - mark, 3)
            stage, mark = "diff", time.monotonic()
            self.store_diff()
            stage = "check"
            result = self.check()
            self.timings["check"] = round(time.monotonic() - mark, 3)
            score = result.score
            if agent is not None and agent.result.timed_out:
                outcome = Outcome.AGENT_TIMEOUT
                reason = f"the agent ran past its {self.task.agent_timeout:g}s limit and was killed"
            else:
                outcome = Outcome.PASSED if result.passed else Outcome.FAILED
                if result.timed_out:
                    reason = f"the check ran past its {self.task.check_timeout:g}s limit"
        except AttemptStopped as exc:
            outcome, reason = Outcome.CANCELLED, exc.reason
        except InfrastructureError as exc:
            reason = f"{stage}: {exc.reason}"
            stopped = self._stopped_reason()
            if stopped:  # the container vanished because a reviewer deleted it
                outcome, reason = Outcome.CANCELLED, stopped
        except TaskInvalid as exc:
            reason = f"{stage}: task cannot run: {exc}"
        except SoftTimeLimitExceeded:
            reason = f"{stage}: the worker's time limit for this attempt ran out"
        except AttemptGone:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in Boltz is never the agent's failure
            log.exception("attempt %s crashed in %s", self.attempt.pk, stage)
            reason = f"{stage}: internal error in Boltz: {exc!r}"
        finally:
            self.keep_sandbox()
        if outcome == Outcome.INFRA_ERROR:
            self.timeline.add(EventKind.ERROR, message=reason, infrastructure=True)
        self.timings["total"] = round(time.monotonic() - began, 3)
        status = Status.CANCELLED if outcome == Outcome.CANCELLED else Status.FINISHED
        with transaction.atomic():  # whoever sees the final status also sees its event
            self._set(
                status=status,
                outcome=outcome,
                failure_reason=reason,
                score=score,
                finished_at=timezone.now(),
                timings=self.timings,
            )
            self.timeline.add(
                EventKind.LIFECYCLE,
                status=status,
                outcome=outcome,
                score=score,
                reason=reason,
                message=f"{status}: {outcome}",
            )
        refresh_validation(self.task.pk)

    def _stopped_reason(self) -> str:
        try:
            self._stop_if_asked()
        except AttemptStopped as exc:
            return exc.reason
        return ""


def attempt_budget(attempt: Attempt) -> float:
    """Seconds an attempt may take in all: every stage's limit plus room for Docker itself."""
    task = attempt.task
    return (
        task.setup_timeout
        + task.agent_timeout
        + task.check_timeout
        + settings.BOLTZ_DEADLINE_MARGIN
    )


def claim(attempt_id: int, *, host: str) -> bool:
    """Take a queued attempt for this worker. False if someone else did (a redelivery)."""
    now = timezone.now()
    attempt = Attempt.objects.select_related("task").filter(pk=attempt_id).first()
    if attempt is None:
        return False
    deadline = now + timedelta(seconds=attempt_budget(attempt))
    return (
        Attempt.objects.filter(pk=attempt_id, status=Status.QUEUED).update(
            status=Status.STARTING, host=host, started_at=now, deadline_at=deadline
        )
        == 1
    )


def run_attempt(attempt_id: int, *, host: str) -> bool:
    """Claim and run one attempt; returns False when there was nothing to do."""
    if not claim(attempt_id, host=host):
        log.info("attempt %s is not queued any more; this delivery does nothing", attempt_id)
        return False
    attempt = Attempt.objects.select_related("task").get(pk=attempt_id)
    AttemptRunner(attempt).run()
    return True


def mark_infra_error(attempt_id: int, reason: str, *, expected_status: str = Status.QUEUED) -> bool:
    """End an attempt that no worker is running (still `expected_status`) as an
    infrastructure error with `reason`. A compare-and-set: False if its status moved on."""
    with transaction.atomic():  # the final status and its events land together
        updated = Attempt.objects.filter(pk=attempt_id, status=expected_status).update(
            status=Status.FINISHED,
            outcome=Outcome.INFRA_ERROR,
            failure_reason=reason,
            finished_at=timezone.now(),
        )
        if updated:
            timeline = Timeline(attempt_id)
            timeline.add(EventKind.ERROR, message=reason, infrastructure=True)
            timeline.add(
                EventKind.LIFECYCLE,
                status=Status.FINISHED,
                outcome=Outcome.INFRA_ERROR,
                reason=reason,
                message=f"finished: {Outcome.INFRA_ERROR}",
            )
    if updated:
        task_id = Attempt.objects.filter(pk=attempt_id).values_list("task_id", flat=True).first()
        if task_id:
            refresh_validation(task_id)
    return bool(updated)


def mark_flaky(result: CheckResult) -> list[str]:
    """Compare a re-check with the checks before it on the same files: flag the tests whose
    outcome differs (on both sides) and the check whose result differs. Returns the names."""
    earlier = CheckResult.objects.filter(attempt_id=result.attempt_id, pk__lt=result.pk)
    if not earlier.exists():
        return []
    seen: dict[str, set[str]] = {}
    for name, outcome in TestOutcome.objects.filter(
        check_result__attempt_id=result.attempt_id
    ).values_list("name", "outcome"):
        seen.setdefault(name, set()).add(outcome)
    flipped = sorted(name for name, outcomes in seen.items() if len(outcomes) > 1)
    if flipped:
        TestOutcome.objects.filter(
            check_result__attempt_id=result.attempt_id, name__in=flipped
        ).update(flaky=True)
    changed = bool(flipped) or earlier.exclude(passed=result.passed).exists()
    if changed:
        CheckResult.objects.filter(pk=result.pk).update(outcome_changed=True)
        result.outcome_changed = True
    return flipped


def recheck_attempt(attempt_id: int, *, by: str) -> None:
    """Run the check again on the kept sandbox's files; the new result is kept beside the old."""
    attempt = Attempt.objects.select_related("task").filter(pk=attempt_id).first()
    if attempt is None or not attempt.container_id:
        return
    runner = AttemptRunner(attempt)
    runner.rechecking = True
    runner.sandbox = Sandbox(attempt.container_id)
    try:
        runner.check(requested_by=by)  # its first step starts the stopped container
    except (InfrastructureError, AttemptStopped) as exc:
        reason = getattr(exc, "reason", str(exc))
        runner.timeline.add(
            EventKind.ERROR, message=f"re-check failed: {reason}", infrastructure=True
        )
    except AttemptGone:
        return
    finally:
        runner.keep_sandbox()
