"""SWE-bench imports: local repositories may be bare (owner__name.git and the like), a missing
one is refused with every place looked at, and the report names the image chosen when
--image is not given."""

from __future__ import annotations

import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from attempts.core.errors import TaskInvalid
from attempts.models import Task
from attempts.taskio.importers.swebench import find_repo
from attempts.taskio.repos import commit_folder

DATA = Path(__file__).parent / "data" / "swebench"
BASE = "e55ca5df802ebe4950358d2d6aae2d0359b2de23"  # the commit rows.jsonl names


def git(*args, cwd=None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def bare(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    git("init", "--quiet", "--bare", str(path))
    return path


@pytest.mark.parametrize("layout", ["acme__calc.git", "calc.git", "acme/calc.git", "acme__calc"])
def test_a_bare_repository_is_found_under_each_name(tmp_path, layout):
    repos = tmp_path / "repos"
    expected = bare(repos / layout)
    assert find_repo("acme/calc", repos) == expected


def test_the_owner_and_name_come_before_the_name_alone_bare_or_not(tmp_path):
    repos = tmp_path / "repos"
    git("init", "--quiet", str(repos / "calc"))
    assert find_repo("acme/calc", repos) == repos / "calc"
    bare(repos / "acme__calc.git")
    assert find_repo("acme/calc", repos) == repos / "acme__calc.git"
    git("init", "--quiet", str(repos / "acme__calc"))
    assert find_repo("acme/calc", repos) == repos / "acme__calc"


def test_the_refusal_lists_every_place_it_looked(tmp_path):
    repos = tmp_path / "repos"
    (repos / "calc").mkdir(parents=True)  # a folder, but not a repository
    with pytest.raises(TaskInvalid) as refused:
        find_repo("acme/calc", repos)
    assert refused.value.field == "repo"
    assert refused.value.message == (
        "acme/calc has no local clone (a clone, or a bare repository); looked for "
        f"{repos}/acme__calc, {repos}/acme__calc.git, {repos}/acme/calc, {repos}/acme/calc.git, "
        f"{repos}/calc (there, but not a git repository), {repos}/calc.git"
    )


@pytest.fixture
def bare_repos(tmp_path):
    """DIR/acme__calc.git: a bare clone of the repository rows.jsonl names."""
    source = tmp_path / "src"
    assert commit_folder(DATA / "repos_src" / "acme__calc", source) == BASE
    repos = tmp_path / "repos"
    repos.mkdir()
    git("clone", "--quiet", "--bare", str(source), str(repos / "acme__calc.git"))
    return repos


def run_import(*args) -> str:
    out = StringIO()
    call_command("import_tasks", *map(str, args), stdout=out)
    return out.getvalue()


@pytest.mark.django_db
@pytest.mark.docker
def test_rows_import_from_a_bare_clone_and_the_report_names_the_default_image(
    docker_ready, bare_repos
):
    lines = run_import(DATA / "rows.jsonl", "--repos", bare_repos).splitlines()
    assert lines[0] == (
        f"image: {settings.BOLTZ_DEFAULT_IMAGE} (the default; use --image to choose)"
    )
    assert "created acme__calc-1" in lines
    assert any(
        line.startswith(
            "refused rows.jsonl:3: repo: ghost/lib has no local clone (a clone, or a bare "
            f"repository); looked for {bare_repos}/ghost__lib, {bare_repos}/ghost__lib.git, "
        )
        for line in lines
    )
    task = Task.objects.get(slug="acme__calc-1")
    assert task.repo_url == str(bare_repos / "acme__calc.git") and task.base_commit == BASE
    assert task.image == "" and task.image_name == settings.BOLTZ_DEFAULT_IMAGE
    assert task.check_file_paths == ["tests/test_calc.py"]


@pytest.mark.django_db
@pytest.mark.docker
def test_an_image_given_is_not_reported_as_the_default(docker_ready, bare_repos):
    out = run_import(
        DATA / "rows.jsonl", "--repos", bare_repos, "--image", settings.BOLTZ_DEFAULT_IMAGE
    )
    assert "image:" not in out and "updated acme__calc-1" not in out
    assert "created acme__calc-1" in out


@pytest.mark.django_db
def test_a_refused_import_still_says_which_image_it_would_have_used(tmp_path):
    out = StringIO()
    with pytest.raises(CommandError, match="nothing was imported"):
        call_command("import_tasks", str(DATA / "rows.jsonl"), "--repos", str(tmp_path), stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"image: {settings.BOLTZ_DEFAULT_IMAGE} (the default; use --image to choose)"
    assert lines[-1] == "0 created, 0 updated, 3 refused"


@pytest.mark.django_db
@pytest.mark.docker
def test_the_admin_import_report_names_the_default_image(admin_client, docker_ready, bare_repos):
    response = admin_client.post(
        "/admin/attempts/task/import/",
        {
            "upload": SimpleUploadedFile("rows.jsonl", (DATA / "rows.jsonl").read_bytes()),
            "repos": str(bare_repos),
        },
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert (
        f"<li>image: {settings.BOLTZ_DEFAULT_IMAGE} (the default; fill in Image to choose)</li>"
        in html
    )
    assert "<li>created acme__calc-1</li>" in html
