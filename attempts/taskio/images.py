"""Task images built from a Dockerfile (a Harbor task's environment/, or a Boltz task folder's).

The build context is packed once, at import, with its `FROM` lines mapped to local images
(these hosts reach no registry): `--base-image FROM=LOCAL` or BOLTZ_BASE_IMAGES, `*` for every
other base. Its tag is a hash of the packed context, so the same context is built once per
host, whichever tasks share it, and a changed Dockerfile gets a new image. The worker builds it
(at import on the importing host, or before the first attempt on any other), one build per
host at a time, with the build's lines streamed to a progress callback and kept in the task's
build log. A build that fails refuses the task, or ends its attempts, with the build's last
lines. Worker-side: it drives Docker.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from attempts.core.errors import ImageBuildFailed, TaskInvalid
from attempts.models import Task
from attempts.run.docker import runtime

REPOSITORY = "boltz-task"
DOCKERFILE = "Dockerfile"
MAX_CONTEXT_BYTES = 256 * 1024 * 1024
LOG_KEPT_BYTES = 64 * 1024
TAIL_LINES = 15
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


def parse_mapping(entries: list[str] | str) -> dict[str, str]:
    """`FROM=LOCAL` pairs (a list, or one comma-separated string) as a dict; `*` maps every
    base not named. TaskInvalid names a pair without `=`."""
    if isinstance(entries, str):
        entries = [e for e in entries.split(",") if e.strip()]
    mapping = {}
    for entry in entries:
        source, sep, local = entry.strip().partition("=")
        if not sep or not source.strip() or not local.strip():
            raise TaskInvalid("base-image", f"{entry!r}: give FROM=LOCAL, e.g. python:3.12=my:py")
        mapping[source.strip()] = local.strip()
    return mapping


def base_mapping(extra: list[str] | None = None) -> dict[str, str]:
    """The installation's mapping (BOLTZ_BASE_IMAGES) with the command line's over it."""
    return {**parse_mapping(settings.BOLTZ_BASE_IMAGES), **parse_mapping(extra or [])}


def rewrite_from(dockerfile: str, mapping: dict[str, str]) -> tuple[str, list[str]]:
    """The Dockerfile with its FROM lines mapped to local images, and what was mapped. A
    stage name (`FROM base AS x` then `FROM x`) is never mapped. A mapped base runs as root
    after it (`USER root`), as the registry images tasks start from do, whatever user the
    local stand-in was made with."""
    stages: set[str] = set()
    out, notes = [], []
    for line in dockerfile.splitlines():
        found = _FROM.match(line)
        if not found:
            out.append(line)
            continue
        prefix, flags, image, rest = found.groups()
        alias = re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE)
        local = None if image in stages else mapping.get(image, mapping.get("*"))
        if alias:
            stages.add(alias.group(1))
        if local is None or local == image:
            out.append(line)
            continue
        out.append(f"{prefix}{flags}{local}{rest}")
        out.append("USER root")
        notes.append(f"FROM {image} -> {local}")
    return "\n".join(out) + "\n", notes


def pack_context(folder: Path, *, mapping: dict[str, str]) -> tuple[bytes, list[str]]:
    """The build context of `folder` (a Dockerfile at its top) as a gzipped tar that is the
    same bytes for the same files, with FROM mapped; and the notes of what was mapped."""
    dockerfile = folder / DOCKERFILE
    if not dockerfile.is_file():
        raise TaskInvalid("environment", f"{folder} has no {DOCKERFILE}")
    text, notes = rewrite_from(dockerfile.read_text(errors="surrogateescape"), mapping)
    raw = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if rel == DOCKERFILE:
                data = text.encode("utf-8", errors="surrogateescape")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif info.isfile():
                total += info.size
                if total > MAX_CONTEXT_BYTES:
                    raise TaskInvalid("environment", "the build context is over 256 MB")
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            elif info.isdir() or info.issym():
                tar.addfile(info)
            else:
                raise TaskInvalid("environment", f"{rel} is not a file, folder or link")
    packed = gzip.compress(raw.getvalue(), mtime=0)
    return packed, notes


def context_tag(context: bytes) -> str:
    return f"{REPOSITORY}:{hashlib.sha256(context).hexdigest()[:20]}"


class _BuildLog:
    """The lines of one build: streamed to `progress`, the last of them kept."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.progress = progress
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        line = line.rstrip()
        if not line:
            return
        self.lines.append(line)
        if self.progress:
            self.progress(line)

    def text(self) -> str:
        text = "\n".join(self.lines)
        return text[-LOG_KEPT_BYTES:]

    def tail(self) -> str:
        return "\n".join(self.lines[-TAIL_LINES:])


def build(context: bytes, *, progress: Callable[[str], None] | None = None) -> tuple[str, str]:
    """Build `context` on this host unless its image is here already; (tag, build log). One
    build of a context at a time per host: a second caller waits, then finds the image.
    ImageBuildFailed carries the build's last lines."""
    tag = context_tag(context)
    if runtime.image_exists(tag):
        return tag, ""
    locks = settings.DATA_DIR / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"build-{tag.split(':')[1]}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if runtime.image_exists(tag):
            return tag, ""
        log = _BuildLog(progress)
        try:
            runtime.build_image(
                context, tag=tag, labels={"boltz.context": tag.split(":")[1]}, on_line=log
            )
        except ImageBuildFailed as exc:
            raise ImageBuildFailed(exc.reason, log.tail()) from None
        return tag, log.text()


def failure_text(exc: ImageBuildFailed) -> str:
    return f"the image build failed: {exc.reason}" + (
        f"; its last lines:\n{exc.tail}" if exc.tail else ""
    )


def ensure_task_image(task: Task, *, progress: Callable[[str], None] | None = None) -> bool:
    """Make sure this host has the task's image, building it from the task's Dockerfile when
    it has one; True when it was built now. A failed build is kept in the task's build log and
    raises TaskInvalid with the build's last lines."""
    if not task.build_context:
        return False
    try:
        _tag, log = build(bytes(task.build_context), progress=progress)
    except ImageBuildFailed as exc:
        Task.objects.filter(pk=task.pk).update(build_log=failure_text(exc))
        raise TaskInvalid("environment", failure_text(exc)) from None
    if log:
        Task.objects.filter(pk=task.pk).update(build_log=log)
    return bool(log)
