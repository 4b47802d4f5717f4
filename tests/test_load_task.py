"""Loading task directories: what is refused, with the field to fix named."""

from __future__ import annotations

import subprocess

import pytest
from django.core.management import CommandError, call_command

from attempts.models import Task

pytestmark = [pytest.mark.django_db, pytest.mark.docker]


def load(path):
    call_command("load_task", str(path))


def test_it_loads_an_example_and_is_idempotent(docker_ready, task_dir, capsys):
    path = task_dir("text-utils")
    load(path)
    load(path)
    out = capsys.readouterr().out
    assert "created task text-utils" in out and "updated task text-utils" in out
    task = Task.objects.get(slug="text-utils")
    assert len(task.base_commit) == 40
    assert task.check_file_paths == ["tests/test_textutils.py"]
    assert task.reference_patch.startswith("diff --git")
    assert Task.objects.count() == 1


def test_it_loads_a_git_repository_at_a_named_ref(docker_ready, task_dir, tmp_path):
    path = task_dir("fix-add")
    repo = tmp_path / "upstream"
    subprocess.run(["cp", "-r", str(path / "repo"), str(repo)], check=True)
    for cmd in (
        ["git", "init", "-q", "-b", "trunk"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
        ["git", "tag", "v1"],
    ):
        subprocess.run(cmd, cwd=repo, check=True)
    toml = (path / "task.toml").read_text().replace('path = "repo"', f'path = "{repo}"\nref = "v1"')
    (path / "task.toml").write_text(toml)
    load(path)
    task = Task.objects.get(slug="fix-add")
    head = subprocess.run(["git", "rev-parse", "v1"], cwd=repo, capture_output=True, text=True)
    assert task.base_commit == head.stdout.strip() and task.base_ref == "v1"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (('path = "repo"', 'path = "/nonexistent/repo"'), "repository.path"),
        (('path = "repo"', 'url = "/nonexistent/repo.git"'), "repository"),
        (('check = "python3', 'image = "no-such-image:1"\ncheck = "python3'), "image"),
        (('check = "python3 -m pytest -q -p no:cacheprovider tests"', 'check = "  "'), "check"),
        (("pids = 256", "pids = 256\nbogus = 1"), "limits.bogus"),
        (('memory = "512m"', 'memory = "lots"'), "limits.memory"),
        (('check = "python3', 'protected_paths = ["**/*"]\ncheck = "python3'), "protected_paths"),
        (('check = "python3', 'protected_paths = ["../x"]\ncheck = "python3'), "protected_paths"),
        (('check = "python3', 'check_mode = "sideways"\ncheck = "python3'), "check_mode"),
        (('check = "python3', 'reward_file = "yes"\ncheck = "python3'), "reward_file"),
    ],
)
def test_it_refuses_bad_tasks_naming_the_field(docker_ready, task_dir, change, field, capsys):
    path = task_dir("fix-add")
    text = (path / "task.toml").read_text()
    assert change[0] in text
    (path / "task.toml").write_text(text.replace(change[0], change[1]))
    with pytest.raises(CommandError):
        load(path)
    assert f"refused: {field}: " in capsys.readouterr().err
    assert not Task.objects.exists()


def test_refusal_message_names_the_field(docker_ready, task_dir, capsys):
    path = task_dir("fix-add")
    text = (path / "task.toml").read_text()
    (path / "task.toml").write_text(
        text.replace('check = "python3', 'image = "nope:1"\ncheck = "python3')
    )
    with pytest.raises(CommandError):
        load(path)
    assert "refused: image: nope:1 is not on this Docker host" in capsys.readouterr().err


def test_it_refuses_a_ref_that_does_not_exist(docker_ready, task_dir, tmp_path, capsys):
    path = task_dir("fix-add")
    repo = tmp_path / "upstream"
    subprocess.run(["cp", "-r", str(path / "repo"), str(repo)], check=True)
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
    ):
        subprocess.run(cmd, cwd=repo, check=True)
    text = (path / "task.toml").read_text()
    (path / "task.toml").write_text(text.replace('path = "repo"', f'path = "{repo}"\nref = "nope"'))
    with pytest.raises(CommandError):
        load(path)
    assert "refused: repository.ref: 'nope' does not exist" in capsys.readouterr().err


def test_it_refuses_a_reference_patch_that_does_not_apply(docker_ready, task_dir, capsys):
    path = task_dir("fix-add")
    (path / "solution.patch").write_text(
        (path / "solution.patch").read_text().replace("return a - b", "return a * b")
    )
    with pytest.raises(CommandError):
        load(path)
    assert "refused: reference: solution.patch does not apply" in capsys.readouterr().err
