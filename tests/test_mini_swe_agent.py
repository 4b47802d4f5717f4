"""boltz.mini_swe_agent: mini-swe-agent's real agent loop, driven by its own scripted test model
(DeterministicModel: no network, no LLM), works in a Boltz sandbox against the real things (a
web server process, the session's worker of capacity 2, Docker). Through the Python API and
through the `mini` command, an agent fixes the `fix-add` example and submits; submitting ends
the episode with the task's check; the attempt page shows every command in order with its
output. No test holds more than one live sandbox."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from html import escape, unescape
from pathlib import Path

import docker
import pytest
import yaml
from django.contrib.auth import get_user_model
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_from_spec
from minisweagent.environments import get_environment
from minisweagent.environments.docker import DockerEnvironment
from minisweagent.exceptions import Submitted
from minisweagent.models.test_models import DeterministicModel, make_output
from pydantic import ValidationError

from attempts.api.tokens import token_create
from attempts.models import Attempt, EventKind
from boltz import ExecResult, InfrastructureError
from boltz.mini_swe_agent import (
    SUBMIT_MARKER,
    BoltzAgent,
    BoltzEnvironment,
    BoltzEnvironmentConfig,
    command_output,
    submission_of,
)
from tests.conftest import ROOT, agent_commands, real, sdk_client
from tests.optional_extras import assert_the_extra_is_optional

ENVIRONMENT_CLASS = "boltz.mini_swe_agent.BoltzEnvironment"
TESTS = "python3 -m pytest -q -p no:cacheprovider tests"
FIX = "sed -i 's/return a - b/return a + b/' calc.py"
SUBMIT = f"echo {SUBMIT_MARKER}"
NO_BYTECODE = {"PYTHONDONTWRITEBYTECODE": "1"}  # no __pycache__ in the diff


def scripted(*commands: str) -> list[dict]:
    """The scripted model's answers: one bash block per turn, as a text-based model writes."""
    return [
        make_output(f"Step {n}: I run this.\n\n```bash\n{command}\n```", [{"command": command}])
        for n, command in enumerate(commands, 1)
    ]


def agent_settings() -> dict:
    """The agent section of `mini`'s own default configuration, without cost limits (the
    scripted model charges 1.0 a call)."""
    return {**get_config_from_spec("mini.yaml")["agent"], "cost_limit": 0}


@pytest.fixture
def token(web, worker, load_example):
    """A token of a new user of the served instance, with the fix-add task loaded."""
    load_example("fix-add")
    _row, value = token_create(user=get_user_model().objects.create_user("mini"))
    return value


def timeline_execs(html: str) -> list[tuple[str, str]]:
    """The finished commands on an attempt page, in order: (command, what is shown of it)."""
    found = []
    for item in re.findall(r'<li class="ev kind-exec actor-agent"[^>]*>(.*?)</li>', html, re.S):
        if "badge" not in item:
            continue  # the start of a command; its end shows it again with its output
        command = re.search(r'<code class="cmd">\$ (.*?)</code>', item, re.S).group(1)
        found.append((unescape(command), unescape(re.sub(r"<[^>]+>", " ", item))))
    return found


# --- without a server ---------------------------------------------------------------------------
def test_importing_boltz_never_imports_minisweagent_and_the_module_says_how_to_install_it():
    assert_the_extra_is_optional("boltz.mini_swe_agent", "minisweagent", "mini")


def test_the_interactive_agent_is_imported_only_when_asked_for():
    code = (
        "import sys; import boltz.mini_swe_agent as m;"
        "assert 'minisweagent.agents.interactive' not in sys.modules, 'imported';"
        "from minisweagent.agents import get_agent_class;"
        "from minisweagent.agents.interactive import InteractiveAgent;"
        "cls = get_agent_class('boltz.mini_swe_agent.BoltzInteractiveAgent');"
        "assert cls is m.BoltzInteractiveAgent and issubclass(cls, InteractiveAgent), cls;"
        "print(cls.__module__, cls.__qualname__)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MSWEA_SILENT_STARTUP": "1"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "boltz.mini_swe_agent BoltzInteractiveAgent"


def test_a_misspelt_setting_is_an_error_naming_it_before_any_sandbox_starts():
    with pytest.raises(ValidationError, match="timeot"):
        get_environment({"environment_class": ENVIRONMENT_CLASS, "task": "fix-add", "timeot": 9})
    with pytest.raises(ValidationError, match="task"):
        get_environment({"environment_class": ENVIRONMENT_CLASS})
    with pytest.raises(ValidationError, match="task.*or an image"):
        get_environment({"environment_class": ENVIRONMENT_CLASS, "task": "t", "image": "i"})
    assert BoltzEnvironmentConfig(image="boltz-sandbox:bookworm").task == ""
    config = BoltzEnvironmentConfig(task="fix-add", token="secret")
    assert "secret" not in repr(config) and "token" not in config.model_dump()


@pytest.mark.parametrize(
    "text, returncode",
    [
        (f"{SUBMIT_MARKER}\n", 0),
        (f"\n  {SUBMIT_MARKER}  \ndiff --git a/x b/x\n+y\n", 0),
        (f"{SUBMIT_MARKER}\nlast line without end", 0),
        (f"{SUBMIT_MARKER}\n", 1),  # the command failed: no submission
        (f"note\n{SUBMIT_MARKER}\n", 0),  # not the first line
        (f"{SUBMIT_MARKER} and more\n", 0),
        ("", 0),
    ],
)
def test_it_decides_a_submission_as_mini_swe_agents_own_environments_do(text, returncode):
    output = {"output": text, "returncode": returncode, "exception_info": ""}
    try:
        DockerEnvironment._check_finished(None, output)
        theirs = None
    except Submitted as exc:
        theirs = exc.messages[0]["extra"]["submission"]
    assert submission_of(output) == theirs


def test_a_command_past_its_limit_is_reported_as_mini_swe_agent_reports_a_timeout():
    result = ExecResult(exit_code=None, stdout="started\n", stderr="", timed_out=True)
    assert command_output(result, "echo started; sleep 30", 1.0) == {
        "output": "started\n",
        "returncode": -1,
        "exception_info": "An error occurred while executing the command: "
        "Command 'echo started; sleep 30' timed out after 1 seconds",
        "extra": {
            "exception_type": "TimeoutExpired",
            "exception": "Command 'echo started; sleep 30' timed out after 1 seconds",
        },
    }
    finished = ExecResult(exit_code=2, stdout="out\n", stderr="err\n")
    assert command_output(finished, "x", 30) == {
        "output": "out\nerr\n",
        "returncode": 2,
        "exception_info": "",
    }


# --- against the real things --------------------------------------------------------------------
@real
def test_the_agent_loop_fixes_the_task_and_submitting_ends_the_episode_with_the_check(
    web, token, admin_client
):
    env = get_environment(
        {
            "environment_class": ENVIRONMENT_CLASS,
            "task": "fix-add",
            "base_url": web,
            "token": token,
            "labels": {"run": "mini-test"},
            "env": NO_BYTECODE,
        }
    )
    assert isinstance(env, BoltzEnvironment)
    commands = [TESTS, "echo to stderr >&2", "", FIX, TESTS, SUBMIT]
    model = DeterministicModel(outputs=scripted(*commands))
    agent = BoltzAgent(model, env, **agent_settings())
    try:
        # mini-swe-agent's `execute(action, timeout=...)`: past its limit it is killed, and
        # reported as mini-swe-agent's docker environment reports it.
        timed = env.execute({"command": "echo started; sleep 30"}, timeout=1)
        exit_info = agent.run()  # no task given: the Boltz task's instruction
    finally:
        env.stop()
        env.stop()  # twice is fine

    assert timed["returncode"] == -1 and timed["output"] == "started\n"
    assert timed["exception_info"].endswith("timed out after 1 seconds")
    assert timed["extra"]["exception_type"] == "TimeoutExpired"

    # The instruction reached the model; each command's output came back to it.
    instruction = env.instruction
    assert "add(2, 3) does not return 5" in instruction
    assert f"Please solve this issue: {instruction}" in agent.messages[1]["content"]
    observations = [m["extra"] for m in agent.messages if "returncode" in m.get("extra", {})]
    assert [o["returncode"] for o in observations] == [1, 0, -1, 0, 0]  # the last submitted
    assert "1 failed, 1 passed" in observations[0]["raw_output"]
    assert observations[1]["raw_output"] == "to stderr\n"
    assert "command: give a shell command" in observations[2]["exception_info"]
    assert "2 passed" in observations[4]["raw_output"]

    # Submitting ran the task's check; its result is what the run returns.
    attempt = Attempt.objects.get(pk=env.sandbox.info.attempt)
    assert exit_info["exit_status"] == "Submitted" and exit_info["submission"] == ""
    assert (
        exit_info["boltz"]
        == env.result
        == {
            "passed": True,
            "score": 1.0,
            "outcome": "passed",
            "failure_reason": "",
            "summary": env.result["summary"],
            "attempt": attempt.pk,
            "url": env.sandbox.url,
        }
    )
    assert agent.messages[-1]["role"] == "exit"
    assert attempt.status == "finished" and attempt.outcome == "passed" and attempt.score == 1.0
    assert attempt.agent == "mini-swe-agent" and attempt.labels == {"run": "mini-test"}
    assert attempt.checks.filter(passed=True).count() == 1
    with pytest.raises(Submitted):  # the episode stays over
        env.execute({"command": "echo late"})

    # The timeline: every command in order (the refused empty one never ran), each after the
    # model's message that asked for it.
    ran = ["echo started; sleep 30", *[c for c in commands if c]]
    assert agent_commands(attempt.pk) == ran
    steps = [
        e.data.get("text") if e.kind == EventKind.MESSAGE else e.data["command"]
        for e in attempt.events.order_by("seq")
        if e.actor == "agent" and (e.kind == EventKind.MESSAGE or e.data.get("phase") == "start")
    ]
    assert steps[0] == "echo started; sleep 30"
    assert steps[1:] == [
        part
        for output in scripted(*commands)
        for part in [output["content"], output["extra"]["actions"][0]["command"]]
        if part
    ]

    # The attempt page shows each command in order with its output.
    page = admin_client.get(f"/attempts/{attempt.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    shown = timeline_execs(html)
    assert [command for command, _ in shown] == ran
    assert "timed out" in shown[0][1] and "started" in shown[0][1]
    assert "1 failed, 1 passed" in shown[1][1] and "exit 1" in shown[1][1]
    assert "to stderr" in shown[2][1]
    assert "2 passed" in shown[4][1] and "exit 0" in shown[4][1]
    assert SUBMIT_MARKER in shown[5][1]
    assert escape(scripted(*commands)[3]["content"]) in html  # the model's message asking for FIX

    # The trajectory says where the episode ran and how it ended, and holds no token.
    saved = agent.serialize()
    assert saved["info"]["boltz"]["result"] == env.result
    assert saved["info"]["boltz"]["url"] == env.sandbox.url
    assert saved["info"]["config"]["environment_type"] == ENVIRONMENT_CLASS
    assert saved["info"]["exit_status"] == "Submitted"
    assert token not in json.dumps(saved) and "token" not in saved["info"]["config"]["environment"]
    template_vars = env.get_template_vars()
    assert template_vars["instruction"] == instruction and template_vars["cwd"] == "/workspace"
    assert template_vars["attempt_url"] == env.sandbox.url and "task" not in template_vars


@real
def test_a_submission_without_a_fix_fails_and_is_not_an_error(web, token):
    with sdk_client(web, "plain") as client:
        env = BoltzEnvironment(client=client, task="fix-add")
        # mini-swe-agent's own DefaultAgent, given a task of its own.
        model = DeterministicModel(outputs=scripted(f"printf '%s\\n' {SUBMIT_MARKER} 'no fix'"))
        agent = DefaultAgent(model, env, **agent_settings())
        exit_info = agent.run("Look around, then submit.")
        env.stop()
    assert "Look around, then submit." in agent.messages[1]["content"]
    assert exit_info["exit_status"] == "Submitted" and exit_info["submission"] == "no fix\n"
    assert exit_info["boltz"]["passed"] is False and exit_info["boltz"]["score"] == 0.0
    assert exit_info["boltz"]["outcome"] == "failed"
    attempt = Attempt.objects.get(pk=env.sandbox.info.attempt)
    assert attempt.status == "finished" and attempt.outcome == "failed" and attempt.score == 0.0
    assert not attempt.events.filter(kind=EventKind.MESSAGE).exists()  # DefaultAgent records none


@real
def test_a_sandbox_that_dies_raises_an_infrastructure_error_never_a_commands_output(web, token):
    env = BoltzEnvironment(task="fix-add", base_url=web, token=token)
    try:
        assert env.execute({"command": "echo alive"})["output"] == "alive\n"
        container = Attempt.objects.get(pk=env.sandbox.info.attempt).container_id
        docker.from_env().containers.get(container).kill()
        with pytest.raises(InfrastructureError):
            env.execute({"command": "echo dead"})
    finally:
        env.stop()
    assert env.result is None
    attempt = Attempt.objects.get(pk=env.sandbox.info.attempt)
    assert attempt.status == "finished" and attempt.outcome == "infra_error"


@real
def test_an_environment_dropped_without_submitting_closes_its_sandbox_without_a_check(web, token):
    env = BoltzEnvironment(task="fix-add", base_url=web, token=token)
    attempt_id = env.sandbox.info.attempt
    assert env.execute({"command": "true"})["returncode"] == 0
    del env  # as when `mini` ends without a submission (a step limit, an interruption)
    gc.collect()
    attempt = Attempt.objects.get(pk=attempt_id)
    assert attempt.status == "finished" and attempt.sandbox_state == "stopped"  # kept
    assert attempt.outcome == "" and attempt.failure_reason == "closed without a check"
    assert not attempt.checks.exists()


@real
def test_the_mini_command_runs_the_worked_example_of_docs_integrations_as_written(
    web, token, tmp_path
):
    example = ROOT / "examples" / "mini_swe_agent_demo.yaml"
    assert example.read_text() in (ROOT / "docs" / "INTEGRATIONS.md").read_text()
    outputs = yaml.safe_load(example.read_text())["model"]["outputs"]
    trajectory = tmp_path / "demo.traj.json"
    run = subprocess.run(
        [
            str(Path(sys.executable).with_name("mini")),
            *("-c", "mini.yaml", "-c", str(example), "-o", str(trajectory)),
        ],
        cwd=tmp_path,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "BOLTZ_URL": web,
            "BOLTZ_TOKEN": token,
            "MSWEA_CONFIGURED": "true",  # no first-run setup questions
            "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mini"),
            "COLUMNS": "200",  # the URL on one line
        },
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    saved = json.loads(trajectory.read_text())
    url = saved["info"]["boltz"]["url"]
    assert "Boltz sandbox fix-add #" in run.stdout and url in run.stdout  # where to review it
    assert saved["info"]["exit_status"] == "Submitted"
    result = saved["info"]["boltz"]["result"]
    assert result["passed"] is True and result["score"] == 1.0 and result["outcome"] == "passed"
    attempt = Attempt.objects.get(pk=result["attempt"])
    assert attempt.outcome == "passed" and attempt.status == "finished"
    assert agent_commands(attempt.pk) == [o["extra"]["actions"][0]["command"] for o in outputs]
    messages = list(attempt.events.filter(kind=EventKind.MESSAGE).order_by("seq"))
    assert [m.data["text"] for m in messages] == [o["content"] for o in outputs]
