"""Protected paths: globs over /workspace that are reset to the base before every check, so an
agent cannot pass by editing the tests or what configures the test runner. Pure logic.

A pattern is a path relative to /workspace. `*`, `?` and `[...]` match within one folder name;
a `**` segment matches any number of folders (none included). A pattern that matches a folder
protects everything in it. `**/conftest.py` protects every conftest.py; `tests` the whole tests
folder.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass

# Compiled files that could stand in for a test module: reset like the rest, but an agent that
# merely ran Python leaves them (ignored by .gitignore), which is not worth a reviewer's flag.
QUIET_PROTECTED = ("**/__pycache__", "**/*.pyc", "**/*.pyo")
# Files Python imports that no reviewer can read: a compiled extension next to an unchanged
# module is imported in its place. The check never uses one the agent added or changed unless
# the task allows compiled files (`compiled_files = "allow"`); the tamper report names them.
COMPILED = ("**/*.so", "**/*.pyd", "**/*.so.[0-9]*")
# Protected for every task: what pytest reads before it runs a test (conftest files and every
# spelling of its configuration files wherever they are, package metadata whose entry points
# load plugins, interpreter start-up hooks) and compiled files. Matched case-insensitively:
# importlib finds `X.DIST-INFO` as readily as `x.dist-info`.
CONFIG_PROTECTED = (
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/tox.ini",
    "**/setup.cfg",
    "**/pyproject.toml",
    "**/*.dist-info",
    "**/*.egg-info",
    "**/*.egg-link",
    "*.pth",
)
# Interpreter start-up hooks: protected, except where the repository itself has one in its
# base tree (its own code, which an honest fix may change).
STARTUP_HOOKS = ("**/sitecustomize.py", "**/usercustomize.py")
DEFAULT_PROTECTED = (*CONFIG_PROTECTED, *STARTUP_HOOKS, *QUIET_PROTECTED)
# `python -m pytest` puts /workspace first on sys.path: a module or package at its top named
# like pytest, one of its dependencies or a standard-library module would be imported instead
# of the real one, before any test runs. Protected only where the base has no such module: a
# repository whose own package is one of these (tomli, pluggy, more-itertools...) is fixed in
# that package like any other.
# Pytest and the modules it imports as it starts (across pytest 7 to 9).
PYTEST_MODULES = frozenset(
    {
        "pytest",
        "_pytest",
        "py",
        "pluggy",
        "iniconfig",
        "packaging",
        "exceptiongroup",
        "tomli",
        "colorama",
        "attr",
        "attrs",
        "more_itertools",
        "atomicwrites",
    }
)
SHADOWED_MODULES = frozenset(
    {*PYTEST_MODULES, *sys.stdlib_module_names}
    - {"test", "this", "antigravity", "idlelib", "turtledemo"}
)
# A folder the check's test files sit in is a test folder when one of its names says so; the
# whole folder is then the task's (reset to the base plus the hidden files before the check).
# A test file at the top, or in a package's own folder, protects only itself.
TEST_FOLDER_NAMES = re.compile(r"(?i)^(tests?|testing|test_.*|.*_tests?)$")


class PatternError(ValueError):
    """A protected-path pattern that cannot be used; the message says why."""


def check_pattern(pattern: str) -> str:
    """The pattern, cleaned (no trailing slash), or PatternError saying what is wrong."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise PatternError("a pattern must be a non-empty path")
    text = pattern.strip()
    if "\x00" in text or "\\" in text or "\n" in text:
        raise PatternError(f"{pattern!r} holds a NUL, a backslash or a newline")
    if text.startswith("/"):
        raise PatternError(f"{pattern!r} is absolute: give a path relative to /workspace")
    text = text.rstrip("/")
    segments = text.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise PatternError(f"{pattern!r} has an empty, '.' or '..' folder name")
        if "**" in segment and segment != "**":
            raise PatternError(f"{pattern!r}: '**' must be a whole folder name ('a/**/b')")
        if segment != "**":
            try:
                re.compile(_segment_regex(segment))
            except (PatternError, re.error):
                raise PatternError(f"{pattern!r} has an unclosed or empty '[...]'") from None
    if all(segment in ("*", "**") for segment in segments):
        raise PatternError(f"{pattern!r} would protect the whole tree")
    return text


def glob_literal(path: str) -> str:
    """A pattern that matches exactly `path` (its glob characters escaped)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def _segment_regex(segment: str) -> str:
    """One folder name's glob as a regex that never crosses a '/'."""
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            start = i + 1
            negate = segment[start : start + 1] == "!"
            start += negate
            first = start + (segment[start : start + 1] == "]")  # a ']' first is literal
            end = segment.find("]", first)
            if end < 0:
                raise PatternError(f"{segment!r} has an unclosed '['")
            body = "".join("\\" + c if c in "\\[]^" else c for c in segment[start:end])
            out.append("[" + ("^" if negate else "") + body + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _compile(pattern: str) -> re.Pattern:
    segments = pattern.split("/")
    while segments and segments[-1] == "**":  # 'tests/**' is the tests folder
        segments.pop()
    regex = ""
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            regex += "(?:[^/]+/)*"
        else:
            regex += _segment_regex(segment) + ("" if last else "/")
    # The pattern names a path or one of its folders: match it, or anything inside it. Case
    # does not matter: what pytest and importlib read is found in more than one spelling.
    return re.compile("(?si:" + regex + ")(?:/.*)?\\Z")


def ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def folders_of_tests(paths: Iterable[str]) -> frozenset[str]:
    """The test folders of a check's test files: each file's folder, when one of its names
    says it holds tests (`tests`, `testing`, `test_x`, `x_tests`)."""
    folders = set()
    for path in paths:
        folder = path.rpartition("/")[0]
        if folder and any(TEST_FOLDER_NAMES.match(name) for name in folder.split("/")):
            folders.add(folder)
    # A folder inside another test folder adds nothing.
    return frozenset(f for f in folders if not any(a in folders for a in ancestors(f)))


def check_command_paths(command: str, base: Iterable[str]) -> list[str]:
    """The base's files and folders a check command names (`pytest tests/test_a.py::t tests`),
    as file paths: a named folder gives a path inside it. Words that name nothing in the base
    are left out; a command that cannot be split names nothing."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return []
    files = set(base)
    folders = {a for p in files for a in ancestors(p)}
    named = []
    for word in words:
        path = word.split("::", 1)[0].rstrip("/")
        while path.startswith("./"):
            path = path[2:]
        path = path.removeprefix("/workspace/")
        if not path or path.startswith("-"):
            continue
        if path in files:
            named.append(path)
        elif path in folders:
            named.append(f"{path}/*")
    return named


@dataclass(frozen=True)
class Protection:
    """The protected paths of a task: patterns and literal paths (hidden check files), the
    test folders that belong to the task, and the modules that would shadow what pytest
    imports. `base`: the base tree's paths; a default never covers the repository's own code
    there (a top-level module, a start-up hook it has)."""

    patterns: tuple[str, ...]
    literal: frozenset[str] = frozenset()
    top_level_modules: frozenset[str] = frozenset()  # name.py or name/ at the top of the tree
    folders: frozenset[str] = frozenset()  # test folders: everything in them is the task's
    base: frozenset[str] = frozenset()
    compiled: bool = True  # compiled files (.so, .pyd) are protected

    def __post_init__(self):
        patterns = [*self.patterns, *(COMPILED if self.compiled else ())]
        object.__setattr__(self, "_regexes", tuple(_compile(p) for p in patterns))
        hooks = tuple(_compile(p) for p in STARTUP_HOOKS)
        object.__setattr__(self, "_hooks", hooks)
        own = {p.split("/", 1)[0] for p in self.base}
        object.__setattr__(self, "_own", {n[:-3] if n.endswith(".py") else n for n in own})

    def covers(self, path: str) -> bool:
        if path in self.literal or any(path.startswith(p + "/") for p in self.literal):
            return True
        if any(path.startswith(f + "/") for f in self.folders):
            return True
        if self.top_level_modules:
            top, inside, _rest = path.partition("/")
            name = top[:-3] if top.endswith(".py") and not inside else top
            if name in self.top_level_modules and name not in self._own:  # type: ignore[attr-defined]
                return True
        for regex in self._regexes:  # type: ignore[attr-defined]
            if regex.match(path):
                if path in self.base and any(h.match(path) for h in self._hooks):  # type: ignore[attr-defined]
                    continue  # the repository's own start-up hook
                return True
        return False

    def select(self, paths: Iterable[str]) -> list[str]:
        return sorted(p for p in paths if self.covers(p))


def protection_for(
    protected_paths: Iterable[str],
    hidden_paths: Iterable[str] = (),
    removed: Iterable[str] = (),
    *,
    base: Iterable[str] = (),
    check_command: str = "",
    agent_writes_tests: bool = False,
    compiled_files: str = "remove",
) -> Protection:
    """Every task's defaults, the task's own patterns, its hidden check files, the paths its
    check removes and (unless the task asks the agent to write tests) the test folders of the
    files its check runs: its hidden files, the paths it removes, the literal paths it
    protects and what its check command names. `base`: the paths of the base tree, so no
    default covers the repository's own code."""
    hidden, removed, base = list(hidden_paths), list(removed), frozenset(base)
    patterns = tuple(dict.fromkeys([*DEFAULT_PROTECTED, *protected_paths]))
    literal_files = [p for p in protected_paths if not re.search(r"[*?\[]", p)]
    named = check_command_paths(check_command, base) if check_command else []
    folders = (
        frozenset()
        if agent_writes_tests
        else folders_of_tests([*hidden, *removed, *literal_files, *named])
    )
    return Protection(
        patterns,
        frozenset([*hidden, *removed]),
        SHADOWED_MODULES,
        folders=folders,
        base=base,
        compiled=compiled_files != "allow",
    )


def changes_to(
    protection: Protection,
    *,
    base: dict[str, str],
    final: dict[str, str],
    ignored: Iterable[str] = (),
) -> list[dict]:
    """What the agent did to protected paths: base and final map path -> a content id (mode and
    object id); `ignored` are files in the agent's tree that .gitignore kept out of `final`.
    Returns [{path, change}] with change one of added, modified, deleted, added (ignored)."""
    report = []
    for path in protection.select(set(base) | set(final)):
        if path not in final:
            report.append({"path": path, "change": "deleted"})
        elif path not in base:
            report.append({"path": path, "change": "added"})
        elif base[path] != final[path]:
            report.append({"path": path, "change": "modified"})
    quiet = Protection(QUIET_PROTECTED, compiled=False)
    for path in protection.select(set(ignored) - set(base)):
        if not quiet.covers(path):
            report.append({"path": path, "change": "added (ignored by .gitignore)"})
    return sorted(report, key=lambda r: r["path"])


@dataclass
class ResetPlan:
    """How to reset the protected paths of a tree: `remove` these paths (with `folders`, the
    removed folders, and `parents`, the folders they sit in, made writable first), then put
    the base's version of `restore` back."""

    remove: list[str]
    restore: list[str]
    parents: list[str]
    folders: list[str]


def reset_plan(
    protection: Protection,
    *,
    entries: dict[str, str],
    base: Iterable[str],
    targets: Iterable[str] = (),
) -> ResetPlan:
    """`entries`: the tree as it is now (path -> file, dir, link or other); `base`: the base's
    files; `targets`: paths about to be written (hidden check files) or removed. Everything
    protected is removed, and so is anything in the way of a path to write: a link or a file
    where a folder should be, a folder where a file should be."""
    restore = protection.select(base)
    remove = {path for path in entries if protection.covers(path)}
    for target in {*restore, *targets}:
        for ancestor in ancestors(target):
            if entries.get(ancestor, "dir") != "dir":
                remove.add(ancestor)
        if entries.get(target) == "dir":
            remove.add(target)
    minimal = sorted(p for p in remove if not any(a in remove for a in ancestors(p)))
    parents = sorted({a for p in minimal for a in ancestors(p) if entries.get(a) == "dir"})
    folders = [p for p in minimal if entries.get(p) == "dir"]
    return ResetPlan(minimal, restore, parents, folders)


def task_protection(task, base: Iterable[str]) -> Protection:
    """A task's protected paths over its base tree's paths."""
    return protection_for(
        task.protected_paths,
        task.check_file_paths,
        task.check_removed_paths,
        base=base,
        check_command=task.check_command if task.layout != "harbor" else "",
        agent_writes_tests=task.agent_writes_tests,
        compiled_files=task.compiled_files,
    )
