"""Resolving refs against the repository mirror cache."""

from __future__ import annotations

import subprocess

import pytest

from attempts.core.errors import TaskInvalid
from attempts.taskio import repos


@pytest.fixture
def repo(tmp_path, settings):
    settings.BOLTZ_REPO_CACHE = tmp_path / "cache"
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")
    path = tmp_path / "repo"
    repos.commit_folder(folder, path)
    return path


def commit(path, text: str) -> str:
    (path / "a.txt").write_text(text)
    run = {"cwd": path, "check": True, "capture_output": True, "text": True}
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", text], **run
    )
    return subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()


def test_a_branch_is_fetched_fresh_and_a_known_commit_id_is_not(repo, monkeypatch):
    first = repos.resolve_ref(str(repo), "main")
    second = commit(repo, "two\n")
    assert repos.resolve_ref(str(repo), "main") == second  # the branch moved: fetched again

    calls = []
    real_git = repos.git
    monkeypatch.setattr(repos, "git", lambda *a, **k: calls.append(a) or real_git(*a, **k))
    assert repos.resolve_ref(str(repo), first) == first
    assert ("remote", "update", "--prune") not in calls  # a commit id never moves

    third = commit(repo, "three\n")  # not in the mirror yet: fetched on demand
    assert repos.resolve_ref(str(repo), third) == third
    assert ("remote", "update", "--prune") in calls


def test_an_unknown_commit_id_is_refused(repo):
    with pytest.raises(TaskInvalid, match="does not exist"):
        repos.resolve_ref(str(repo), "0" * 40)
