"""An attempt as a conversation a trainer reads: the prompt, then the agent's own turns.

What the agent really did, from its timeline: the messages it posted (as it sent them), each
command it ran as a `shell` tool call with its result, a command an infrastructure failure cut
off with its partial output (marked), output that was not UTF-8 (flagged where it was replaced),
and each file it wrote, uploaded or deleted without a command (an API client's) as the `shell`
command that does the same (core/file_actions.py). What Boltz made up (the system prompt and the
`shell` tool of a command agent, the commands that stand for file writes) is named in
`synthetic`. The reference agent's call carries the action it really took (the patch, or the
solution script) rather than the path of a file it was given, and a command agent's call the
files it was uploaded with. Every text passes through the attempt's redaction, so no secret
value leaves. Every message has the same keys with the same types (MESSAGE_KEYS), so the files
of any tasks load together. Pure logic over the database.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass, field

from attempts.core import file_actions, redaction
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
# Every message (hf style) has these keys, typed the same in every line: a key missing in one
# task's file, or typed null there, keeps `datasets` from loading it with another task's.
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
FILE_ACTIONS = ("write", "upload", "delete")


def message(role: str, content: str, *, tool_calls=None, tool_call_id="", name="") -> dict:
    """A chat message with every key of MESSAGE_KEYS (no tool calls: null)."""
    return {
        "role": role,
        "content": content,
        "tool_calls": tool_calls or None,
        "tool_call_id": tool_call_id,
        "name": name,
    }


@dataclass
class Conversation:
    prompt: list[dict]  # system, user
    turns: list[dict]  # the agent's: assistant messages and tool results (hf style)
    synthetic: list[str] = field(default_factory=list)  # what Boltz made up
    replaced_utf8: list[int] = field(default_factory=list)  # turn indices with replaced bytes
    cut_off: list[int] = field(default_factory=list)  # turn indices of commands cut off
    files_cut: list[int] = field(default_factory=list)  # turn indices of writes shown cut
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


def redaction_for(attempt: Attempt) -> redaction.Redactor:
    """The attempt's secrets (redaction.secrets_of: kept out of its timeline already; again
    here, for timelines recorded before), and its container id and worker host (those belong
    to the attempts format only)."""
    where = [attempt.container_id, attempt.container_id[:12], attempt.host]
    return redaction.Redactor([*redaction.secrets_of(attempt), *where])


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


class _Actions:
    """What the agent's steps really amounted to, where it ran a file Boltz gave it (read
    once per attempt)."""

    def __init__(self, attempt: Attempt, redactor: redaction.Redactor):
        self.attempt, self.redactor = attempt, redactor
        self._files: dict[str, bytes] | None = None
        self.cut = False  # the last command shown left bytes of a file out
        self.shown_files = False  # a command agent's files were shown written

    def files(self) -> dict[str, bytes]:
        if self._files is None:
            self._files = read_stored(self.attempt.agent_files) if self.attempt.agent_files else {}
        return self._files

    def command(self, command: str) -> str:
        attempt, task = self.attempt, self.attempt.task
        self.cut = False
        if attempt.agent_command == PATCH_COMMAND:
            patch = self.files().get(PATCH_FILE, b"").decode(errors="replace")
            return file_actions.heredoc("git apply", patch, "BOLTZ_PATCH") if patch else command
        if attempt.agent == "reference":
            return self._reference(task, command)
        if attempt.agent_command and command == attempt.agent_command and self.files():
            return self._with_files(command)
        return command

    def _with_files(self, command: str) -> str:
        """A command agent's command, after the writes of the files it was uploaded with
        (each cut at RECORDED_FILE_BYTES, as an API client's writes are)."""
        writes, self.shown_files = [], True
        for name, data in sorted(self.files().items()):
            record = file_actions.content_record(self.redactor.whole(data))
            self.cut = self.cut or bool(record["omitted_bytes"])
            writes.append(file_actions.write_command(f"{AGENT_DIR}/{name}", record))
        return "\n".join([*writes, command])

    def _reference(self, task, command: str) -> str:
        heredoc = file_actions.heredoc
        if command.startswith("git apply") and f"{AGENT_DIR}/reference.patch" in command:
            return heredoc("git apply --whitespace=nowarn", task.reference_patch, "BOLTZ_PATCH")
        if command == f"bash {AGENT_DIR}/solve.sh":
            return heredoc("bash", task.reference_script, "BOLTZ_SOLUTION")
        if command == "bash /solution/solve.sh":
            script = _solution_script(bytes(task.solution_files))
            return heredoc("bash", script, "BOLTZ_SOLUTION") if script else command
        return command


def _file_command(data: dict, workdir: str) -> str:
    """The shell command that does what an API client's file operation did (paths in the
    working folder, where the `shell` tool runs, relative to it)."""
    path, action = data.get("path", ""), data.get("action")
    if workdir and path.startswith(workdir.rstrip("/") + "/"):
        path = path[len(workdir.rstrip("/")) + 1 :]
    if action == "delete":
        return file_actions.delete_command(path)
    if action == "upload":
        if "entries" not in data:  # recorded before uploads kept their entries
            return f"# [Boltz: {data.get('files', '?')} files uploaded to {path}; not recorded]"
        return file_actions.upload_command(path, data["entries"], data.get("omitted_entries", 0))
    return file_actions.write_command(path, data, mode=data.get("mode"))


def _solution_script(archive: bytes) -> str:
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            handle = tar.extractfile("solution/solve.sh")
            return handle.read().decode(errors="replace") if handle else ""
    except (tarfile.TarError, KeyError):
        return ""


def conversation(attempt: Attempt) -> Conversation:
    """The attempt's conversation, from its timeline (one query)."""
    task, redactor = attempt.task, redaction_for(attempt)
    redact = redactor.text
    actions = _Actions(attempt, redactor)
    system = message("system", SYSTEM_PROMPT.format(workdir=task.workdir))
    synthetic = ["system_prompt"]
    convo = Conversation(prompt=[], turns=[], synthetic=synthetic)
    kinds = [EventKind.MESSAGE, EventKind.EXEC, EventKind.FILE]
    events = attempt.events.filter(actor=Actor.AGENT, kind__in=kinds)
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
                system = message("system", text)  # the agent's own, as sent
                synthetic.remove("system_prompt")
            elif role in ROLES:
                convo.turns.append(message(role, text))
            else:
                convo.dropped += 1
            continue
        if event.kind == EventKind.FILE:
            if data.get("action") not in FILE_ACTIONS:
                continue  # reads, listings, downloads change nothing
            if file_actions.cut_bytes(data):
                convo.files_cut.append(len(convo.turns))
            _call(
                convo,
                f"call_f{event.seq}",
                redact(_file_command(data, task.workdir)),
                "[exit code 0]",
            )
            if "file_writes" not in synthetic:
                synthetic.append("file_writes")
            continue
        phase, number = data.get("phase"), data.get("exec")
        if phase == "start" and number in ended:
            continue
        cut_off = phase == "start"  # a start with no end: cut off by a failure
        command = redact(actions.command(data.get("command", "")))
        if actions.cut:
            convo.files_cut.append(len(convo.turns))
        if actions.shown_files and "agent_files" not in synthetic:
            synthetic.append("agent_files")
        text, replaced = _tool_text(data, cut_off=cut_off, redact=redact)
        call_id = f"call_{number if number is not None else event.seq}"
        _call(convo, call_id, command, text)
        if cut_off:
            convo.cut_off.append(len(convo.turns) - 1)
        if replaced:
            convo.replaced_utf8.append(len(convo.turns) - 1)
    if any(m["tool_calls"] for m in convo.turns):
        synthetic.append("tools")
    convo.prompt = [system, message("user", redact(task.instruction.strip()))]
    return convo


def _call(convo: Conversation, call_id: str, command: str, result: str) -> None:
    """A `shell` call and its result."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "shell", "arguments": {"command": command}},
    }
    convo.turns.append(message("assistant", "", tool_calls=[call]))
    convo.turns.append(message("tool", result, tool_call_id=call_id, name="shell"))


def openai_messages(messages: list[dict]) -> list[dict]:
    """hf-style messages as OpenAI's chat fine-tuning wants them: arguments as JSON strings,
    no content beside tool calls, no name on tool results."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v or k == "content"}  # no empty keys
        if m.get("tool_calls"):
            m.pop("content", None)
            m["tool_calls"] = [
                {
                    **call,
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": json.dumps(call["function"]["arguments"]),
                    },
                }
                for call in m["tool_calls"]
            ]
        if m["role"] == "tool":
            m.pop("name", None)
        out.append(m)
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
