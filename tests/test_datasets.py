"""Task-level JSONL exports: attempt records, SFT conversations, RL trajectories."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from attempts.models import Attempt, AuditEntry, CheckResult, Event
from tests.conftest import new_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def task():
    task = new_task(instruction="Fix add().")
    solved = Attempt.objects.create(
        task=task, number=1, agent="command", status="finished", outcome="passed", score=1.0
    )
    events = [
        ("message", "agent", {"text": "I will look at calc.py"}),
        ("exec", "agent", {"phase": "start", "command": "cat calc.py", "exec": 1}),
        ("output", "agent", {"exec": 1, "stream": "stdout", "text": "def add..."}),
        (
            "exec",
            "agent",
            {
                "phase": "end",
                "command": "cat calc.py",
                "exec": 1,
                "exit_code": 0,
                "timed_out": False,
                "stdout": {"head": "def add(a, b):\n", "tail": "", "truncated": False},
            },
        ),
        ("exec", "system", {"phase": "end", "command": "python3 -m pytest", "exit_code": 0}),
    ]
    for seq, (kind, actor, data) in enumerate(events, start=1):
        Event.objects.create(attempt=solved, seq=seq, kind=kind, actor=actor, data=data)
    Attempt.objects.create(
        task=task, number=2, agent="noop", status="finished", outcome="failed", score=0.0
    )
    Attempt.objects.create(
        task=task,
        number=3,
        agent="noop",
        status="finished",
        outcome="infra_error",
        failure_reason="start: Docker unreachable",
        created_at=timezone.now() - timedelta(days=3),
    )
    return task


def export(tmp_path, *args) -> list[dict]:
    out = tmp_path / "out.jsonl"
    call_command("export_task", "t", *args, "-o", str(out))
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_attempts_format_has_one_line_per_attempt(task, tmp_path):
    lines = export(tmp_path, "--format", "attempts")
    assert [(r["number"], r["outcome"]) for r in lines] == [
        (1, "passed"),
        (2, "failed"),
        (3, "infra_error"),
    ]
    assert lines[2]["infrastructure_error"] is True


def test_filters_keep_only_what_they_name(task, tmp_path):
    assert [r["number"] for r in export(tmp_path, "--outcome", "passed")] == [1]
    assert [r["number"] for r in export(tmp_path, "--agent", "noop")] == [2, 3]
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    assert [r["number"] for r in export(tmp_path, "--since", since)] == [1, 2]


def test_sft_is_an_openai_chat_with_tool_calls_and_results(task, tmp_path):
    (line,) = export(tmp_path, "--format", "sft", "--outcome", "passed")
    roles = [m["role"] for m in line["messages"]]
    assert roles == ["system", "user", "assistant", "assistant", "tool"]
    assert line["messages"][1]["content"] == "Fix add()."
    assert line["messages"][2]["content"] == "I will look at calc.py"
    call = line["messages"][3]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "shell"
    assert json.loads(call["function"]["arguments"]) == {"command": "cat calc.py"}
    result = line["messages"][4]
    assert result["tool_call_id"] == call["id"]
    assert result["content"] == "[exit code 0]\ndef add(a, b):\n"
    assert line["tools"][0]["function"]["name"] == "shell"
    # the check's own commands are not the agent's turns
    assert "pytest" not in json.dumps(line["messages"])


def test_sft_says_when_a_cancel_stopped_a_command(task, tmp_path):
    cancelled = Attempt.objects.create(
        task=task, number=4, agent="command", status="cancelled", outcome="cancelled"
    )
    end = {"phase": "end", "command": "sleep 300", "exec": 1, "exit_code": None}
    end |= {"stopped": "cancelled by erin", "stdout": {"head": "go\n", "tail": ""}}
    Event.objects.create(attempt=cancelled, seq=1, kind="exec", actor="agent", data=end)
    (line,) = export(tmp_path, "--format", "sft", "--outcome", "cancelled")
    assert line["messages"][-1]["content"] == "[stopped: cancelled by erin]\ngo\n"


def test_rl_masks_infrastructure_errors_instead_of_rewarding_zero(task, tmp_path):
    lines = {r["number"]: r for r in export(tmp_path, "--format", "rl")}
    assert (lines[1]["reward"], lines[1]["mask"], lines[1]["mask_reason"]) == (1.0, False, "")
    assert (lines[2]["reward"], lines[2]["mask"], lines[2]["mask_reason"]) == (0.0, False, "")
    assert (lines[3]["reward"], lines[3]["mask"]) == (None, True)
    assert lines[3]["mask_reason"] == "start: Docker unreachable"
    step = lines[1]["trajectory"][1]
    assert step["action"] == {"type": "exec", "command": "cat calc.py"}
    assert step["observation"]["exit_code"] == 0


NO_REWARD = "the check wrote no reward file, and the task declares that it writes one"


def test_rl_masks_an_attempt_the_check_gave_no_score_instead_of_rewarding_zero(task, tmp_path):
    unscored = Attempt.objects.create(
        task=task,
        number=4,
        agent="command",
        status="finished",
        outcome="failed",
        score=None,
        failure_reason=NO_REWARD,
        changes_state="recorded",
    )
    CheckResult.objects.create(
        attempt=unscored,
        passed=False,
        score=None,
        source="reward_file",
        mode="fresh",
        summary=NO_REWARD,
        problem=NO_REWARD,
    )
    Attempt.objects.create(
        task=task,
        number=5,
        agent="command",
        status="finished",
        outcome="agent_timeout",
        score=None,
        failure_reason="the agent ran past its 60s limit and was killed",
    )
    lines = {r["number"]: r for r in export(tmp_path, "--format", "rl")}
    assert (lines[4]["score"], lines[4]["reward"], lines[4]["mask"]) == (None, None, True)
    assert lines[4]["mask_reason"] == NO_REWARD
    assert (lines[5]["reward"], lines[5]["mask"]) == (None, True)
    assert lines[5]["mask_reason"] == (
        "the check gave no score (outcome agent_timeout): "
        "the agent ran past its 60s limit and was killed"
    )
    # Masking of infrastructure errors, and real zeros, are as they were.
    assert (lines[3]["mask"], lines[3]["mask_reason"]) == (True, "start: Docker unreachable")
    assert (lines[2]["reward"], lines[2]["mask"]) == (0.0, False)

    # No other format fails on a missing score or writes it as 0.
    records = {r["number"]: r for r in export(tmp_path, "--format", "attempts")}
    assert records[4]["score"] is None and records[5]["score"] is None
    check = records[4]["check"]
    assert (check["passed"], check["score"], check["source"]) == (False, None, "reward_file")
    assert (check["mode"], check["summary"], check["problem"]) == ("fresh", NO_REWARD, NO_REWARD)
    assert check["ignored_reward_files"] == []
    sft = {r["metadata"]["number"]: r["metadata"] for r in export(tmp_path, "--format", "sft")}
    assert sft[4]["score"] is None and sft[4]["outcome"] == "failed"


def test_the_tamper_report_is_in_every_format(task, tmp_path):
    report = {"protected": [{"path": "conftest.py", "change": "added"}], "reward_files": []}
    Attempt.objects.filter(number=1).update(tamper=report)
    Attempt.objects.filter(number=2).update(
        tamper={"protected": [], "reward_files": ["reward.txt"]}
    )
    tampered = {1: {**report, "tampered": True}}
    tampered[2] = {"protected": [], "reward_files": ["reward.txt"], "tampered": True}
    tampered[3] = {"protected": [], "reward_files": [], "tampered": False}  # tamper == {}

    records = {r["number"]: r for r in export(tmp_path, "--format", "attempts")}
    assert {n: r["tamper"] for n, r in records.items()} == tampered
    assert {n: r["changes_state"] for n, r in records.items()} == {1: "", 2: "", 3: ""}
    rl = {r["number"]: r for r in export(tmp_path, "--format", "rl")}
    assert {n: r["tamper"] for n, r in rl.items()} == tampered
    assert {n: r["tampered"] for n, r in rl.items()} == {1: True, 2: True, 3: False}
    assert (rl[1]["reward"], rl[1]["mask"]) == (1.0, False)  # reported, not masked
    sft = {r["metadata"]["number"]: r["metadata"] for r in export(tmp_path, "--format", "sft")}
    assert {n: m["tamper"] for n, m in sft.items()} == tampered
    assert sft[1]["tampered"] is True


def test_exports_are_recorded(task, tmp_path):
    export(tmp_path, "--format", "rl", "--outcome", "failed")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.task_slug) == ("export_task", "t")
    assert entry.details == {"format": "rl", "outcome": "failed"}
    assert entry.actor.startswith("cli")


def test_unknown_task_and_bad_dates_are_clear_errors(task, tmp_path):
    with pytest.raises(CommandError, match="no task 'nope'"):
        call_command("export_task", "nope", "-o", str(tmp_path / "x"))
    with pytest.raises(CommandError, match="--since 'yesterday'"):
        call_command("export_task", "t", "--since", "yesterday", "-o", str(tmp_path / "x"))


def test_web_task_export_streams_jsonl(task, admin_client):
    response = admin_client.get("/tasks/t/export.jsonl?format=rl&outcome=infra_error")
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(x)["mask"] for x in lines] == [True]
    assert admin_client.get("/tasks/t/export.jsonl?format=csv").status_code == 400
    assert admin_client.get("/tasks/nope/export.jsonl").status_code == 404


def test_the_attempts_export_reads_checks_per_batch_not_per_attempt(
    task, django_assert_max_num_queries
):
    from attempts.datasets import export_lines, select_attempts
    from attempts.models import CheckResult, TestOutcome

    for n in range(4, 44):
        attempt = Attempt.objects.create(task=task, number=n, agent="noop", status="finished")
        check = CheckResult.objects.create(attempt=attempt, passed=True, score=1.0, source="junit")
        TestOutcome.objects.create(check_result=check, name="t::a", outcome="passed")
    with django_assert_max_num_queries(5):
        lines = [json.loads(b) for b in export_lines(select_attempts(task.attempts), "attempts")]
    assert len(lines) == 43 and lines[-1]["check"]["tests"] == {"t::a": "passed"}
