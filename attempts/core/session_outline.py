"""A long session's map: the timeline cut into windows of WINDOW events (by seq, so a window's
events never change as the session grows, only the last one fills up), its stages and
commands, where the check, the first failure and the end are, and which window holds each. Built
from one light row per event (no outputs), so a 10,000-event session is mapped without reading
what the commands printed. Pure: the page's selector feeds it rows, tests feed it lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from attempts.core.ansi import strip_ansi
from attempts.core.timeline import exec_verdict

# Events per window of the attempt page's timeline.
WINDOW = 500
# Failing commands the outline lists (the count says how many there are in all).
FAILURES_LISTED = 20
# Characters of a command an outline line shows.
COMMAND_CHARS = 80

# The lifecycle status that opens each stage, and the stages' titles.
STAGE_OF_STATUS = {"starting": "start", "running": "agent", "checking": "check"}
STAGE_TITLES = {
    "start": "Start: the sandbox and the task's setup",
    "agent": "Agent",
    "check": "Check: the agent's changes recorded and checked",
    "recheck": "Re-check",
}
STAGE_SHORT = {"start": "Start", "agent": "Agent", "check": "Check", "recheck": "Re-check"}
# Exec steps that are Boltz's own bookkeeping, not commands a reviewer looks for.
QUIET_STEPS = {"reset"}


def stage_of(kind: str, actor: str, data: dict) -> str | None:
    """The stage an event opens, if it opens one."""
    if kind == "lifecycle":
        if actor == "reviewer" and data.get("action") == "recheck":
            return "recheck"
        if not data.get("outcome"):
            return STAGE_OF_STATUS.get(data.get("status") or "")
    return None


def window_of(seq: int) -> int:
    return max(1, (seq - 1) // WINDOW + 1)


def window_bounds(window: int) -> tuple[int, int]:
    """The first and last seq of a window."""
    return (window - 1) * WINDOW + 1, window * WINDOW


@dataclass
class Mark:
    """A place on the timeline a link lands on: `#anchor` on window `window`."""

    seq: int
    window: int
    anchor: str
    label: str = ""


@dataclass
class StagePart:
    stage: str
    title: str
    mark: Mark
    commands: int = 0
    failed: int = 0
    last_window: int = 1


@dataclass
class WindowPart:
    window: int
    first: int
    last: int
    commands: int = 0
    failed: int = 0
    shown: list[str] = field(default_factory=list)  # its first commands, as the outline says


@dataclass
class Outline:
    last_seq: int = 0
    stages: list[StagePart] = field(default_factory=list)
    windows: list[WindowPart] = field(default_factory=list)
    failures: list[Mark] = field(default_factory=list)
    failures_total: int = 0
    check: Mark | None = None
    first_failure: Mark | None = None
    end: Mark | None = None
    # exec number -> the seq of its start and of its end
    exec_start: dict[int, int] = field(default_factory=dict)
    exec_end: dict[int, int] = field(default_factory=dict)
    # window -> the stage it starts in (the one its first rows continue)
    stage_at: dict[int, str] = field(default_factory=dict)

    @property
    def window_count(self) -> int:
        return window_of(self.last_seq) if self.last_seq else 1

    def mark(self, seq: int, kind: str, exec_number, label: str = "") -> Mark:
        """Where the row of event `seq` is: a command's row is at its start."""
        if kind in ("exec", "output") and exec_number is not None:
            at = self.exec_start.get(exec_number, seq)
            return Mark(seq, window_of(at), f"cmd-{exec_number}", label)
        return Mark(seq, window_of(seq), f"ev-{seq}", label)


def _number(value) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def _flag(value) -> bool:
    return value not in (None, "", 0, "0", False, "false")


def build_outline(rows) -> Outline:
    """`rows`: per event in seq order, a dict with seq, kind, actor and the data keys phase,
    exec, status, step, outcome, action, by, exit_code, timed_out, stopped, command (cut)."""
    outline = Outline()
    rows = list(rows)
    for r in rows:
        number = _number(r.get("exec"))
        if r["kind"] == "exec" and number is not None:
            if r.get("phase") == "end":
                outline.exec_end[number] = r["seq"]
            else:
                outline.exec_start.setdefault(number, r["seq"])
    windows: dict[int, WindowPart] = {}
    stage = ""
    last_check: Mark | None = None
    for r in rows:
        seq, kind = r["seq"], r["kind"]
        outline.last_seq = max(outline.last_seq, seq)
        window = window_of(seq)
        if window not in windows:
            first, last = window_bounds(window)
            windows[window] = WindowPart(window, first, last)
            outline.stage_at[window] = stage
        if kind == "output":
            continue
        number = _number(r.get("exec"))
        new = stage_of(kind, r.get("actor") or "", r)
        if new is None and not stage:
            new = "start"
        if new and new != stage:
            title = STAGE_TITLES[new]
            if new == "recheck" and r.get("by"):
                title = f"Re-check by {r['by']}"
            mark = Mark(seq, window, f"stage-{seq}", title)
            outline.stages.append(StagePart(new, title, mark, last_window=window))
            stage = new
        part = outline.stages[-1]
        part.last_window = window
        if kind == "exec" and r.get("phase") != "end":
            command = strip_ansi(str(r.get("command") or ""))[:COMMAND_CHARS]
            if r.get("step") not in QUIET_STEPS:
                part.commands += 1
                windows[window].commands += 1
                if len(windows[window].shown) < 2 and r.get("actor") != "system":
                    windows[window].shown.append(command)
            if r.get("step") == "check":
                last_check = outline.mark(seq, kind, number, f"the check: $ {command}")
            continue
        failed = ""
        if kind == "exec":  # an end
            end = {
                "exit_code": _number(r.get("exit_code")),
                "timed_out": _flag(r.get("timed_out")),
                "stopped": r.get("stopped") or "",
            }
            tone, said = exec_verdict(end)
            if tone != "ok":
                command = strip_ansi(str(r.get("command") or ""))[:COMMAND_CHARS]
                failed = f"$ {command} ({said})"
        elif kind == "error":
            failed = "an error"
        elif kind == "check" and not last_check:
            last_check = outline.mark(seq, kind, None, "the check's result")
        if failed:
            mark = outline.mark(seq, kind, number, failed)
            outline.failures_total += 1
            part.failed += 1
            windows[mark.window].failed += 1
            if outline.first_failure is None:
                outline.first_failure = mark
            if len(outline.failures) < FAILURES_LISTED:
                outline.failures.append(mark)
    outline.check = last_check
    if rows:
        last = rows[-1]
        outline.end = outline.mark(last["seq"], last["kind"], _number(last.get("exec")), "the end")
    outline.windows = [windows[w] for w in sorted(windows)]
    return outline
