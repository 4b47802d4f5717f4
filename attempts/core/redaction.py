"""Secrets never shown: a saved agent's environment values and a task's secret settings are
replaced by `[redacted]` in what the worker keeps of an attempt, before anything of it is kept.

An agent may print its environment (`env`, `echo $OPENAI_API_KEY`) or write it into a file (its
content, or its name); what it did is stored and shown on pages, in API answers and in exports.
So the worker redacts where it records, never where a page or an export reads:
- command output, every chunk as it streams (`Redactor.feed`): the head and tail in the end
  event, the live tail, output events, the raw files (run/session.py);
- the agent's changed files (contents, names and link targets) before they are diffed
  (run/changes.py): the patch, the checked tree, the workspace snapshot and all read from them;
- every event the worker adds to the timeline (core/timeline.py), every check result (its
  summary, JUnit report, test names and messages; run/check.py), the attempt's end reason;
- the answers of a live sandbox's file operations: a file read, a folder's listing, an
  archive (`redact_tar`) (run/session.py).
Only the exact value is replaced (as UTF-8 bytes, anywhere in text or binary data): an encoding
of it (base64, hex, reversed, split by the agent into pieces) is not recognised.

Values shorter than MIN_SECRET_LENGTH (8) characters are not redacted: a short value (`1`,
`true`, `+`, `gpt-4o`) is too likely to occur in ordinary output, which replacing it would
mangle, and a value that short is no secret worth the name anyway.

Pure logic (but `secrets_of`, which reads the worker's environment and an attempt's fields).
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from contextlib import suppress

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8


def redactable(secrets) -> list[str]:
    """Distinct values long enough to redact, longest first (so the regex alternation
    prefers a long secret over a shorter one that starts the same way)."""
    values = {str(s) for s in secrets or () if s is not None and len(str(s)) >= MIN_SECRET_LENGTH}
    return sorted(values, key=lambda s: (-len(s), s))


class Redactor:
    """Replaces every occurrence of the given secrets with `[redacted]`.

    `feed(chunk)` for a stream, in any chunking: a secret split across chunks is still caught.
    It returns what is safe to show now and keeps back (at most the longest secret's length
    less one byte) only an end of the chunk that could still be the start of a secret or a
    secret not yet known to be the longest match; `flush()` returns the rest at the end. The
    output is the same as redacting the whole stream at once. `text(s)` redacts a whole
    string, `data(v)` every string of a JSON-like value (keys too). Bytes that are not UTF-8
    pass through untouched (secrets match as UTF-8 bytes). `replaced` counts the occurrences
    replaced so far, by every method.
    """

    def __init__(self, secrets):
        self.secrets = redactable(secrets)
        self.replaced = 0
        self._bytes = [s.encode("utf-8", errors="surrogateescape") for s in self.secrets]
        self._replacement = REDACTED.encode()
        self._carry = b""
        if self.secrets:
            self._text_re = re.compile("|".join(re.escape(s) for s in self.secrets))
            self._bytes_re = re.compile(b"|".join(re.escape(s) for s in self._bytes))
            self._hold = max(len(b) for b in self._bytes) - 1
            # secrets by their first bytes, to find where one may start near a chunk's end
            self._by_prefix: dict[bytes, list[bytes]] = {}
            for b in self._bytes:
                self._by_prefix.setdefault(b[:MIN_SECRET_LENGTH], []).append(b)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, s: str) -> str:
        if not self.secrets:
            return s
        out, count = self._text_re.subn(REDACTED, s)
        self.replaced += count
        return out

    def data(self, value):
        """A JSON-like value (dicts, lists, tuples, strings, numbers) with every string
        redacted, dict keys included; what is not a string is kept as it is."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.data(v) for v in value)
        return value

    def whole(self, data: bytes) -> bytes:
        """Bytes redacted as a whole (a file read at once): what feed and flush would give."""
        if not self.secrets:
            return data
        out, count = self._bytes_re.subn(self._replacement, data)
        self.replaced += count
        return out

    def feed(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        buf = self._carry + data if self._carry else bytes(data)
        # A match starting before `decided` is whole in `buf` (at least the longest secret's
        # length of bytes follow its start), so it is what the whole stream would give.
        decided = max(0, len(buf) - self._hold)
        parts, last = [], 0
        for match in self._bytes_re.finditer(buf):
            if match.start() >= decided:
                break
            parts.append(buf[last : match.start()])
            parts.append(self._replacement)
            last = match.end()
            self.replaced += 1
        window = max(last, decided)
        cut = self._pending_start(buf, window)
        parts.append(buf[last:cut])
        self._carry = buf[cut:]
        return b"".join(parts)

    def flush(self) -> bytes:
        if not self.secrets:
            return b""
        rest, self._carry = self._carry, b""
        out, count = self._bytes_re.subn(self._replacement, rest)
        self.replaced += count
        return out

    def _pending_start(self, buf: bytes, start: int) -> int:
        """The first position at or after `start` where a secret starts (whole, or cut off by
        the end of `buf`); len(buf) when there is none. Only the short window after `start`
        is searched, by each secret's first bytes (every secret has MIN_SECRET_LENGTH)."""
        end = best = len(buf)
        for prefix, candidates in self._by_prefix.items():
            at = buf.find(prefix, start, end)
            while at != -1 and at < best:
                if any(s.startswith(buf[at : at + len(s)]) for s in candidates):
                    best = at
                    break
                at = buf.find(prefix, at + 1, end)
        if best < end:
            return best
        for at in range(max(start, end - MIN_SECRET_LENGTH + 1), end):  # too short for a prefix
            if any(s.startswith(buf[at:]) for s in self._bytes):
                return at
        return end


def redact_tar(data: bytes, redactor: Redactor) -> bytes:
    """A tar archive with the secrets redacted from its members' names, link targets, owner
    names, extended headers and file contents (so the archive is written again, its members'
    sizes changed). Bytes that are not a whole tar are redacted as they are."""
    if not redactor:
        return data
    out = io.BytesIO()
    try:
        with (
            tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as source,
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for member in source:
                member.name = redactor.text(member.name)
                member.linkname = redactor.text(member.linkname)
                member.uname = redactor.text(member.uname)
                member.gname = redactor.text(member.gname)
                member.pax_headers = redactor.data(member.pax_headers)
                if member.isfile():
                    handle = source.extractfile(member)
                    content = redactor.whole(handle.read() if handle else b"")
                    member.size = len(content)
                    tar.addfile(member, io.BytesIO(content))
                else:
                    tar.addfile(member)
    except (tarfile.TarError, EOFError, OSError):
        return redactor.whole(data)
    return out.getvalue()


def secrets_of(attempt) -> list[str]:
    """What must never be shown of an attempt: its agent's environment values (a saved
    agent's, copied into `agent_env`) and its task's secret settings: every `stage_env` value
    that refers to the worker's environment (`${NAME}`), as resolved on this worker, and the
    worker's values it refers to. Values too short to redact are left out."""
    from attempts.core import stage_env
    from attempts.core.errors import TaskInvalid

    found = [str(v) for v in (attempt.agent_env or {}).values()]
    task = attempt.task if attempt.task_id else None
    for stage, values in ((task.stage_env if task else None) or {}).items():
        for name, template in (values or {}).items():
            if "${" not in str(template):
                continue
            with suppress(TaskInvalid):  # the stage itself fails on it: nothing of it shows
                found.extend(stage_env.resolve({stage: {name: template}}, stage).values())
            for ref in stage_env._REFERENCE.finditer(str(template)):
                if ref.group(1) in os.environ:
                    found.append(os.environ[ref.group(1)])
    return redactable(found)
