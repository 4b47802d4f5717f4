"""import_tasks: Boltz directories (and a zip of them) and SWE-bench JSONL rows, scored the
SWE-bench way: resolved exactly when every FAIL_TO_PASS and PASS_TO_PASS test passes."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from attempts.models import Outcome, Task
from attempts.services.attempts import attempt_create
from attempts.taskio.repos import commit_folder
from tests.conftest import EXAMPLES, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

DATA = Path(__file__).parent / "data" / "swebench"
BASE = "e55ca5df802ebe4950358d2d6aae2d0359b2de23"  # the commit rows.jsonl names


@pytest.fixture
def repos_dir(tmp_path):
    """Local clones as SWE-bench imports expect them: DIR/owner__name."""
    target = tmp_path / "repos" / "acme__calc"
    assert commit_folder(DATA / "repos_src" / "acme__calc", target) == BASE
    return tmp_path / "repos"


def run_import(path, *args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("import_tasks", str(path), *args, stdout=out)
    return out.getvalue()


def test_boltz_directories_and_a_zip_of_them_import_idempotently(docker_ready, tmp_path):
    first = run_import(EXAMPLES)
    assert "created fix-add" in first and "created text-utils" in first
    bundle = tmp_path / "tasks.zip"
    with zipfile.ZipFile(bundle, "w") as archive:
        for path in (EXAMPLES / "fix-add").rglob("*"):
            archive.write(path, f"set/fix-add/{path.relative_to(EXAMPLES / 'fix-add')}")
    again = run_import(bundle)
    assert "updated fix-add" in again and "0 created, 1 updated, 0 refused" in again
    assert Task.objects.count() == 2


def test_swebench_rows_import_and_bad_lines_are_reported_by_number(docker_ready, repos_dir):
    out = run_import(DATA / "rows.jsonl", "--repos", str(repos_dir))
    assert "created acme__calc-1" in out
    assert "refused rows.jsonl:2: line 2 is not JSON" in out
    assert "refused rows.jsonl:3: repo: ghost/lib has no local clone" in out
    task = Task.objects.get(slug="acme__calc-1")
    assert task.base_commit == BASE and task.instruction.startswith("add(2, 3) returns -1")
    assert task.check_file_paths == ["tests/test_calc.py"]
    assert task.required_tests == [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_multiply",
    ]
    assert "--junitxml=$BOLTZ_CHECK_DIR/junit.xml tests/test_calc.py" in task.check_command
    assert "updated acme__calc-1" in run_import(DATA / "rows.jsonl", "--repos", str(repos_dir))
    assert Task.objects.count() == 1


def test_swebench_without_local_clones_names_the_missing_repository(docker_ready):
    with pytest.raises(CommandError, match="nothing was imported"):
        run_import(DATA / "rows.jsonl")


@pytest.mark.worker
def test_swebench_scoring_resolves_only_when_f2p_and_p2p_all_pass(worker, docker_ready, repos_dir):
    run_import(DATA / "rows.jsonl", "--repos", str(repos_dir))
    task = Task.objects.get(slug="acme__calc-1")
    breaks_p2p = "sed -i 's/a - b/a + b/; s/a \\* b/a + b/' calc.py"
    reference, noop, broken = wait_finished(
        [
            attempt_create(task=task, agent="reference"),
            attempt_create(task=task, agent="noop"),
            attempt_create(task=task, agent="command", command=breaks_p2p),
        ],
        timeout=120,
    )
    assert reference.outcome == Outcome.PASSED and reference.score == 1.0
    # FAIL_TO_PASS still fails: not resolved.
    assert noop.outcome == Outcome.FAILED and noop.score == 0.5
    outcomes = dict(noop.checks.get().tests.values_list("name", "outcome"))
    assert outcomes == {
        "tests.test_calc::test_add": "failed",
        "tests.test_calc::test_multiply": "passed",
    }
    # The fix lands but PASS_TO_PASS breaks: not resolved either.
    assert broken.outcome == Outcome.FAILED and broken.score == 0.5
    outcomes = dict(broken.checks.get().tests.values_list("name", "outcome"))
    assert outcomes["tests.test_calc::test_multiply"] == "failed"


def test_admin_upload_imports_and_reports(admin_client, docker_ready, repos_dir):
    from django.core.files.uploadedfile import SimpleUploadedFile

    rows = (DATA / "rows.jsonl").read_bytes()
    response = admin_client.post(
        "/admin/attempts/task/import/",
        {"upload": SimpleUploadedFile("rows.jsonl", rows), "repos": str(repos_dir)},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "created acme__calc-1" in html and "refused rows.jsonl:2: line 2 is not JSON" in html
    assert Task.objects.filter(slug="acme__calc-1").exists()
