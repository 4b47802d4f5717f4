"""Files an agent wrote without a command (an API client's write or upload, a command agent's
uploaded scripts): their contents as the timeline keeps them, and as a trainer reads them.

The worker keeps a written file's first RECORDED_FILE_BYTES (64 KiB) in its `file` event, the
attempt's secrets redacted first (`content_record`); an upload keeps its entries (at most
RECORDED_UPLOAD_ENTRIES) and their contents (RECORDED_FILE_BYTES each, RECORDED_UPLOAD_BYTES in
all). The training exports show each such write as the `shell` command that does the same
(`cat > PATH <<'BOLTZ_EOF' ... BOLTZ_EOF`, `base64 -d` for bytes that are not UTF-8), followed by
a comment saying how many bytes were left out where a file was cut (`write_command`). Pure logic.
"""

from __future__ import annotations

import base64
import posixpath
import shlex

RECORDED_FILE_BYTES = 64 * 1024
RECORDED_UPLOAD_BYTES = 4 * RECORDED_FILE_BYTES
RECORDED_UPLOAD_ENTRIES = 200
DEFAULT_MODE = 0o644


def content_record(
    data: bytes, *, limit: int = RECORDED_FILE_BYTES, size: int | None = None
) -> dict:
    """A file's content as kept: `content` (its first `limit` bytes, as text, or base64 when
    they are not UTF-8), `encoding` ("utf-8" or "base64"), `bytes` (the whole file's size:
    `size`, when `data` is only its start) and `omitted_bytes` (how many were not kept).
    Redact `data` before."""
    size = len(data) if size is None else size
    kept = data[: max(limit, 0)]
    text = _utf8(kept, cut=len(kept) < size)
    if text is None:
        content, encoding = base64.b64encode(kept).decode("ascii"), "base64"
    else:
        content, encoding, kept = text, "utf-8", text.encode()
    return {
        "content": content,
        "encoding": encoding,
        "bytes": size,
        "omitted_bytes": max(size - len(kept), 0),
    }


def _utf8(data: bytes, *, cut: bool) -> str | None:
    """`data` as text, or None when it is not UTF-8 (a character cut at the end of a cut
    file is dropped, not a reason for base64)."""
    for end in range(len(data), max(len(data) - 4, -1) if cut else len(data) - 1, -1):
        try:
            return data[:end].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def heredoc(command: str, body: str, marker: str = "BOLTZ_EOF") -> str:
    """`command <<'MARKER'` with `body`: a marker no line of the body equals."""
    lines = set(body.splitlines())
    unique, n = marker, 1
    while unique in lines:
        unique, n = f"{marker}_{n}", n + 1
    body = body if body.endswith("\n") else body + "\n"
    return f"{command} <<'{unique}'\n{body}{unique}"


def _cut_notice(path: str, record: dict) -> str:
    omitted = record.get("omitted_bytes") or 0
    if not omitted:
        return ""
    return (
        f"# [Boltz: {omitted} of the {record.get('bytes', 0)} bytes of {path} are not shown; "
        f"the first {record.get('bytes', 0) - omitted} are]"
    )


def write_command(path: str, record: dict, *, mode: int | None = None) -> str:
    """The shell command that writes `record` (a `content_record`, or an event's data holding
    one) to `path`: folders made, the content in a heredoc, the mode set if not 0644, and a
    comment saying what was cut. A write recorded without its content says so."""
    quoted = shlex.quote(path)
    parts = []
    parent = posixpath.dirname(path)
    if parent not in ("", "/", "."):
        parts.append(f"mkdir -p {shlex.quote(parent)}")
    if "content" not in record:  # recorded before contents were kept
        parts.append(f": > {quoted}  # [Boltz: {record.get('bytes', '?')} bytes; not recorded]")
    elif record.get("encoding") == "base64":
        wrapped = "\n".join(
            record["content"][i : i + 76] for i in range(0, len(record["content"]), 76)
        )
        parts.append(heredoc(f"base64 -d > {quoted}", wrapped))
    else:
        parts.append(heredoc(f"cat > {quoted}", record["content"]))
    if mode is not None and mode != DEFAULT_MODE:
        parts.append(f"chmod {mode:o} {quoted}")
    if notice := _cut_notice(path, record):
        parts.append(notice)
    return "\n".join(parts)


def upload_command(folder: str, entries: list[dict], omitted_entries: int = 0) -> str:
    """The shell command that unpacks the recorded `entries` of an upload into `folder`."""
    parts = [f"mkdir -p {shlex.quote(folder)}"]
    for entry in entries:
        path = posixpath.join(folder, entry["path"])
        if entry.get("type") == "dir":
            parts.append(f"mkdir -p {shlex.quote(path)}")
        elif entry.get("type") == "link":
            parts.append(f"ln -sfn {shlex.quote(entry.get('target', ''))} {shlex.quote(path)}")
        else:
            parts.append(write_command(path, entry, mode=entry.get("mode")))
    if omitted_entries:
        parts.append(f"# [Boltz: {omitted_entries} more entries of this upload are not shown]")
    return "\n".join(parts)


def delete_command(path: str) -> str:
    return f"rm -rf -- {shlex.quote(path)}"


def cut_bytes(record: dict) -> int:
    """Bytes of written files a rendering of `record` (a write or an upload) leaves out."""
    entries = record.get("entries") or [record]
    return sum(e.get("omitted_bytes") or 0 for e in entries)
