"""The attempt pipeline end to end: real Docker, real Redis, a real Celery worker process."""

from __future__ import annotations

import pytest
from django.core.files.storage import default_storage

from attempts.models import Attempt, EventKind, Outcome, SandboxState
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]


def exec_end(attempt: Attempt, step: str) -> dict:
    events = [
        e.data
        for e in attempt.events.filter(kind=EventKind.EXEC)
        if e.data.get("phase") == "end" and e.data.get("step") == step
    ]
    assert len(events) == 1, f"expected one {step} exec, found {len(events)}"
    return events[0]


@pytest.mark.parametrize(("example", "noop_score"), [("fix-add", 0.0), ("text-utils", 0.4)])
def test_reference_passes_and_noop_fails(worker, load_example, example, noop_score):
    task = load_example(example)
    reference = attempt_create(task=task, agent="reference")
    noop = attempt_create(task=task, agent="noop")
    reference, noop = wait_finished([reference, noop])

    assert (reference.status, reference.outcome, reference.score) == ("finished", "passed", 1.0)
    assert (noop.status, noop.outcome) == ("finished", "failed")
    assert noop.score == pytest.approx(noop_score)
    assert noop.diff == ""
    assert "diff --git" in reference.diff
    for attempt in (reference, noop):
        assert attempt.sandbox_state == SandboxState.STOPPED
        assert attempt.failure_reason == ""
        assert set(attempt.timings) == {"start", "work", "record", "check", "total"}


def test_junit_check_keeps_per_test_outcomes(worker, load_example):
    task = load_example("text-utils")
    noop = wait_finished([attempt_create(task=task, agent="noop")])[0]
    check = noop.checks.get()
    assert check.source == "junit"
    assert (check.tests_passed, check.tests_total) == (2, 5)
    outcomes = dict(check.tests.values_list("name", "outcome"))
    assert outcomes["tests.test_textutils::test_title_case"] == "passed"
    assert outcomes["tests.test_textutils::test_slugify_lowercases"] == "failed"
    assert "<testsuite" in check.junit_xml


def test_command_agent_edits_show_in_diff_and_timeline_in_order(worker, load_example):
    task = load_example("fix-add")
    script = (
        "echo step-one\n"
        "sed -i 's/return a - b/return a + b/' calc.py\n"
        "echo new > notes.txt\n"
        "git rm -q README.md\n"
        "printf '%s' \"$BOLTZ_INSTRUCTION\" | head -c 40; echo\n"
        "echo step-two >&2\n"
    )
    attempt = attempt_create(
        task=task,
        agent="command",
        command="sh $BOLTZ_AGENT_DIR/agent.sh",
        files={"agent.sh": script.encode()},
    )
    attempt = wait_finished([attempt])[0]

    assert attempt.outcome == Outcome.PASSED
    assert "+    return a + b" in attempt.diff
    assert "diff --git a/notes.txt b/notes.txt\nnew file mode" in attempt.diff
    assert "diff --git a/README.md b/README.md\ndeleted file mode" in attempt.diff

    events = list(attempt.events.order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    agent_events = [e for e in events if e.actor == "agent" and e.kind in ("exec", "output")]
    kinds = [(e.kind, e.data.get("phase") or e.data.get("stream")) for e in agent_events]
    # Output is stored once, in the end event (no output events unless an API client streams)
    # and the live tail is gone from the start event once the command ended.
    assert kinds == [("exec", "start"), ("exec", "end")]
    assert "live" not in agent_events[0].data
    end = exec_end(attempt, "agent")
    assert end["stdout"]["head"].startswith("step-one\nThe test tests/test_calc.py")
    assert end["stderr"]["head"] == "step-two\n"
    statuses = [e.data.get("status") for e in events if e.kind == "lifecycle"]
    assert statuses.index("running") < statuses.index("checking") < statuses.index("finished")


def test_agent_that_sleeps_forever_is_killed_at_its_timeout(worker, load_example):
    task = load_example("fix-add", agent_timeout=2)
    attempt = attempt_create(task=task, agent="command", command="sleep 1000")
    attempt = wait_finished([attempt], timeout=60)[0]
    assert attempt.outcome == Outcome.AGENT_TIMEOUT
    assert "2s limit" in attempt.failure_reason
    end = exec_end(attempt, "agent")
    assert end["timed_out"] is True
    assert 2 <= end["duration"] < 6
    assert attempt.checks.count() == 1  # the check still ran on what the agent left


def test_escaped_background_process_is_killed_by_the_host(worker, load_example):
    # setsid leaves the timeout's process group and keeps the output pipe open.
    task = load_example("fix-add", agent_timeout=2)
    command = "setsid sh -c 'sleep 1000' & sleep 1000"
    attempt = wait_finished(
        [attempt_create(task=task, agent="command", command=command)], timeout=60
    )[0]
    assert attempt.outcome == Outcome.AGENT_TIMEOUT
    end = exec_end(attempt, "agent")
    assert end["timed_out"] is True
    assert end["duration"] < 20


def test_agent_that_rewrites_the_tests_still_fails(worker, load_example):
    task = load_example("fix-add")
    command = (
        "printf 'def test_add():\\n    pass\\n' > tests/test_calc.py && python3 -m pytest -q tests"
    )
    attempt = wait_finished([attempt_create(task=task, agent="command", command=command)])[0]
    assert exec_end(attempt, "agent")["exit_code"] == 0  # the agent's own run passed
    assert "tests/test_calc.py" in attempt.diff  # and the tampering is visible
    assert attempt.outcome == Outcome.FAILED
    assert "2 failed, 1 passed" in attempt.checks.get().output  # the hidden tests ran


def test_non_utf8_and_flooding_output_is_kept_honestly(worker, load_example, settings):
    task = load_example("fix-add")
    command = "printf 'bad \\377\\376 bytes\\n'; head -c 3000000 /dev/zero | tr '\\0' x; echo END"
    attempt = wait_finished([attempt_create(task=task, agent="command", command=command)])[0]
    assert attempt.outcome == Outcome.FAILED  # not a crash, not an infrastructure error
    stdout = exec_end(attempt, "agent")["stdout"]
    total = len("bad \xff\xfe bytes\n".encode("latin-1")) + 3_000_000 + len("END\n")
    assert stdout["bytes"] == total
    assert stdout["truncated"] is True
    assert stdout["utf8"] is False
    assert stdout["head"].startswith("bad \ufffd\ufffd bytes\n")
    assert stdout["tail"].endswith("xxxxEND\n")
    assert len(stdout["head"]) <= settings.BOLTZ_OUTPUT_HEAD_BYTES
    assert stdout["omitted_bytes"] > 2_000_000
    with default_storage.open(stdout["raw"], "rb") as raw:
        data = raw.read()
    assert len(data) == total and data.startswith(b"bad \xff\xfe bytes\n")
    # Stored once: no output events beside the end event's head and tail.
    assert not attempt.events.filter(kind=EventKind.OUTPUT).exists()


def test_a_redelivered_task_does_not_run_the_attempt_twice(worker, load_example):
    from attempts.dispatch.queue import RUN_ATTEMPT
    from attempts.run.docker import runtime
    from boltz_web.celery import app

    task = load_example("fix-add")
    attempt = attempt_create(task=task, agent="noop")
    app.send_task(RUN_ATTEMPT, args=[attempt.pk], queue=worker_queue())
    app.send_task(RUN_ATTEMPT, args=[attempt.pk], queue=worker_queue())
    attempt = wait_finished([attempt])[0]
    import time

    time.sleep(1.5)  # let the duplicate deliveries be consumed
    lifecycle = [e.data for e in attempt.events.filter(kind=EventKind.LIFECYCLE)]
    assert sum(1 for d in lifecycle if d.get("status") == "finished") == 1
    assert sum(1 for d in lifecycle if d.get("message", "").startswith("creating a sandbox")) == 1
    assert attempt.checks.count() == 1
    containers = [
        c
        for c in runtime.list_sandboxes(all_hosts=True)
        if c["labels"]["boltz.attempt"] == str(attempt.pk)
    ]
    assert len(containers) == 1


def worker_queue() -> str:
    from django.conf import settings

    return settings.BOLTZ_QUEUE


def test_container_security_settings_follow_the_sandbox_rules(worker, load_example, settings):
    from attempts.run.docker import runtime

    task = load_example("fix-add", cpus=0.5, memory_bytes=256 * 1024**2, pids_limit=128)
    attempt = attempt_create(
        task=task,
        agent="command",
        command="id -u; cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs)'; "
        "cat /sys/class/net/*/operstate 2>/dev/null | sort | tr '\\n' ' '; ls /sys/class/net",
    )
    attempt = wait_finished([attempt])[0]
    info = runtime.inspect_container(attempt.container_id)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Memory"] == 256 * 1024**2
    assert host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 128
    assert host["Init"] is True
    # The init runs as root, out of the agent's reach; every command as the sandbox user.
    assert info["Config"]["User"] == "0:0"
    labels = info["Config"]["Labels"]
    assert labels["boltz.attempt"] == str(attempt.pk)
    assert labels["boltz.host"] == settings.BOLTZ_HOST
    assert info["State"]["Running"] is False  # stopped and kept
    out = exec_end(attempt, "agent")["stdout"]["head"]
    assert out.splitlines()[0] == "1000"
    assert "CapEff:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out
    assert out.split()[-1] == "lo"  # the only interface: no network


def test_setup_runs_before_the_agent_and_a_reward_file_decides_the_score(worker, load_example):
    task = load_example(
        "fix-add",
        setup_command="echo prepared > .setup-done",
        check_command="test -f .setup-done && echo 0.25 > $BOLTZ_CHECK_DIR/reward.txt; exit 1",
        reward_file=True,
    )
    attempt = wait_finished([attempt_create(task=task, agent="noop")])[0]
    check = attempt.checks.get()
    assert (check.source, check.score, check.exit_code) == ("reward_file", 0.25, 1)
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.25
    assert exec_end(attempt, "setup")["exit_code"] == 0
    # The fresh container the check ran in was set up the same way.
    assert exec_end(attempt, "check-setup")["exit_code"] == 0


def test_a_failing_setup_is_the_tasks_fault_not_the_agents(worker, load_example):
    task = load_example("fix-add", setup_command="echo broken >&2; exit 3")
    attempt = wait_finished([attempt_create(task=task, agent="reference")])[0]
    assert attempt.outcome == Outcome.INFRA_ERROR
    assert attempt.failure_reason == "start: the task's setup command exited 3"
    assert attempt.checks.count() == 0
    assert attempt.sandbox_state == SandboxState.STOPPED


def test_diff_has_renames_and_binaries_and_the_check_sees_every_change(worker, load_example):
    # Staged or not, every change is in the diff and in the tree the check runs on.
    task = load_example(
        "fix-add",
        check_command="test -f staged.txt && test -f unstaged.txt && test -f NOTES.md"
        " && test ! -e README.md",
    )
    # (A rename inside tests/ would not reach the check: the test folder is the task's.)
    command = (
        "mv README.md NOTES.md && "
        "printf '\\000\\001\\002binary' > blob.bin && "
        "echo x > staged.txt && git add staged.txt && echo y > unstaged.txt"
    )
    attempt = wait_finished([attempt_create(task=task, agent="command", command=command)])[0]
    assert attempt.outcome == Outcome.PASSED, attempt.checks.get().output
    assert "rename from README.md\nrename to NOTES.md" in attempt.diff
    assert "diff --git a/blob.bin b/blob.bin\nnew file mode 100644" in attempt.diff
    assert "GIT binary patch" in attempt.diff
    assert "b/unstaged.txt" in attempt.diff and "b/staged.txt" in attempt.diff
    with default_storage.open(attempt.diff_file, "rb") as raw:
        assert raw.read().decode() == attempt.diff
