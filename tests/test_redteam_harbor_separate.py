"""Red team (23): Harbor's separate verifier. What the agent hands over (or makes Docker unable
to hand over) must never pass a check it did not earn, never land anywhere but at its own
path, and never turn the agent's failure into an infrastructure error."""

from __future__ import annotations

import shutil

import pytest

from attempts.models import SEPARATE_VERIFIER, EventKind, Outcome, Task
from attempts.services.attempts import attempt_create
from tests.conftest import wait_finished
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker]

GRADER = HARBOR / "separate-grader"


def _copy(tmp_path, slug: str, *, artifacts: str | None = None, test_sh_extra: str = "") -> Task:
    folder = tmp_path / slug
    shutil.copytree(GRADER, folder)
    if artifacts is not None:
        toml = folder / "task.toml"
        text = toml.read_text()
        assert 'artifacts = ["/app/out.txt"]' in text
        toml.write_text(text.replace('artifacts = ["/app/out.txt"]', f"artifacts = {artifacts}"))
    if test_sh_extra:
        test_sh = folder / "tests" / "test.sh"
        test_sh.write_text(test_sh.read_text() + test_sh_extra)
    run_import(folder)
    return Task.objects.get(slug=slug)


def _handover(attempt) -> dict:
    events = [
        e.data
        for e in attempt.events.filter(kind=EventKind.LIFECYCLE)
        if e.data.get("check_mode") == SEPARATE_VERIFIER
    ]
    return events[0] if events else {}


def test_a_task_that_would_hand_over_the_verifiers_own_folders_is_refused(docker_ready, tmp_path):
    """A task that hands the verifier all of /logs (say, to grade the agent's logs) would hand
    over the agent's own /logs/verifier too, over the folder the verifier writes its reward in:
    a read-only reward.txt = 1 there, and a non-root verifier's `echo 0 > reward.txt` fails
    and the planted 1 is read. Such a task is refused; nothing lands there anyway."""
    from io import StringIO

    from django.core.management import CommandError, call_command

    for listed in ('"/logs"', '"/logs/verifier/x"', '"/tests"'):
        folder = tmp_path / f"sep-{len(listed)}"
        shutil.copytree(GRADER, folder)
        toml = folder / "task.toml"
        toml.write_text(toml.read_text().replace('"/app/out.txt"', listed))
        out = StringIO()
        with pytest.raises(CommandError, match="nothing was imported"):
            call_command(
                "import_tasks", str(folder), "--base-image", "*=boltz-base:bookworm", stdout=out
            )
        assert "where the verifier's own files are" in out.getvalue(), out.getvalue()


@pytest.mark.worker
def test_an_artifact_docker_cannot_read_is_the_agents_failure_not_an_infra_error(
    worker, docker_ready
):
    """A link to itself at the task's artifact path (or at /logs/artifacts): Docker answers
    500 (`evalSymlinksInScope: too many links`) when the artifact is read, which Boltz takes
    for the daemon failing. The agent did not do the task: it must fail, scored 0."""
    run_import(GRADER)
    task = Task.objects.get(slug="separate-grader")
    loops = [
        "ln -s /app/out.txt /app/out.txt",  # in the working folder: any agent user can
        "rm -rf /logs/artifacts && ln -s /logs/artifacts /logs/artifacts",
        "rm -rf /logs && echo x > /logs",  # /logs/artifacts: not a directory
    ]
    attempts = wait_finished(
        [attempt_create(task=task, agent="command", command=cmd) for cmd in loops], timeout=300
    )
    seen = [
        f"{cmd} => {a.outcome} ({a.failure_reason[-90:]}) score {a.score}"
        for cmd, a in zip(loops, attempts, strict=True)
    ]
    # Observed: infra_error, "check: Docker daemon unreachable or failing: 500 ... too many
    # links" (and "... not a directory"), score None: the failure drops out of the scores.
    assert all(a.outcome == Outcome.FAILED for a in attempts), "\n".join(seen)


@pytest.mark.worker
def test_an_artifact_lands_at_its_own_path_whatever_its_name(worker, docker_ready, tmp_path):
    """Docker writes a PAX `path` record for a name that is not plain ASCII or is long;
    Python's tarfile writes that record back over the rebased name, so the file lands at
    /artifacts/... (the artifact's base name at the root) instead of /logs/artifacts/...:
    an honest agent's file goes missing, and the agent can place files where the task never
    said (for an artifact named like /app/tests, into the verifier's /tests)."""
    task = _copy(
        tmp_path,
        "sep-names",
        test_sh_extra="\nfind /artifacts /logs/artifacts -type f 2>/dev/null | sed 's/^/seen: /'\n",
    )
    long = "f" * 110 + ".txt"  # a name over 100 characters: no ustar header holds it
    work = (
        "echo ready > /app/out.txt; echo x > '/logs/artifacts/r\u00e9sum\u00e9.txt'; "
        f"echo x > /logs/artifacts/{long}"
    )
    (attempt,) = wait_finished([attempt_create(task=task, agent="command", command=work)], 240)
    output = attempt.checks.get().output
    assert attempt.outcome == Outcome.PASSED, (attempt.failure_reason, output)
    # Observed: "seen: /artifacts/résumé.txt" and "seen: /artifacts/fff...f.txt".
    assert "seen: /logs/artifacts/r\u00e9sum\u00e9.txt" in output, output
    assert f"seen: /logs/artifacts/{long}" in output, output
    assert "seen: /artifacts/" not in output, output
