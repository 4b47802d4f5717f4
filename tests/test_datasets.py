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


def ran(task, number: int, command: str, stdout: str = "", **fields) -> Attempt:
    """A finished attempt whose agent ran one command (exit 0)."""
    values = {"agent": "command", "agent_command": command, "status": "finished"}
    attempt = Attempt.objects.create(task=task, number=number, **{**values, **fields})
    end = {"phase": "end", "command": command, "exec": 1, "exit_code": 0}
    if stdout:
        end["stdout"] = {"head": stdout, "tail": ""}
    Event.objects.create(attempt=attempt, seq=1, kind="exec", actor="agent", data=end)
    return attempt


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


def test_sft_openai_is_a_chat_ending_on_the_agents_turn_with_metadata_apart(task, tmp_path):
    (line,) = export(tmp_path, "--format", "sft", "--outcome", "passed")
    roles = [m["role"] for m in line["messages"]]
    # The trailing tool result says nothing to train on: the example ends on the call.
    assert roles == ["system", "user", "assistant", "assistant"]
    assert line["messages"][1]["content"] == "Fix add()."
    assert line["messages"][2]["content"] == "I will look at calc.py"
    call = line["messages"][3]["tool_calls"][0]
    assert "content" not in line["messages"][3]
    assert call["type"] == "function" and call["function"]["name"] == "shell"
    assert json.loads(call["function"]["arguments"]) == {"command": "cat calc.py"}
    assert line["tools"][0]["function"]["name"] == "shell" and "metadata" not in line
    # the check's own commands are not the agent's turns
    assert "pytest" not in json.dumps(line["messages"])
    (meta,) = [json.loads(x) for x in (tmp_path / "out.meta.jsonl").read_text().splitlines()]
    assert (meta["attempt_id"], meta["task"], meta["trainable"]) == (
        Attempt.objects.get(number=1).pk,
        "t",
        True,
    )
    assert meta["synthetic"] == ["system_prompt", "tools"]


def test_sft_hf_has_objects_for_arguments_and_empty_strings_for_content(task, tmp_path):
    (line,) = export(tmp_path, "--format", "sft", "--flavour", "hf")
    call_message = line["messages"][3]
    assert call_message["content"] == ""
    assert call_message["tool_calls"][0]["function"]["arguments"] == {"command": "cat calc.py"}
    assert line["metadata"]["outcome"] == "passed" and line["messages"][-1]["role"] == "assistant"


def test_sft_keeps_only_trainable_examples_unless_asked_then_weighs_them_zero(task, tmp_path):
    ran(task, 4, "ls", outcome="failed", score=0.0)
    assert len(export(tmp_path, "--format", "sft")) == 1  # noop and failures left out
    everything = export(tmp_path, "--format", "sft", "--include-all", "--include-oracles")
    weights = [
        {m.get("weight") for m in line["messages"] if m["role"] == "assistant"}
        for line in everything
    ]
    assert weights == [{1}, {0}]  # the noops have no assistant turn at all: never a line
    assert len(export(tmp_path, "--format", "sft", "--min-score", "0")) == 2


def test_a_command_cut_off_or_cancelled_keeps_its_partial_output_marked(task, tmp_path):
    cancelled = Attempt.objects.create(
        task=task, number=4, agent="command", status="cancelled", outcome="cancelled"
    )
    end = {"phase": "end", "command": "sleep 300", "exec": 1, "exit_code": None}
    end |= {"stopped": "cancelled by erin", "stdout": {"head": "go\n", "tail": ""}}
    Event.objects.create(attempt=cancelled, seq=1, kind="exec", actor="agent", data=end)
    lost = Attempt.objects.create(
        task=task,
        number=5,
        agent="command",
        status="finished",
        outcome="infra_error",
        failure_reason="worker lost: the process running the attempt on host vm-7 gave no sign",
        host="vm-7",
    )
    start = {"phase": "start", "command": "make", "exec": 1}
    start |= {"live": {"stdout": {"tail": "compiling\n", "bytes": 10}}}
    Event.objects.create(attempt=lost, seq=1, kind="exec", actor="agent", data=start)
    rows = {r["attempt_id"]: r for r in export(tmp_path, "--format", "rl")}
    assert rows[cancelled.pk]["completion"][-1]["content"] == "[stopped: cancelled by erin]\ngo\n"
    assert (rows[cancelled.pk]["mask"], rows[cancelled.pk]["mask_reason"]) == (True, "cancelled")
    cut = rows[lost.pk]
    assert cut["completion"][-1]["content"].startswith("[cut off:")
    assert cut["completion"][-1]["content"].endswith("compiling\n") and cut["cut_off"] == [1]
    assert (cut["mask"], cut["mask_reason"]) == (True, "worker_lost")
    assert "vm-7" not in json.dumps(cut) and "[host]" in cut["mask_detail"]


def test_rl_rows_mask_what_says_nothing_about_the_policy_with_a_code(task, tmp_path):
    rows = {r["number"]: r for r in export(tmp_path, "--format", "rl", "--include-oracles")}
    one = rows[1]
    assert (one["reward"], one["passed"], one["mask"], one["mask_reason"]) == (1.0, True, False, "")
    assert [m["role"] for m in one["completion"]] == ["assistant", "assistant", "tool"]
    assert one["completion_mask"] == [1, 1, 0] and one["policy"] == "command"
    assert one["group_id"].startswith("t@aaaaaaaaaaaa:")
    # noop did nothing: nothing to credit, never a reward of 0 for an empty trajectory
    assert (rows[2]["mask"], rows[2]["mask_reason"], rows[2]["reward"]) == (
        True,
        "empty_completion",
        None,
    )
    assert (rows[3]["mask"], rows[3]["mask_reason"], rows[3]["reward"]) == (
        True,
        "infra_error",
        None,
    )
    assert rows[3]["mask_detail"] == "start: Docker unreachable"
    assert set(export(tmp_path, "--format", "rl")[0]) >= {"prompt", "completion", "tools"}


NO_REWARD = "the check wrote no reward file, and the task declares that it writes one"


def test_an_attempt_the_check_gave_no_score_is_masked_never_zero(task, tmp_path):
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
    rows = {r["number"]: r for r in export(tmp_path, "--format", "rl")}
    assert (rows[4]["score"], rows[4]["reward"], rows[4]["mask"]) == (None, None, True)
    assert (rows[4]["mask_reason"], rows[4]["mask_detail"]) == ("no_score", NO_REWARD)
    records = {r["number"]: r for r in export(tmp_path, "--format", "attempts")}
    check = records[4]["check"]
    assert (check["passed"], check["score"], check["source"]) == (False, None, "reward_file")
    assert (check["mode"], check["summary"], check["problem"]) == ("fresh", NO_REWARD, NO_REWARD)


def test_pairs_give_dpo_chosen_and_rejected_and_kto_labels_within_a_group(task, tmp_path):
    worse = ran(task, 4, "true", outcome="failed", score=0.0, base_commit="a" * 40)
    Attempt.objects.filter(number=1).update(base_commit="a" * 40)
    (pair,) = export(tmp_path, "--format", "pairs")
    assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
    assert pair["chosen"][-1]["tool_calls"][0]["function"]["arguments"] == {
        "command": "cat calc.py"
    }
    assert pair["rejected"][-1]["tool_calls"][0]["function"]["arguments"] == {"command": "true"}
    assert (pair["chosen_score"], pair["rejected_score"]) == (1.0, 0.0)
    kto = {
        r["attempt_id"]: r["label"]
        for r in export(tmp_path, "--format", "pairs", "--flavour", "kto")
    }
    assert kto == {Attempt.objects.get(number=1).pk: True, worse.pk: False}


def test_a_saved_agents_secret_is_redacted_from_every_training_format(task, tmp_path):
    secret = "sk-live-0123456789abcdef"
    ran(
        task,
        4,
        f"echo {secret}",
        f"{secret}\n",
        agent="mine",
        outcome="passed",
        score=1.0,
        agent_env={"OPENAI_API_KEY": secret},
    )
    for fmt in (("sft",), ("sft", "--flavour", "hf"), ("rl",), ("pairs", "--flavour", "kto")):
        text = json.dumps(export(tmp_path, "--format", *fmt))
        assert secret not in text and "[redacted]" in text, fmt


def test_unknown_formats_and_flavours_are_refused_listing_the_valid_ones(task, tmp_path):
    with pytest.raises(CommandError, match="choose one of attempts, sft, pairs, rl"):
        call_command("export_task", "t", "--format", "csv", "-o", str(tmp_path / "x"))
    with pytest.raises(CommandError, match="choose one of openai, hf"):
        call_command("export_task", "t", "--format", "sft", "--flavour", "chatml", "-o", "-")


def test_an_empty_export_says_which_filter_or_rule_removed_what(task, tmp_path, capsys):
    out = tmp_path / "empty.jsonl"

    def said(*args) -> str:
        capsys.readouterr()
        call_command("export_task", "t", *args, "-o", str(out))
        assert out.read_bytes() == b"", args
        return capsys.readouterr().out

    assert "3 attempt(s) of t, none matched --agent nobody: wrote an empty sft (openai) file" in (
        said("--format", "sft", "--agent", "nobody")
    )
    # only oracle runs left: the option that keeps them is named
    assert "2 attempt(s) matched, all oracle runs (noop): add --include-oracles" in said(
        "--format", "rl", "--agent", "noop"
    )
    # sft keeps passed attempts: says none passed, and what keeps the others
    assert "none passed" in said("--format", "sft", "--outcome", "failed", "--include-oracles")
    Attempt.objects.create(task=task, number=4, agent="mine", agent_command="ls")
    kto = ("--format", "pairs", "--flavour", "kto", "--agent", "mine")
    assert "no attempt of task t has finished (1 matched, none ended yet)" in said(*kto)
    Attempt.objects.all().delete()
    assert "task t has no attempts yet" in said("--format", "pairs")


def _wrote(task, number: int, events: list[tuple[str, dict]], **fields) -> Attempt:
    """A finished, passed attempt of an API agent whose timeline holds `events` (kind, data)."""
    values = {"agent": "api-bot", "status": "finished", "outcome": "passed", "score": 1.0}
    attempt = Attempt.objects.create(task=task, number=number, **{**values, **fields})
    for seq, (kind, data) in enumerate(events, start=1):
        Event.objects.create(attempt=attempt, seq=seq, kind=kind, actor="agent", data=data)
    return attempt


def test_an_api_clients_file_writes_uploads_and_deletes_are_shell_calls_in_every_format(
    task, tmp_path
):
    from attempts.core.file_actions import RECORDED_FILE_BYTES, content_record

    fix = "def add(a, b):\n    return a + b\nBOLTZ_EOF\n"  # a line equal to the marker
    big = b"x" * (RECORDED_FILE_BYTES + 1000)
    _wrote(
        task,
        4,
        [
            ("file", {"action": "read", "path": "calc.py", "bytes": 10}),
            (
                "file",
                {
                    "action": "write",
                    "path": "src/calc.py",
                    "mode": 0o755,
                    **content_record(fix.encode()),
                },
            ),  # fmt: skip
            ("file", {"action": "write", "path": "blob.bin", **content_record(b"\xff\x00ok")}),
            ("file", {"action": "write", "path": "big.txt", **content_record(big)}),
            (
                "file",
                {
                    "action": "upload",
                    "path": "pkg",
                    "files": 2,
                    "omitted_entries": 0,
                    "entries": [
                        {"path": "d", "type": "dir"},
                        {
                            "path": "d/x.py",
                            "type": "file",
                            "mode": 0o644,
                            **content_record(b"X = 1\n"),
                        },
                    ],
                },
            ),  # fmt: skip
            ("file", {"action": "delete", "path": "old file.py"}),
            ("message", {"role": "assistant", "text": "Wrote the fix."}),
        ],
    )
    rows = export(tmp_path, "--format", "sft", "--flavour", "hf")
    [row] = [r for r in rows if r["metadata"]["attempt_id"] == Attempt.objects.get(number=4).pk]
    calls = [m["tool_calls"][0]["function"]["arguments"]["command"] for m in row["messages"]
             if m["tool_calls"]]  # fmt: skip
    assert len(calls) == 5  # the read changes nothing and is left out
    assert calls[0] == (
        "mkdir -p src\ncat > src/calc.py <<'BOLTZ_EOF_1'\n"
        + fix
        + "BOLTZ_EOF_1\nchmod 755 src/calc.py"
    )
    assert calls[1].startswith("base64 -d > blob.bin <<'BOLTZ_EOF'\n/wBvaw==\n")
    assert calls[2].endswith(
        "# [Boltz: 1000 of the 66536 bytes of big.txt are not shown; the first 65536 are]"
    )
    assert "mkdir -p pkg/d" in calls[3] and "cat > pkg/d/x.py <<'BOLTZ_EOF'\nX = 1\n" in calls[3]
    assert calls[4] == "rm -rf -- 'old file.py'"
    assert row["messages"][-1]["content"] == "Wrote the fix."
    meta = row["metadata"]
    assert "file_writes" in meta["synthetic"]
    assert meta["files_cut"] == [4]  # the big file's call: a turn index, as cut_off
    # every message has the same keys, typed the same (the files of any tasks load together)
    for m in row["messages"]:
        assert list(m) == ["role", "content", "tool_calls", "tool_call_id", "name"], m
        assert isinstance(m["content"], str) and isinstance(m["name"], str)
    for fmt in (("rl",), ("pairs", "--flavour", "kto"), ("sft",)):
        assert "cat > src/calc.py" in json.dumps(export(tmp_path, "--format", *fmt)), fmt


def test_a_command_agents_uploaded_script_is_shown_with_its_contents(task, tmp_path):
    from attempts.services.attempts import attempt_create

    script = b"sed -i 's/a - b/a + b/' calc.py\necho sk-live-0123456789abcdef\n"
    attempt = attempt_create(
        task=task, agent="command", command="sh $BOLTZ_AGENT_DIR/fix.sh", files={"fix.sh": script}
    )
    Attempt.objects.filter(pk=attempt.pk).update(
        status="finished", outcome="passed", score=1.0, agent_env={"K": "sk-live-0123456789abcdef"}
    )
    end = {"phase": "end", "command": "sh $BOLTZ_AGENT_DIR/fix.sh", "exec": 1, "exit_code": 0}
    seq = attempt.events.count() + 1  # after the lifecycle events its creation added
    Event.objects.create(attempt=attempt, seq=seq, kind="exec", actor="agent", data=end)
    [row] = [r for r in export(tmp_path, "--format", "rl") if r["attempt_id"] == attempt.pk]
    command = row["completion"][0]["tool_calls"][0]["function"]["arguments"]["command"]
    assert command == (
        "mkdir -p /tmp/boltz/agent\ncat > /tmp/boltz/agent/fix.sh <<'BOLTZ_EOF'\n"
        "sed -i 's/a - b/a + b/' calc.py\necho [redacted]\nBOLTZ_EOF\n"
        "sh $BOLTZ_AGENT_DIR/fix.sh"
    )
    assert "agent_files" in row["synthetic"]


def test_exports_are_recorded(task, tmp_path):
    export(tmp_path, "--format", "rl", "--outcome", "failed")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.task_slug) == ("export_task", "t")
    assert entry.details == {"format": "rl", "flavour": "jsonl", "outcome": "failed"}
    assert entry.actor.startswith("cli")


def test_unknown_task_and_bad_dates_are_clear_errors(task, tmp_path):
    with pytest.raises(CommandError, match="no task 'nope'"):
        call_command("export_task", "nope", "-o", str(tmp_path / "x"))
    with pytest.raises(CommandError, match="--since 'yesterday'"):
        call_command("export_task", "t", "--since", "yesterday", "-o", str(tmp_path / "x"))


def test_web_task_export_streams_jsonl(task, admin_client):
    response = admin_client.get(
        "/tasks/t/export.jsonl?format=rl&outcome=infra_error&include_oracles=1"
    )
    assert response.status_code == 200
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(x)["mask"] for x in lines] == [True]
    meta = admin_client.get("/tasks/t/export.jsonl?format=sft:openai&part=meta")
    assert json.loads(b"".join(meta.streaming_content))["task"] == "t"
    assert 'filename="boltz-t-sft-openai.meta.jsonl"' in meta["Content-Disposition"]
    bad = admin_client.get("/tasks/t/export.jsonl?format=csv")
    assert bad.status_code == 400 and b"choose one of attempts, sft, pairs, rl" in bad.content
    # A page in Boltz's layout, with the way back to the task.
    assert b"<main" in bad.content and b'href="/tasks/t/"' in bad.content
    assert admin_client.get("/tasks/nope/export.jsonl").status_code == 404


def test_the_attempts_export_reads_checks_per_batch_not_per_attempt(
    task, django_assert_max_num_queries
):
    from attempts.exports.datasets import export_lines, select_attempts
    from attempts.models import CheckResult, TestOutcome

    for n in range(4, 44):
        attempt = Attempt.objects.create(task=task, number=n, agent="noop", status="finished")
        check = CheckResult.objects.create(attempt=attempt, passed=True, score=1.0, source="junit")
        TestOutcome.objects.create(check_result=check, name="t::a", outcome="passed")
    with django_assert_max_num_queries(5):
        lines = [json.loads(b) for b in export_lines(select_attempts(task.attempts), "attempts")]
    assert len(lines) == 43 and lines[-1]["check"]["tests"] == {"t::a": "passed"}
