"""A hostile agent cannot forge, steer or hide its result: each attack below is an agent that
must fail, or (when it also fixes the task) pass with the fix visible in its stored diff.
Real Docker, a real worker, a repository made in the test whose future fix is on a branch and
a tag the sandbox must not see."""

from __future__ import annotations

import io
import subprocess
import tarfile
import textwrap

import pytest
from django.core.files.storage import default_storage

from attempts.models import Outcome
from attempts.run.docker import runtime
from attempts.services.attempts import attempt_create
from attempts.taskio.folders import load_task_dir
from attempts.taskio.repos import git
from tests.conftest import wait_finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.docker, pytest.mark.worker]

CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef one():\n    return 1\n"
TESTS = textwrap.dedent(
    """
    from calc import add, one


    def test_add():
        assert add(2, 3) == 5


    def test_one():
        assert one() == 1
    """
)
FIX = "sed -i 's/a - b/a + b/' calc.py"
ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def commit(repo, message):
    git("add", "-A", cwd=repo)
    git("commit", "-qm", message, cwd=repo, env=ENV)
    return git("rev-parse", "HEAD", cwd=repo).strip()


@pytest.fixture
def hostile_task(tmp_path, docker_ready):
    """A task at commit BASE of a repository whose main branch, a tag and another branch go on
    to the fix. Returns (task, base, fix)."""
    folder = tmp_path / "hostile"
    repo = folder / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC_BUGGY)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / "README.md").write_text("calc\n")
    (repo / ".gitignore").write_text("*.log\n")
    git("init", "-q", "-b", "main", cwd=repo)
    base = commit(repo, "base")
    (repo / "calc.py").write_text(CALC_BUGGY.replace("a - b", "a + b"))
    fix = commit(repo, "the fix")
    git("tag", "v-fixed", cwd=repo)
    git("branch", "other", cwd=repo)
    (folder / "check" / "tests").mkdir(parents=True)
    (folder / "check" / "tests" / "test_calc.py").write_text(TESTS)
    (folder / "task.toml").write_text(
        textwrap.dedent(
            f"""
            slug = "hostile"
            instruction = "Make tests/test_calc.py pass by fixing calc.py."
            check = "python3 -m pytest -q -p no:cacheprovider tests"
            [repository]
            path = "repo"
            ref = "{base}"
            [limits]
            agent_timeout = "60s"
            check_timeout = "60s"
            memory = "256m"
            pids = 128
            """
        )
    )
    task, _ = load_task_dir(folder)
    return task, base, fix


def run(task, **agents):
    """Run one command agent per keyword (name=script); return {name: finished attempt}."""
    made = {
        name: attempt_create(
            task=task,
            agent="command",
            command="sh $BOLTZ_AGENT_DIR/agent.sh",
            files={"agent.sh": script.encode()},
        )
        for name, script in agents.items()
    }
    done = {a.pk: a for a in wait_finished(list(made.values()), timeout=150)}
    return {name: done[a.pk] for name, a in made.items()}


def agent_output(attempt) -> str:
    end = attempt.events.get(kind="exec", data__phase="end", data__step="agent").data
    return end["stdout"]["head"] + end["stderr"]["head"]


def test_forged_passes_fail_and_are_reported(worker, hostile_task, figure):
    task, _base, _fix = hostile_task
    result = run(
        task,
        # A conftest.py hidden from the diff by .git/info/exclude writes a reward file.
        conftest_reward=(
            "printf 'import os, pathlib\\n"
            'pathlib.Path(os.environ.get("BOLTZ_CHECK_DIR", "/tmp"), "reward.txt")'
            '.write_text("1.0")\\n\' > conftest.py\n'
            "mkdir -p .git/info && echo conftest.py >> .git/info/exclude\n"
            "git status --porcelain\n"
        ),
        # A conftest hook that turns every failure into a pass.
        conftest_hook=(
            "cat > tests/conftest.py <<'PY'\n"
            "import pytest\n"
            "@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n"
            "    report = outcome.get_result()\n"
            "    report.outcome = 'passed'\n"
            "PY\n"
        ),
        # A .pth in the sandbox user's site folder makes every Python exit 0 and writes a reward.
        user_site=(
            'site=$(python3 -m site --user-site) && mkdir -p "$site" && '
            "printf 'import atexit, os; atexit.register(lambda: os._exit(0))\\n' "
            '> "$site/zz-forge.pth"\n'
            "python3 -c 'import sys; sys.exit(3)'; echo exit=$?\n"
        ),
        # The code under test writes a reward file the task never declared.
        reward_from_code=(
            "printf 'import os, pathlib\\n"
            'pathlib.Path(os.environ.get("BOLTZ_CHECK_DIR", "/tmp"), "reward.txt")'
            '.write_text("1.0")\\n\' >> calc.py\n'
        ),
    )
    for name, attempt in result.items():
        assert attempt.outcome == Outcome.FAILED, (name, attempt.failure_reason)
        assert attempt.score == 0.0, name
        check = attempt.checks.get()
        assert check.passed is False and check.mode == "fresh"
        failing = set(check.tests.filter(outcome="failed").values_list("name", flat=True))
        assert failing == {"tests.test_calc::test_add"}, name  # Boltz's own pytest report

    conftest = result["conftest_reward"]
    assert "?? conftest.py" not in agent_output(conftest)  # hidden from the agent's git
    assert "diff --git a/conftest.py b/conftest.py" in conftest.diff  # not from Boltz's
    assert conftest.tamper["protected"] == [{"path": "conftest.py", "change": "added"}]
    hook = result["conftest_hook"]
    assert hook.tamper["protected"] == [{"path": "tests/conftest.py", "change": "added"}]
    assert "exit=0" in agent_output(result["user_site"])  # the .pth worked in the sandbox
    assert result["user_site"].diff == ""
    forged = result["reward_from_code"]
    assert forged.tamper["reward_files"] == ["reward.txt"]
    assert forged.checks.get().ignored_reward_files == ["reward.txt"]
    assert "ignored reward.txt" in " ".join(forged.events.get(kind="check").data["notes"])
    figure(
        f"{len(result)} forged passes tried: "
        f"{sum(a.outcome == Outcome.FAILED for a in result.values())} failed, "
        f"top score {max(a.score for a in result.values())}"
    )


def test_the_sandbox_holds_no_history_past_the_base(worker, hostile_task):
    task, base, fix = hostile_task
    probe = (
        "echo '# log'; git log --all --format=%H\n"
        "echo '# tag'; git tag\n"
        "echo '# branch'; git branch -a\n"
        "echo '# reflog'; git reflog --all\n"
        "echo '# stash'; git stash list\n"
        "echo '# remote'; git remote -v\n"
        "echo '# refs'; git for-each-ref --format='%(refname)'\n"
        "echo '# objects'; git rev-list --all --objects | wc -l\n"
        f"echo '# fix'; git cat-file -t {fix} 2>&1 || echo missing\n"
        f"git checkout {fix} -- calc.py 2>&1 || echo no-checkout\n"
        "git checkout v-fixed -- calc.py 2>&1 || echo no-tag\n"
        # The agent's own commits on top of the base still work.
        "echo note > notes.txt && git add notes.txt && git commit -qm mine && echo committed\n"
    )
    attempt = run(task, probe=probe)["probe"]
    out = agent_output(attempt)
    sections = dict(
        (part.split("\n", 1) + [""])[:2] for part in out.split("# ")[1:] if part.strip()
    )
    assert sections["log"].split() == [base]
    assert sections["tag"].strip() == "" and sections["stash"].strip() == ""
    assert sections["remote"].strip() == "" and sections["reflog"].strip() == ""
    assert sections["refs"].strip() == ""  # HEAD is detached at the base: no ref at all
    assert sections["branch"].strip() in ("* (no branch)", f"* (HEAD detached at {base[:7]})")
    objects_at_base = git("rev-list", "--objects", base, cwd=task.repo_url).count("\n")
    assert int(sections["objects"].split()[0]) == objects_at_base
    assert "missing" in sections["fix"]
    assert "no-checkout" in out and "no-tag" in out and "committed" in out
    assert attempt.outcome == Outcome.FAILED
    assert [c["subject"] for c in attempt.commits] == ["mine"]
    assert "diff --git a/notes.txt b/notes.txt" in attempt.diff


def test_what_was_checked_is_what_the_diff_shows(worker, hostile_task):
    task, base, _fix = hostile_task
    result = run(
        task,
        # The agent's git says "no changes": a replace ref swaps the base for the fixed tree.
        replace_ref=f"{FIX} && git commit -qam fix && git replace {base} HEAD && git diff {base}",
        # A fork bomb left running would make a diff command in the sandbox fail.
        fork_bomb=f"{FIX}\nsetsid sh -c 'b() {{ b | b & }}; b' >/dev/null 2>&1 </dev/null &\n",
        # A process that applies the fix after the agent's step has ended.
        late_fix=f"setsid sh -c 'sleep 3; {FIX}' >/dev/null 2>&1 </dev/null &\n",
        # Ending the sandbox's first process to turn a failure into an infrastructure error.
        kill_init="kill -TERM 1; echo term=$?; kill -KILL 1; echo kill=$?; sleep 1\n",
    )
    for name in ("replace_ref", "fork_bomb"):
        attempt = result[name]
        assert attempt.outcome == Outcome.PASSED, (name, attempt.failure_reason)
        assert "-    return a - b\n+    return a + b" in attempt.diff, name
    assert agent_output(result["replace_ref"]).strip() == ""  # the agent's own diff: nothing
    late = result["late_fix"]
    assert (late.outcome, late.diff, late.changes_state) == (Outcome.FAILED, "", "recorded")
    killer = result["kill_init"]
    assert killer.outcome == Outcome.FAILED and killer.failure_reason == ""
    assert "term=1" in agent_output(killer) and "kill=1" in agent_output(killer)


def test_running_out_of_memory_is_the_reason(worker, hostile_task):
    task, _base, _fix = hostile_task
    attempt = run(task, hog="python3 -c 'x = bytearray(1024 * 1024 * 1024)'\n")["hog"]
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.0
    # Under runc the kernel kills the process; under gVisor (its own memory counted with the
    # sandbox's) the whole sandbox goes: either way, memory is named as the agent's failure.
    assert attempt.failure_reason in (
        "a process of the agent's was killed: out of memory (256 MB limit)",
        "the sandbox was killed during the agent's step: out of memory (256 MB limit)",
    ), attempt.failure_reason


def test_a_declared_reward_file_that_is_never_written_fails_with_that_reason(worker, hostile_task):
    task, _base, _fix = hostile_task
    task.reward_file = True
    task.save()
    attempt = run(task, fixer=FIX)["fixer"]
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.0
    assert attempt.failure_reason == (
        "the check wrote no reward file, and the task declares that it writes one"
    )


def test_a_report_that_disagrees_with_the_exit_code_fails(worker, hostile_task):
    task, _base, _fix = hostile_task
    task.check_command = "python3 -m pytest -q -p no:cacheprovider tests; true"
    task.save()
    attempt = run(task, nothing="true")["nothing"]
    assert attempt.outcome == Outcome.FAILED
    assert attempt.failure_reason.startswith(
        "check results disagree: the test report has 1 failing test(s) "
        "(tests.test_calc::test_add) but the check exited 0"
    )


TREE_SCRIPT = r"""
printf '\000\001\002\377binary' > blob.bin
printf '#!/bin/sh\necho hi\n' > run.sh && chmod 755 run.sh
chmod 755 calc.py
ln -s calc.py link-to-calc
ln -s /etc/hostname abs-link
mv README.md README.txt
git rm -q --cached tests/test_calc.py >/dev/null; rm -f .gitignore.bak
printf 'spaces' > 'name with spaces.txt'
printf 'newline' > "$(printf 'new\nline.txt')"
printf 'latin' > "$(printf 'caf\351.txt')"
: > empty.txt
echo log > debug.log
mkdir -p deep/er && echo d > deep/er/file.txt
mkdir -p emptydir
"""


def _tree(tar: tarfile.TarFile, prefix: str) -> dict[str, tuple]:
    found = {}
    for member in tar:
        name = member.name
        if not name.startswith(prefix):
            continue
        rel = name[len(prefix) :]
        if not rel or rel == ".git" or rel.startswith(".git/") or member.isdir():
            continue
        if member.issym():
            found[rel] = ("link", member.linkname)
        else:
            data = tar.extractfile(member).read()
            found[rel] = ("file", bool(member.mode & 0o100), data)
    return found


def test_every_kind_of_tree_is_recorded_and_checked_exactly(worker, hostile_task, tmp_path):
    task, base, _fix = hostile_task
    attempt = run(task, tree=TREE_SCRIPT)["tree"]
    assert attempt.changes_state == "recorded"
    # What the agent left, read from its kept sandbox ...
    stream = runtime.Sandbox(attempt.container_id).get_archive("/workspace")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r") as tar:
        left = _tree(tar, "workspace/")
    del left["debug.log"]  # ignored by the tree's .gitignore: not part of the changes
    # ... is exactly what the stored patch gives on the base ...
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", task.repo_url, str(clone)], check=True)
    git("checkout", "-q", "--detach", base, cwd=clone)
    patch = tmp_path / "changes.patch"
    with default_storage.open(attempt.diff_file, "rb") as stored:
        patch.write_bytes(stored.read())
    git("apply", "--binary", str(patch), cwd=clone)
    archive = tmp_path / "applied.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(clone, arcname="workspace")
    with tarfile.open(archive) as tar:
        applied = _tree(tar, "workspace/")
    assert applied == left
    # ... and exactly what the bundle's workspace holds.
    with default_storage.open(attempt.workspace_file, "rb") as stored:
        packed = io.BytesIO(stored.read())
    with tarfile.open(fileobj=packed, mode="r:gz") as tar:
        snapshot = _tree(tar, "")
    omitted = {o["path"] for o in attempt.workspace_omitted}
    assert omitted == {"abs-link"}  # a link out of the workspace is not shipped
    assert snapshot == {k: v for k, v in left.items() if k not in omitted}
    assert "new file mode 100755" in attempt.diff and "old mode 100644" in attempt.diff
    assert "rename from README.md" in attempt.diff and "debug.log" not in attempt.diff
    assert "GIT binary patch" in attempt.diff


def test_an_in_place_check_is_not_fooled_by_what_the_agent_leaves(worker, hostile_task):
    task, _base, _fix = hostile_task
    task.check_mode = "in_place"
    task.save()
    result = run(
        task,
        # A process left running keeps writing a passing report and a reward.
        leftover=(
            "setsid sh -c 'while true; do mkdir -p /tmp/boltz-check /tmp/boltz-witness; "
            "echo 1.0 > /tmp/boltz-check/reward.txt; sleep 0.05; done' "
            ">/dev/null 2>&1 </dev/null &\n"
        ),
        # The user's site folder and home shape every Python the check runs.
        user_site=(
            'site=$(python3 -m site --user-site) && mkdir -p "$site" && '
            "printf 'import atexit, os; atexit.register(lambda: os._exit(0))\\n' "
            '> "$site/zz-forge.pth"\n'
        ),
        # A conftest.py in a folder the agent made read-only, behind .git/info/exclude.
        locked_conftest=(
            "printf 'import pytest\\n"
            "@pytest.hookimpl(hookwrapper=True)\\n"
            "def pytest_runtest_makereport(item, call):\\n"
            "    outcome = yield\\n"
            '    outcome.get_result().outcome = "passed"\\n\' > tests/conftest.py\n'
            "chmod 444 tests/conftest.py && chmod 555 tests\n"
        ),
        # The tests folder swapped for a link to the agent's own, passing tests.
        linked_tests=(
            "mkdir -p /tmp/mine && printf 'def test_add():\\n    pass\\n' > /tmp/mine/test_calc.py"
            " && rm -rf tests && ln -s /tmp/mine tests\n"
        ),
        honest=FIX,
    )
    for name in ("leftover", "user_site", "locked_conftest", "linked_tests"):
        attempt = result[name]
        assert attempt.outcome == Outcome.FAILED, (name, attempt.failure_reason)
        check = attempt.checks.get()
        assert check.mode == "in_place" and check.passed is False
        assert check.tests.filter(outcome="failed").count() == 1, name
    assert result["locked_conftest"].tamper["protected"] == [
        {"path": "tests/conftest.py", "change": "added"}
    ]
    linked = {p["path"]: p["change"] for p in result["linked_tests"].tamper["protected"]}
    assert linked == {"tests/test_calc.py": "deleted"}
    honest = result["honest"]
    assert honest.outcome == Outcome.PASSED and not honest.tampered


def test_a_check_that_runs_out_of_memory_says_so(worker, hostile_task):
    task, _base, _fix = hostile_task
    task.check_command = "python3 -c 'x = bytearray(1024 * 1024 * 1024)'"
    task.save()
    attempt = run(task, fixer=FIX)["fixer"]
    assert attempt.outcome == Outcome.FAILED and attempt.score == 0.0, attempt.failure_reason
    # Under gVisor the whole check container is killed, not one process: no exit code then.
    assert attempt.failure_reason.startswith("the check was killed: out of memory (256 MB limit)")


def test_the_check_gets_every_change_when_the_page_is_capped_and_none_past_the_tree_cap(
    django_db_setup, docker_ready, redis_ready, hostile_task
):
    import uuid

    from tests.conftest import run_worker

    task, _base, _fix = hostile_task
    queue = f"caps-{uuid.uuid4().hex[:8]}"
    env = {"BOLTZ_MAX_DIFF_BYTES": "300", "BOLTZ_MAX_TREE_BYTES": "100k"}
    with run_worker(queue=queue, host="caps-host", capacity=2, env=env):
        made = [
            attempt_create(task=task, agent="command", command=command, queue=queue)
            for command in (
                # A long new file sorts before calc.py: the page's diff ends before the fix.
                f"seq 1 300 > aaa.txt && {FIX}",
                f"head -c 200000 /dev/zero > big.bin && {FIX}",
            )
        ]
        capped, too_big = wait_finished(made, timeout=120)
    assert capped.outcome == Outcome.PASSED, capped.failure_reason
    assert capped.diff_truncated and len(capped.diff.encode()) <= 300
    assert "calc.py" not in capped.diff and capped.diff_bytes > 300
    assert (too_big.outcome, too_big.score, too_big.changes_state) == (
        Outcome.FAILED,
        0.0,
        "unavailable",
    )
    assert too_big.failure_reason == (
        "changes unavailable: the workspace holds more than 102400 bytes of files"
    )
    assert too_big.checks.count() == 0
