"""SWE-bench rows protect every test file they name, even when the test patch only adds data:
an agent that edits a failing test to pass fails, and the test patch's deletions are applied."""

from __future__ import annotations

import json
import textwrap
from io import StringIO

import pytest
from django.core.management import call_command

from attempts.models import Outcome, Task
from attempts.services.attempts import attempt_create
from attempts.taskio.repos import git
from tests.conftest import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}
TESTS = textwrap.dedent(
    """
    import os

    from calc import add


    def test_add():
        assert add(2, 3) == 5


    def test_old_data_is_gone():
        assert not os.path.exists(os.path.join(os.path.dirname(__file__), "old_data.txt"))


    def test_data_is_there():
        assert os.path.exists(os.path.join(os.path.dirname(__file__), "data.txt"))
    """
)


def _diff(repo, change) -> str:
    """The patch `change()` makes to the repository's base (which is then restored)."""
    change()
    git("add", "-A", cwd=repo)
    patch = git("diff", "--cached", "--binary", cwd=repo)
    git("reset", "-q", "--hard", "HEAD", cwd=repo)
    return patch


@pytest.fixture
def row_file(tmp_path, docker_ready):
    repos = tmp_path / "repos"
    repo = repos / "acme__data"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / "tests" / "old_data.txt").write_text("old\n")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "base", cwd=repo, env=ENV)
    base = git("rev-parse", "HEAD", cwd=repo).strip()

    def gold():
        (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")

    def test_patch():  # only data: adds one file, deletes another
        (repo / "tests" / "data.txt").write_text("new\n")
        (repo / "tests" / "old_data.txt").unlink()

    row = {
        "instance_id": "acme__data-1",
        "repo": "acme/data",
        "base_commit": base,
        "problem_statement": "add() subtracts.",
        "patch": _diff(repo, gold),
        "test_patch": _diff(repo, test_patch),
        "FAIL_TO_PASS": json.dumps(
            [
                "tests/test_calc.py::test_add",
                "tests/test_calc.py::test_old_data_is_gone",
                "tests/test_calc.py::test_data_is_there",
            ]
        ),
        "PASS_TO_PASS": "[]",
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path, repos


def test_edited_tests_do_not_pass_and_the_test_patch_deletions_apply(worker, row_file):
    path, repos = row_file
    out = StringIO()
    call_command("import_tasks", str(path), "--repos", str(repos), stdout=out)
    task = Task.objects.get(slug="acme__data-1")
    assert task.check_file_paths == ["tests/data.txt"]  # the hidden files miss the test module
    assert task.protected_paths == ["tests/data.txt", "tests/old_data.txt", "tests/test_calc.py"]
    assert task.check_removed_paths == ["tests/old_data.txt"]

    def command(script):
        return attempt_create(task=task, agent="command", command=script)

    attempts = wait_finished(
        [
            attempt_create(task=task, agent="reference"),
            attempt_create(task=task, agent="noop"),
            # Replaces the failing test's body instead of fixing the code.
            command("sed -i 's/assert add(2, 3) == 5/pass/' tests/test_calc.py"),
            # Fixes the code, and puts back the file the test patch deletes.
            command("sed -i 's/a - b/a + b/' calc.py && echo back > tests/old_data.txt"),
        ],
        timeout=150,
    )
    reference, noop, cheater, fixer = attempts
    assert reference.outcome == Outcome.PASSED, reference.checks.get().output
    assert noop.outcome == Outcome.FAILED and noop.score == pytest.approx(2 / 3)
    assert noop.checks.get().summary == (
        "2 of 3 required tests passed; not passing: tests.test_calc::test_add"
    )
    assert cheater.outcome == Outcome.FAILED
    assert cheater.tamper["protected"] == [{"path": "tests/test_calc.py", "change": "modified"}]
    assert "-    assert add(2, 3) == 5\n+    pass" in cheater.diff  # the page shows the attempt
    assert fixer.outcome == Outcome.PASSED, fixer.checks.get().output
    assert fixer.tamper["protected"] == [{"path": "tests/old_data.txt", "change": "modified"}]
