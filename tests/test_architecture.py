"""The architecture in docs/ARCHITECTURE.md, kept true statically: each package imports only what
its row in the layers table allows, the web side never reaches the worker side or Docker (not
even inside a function), no import circle, exactly one module imports `docker`, and one name per
thing. Pure: reads the source, imports nothing of Boltz."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("attempts", "boltz_web", "boltz")
# The packages the web process loads (pages, API, admin, settings): none may reach these.
WORKER_SIDE = ("attempts.run",)
# One name on purpose: each importer's reader has the same two functions, and each subscriber to
# core.ended the same receiver.
SAME_NAME_BY_DESIGN = {"read_one", "task_values", "on_attempt_ended"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, at any level (inside functions too), but not under
    `if TYPE_CHECKING:`. Third-party modules are named by their top package."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = set()
    for block in ast.walk(tree):
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test):
            typing_only.update(id(n) for b in block.body for n in ast.walk(b))
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = name.split(".")
            if node.level:
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            subs = [f"{prefix}.{a.name}" for a in node.names if f"{prefix}.{a.name}" in MODULES]
            targets = subs or [prefix]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in PACKAGES:
                while target not in MODULES and "." in target:
                    target = target.rsplit(".", 1)[0]
                found.add(target)
            else:
                found.add(target.split(".")[0])
    found.discard(name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def group(module: str) -> str:
    """The row of the layers table a module belongs to."""
    parts = module.split(".")
    if parts[0] != "attempts":
        return parts[0]
    if len(parts) == 1:
        return "attempts"
    if parts[1] == "management":
        return "management"
    if parts[1] == "run" and len(parts) > 2 and parts[2] == "docker":
        return "run/docker"
    return parts[1]


def layers() -> dict[str, set[str]]:
    """The table in docs/ARCHITECTURE.md: each row's package and what it may import."""
    text = DOC.read_text()
    table = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    rules = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        name = cells[0].strip("`").rstrip("/").removeprefix("attempts/")
        rules[name] = set(re.findall(r"`([^`]+)`", cells[-1]))
    return rules


def _reach(starts) -> dict[str, list[str]]:
    """Every module reachable from `starts`, with one path to it."""
    paths = {s: [s] for s in starts}
    stack = list(starts)
    while stack:
        here = stack.pop()
        for there in GRAPH.get(here, ()):
            if there not in paths:
                paths[there] = paths[here] + [there]
                stack.append(there)
    return paths


def test_the_layers_table_names_every_package():
    rules = layers()
    groups = {group(m) for m in MODULES if m.startswith("attempts.")} - {"attempts"}
    assert groups <= set(rules), (
        f"packages missing from docs/ARCHITECTURE.md: {groups - set(rules)}"
    )
    assert set(rules) - groups <= {"boltz_web", "boltz"}, set(rules) - groups


def test_each_package_imports_only_what_its_row_allows():
    rules = layers()
    wrong = []
    for module, targets in sorted(GRAPH.items()):
        mine = group(module)
        if mine not in rules or rules[mine] == {"anything"}:
            continue
        for target in sorted(targets):
            theirs = group(target) if target.split(".")[0] in PACKAGES else target
            if target.split(".")[0] not in PACKAGES and theirs != "docker":
                continue  # the standard library and third-party packages
            if theirs != mine and theirs not in rules[mine]:
                wrong.append(f"{module} imports {target} ({mine} may not import {theirs})")
    assert not wrong, "\n".join(wrong)


def test_the_web_side_never_reaches_the_worker_side_or_docker_at_any_level():
    roots = [
        m
        for m in MODULES
        if m.startswith(("boltz_web", "attempts"))
        and not m.startswith(WORKER_SIDE)
        and group(m) not in ("management",)
        and m != "boltz_web.celery"
    ]
    reached = _reach(roots)
    bad = {m: p for m, p in reached.items() if m.startswith(WORKER_SIDE) or m == "docker"}
    assert not bad, "\n".join(" -> ".join(p) for p in bad.values())


def test_exactly_one_module_imports_docker():
    assert [m for m, t in GRAPH.items() if "docker" in t] == ["attempts.run.docker.runtime"]


def test_the_sdk_imports_nothing_of_the_server():
    for module, targets in GRAPH.items():
        if module.startswith("boltz."):
            assert not {t for t in targets if t.startswith(("attempts", "boltz_web"))}, module
            assert "django" not in targets and "docker" not in targets, module


def test_there_is_no_import_circle_even_inside_functions():
    index, low, on_stack, stack, circles = {}, {}, set(), [], []
    counter = iter(range(10**6))

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = next(counter)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH.get(node, ()):
            if nxt not in GRAPH:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert not circles, circles


def test_no_two_modules_have_names_that_differ_by_a_plural():
    names = defaultdict(set)
    for path in [*MODULES.values(), *(p for p in (ROOT / "attempts").rglob("*") if p.is_dir())]:
        if "__pycache__" in path.parts or "migrations" in path.parts or path.stem == "__init__":
            continue
        names[path.stem.removesuffix("s")].add(path.stem)
    assert not [n for n in names.values() if len(n) > 1], [n for n in names.values() if len(n) > 1]


@pytest.mark.parametrize("layer", ["services", "dispatch", "core", "run", "taskio", "exports"])
def test_below_the_entry_points_a_public_name_means_one_thing(layer):
    """Two `sandbox_delete`s in the services were two meanings of one name."""
    where = defaultdict(list)
    for module, path in MODULES.items():
        if not module.startswith("attempts.") or group(module) not in (
            "services",
            "dispatch",
            "core",
            "run",
            "run/docker",
            "taskio",
            "exports",
        ):
            continue
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and not node.name.startswith("_")
                and node.name not in SAME_NAME_BY_DESIGN
            ):
                where[node.name].append(module)
    twice = {
        n: ms
        for n, ms in where.items()
        if len(ms) > 1 and any(group(m).split("/")[0] == layer for m in ms)
    }
    assert not twice, twice


def test_the_docs_name_every_package_and_module_that_exists():
    text = DOC.read_text()
    missing = [
        m
        for m in MODULES
        if m.startswith("attempts.") and "management" not in m and m.rsplit(".", 1)[1] not in text
    ]
    assert not missing, f"docs/ARCHITECTURE.md does not mention: {missing}"
