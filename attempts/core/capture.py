"""Honest capture of command output: head and tail kept, byte counts, full raw bytes on disk.

Pure logic, no Django or Docker: fed bytes as they arrive, in any chunking.
"""

from __future__ import annotations

import codecs
from collections import deque
from typing import BinaryIO


def _trim_partial_start(data: bytes) -> bytes:
    """Drop UTF-8 continuation bytes at the start of a tail cut in the middle of a character."""
    cut = 0
    while cut < min(3, len(data)) and 0x80 <= data[cut] <= 0xBF:
        cut += 1
    return data[cut:]


class RawBudget:
    """Bytes of raw output an attempt may still keep, shared by the streams of a command."""

    def __init__(self, left: int):
        self.left = max(left, 0)

    def take(self, wanted: int) -> int:
        """How many of `wanted` bytes may be kept (and are now spent)."""
        granted = min(wanted, self.left)
        self.left -= granted
        return granted


class StreamCapture:
    """Captures one output stream (stdout or stderr) of one command."""

    def __init__(
        self,
        *,
        head_limit: int,
        tail_limit: int,
        raw_file: BinaryIO | None = None,
        raw_limit: int = 0,
        raw_budget: RawBudget | None = None,
        recent_limit: int = 0,
    ):
        self.head_limit = head_limit
        self.recent_limit = recent_limit  # the latest bytes, for a live view of a running command
        self._recent = bytearray()
        self.tail_limit = tail_limit
        self.raw_file = raw_file
        self.raw_limit = raw_limit  # of this stream
        self.raw_budget = raw_budget  # of the attempt, all its commands' streams together
        self.total_bytes = 0
        self.raw_bytes = 0
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._strict = codecs.getincrementaldecoder("utf-8")("strict")
        self._live = codecs.getincrementaldecoder("utf-8")("replace")
        self.valid_utf8 = True

    def feed(self, data: bytes) -> str:
        """Take a chunk; return the text of the part that falls inside the head (for live view)."""
        if not data:
            return ""
        self.total_bytes += len(data)
        if self.raw_file is not None and self.raw_bytes < self.raw_limit:
            room = min(len(data), self.raw_limit - self.raw_bytes)
            if self.raw_budget is not None:
                room = self.raw_budget.take(room)
            if room:
                self.raw_file.write(data[:room])
                self.raw_bytes += room
        if self.valid_utf8:
            try:
                self._strict.decode(data)
            except UnicodeDecodeError:
                self.valid_utf8 = False
        if self.recent_limit:
            self._recent += data[-self.recent_limit :]
            del self._recent[: max(0, len(self._recent) - self.recent_limit)]
        room = self.head_limit - len(self._head)
        head_part, rest = data[:room] if room > 0 else b"", data[max(room, 0) :]
        self._head += head_part
        if rest:
            self._tail.append(rest)
            self._tail_size += len(rest)
            while self._tail and self._tail_size - len(self._tail[0]) >= self.tail_limit:
                self._tail_size -= len(self._tail.popleft())
        return self._live.decode(head_part) if head_part else ""

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.head_limit + self.tail_limit

    @property
    def raw_truncated(self) -> bool:
        return self.raw_file is not None and self.raw_bytes < self.total_bytes

    def head_text(self) -> str:
        return bytes(self._head).decode("utf-8", errors="replace")

    def tail_bytes(self) -> bytes:
        tail = b"".join(self._tail)
        return tail[-self.tail_limit :] if self.tail_limit else b""

    def tail_text(self) -> str:
        tail = self.tail_bytes()
        if self.truncated:
            tail = _trim_partial_start(tail)
        return tail.decode("utf-8", errors="replace")

    def recent_text(self) -> str:
        """The latest output (up to `recent_limit` bytes) as text: when older output was left
        out, it starts at a line (else a character) boundary."""
        data = bytes(self._recent)
        if self.total_bytes > len(data):
            newline = data.find(b"\n")
            cut = 0 <= newline < len(data) - 1
            data = data[newline + 1 :] if cut else _trim_partial_start(data)
        return data.decode("utf-8", errors="replace")

    def text(self) -> str:
        """Head and tail as one readable text, with an explicit notice of what was left out."""
        if not self.truncated:
            return self.head_text() + self.tail_text()
        omitted = self.total_bytes - len(self._head) - len(self.tail_bytes())
        return f"{self.head_text()}\n[... {omitted} bytes omitted ...]\n{self.tail_text()}"

    def summary(self) -> dict:
        return {
            "head": self.head_text(),
            "tail": self.tail_text() if self.total_bytes > self.head_limit else "",
            "bytes": self.total_bytes,
            "truncated": self.truncated,
            "omitted_bytes": max(0, self.total_bytes - len(self._head) - len(self.tail_bytes())),
            "utf8": self.valid_utf8,
            "raw_bytes": self.raw_bytes,
            "raw_truncated": self.raw_truncated,
        }


def summary_text(summary: dict) -> str:
    """The readable text of a stored `StreamCapture.summary()`: head, the omission notice if
    it was cut, and tail (the same text `StreamCapture.text()` gives while capturing)."""
    text = summary.get("head", "")
    if summary.get("truncated"):
        text += f"\n[... {summary.get('omitted_bytes', 0)} bytes omitted ...]\n"
    return text + summary.get("tail", "")
