"""What validation learns of a task's tests and what the check's runtime observer may fail,
as rules (attempts/run/canaries.py plants the canaries and reads the plugin's lines). Pure logic."""

from __future__ import annotations

import posixpath
import re

from attempts.core.test_ids import junit_name
from attempts.models import RunnerAccess

# Observations that fail a check when the task's runner_access is "fail": code of the agent's
# that, while the tests ran, walked the garbage collector, set a trace or profile hook (or an
# audit hook of its own), replaced a function's code, opened Boltz's own files, or imported the
# test runner's packages. Built code, frames and ctypes are shown, not failed: honest fixes use
# them.
FAILING_KINDS = {
    "gc": "walked the garbage collector",
    "trace": "set a trace, profile or audit hook",
    "code": "replaced a function's code",
    "boltz": "opened Boltz's own check files",
    "runner": "imported the test runner",
}


def _test_file(path: str) -> bool:
    name = posixpath.basename(path)
    return name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))


def trusted_files(task, workdir: str) -> list[str]:
    """The test files the check puts down itself (its hidden files), and those of its required
    tests, as absolute paths in the check's container."""
    paths = [p for p in task.check_file_paths or [] if _test_file(p)]
    paths += [t.split("::", 1)[0] for t in task.required_tests or [] if "::" in t]
    out = []
    for path in paths:
        full = path if path.startswith("/") else posixpath.join(workdir, path)
        full = posixpath.normpath(full)
        if _test_file(full) and full not in out:
            out.append(full)
    return out


def observed_problem(protection: dict, runner_access: str) -> str:
    """Why what the observer saw the agent's code do fails the check, or ""."""
    if runner_access != RunnerAccess.FAIL:
        return ""
    failing = [o for o in protection.get("observed_agent", []) if o.get("kind") in FAILING_KINDS]
    if not failing:
        return ""
    said = "; ".join(
        f"{o['file']}:{o['line']} {FAILING_KINDS[o['kind']]} ({o['what']})" for o in failing[:3]
    )
    more = f" and {len(failing) - 3} more" if len(failing) > 3 else ""
    return (
        f"the agent's code reached into the test runner while the tests ran: {said}{more}; "
        'a check fails because of it (the task says runner_access = "fail")'
    )


def learnt(protection: dict, passed: set[str]) -> tuple[list[str], str]:
    """From the validation reference's check: the canaries ("id#mutant") that failed while
    their real test passed, and a note of what that means for the task."""
    pool = sorted(
        {
            f"{c['node']}#{c['mutant']}"
            for c in protection.get("canaries", [])
            if c["id"] in passed and c["outcome"] == "failed"
        }
    )
    tests = {p.rsplit("#", 1)[0] for p in pool}
    if not pool:
        why = protection.get("why_no_canaries") or "no mutant of its tests failed"
        return [], f"its tests cannot be protected by canaries: {why}"
    return pool, f"{len(pool)} must-fail canaries over {len(tests)} test(s)"


_UNSTABLE = re.compile(r"0x[0-9a-fA-F]{4,}| object at ")


def pinned(task, passed: set[str], workdir: str) -> list[str]:
    """The tests every later check must run: those of the check's own files that passed with
    the reference, leaving out ids that name an object's address (they change run to run)."""
    root = workdir.rstrip("/") + "/"
    modules = set()
    for path in trusted_files(task, workdir):
        relative = path[len(root) :] if path.startswith(root) else path.lstrip("/")
        modules.add(junit_name(f"{relative}::x").split("::", 1)[0])
    chosen = []
    for name in sorted(passed):
        module = name.split("::", 1)[0]
        stable = "::" in name and not _UNSTABLE.search(name)
        if stable and any(module == m or module.startswith(m + ".") for m in modules):
            chosen.append(name)
    return chosen[:5000]
