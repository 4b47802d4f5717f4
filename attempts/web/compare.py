"""Two attempts of a task side by side: each one's changes against the base, one's final files
against the other's, their checks test by test, and the commands each ran. Everything is read
from what was recorded (patches, checks, timelines): no sandbox is needed, and every part of the
page is bounded."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import unidiff
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.html import format_html

from attempts.core import diffview
from attempts.core.diffview import DiffFile
from attempts.dispatch.limits import MAX_ID
from attempts.models import Attempt, EventKind, Task
from attempts.services.selectors import latest_checks
from attempts.web import auth, interdiff, patches
from attempts.web.query_params import number
from boltz_web.error_pages import BadQuery, NotFound

view_required = permission_required(auth.VIEW, raise_exception=True)

# A file larger than this (its part of either patch) is not compared line by line here.
MAX_COMPARE_FILE_BYTES = 512 * 1024
# Rows rendered inline on the page for each of its two diff sections; the rest load on request.
LINE_BUDGET = 3000
MAX_COMMANDS = 300


@dataclass
class Side:
    attempt: Attempt
    files: dict[str, DiffFile] = field(default_factory=dict)
    error: str = ""
    # Paths whose kind changed (a link replaced by a file, or the reverse): git writes them as a
    # deletion and an addition of the same path; `files` keeps the addition.
    retyped: set[str] = field(default_factory=set)


def _side(attempt: Attempt) -> Side:
    side = Side(attempt)
    try:
        for f in patches.patch_files(attempt):
            if f.path in side.files:
                side.retyped.add(f.path)
            side.files[f.path] = f
    except unidiff.UnidiffParseError as exc:
        side.error = str(exc)
    return side


def _text(side: Side, f: DiffFile | None) -> str | None:
    if f is None:
        return None
    return patches.file_bytes(side.attempt, f).decode("utf-8", errors="replace")


def _body(text: str) -> str:
    """A file's part of a patch without its first line and index line (names and blob ids)."""
    return "\n".join(line for line in text.split("\n")[1:] if not line.startswith("index "))


def final_files(a: Side, b: Side, path: str) -> dict:
    """One path's final file in A against B's: {'same': bool, 'note': str, 'diff': DiffFile}."""
    fa, fb = a.files.get(path), b.files.get(path)
    for f in (fa, fb):
        if f is not None and f.size > MAX_COMPARE_FILE_BYTES:
            return {"note": f"too large to compare here ({f.size} bytes of diff)"}
    ta, tb = _text(a, fa), _text(b, fb)
    if ta is not None and tb is not None and _body(ta) == _body(tb):
        return {"same": True}
    retyped = [side.attempt.number for side in (a, b) if path in side.retyped]
    if retyped:
        which = " and ".join(f"#{n}" for n in retyped)
        return {"note": f"a link replaced by a file, or a file by a link, in {which}"}
    statuses = {fa.status if fa else "", fb.status if fb else ""}
    if (fa and fa.binary) or (fb and fb.binary):
        return {"note": "binary: the final files differ"}
    absent = ""
    if fa is None and fb.status == "added":
        absent = "a"
    elif fb is None and fa.status == "added":
        absent = "b"
    elif statuses & {"renamed", "deleted"} or (fa and fb and fa.old_path != fb.old_path):
        return {"note": _moved_note(a, b, fa, fb)}
    try:
        text = interdiff.final_diff(path, ta, tb, absent=absent)
    except (unidiff.UnidiffParseError, IndexError, KeyError):
        return {"note": "the two changes could not be set against each other"}
    modes = _modes_note(a, b, fa, fb)
    if not text:
        return {"note": modes} if modes else {"same": True}
    return {"diff": diffview.split_files(text)[0], **({"note": modes} if modes else {})}


def _modes_note(a: Side, b: Side, fa: DiffFile | None, fb: DiffFile | None) -> str:
    """'' when both final files have the same mode; else what each one's is."""

    def final(f: DiffFile | None) -> str:
        return f.new_mode if f is not None and f.mode_changed else ""  # "": the base's

    ma, mb = final(fa), final(fb)
    if ma == mb:
        return ""
    said = [f"mode {m or 'as the base'} in #{s.attempt.number}" for m, s in ((ma, a), (mb, b))]
    return "; ".join(said)


def _moved_note(a: Side, b: Side, fa: DiffFile | None, fb: DiffFile | None) -> str:
    def said(side: Side, f: DiffFile | None) -> str:
        n = side.attempt.number
        if f is None:
            return f"unchanged in #{n}"
        if f.status == "renamed":
            return f"renamed from {f.old_path} in #{n}"
        return f"{diffview._STATUS_LABELS.get(f.status, f.status)} in #{n}"

    return f"{said(a, fa)}; {said(b, fb)}"


def _rows(f: DiffFile) -> tuple[object, bool]:
    text, clipped = diffview.clip_file_text(f.text)
    shown = dataclasses.replace(f, text=text)
    try:
        return diffview.rows_html(diffview.side_by_side(shown)), clipped
    except (unidiff.UnidiffParseError, IndexError):
        return None, clipped


def _commands(attempt: Attempt) -> dict:
    ends = attempt.events.filter(kind=EventKind.EXEC, data__phase="end").order_by("seq")
    rows = list(
        ends.values(
            "seq",
            "actor",
            "data__command",
            "data__step",
            "data__exit_code",
            "data__timed_out",
            "data__duration",
        )[: MAX_COMMANDS + 1]
    )
    shown = [
        {
            "seq": r["seq"],
            "actor": r["actor"],
            "command": (r["data__command"] or "")[:500],
            "step": r["data__step"] or "",
            "exit_code": r["data__exit_code"],
            "timed_out": r["data__timed_out"],
            "duration": r["data__duration"],
        }
        for r in rows[:MAX_COMMANDS]
    ]
    return {"rows": shown, "more": len(rows) > MAX_COMMANDS}


def _tests(a: Attempt, b: Attempt) -> tuple[list[dict], dict]:
    checks = latest_checks([a.pk, b.pk])
    tests: dict[str, dict] = {}
    for side, attempt in (("a", a), ("b", b)):
        check = checks.get(attempt.pk)
        for t in check.tests.all() if check else []:
            row = tests.setdefault(t.name, {"a": "not run", "b": "not run"})
            row[side] = t.outcome
    rows = []
    for name, o in sorted(tests.items()):
        passes = {side for side in ("a", "b") if o[side] == "passed"}
        rows.append(
            {
                "name": name,
                **o,
                "differs": o["a"] != o["b"],
                "only": (a.number if passes == {"a"} else b.number) if len(passes) == 1 else None,
            }
        )
    rows.sort(key=lambda r: (not r["differs"], r["name"]))
    return rows, checks


def _pick(task: Task, request) -> tuple[Attempt, Attempt]:
    """The two attempts ?a=NUMBER&b=NUMBER name: a 400 page without two numbers, a 404 page
    naming the one the task does not have."""
    back = task.get_absolute_url()
    numbers = [number(request, side) for side in ("a", "b")]
    if None in numbers:
        raise BadQuery(
            f"Pick two attempts of {task.slug} to compare: ?a=NUMBER&b=NUMBER (the task page's "
            "Compare form does).",
            back=back,
        )
    found = {
        x.number: x
        for x in task.attempts.defer("diff").filter(
            number__in=[n for n in numbers if 0 < n <= MAX_ID]
        )
    }
    for n in numbers:
        if n not in found:
            raise NotFound(f"{task.slug} has no attempt #{n}.", back=back)
    return found[numbers[0]], found[numbers[1]]


@login_required
@view_required
def compare(request, slug):
    task = get_object_or_404(Task, slug=slug)
    a, b = _pick(task, request)
    sides = (_side(a), _side(b))
    paths = sorted(set(sides[0].files) | set(sides[1].files))
    if "file" in request.GET:  # one path's final files, loaded on request
        path = request.GET["file"]
        if path not in paths:
            raise Http404("neither attempt changed that file")
        result = final_files(*sides, path)
        if "diff" not in result:
            note = result.get("note") or "The final files are the same."
            return HttpResponse(format_html('<p class="muted">{}</p>', note))
        rows, _clipped = _rows(result["diff"])
        return render(
            request,
            "attempts/_diff_rows.html",
            {"file": result["diff"], "rows": rows, "text": result["diff"].text},
        )
    base_used = final_used = 0
    per_file = []
    for path in paths[: diffview.MAX_LISTED_FILES]:
        item = {"path": path, "sides": []}
        final = final_files(*sides, path)
        item.update(same=final.get("same", False), note=final.get("note", ""))
        if "diff" in final and final_used + final["diff"].lines <= LINE_BUDGET:
            final_used += final["diff"].lines
            item["final_rows"], item["final_clipped"] = _rows(final["diff"])
        item["final_lazy"] = "diff" in final and "final_rows" not in item
        if "diff" in final:
            item["final_marks"] = final["diff"].marks
        for side in sides if not item["same"] else sides[:1]:
            f = side.files.get(path)
            entry = {"attempt": side.attempt, "file": f, "rows": None, "text": "", "lazy": False}
            if f is not None and f.shows_lines:
                if not f.is_large and base_used + f.lines <= LINE_BUDGET:
                    base_used += f.lines
                    entry["rows"], entry["text"], entry["clipped"] = patches.rendered(
                        side.attempt, f
                    )
                else:
                    entry["lazy"] = True
            item["sides"].append(entry)
        per_file.append(item)
    tests, checks = _tests(a, b)
    return render(
        request,
        "attempts/compare.html",
        {
            "task": task,
            "a": a,
            "b": b,
            "errors": [s for s in sides if s.error],
            "files": per_file,
            "files_total": len(paths),
            "tests": tests,
            "tests_differ": sum(1 for t in tests if t["differs"]),
            "check_a": checks.get(a.pk),
            "check_b": checks.get(b.pk),
            "commands": [_commands(a), _commands(b)],
        },
    )
