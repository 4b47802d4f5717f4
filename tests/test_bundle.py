"""Attempt bundles from real attempts: contents, a patch that really applies, safe names."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from attempts.exports.bundle import stream_bundle
from attempts.models import Attempt, CheckResult
from attempts.services.attempts import attempt_create
from attempts.services.deletion import sandbox_delete
from tests.conftest import new_task, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

EDITS = (
    "sed -i 's/return a - b/return a + b/' calc.py && "
    "echo 'new file' > added.txt && "
    "git rm -q README.md && "
    "mkdir -p docs && mv tests/test_calc.py docs/moved_test.py && "
    "printf '\\000\\001\\377binary\\n' > data.bin && "
    "echo 'print(1)' > 'name with spaces.py'"
)

FIX = "sed -i 's/return a - b/return a + b/' calc.py"
TAMPER = "printf 'x=1\\n' > conftest.py"  # conftest.py is a protected path
NO_TAMPER = {"protected": [], "reward_files": [], "runner_access": [], "tampered": False}


def export(attempt: Attempt, tmp_path: Path) -> zipfile.ZipFile:
    target = tmp_path / f"bundle-{attempt.pk}.zip"
    call_command("export_attempt", str(attempt.pk), "-o", str(target))
    return zipfile.ZipFile(target)


def workspace_files(bundle: zipfile.ZipFile) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bundle.read("workspace.tar.gz"))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def tree_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def test_bundle_holds_the_whole_attempt(worker, load_example, tmp_path):
    task = load_example("text-utils")
    attempt = wait_finished([attempt_create(task=task, agent="command", command="echo hi")])[0]
    bundle = export(attempt, tmp_path)
    names = set(bundle.namelist())
    assert {
        "README.txt",
        "attempt.json",
        "task.json",
        "events.jsonl",
        "changes.patch",
        "check.json",
        "junit.xml",
        "workspace.tar.gz",
    } <= names
    assert any(n.startswith("outputs/") and n.endswith(".stdout") for n in names)

    record = json.loads(bundle.read("attempt.json"))
    assert (record["id"], record["outcome"], record["score"]) == (attempt.pk, "failed", 0.4)
    assert record["agent"] == "command" and record["host"] == attempt.host
    assert record["workspace"]["included"] is True
    assert json.loads(bundle.read("task.json"))["base_commit"] == task.base_commit

    events = [json.loads(line) for line in bundle.read("events.jsonl").splitlines()]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and seqs[0] == 1
    # the export itself is the last event: recorded in the timeline while the attempt exists
    assert events[-1]["data"]["action"] == "export_attempt"
    assert attempt.events.count() == len(events)

    checks = json.loads(bundle.read("check.json"))["checks"]
    assert checks[-1]["tests_passed"] == 2 and len(checks[-1]["tests"]) == 5
    assert b"<testsuite" in bundle.read("junit.xml")
    assert "git apply changes.patch" in bundle.read("README.txt").decode()


def test_the_patch_applies_to_the_base_ref_and_gives_exactly_the_final_files(
    worker, load_example, tmp_path
):
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="command", command=EDITS)])[0]
    bundle = export(attempt, tmp_path)
    final = workspace_files(bundle)
    assert final["data.bin"] == b"\x00\x01\xffbinary\n"
    assert "README.md" not in final and "docs/moved_test.py" in final

    scratch = tmp_path / "scratch"
    subprocess.run(["git", "clone", "-q", task.repo_url, str(scratch)], check=True)
    subprocess.run(["git", "checkout", "-q", "--detach", task.base_commit], cwd=scratch, check=True)
    (tmp_path / "changes.patch").write_bytes(bundle.read("changes.patch"))
    subprocess.run(["git", "apply", str(tmp_path / "changes.patch")], cwd=scratch, check=True)
    assert tree_files(scratch) == final


def test_names_and_links_the_agent_made_cannot_leave_the_bundle(worker, load_example, tmp_path):
    task = load_example("fix-add")
    evil = (
        "ln -s /etc/passwd abs-link && ln -s ../../../../etc up-link && ln -s calc.py ok-link && "
        "printf x > '..\\..\\evil.txt' && printf x > '..evil' && "
        "mkdir -p sub && ln -s ../.. sub/escape"
    )
    attempt = wait_finished([attempt_create(task=task, agent="command", command=evil)])[0]
    bundle = export(attempt, tmp_path)
    for name in bundle.namelist():
        assert not name.startswith("/") and ".." not in name.split("/")
    with tarfile.open(fileobj=io.BytesIO(bundle.read("workspace.tar.gz"))) as tar:
        members = {m.name: m for m in tar}
    for name, member in members.items():
        assert not name.startswith("/") and ".." not in name.split("/") and "\\" not in name
        if member.issym():
            assert not member.linkname.startswith("/")
            resolved = Path("/root") / Path(name).parent / member.linkname
            assert resolved.resolve().is_relative_to(Path("/root").resolve())
    assert members["ok-link"].issym() and "..evil" in members
    omitted = {
        o["path"]: o["reason"]
        for o in json.loads(bundle.read("attempt.json"))["workspace"]["omitted"]
    }
    assert set(omitted) == {"abs-link", "up-link", "sub/escape", "..\\..\\evil.txt"}
    assert "points outside" in omitted["abs-link"]


def test_exporting_an_unknown_attempt_is_a_clear_error(db, tmp_path):
    with pytest.raises(CommandError, match="no attempt 999999"):
        call_command("export_attempt", "999999", "-o", str(tmp_path / "x.zip"))


def test_web_export_downloads_the_zip_and_unknown_is_404(worker, load_example, admin_client):
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="noop")])[0]
    response = admin_client.get(f"/attempts/{attempt.pk}/export.zip")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == 'attachment; filename="boltz-fix-add-1.zip"'
    bundle = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert "attempt.json" in bundle.namelist()
    assert admin_client.get("/attempts/999999/export.zip").status_code == 404


def test_the_tamper_report_goes_with_the_bundle_and_the_task_exports(
    worker, load_example, tmp_path
):
    task = load_example("fix-add")
    tamperer, honest = wait_finished(
        [
            attempt_create(task=task, agent="command", command=TAMPER),
            attempt_create(task=task, agent="command", command=FIX),
        ]
    )
    assert (tamperer.outcome, honest.outcome) == ("failed", "passed")
    tampered = {
        "protected": [{"path": "conftest.py", "change": "added"}],
        "reward_files": [],
        "runner_access": [],
        "tampered": True,
    }
    expected = {tamperer.pk: tampered, honest.pk: NO_TAMPER}
    summaries = {}
    for attempt in (tamperer, honest):
        bundle = export(attempt, tmp_path)
        check = json.loads(bundle.read("check.json"))
        assert check["tamper"] == expected[attempt.pk]
        record = json.loads(bundle.read("attempt.json"))
        assert record["tamper"] == expected[attempt.pk]
        assert (record["changes_state"], record["changes_error"]) == ("recorded", "")
        assert record["workspace"] == {
            "included": True,
            "bytes": attempt.workspace_bytes,
            "omitted": [],
            "absent_reason": "",
        }
        (last,) = check["checks"]
        assert (last["mode"], last["problem"], last["ignored_reward_files"]) == ("fresh", "", [])
        summaries[attempt.pk] = last["summary"]
        # The protected file was reset before the check, but the patch still shows it.
        assert (b"conftest.py" in bundle.read("changes.patch")) == (attempt == tamperer)
    assert summaries[honest.pk] == "the check exited 0"
    assert summaries[tamperer.pk].startswith("the check exited 1; failing: ")

    out = tmp_path / "attempts.jsonl"
    call_command("export_task", "fix-add", "--format", "attempts", "-o", str(out))
    lines = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert {pk: r["tamper"] for pk, r in lines.items()} == expected
    assert lines[tamperer.pk]["check"]["mode"] == "fresh"
    assert lines[tamperer.pk]["check"]["summary"] == summaries[tamperer.pk]
    call_command("export_task", "fix-add", "--format", "rl", "-o", str(out))
    rows = {r["attempt_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert {pk: (r["tampered"], r["tamper"]) for pk, r in rows.items()} == {
        pk: (tamper["tampered"], tamper) for pk, tamper in expected.items()
    }
    assert (rows[tamperer.pk]["reward"], rows[tamperer.pk]["mask"]) == (0.0, False)


def test_a_deleted_sandbox_is_why_the_workspace_is_absent(worker, load_example, tmp_path):
    task = load_example("fix-add")
    attempt = wait_finished([attempt_create(task=task, agent="command", command=FIX)])[0]
    assert attempt.workspace_file and attempt.checks.count() == 1
    assert sandbox_delete(attempt=attempt, by="erin")
    bundle = export(attempt, tmp_path)
    assert "workspace.tar.gz" not in bundle.namelist()
    workspace = json.loads(bundle.read("attempt.json"))["workspace"]
    assert (workspace["included"], workspace["bytes"]) == (False, 0)
    reason = workspace["absent_reason"]
    assert reason.startswith("the sandbox was deleted by erin at ")
    assert reason.endswith(", and the checked tree's files with it")
    assert f"ABSENT: {reason}" in bundle.read("README.txt").decode()
    # The patch and the check outlive the sandbox.
    assert b"+    return a + b" in bundle.read("changes.patch")
    assert json.loads(bundle.read("check.json"))["checks"][0]["passed"] is True


def bundle_of(attempt: Attempt) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(b"".join(stream_bundle(attempt))))


def test_the_absent_workspace_says_exactly_why(db):
    task = new_task()

    def attempt(number: int, **fields) -> Attempt:
        values = {"agent": "command", "status": "finished", **fields}
        return Attempt.objects.create(task=task, number=number, **values)

    too_big = "the workspace holds more than 300000 files"
    unavailable = attempt(
        1,
        outcome="failed",
        score=0.0,
        changes_state="unavailable",
        changes_error=too_big,
        failure_reason=f"changes unavailable: {too_big}",
    )
    infra = attempt(2, outcome="infra_error", failure_reason="start: Docker unreachable")
    cancelled = attempt(
        3, status="cancelled", outcome="cancelled", failure_reason="cancelled by erin"
    )
    unchecked = attempt(
        4, outcome="infra_error", changes_state="recorded", failure_reason="check: gone"
    )
    checked = attempt(5, outcome="failed", score=0.0, changes_state="recorded")
    CheckResult.objects.create(attempt=checked, passed=False, score=0.0, source="exit_code")
    queued = attempt(6, status="queued")
    reasons = {
        unavailable: f"the agent's changes are unavailable: {too_big}",
        infra: "the attempt ended before its changes were recorded: start: Docker unreachable",
        cancelled: "the attempt ended before its changes were recorded: cancelled by erin",
        unchecked: "the attempt ended after its changes were recorded, before its check: "
        "check: gone",
        checked: "the attempt was checked (1 check) but its files were not kept",
        queued: "the attempt has not finished: it is queued",
    }
    for row, reason in reasons.items():
        bundle = bundle_of(row)
        workspace = json.loads(bundle.read("attempt.json"))["workspace"]
        assert (workspace["included"], workspace["absent_reason"]) == (False, reason)
        assert "never reached its check" not in bundle.read("README.txt").decode()
    readme = bundle_of(unavailable).read("README.txt").decode()
    assert f"EMPTY: the agent's changes are unavailable: {too_big}" in readme
    assert "every file of the checked tree" in readme
    assert json.loads(bundle_of(infra).read("check.json")) == {"tamper": NO_TAMPER, "checks": []}
