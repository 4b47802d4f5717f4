"""The side-by-side diff: files split and parsed with unidiff, lines paired old|new, intra-line
changes marked, syntax coloured with Pygments. Pure logic: text in, escaped HTML pieces out.
"""

from __future__ import annotations

import codecs
import difflib
import functools
import html
import re
from dataclasses import dataclass, field

import unidiff
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.token import STANDARD_TYPES, Token
from pygments.util import ClassNotFound
from unidiff.constants import LINE_TYPE_NO_NEWLINE

_FILE_START = re.compile(r"^diff --git ", re.MULTILINE)
# A file whose diff has more lines than this is collapsed and loaded on request.
LARGE_FILE_LINES = 1500
# Lines rendered inline on the page in all; later files load on request.
PAGE_LINE_BUDGET = 3000
MAX_HIGHLIGHT_LINE = 2000  # longer lines are shown plain (and fast)


@dataclass
class DiffFile:
    index: int
    old_path: str
    new_path: str
    status: str  # added | deleted | renamed | modified | binary | mode
    added: int
    removed: int
    lines: int
    text: str = field(repr=False)

    @property
    def path(self) -> str:
        return self.new_path if self.status != "deleted" else self.old_path

    @property
    def is_large(self) -> bool:
        return self.lines > LARGE_FILE_LINES


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


def split_files(diff: str) -> list[DiffFile]:
    """The files of a git diff, with status and +/- counts (no line parsing yet)."""
    starts = [m.start() for m in _FILE_START.finditer(diff)]
    if diff.strip() and (not starts or diff[: starts[0]].strip()):
        raise unidiff.UnidiffParseError("the diff does not start with a file header")
    files = []
    for i, start in enumerate(starts):
        chunk = diff[start : starts[i + 1] if i + 1 < len(starts) else len(diff)]
        try:
            patched = unidiff.PatchSet(chunk, metadata_only=True)[0]
        except (unidiff.UnidiffParseError, IndexError):
            raise unidiff.UnidiffParseError(
                f"file {i + 1} of the diff could not be parsed"
            ) from None
        old, new = _strip_prefix(patched.source_file), _strip_prefix(patched.target_file)
        header = chunk.split("\n", 1)[0]
        if not old and not new:  # mode-only or binary without ---/+++ lines: use the header
            match = re.match(r"diff --git a/(.*) b/(.*)", header)
            old = new = match.group(2) if match else header
        if patched.is_binary_file:
            status = "binary"
        elif patched.is_added_file:
            status = "added"
        elif patched.is_removed_file:
            status = "deleted"
        elif patched.is_rename:
            status = "renamed"
        elif not patched.added and not patched.removed:
            status = "mode"
        else:
            status = "modified"
        files.append(
            DiffFile(
                i,
                old or new,
                new or old,
                status,
                patched.added,
                patched.removed,
                chunk.count("\n"),
                chunk,
            )
        )
    return files


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


def render_line(text: str, path: str, changed: list[tuple[int, int]] = ()) -> str:
    """One line as escaped HTML with syntax classes and <mark> around changed ranges."""
    if len(text) > MAX_HIGHLIGHT_LINE:
        return html.escape(text)
    tokens = [(t, v) for t, v in _lexer(path).get_tokens(text) if v]
    marks = list(changed)
    out = []
    pos = 0
    for ttype, value in tokens:
        cls = _css_class(ttype) if ttype is not Token.Text else ""
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
    return "".join(out).rstrip("\n")


def _paired_rows(removed: list, added: list, path: str) -> list[Row]:
    """A run of removed lines and the added lines after it, side by side, with the changed
    characters of each old/new pair marked."""
    rows = []
    for i in range(max(len(removed), len(added))):
        old = removed[i] if i < len(removed) else None
        new = added[i] if i < len(added) else None
        old_text = old.value.rstrip("\n") if old else ""
        new_text = new.value.rstrip("\n") if new else ""
        old_marks, new_marks = _changed_ranges(old_text, new_text) if old and new else ([], [])
        rows.append(
            Row(
                "change",
                old.source_line_no if old else None,
                new.target_line_no if new else None,
                render_line(old_text, path, old_marks) if old else None,
                render_line(new_text, path, new_marks) if new else None,
            )
        )
    return rows


def side_by_side(file: DiffFile) -> list[Row]:
    """The rows of one file's diff, old on the left and new on the right."""
    patched = unidiff.PatchSet(file.text)[0]
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
        removed: list = []
        added: list = []
        for line in hunk:
            if line.is_removed:
                if added:
                    rows += _paired_rows(removed, added, path)
                    removed, added = [], []
                removed.append(line)
            elif line.is_added:
                added.append(line)
            else:
                rows += _paired_rows(removed, added, path)
                removed, added = [], []
                if line.line_type == LINE_TYPE_NO_NEWLINE:
                    continue
                shown = render_line(line.value.rstrip("\n"), path)
                rows.append(Row("context", line.source_line_no, line.target_line_no, shown, shown))
        rows += _paired_rows(removed, added, path)
    return rows


def plan_page(files: list[DiffFile], budget: int = PAGE_LINE_BUDGET) -> list[tuple[DiffFile, bool]]:
    """Which files render inline (True) and which load on request (False)."""
    plan, used = [], 0
    for f in files:
        inline = not f.is_large and f.status != "binary" and used + f.lines <= budget
        if inline:
            used += f.lines
        plan.append((f, inline))
    return plan
