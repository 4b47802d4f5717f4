"""A mini-swe-agent environment over a Boltz sandbox, so `mini` and mini-swe-agent's Python API
run their agent in a Boltz sandbox by naming the class in their configuration:

    environment:
      environment_class: boltz.mini_swe_agent.BoltzEnvironment
      task: fix-add                # a Boltz task slug; BOLTZ_URL and BOLTZ_TOKEN from the env

    from minisweagent.environments import get_environment

    env = get_environment({"environment_class": "boltz.mini_swe_agent.BoltzEnvironment",
                           "task": "fix-add"})

`BoltzEnvironment` starts a sandbox of the task when it is made. `execute` runs each command
with the SDK's `exec` (every call lands on the attempt's timeline) and answers as mini-swe-agent's
docker environment does: `{"output", "returncode", "exception_info"}`, stderr after stdout, and
a command past its time limit comes back with returncode -1 and a `TimeoutExpired` exception
info. When a command's output starts with mini-swe-agent's submission marker
(`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) the episode ends: the sandbox is closed with the
task's final check, and `Submitted` is raised with the check's result under `extra["boltz"]`
(so `agent.run(...)` returns it), also kept in `env.result` and in `serialize()`.

`BoltzAgent` and `BoltzInteractiveAgent` are mini-swe-agent's default and interactive agents
that also put the model's messages on the timeline, and give the Boltz task's instruction as
the task when the run is given none.

Failures of Boltz itself (the sandbox died, the server is unreachable, no answer in time) are
raised as `boltz.BoltzError`s, never handed to the model as a command's output: they say
nothing about the agent. A command the server refuses (`InvalidRequest`, such as an empty
command) is the model's doing and comes back as its output.

mini-swe-agent is an optional extra: `pip install 'boltz-sdk[mini]'`. Importing `boltz` never
imports it. See docs/INTEGRATIONS.md.
"""

from __future__ import annotations

import logging
import os
import subprocess
import weakref
from typing import Any

try:
    import minisweagent
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.exceptions import Submitted
    from minisweagent.utils.serialize import recursive_merge
    from pydantic import BaseModel, ConfigDict, Field, model_validator
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"boltz.mini_swe_agent needs mini-swe-agent 2 ({exc}): pip install 'boltz-sdk[mini]'"
    ) from exc

if not minisweagent.__version__.startswith("2."):  # pragma: no cover - the extra pins it
    raise ImportError(
        f"boltz.mini_swe_agent needs mini-swe-agent 2, not {minisweagent.__version__}: "
        "pip install 'boltz-sdk[mini]'"
    )

from boltz.client import Client, Sandbox
from boltz.errors import BoltzError, InvalidRequest, SandboxClosed
from boltz.types import ExecResult

__all__ = [
    "SUBMIT_MARKER",
    "BoltzAgent",
    "BoltzEnvironment",
    "BoltzEnvironmentConfig",
    "BoltzInteractiveAgent",  # noqa: F822 - made on first use (the module's __getattr__)
]

#: The first line of a command's output that submits (mini-swe-agent's own marker).
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

#: mini-swe-agent's environments log here, and `mini` shows it.
log = logging.getLogger("minisweagent.environment")


class BoltzEnvironmentConfig(BaseModel):
    # A misspelt key is an error naming it, not a setting silently left at its default.
    model_config = ConfigDict(extra="forbid")

    task: str = ""
    """The Boltz task to start a sandbox of (its slug)."""
    image: str = ""
    """Instead of a task: an empty sandbox from this image (no check; submitting closes it)."""
    base_url: str | None = None
    """The Boltz server; BOLTZ_URL when not given, else http://127.0.0.1:8000."""
    token: str | None = Field(default=None, exclude=True, repr=False)
    """An API token; BOLTZ_TOKEN when not given. Never serialized."""
    agent: str = "mini-swe-agent"
    """What drives the sandbox, as its attempt page shows it."""
    labels: dict[str, str] = {}
    """Labels of the sandbox, to find it again (`client.sandboxes(labels=...)`)."""
    cwd: str = ""
    """Working directory of the commands; empty: the task's working folder (/workspace, or
    a Harbor task's WORKDIR)."""
    env: dict[str, str] = {}
    """Environment variables of every command."""
    forward_env: list[str] = []
    """Variables passed on from this process's environment when set here (`env` wins)."""
    timeout: float = 30
    """Seconds a command may run (mini-swe-agent's docker default); its process group is
    killed then."""
    interpreter: list[str] = []
    """Run each command as `[*interpreter, command]`, e.g. ["bash", "-c"]. Empty: the server
    runs it with /bin/sh -c, and the timeline shows it as the model wrote it."""
    ttl: float | None = None
    """Seconds after which the server closes the sandbox (the server's default when None)."""
    idle_timeout: float | None = None
    """Seconds without a call after which the server closes it (the server's default)."""
    wait: float | None = None
    """Seconds to wait for room when every Boltz host is full (then `CapacityError`)."""
    request_timeout: float = 60
    """Seconds for an ordinary request to the server (a command waits its own time on top)."""

    @model_validator(mode="after")
    def _task_or_image(self) -> BoltzEnvironmentConfig:
        if bool(self.task) == bool(self.image):
            raise ValueError("give the Boltz task to start from (task), or an image (image)")
        return self


class BoltzEnvironment:
    """mini-swe-agent's Environment over one Boltz sandbox; see the module's documentation.

    `client` (an SDK `Client`) is used instead of making one from `base_url` and `token`; the
    caller then keeps closing it. Attributes: `sandbox` (the SDK `Sandbox`), `instruction` (the
    task's instruction), `result` (the final check once submitted, else None).
    """

    def __init__(
        self,
        *,
        client: Client | None = None,
        config_class: type = BoltzEnvironmentConfig,
        logger: logging.Logger | None = None,
        **kwargs: Any,
    ) -> None:
        self.logger = logger or log
        self.config = config_class(**kwargs)
        self.result: dict[str, Any] | None = None
        self._submitted: Submitted | None = None
        self._stopped = False
        owned = client is None
        self.client = client or Client(
            self.config.base_url, token=self.config.token, timeout=self.config.request_timeout
        )
        try:
            self.sandbox: Sandbox = self.client.sandbox(
                self.config.task or None,
                image=self.config.image or None,
                labels=self.config.labels,
                agent=self.config.agent,
                ttl=self.config.ttl,
                idle_timeout=self.config.idle_timeout,
                wait=self.config.wait,
            )
        except BaseException:
            if owned:
                self.client.close()
            raise
        # Closed (without a check) when the environment is collected or the program ends
        # without submitting, as mini-swe-agent's docker environment stops its container.
        self._finalizer = weakref.finalize(
            self, _close_quietly, self.sandbox, self.client if owned else None, self.logger
        )
        try:
            self.instruction = (
                _instruction(self.client, self.config.task) if self.config.task else ""
            )
        except BaseException:
            self._finalizer()
            raise
        self.logger.info("Boltz sandbox %s started: %s", self.sandbox.name, self.sandbox.url)

    # --- mini-swe-agent's Environment protocol --------------------------------------------------

    def execute(
        self, action: dict, cwd: str = "", *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Run the action's command in the sandbox; raise `Submitted` when its output submits."""
        if self._submitted is not None:  # the episode is over: it stays over
            raise Submitted(*self._submitted.messages)
        if self._stopped:
            raise SandboxClosed(f"sandbox {self.sandbox.name} was stopped", code="closed")
        command = action.get("command", "") if isinstance(action, dict) else str(action)
        limit = timeout or self.config.timeout
        try:
            result = self.sandbox.exec(
                [*self.config.interpreter, command] if self.config.interpreter else command,
                cwd=cwd or self.config.cwd,
                env=self._command_env(),
                timeout=limit,
            )
        except InvalidRequest as exc:
            output = refused_output(exc)
        else:
            output = command_output(result, command, limit)
        submission = submission_of(output)
        if submission is not None:
            self._submit(submission)
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        config = self.config.model_dump()
        config.pop("task")  # the agent's `task` is the text it is given, not the slug
        sandbox = self.sandbox
        return recursive_merge(
            config,
            # What mini-swe-agent's templates show of the machine (docker's gives the host's
            # `platform.uname()`): the sandbox is a Linux container on a host unknown here.
            {"system": "Linux", "node": sandbox.name, "release": "", "version": "", "machine": ""},
            {
                "cwd": self.config.cwd or sandbox.info.cwd,
                "boltz_task": self.config.task,
                "instruction": self.instruction,
                "sandbox_id": sandbox.id,
                "attempt_id": sandbox.info.attempt,
                "attempt_url": sandbox.url,
            },
            kwargs,
        )

    def serialize(self) -> dict:
        sandbox = self.sandbox
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                },
                "boltz": {
                    "server": self.client.url,
                    "task": self.config.task,
                    "sandbox": sandbox.id,
                    "attempt": sandbox.info.attempt,
                    "name": sandbox.name,
                    "url": sandbox.url,
                    "result": self.result,
                },
            }
        }

    def stop(self) -> None:
        """Close the sandbox without a check (it is kept for review), unless the submission
        closed it already. Safe to call again; a failure to close is logged, not raised."""
        self._stopped = True
        self._finalizer()

    cleanup = stop  # the name mini-swe-agent's docker environment gives it

    # --- Boltz's own --------------------------------------------------------------------------

    def record_message(self, content: str, role: str = "assistant") -> None:
        """Put a message on the sandbox's timeline (nothing once the episode is over)."""
        if not content.strip() or self._submitted is not None or self._stopped:
            return
        try:
            self.sandbox.message(role, content)
        except BoltzError as exc:  # a lost note never stops the agent; its next command says
            self.logger.warning("could not record a message on %s: %s", self.sandbox.name, exc)

    def _command_env(self) -> dict[str, str]:
        forwarded = {k: v for k in self.config.forward_env if (v := os.environ.get(k)) is not None}
        return {**forwarded, **self.config.env}

    def _submit(self, submission: str) -> None:
        """End the episode: close the sandbox with the task's final check, keep its result and
        raise `Submitted` carrying it."""
        info = self.sandbox.close(check=True)
        attempt = self.client.attempt(info.attempt) if info.attempt is not None else None
        check = info.check
        self.result = {
            "passed": check.passed if check else None,
            "score": attempt.score if attempt else (check.score if check else None),
            "outcome": attempt.outcome if attempt else info.raw.get("outcome"),
            "failure_reason": attempt.failure_reason if attempt else "",
            "summary": check.summary if check else "",
            "attempt": info.attempt,
            "url": info.url,
        }
        verdict = {True: "passed", False: "failed", None: "did not run"}[self.result["passed"]]
        self.logger.info(
            "Boltz sandbox %s submitted: the check %s, score %s, outcome %s: %s",
            self.sandbox.name,
            verdict,
            self.result["score"],
            self.result["outcome"],
            self.result["url"],
        )
        self._finalizer()  # the sandbox is closed: this only lets go of the connection
        self._submitted = Submitted(
            {
                "role": "exit",
                "content": submission,
                "extra": {
                    "exit_status": "Submitted",
                    "submission": submission,
                    "boltz": self.result,
                },
            }
        )
        raise self._submitted


class _RecordsMessages:
    """Puts the model's messages on the Boltz timeline; gives the Boltz task's instruction as
    the task when the run is given none."""

    env: Any

    def add_messages(self, *messages: dict) -> list[dict]:
        added = super().add_messages(*messages)  # type: ignore[misc]
        if isinstance(self.env, BoltzEnvironment):
            for message in messages:
                if message.get("role") == "assistant":
                    self.env.record_message(message_text(message))
        return added

    def run(self, task: str = "", **kwargs: Any) -> dict:
        if not task and isinstance(self.env, BoltzEnvironment):
            task = self.env.instruction
        return super().run(task, **kwargs)  # type: ignore[misc]


class BoltzAgent(_RecordsMessages, DefaultAgent):
    """mini-swe-agent's DefaultAgent, with the model's messages on the Boltz timeline."""


def __getattr__(name: str) -> Any:
    # `BoltzInteractiveAgent` is made when first asked for: importing mini-swe-agent's
    # interactive agent opens a terminal prompt session, which warns in every batch job whose
    # input is not a terminal.
    if name == "BoltzInteractiveAgent":
        from minisweagent.agents.interactive import InteractiveAgent

        made = type(
            name,
            (_RecordsMessages, InteractiveAgent),
            {
                "__module__": __name__,
                "__qualname__": name,
                "__doc__": "mini-swe-agent's InteractiveAgent (what `mini` runs), with the "
                "model's messages on the Boltz timeline.",
            },
        )
        globals()[name] = made
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- pure helpers -------------------------------------------------------------------------------


def command_output(result: ExecResult, command: str, timeout: float) -> dict[str, Any]:
    """A command's result as mini-swe-agent's docker environment gives it: output (stdout then
    stderr), returncode, and, for a command past its limit, returncode -1 with the exception
    mini-swe-agent reports (`TimeoutExpired`)."""
    if result.timed_out:
        error = subprocess.TimeoutExpired(command, _whole(timeout))
        return {
            "output": result.output,
            "returncode": -1,
            "exception_info": f"An error occurred while executing the command: {error}",
            "extra": {"exception_type": type(error).__name__, "exception": str(error)},
        }
    returncode = -1 if result.exit_code is None else result.exit_code
    return {"output": result.output, "returncode": returncode, "exception_info": ""}


def refused_output(error: BoltzError) -> dict[str, Any]:
    """A command the server refused to run, as the output the model sees."""
    return {
        "output": "",
        "returncode": -1,
        "exception_info": f"An error occurred while executing the command: {error.detail}",
        "extra": {"exception_type": type(error).__name__, "exception": error.detail},
    }


def submission_of(output: dict[str, Any]) -> str | None:
    """The submission when the output submits (its first line is the marker and the command
    exited 0, as mini-swe-agent decides it): the rest of the output. Else None."""
    lines = output.get("output", "").lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() == SUBMIT_MARKER and output.get("returncode") == 0:
        return "".join(lines[1:])
    return None


def message_text(message: dict) -> str:
    """The text of a chat message: its content, or the text parts of a multimodal one."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return ""


def _whole(seconds: float) -> float | int:
    return int(seconds) if float(seconds).is_integer() else seconds


def _instruction(client: Client, slug: str) -> str:
    for task in client.tasks():
        if task.slug == slug:
            return task.instruction.strip()
    return ""


def _close_quietly(sandbox: Sandbox, client: Client | None, logger: logging.Logger) -> None:
    try:
        if sandbox.state not in ("closed", "deleted"):
            sandbox.close(check=False)
    except SandboxClosed:
        pass  # its time to live or idle time closed it already
    except Exception as exc:  # noqa: BLE001 - a finalizer never raises; say what happened
        logger.warning("closing Boltz sandbox %s failed: %r", sandbox.name, exc)
    finally:
        if client is not None:
            client.close()
