"""SWE-bench style JSONL: one task instance a line.

Fields used: instance_id, repo, base_commit, problem_statement, patch, test_patch,
FAIL_TO_PASS, PASS_TO_PASS (lists, or JSON strings of lists, as the published datasets have).
The problem statement becomes the instruction, `patch` the reference, the files `test_patch`
writes become the hidden check files, and the check passes exactly when every FAIL_TO_PASS and
PASS_TO_PASS test passes. With no network, `repo` ("owner/name") is found as a local clone
under the repos folder: DIR/owner__name, DIR/owner/name or DIR/name, each a working clone or
a bare repository, and each also with .git at the end (DIR/owner__name.git, ...). Without
--image the tasks run in the default image, and the report says which.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path

from django.conf import settings
from django.utils.text import slugify

from attempts.core.errors import TaskInvalid
from attempts.core.protected import glob_literal
from attempts.taskio import repos
from attempts.taskio.folders import (
    check_reference_is_honest,
    reference_applies_in,
    require_image,
    storable_text,
)
from attempts.taskio.importers.items import ImportItem, guarded

REQUIRED = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
DEFAULT_TEST_CMD = (
    "python3 -m pytest -q -p no:cacheprovider -rA --junitxml=$BOLTZ_CHECK_DIR/junit.xml {files}"
)


def read(
    path: Path, *, repos_dir: Path | None = None, image: str = "", test_cmd: str = "", **_options
) -> list[ImportItem]:
    items = []
    repos_dir = repos_dir or (
        Path(settings.BOLTZ_SWEBENCH_REPOS) if settings.BOLTZ_SWEBENCH_REPOS else None
    )
    if repos_dir is not None:  # tasks keep the clone's path: whole, for every process
        repos_dir = Path(repos_dir).resolve()
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            source = f"{path.name}:{number}"
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:  # also too deep, or too long a number
                deep = isinstance(exc, RecursionError)
                why = "nested too deeply" if deep else getattr(exc, "msg", str(exc))
                items.append(ImportItem(source, refused=f"line {number} is not JSON: {why}"))
                continue
            if not isinstance(row, dict):
                items.append(ImportItem(source, refused=f"line {number} is not a JSON object"))
                continue
            items.append(
                guarded(
                    source,
                    lambda row=row: task_values(
                        row, repos_dir=repos_dir, image=image, test_cmd=test_cmd
                    ),
                )
            )
    return items


def _test_list(row: dict, key: str) -> list[str]:
    value = row[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise TaskInvalid(key, "must be a list of test ids (or a JSON string of one)") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskInvalid(key, "must be a list of test ids")
    if any("\0" in v for v in value):
        raise TaskInvalid(key, "a test id holds a NUL byte")
    return value


def find_repo(repo: str, repos_dir: Path | None) -> Path:
    if repos_dir is None:
        raise TaskInvalid(
            "repo",
            f"{repo}: no local clones folder given (use --repos DIR or "
            "BOLTZ_SWEBENCH_REPOS); this machine cannot fetch it",
        )
    owner, _, name = repo.partition("/")
    if name:
        places = [repos_dir / f"{owner}__{name}", repos_dir / owner / name, repos_dir / name]
    else:  # no owner given: the name alone
        places = [repos_dir / owner]
    candidates = [p for place in places for p in (place, place.with_name(place.name + ".git"))]
    for candidate in candidates:
        if _is_repository(candidate):
            return candidate
    looked = ", ".join(
        f"{c} (there, but not a git repository)" if c.exists() else str(c) for c in candidates
    )
    raise TaskInvalid(
        "repo", f"{repo} has no local clone (a clone, or a bare repository); looked for {looked}"
    )


def _is_repository(path: Path) -> bool:
    """A working clone (with .git) or a bare repository (HEAD and objects/ at its top)."""
    return (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())


def _text(row: dict, key: str, *, most: int = 10**8) -> str:
    """A string field of the row: no NUL byte (no database keeps one), at most `most` long."""
    value = row[key]
    if not isinstance(value, str):
        raise TaskInvalid(key, f"must be a string, not {type(value).__name__}")
    return storable_text(value, key, most=most)


def task_values(row: dict, *, repos_dir: Path | None, image: str, test_cmd: str) -> dict:
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise TaskInvalid(missing[0], f"missing (a SWE-bench row needs {', '.join(REQUIRED)})")
    instance_id = _text(row, "instance_id", most=200)
    slug = slugify(instance_id)[:100]
    if not slug:
        raise TaskInvalid("instance_id", f"{instance_id!r} holds no letter or digit")
    repo, base_ref = _text(row, "repo", most=1000), _text(row, "base_commit", most=255)
    instruction, patch = _text(row, "problem_statement"), _text(row, "patch")
    test_patch = _text(row, "test_patch")
    f2p, p2p = _test_list(row, "FAIL_TO_PASS"), _test_list(row, "PASS_TO_PASS")
    if not f2p:
        raise TaskInvalid("FAIL_TO_PASS", "is empty: nothing would show the fix works")
    repo_path = find_repo(repo, repos_dir)
    try:
        commit = repos.resolve_ref(str(repo_path), base_ref)
    except TaskInvalid as exc:
        raise TaskInvalid("base_commit", exc.message) from None
    require_image(image, hint="use --image")
    with repos.checked_out(str(repo_path), commit) as tree:  # one checkout for both patches
        reference_applies_in(tree, patch)
        base = [p for p in repos.git("ls-files", "-z", cwd=tree).split("\0") if p]
        check_files, check_paths, deleted = _files_after(tree, test_patch)
    test_files = sorted({t.split("::", 1)[0] for t in f2p + p2p})
    # Every test file the check runs or the test patch touches is reset to the base (plus the
    # hidden files) before the check, so an agent cannot pass by editing a test.
    protected = sorted({*test_files, *check_paths, *deleted})
    files = " ".join(shlex.quote(name) for name in test_files)  # a name is one argument
    command = (test_cmd or DEFAULT_TEST_CMD).format(files=files)
    values = {
        "slug": slug,
        "title": instance_id,
        "instruction": instruction,
        "repo_url": str(repo_path),
        "base_ref": base_ref,
        "base_commit": commit,
        "image": image,
        "check_command": command,
        "check_files": check_files,
        "check_file_paths": check_paths,
        "reference_patch": patch,
        "required_tests": f2p + p2p,
        "protected_paths": [glob_literal(p) for p in protected],
        "check_removed_paths": deleted,
        "source_dir": f"swe-bench:{instance_id}",
    }
    # No honest fix is reset, and the gold patch does not reach into the test runner.
    check_reference_is_honest(values, base, field="patch")
    return values


def _files_after(tree: Path, test_patch: str) -> tuple[bytes, list[str], list[str]]:
    """The files test_patch adds or changes, as they are once it is applied to the base
    (`tree`, checked out at the base commit; the patch is applied in it), and the files it
    deletes."""
    with tempfile.TemporaryDirectory(dir=settings.DATA_DIR) as scratch:
        patch = Path(scratch) / "test.patch"
        patch.write_text(test_patch)
        try:
            repos.git("apply", str(patch), cwd=tree)
        except repos.GitError as exc:
            raise TaskInvalid("test_patch", f"does not apply to base_commit: {exc}") from None
        names = repos.git("apply", "--numstat", "-z", str(patch), cwd=tree).split("\0")
        out = Path(scratch) / "check"
        deleted = []
        for line in names:
            rel = line.split("\t")[-1]
            if not rel:
                continue
            source = tree / rel
            if source.is_file():
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                (out / rel).write_bytes(source.read_bytes())
            elif not source.exists():
                deleted.append(rel)
        if not out.exists() and not deleted:
            raise TaskInvalid("test_patch", "writes no files")
        out.mkdir(exist_ok=True)
        check_files, paths = repos.tar_folder(out, prefix="workspace/")
        return check_files, paths, sorted(deleted)
