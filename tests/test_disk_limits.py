"""Bounded resources per sandbox, on the real services: its disk (the writable layer, /tmp
included), enforced by Docker's quota, and the raw output an attempt keeps."""

from __future__ import annotations

import re
import uuid

import pytest
from django.core.files.storage import default_storage

from attempts.core.errors import TaskInvalid
from attempts.models import EventKind, Outcome
from attempts.run.docker import runtime
from attempts.services.attempts import attempt_create
from tests.conftest import run_worker, wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

MB = 1024 * 1024
# Writes 200 MB to /tmp, then to /workspace, then to /var/tmp, removing each, and says how far
# each got; then fills /workspace and leaves it full.
FILL = (
    "for d in /tmp /workspace /var/tmp; do "
    "dd if=/dev/zero of=$d/fill bs=1M count=200 2>&1 | tail -1; rm -f $d/fill; done; "
    "dd if=/dev/zero of=/workspace/kept bs=1M count=200 2>&1 | tail -1; exit 1"
)


def test_a_sandbox_cannot_write_past_its_disk_limit_and_the_outcome_says_it_was_reached(
    worker, load_example, figure
):
    assert not runtime.disk_limit_refusal(), "this host's Docker must enforce disk limits"
    task = load_example("fix-add", disk_bytes=64 * MB)
    attempt = wait_finished([attempt_create(task=task, agent="command", command=FILL)])[0]
    assert attempt.outcome == Outcome.FAILED, attempt.failure_reason
    events = [(e.kind, e.data.get("message")) for e in attempt.events.order_by("seq")]
    assert "disk limit of 64 MB reached" in attempt.failure_reason, events
    created = [m for kind, m in events if m and m.startswith("creating a sandbox")]
    assert created == [f"creating a sandbox from {task.image_name} (disk up to 64 MB)"]
    end = attempt.events.get(kind=EventKind.EXEC, data__step="agent", data__phase="end")
    out = end.data["stdout"]["head"]
    copied = [int(n) for n in re.findall(r"^(\d+) bytes", out, re.M)]
    # Each write stopped at the limit, in every folder; what one freed, the next could use.
    assert copied and all(60 * MB < n <= 64 * MB for n in copied), out
    figure(
        f"{len(copied)} writes of 200 MB stopped at {max(copied) / MB:.0f} MB or less "
        "under a 64 MB limit; reason: disk limit of 64 MB reached"
    )
    # What it holds now (kept for review): no more than its limit beyond the task's files.
    used, allowed = runtime.Sandbox(attempt.container_id).disk_usage()
    assert 64 * MB <= allowed < 65 * MB  # its limit, and the task's small repository
    assert used <= allowed


def test_an_honest_agent_under_a_disk_limit_is_unaffected(worker, load_example):
    task = load_example("fix-add", disk_bytes=64 * MB)
    attempt = wait_finished([attempt_create(task=task, agent="reference")])[0]
    ends = [
        e.data for e in attempt.events.filter(kind=EventKind.EXEC) if e.data.get("phase") == "end"
    ]
    assert attempt.outcome == Outcome.PASSED, [
        (d.get("command"), d["exit_code"], d["stdout"]["head"][-1500:], d["stderr"]["head"][-1500:])
        for d in ends
    ]
    assert "disk limit" not in attempt.failure_reason


def test_raw_output_is_kept_within_the_attempts_budget_across_its_commands(
    django_db_setup, docker_ready, redis_ready, load_example, figure
):
    queue = f"raw-{uuid.uuid4().hex[:8]}"
    task = load_example("fix-add")
    # Three commands print 1.5 MB each (stdout and stderr); the attempt keeps 2 MB of raw bytes.
    loud = "head -c 1000000 /dev/zero; head -c 500000 /dev/zero >&2"
    with run_worker(
        queue=queue, host="raw-host", capacity=1, env={"BOLTZ_RAW_OUTPUT_BUDGET": "2m"}
    ):
        attempt = attempt_create(
            task=task, agent="command", command=f"{loud}; {loud}; {loud}", queue=queue
        )
        attempt = wait_finished([attempt], timeout=120)[0]
    assert attempt.raw_output_bytes <= 2 * MB
    end = attempt.events.get(kind=EventKind.EXEC, data__step="agent", data__phase="end")
    kept = sum(end.data[s]["raw_bytes"] for s in ("stdout", "stderr"))
    assert kept == attempt.raw_output_bytes == 2 * MB  # every other command printed nothing
    assert end.data["stdout"]["bytes"] == 3_000_000  # counted in full, whatever is kept
    assert end.data["stdout"]["raw_truncated"] or end.data["stderr"]["raw_truncated"]
    stored = sum(
        default_storage.size(end.data[s]["raw"]) for s in ("stdout", "stderr") if end.data[s]["raw"]
    )
    assert stored == kept
    figure(f"4.5 MB printed, {stored / MB:.1f} MB of raw output kept under a 2 MB budget")


def test_a_task_folder_sets_its_disk_limit(task_dir):
    from attempts.taskio.folders import load_task_dir

    folder = task_dir("fix-add")
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("[limits]", '[limits]\ndisk = "4g"'))
    task, _ = load_task_dir(folder)
    assert task.disk_bytes == 4 * 1024**3 and task.disk_limit == 4 * 1024**3
    toml.write_text(toml.read_text().replace('disk = "4g"', "disk = 0"))
    with pytest.raises(TaskInvalid, match="limits.disk"):
        load_task_dir(folder)


def test_a_task_without_its_own_limit_has_the_settings(settings):
    from attempts.models import Task

    settings.BOLTZ_DISK_LIMIT = 3 * MB
    assert Task(disk_bytes=None).disk_limit == 3 * MB
    assert Task(disk_bytes=5 * MB).disk_limit == 5 * MB


@pytest.mark.timeout(400)
def test_an_in_place_check_on_a_disk_the_agent_left_full_is_the_agents_outcome(
    worker, make_task, figure
):
    """The agent fills its disk to the limit and leaves it full; the check then runs in the
    same container. Whatever that breaks is the agent's own doing: the fix still passes or
    the attempt fails with a score of 0, never an infrastructure error left out of the scores,
    and a wrong fix never passes."""
    fill = "dd if=/dev/zero of=/workspace/kept bs=1M count=200 2>/dev/null; "
    fill += "dd if=/dev/zero of=/tmp/kept bs=1M count=200 2>/dev/null; "
    fixed = "sed -i 's/a - b/a + b/' calc.py; "
    tasks = {}
    for name in ("fixed", "buggy"):
        task = make_task(mode="in_place")
        task.disk_bytes = 32 * MB
        task.save()
        tasks[name] = task
    attempts = wait_finished(
        [
            attempt_create(task=tasks["fixed"], agent="command", command=fixed + fill),
            attempt_create(task=tasks["buggy"], agent="command", command=fill),
        ],
        timeout=300,
    )
    seen = {a.pk: (a.outcome, a.score, a.failure_reason) for a in attempts}
    fixed_attempt, buggy_attempt = attempts
    assert fixed_attempt.outcome in (Outcome.PASSED, Outcome.FAILED), seen
    assert (fixed_attempt.score == 1.0) == (fixed_attempt.outcome == Outcome.PASSED), seen
    assert buggy_attempt.outcome == Outcome.FAILED and buggy_attempt.score == 0.0, seen
    for attempt in attempts:  # why it failed, when it did: the disk the agent filled
        if attempt.outcome == Outcome.FAILED:
            assert "disk limit of 32 MB reached" in attempt.failure_reason, seen
    used, allowed = runtime.Sandbox(buggy_attempt.container_id).disk_usage()
    assert used >= allowed - MB  # it was full when the check ran
    figure(
        f"disk left full (32 MB): the fix {fixed_attempt.outcome}, the wrong code "
        f"{buggy_attempt.outcome} with score 0; no infrastructure error"
    )


@pytest.mark.timeout(400)
def test_a_full_disk_is_the_sandboxs_own_doing_in_the_api_and_in_pools(
    worker, web, load_example, figure
):
    """A live sandbox that fills its disk: a file written then is refused as `disk_full`
    (409, the client's to fix), never a 502 infrastructure error; freeing space lets it go on.
    A pool's `write` on a full disk is refused, never masked as the infrastructure's."""
    from boltz.errors import BoltzError
    from tests.conftest import sdk_client

    task = load_example("fix-add", disk_bytes=16 * MB)
    fill = "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>/dev/null; true"
    with sdk_client(web, "filler") as client:
        with client.sandbox(task=task.slug, wait=120) as sandbox:
            sandbox.exec(fill)
            with pytest.raises(BoltzError) as refused:
                sandbox.files.write("note.txt", "x" * 100_000)
            assert (refused.value.status, refused.value.code) == (409, "disk_full"), refused.value
            assert "remove files to free space" in str(refused.value)
            sandbox.exec("rm /workspace/fill")
            sandbox.files.write("note.txt", "x" * 100_000)
            assert sandbox.files.read("note.txt") == b"x" * 100_000
        with client.pool(task=task.slug, size=1) as pool:
            pool.reset(wait=120)
            pool.step([fill])
            (result,) = pool.step([{"write": {"note.txt": "x" * 100_000}}])
            info = result.info
            assert info["failure_kind"] == "refused" and "disk" in info["error"], info
    figure("a write on a full disk: 409 disk_full through the API, refused in a pool")
