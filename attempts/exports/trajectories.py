"""An attempt as a conversation a trainer reads: the prompt, then the agent's own turns.

What the agent really did, from its timeline: the messages it posted (as it sent them), each
command it ran as a `shell` tool call with its result, a command an infrastructure failure cut
off with its partial output (marked), output that was not UTF-8 (flagged where it was replaced).
What Boltz made up (the system prompt and the `shell` tool of a command agent) is named in
`synthetic`. The reference agent's call carries the action it really took (the patch, or the
solution script) rather than the path of a file it was given. Every text passes through the
attempt's redaction, so no secret value leaves. Pure logic over the database.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass, field

from attempts.core import redaction
from attempts.core.agents import AGENT_DIR, PATCH_COMMAND, PATCH_FILE
from attempts.core.capture import summary_text
from attempts.core.storage import read_stored
from attempts.core.timeline import exec_verdict
from attempts.models import Actor, Attempt, EventKind, Outcome

SYSTEM_PROMPT = (
    "You are a coding agent working in a sandbox on a repository checked out at {workdir}. Use "
    "the shell tool to inspect and change files; your changes are checked by hidden tests when "
    "you finish."
)
SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command in the working folder and return its exit code and "
        "output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command to run"}},
            "required": ["command"],
        },
    },
}
ORACLES = ("reference", "noop")
ROLES = ("system", "user", "assistant")


@dataclass
class Conversation:
    prompt: list[dict]  # system, user
    turns: list[dict]  # the agent's: assistant messages and tool results (hf style)
    synthetic: list[str] = field(default_factory=list)  # what Boltz made up
    replaced_utf8: list[int] = field(default_factory=list)  # turn indices with replaced bytes
    cut_off: list[int] = field(default_factory=list)  # turn indices of commands cut off
    dropped: int = 0  # messages with a role no trainer knows

    @property
    def has_assistant(self) -> bool:
        return any(m["role"] == "assistant" for m in self.turns)

    def trimmed(self) -> list[dict]:
        """The turns ending on an assistant turn (trailing tool results dropped)."""
        turns = list(self.turns)
        while turns and turns[-1]["role"] != "assistant":
            turns.pop()
        return turns


def redaction_for(attempt: Attempt):
    """The attempt's secrets (redaction.secrets_of: kept out of its timeline already; again
    here, for timelines recorded before), and its container id and worker host (those belong
    to the attempts format only)."""
    where = [attempt.container_id, attempt.container_id[:12], attempt.host]
    return redaction.Redactor([*redaction.secrets_of(attempt), *where]).text


def policy_of(attempt: Attempt) -> str:
    """Who acted: a saved agent's name, an API agent's label, a model's name (the patch agent),
    a built-in's name; a plain command agent is `command:` and a hash of its command."""
    if attempt.agent == "command" and attempt.agent_command:
        digest = hashlib.sha256(attempt.agent_command.encode()).hexdigest()[:10]
        return f"command:{digest}"
    return attempt.agent


def group_id(attempt: Attempt) -> str:
    """Attempts at the same thing: one task, one base commit, one instruction."""
    task = attempt.task
    instruction = hashlib.sha256(task.instruction.strip().encode()).hexdigest()[:12]
    return f"{task.slug}@{(attempt.base_commit or task.base_commit)[:12]}:{instruction}"


def _tool_text(data: dict, *, cut_off: bool, redact) -> tuple[str, bool]:
    """A command's result as the model would read it, and whether bytes were replaced."""
    if cut_off:
        live = data.get("live") or {}
        output = "\n".join(
            (live.get(s) or {}).get("tail", "") for s in ("stdout", "stderr") if live.get(s)
        )
        head = "[cut off: the sandbox failed while this command ran; its output so far]"
        return redact(f"{head}\n{output}" if output else head), False
    parts = [summary_text(data.get(s) or {}) for s in ("stdout", "stderr")]
    replaced = any((data.get(s) or {}).get("utf8") is False for s in ("stdout", "stderr"))
    output = "\n".join(p for p in parts if p)
    return redact(f"[{exec_verdict(data)[1]}]\n{output}"), replaced


def _real_action(attempt: Attempt, command: str) -> str:
    """The command the agent's step really amounted to, where it ran a file Boltz gave it."""
    task = attempt.task
    if attempt.agent_command == PATCH_COMMAND:
        patch = read_stored(attempt.agent_files).get(PATCH_FILE, b"").decode(errors="replace")
        return _heredoc("git apply", patch, "BOLTZ_PATCH") if patch else command
    if attempt.agent != "reference":
        return command
    if command.startswith("git apply") and f"{AGENT_DIR}/reference.patch" in command:
        return _heredoc("git apply --whitespace=nowarn", task.reference_patch, "BOLTZ_PATCH")
    if command == f"bash {AGENT_DIR}/solve.sh":
        return _heredoc("bash", task.reference_script, "BOLTZ_SOLUTION")
    if command == "bash /solution/solve.sh":
        script = _solution_script(bytes(task.solution_files))
        return _heredoc("bash", script, "BOLTZ_SOLUTION") if script else command
    return command


def _heredoc(command: str, body: str, marker: str) -> str:
    body = body if body.endswith("\n") else body + "\n"
    return f"{command} <<'{marker}'\n{body}{marker}"


def _solution_script(archive: bytes) -> str:
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            handle = tar.extractfile("solution/solve.sh")
            return handle.read().decode(errors="replace") if handle else ""
    except (tarfile.TarError, KeyError):
        return ""


def conversation(attempt: Attempt) -> Conversation:
    """The attempt's conversation, from its timeline (one query)."""
    task, redact = attempt.task, redaction_for(attempt)
    system = {"role": "system", "content": SYSTEM_PROMPT.format(workdir=task.workdir)}
    synthetic = ["system_prompt"]
    convo = Conversation(prompt=[], turns=[], synthetic=synthetic)
    events = attempt.events.filter(actor=Actor.AGENT, kind__in=[EventKind.MESSAGE, EventKind.EXEC])
    starts: dict[int, dict] = {}
    ended: set[int] = set()
    rows = list(events.order_by("seq").only("seq", "kind", "data"))
    for event in rows:
        if event.kind == EventKind.EXEC and event.data.get("phase") == "end":
            ended.add(event.data.get("exec"))
    for event in rows:
        data = event.data
        if event.kind == EventKind.MESSAGE:
            role, text = data.get("role", "assistant"), redact(data.get("text", ""))
            if role == "system" and not convo.turns and "system_prompt" in synthetic:
                system = {"role": "system", "content": text}  # the agent's own, as sent
                synthetic.remove("system_prompt")
            elif role in ROLES:
                convo.turns.append({"role": role, "content": text})
            else:
                convo.dropped += 1
            continue
        phase, number = data.get("phase"), data.get("exec")
        if phase == "start":
            starts[number] = data
            if number in ended:
                continue
        cut_off = phase == "start"  # a start with no end: cut off by a failure
        call_id = f"call_{number if number is not None else event.seq}"
        command = redact(_real_action(attempt, data.get("command", "")))
        convo.turns.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "shell", "arguments": {"command": command}},
                    }
                ],
            }
        )
        text, replaced = _tool_text(data, cut_off=cut_off, redact=redact)
        if cut_off:
            convo.cut_off.append(len(convo.turns))
        if replaced:
            convo.replaced_utf8.append(len(convo.turns))
        convo.turns.append(
            {"role": "tool", "tool_call_id": call_id, "name": "shell", "content": text}
        )
    if any(m.get("tool_calls") for m in convo.turns):
        synthetic.append("tools")
    convo.prompt = [system, {"role": "user", "content": redact(task.instruction.strip())}]
    return convo


def openai_messages(messages: list[dict]) -> list[dict]:
    """hf-style messages as OpenAI's chat fine-tuning wants them: arguments as JSON strings,
    no content beside tool calls, no name on tool results."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message.pop("content", None)
            message["tool_calls"] = [
                {
                    **call,
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": json.dumps(call["function"]["arguments"]),
                    },
                }
                for call in message["tool_calls"]
            ]
        if message["role"] == "tool":
            message.pop("name", None)
        out.append(message)
    return out


# Why an attempt's reward must not be read: a code, and the reason in words without hosts.
_INFRA_CODES = (
    ("image_missing", re.compile(r"image .* is not on (?:host|this Docker host)")),
    ("worker_lost", re.compile(r"worker lost")),
    ("docker_unavailable", re.compile(r"Docker daemon unreachable|Docker daemon")),
    ("sandbox_gone", re.compile(r"no longer exists|is not running|container .* gone")),
    ("worker_time_limit", re.compile(r"time limit for this attempt ran out")),
    ("task_invalid", re.compile(r"task cannot run")),
    ("internal_error", re.compile(r"internal error in Boltz")),
)
_HEX_ID = re.compile(r"\b[0-9a-f]{12,64}\b")


def mask_of(attempt: Attempt, convo: Conversation | None = None) -> tuple[bool, str, str]:
    """(mask, code, detail): whether the attempt's reward must not be read, a code
    (`image_missing`, `worker_lost`, `verifier_error`, `cancelled`, ...) and the reason in
    words with host names and container ids taken out."""
    detail = scrub(attempt.failure_reason, attempt)
    if attempt.outcome == Outcome.INFRA_ERROR:
        code = next((c for c, p in _INFRA_CODES if p.search(attempt.failure_reason)), None)
        return True, code or "infra_error", detail
    if attempt.outcome == Outcome.VERIFIER_ERROR:
        return True, "verifier_error", detail
    if attempt.outcome == Outcome.CANCELLED:
        return True, "cancelled", detail
    if not attempt.outcome:
        return True, "unfinished", f"the attempt is {attempt.status}"
    if attempt.score is None:
        return True, "no_score", detail or "the check gave no score"
    if convo is not None and not convo.has_assistant:
        return True, "empty_completion", "the agent took no action: nothing to credit"
    return False, "", ""


def scrub(text: str, attempt: Attempt) -> str:
    """`text` without host names and container ids (they belong to the attempts format)."""
    if not text:
        return ""
    hosts = {h for h in (attempt.host,) if h}
    for host in sorted(hosts, key=len, reverse=True):
        text = text.replace(host, "[host]")
    if attempt.container_id:
        text = text.replace(attempt.container_id, "[container]")
        text = text.replace(attempt.container_id[:12], "[container]")
    return _HEX_ID.sub("[id]", text)
