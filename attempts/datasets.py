"""Task-level exports as JSONL: attempt records, SFT conversations, RL trajectories.

Each line is built from an attempt and its timeline; docs/EXPORTS.md describes the formats.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from django.db.models import QuerySet

from .bundle import attempt_record, tamper_record
from .capture import summary_text
from .models import Actor, Attempt, CheckResult, EventKind, Outcome, TestOutcome
from .selectors import latest_checks
from .timeline import exec_verdict

FORMATS = ("attempts", "sft", "rl")
SYSTEM_PROMPT = (
    "You are a coding agent working in a sandbox on a git repository checked out at "
    "/workspace. Use the shell tool to inspect and change files; your changes are checked "
    "by hidden tests when you finish."
)
SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command in /workspace and return its exit code and output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command to run"}},
            "required": ["command"],
        },
    },
}
# Outcomes that carry no signal about the agent: masked, never a reward of 0.
MASKED_OUTCOMES = (Outcome.INFRA_ERROR, Outcome.VERIFIER_ERROR, Outcome.CANCELLED, "")


def select_attempts(
    attempts: QuerySet[Attempt],
    *,
    outcome: str | None = None,
    agent: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[Attempt]:
    if outcome:
        attempts = attempts.filter(outcome=outcome)
    if agent:
        attempts = attempts.filter(agent=agent)
    if since:
        attempts = attempts.filter(created_at__gte=since)
    if until:
        attempts = attempts.filter(created_at__lt=until)
    return attempts.select_related("task").order_by("task__slug", "number")


def _output_text(data: dict) -> str:
    parts = []
    for stream in ("stdout", "stderr"):
        text = summary_text(data.get(stream) or {})
        if text:
            parts.append(text)
    return "\n".join(parts)


def agent_steps(attempt: Attempt) -> list[dict]:
    """The agent's own actions in order: messages it wrote and commands it ran, with results."""
    steps = []
    events = attempt.events.filter(actor=Actor.AGENT, kind__in=[EventKind.MESSAGE, EventKind.EXEC])
    for event in events.order_by("seq").only("seq", "kind", "data"):
        data = event.data
        if event.kind == EventKind.MESSAGE:
            steps.append({"type": "message", "seq": event.seq, "text": data.get("text", "")})
        elif data.get("phase") == "end":
            steps.append(
                {
                    "type": "exec",
                    "seq": event.seq,
                    "command": data.get("command", ""),
                    "exit_code": data.get("exit_code"),
                    "timed_out": bool(data.get("timed_out")),
                    "verdict": exec_verdict(data)[1],
                    "duration": data.get("duration"),
                    "output": _output_text(data),
                    "truncated": bool(
                        (data.get("stdout") or {}).get("truncated")
                        or (data.get("stderr") or {}).get("truncated")
                    ),
                }
            )
    return steps


def _prompt(attempt: Attempt) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": attempt.task.instruction.strip()},
    ]


def _meta(attempt: Attempt) -> dict:
    return {
        "attempt_id": attempt.pk,
        "task": attempt.task.slug,
        "number": attempt.number,
        "agent": attempt.agent,
        "outcome": attempt.outcome,
        "score": attempt.score,
        "tampered": attempt.tampered,
        "tamper": tamper_record(attempt),
    }


def rl_mask(attempt: Attempt) -> tuple[bool, str]:
    """Whether an attempt's reward must be masked, and why. Infrastructure errors,
    cancellations and unfinished attempts say nothing about the policy; neither does an
    attempt the check gave no score (a declared reward file it never wrote): none of them
    may ever be read as a reward of 0."""
    if attempt.outcome in MASKED_OUTCOMES:
        return True, attempt.failure_reason
    if attempt.score is None:
        if attempt.outcome == Outcome.FAILED and attempt.failure_reason:
            return True, attempt.failure_reason
        why = f": {attempt.failure_reason}" if attempt.failure_reason else ""
        return True, f"the check gave no score (outcome {attempt.outcome}){why}"
    return False, ""


def sft_line(attempt: Attempt) -> dict:
    messages = _prompt(attempt)
    for step in agent_steps(attempt):
        if step["type"] == "message":
            messages.append({"role": "assistant", "content": step["text"]})
            continue
        call_id = f"call_{step['seq']}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "shell",
                            "arguments": json.dumps({"command": step["command"]}),
                        },
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"[{step['verdict']}]\n{step['output']}",
            }
        )
    return {"messages": messages, "tools": [SHELL_TOOL], "metadata": _meta(attempt)}


def rl_line(attempt: Attempt) -> dict:
    masked, mask_reason = rl_mask(attempt)
    trajectory = []
    for step in agent_steps(attempt):
        if step["type"] == "message":
            trajectory.append(
                {"action": {"type": "message", "text": step["text"]}, "observation": None}
            )
        else:
            trajectory.append(
                {
                    "action": {"type": "exec", "command": step["command"]},
                    "observation": {
                        "exit_code": step["exit_code"],
                        "timed_out": step["timed_out"],
                        "output": step["output"],
                        "truncated": step["truncated"],
                    },
                }
            )
    return {
        **_meta(attempt),
        "prompt": _prompt(attempt),
        "trajectory": trajectory,
        "reward": None if masked else attempt.score,
        "mask": masked,
        "mask_reason": mask_reason,
    }


def attempts_line(attempt: Attempt, check: CheckResult | None, tests: dict[str, str]) -> dict:
    record = attempt_record(attempt)
    record["check"] = (
        None
        if check is None
        else {
            "passed": check.passed,
            "score": check.score,
            "source": check.source,
            "mode": check.mode,
            "summary": check.summary,
            "problem": check.problem,
            "ignored_reward_files": check.ignored_reward_files,
            "tests_passed": check.tests_passed,
            "tests_total": check.tests_total,
            "tests": tests,
        }
    )
    return record


def _attempts_lines(batch: list[Attempt]) -> Iterator[dict]:
    """Attempt records with their last check: two queries per batch, not two per attempt."""
    checks = latest_checks([a.pk for a in batch])
    tests: dict[int, dict[str, str]] = {}
    outcomes = TestOutcome.objects.filter(check_result_id__in=[c.pk for c in checks.values()])
    for check_id, name, outcome in outcomes.values_list("check_result_id", "name", "outcome"):
        tests.setdefault(check_id, {})[name] = outcome
    for attempt in batch:
        check = checks.get(attempt.pk)
        yield attempts_line(attempt, check, tests.get(check.pk, {}) if check else {})


_BUILDERS = {
    "attempts": _attempts_lines,
    "sft": lambda batch: map(sft_line, batch),
    "rl": lambda batch: map(rl_line, batch),
}
BATCH = 200


def export_lines(attempts: QuerySet[Attempt], fmt: str) -> Iterator[bytes]:
    if fmt not in _BUILDERS:
        raise ValueError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    build = _BUILDERS[fmt]
    batch: list[Attempt] = []
    for attempt in attempts.defer("diff").iterator(chunk_size=BATCH):  # no line holds the diff
        batch.append(attempt)
        if len(batch) == BATCH:
            yield from _encode(build(batch))
            batch = []
    if batch:
        yield from _encode(build(batch))


def _encode(lines) -> Iterator[bytes]:
    for line in lines:
        yield json.dumps(line, ensure_ascii=False).encode() + b"\n"
