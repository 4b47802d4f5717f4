"""Creating tasks in the admin (with archive uploads), validating them, saved agents."""

from __future__ import annotations

import html
import io
import subprocess
import tarfile
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attempts.models import Agent, Outcome, Task, WorkerHost
from attempts.services.attempts import attempt_create
from attempts.services.validation import task_validate
from tests.conftest import EXAMPLES, new_task, wait_finished, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

PATCH = (EXAMPLES / "fix-add" / "solution.patch").read_text()
CHECK = (EXAMPLES / "fix-add" / "check" / "tests" / "test_calc.py").read_bytes()


def repo_zip(*, git: bool = False, extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    src = EXAMPLES / "fix-add" / "repo"
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(src.rglob("*")):
            if path.is_file():
                archive.write(path, f"project/{path.relative_to(src).as_posix()}")
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()


def form_data(**overrides) -> dict:
    data = {
        "slug": "uploaded",
        "title": "Uploaded task",
        "instruction": "Fix add().",
        "repo_url": "",
        "base_ref": "HEAD",
        "image": "",
        "setup_command": "",
        "check_command": "python3 -m pytest -q -p no:cacheprovider tests",
        "reference_patch": PATCH,
        "setup_timeout": 60,
        "agent_timeout": 60,
        "check_timeout": 60,
        "cpus": 1,
        "memory": "512m",
        "pids_limit": 256,
    }
    data.update(overrides)
    return data


@pytest.fixture
def host_images(db, settings):
    WorkerHost.objects.create(name="h1", images=[settings.BOLTZ_DEFAULT_IMAGE, "other:1"])


def post_task(admin_client, data, files):
    return admin_client.post("/admin/attempts/task/add/", {**data, **files})


def test_admin_creates_a_task_from_an_uploaded_archive(admin_client, docker_ready, host_images):
    response = post_task(
        admin_client,
        form_data(),
        {
            "repo_archive": SimpleUploadedFile("repo.zip", repo_zip()),
            "check_uploads": [SimpleUploadedFile("check.tar", _tar({"tests/test_calc.py": CHECK}))],
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    task = Task.objects.get(slug="uploaded")
    assert len(task.base_commit) == 40 and task.base_ref == "HEAD"
    assert task.check_file_paths == ["tests/test_calc.py"]
    assert task.memory_bytes == 512 * 1024**2
    log = subprocess.run(
        ["git", "log", "--oneline"], cwd=task.repo_url, capture_output=True, text=True
    ).stdout
    assert len(log.splitlines()) == 1  # a plain folder became one commit


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _evil_tar(kind: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("project/calc.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x=1"))
        if kind == "escape":
            info = tarfile.TarInfo("../../etc/evil")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        else:
            info = tarfile.TarInfo("project/link")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("escape", "outside the archive's folder"), ("link", "links to '/etc/passwd'")],
)
def test_archives_that_escape_are_refused_with_the_reason(
    admin_client, docker_ready, host_images, kind, reason
):
    response = post_task(
        admin_client, form_data(), {"repo_archive": SimpleUploadedFile("r.tar.gz", _evil_tar(kind))}
    )
    assert response.status_code == 200
    assert reason in html.unescape(response.content.decode())
    assert not Task.objects.exists()


def test_an_archive_over_the_size_limit_is_refused(
    admin_client, docker_ready, host_images, settings
):
    settings.BOLTZ_MAX_UPLOAD_BYTES = 100
    response = post_task(
        admin_client, form_data(), {"repo_archive": SimpleUploadedFile("repo.zip", repo_zip())}
    )
    assert "BOLTZ_MAX_UPLOAD_BYTES" in html.unescape(response.content.decode())
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_ref": "no-such-branch"}, "'no-such-branch' does not exist"),
        ({"image": "missing:9"}, "missing:9 is not on any worker host"),
        ({"reference_patch": PATCH.replace("a - b", "a * b")}, "does not apply to the base ref"),
        ({"check_command": "  "}, "the check command must not be empty"),
        ({"memory": "lots"}, "is not a size"),
        ({"protected": "tests/**\n/etc/passwd"}, "'/etc/passwd' is absolute"),
        ({"protected": "**/*"}, "'**/*' would protect the whole tree"),
    ],
)
def test_bad_fields_are_field_errors_that_say_what_to_fix(
    admin_client, docker_ready, host_images, change, message
):
    response = post_task(
        admin_client,
        form_data(**change),
        {"repo_archive": SimpleUploadedFile("repo.zip", repo_zip())},
    )
    assert response.status_code == 200
    assert message in html.unescape(response.content.decode())
    assert not Task.objects.exists()


@pytest.mark.worker
def test_validation_marks_a_good_task_valid_and_a_broken_one_invalid(worker, load_example):
    good = load_example("fix-add")
    task_validate(task=good, by="admin")
    good.refresh_from_db()
    assert good.validation == "running"
    wait_until(
        lambda: Task.objects.get(pk=good.pk).validation != "running", timeout=120, what="validation"
    )
    good.refresh_from_db()
    assert good.validation == "valid" and "reference passed" in good.validation_note
    # A check that passes whatever the agent does: noop passes, so it cannot be trusted.
    lax = load_example("text-utils", check_command="true")
    task_validate(task=lax, by="admin")
    wait_until(
        lambda: Task.objects.get(pk=lax.pk).validation != "running", timeout=120, what="validation"
    )
    lax.refresh_from_db()
    assert lax.validation == "invalid" and "noop passed" in lax.validation_note
    again = task_validate(task=lax, by="admin")  # running again replaces the mark
    assert again.validation == "running"


@pytest.mark.worker
def test_a_saved_agent_runs_by_name_with_its_files_and_environment(worker, load_example):
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    stored = default_storage.save(
        "agents/x/fix.sh", ContentFile(b'sed -i "s/a - b/a $OPERATOR b/" calc.py\n')
    )
    Agent.objects.create(
        name="sed-fixer",
        command="sh $BOLTZ_AGENT_DIR/fix.sh",
        environment={"OPERATOR": "+"},
        files=[{"name": "fix.sh", "storage": stored, "bytes": 10}],
    )
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="sed-fixer")])[0]
    assert attempt.agent == "sed-fixer" and attempt.outcome == Outcome.PASSED
    from attempts.core.errors import TaskInvalid

    with pytest.raises(TaskInvalid, match="sed-fixer"):
        attempt_create(task=task, agent="nobody")


def test_admin_lists_attempts_read_only_with_dashboard_links(admin_client, db):
    from attempts.models import Attempt

    task = new_task()
    attempt = Attempt.objects.create(task=task, number=1, agent="noop")
    html = admin_client.get("/admin/attempts/attempt/").content.decode()
    assert f'href="/attempts/{attempt.pk}/"' in html
    assert admin_client.get("/admin/attempts/attempt/add/").status_code == 403


def test_the_image_field_offers_the_hosts_images(admin_client, host_images):
    html = admin_client.get("/admin/attempts/task/add/").content.decode()
    assert 'list="image-choices"' in html and '<option value="other:1">' in html
