"""The side-by-side diff: files split and parsed with unidiff, lines paired old|new, intra-line
changes marked, syntax coloured with Pygments. Pure logic: text in, escaped HTML pieces out.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import difflib
import functools
import html
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import unidiff
from django.template.defaultfilters import filesizeformat
from django.utils.safestring import SafeString, mark_safe
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES, Token
from pygments.util import ClassNotFound
from unidiff.constants import LINE_TYPE_NO_NEWLINE

_FILE_START = re.compile(r"^diff --git ", re.MULTILINE)
# A file whose diff has more lines than this is collapsed and loaded on request.
LARGE_FILE_LINES = 1500
# Lines rendered inline on the page in all; later files load on request.
PAGE_LINE_BUDGET = 1500
MAX_HIGHLIGHT_LINE = 2000  # longer lines are shown plain (and fast)
# What one file's view renders at most; past this, the rest of it is a download.
MAX_RENDER_LINES = 5000
MAX_RENDER_BYTES = 2 * 1024 * 1024
MAX_LINE_CHARS = 10_000
# The file list of a page stops here (the bundle's changes.patch has them all).
MAX_LISTED_FILES = 2000
# A file whose patch is this large is listed with its size.
BIG_FILE_BYTES = 1024 * 1024


_STATUS_LABELS = {
    "added": "new",
    "deleted": "deleted",
    "renamed": "renamed",
    "mode": "mode",
    "modified": "modified",
}
# git's file modes: what kind of file each side of a change is.
LINK_MODE = "120000"
SUBMODULE_MODE = "160000"
# A link's target is shown up to this many characters, read from its hunk's first lines.
MAX_TARGET_CHARS = 300
_LINK_LINES = 16


@dataclass
class DiffFile:
    index: int
    old_path: str
    new_path: str
    # What happened to the path: added | deleted | renamed | modified | mode (its mode alone).
    # A binary file has one of these too, and `binary` set.
    status: str
    added: int
    removed: int
    lines: int
    text: str = field(repr=False)
    # Where the file's part of the whole patch is (bytes), when it is read from storage.
    start: int = 0
    size: int = 0
    # git's modes of each side ("" where that side does not exist or the patch does not say):
    # 100644 a file, 100755 an executable one, 120000 a symbolic link, 160000 a submodule.
    old_mode: str = ""
    new_mode: str = ""
    similarity: int | None = None  # a rename's, in percent (100: the content is unchanged)
    binary: bool = False
    old_bytes: int | None = None  # a binary file's sizes, when its patch carries them
    new_bytes: int | None = None
    old_target: str = ""  # a symbolic link's target on each side (cut at MAX_TARGET_CHARS)
    new_target: str = ""

    @property
    def is_big(self) -> bool:
        return self.size > BIG_FILE_BYTES

    @property
    def path(self) -> str:
        return self.new_path if self.status != "deleted" else self.old_path

    @property
    def is_large(self) -> bool:
        return self.lines > LARGE_FILE_LINES

    @property
    def is_link(self) -> bool:
        return LINK_MODE in (self.old_mode, self.new_mode)

    @property
    def mode_changed(self) -> bool:
        """Both sides exist and their modes differ (not a link becoming a file: git writes
        that as a deletion and an addition)."""
        return bool(self.old_mode and self.new_mode and self.old_mode != self.new_mode)

    @property
    def shows_lines(self) -> bool:
        """Does the file's diff have lines to show side by side?"""
        return not self.binary and bool(self.added or self.removed)

    @property
    def notes(self) -> list[str]:
        """What the file header says besides its path, as a code host says it (plain text:
        templates escape it; link targets are the agent's)."""
        notes = []
        if self.status == "renamed":
            unchanged = self.similarity == 100 or (
                self.similarity is None and not self.shows_lines and not self.binary
            )
            how = (
                "content unchanged"
                if unchanged
                else f"{self.similarity}% similar"
                if self.similarity is not None
                else ""
            )
            notes.append(f"renamed from {self.old_path}" + (f", {how}" if how else ""))
        if self.mode_changed:
            notes.append(f"mode {self.old_mode} → {self.new_mode}")
        elif self.status == "added" and self.new_mode not in ("", "100644", LINK_MODE):
            notes.append(f"mode {self.new_mode}")
        if self.is_link:
            old = self.old_target if self.old_mode == LINK_MODE else ""
            new = self.new_target if self.new_mode == LINK_MODE else ""
            if self.status == "deleted":
                notes.append(f"symlink → {old}" if old else "symlink")
            elif new and old and new != old:
                notes.append(f"symlink → {new} (was → {old})")
            elif new:
                notes.append(f"symlink → {new}")
            elif old:  # a link that became a file in place (a mode change)
                notes.append(f"was a symlink → {old}")
        if SUBMODULE_MODE in (self.old_mode, self.new_mode):
            notes.append("submodule")
        if self.binary:
            notes.append(self.binary_note)
        return notes

    @property
    def binary_note(self) -> str:
        """'Binary file not shown', with its sizes where the patch says them."""

        def size(n: int | None) -> str:
            return filesizeformat(n).replace("\xa0", " ")

        known = {"added": self.new_bytes, "deleted": self.old_bytes}
        if self.status in known:
            n = known[self.status]
            return "Binary file not shown" + (f" ({size(n)})" if n is not None else "")
        if self.old_bytes is not None and self.new_bytes is not None:
            old, new = size(self.old_bytes), size(self.new_bytes)
            if old == new:  # rounded alike: the exact counts say what changed
                old, new = str(self.old_bytes), f"{self.new_bytes} bytes"
            return f"Binary file not shown ({old} → {new})"
        return "Binary file not shown"

    @property
    def no_lines_note(self) -> str:
        """What stands in for the side-by-side rows of a file that has none ('' if it has)."""
        if self.shows_lines:
            return ""
        if self.binary:
            return self.binary_note + ": the bundle's changes.patch carries its contents."
        if self.status == "renamed":
            return "File renamed without changes."
        if self.status == "mode":
            return "File mode changed; the content is unchanged."
        if self.status == "added":
            return "Empty file."
        if self.status == "deleted":
            return "Empty file deleted."
        return "No lines changed."

    @property
    def marks(self) -> SafeString:
        """Status badges and +/- counts (no agent text in it: fixed words and numbers only)."""
        label = _STATUS_LABELS.get(self.status, "modified")
        badges = [f'<span class="badge file-{self.status}">{label}</span>']
        if self.mode_changed and self.status != "mode":
            badges.append('<span class="badge file-mode">mode</span>')
        if self.is_link:
            badges.append('<span class="badge file-link">symlink</span>')
        if self.binary:
            badges.append('<span class="badge file-binary">binary</span>')
        else:
            badges.append(
                f'<span class="plus">+{self.added}</span> '
                f'<span class="minus">−{self.removed}</span>'
            )
        return mark_safe(" ".join(badges))  # noqa: S308 - fixed words and integers only


@dataclass
class Row:
    """One side-by-side row: old side and new side (None where a side has no line)."""

    kind: str  # context | change | hunk
    old_no: int | None = None
    new_no: int | None = None
    old_html: str | None = None
    new_html: str | None = None
    header: str = ""


def _unquote(path: str) -> str:
    """git C-quotes paths with unusual characters: "b/caf\\303\\251 \\"x\\".txt"."""
    if len(path) >= 2 and path[0] == path[-1] == '"':
        raw = codecs.escape_decode(path[1:-1].encode("utf-8", "surrogateescape"))[0]
        return raw.decode("utf-8", errors="replace")
    return path


def _strip_prefix(path: str | None) -> str:
    if not path or path == "/dev/null":
        return ""
    path = _unquote(path)
    return path[2:] if path[:2] in ("a/", "b/") else path


def first_file(text: str, *, metadata_only: bool = False) -> unidiff.PatchedFile:
    """The first file of a diff; unidiff.UnidiffParseError when there is none."""
    files = unidiff.PatchSet(text, metadata_only=metadata_only)
    if not len(files):
        raise unidiff.UnidiffParseError("no file in the diff")
    return files[0]


# Where a file's header ends: its first hunk, or its binary patch.
_BODY_START = re.compile(r"^(?:@@ |GIT binary patch$)", re.MULTILINE)
_SIMILARITY = re.compile(r"^similarity index (\d{1,3})%$", re.MULTILINE)
_BINARY_BLOCK = re.compile(r"^(literal|delta) (\d+)$")
# git's base85 line: its first character says how many bytes the line holds.
_B85_LENGTHS = {
    c: n for n, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", 1)
}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A size in a git delta's header (7 bits a byte, low bits first): (value, next offset)."""
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        shift += 7
        if not byte & 0x80:
            return value, at
    raise ValueError("a cut delta header")


def _delta_sizes(line: str) -> tuple[int, int] | None:
    """The (source, target) sizes a git binary delta starts with, from its first base85 line
    (zlib-compressed: the first bytes decompress alone). None when the line is no such thing."""
    line = line.rstrip("\n")
    n = _B85_LENGTHS.get(line[:1])
    if n is None:
        return None
    try:
        packed = base64.b85decode(line[1:])[:n]
        head = zlib.decompressobj().decompress(packed, 32)
        source, at = _varint(head, 0)
        target, _ = _varint(head, at)
    except (ValueError, binascii.Error, zlib.error):
        return None
    return source, target


def binary_sizes(body: str) -> tuple[int | None, int | None]:
    """A binary patch's (old, new) sizes in bytes, where it says them: `literal N` is the
    whole file on that side; a delta's header names both. git writes the forward block (old to
    new) and then the reverse one. The size of an absent side is None."""
    blocks: list[tuple[str, int, str]] = []
    lines = body.split("\n")
    for i, line in enumerate(lines):
        match = _BINARY_BLOCK.match(line)
        if match:
            blocks.append((match[1], int(match[2]), lines[i + 1] if i + 1 < len(lines) else ""))
    old = new = None
    for n, (kind, size, first) in enumerate(blocks[:2]):
        forward = n == 0
        if kind == "literal":
            if forward:
                new = size
            else:
                old = size
        elif (sizes := _delta_sizes(first)) is not None:
            source, target = sizes if forward else sizes[::-1]
            old, new = source, target
    return old, new


def _link_targets(body: str) -> tuple[str, str]:
    """A symbolic link's old and new targets from its hunk (each its `-` / `+` lines)."""
    old, new = [], []
    for line in body.split("\n")[: 1 + _LINK_LINES]:  # as many as index_patch keeps
        if line.startswith("@@ ") or line.startswith("\\"):
            continue
        if line[:1] == "-":
            old.append(line[1:])
        elif line[:1] == "+":
            new.append(line[1:])

    def cut(parts: list[str]) -> str:
        text = "\n".join(parts)
        return text[:MAX_TARGET_CHARS] + ("…" if len(text) > MAX_TARGET_CHARS else "")

    return cut(old), cut(new)


def describe(index: int, chunk: str, added: int, removed: int, lines: int) -> DiffFile:
    """A file's paths, status, modes, rename similarity, binary sizes and link targets from
    its part of a git diff (its header, plus the first lines of its body for a binary file or
    a link), with the +/- counts and line count given."""
    body_at = _BODY_START.search(chunk)
    header, body = (chunk[: body_at.start()], chunk[body_at.start() :]) if body_at else (chunk, "")
    try:
        patched = first_file(header, metadata_only=True)
    except unidiff.UnidiffParseError:
        raise unidiff.UnidiffParseError(
            f"file {index + 1} of the diff could not be parsed"
        ) from None
    old, new = _strip_prefix(patched.source_file), _strip_prefix(patched.target_file)
    first_line = chunk.split("\n", 1)[0]
    if not old and not new:  # mode-only or binary without ---/+++ lines: use the header
        match = re.match(r"diff --git a/(.*) b/(.*)", first_line)
        old = new = match.group(2) if match else first_line
    binary = patched.is_binary_file or body.startswith("GIT binary patch")
    old_mode, new_mode = patched.source_mode or "", patched.target_mode or ""
    if patched.is_added_file:
        status, old_mode = "added", ""
    elif patched.is_removed_file:
        status, new_mode = "deleted", ""
    elif patched.is_rename:
        status = "renamed"
    elif not added and not removed and not binary and old_mode != new_mode:
        status = "mode"
    else:
        status = "modified"
    similarity = _SIMILARITY.search(header)
    f = DiffFile(
        index,
        old or new,
        new or old,
        status,
        added,
        removed,
        lines,
        "",
        old_mode=old_mode,
        new_mode=new_mode,
        similarity=int(similarity[1]) if similarity else None,
        binary=binary,
    )
    if binary:
        f.old_bytes, f.new_bytes = binary_sizes(body)
        if status == "added":
            f.old_bytes = None
        elif status == "deleted":
            f.new_bytes = None
    elif f.is_link:
        f.old_target, f.new_target = _link_targets(body)
    return f


def split_files(diff: str) -> list[DiffFile]:
    """The files of a git diff, with status and +/- counts (no line parsing yet)."""
    starts = [m.start() for m in _FILE_START.finditer(diff)]
    if diff.strip() and (not starts or diff[: starts[0]].strip()):
        raise unidiff.UnidiffParseError("the diff does not start with a file header")
    files = []
    for i, start in enumerate(starts):
        chunk = diff[start : starts[i + 1] if i + 1 < len(starts) else len(diff)]
        try:
            patched = first_file(chunk, metadata_only=True)
        except unidiff.UnidiffParseError:
            raise unidiff.UnidiffParseError(
                f"file {i + 1} of the diff could not be parsed"
            ) from None
        f = describe(i, chunk, patched.added, patched.removed, chunk.count("\n"))
        f.text, f.size = chunk, len(chunk.encode("utf-8", "surrogatepass"))
        files.append(f)
    return files


def index_patch(lines: Iterable[bytes]) -> list[DiffFile]:
    """The files of a whole git patch read line by line (bytes, any size): paths, status, +/-
    counts and where each file's part is (byte offsets). Nothing of a file's lines is kept, so a
    50 MB file costs one pass and no memory."""
    files: list[DiffFile] = []
    header: list[bytes] = []
    # Past the header, `keep` lines more are kept: a binary patch's block lines and the first
    # data line of each (its sizes), a link's hunk (its targets).
    state = {
        "start": 0,
        "added": 0,
        "removed": 0,
        "lines": 0,
        "in_hunks": False,
        "keep": 0,
        "binary": False,
    }
    offset = 0

    def close(end: int) -> None:
        if not header:
            return
        f = describe(
            len(files),
            b"".join(header).decode("utf-8", errors="replace"),
            state["added"],
            state["removed"],
            state["lines"],
        )
        f.start, f.size = state["start"], end - state["start"]
        files.append(f)

    for line in lines:
        if line.startswith(b"diff --git "):
            close(offset)
            header = [line]
            state.update(
                start=offset, added=0, removed=0, lines=1, in_hunks=False, keep=0, binary=False
            )
        elif not header:
            if line.strip():
                raise unidiff.UnidiffParseError("the diff does not start with a file header")
        else:
            state["lines"] += 1
            if state["in_hunks"]:
                if state["binary"]:
                    if _BINARY_BLOCK.match(line.decode("ascii", "replace").rstrip("\n")):
                        state["keep"] = 2  # the block's line and its first data line
                elif line[:1] == b"+":
                    state["added"] += 1
                elif line[:1] == b"-":
                    state["removed"] += 1
                if state["keep"] > 0:
                    state["keep"] -= 1
                    cap = MAX_TARGET_CHARS * 4
                    header.append(line if len(line) <= cap else line[:cap] + b"\n")
            elif line.startswith(b"@@ "):
                state["in_hunks"], state["binary"] = True, False
                if any(LINK_MODE.encode() in h for h in header[1:]):
                    state["keep"] = _LINK_LINES  # a link's hunk: its target, old and new
                header.append(line)
            elif line.startswith(b"GIT binary patch"):
                header.append(line)
                state["in_hunks"], state["binary"] = True, True  # its data is no header
            else:
                header.append(line)
        offset += len(line)
    close(offset)
    return files


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


def clip_file_text(
    text: str, max_lines: int = MAX_RENDER_LINES, max_line_chars: int = MAX_LINE_CHARS
) -> tuple[str, bool]:
    """The first `max_lines` lines of one file's diff, still a valid diff (its last hunk's
    header counts only the lines kept), each line cut at `max_line_chars`. (text, clipped)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    clipped = len(lines) > max_lines
    lines = lines[:max_lines]
    if any(len(line) > max_line_chars for line in lines):
        clipped = True
        lines = [
            line[:max_line_chars] + ("…" if len(line) > max_line_chars else "") for line in lines
        ]
    if not clipped:
        return text, False
    last = max((i for i, line in enumerate(lines) if line.startswith("@@ ")), default=None)
    if last is not None:
        body = [line for line in lines[last + 1 :] if not line.startswith("\\")]
        old = sum(1 for line in body if line[:1] in (" ", "-", ""))
        new = sum(1 for line in body if line[:1] in (" ", "+", ""))
        match = _HUNK_HEADER.match(lines[last])
        if match:
            lines[last] = f"@@ -{match[1]},{old} +{match[2]},{new} @@{match[3]}"
    return "\n".join(lines) + "\n", True


@functools.lru_cache(maxsize=256)
def _lexer(path: str):
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _css_class(ttype) -> str:
    # Pygments' short class names (as HtmlFormatter uses): Token.Keyword -> "k".
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def _changed_ranges(a: str, b: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    old, new = [], []
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op != "equal":
            if a2 > a1:
                old.append((a1, a2))
            if b2 > b1:
                new.append((b1, b2))
    return old, new


def _tokens_by_line(lines: list[str], path: str) -> list[list[tuple[str, str]]]:
    """Lex the lines of one side of a hunk at once (context carries across lines), then split
    the tokens back into lines of (css class, text)."""
    out: list[list[tuple[str, str]]] = [[]]
    if any(len(line) > MAX_HIGHLIGHT_LINE for line in lines):
        return [[("", line)] for line in lines]  # minified or generated: plain and fast
    for ttype, value in _lexer(path).get_tokens("\n".join(lines)):
        cls = "" if ttype is Token.Text else _css_class(ttype)
        for n, part in enumerate(value.split("\n")):
            if n:
                out.append([])
            if part:
                out[-1].append((cls, part))
    out += [[] for _ in range(len(lines) - len(out))]
    return out[: len(lines)]


def _line_html(tokens: list[tuple[str, str]], marks=()) -> str:
    """One line's tokens as escaped HTML, with <mark> around the changed character ranges."""
    out = []
    pos = 0
    for cls, value in tokens:
        start = 0
        while start < len(value):
            absolute = pos + start
            inside = next((r for r in marks if r[0] <= absolute < r[1]), None)
            if inside:
                end = min(len(value), inside[1] - pos)
            else:
                nxt = min((r[0] for r in marks if r[0] > absolute), default=pos + len(value))
                end = min(len(value), nxt - pos)
            piece = html.escape(value[start:end])
            if cls:
                piece = f'<span class="{cls}">{piece}</span>'
            out.append(f"<mark>{piece}</mark>" if inside else piece)
            start = end
        pos += len(value)
    return "".join(out)


def render_line(text: str, path: str, changed: list[tuple[int, int]] = ()) -> str:
    """One line alone as escaped, coloured HTML with its changed ranges marked."""
    return _line_html(_tokens_by_line([text], path)[0], changed)


def _paired_rows(removed, added, old_tok, new_tok) -> list[Row]:
    """A run of removed lines and the added lines after it, side by side, with the changed
    characters of each old/new pair marked. `removed`/`added` hold (line, side index)."""
    rows = []
    for i in range(max(len(removed), len(added))):
        old, oi = removed[i] if i < len(removed) else (None, None)
        new, ni = added[i] if i < len(added) else (None, None)
        marks = (
            _changed_ranges(old.value.rstrip("\n"), new.value.rstrip("\n"))
            if old and new
            else ([], [])
        )
        rows.append(
            Row(
                "change",
                old.source_line_no if old else None,
                new.target_line_no if new else None,
                _line_html(old_tok[oi], marks[0]) if old else None,
                _line_html(new_tok[ni], marks[1]) if new else None,
            )
        )
    return rows


def side_by_side(file: DiffFile) -> list[Row]:
    """The rows of one file's diff, old on the left and new on the right. Raises
    unidiff.UnidiffParseError for a text that is no diff."""
    patched = first_file(file.text)
    rows: list[Row] = []
    path = file.path
    for hunk in patched:
        rows.append(
            Row(
                "hunk",
                header=html.escape(
                    f"@@ -{hunk.source_start},{hunk.source_length} "
                    f"+{hunk.target_start},{hunk.target_length} @@ {hunk.section_header}".rstrip()
                ),
            )
        )
        lines = [line for line in hunk if line.line_type != LINE_TYPE_NO_NEWLINE]
        old_side = [line.value.rstrip("\n") for line in lines if not line.is_added]
        new_side = [line.value.rstrip("\n") for line in lines if not line.is_removed]
        old_tok, new_tok = _tokens_by_line(old_side, path), _tokens_by_line(new_side, path)
        oi = ni = 0
        removed: list = []
        added: list = []
        for line in lines:
            if line.is_removed:
                if added:
                    rows += _paired_rows(removed, added, old_tok, new_tok)
                    removed, added = [], []
                removed.append((line, oi))
                oi += 1
            elif line.is_added:
                added.append((line, ni))
                ni += 1
            else:
                rows += _paired_rows(removed, added, old_tok, new_tok)
                removed, added = [], []
                rows.append(
                    Row(
                        "context",
                        line.source_line_no,
                        line.target_line_no,
                        _line_html(old_tok[oi]),
                        _line_html(new_tok[ni]),
                    )
                )
                oi += 1
                ni += 1
        rows += _paired_rows(removed, added, old_tok, new_tok)
    return rows


_SIGNS = {
    "del": '<span class="sign">-</span>',
    "add": '<span class="sign">+</span>',
    "": '<span class="sign"> </span>',
}


def rows_html(rows: list[Row]) -> SafeString:
    """The side-by-side table body. Built here, not in a template: a page may hold thousands
    of rows. Every piece of file content in it was escaped by _line_html."""
    out = []
    for r in rows:
        if r.kind == "hunk":
            out.append(f'<tr class="hunk"><td colspan="4">{r.header}</td></tr>')
            continue
        old_cls = "empty" if r.old_html is None else ("del" if r.kind == "change" else "")
        new_cls = "empty" if r.new_html is None else ("add" if r.kind == "change" else "")
        # Added and removed lines say so in text (a +/- sign), not only by their colour.
        old_sign = "" if r.old_html is None else _SIGNS[old_cls]
        new_sign = "" if r.new_html is None else _SIGNS[new_cls]
        out.append(
            f'<tr class="{r.kind}"><td class="ln">{"" if r.old_no is None else r.old_no}</td>'
            f'<td class="old {old_cls}">{old_sign}{r.old_html or ""}</td>'
            f'<td class="ln">{"" if r.new_no is None else r.new_no}</td>'
            f'<td class="new {new_cls}">{new_sign}{r.new_html or ""}</td></tr>'
        )
    return mark_safe("".join(out))  # noqa: S308 - content escaped above


def plan_page(files: list[DiffFile], budget: int = PAGE_LINE_BUDGET) -> list[tuple[DiffFile, bool]]:
    """Which files render inline (True) and which load on request (False)."""
    plan, used = [], 0
    for f in files:
        inline = not f.is_large and f.shows_lines and used + f.lines <= budget
        if inline:
            used += f.lines
        plan.append((f, inline))
    return plan
