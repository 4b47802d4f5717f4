"""Harbor / Terminal-Bench style task directories:

    instruction.md          what the agent is told
    task.toml               [agent] timeout_sec, [verifier] timeout_sec,
                            [environment] docker_image, cpus, memory_mb, allow_internet
    tests/test.sh           the verifier: writes /logs/verifier/reward.txt (or reward.json)
    solution/solve.sh       the reference solution (a script)

Boltz runs it like this: the image named in [environment] (any image the hosts have: Boltz
does not build environment/Dockerfile), an empty git repository in /workspace so the agent's
changes there show as a diff, tests/ as hidden check files restored to /workspace/tests, and
solve.sh as the reference agent. Checks run as the sandbox user, not root, so in the test
scripts /logs/verifier becomes $BOLTZ_CHECK_DIR (where Boltz reads reward.txt/reward.json) and
/tests becomes /workspace/tests; the import notes this in the task.s
`source_dir`. Tasks that need root or network in their verifier will fail validation.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from pathlib import Path

from django.conf import settings
from django.utils.text import slugify

from .. import repos
from ..errors import TaskInvalid
from ..taskdirs import require_image
from . import ImportItem, guarded

CHECK = "cd /workspace && bash tests/test.sh"
_REWRITES = (
    (re.compile(r"/logs/verifier"), "$BOLTZ_CHECK_DIR"),
    (re.compile(r"(?<![\w/])/tests/"), "/workspace/tests/"),
)


def read_one(path: Path, **_options) -> ImportItem:
    return guarded(str(path), lambda: task_values(path))


def _number(table: dict, key: str, where: str, default):
    value = table.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise TaskInvalid(f"{where}.{key}", f"{value!r}: expected a positive number")
    return value


def _rewrite(text: str) -> str:
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    return text


def task_values(path: Path) -> dict:
    try:
        spec = tomllib.loads((path / "task.toml").read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskInvalid("task.toml", f"not valid TOML: {exc}") from None
    instruction = (path / "instruction.md").read_text().strip()
    if not instruction:
        raise TaskInvalid("instruction.md", "is empty")
    env = spec.get("environment", {}) or {}
    image = env.get("docker_image") or env.get("image") or ""
    if not image:
        raise TaskInvalid(
            "environment.docker_image",
            "not set: Boltz runs images the worker "
            "hosts have and does not build environment/Dockerfile",
        )
    require_image(image, field="environment.docker_image", hint="build it on every worker host")
    tests = path / "tests"
    if not (tests / "test.sh").is_file():
        raise TaskInvalid("tests/test.sh", "missing: it is the task's verifier")
    slug = slugify(str(spec.get("metadata", {}).get("name") or path.name))[:100]
    with tempfile.TemporaryDirectory(dir=settings.DATA_DIR) as scratch:
        check = Path(scratch) / "tests"
        for source in sorted(tests.rglob("*")):
            target = check / source.relative_to(tests)
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                data = source.read_bytes()
                if source.suffix in (".sh", ".py", ""):
                    data = _rewrite(data.decode("utf-8", errors="surrogateescape")).encode(
                        "utf-8", errors="surrogateescape"
                    )
                target.write_bytes(data)
        check_files, check_paths = repos.tar_folder(Path(scratch), prefix="workspace/")
        empty = Path(scratch) / "empty"
        empty.mkdir()
        repo_url = repos.repository_from_folder(empty, slug)
    solve = path / "solution" / "solve.sh"
    agent, verifier = spec.get("agent", {}) or {}, spec.get("verifier", {}) or {}
    return {
        "slug": slug,
        "title": str(spec.get("metadata", {}).get("title") or path.name),
        "instruction": instruction,
        "repo_url": repo_url,
        "base_ref": "HEAD",
        "base_commit": repos.resolve_ref(repo_url, "HEAD"),
        "image": image,
        "check_command": CHECK,
        # Harbor's verifiers check the container's own state, and write the reward.
        "check_mode": "in_place",
        "reward_file": True,
        "protected_paths": ["tests"],
        "check_files": check_files,
        "check_file_paths": check_paths,
        "reference_patch": "",
        "reference_script": solve.read_text() if solve.is_file() else "",
        "agent_timeout": float(_number(agent, "timeout_sec", "agent", 600)),
        "check_timeout": float(_number(verifier, "timeout_sec", "verifier", 600)),
        "cpus": float(_number(env, "cpus", "environment", 1)),
        "memory_bytes": int(_number(env, "memory_mb", "environment", 1024)) * 1024 * 1024,
        "network": bool(env.get("allow_internet", False)),
        "source_dir": f"harbor:{path} (tests' /logs/verifier and /tests paths rewritten)",
    }
