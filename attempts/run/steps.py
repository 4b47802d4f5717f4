"""Multi-step tasks (Harbor's [[steps]]), run as Harbor's MultiStepTrial runs them: in the
attempt's one sandbox, each step in order puts its files in the working folder (and runs their
setup.sh there), gives the agent the step's instruction within the step's time limit, ends every
process of the agent's, and runs the step's verifier in place (the task's tests/ with the step's
own over them, at /tests; /logs/verifier emptied). Each step's check is kept with its name.

A step ends the attempt early where Harbor's would: its reward below its `min_reward` (a metric
it did not write counts as below), or a failure that left it without a reward (its setup.sh or
healthcheck failed, or its verifier wrote none). The attempt's reward is then Harbor's: the
mean, metric by metric, of the steps that ran (a metric a step lacks counts 0), or with
multi_step_reward_strategy = "final" the last step's; except that a step left without a reward
counts 0 where Harbor leaves it out (see step_rewards), and so does a step an early stop kept
from running (with "final", the attempt's reward is then 0). The first step's setup failing
is the task's failure (no agent ran yet). The combined reward is kept as one more check of the
attempt, with no step name; it passes only when every step ran and the reward is 1.
"""

from __future__ import annotations

import io
import tarfile

from attempts.core.errors import TaskInvalid
from attempts.core.task_view import TaskView
from attempts.models import CheckResult, EventKind, Status, TaskStep
from attempts.run import harbor_layout
from attempts.run.healthcheck import wait_healthy
from attempts.run.session import CommandRun


class StepTask(TaskView):
    """A multi-step task as one of its steps sees it: the step's instruction, tests, solution,
    time limits, users and verifier settings over the task's; everything else the task's."""

    def __init__(self, task, step: TaskStep):
        stage_env = dict(task.stage_env or {})
        stage_env["verifier"] = {**(stage_env.get("verifier") or {}), **(step.verifier_env or {})}
        super().__init__(
            task,
            step=step,
            step_name=step.name,
            instruction=step.instruction,
            check_files=bytes(step.check_files),
            solution_files=bytes(step.solution_files),
            agent_timeout=step.agent_timeout,
            check_timeout=step.check_timeout,
            agent_user=step.agent_user or task.agent_user,
            solution_user=step.agent_user or task.solution_user or task.agent_user,
            check_user=step.check_user or task.check_user,
            stage_env=stage_env,
        )


def step_rewards(result: CheckResult | None) -> dict[str, float]:
    """A step's rewards. Harbor leaves a step with no reward (its verifier wrote none, or its
    setup.sh or healthcheck failed after the agent's earlier steps) out of the mean; Boltz
    counts it 0, as it counts a single verifier error 0: an agent that could break the next
    step's setup or its verifier would otherwise keep only the steps it passed. A check Boltz
    failed for cause (tampering, contradicted reports) counts 0 on every metric."""
    if result is None or result.verifier_error:
        return {"reward": 0.0}
    rewards = {k: float(v) for k, v in (result.reward or {}).items()}
    if not rewards:
        rewards = {"reward": float(result.score or 0.0)}
    if result.problem:
        return {key: 0.0 for key in rewards}
    return rewards


def below_minimum(rewards: dict[str, float] | None, minimum: dict | None) -> str:
    """Why a step's rewards end the attempt under its min_reward, or ""."""
    if not minimum:
        return ""
    for key, least in minimum.items():
        value = (rewards or {}).get(key)
        if value is None:
            return f"it wrote no {key!r} (min_reward {least:g})"
        if value < least:
            return f"{key} {value:g} < min_reward {least:g}"
    return ""


def combine(per_step: list[dict[str, float] | None], strategy: str) -> dict[str, float] | None:
    """The attempt's rewards from its steps' (those that ran, in order), as Harbor computes
    them: "final", the last step's; "mean", each metric's mean over the steps with rewards."""
    if strategy == "final":
        return per_step[-1] if per_step else None
    counted = [r for r in per_step if r is not None]
    if not counted:
        return None
    keys = list(dict.fromkeys(k for r in counted for k in r))
    return {k: sum(r.get(k, 0.0) for r in counted) / len(counted) for k in keys}


def headline(rewards: dict[str, float]) -> float:
    """The one number of a set of rewards: `reward`, else the only metric, else their mean."""
    if "reward" in rewards:
        return rewards["reward"]
    return sum(rewards.values()) / len(rewards)


def workdir_tar(files: bytes, workdir: str, owner: tuple[int, int]) -> tuple[bytes, bool]:
    """A step's workdir/ files (a tar of names under ".") under `workdir`, owned by `owner`;
    and whether they hold a setup.sh at their top."""
    out = io.BytesIO()
    setup = False
    prefix = workdir.strip("/")
    with (
        tarfile.open(fileobj=io.BytesIO(files)) as source,
        tarfile.open(fileobj=out, mode="w") as tar,
    ):
        for member in source.getmembers():
            rel = member.name[2:] if member.name.startswith("./") else member.name
            if rel in ("", "."):
                continue  # the working folder itself is the image's
            setup = setup or rel == "setup.sh"
            data = source.extractfile(member) if member.isfile() else None
            member.name = f"{prefix}/{rel}"
            member.pax_headers = {}  # else a long or non-ASCII name's old path is written back
            member.uid, member.gid = owner
            member.uname = member.gname = ""
            tar.addfile(member, data)
    return out.getvalue(), setup


def run_steps(director) -> tuple[CommandRun | None, CheckResult]:
    """Every step of the director's multi-step task, in order, until one ends the attempt;
    then its changes recorded and its combined result kept. Returns the agent's run that
    decides the outcome (the first that ran out of time, else the last) and the combined
    check."""
    task, session, timeline = director.task, director.session, director.timeline
    steps = list(task.steps.order_by("position"))
    ran: list[tuple[TaskStep, CheckResult | None]] = []
    stopped = ""
    agent = None
    _users_before_any_agent(session, task, steps)
    try:
        for index, step in enumerate(steps, start=1):
            view = StepTask(task, step)
            director.task = session.step_task = view
            director.advance(Status.RUNNING, f"step {index} of {len(steps)}: {step.name}")
            failed = _put_step_files(director, step, view)
            if failed and index == 1:  # before any agent ran: the task's own failure
                raise TaskInvalid(f"steps.{step.name}", failed)
            if failed:
                ran.append((step, None))
                stopped = f"step {step.name}: {failed}"
                break
            run = director.work.run(director)
            if agent is None or not agent.result.timed_out:
                agent = run  # the first step whose agent ran out of time decides the outcome
            director.end_agent()
            director.trees.record(session)  # what the step's verifier checks, and the diff so far
            result = director.check()
            ran.append((step, result))
            why = "its verifier wrote no reward" if result.verifier_error else ""
            why = why or below_minimum(step_rewards(result), step.min_reward)
            if why and index < len(steps):
                stopped = f"step {step.name}: {why}"
                break
    finally:
        session.step_task = None
        director.task = task
    if stopped:
        not_run = [s.name for s in steps[len(ran) :]]
        timeline.add(
            EventKind.LIFECYCLE,
            message=f"{stopped}: the steps after it do not run, as in Harbor"
            + (f" ({', '.join(not_run)})" if not_run else ""),
        )
    if not ran or ran[-1][1] is None:  # the last step ended before its agent: its files count
        director.session.halt()
        director.trees.record(session)
    return agent, _keep_combined(director, steps, ran, stopped)


def _users_before_any_agent(session, task, steps: list[TaskStep]) -> None:
    """Every step's users looked up in the sandbox before any agent runs (and kept for it): a
    user the image lacks is the task's failure; a user an earlier step's agent deleted from
    /etc/passwd changes nothing (else the agent's doing would read as the task's)."""
    for step in steps:
        view = StepTask(task, step)
        for user in (view.agent_user, view.solution_user, view.check_user):
            session.run_as(user)


def _put_step_files(director, step: TaskStep, view: StepTask) -> str:
    """The step's workdir/ files put in the working folder as its agent's user, their setup.sh
    run there, then its healthcheck; why the step cannot go on, or ""."""
    session = director.session
    if step.workdir_files:
        owner = harbor_layout.ids(session.run_as(view.agent_user))
        files, setup = workdir_tar(bytes(step.workdir_files), session.workdir, owner)
        session.put_archive(files)
        director.timeline.add(
            EventKind.FILE,
            action="step files",
            message=f"the task put step {step.name}'s files in {session.workdir}",
        )
        if setup:
            run = session.exec(
                "setup",
                ["bash", f"{session.workdir}/setup.sh"],
                timeout=view.agent_timeout,
                user=session.run_as(view.agent_user),
                user_name=view.agent_user,
            )
            if run.result.timed_out or run.result.exit_code != 0:
                how = "timed out" if run.result.timed_out else f"exited {run.result.exit_code}"
                return f"the task's setup.sh {how}"
    if step.healthcheck:
        try:
            wait_healthy(
                session,
                step.healthcheck,
                user=view.agent_user,
                where=f"steps.{step.name}.healthcheck",
                stop_if_asked=director.stop_if_asked,
            )
        except TaskInvalid as exc:
            return exc.message
    return ""


def _keep_combined(
    director, steps: list[TaskStep], ran: list[tuple[TaskStep, CheckResult | None]], stopped: str
) -> CheckResult:
    task = director.task
    per_step = [step_rewards(result) for _, result in ran]
    # A step an early stop kept from running counts 0 as well (Harbor leaves it out): being
    # stopped never scores more than doing the steps and failing them.
    never = [{"reward": 0.0} for _ in steps[len(ran) :]]
    rewards = combine(per_step + never, task.step_rewards)
    lines = []
    for (step, result), got in zip(ran, per_step, strict=True):
        said = ", ".join(f"{k} {v:g}" for k, v in got.items())
        if result is None or result.verifier_error:
            said = "no reward, counted 0"
        why = result.summary if result is not None else stopped
        lines.append(f"step {step.name}: {said} ({why})")
    lines += [f"step {s.name}: not run" for s in steps[len(ran) :]]
    how = "the last step's" if task.step_rewards == "final" else "the mean of the steps'"
    every = len(ran) == len(steps) and all(r is not None and not r.verifier_error for _, r in ran)
    score = headline(rewards)  # every step counts, so there are rewards
    passed = score >= 1.0 and every
    unrun = "; the steps that did not run count 0" if len(ran) < len(steps) else ""
    summary = f"reward {score:g}, {how} rewards ({len(ran)} of {len(steps)} steps ran{unrun})"
    if stopped:
        summary += f"; stopped after {stopped}"
    result = CheckResult.objects.create(
        attempt=director.attempt,
        passed=passed,
        score=score,
        mode=task.check_mode,
        summary=summary,
        source=CheckResult.Source.REWARD_FILE,
        output="\n".join(lines),
        reward=rewards,
    )
    director.timeline.add(
        EventKind.CHECK,
        passed=passed,
        score=score,
        source=result.source,
        mode=result.mode,
        summary=summary,
        problem="",
        verifier_error=False,
        steps=lines[:100],
        check=result.pk,
    )
    return result
