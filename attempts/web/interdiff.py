"""One attempt's final files against another's, from their two patches against the same base.

Pure logic, no git and no base repository: both patches change the same base file, and their
hunks hold every base line they touch (context and removed lines). Where the hunks of either
patch cover the base, both final versions are known and diffed; everywhere else both finals are
the base, so equal. Paths that only one attempt made (added or renamed to) are compared with an
empty file.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from unidiff.constants import LINE_TYPE_NO_NEWLINE

from attempts.core import diffview

CONTEXT = 3


@dataclass
class _Hunk:
    lo: int  # first base line it covers (1-based); for a pure insertion, the line it goes before
    hi: int  # one past its last base line
    old: list[str]
    new: list[str]


def _hunks(text: str | None) -> list[_Hunk]:
    if not text:
        return []
    patched = diffview.first_file(text)
    out = []
    for hunk in patched:
        lines = [line for line in hunk if line.line_type != LINE_TYPE_NO_NEWLINE]
        old = [line.value.rstrip("\n") for line in lines if not line.is_added]
        new = [line.value.rstrip("\n") for line in lines if not line.is_removed]
        lo = hunk.source_start if hunk.source_length else hunk.source_start + 1
        out.append(_Hunk(lo, lo + len(old), old, new))
    return out


def _regions(a: list[_Hunk], b: list[_Hunk]) -> list[tuple[int, int]]:
    spans = sorted([(h.lo, h.hi) for h in a + b])
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def _final(region: tuple[int, int], hunks: list[_Hunk], base: dict[int, str]) -> list[str]:
    lo, hi = region
    out, at = [], lo
    for h in hunks:
        if h.lo < lo or h.hi > hi:
            continue
        out += [base[n] for n in range(at, h.lo)]
        out += h.new
        at = h.hi
    return out + [base[n] for n in range(at, hi)]


def final_diff(path: str, a_text: str | None, b_text: str | None, *, absent: str = "") -> str:
    """A git-style diff of one path from attempt A's final file (left, `a/`) to attempt B's
    (right, `b/`), given each attempt's part of its patch for that path (None: unchanged from the
    base). `absent` names the side ('a' or 'b') on which the path does not exist at all (the other
    attempt added it). '' when the final files are the same. Raises unidiff.UnidiffParseError."""
    a, b = _hunks(a_text), _hunks(b_text)
    if absent == "a":  # B added the path: all of B's file against nothing
        return _format(path, [((1, []), (1, [ln for h in b for ln in h.new]))])
    if absent == "b":
        return _format(path, [((1, [ln for h in a for ln in h.new]), (1, []))])
    base: dict[int, str] = {}
    for h in a + b:
        for n, line in enumerate(h.old, start=h.lo):
            base.setdefault(n, line)
    pieces = []
    shift_a = shift_b = 0
    for region in _regions(a, b):
        final_a, final_b = _final(region, a, base), _final(region, b, base)
        pieces.append(((region[0] + shift_a, final_a), (region[0] + shift_b, final_b)))
        width = region[1] - region[0]
        shift_a += len(final_a) - width
        shift_b += len(final_b) - width
    return _format(path, pieces)


def _format(path: str, pieces) -> str:
    hunks = []
    for (a_start, a_lines), (b_start, b_lines) in pieces:
        matcher = difflib.SequenceMatcher(None, a_lines, b_lines, autojunk=False)
        for group in matcher.get_grouped_opcodes(CONTEXT):
            i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
            old_start = a_start + i1 if i2 > i1 else a_start + i1 - 1
            new_start = b_start + j1 if j2 > j1 else b_start + j1 - 1
            out = [f"@@ -{old_start},{i2 - i1} +{new_start},{j2 - j1} @@"]
            for op, x1, x2, y1, y2 in group:
                if op == "equal":
                    out += [" " + line for line in a_lines[x1:x2]]
                    continue
                out += ["-" + line for line in a_lines[x1:x2]]
                out += ["+" + line for line in b_lines[y1:y2]]
            hunks.append("\n".join(out))
    if not hunks:
        return ""
    quoted = path.replace("\n", " ")
    head = f"diff --git a/{quoted} b/{quoted}\n--- a/{quoted}\n+++ b/{quoted}\n"
    return head + "\n".join(hunks) + "\n"
