"""The task's runner_access setting and "no honest fix is reset": a reference that changes a
protected path, or reaches into the test runner while the task says "fail", is refused where
tasks are loaded (task.toml, the admin form, SWE-bench import), naming the path or file:line.
The tamper report's runner_access findings show on the attempt page (escaped), in the
task's attempts table and in every export. Pipeline runs are in test_redteam.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from attempts.exports.bundle import tamper_record
from attempts.exports.datasets import attempts_line
from attempts.models import Task
from attempts.taskio.folders import check_reference_is_honest
from tests.conftest import EXAMPLES, new_task
from tests.test_admin_tasks import form_data, host_images, post_task, repo_zip  # noqa: F401
from tests.test_attempt_page import make_attempt

pytestmark = [pytest.mark.django_db]

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
GIT_ENV |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def diff_of(repo: Path, edits: dict[str, str], tmp_path: Path) -> str:
    """A patch of `edits` (path -> new text) against a copy of `repo` (plain files)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    work = tmp_path / "edit"
    subprocess.run(["cp", "-r", str(repo), str(work)], check=True)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "b"]):
        subprocess.run(cmd, cwd=work, check=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"})
    for path, text in edits.items():
        (work / path).write_text(text)
    return subprocess.run(
        ["git", "diff"], cwd=work, check=True, capture_output=True, text=True
    ).stdout


CALC = (EXAMPLES / "fix-add" / "repo" / "calc.py").read_text()
FIXED = CALC.replace("return a - b", "return a + b")
TESTS = (EXAMPLES / "fix-add" / "repo" / "tests" / "test_calc.py").read_text()
REACHING = FIXED + "import os\nos._exit(0)\n"


def load(path: Path) -> None:
    call_command("load_task", str(path))


# --- load time ---------------------------------------------------------------------------------


@pytest.mark.docker
def test_a_reference_that_changes_a_protected_path_is_refused(
    docker_ready, task_dir, tmp_path, capsys
):
    path = task_dir("fix-add")
    edits = {"calc.py": FIXED, "tests/test_calc.py": TESTS + "\n\ndef test_more():\n    pass\n"}
    (path / "solution.patch").write_text(diff_of(path / "repo", edits, tmp_path))
    with pytest.raises(CommandError):
        load(path)
    err = capsys.readouterr().err
    assert (
        "refused: reference: the reference solution changes protected path(s) "
        "tests/test_calc.py, which are reset to the base before every check: it could never "
        "pass; unprotect them or change the reference"
    ) in err, err
    assert not Task.objects.exists()


@pytest.mark.docker
def test_a_reference_that_reaches_into_the_runner_is_refused_unless_allowed(
    docker_ready, task_dir, tmp_path, capsys
):
    path = task_dir("fix-add")
    (path / "solution.patch").write_text(diff_of(path / "repo", {"calc.py": REACHING}, tmp_path))
    with pytest.raises(CommandError):
        load(path)
    lines = len(FIXED.splitlines())
    err = capsys.readouterr().err
    assert (
        "refused: reference: the reference solution reaches into the test runner: "
        f"calc.py:{lines + 2} ends the process early (os._exit); a check fails because of it: "
        'set runner_access = "report" or change the reference'
    ) in err, err
    toml = path / "task.toml"
    toml.write_text(toml.read_text().replace("check = ", 'runner_access = "report"\ncheck = ', 1))
    load(path)
    assert Task.objects.get(slug="fix-add").runner_access == "report"


@pytest.mark.docker
def test_runner_access_takes_fail_or_report_only(docker_ready, task_dir, capsys):
    path = task_dir("fix-add")
    load(path)
    assert Task.objects.get(slug="fix-add").runner_access == "fail"  # the default
    toml = path / "task.toml"
    toml.write_text(toml.read_text().replace("check = ", 'runner_access = "warn"\ncheck = ', 1))
    with pytest.raises(CommandError):
        load(path)
    assert "refused: runner_access: 'warn': expected \"fail\"" in capsys.readouterr().err


@pytest.mark.docker
def test_the_admin_form_refuses_such_a_reference_on_its_field(
    admin_client,
    docker_ready,
    host_images,  # noqa: F811
    tmp_path,
):
    repo = EXAMPLES / "fix-add" / "repo"
    touching = diff_of(repo, {"tests/test_calc.py": TESTS + "# more\n"}, tmp_path)
    archive = {"repo_archive": SimpleUploadedFile("repo.zip", repo_zip())}
    response = post_task(admin_client, form_data(reference_patch=touching), archive)
    html = response.content.decode()
    assert response.status_code == 200 and not Task.objects.exists()
    # The check command names tests/: its test files are the task's.
    assert "the reference solution changes protected path(s) tests/test_calc.py" in html
    reaching = diff_of(repo, {"calc.py": REACHING}, tmp_path / "two")
    archive = {"repo_archive": SimpleUploadedFile("repo.zip", repo_zip())}
    response = post_task(admin_client, form_data(reference_patch=reaching), archive)
    assert "the reference solution reaches into the test runner: calc.py:" in (
        response.content.decode()
    )
    archive = {"repo_archive": SimpleUploadedFile("repo.zip", repo_zip())}
    data = form_data(reference_patch=reaching, runner_access="report")
    response = post_task(admin_client, data, archive)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Task.objects.get(slug="uploaded").runner_access == "report"


@pytest.mark.docker
def test_swebench_rows_whose_gold_patch_changes_a_test_are_refused(docker_ready, tmp_path):
    from attempts.taskio.importers import swebench
    from attempts.taskio.repos import commit_folder
    from tests.test_import import BASE, DATA

    repos = tmp_path / "repos"
    assert commit_folder(DATA / "repos_src" / "acme__calc", repos / "acme__calc") == BASE
    row = json.loads((DATA / "rows.jsonl").read_text().splitlines()[0])
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    (honest,) = swebench.read(rows, repos_dir=repos)
    assert honest.values and not honest.refused
    row["patch"] += row["test_patch"]  # the gold patch also changes the test it is checked by
    rows.write_text(json.dumps(row) + "\n")
    (item,) = swebench.read(rows, repos_dir=repos)
    assert item.values is None
    assert item.refused.startswith(
        "patch: the reference solution changes protected path(s) tests/test_calc.py, which"
    ), item.refused


def test_the_pure_check_names_paths_and_lines():
    patch = (
        "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n"
        "+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    values = {"reference_patch": patch, "protected_paths": ["tests"]}
    with pytest.raises(Exception, match=r"protected path\(s\) tests/test_x.py, which"):
        check_reference_is_honest(values, ["tests/test_x.py"])
    values = {"reference_patch": patch.replace("tests/test_x.py", "src/x.py")}
    check_reference_is_honest(values, ["src/x.py"])  # nothing protected, nothing reaching
    reach = "--- a/x.py\n+++ b/x.py\n@@ -0,0 +1 @@\n+import _pytest\n"
    with pytest.raises(Exception, match=r"x.py:1 imports pytest internals \(_pytest\)"):
        check_reference_is_honest({"reference_patch": reach}, ["x.py"])
    check_reference_is_honest({"reference_patch": reach, "runner_access": "report"}, ["x.py"])
    check_reference_is_honest({"reference_patch": reach}, ["x.py", "_pytest/__init__.py"])


# --- the page, the table, the exports ---------------------------------------------------------

FINDINGS = [
    {
        "path": "calc.py",
        "line": 12,
        "what": "walks the garbage collector (gc.get_objects)",
        "text": "for o in gc.get_objects(): '<script>alert(1)</script>'",
    }
]


def test_the_finding_shows_on_the_attempt_page_escaped(admin_client):
    task = new_task("reach")
    attempt = make_attempt(
        task,
        1,
        changes_state="recorded",
        tamper={"protected": [], "reward_files": [], "runner_access": FINDINGS},
        failure_reason="the agent's changes reach into the test runner: calc.py:12 walks the "
        "garbage collector (gc.get_objects)",
    )
    html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    report = html.split('id="tamper-report"')[1].split("</div>")[0]
    assert "<code>calc.py:12</code></a> — walks the garbage collector (gc.get_objects)" in report
    assert "the check fails because of it" in report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in report
    assert "<script>alert(1)" not in html
    table = admin_client.get(f"/tasks/{task.slug}/attempts/").content.decode()
    assert "tampered</span>" in table
    task.runner_access = "report"
    task.save()
    html = admin_client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "listed only: the task allows it" in html


def test_the_exports_carry_the_findings():
    attempt = make_attempt(
        new_task("reach-export"),
        1,
        tamper={"protected": [], "reward_files": [], "runner_access": FINDINGS},
    )
    assert attempt.tampered
    record = tamper_record(attempt)
    assert record["runner_access"] == FINDINGS and record["tampered"] is True
    assert attempts_line(attempt, None, {})["tamper"]["runner_access"] == FINDINGS
    plain = make_attempt(new_task("plain"), 1, tamper={"protected": [], "reward_files": []})
    assert tamper_record(plain)["runner_access"] == [] and not plain.tampered
