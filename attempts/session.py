"""The sandbox session: one live sandbox of an attempt, as every caller drives it.

Exec (streamed into the timeline, output capped honestly, hard timeouts, cancellation), files
in and out, ending its processes, stopping it. Every call lands on the attempt's timeline. A
session knows nothing of Celery, views or an attempt's stages: the attempt director
(`runner.py`), the check (`checking.py`), re-check and the API's operations all drive one.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import F

from .capture import StreamCapture
from .errors import AttemptGone, AttemptStopped
from .models import Actor, Attempt, EventKind
from .sandbox.runtime import ExecResult, Sandbox
from .timeline import Timeline, clip
from .workspace import sandbox_owned

LIVE_FLUSH_BYTES = 4096
LIVE_FLUSH_SECONDS = 0.5
STOP_CHECK_SECONDS = 1.0


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


def files_tar(entries: dict[str, bytes], *, mode: int = 0o644) -> bytes:
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


def nul_list(paths: list[str]) -> bytes:
    """Paths as a NUL-separated list (for `xargs -0` in the sandbox)."""
    return b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in paths)


def next_exec_number(attempt_id: int) -> int:
    """The attempt's next exec number, counted in the database: every caller (the director, a
    re-check, the API) numbers from the same counter, and none reuses a number."""
    with transaction.atomic():
        if not Attempt.objects.filter(pk=attempt_id).update(exec_count=F("exec_count") + 1):
            raise AttemptGone(f"attempt {attempt_id} was deleted")
        return Attempt.objects.filter(pk=attempt_id).values_list("exec_count", flat=True).get()


class SandboxSession:
    """One sandbox (the attempt's own, or the fresh container its check runs in), with every
    call recorded on the attempt's timeline. `should_stop`, called about once a second while a
    command runs, raises AttemptStopped to end it (a reviewer's cancel)."""

    def __init__(
        self,
        attempt: Attempt,
        sandbox: Sandbox,
        *,
        should_stop: Callable[[], None] | None = None,
    ):
        self.attempt = attempt
        self.sandbox = sandbox
        self.timeline = Timeline(attempt.pk)
        self.should_stop = should_stop

    def storage_name(self, name: str) -> str:
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
        """Run a command with events for its start, live output and end. A string runs in
        /bin/sh; a list is argv."""
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else command
        shown = display or (command if isinstance(command, str) else shlex.join(command))
        number = next_exec_number(self.attempt.pk)
        base = {"step": step, "exec": number, "command": clip(shown)}
        self.timeline.add(EventKind.EXEC, actor=actor, phase="start", timeout=timeout, **base)
        head = settings.BOLTZ_OUTPUT_HEAD_BYTES if head_limit is None else head_limit
        tail = settings.BOLTZ_OUTPUT_TAIL_BYTES if tail_limit is None else tail_limit
        with tempfile.TemporaryFile() as raw_out, tempfile.TemporaryFile() as raw_err:
            captures = {
                stream: StreamCapture(
                    head_limit=head,
                    tail_limit=tail,
                    raw_file=raw,
                    raw_limit=settings.BOLTZ_MAX_RAW_OUTPUT_BYTES,
                )
                for stream, raw in (("stdout", raw_out), ("stderr", raw_err))
            }
            pending: dict[str, list[str]] = {"stdout": [], "stderr": []}
            pending_size = {"stdout": 0, "stderr": 0}
            clock = {"flushed": time.monotonic(), "asked": time.monotonic()}

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
                clock["flushed"] = time.monotonic()

            def on_output(stream: str, data: bytes) -> None:
                text = captures[stream].feed(data)
                if live and text:
                    pending[stream].append(text)
                    pending_size[stream] += len(text)
                    if pending_size[stream] >= LIVE_FLUSH_BYTES:
                        flush()

            def on_tick() -> None:
                now = time.monotonic()
                if live and now - clock["flushed"] >= LIVE_FLUSH_SECONDS:
                    flush()
                if self.should_stop and now - clock["asked"] >= STOP_CHECK_SECONDS:
                    clock["asked"] = now
                    self.should_stop()  # raises to end the command at once

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
                        self.storage_name(f"outputs/{number:03d}-{step}.{stream}"), File(handle)
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

    # --- files -----------------------------------------------------------------------------------
    def put_files(
        self,
        files: dict[str, bytes],
        *,
        mode: int = 0o644,
        actor: str = Actor.SYSTEM,
        action: str = "write",
    ) -> None:
        """Write files (absolute path -> bytes) owned by the sandbox user; each lands on the
        timeline."""
        self.sandbox.put_archive(
            "/", files_tar({path.lstrip("/"): data for path, data in files.items()}, mode=mode)
        )
        for path, data in files.items():
            self.timeline.add(
                EventKind.FILE, actor=actor, action=action, path=path, bytes=len(data)
            )

    def put_archive(self, data) -> None:
        """Copy a tar archive (bytes or a file) into the sandbox at /."""
        self.sandbox.put_archive("/", data)

    def read_files(self, path: str, *, max_bytes: int) -> dict[str, bytes]:
        return self.sandbox.read_files(path, max_bytes=max_bytes)

    def get_archive(self, path: str):
        return self.sandbox.get_archive(path)

    # --- its processes and its container ----------------------------------------------------
    def start(self) -> None:
        self.sandbox.start()

    def halt(self) -> None:
        """End every process in the sandbox; its files stay and can still be read."""
        self.sandbox.halt()

    def kill_all_processes(self) -> None:
        """End every process and start the sandbox again with only its init."""
        self.sandbox.kill_all_processes()

    def oom_kills(self) -> int | None:
        return self.sandbox.oom_kills()

    def stopped_by_oom(self) -> bool:
        return self.sandbox.stopped_by_oom()

    def image_environment(self) -> dict[str, str]:
        return self.sandbox.image_environment()

    def stop(self) -> None:
        """Stop and keep the sandbox for review (SandboxGone if it no longer exists)."""
        self.sandbox.stop()

    def remove(self) -> None:
        self.sandbox.remove()


def update_attempt(attempt: Attempt, **fields) -> None:
    """Write fields of an attempt (and the object in hand); AttemptGone if it was deleted."""
    if not Attempt.objects.filter(pk=attempt.pk).update(**fields):
        raise AttemptGone(f"attempt {attempt.pk} was deleted")
    for name, value in fields.items():
        setattr(attempt, name, value)
