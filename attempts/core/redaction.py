"""Secrets never shown: a saved agent's environment values and a task's secret settings are
replaced by `[redacted]` in command output before anything of it is kept.

An agent may print its environment (`env`, `echo $OPENAI_API_KEY`); its output is stored (the
head and tail in the end event, the live tail, output events, the raw files) and shown on
pages and in exports, so every chunk passes through a `Redactor` first.

Values shorter than MIN_SECRET_LENGTH (8) characters are not redacted: a short value (`1`,
`true`, `+`, `gpt-4o`) is too likely to occur in ordinary output, which replacing it would
mangle, and a value that short is no secret worth the name anyway.

Pure logic (but `secrets_of`, which reads the worker's environment and an attempt's fields).
"""

from __future__ import annotations

import os
import re
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
    string. Bytes that are not UTF-8 pass through untouched (secrets match as UTF-8 bytes).
    """

    def __init__(self, secrets):
        self.secrets = redactable(secrets)
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
        return self._text_re.sub(REDACTED, s) if self.secrets else s

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
        window = max(last, decided)
        cut = self._pending_start(buf, window)
        parts.append(buf[last:cut])
        self._carry = buf[cut:]
        return b"".join(parts)

    def flush(self) -> bytes:
        if not self.secrets:
            return b""
        rest, self._carry = self._carry, b""
        return self._bytes_re.sub(self._replacement, rest)

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
