"""boltz.inspect_ai against the real things (a web server process, the session's worker,
Docker): Inspect's own portable conformance suite for sandbox providers passes on a Boltz
sandbox, and an Inspect eval runs a task in Boltz sandboxes and scores it with the task's check.

The conformance checks are Inspect's (`inspect_ai.util._sandbox.self_check`), collected here
with the `sandbox_env` fixture its docstring describes, and run twice: once on a task-less
sandbox of the default image, where `test_exec_as_user` is an expected failure declared in the
fixture with its reason (it needs `user="root"` to run `adduser`, and such a sandbox never runs
a command as root: the provider raises SandboxUserUnsupportedError, as Inspect's contract
provides), and once on a sandbox of a Harbor task that allows root (its agent runs as root),
where `exec(user="root")` runs as root and 43 pass: `test_exec_as_user` is an expected failure
there too, for another reason, declared with it: root has no capabilities, and `adduser` needs
CAP_CHOWN (DESIGN.md's sandbox rules; a root that could override file ownership could reach an
in-place check's witness pipe).
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import SandboxEnvironmentSpec, SandboxUserUnsupportedError, sandbox
from inspect_ai.util._sandbox.self_check import *  # noqa: F403 - Inspect's conformance checks

from attempts.api.tokens import token_create
from attempts.models import Attempt, EventKind, Status
from attempts.run.heartbeat import register_this_host
from boltz import AsyncClient, BoltzError, Client
from boltz.inspect_ai import BoltzSandbox, BoltzSandboxEnvironment, boltz_check
from tests.conftest import ROOT, agent_commands, wait_until
from tests.test_harbor import HARBOR, run_import

pytestmark = [pytest.mark.docker, pytest.mark.worker, pytest.mark.timeout(180)]

IMAGE = "boltz-sandbox:bookworm"
ROOT_ONLY = {
    "test_exec_as_user": "needs user='root' (adduser); Boltz never runs a command as root, "
    "so the provider raises SandboxUserUnsupportedError, as Inspect's contract provides"
}
# On the root task's sandbox the same check runs as root, and fails at adduser: a root without
# capabilities cannot give a file to another group (groupadd writing /etc/gshadow) or a home to
# another user. Capabilities are not given: see docs/INTEGRATIONS.md.
ROOT_WITHOUT_CAPABILITIES = {
    "test_exec_as_user": "root runs, without capabilities: adduser cannot chown (/etc/gshadow)"
}


def _account(web: str, name: str) -> tuple[str, str]:
    # The worker's images, as its reaper reports them (an emptied database forgot them).
    register_this_host()
    user = get_user_model().objects.create_user(name)
    _row, token = token_create(user=user)
    return web, token


@pytest.fixture
def account(web, worker, db):
    """A user of the served instance and their token (for the tests that use the database:
    pytest-django empties it after each)."""
    return _account(web, "inspector")


@pytest.fixture(scope="module")
def checks_account(web, worker, django_db_blocker):
    """The conformance checks' user and token (module-wide: the checks share one sandbox, as
    Inspect's own runner does; they run after the tests that empty the database). What they
    made is emptied after them, as after a test that uses the database: the tests that run next
    in this process find the database as pytest-django leaves it."""
    with django_db_blocker.unblock():
        made = _account(web, f"inspect-checks-{os.getpid()}")
    yield made
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(scope="module")
def shared_sandbox(checks_account):
    """One task-less sandbox from the default image for all the conformance checks."""
    url, token = checks_account
    with Client(url, token=token, timeout=60) as client:
        box = client.sandbox(image=IMAGE, labels={"suite": "inspect-self-check"})
        try:
            yield box.id
        finally:
            box.close()


@pytest.fixture(scope="module")
def root_task_sandbox(checks_account, django_db_blocker):
    """One sandbox of a Harbor task that allows root (no USER in its image, so its agent runs
    as root; its verifier in a container of its own) for the second run of the checks."""
    with django_db_blocker.unblock():
        run_import(HARBOR / "separate-grader")
    url, token = checks_account
    with Client(url, token=token, timeout=60) as client:
        box = client.sandbox(task="separate-grader", labels={"suite": "inspect-self-check"})
        try:
            yield box.id
        finally:
            box.close()


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(params=["image", "root-task"])
def checked_sandbox(request):
    """The id of the shared sandbox a check runs on: the default image's (no root: the
    root-only check is an expected failure) or the root task's (root runs; the check that makes a user fails for want of capabilities)."""
    root_task = request.param == "root-task"
    reason = (ROOT_WITHOUT_CAPABILITIES if root_task else ROOT_ONLY).get(request.node.originalname)
    if reason:  # for that reason only: root refused, or root's adduser failing
        raises = AssertionError if root_task else SandboxUserUnsupportedError
        request.node.add_marker(pytest.mark.xfail(reason=reason, raises=raises, strict=True))
    return request.getfixturevalue("root_task_sandbox" if root_task else "shared_sandbox")


@pytest.fixture
async def sandbox_env(checks_account, checked_sandbox):
    """Inspect's `sandbox_env`: a BoltzSandboxEnvironment on one of the shared sandboxes."""
    url, token = checks_account
    client = AsyncClient(url, token=token, timeout=120)
    try:
        yield BoltzSandboxEnvironment(client, await client.get_sandbox(checked_sandbox))
    finally:
        await client.close()


# Inspect's checks are coroutines: run them (and only them) under anyio.
for _name in [n for n in dir() if n.startswith("test_") and n in globals()]:
    _check = globals()[_name]
    if getattr(_check, "__module__", "").startswith("inspect_ai.") and callable(_check):
        globals()[_name] = pytest.mark.anyio(_check)


# --- what the checks do not cover -----------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("checked_sandbox", ["root-task"], indirect=True)
async def test_a_root_task_runs_root_without_capabilities_and_the_init_out_of_its_reach(
    sandbox_env,
):
    said = await sandbox_env.exec(
        ["sh", "-c", "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; kill -TERM 1"],
        user="root",
    )
    # The server let root run (the task allows it), with no capability, no new privileges, and
    # the init (another uid) out of its reach: the sandbox lives on.
    assert said.stdout == "0\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n"
    assert not said.success and "not permitted" in said.stderr
    assert (await sandbox_env.exec(["whoami"], user="0")).stdout == "root\n"
    other = await sandbox_env.exec(["id", "-un"], user="nobody")
    assert (other.success, other.stdout) == (True, "nobody\n")


@pytest.mark.anyio
@pytest.mark.parametrize("checked_sandbox", ["image"], indirect=True)
async def test_root_is_unsupported_output_comes_whole_and_an_image_sandbox_has_no_check(
    sandbox_env,
):
    with pytest.raises(SandboxUserUnsupportedError, match="root"):
        await sandbox_env.exec(["whoami"], user="root")
    other = await sandbox_env.exec(["id", "-un"], user="nobody")
    assert (other.success, other.stdout) == (True, "nobody\n")
    large = await sandbox_env.exec(["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x"])
    assert large.stdout == "x" * 200_000  # whole, not head and tail
    with pytest.raises(BoltzError) as refused:
        await sandbox_env.sandbox.check()
    assert (refused.value.status, refused.value.code) == (409, "no_check")


@solver
def fix_add():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        env = sandbox()
        await env.write_file("notes.txt", "the fix is in calc.py\n")
        result = await env.exec(["sh", "-c", "sed -i 's/return a - b/return a + b/' calc.py"])
        assert result.success, result.stderr
        return state

    return solve


@pytest.mark.django_db(transaction=True)
def test_an_inspect_eval_runs_each_sample_in_its_own_boltz_sandbox_scored_by_the_check(
    account, load_example, tmp_path, monkeypatch
):
    load_example("fix-add")
    url, token = account
    monkeypatch.setenv("BOLTZ_URL", url)
    monkeypatch.setenv("BOLTZ_TOKEN", token)
    task = Task(
        dataset=[
            Sample(id="fixed", input="Fix add()."),
            Sample(id="untouched", input="Fix add().", metadata={"skip": True}),
            Sample(id="missing", input="Fix add().", metadata={"boltz_task": "no-such-task"}),
        ],
        solver=_fix_unless_skipped(),
        sandbox=("boltz", "fix-add"),  # the spec a user writes: found by the entry point
        scorer=boltz_check(),
    )
    [log] = eval(task, model="mockllm/model", log_dir=str(tmp_path), fail_on_error=False)
    samples = {s.id: s for s in log.samples}

    fixed = samples["fixed"].scores["boltz_check"]
    assert (fixed.value, fixed.answer, fixed.metadata["passed"]) == (1.0, "passed", True)
    assert fixed.metadata["tests"] and all(
        t["outcome"] == "passed" for t in fixed.metadata["tests"]
    )
    attempt_id = int(fixed.metadata["attempt_url"].rstrip("/").rsplit("/", 1)[-1])
    attempt = Attempt.objects.get(pk=attempt_id)
    # Sample cleanup closed the sandbox and kept it: its outcome is the check the scorer ran.
    assert (attempt.status, attempt.outcome, attempt.agent) == (
        Status.FINISHED,
        "passed",
        "inspect",
    )
    assert attempt.labels["inspect_task"] and attempt.sandbox_state == "stopped"
    [command] = agent_commands(attempt_id)
    assert command.startswith("sh -c") and "s/return a - b/return a + b/" in command
    assert attempt.events.filter(kind=EventKind.FILE, data__path="/workspace/notes.txt").exists()
    assert "+        return a + b" in attempt.diff or "return a + b" in attempt.diff

    untouched = samples["untouched"].scores["boltz_check"]
    assert (untouched.value, untouched.metadata["passed"]) == (0.0, False)

    missing = samples["missing"]
    assert missing.error is not None and "no-such-task" in missing.error.message
    assert not missing.scores


@solver
def _fix_unless_skipped():
    fix = fix_add()

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if state.metadata.get("skip"):
            return state
        return await fix(state, generate)

    return solve


@pytest.mark.django_db(transaction=True)
def test_inspect_sandbox_cleanup_closes_what_a_crashed_run_left_and_keeps_it(account, tmp_path):
    url, token = account
    spec = BoltzSandbox(image=IMAGE, url=url, token=token)

    async def crashed_run() -> int:  # a sample set up, then the process "died": no cleanup
        envs = await BoltzSandboxEnvironment.sample_init("crashed", spec, {})
        env = envs["default"]
        assert isinstance(env, BoltzSandboxEnvironment)
        await env.exec(["touch", "left-behind"])
        BoltzSandboxEnvironment._open.pop(env.sandbox.id)
        await env.client.close()
        return env.sandbox.id

    left = anyio.run(crashed_run)
    assert Attempt.objects.get(pk=left).status == Status.RUNNING
    run = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "inspect"), "sandbox", "cleanup", "boltz"],
        cwd=ROOT,
        env={**os.environ, "BOLTZ_URL": url, "BOLTZ_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert f"closed Boltz sandbox {left}" in run.stdout
    wait_until(
        lambda: Attempt.objects.get(pk=left).status == Status.FINISHED, what="the sandbox closed"
    )
    kept = Attempt.objects.get(pk=left)
    assert kept.sandbox_state == "stopped" and "left-behind" in kept.diff


@pytest.mark.django_db(transaction=True)
def test_the_worked_example_of_docs_integrations_runs_as_written(account, load_example, tmp_path):
    load_example("fix-add")
    example = ROOT / "examples" / "inspect_fix_add.py"
    assert example.read_text() in (ROOT / "docs" / "INTEGRATIONS.md").read_text()
    url, token = account
    run = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,  # Inspect writes its log in ./logs
        env={**os.environ, "BOLTZ_URL": url, "BOLTZ_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"1.0 passed {url}/attempts/" in run.stdout


def test_importing_boltz_never_imports_inspect_and_boltz_inspect_ai_says_how_to_install_it():
    code = (
        "import sys; import boltz; assert 'inspect_ai' not in sys.modules, 'imported';"
        "sys.modules['inspect_ai'] = None\n"
        "try:\n    import boltz.inspect_ai\nexcept ImportError as e:\n    print(e)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "pip install 'boltz-sdk[inspect]'" in run.stdout


def test_a_spec_naming_no_task_or_image_says_what_to_give():
    with pytest.raises(ValueError, match="needs a task or an image"):
        anyio.run(BoltzSandboxEnvironment.sample_init, "t", BoltzSandbox(), {})
    assert isinstance(SandboxEnvironmentSpec("boltz", BoltzSandbox(task="x")).config, BoltzSandbox)
