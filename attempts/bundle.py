"""The attempt bundle: one zip with everything an attempt was, streamed as it is built."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator

from django.core.files.storage import default_storage
from django.utils import timezone

from .models import Attempt, CheckResult, Outcome, SandboxState
from .storage import iter_file
from .zipstream import stream_zip

README = """Boltz attempt bundle: {task} #{number}

attempt.json      the attempt: agent, status, outcome, score, reason, timings, host, sandbox
task.json         the task: instruction, repository and base commit, image, commands, limits
events.jsonl      the whole session timeline, one event a line, in order (seq)
changes.patch     the agent's changes against the base commit; apply with
                  `git checkout {base}` then `git apply changes.patch`
check.json        every check of the attempt with per-test outcomes (the last is the result)
junit.xml         the JUnit report of the last check, when it wrote one
outputs/          the full raw output of each command (the timeline keeps head and tail)
workspace.tar.gz  the agent's final files (those the patch covers){workspace_note}

Infrastructure errors (outcome "infra_error") say nothing about the agent: leave them out
of scores.
"""


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def attempt_record(attempt: Attempt) -> dict:
    return {
        "id": attempt.pk,
        "task": attempt.task.slug,
        "number": attempt.number,
        "agent": attempt.agent,
        "agent_command": attempt.agent_command,
        "agent_files": [f["name"] for f in attempt.agent_files],
        "status": attempt.status,
        "outcome": attempt.outcome,
        "infrastructure_error": attempt.outcome == Outcome.INFRA_ERROR,
        "failure_reason": attempt.failure_reason,
        "score": attempt.score,
        "host": attempt.host,
        "container_id": attempt.container_id,
        "image": attempt.image,
        "base_commit": attempt.base_commit,
        "sandbox_state": attempt.sandbox_state,
        "sandbox_deleted_at": _iso(attempt.sandbox_deleted_at),
        "sandbox_deleted_by": attempt.sandbox_deleted_by,
        "timings": attempt.timings,
        "created_at": _iso(attempt.created_at),
        "started_at": _iso(attempt.started_at),
        "finished_at": _iso(attempt.finished_at),
        "duration": attempt.duration,
        "diff_bytes": attempt.diff_bytes,
        "diff_truncated": attempt.diff_truncated,
    }


def task_record(task) -> dict:
    return {
        "slug": task.slug,
        "title": task.title,
        "instruction": task.instruction,
        "repository": task.repo_url,
        "base_ref": task.base_ref,
        "base_commit": task.base_commit,
        "image": task.image_name,
        "setup_command": task.setup_command,
        "check_command": task.check_command,
        "hidden_check_files": task.check_file_paths,
        "reference_patch": task.reference_patch,
        "limits": {
            "setup_timeout": task.setup_timeout,
            "agent_timeout": task.agent_timeout,
            "check_timeout": task.check_timeout,
            "cpus": task.cpus,
            "memory_bytes": task.memory_bytes,
            "pids": task.pids_limit,
            "network": task.network,
        },
    }


def check_record(check: CheckResult) -> dict:
    return {
        "id": check.pk,
        "passed": check.passed,
        "score": check.score,
        "source": check.source,
        "exit_code": check.exit_code,
        "timed_out": check.timed_out,
        "duration": check.duration,
        "tests_passed": check.tests_passed,
        "tests_total": check.tests_total,
        "reward": check.reward,
        "created_at": _iso(check.created_at),
        "output": check.output,
        "output_truncated": check.output_truncated,
        "tests": [
            {"name": t.name, "outcome": t.outcome, "duration": t.duration, "message": t.message}
            for t in check.tests.all()
        ],
    }


def workspace_available(attempt: Attempt) -> bool:
    return (
        bool(attempt.workspace_file)
        and attempt.sandbox_state != SandboxState.DELETED
        and attempt.sandbox_deleted_at is None
        and default_storage.exists(attempt.workspace_file)
    )


def _events_jsonl(attempt: Attempt) -> Iterator[bytes]:
    rows = attempt.events.order_by("seq").values_list("seq", "time", "kind", "actor", "data")
    for seq, time, kind, actor, data in rows.iterator(chunk_size=500):
        line = {"seq": seq, "time": time.isoformat(), "kind": kind, "actor": actor, "data": data}
        yield json.dumps(line, ensure_ascii=False).encode() + b"\n"


def _raw_outputs(attempt: Attempt) -> list[str]:
    names = []
    ends = attempt.events.filter(kind="exec", data__phase="end")
    for data in ends.values_list("data", flat=True):
        for stream in ("stdout", "stderr"):
            raw = (data.get(stream) or {}).get("raw")
            if raw:
                names.append(raw)
    return names


def bundle_filename(attempt: Attempt) -> str:
    return f"boltz-{attempt.task.slug}-{attempt.number}.zip"


def bundle_entries(attempt: Attempt):
    """The bundle's (name, content) pairs, each produced only when the zip reaches it."""
    task = attempt.task
    checks = list(attempt.checks.prefetch_related("tests"))
    has_workspace = workspace_available(attempt)
    record = attempt_record(attempt)
    deleted = attempt.sandbox_deleted_at or attempt.sandbox_state == SandboxState.DELETED
    by = f" by {attempt.sandbox_deleted_by}" if attempt.sandbox_deleted_by else ""
    absent = ""
    if not has_workspace:
        absent = (
            f"the sandbox was deleted{by}" if deleted else "the attempt never reached its check"
        )
    record["workspace"] = {
        "included": has_workspace,
        "bytes": attempt.workspace_bytes if has_workspace else 0,
        "omitted": attempt.workspace_omitted,
        "absent_reason": absent,
    }
    record["exported_at"] = timezone.now().isoformat()
    note = f"\n                  ABSENT: {absent}" if absent else ""
    yield (
        "README.txt",
        README.format(
            task=task.slug,
            number=attempt.number,
            base=attempt.base_commit or task.base_commit,
            workspace_note=note,
        ).encode(),
    )
    yield "attempt.json", json.dumps(record, indent=2, ensure_ascii=False).encode()
    yield "task.json", json.dumps(task_record(task), indent=2, ensure_ascii=False).encode()
    yield "events.jsonl", _events_jsonl(attempt)
    if attempt.diff_file and default_storage.exists(attempt.diff_file):
        yield "changes.patch", iter_file(attempt.diff_file)
    else:
        yield "changes.patch", attempt.diff.encode()
    yield (
        "check.json",
        json.dumps(
            {"checks": [check_record(c) for c in checks]}, indent=2, ensure_ascii=False
        ).encode(),
    )
    if checks and checks[-1].junit_xml:
        yield "junit.xml", checks[-1].junit_xml.encode()
    for name in _raw_outputs(attempt):
        if default_storage.exists(name):
            yield f"outputs/{posixpath.basename(name)}", iter_file(name)
    if has_workspace:
        yield "workspace.tar.gz", iter_file(attempt.workspace_file)


def stream_bundle(attempt: Attempt) -> Iterator[bytes]:
    return stream_zip(bundle_entries(attempt))
