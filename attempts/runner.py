"""The step director: runs one attempt's stages in its sandbox and records every step.

start (container, repository, setup) -> work (the agent) -> end (every process of the agent's
ends) -> record (its changes, read out of the stopped sandbox and diffed on the worker) -> check
(in a fresh container holding the base with exactly those changes, or in place for tasks about
the container's own state) -> keep the sandbox.
Infrastructure faults end the attempt as `infra_error` with the reason; they are never the
agent's failure. Every command's output is streamed into the timeline and kept honestly.
"""

from __future__ import annotations

import contextlib
import io
import logging
import secrets
import shlex
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from . import agents, changes, repos, scoring
from .capture import StreamCapture
from .changes import ChangesUnavailable
from .errors import AttemptGone, AttemptStopped, InfrastructureError, SandboxGone, TaskInvalid
from .models import (
    DONE_STATUSES,
    Actor,
    Attempt,
    CheckResult,
    Event,
    EventKind,
    Outcome,
    SandboxState,
    Status,
    TestOutcome,
)
from .protected import Protection, protection_for, reset_plan
from .sandbox.runtime import ExecResult, Sandbox, SandboxSpec, remove_attempt_containers
from .storage import delete_tree
from .timeline import Timeline, clip
from .validation import refresh_validation
from .workspace import filter_workspace, sandbox_owned

log = logging.getLogger(__name__)

BOLTZ_DIR = "/tmp/boltz"
WITNESS_PLUGIN = (Path(__file__).parent / "sandbox" / "pytest_witness.py").read_bytes()
LIVE_FLUSH_BYTES = 4096
LIVE_FLUSH_SECONDS = 0.5
STOP_CHECK_SECONDS = 1.0
MAX_CHECK_FILE = 8 * 1024 * 1024

# Resets protected paths before a check, as the sandbox user (who owns every file the agent
# made): the lists are NUL-separated files Boltz wrote. Folders on the way are made writable
# first, so a folder the agent made read-only cannot keep a protected file in place; if a path
# still cannot be removed, the whole tree is made writable and the removal tried again. Then
# the check's own folders are made: new names, so `mkdir` fails if anything is in the way.
_RESET_SCRIPT = r"""
lists="$1"; shift
remove() { if [ -s "$lists/remove" ]; then xargs -0 -r rm -rf -- < "$lists/remove"; fi; }
chmod u+rwx /workspace 2>/dev/null
if [ -s "$lists/parents" ]; then xargs -0 -r chmod u+rwx -- < "$lists/parents" 2>/dev/null; fi
if [ -s "$lists/folders" ]; then xargs -0 -r chmod -R u+rwX -- < "$lists/folders" 2>/dev/null; fi
if ! remove 2>/dev/null; then
  chmod -R u+rwX /workspace 2>/dev/null
  remove || exit 1
fi
rm -rf -- "$lists"
for folder in "$@"; do mkdir -m 700 -- "$folder" || exit 1; done
"""


class CheckBlocked(Exception):
    """Something in the agent's tree kept the check from running as it should (a setup that
    fails on its changes, protected paths that cannot be reset): the check fails with this."""

    def __init__(self, summary: str, run: CommandRun):
        super().__init__(summary)
        self.summary = summary
        self.run = run


@dataclass(frozen=True)
class CheckFolders:
    """One check's folders, under names no agent can guess or prepare in advance."""

    token: str

    @classmethod
    def new(cls) -> CheckFolders:
        return cls(secrets.token_hex(8))

    @property
    def reports(self) -> str:  # $BOLTZ_CHECK_DIR: the check's reports and reward file
        return f"/tmp/boltz-check-{self.token}"

    @property
    def witness(self) -> str:  # what Boltz's pytest plugin writes
        return f"/tmp/boltz-witness-{self.token}"

    @property
    def home(self) -> str:  # an in-place check's HOME
        return f"/tmp/boltz-home-{self.token}"

    @property
    def plugin(self) -> str:  # Boltz's pytest plugin, owned by root
        return f"/tmp/boltz-plugin-{self.token}"

    @property
    def module(self) -> str:
        return f"boltz_witness_{self.token}"

    def plugin_tar(self) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            folder = tarfile.TarInfo(self.plugin.lstrip("/"))
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(folder)
            module = tarfile.TarInfo(f"{self.plugin.lstrip('/')}/{self.module}.py")
            module.size, module.mode = len(WITNESS_PLUGIN), 0o644
            tar.addfile(module, io.BytesIO(WITNESS_PLUGIN))
        return buffer.getvalue()


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


def memory_text(size: int) -> str:
    return f"{size / 2**30:g} GB" if size >= 2**30 else f"{size // 2**20} MB"


class AttemptRunner:
    def __init__(self, attempt: Attempt):
        self.attempt = attempt
        self.task = attempt.task
        self.timeline = Timeline(attempt.pk)
        self.sandbox: Sandbox | None = None
        self.timings: dict[str, float] = {}
        # Exec numbers continue from the timeline, so a re-check never reuses one.
        self._exec_count = Event.objects.filter(
            attempt_id=attempt.pk, kind=EventKind.EXEC, data__phase="start"
        ).count()
        self._last_stop_check = 0.0
        self.rechecking = False
        self.scratch: Path | None = None
        self.checked: tuple[Path, dict[str, str]] | None = None  # the checked tree, once built
        self.agent_oom = ""  # why the agent's step was cut short for memory, if it was
        self._base_files: dict[str, str] | None = None  # the base's files, once listed
        self.protection: Protection = protection_for(
            self.task.protected_paths, self.task.check_file_paths, self.task.check_removed_paths
        )

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
        if row["sandbox_deleted_at"] and not self.rechecking:
            raise AttemptStopped(
                f"its sandbox was deleted by {row['sandbox_deleted_by']} while the attempt ran"
            )

    def _status(self, status: str, message: str) -> None:
        self._stop_if_asked()
        self._set(status=status)
        self.timeline.add(EventKind.LIFECYCLE, status=status, message=message)

    def _storage_name(self, name: str) -> str:
        return f"attempts/{self.attempt.pk}/{name}"

    @contextlib.contextmanager
    def scratch_folder(self):
        """A folder on the worker for this run's files (the agent's tree, patches, archives)."""
        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"attempt-{self.attempt.pk}-", dir=settings.DATA_DIR))
        self.scratch = folder
        try:
            yield folder
        finally:
            self.scratch = None
            shutil.rmtree(folder, ignore_errors=True)

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
        sandbox: Sandbox | None = None,
    ) -> CommandRun:
        """Run a command in the sandbox (the attempt's own unless another is given) with
        events for its start, live output and end."""
        sandbox = sandbox or self.sandbox
        assert sandbox is not None
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
                result = sandbox.exec(
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
    def _spec(self, role: str) -> SandboxSpec:
        task = self.task
        return SandboxSpec(
            attempt_id=self.attempt.pk,
            image=task.image_name,
            cpus=task.cpus,
            memory_bytes=task.memory_bytes,
            pids_limit=task.pids_limit,
            network=task.network,
            environment={"BOLTZ_ATTEMPT": str(self.attempt.pk), "BOLTZ_TASK": task.slug},
            role=role,
        )

    def _setup(self, sandbox: Sandbox, step: str) -> CommandRun | None:
        if not self.task.setup_command.strip():
            return None
        return self.exec(
            step, self.task.setup_command, timeout=self.task.setup_timeout, sandbox=sandbox
        )

    def start(self) -> None:
        task = self.task
        self.timeline.add(
            EventKind.LIFECYCLE,
            status=Status.STARTING,
            host=settings.BOLTZ_HOST,
            message=f"creating a sandbox from {task.image_name}",
        )
        self.sandbox = Sandbox.create(self._spec("agent"))
        self._set(
            container_id=self.sandbox.id,
            sandbox_state=SandboxState.LIVE,
            image=task.image_name,
            base_commit=task.base_commit,
        )
        self._stop_if_asked()
        archive = self._workspace_archive()
        with archive.open("rb") as handle:
            self.sandbox.put_archive("/", handle)
        size = archive.stat().st_size
        self.sandbox.start()
        self.timeline.add(
            EventKind.LIFECYCLE,
            status=Status.STARTING,
            container=self.sandbox.id[:12],
            message=f"sandbox started with {task.repo_url} at "
            f"{task.base_commit[:12]} in /workspace ({size} bytes; history up to the base only)",
        )
        run = self._setup(self.sandbox, "setup")
        if run is not None and (run.result.timed_out or run.result.exit_code != 0):
            why = "timed out" if run.result.timed_out else f"exited {run.result.exit_code}"
            raise InfrastructureError(f"the task's setup command {why}")

    def _workspace_archive(self) -> Path:
        try:
            return repos.cached_workspace_archive(self.task.repo_url, self.task.base_commit)
        except TaskInvalid as exc:
            raise InfrastructureError(f"repository unavailable on this host: {exc}") from exc

    def _base_repository(self) -> Path:
        try:
            return repos.base_repository(self.task.repo_url, self.task.base_commit)
        except TaskInvalid as exc:
            raise InfrastructureError(f"repository unavailable on this host: {exc}") from exc

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
        ooms = self.sandbox.oom_kills()
        try:
            run = self.exec(
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
        except SandboxGone:
            # The sandbox stopped under the agent. Its init is out of the agent's reach, so
            # only memory can do that from inside; anything else came from outside.
            if not self.sandbox.stopped_by_oom():
                raise
            self._note_oom("the sandbox was killed during the agent's step")
            return None
        after = self.sandbox.oom_kills()
        if ooms is not None and after is not None and after > ooms:
            self._note_oom("a process of the agent's was killed")
        return run

    def _note_oom(self, what: str) -> None:
        self.agent_oom = f"{what}: out of memory ({memory_text(self.task.memory_bytes)} limit)"
        self.timeline.add(EventKind.ERROR, actor=Actor.AGENT, message=self.agent_oom)

    def end_agent(self) -> None:
        """End every process of the agent's before anything of its work is read."""
        self._status(
            Status.CHECKING, "ending every process of the agent's, then recording its changes"
        )
        self.sandbox.halt()

    def record_changes(self) -> None:
        """Read the agent's tree out of its stopped sandbox, diff it against the base on the
        worker, keep the diff, the tamper report and the checked tree's files."""
        task, scratch = self.task, self.scratch
        assert scratch is not None
        stream = self.sandbox.get_archive("/workspace")
        if stream is None:
            raise ChangesUnavailable("/workspace no longer exists in the sandbox")
        tree = changes.read_tree(
            stream,
            scratch / "agent",
            max_bytes=settings.BOLTZ_MAX_TREE_BYTES,
            max_files=settings.BOLTZ_MAX_TREE_FILES,
        )
        base_git = self._base_repository()
        recorded = changes.record(
            tree,
            base_git=base_git,
            base_commit=task.base_commit,
            scratch=scratch,
            protection=self.protection,
            max_patch_bytes=settings.BOLTZ_MAX_TREE_BYTES,
        )
        shutil.rmtree(tree.root, ignore_errors=True)  # what is kept is the patch
        limit = settings.BOLTZ_MAX_DIFF_BYTES
        with recorded.patch.open("rb") as handle:
            head = handle.read(limit)
            handle.seek(0)
            stored = default_storage.save(self._storage_name("changes.patch"), File(handle))
        self._set(
            diff=head.decode("utf-8", errors="replace"),
            diff_truncated=recorded.patch_bytes > limit,
            diff_bytes=recorded.patch_bytes,
            diff_file=stored,
            changes_state="recorded",
            commits=recorded.commits,
            tamper={"protected": recorded.protected[:1000], "reward_files": []},
        )
        self.timeline.add(
            EventKind.FILE,
            action="diff",
            files=recorded.files,
            bytes=recorded.patch_bytes,
            truncated=recorded.patch_bytes > limit,
            message=f"changes recorded on the worker: {recorded.files} file(s), "
            f"{recorded.patch_bytes} bytes of patch",
        )
        if recorded.protected:
            self.timeline.add(
                EventKind.ERROR,
                actor=Actor.AGENT,
                message=f"the agent changed {len(recorded.protected)} protected path(s); "
                "they are reset to the base before the check",
                protected=recorded.protected[:200],
            )
        self.checked = changes.checked_tree(
            base_git=base_git, base_commit=task.base_commit, patch=recorded.patch, scratch=scratch
        )
        self.snapshot_workspace()

    def _check_archive(self) -> Path:
        """The fresh container's /workspace: the base's .git and the checked tree."""
        assert self.scratch is not None and self.checked is not None
        return changes.check_archive(
            workspace_archive=self._workspace_archive(),
            checked=self.checked[0],
            dest=self.scratch / f"check-{secrets.token_hex(4)}.tar",
        )

    def snapshot_workspace(self) -> None:
        """Keep the checked tree's files (the base with the agent's changes) as
        workspace.tar.gz: exactly what changes.patch gives when applied to the base."""
        archive = self._check_archive()
        paths = set(self.checked[1])
        with archive.open("rb") as source, tempfile.TemporaryFile() as out:
            links = {p for p, meta in self.checked[1].items() if meta.startswith("120000 ")}
            copied, omitted = filter_workspace(
                source,
                out,
                keep=paths,
                max_bytes=settings.BOLTZ_MAX_WORKSPACE_BYTES,
                links=links,
            )
            out.seek(0)
            name = default_storage.save(self._storage_name("workspace.tar.gz"), File(out))
        archive.unlink()
        self._set(workspace_file=name, workspace_bytes=copied, workspace_omitted=omitted[:1000])
        self.timeline.add(
            EventKind.FILE, action="snapshot", files=len(paths), bytes=copied, omitted=len(omitted)
        )

    def _rebuild_checked(self) -> None:
        """For a re-check: the checked tree again, from the stored patch alone."""
        assert self.scratch is not None
        if self.attempt.changes_state != "recorded" or not self.attempt.diff_file:
            raise ChangesUnavailable("the attempt's changes were never recorded")
        patch = self.scratch / "changes.patch"
        with default_storage.open(self.attempt.diff_file, "rb") as source, patch.open("wb") as out:
            shutil.copyfileobj(source, out)
        self.checked = changes.checked_tree(
            base_git=self._base_repository(),
            base_commit=self.task.base_commit,
            patch=patch,
            scratch=self.scratch,
        )

    def _reset_protected(
        self, sandbox: Sandbox, entries: dict[str, str], folders: list[str]
    ) -> None:
        """Reset every protected path to the base, put the hidden check files over the tree,
        and make the check's folders. Raises CheckBlocked if the tree keeps that from working."""
        task = self.task
        base_git = self._base_repository()
        if self._base_files is None:
            self._base_files = changes.listing(
                {"GIT_DIR": str(base_git)}, self.scratch, tree_ish=task.base_commit
            )
        hidden = list(task.check_file_paths)
        removed = list(task.check_removed_paths)
        plan = reset_plan(
            self.protection, entries=entries, base=self._base_files, targets=[*hidden, *removed]
        )
        lists = f"/tmp/boltz-reset-{secrets.token_hex(8)}"

        def reset(remove: list[str], make: list[str], display: str) -> None:
            listed = {"remove": remove, "parents": plan.parents, "folders": plan.folders}
            sandbox.put_archive(
                "/", _tar({f"{lists[1:]}/{name}": _nul(paths) for name, paths in listed.items()})
            )
            run = self.exec(
                "reset",
                ["/bin/sh", "-c", _RESET_SCRIPT, "boltz-reset", lists, *make],
                timeout=120,
                live=False,
                sandbox=sandbox,
                display=display,
            )
            if run.result.timed_out or run.result.exit_code != 0:
                raise CheckBlocked(
                    f"protected paths could not be reset in the agent's tree: "
                    f"{clip(run.text().strip(), 300) or 'exit code ' + str(run.result.exit_code)}",
                    run,
                )

        reset(
            plan.remove + removed,
            folders,
            f"reset {len(plan.restore)} protected path(s) to the base, remove "
            f"{len(plan.remove)}, restore {len(hidden)} hidden check file(s)",
        )
        restore = changes.base_files(base_git, task.base_commit, plan.restore, self.scratch)
        if restore:
            sandbox.put_archive("/", restore)
        if task.check_files:
            sandbox.put_archive("/", bytes(task.check_files))
        if removed:
            reset(removed, [], f"remove {len(removed)} path(s) the check removes")
        self.timeline.add(
            EventKind.FILE,
            action="restore",
            paths=hidden[:200],
            count=len(hidden),
            protected_restored=len(plan.restore),
            removed=plan.remove[:200],
        )

    def check(self, *, requested_by: str = "") -> CheckResult:
        task = self.task
        if requested_by:
            self.timeline.reviewer(
                "recheck", requested_by, f"re-check of the same files by {requested_by}"
            )
        mode = "in_place" if task.check_mode == "in_place" else "fresh"
        try:
            if mode == "in_place":
                return self._check_in_place(requested_by)
            return self._check_fresh(requested_by)
        except CheckBlocked as exc:
            score = scoring.Score(False, 0.0, "exit_code", summary=exc.summary)
            return self._save_check(requested_by, mode=mode, run=exc.run, score=score)

    def _check_fresh(self, requested_by: str) -> CheckResult:
        task = self.task
        if self.checked is None:
            self._rebuild_checked()
        archive = self._check_archive()
        self.timeline.add(
            EventKind.LIFECYCLE,
            message="the check runs in a fresh container: the base with exactly the recorded "
            "changes applied",
            check_mode="fresh",
        )
        sandbox = Sandbox.create(self._spec("check"))
        try:
            with archive.open("rb") as handle:
                sandbox.put_archive("/", handle)
            sandbox.start()
            entries = changes.index_entries(self.checked[1])
            if task.setup_command.strip():
                self._fresh_setup(sandbox, entries, archive)
            archive.unlink()
            return self._run_check(sandbox, entries, requested_by, mode="fresh")
        finally:
            sandbox.remove()

    def _fresh_setup(self, sandbox: Sandbox, entries: dict[str, str], archive: Path) -> None:
        """Set the check's container up as the agent's was: on the base's protected paths.
        The setup may run the agent's code (its setup.py), so afterwards every process is
        ended and the recorded files are put back: what is checked is what was recorded."""
        self._reset_protected(sandbox, entries, [])
        setup = self._setup(sandbox, "check-setup")
        if setup is not None and (setup.result.timed_out or setup.result.exit_code != 0):
            why = "timed out" if setup.result.timed_out else f"exited {setup.result.exit_code}"
            raise CheckBlocked(f"the task's setup command {why} on the agent's changes", setup)
        sandbox.kill_all_processes()
        with archive.open("rb") as handle:
            sandbox.put_archive("/", handle)

    def _check_in_place(self, requested_by: str) -> CheckResult:
        self.timeline.add(
            EventKind.LIFECYCLE,
            message="the check runs in place, in the agent's container: every agent process "
            "ended, protected paths reset, a fresh HOME, no user site-packages",
            check_mode="in_place",
        )
        self.sandbox.halt()  # no process of the agent's, even on a re-check
        stream = self.sandbox.get_archive("/workspace")
        entries = changes.tree_entries(stream) if stream is not None else {}
        self.sandbox.start()
        return self._run_check(self.sandbox, entries, requested_by, mode="in_place")

    def _run_check(
        self, sandbox: Sandbox, entries: dict[str, str], requested_by: str, *, mode: str
    ) -> CheckResult:
        task = self.task
        folders = CheckFolders.new()
        made = [folders.reports, folders.witness]
        if mode == "in_place":
            made.append(folders.home)
        self._reset_protected(sandbox, entries, made)
        sandbox.put_archive("/", folders.plugin_tar())
        image_env = sandbox.image_environment()
        env = {
            "BOLTZ_CHECK_DIR": folders.reports,
            "BOLTZ_WITNESS_DIR": folders.witness,
            "PYTEST_ADDOPTS": " ".join(
                filter(None, [f"-p {folders.module}", image_env.get("PYTEST_ADDOPTS")])
            ),
            "PYTHONPATH": ":".join(filter(None, [folders.plugin, image_env.get("PYTHONPATH")])),
            "PYTHONNOUSERSITE": "1",
            # A check that runs git in /workspace runs none of the agent's hooks or monitors.
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "core.fsmonitor",
            "GIT_CONFIG_VALUE_0": "false",
            "GIT_CONFIG_KEY_1": "core.hooksPath",
            "GIT_CONFIG_VALUE_1": "/dev/null",
        }
        if mode == "in_place":
            env.update(
                HOME=folders.home,
                PYTHONUSERBASE=f"{folders.home}/.no-user-site",
                XDG_CONFIG_HOME=f"{folders.home}/.config",
            )
        ooms = sandbox.oom_kills()
        run = self.exec(
            "check",
            task.check_command,
            timeout=task.check_timeout,
            environment=env,
            sandbox=sandbox,
        )
        after = sandbox.oom_kills()
        files = sandbox.read_files(folders.reports, max_bytes=MAX_CHECK_FILE)
        witness, notes = [], []
        for name, data in sorted(
            sandbox.read_files(folders.witness, max_bytes=MAX_CHECK_FILE).items()
        ):
            if name.endswith(".json") and "/" not in name:
                try:
                    witness.append(scoring.parse_witness(data))
                except scoring.ScoringError as exc:
                    notes.append(str(exc))
        score = scoring.score_check(
            exit_code=run.result.exit_code,
            timed_out=run.result.timed_out,
            files=files,
            required=task.required_tests,
            reward_file=task.reward_file,
            witness=witness,
        )
        score.notes.extend(notes)
        if ooms is not None and after is not None and after > ooms and not score.passed:
            limit = memory_text(task.memory_bytes)
            score.summary = f"the check was killed: out of memory ({limit} limit); {score.summary}"
        return self._save_check(requested_by, mode=mode, run=run, score=score, files=files)

    def _save_check(
        self, requested_by: str, *, mode: str, run: CommandRun, score: scoring.Score, files=None
    ) -> CheckResult:
        junit = next((data for _, data in scoring.junit_files(files or {})), b"")
        with transaction.atomic():
            result = CheckResult.objects.create(
                attempt=self.attempt,
                passed=score.passed,
                score=score.score,
                source=score.source,
                mode=mode,
                summary=score.summary,
                problem=score.problem,
                ignored_reward_files=score.ignored_reward_files,
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
            if score.ignored_reward_files:
                tamper = dict(
                    Attempt.objects.filter(pk=self.attempt.pk)
                    .values_list("tamper", flat=True)
                    .first()
                    or {}
                )
                seen = tamper.get("reward_files", [])
                tamper["reward_files"] = sorted({*seen, *score.ignored_reward_files})
                self._set(tamper=tamper)
        self.timeline.add(
            EventKind.CHECK,
            flipped=flipped[:100],
            passed=score.passed,
            score=score.score,
            source=score.source,
            mode=mode,
            summary=score.summary,
            problem=score.problem,
            tests_passed=score.tests_passed,
            tests_total=score.tests_counted,
            notes=score.notes,
            ignored_reward_files=score.ignored_reward_files,
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
            with self.scratch_folder():
                self._run()
        except AttemptGone:
            log.info("attempt %s was deleted while it ran; cleaning up", self.attempt.pk)
            if self.sandbox is not None:
                self.sandbox.remove()
            with contextlib.suppress(InfrastructureError):
                remove_attempt_containers(self.attempt.pk)
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
            stage, mark = "record", time.monotonic()
            self.end_agent()
            self.record_changes()
            self.timings["record"] = round(time.monotonic() - mark, 3)
            stage, mark = "check", time.monotonic()
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
                elif not result.passed and (
                    result.problem
                    or result.summary.startswith(
                        ("the check was killed", "the task's setup", "protected paths")
                    )
                ):
                    reason = result.summary
                elif not result.passed and self.agent_oom:
                    reason = self.agent_oom
        except ChangesUnavailable as exc:
            # Something the agent left cannot be recorded: never "no changes", never a pass.
            outcome, score = Outcome.FAILED, 0.0
            reason = f"changes unavailable: {exc.reason}"
            with contextlib.suppress(AttemptGone):
                self._set(changes_state="unavailable", changes_error=exc.reason)
            self.timeline.add(EventKind.ERROR, message=reason)
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


def _nul(paths: list[str]) -> bytes:
    return b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in paths)


def attempt_budget(attempt: Attempt) -> float:
    """Seconds an attempt may take in all: every stage's limit plus room for Docker itself."""
    task = attempt.task
    setups = 1 if task.check_mode == "in_place" else 2  # a fresh check container is set up too
    return (
        setups * task.setup_timeout
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
    """Run the check again the way the attempt's own check ran (a fresh container from the
    recorded changes, or in place in the kept sandbox); the new result is kept beside the old."""
    attempt = Attempt.objects.select_related("task").filter(pk=attempt_id).first()
    if attempt is None or not attempt.container_id:
        return
    runner = AttemptRunner(attempt)
    runner.rechecking = True
    runner.sandbox = Sandbox(attempt.container_id)
    try:
        with runner.scratch_folder():
            runner.check(requested_by=by)
    except (InfrastructureError, AttemptStopped, ChangesUnavailable) as exc:
        reason = getattr(exc, "reason", str(exc))
        runner.timeline.add(
            EventKind.ERROR,
            message=f"re-check failed: {reason}",
            infrastructure=not isinstance(exc, ChangesUnavailable),
        )
    except AttemptGone:
        return
    except Exception as exc:  # a bug in Boltz: said on the timeline, never silent
        log.exception("re-check of attempt %s failed", attempt_id)
        runner.timeline.add(
            EventKind.ERROR,
            message=f"re-check failed: internal error in Boltz: {exc!r}",
            infrastructure=True,
        )
    finally:
        runner.keep_sandbox()
