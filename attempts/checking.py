"""The check: the task's check command run against an attempt's recorded changes.

Fresh (the default): a new container from the task's image holds the base with exactly the
recorded patch applied; it is set up as the agent's was, its protected paths are reset, the
hidden check files put over them, and the check runs. In place (tasks about the container's own
state): the agent's container, with every agent process ended, protected paths reset, a fresh
HOME. Either way the check's folders are new and unguessable, Boltz's pytest plugin watches
every pytest run, and the result is kept with its verdict in words.
"""

from __future__ import annotations

import io
import secrets
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from . import changes, harbor_layout, scoring, stage_env
from .models import Attempt, CheckResult, EventKind, TestOutcome
from .protected import reset_plan
from .sandbox.runtime import Sandbox, SandboxSpec
from .session import CommandRun, SandboxSession, files_tar, nul_list, update_attempt
from .timeline import clip
from .trees import AttemptTrees

MAX_CHECK_FILE = 8 * 1024 * 1024
WITNESS_PLUGIN = (Path(__file__).parent / "sandbox" / "pytest_witness.py").read_bytes()


def memory_text(size: int) -> str:
    return f"{size / 2**30:g} GB" if size >= 2**30 else f"{size // 2**20} MB"


# Resets protected paths before a check, as the sandbox user (who owns every file the agent
# made): the lists are NUL-separated files Boltz wrote. Folders on the way are made writable
# first, so a folder the agent made read-only cannot keep a protected file in place; if a path
# still cannot be removed, the whole tree is made writable and the removal tried again. Then
# the check's own folders are made: new names, so `mkdir` fails if anything is in the way.
_RESET_SCRIPT = r"""
lists="$1"; shift
remove() { if [ -s "$lists/remove" ]; then xargs -0 -r rm -rf -- < "$lists/remove"; fi; }
chmod u+rwx . 2>/dev/null
if [ -s "$lists/parents" ]; then xargs -0 -r chmod u+rwx -- < "$lists/parents" 2>/dev/null; fi
if [ -s "$lists/folders" ]; then xargs -0 -r chmod -R u+rwX -- < "$lists/folders" 2>/dev/null; fi
if ! remove 2>/dev/null; then
  chmod -R u+rwX . 2>/dev/null
  remove || exit 1
fi
rm -rf -- "$lists"
for folder in "$@"; do mkdir -m 700 -- "$folder" || exit 1; done
"""


class CheckBlocked(Exception):
    """Something in the agent's tree kept the check from running as it should (a setup that
    fails on its changes, protected paths that cannot be reset): the check fails with this."""

    def __init__(self, summary: str, run: CommandRun):
        super().__init__(summary)
        self.summary = summary
        self.run = run


@dataclass(frozen=True)
class CheckFolders:
    """One check's folders, under names no agent can guess or prepare in advance."""

    token: str

    @classmethod
    def new(cls) -> CheckFolders:
        return cls(secrets.token_hex(8))

    @property
    def reports(self) -> str:  # $BOLTZ_CHECK_DIR: the check's reports and reward file
        return f"/tmp/boltz-check-{self.token}"

    @property
    def witness(self) -> str:  # what Boltz's pytest plugin writes
        return f"/tmp/boltz-witness-{self.token}"

    @property
    def home(self) -> str:  # an in-place check's HOME
        return f"/tmp/boltz-home-{self.token}"

    @property
    def plugin(self) -> str:  # Boltz's pytest plugin, owned by root
        return f"/tmp/boltz-plugin-{self.token}"

    @property
    def module(self) -> str:
        return f"boltz_witness_{self.token}"

    def plugin_tar(self) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            folder = tarfile.TarInfo(self.plugin.lstrip("/"))
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(folder)
            module = tarfile.TarInfo(f"{self.plugin.lstrip('/')}/{self.module}.py")
            module.size, module.mode = len(WITNESS_PLUGIN), 0o644
            tar.addfile(module, io.BytesIO(WITNESS_PLUGIN))
        return buffer.getvalue()


class Check:
    """One check of an attempt: `run()` runs it and keeps its result."""

    def __init__(
        self,
        agent: SandboxSession,
        trees: AttemptTrees,
        *,
        spec: Callable[[str], SandboxSpec],
        requested_by: str = "",
    ):
        self.agent = agent  # the attempt's own sandbox
        self.trees = trees
        self.attempt = agent.attempt
        self.task = agent.attempt.task
        self.timeline = agent.timeline
        self.spec = spec
        self.requested_by = requested_by

    def _reset_protected(
        self, session: SandboxSession, entries: dict[str, str], folders: list[str]
    ) -> None:
        """Reset every protected path to the base, put the hidden check files over the tree,
        and make the check's folders. Raises CheckBlocked if the tree keeps that from working."""
        task, trees = self.task, self.trees
        hidden = list(task.check_file_paths)
        removed = list(task.check_removed_paths)
        plan = reset_plan(
            trees.protection, entries=entries, base=trees.base_files(), targets=[*hidden, *removed]
        )
        lists = f"/tmp/boltz-reset-{secrets.token_hex(8)}"
        # As the agent's user, who owns every file the agent made.
        user = session.agent_user
        owner = harbor_layout.ids(user) if user else None

        def reset(remove: list[str], make: list[str], display: str) -> None:
            listed = {"remove": remove, "parents": plan.parents, "folders": plan.folders}
            session.put_archive(
                files_tar(
                    {f"{lists[1:]}/{name}": nul_list(paths) for name, paths in listed.items()},
                    owner=owner,
                )
            )
            run = session.exec(
                "reset",
                ["/bin/sh", "-c", _RESET_SCRIPT, "boltz-reset", lists, *make],
                timeout=120,
                live=False,
                display=display,
                user=user,
            )
            if run.result.timed_out or run.result.exit_code != 0:
                raise CheckBlocked(
                    f"protected paths could not be reset in the agent's tree: "
                    f"{clip(run.text().strip(), 300) or 'exit code ' + str(run.result.exit_code)}",
                    run,
                )

        reset(
            plan.remove + removed,
            folders,
            f"reset {len(plan.restore)} protected path(s) to the base, remove "
            f"{len(plan.remove)}, restore {len(hidden)} hidden check file(s)",
        )
        restore = trees.base_files_tar(plan.restore, owner=owner)
        if restore:
            session.put_archive(restore)
        if task.check_files and task.layout != "harbor":  # Harbor's arrive at /tests
            session.put_archive(bytes(task.check_files))
        if removed:
            reset(removed, [], f"remove {len(removed)} path(s) the check removes")
        self.timeline.add(
            EventKind.FILE,
            action="restore",
            paths=hidden[:200],
            count=len(hidden),
            protected_restored=len(plan.restore),
            removed=plan.remove[:200],
        )

    def run(self) -> CheckResult:
        if self.requested_by:
            by = self.requested_by
            self.timeline.reviewer("recheck", by, f"re-check of the same files by {by}")
        in_place = self.task.check_mode == "in_place" or self.task.layout == "harbor"
        mode = "in_place" if in_place else "fresh"
        try:
            if mode == "in_place":
                return self._check_in_place()
            return self._check_fresh()
        except CheckBlocked as exc:
            score = scoring.Score(False, 0.0, "exit_code", summary=exc.summary)
            return self._save_check(mode=mode, run=exc.run, score=score)

    def _check_fresh(self) -> CheckResult:
        task = self.task
        _folder, listing = self.trees.ensure_checked()
        archive = self.trees.check_archive()
        self.timeline.add(
            EventKind.LIFECYCLE,
            message="the check runs in a fresh container: the base with exactly the recorded "
            "changes applied",
            check_mode="fresh",
        )
        session = SandboxSession(
            self.attempt, Sandbox.create(self.spec("check")), secrets=self.agent.secrets
        )
        try:
            with archive.open("rb") as handle:
                session.put_archive(handle)
            session.start()
            entries = changes.index_entries(listing)
            if task.setup_command.strip():
                self._fresh_setup(session, entries, archive)
            archive.unlink()
            return self._run_check(session, entries, mode="fresh")
        finally:
            session.remove()

    def _fresh_setup(self, session: SandboxSession, entries: dict[str, str], archive: Path) -> None:
        """Set the check's container up as the agent's was: on the base's protected paths.
        The setup may run the agent's code (its setup.py), so afterwards every process is
        ended and the recorded files are put back: what is checked is what was recorded."""
        task = self.task
        self._reset_protected(session, entries, [])
        setup = session.exec("check-setup", task.setup_command, timeout=task.setup_timeout)
        if setup.result.timed_out or setup.result.exit_code != 0:
            why = "timed out" if setup.result.timed_out else f"exited {setup.result.exit_code}"
            raise CheckBlocked(f"the task's setup command {why} on the agent's changes", setup)
        session.kill_all_processes()
        with archive.open("rb") as handle:
            session.put_archive(handle)

    def _check_in_place(self) -> CheckResult:
        self.timeline.add(
            EventKind.LIFECYCLE,
            message=(
                "the verifier runs in place, as Harbor runs it: every agent process ended, "
                "protected paths reset, the tests put at /tests, /logs/verifier emptied"
                if self.task.layout == "harbor"
                else "the check runs in place, in the agent's container: every agent process "
                "ended, protected paths reset, a fresh HOME, no user site-packages"
            ),
            check_mode="in_place",
        )
        agent = self.agent
        agent.halt()  # no process of the agent's, even on a re-check
        stream = agent.get_archive(agent.workdir)
        entries = (
            changes.tree_entries(stream, prefix=changes.archive_prefix(agent.workdir))
            if stream is not None
            else {}
        )
        agent.start()
        return self._run_check(agent, entries, mode="in_place")

    def _run_check(
        self, session: SandboxSession, entries: dict[str, str], *, mode: str
    ) -> CheckResult:
        task = self.task
        folders = CheckFolders.new()
        harbor = task.layout == "harbor"
        check_user = session.run_as(task.check_user)
        if harbor:  # Harbor's own folders, the image's HOME, the verifier as the task says
            self._reset_protected(session, entries, [])
            try:
                harbor_layout.clear_for_check(session)
            except harbor_layout.LayoutBlocked as exc:
                raise CheckBlocked(exc.summary, exc.run) from None
            session.put_archive(
                harbor_layout.folders_tar(
                    {folders.witness: harbor_layout.ids(check_user)}, mode=0o700
                )
            )
            reports = harbor_layout.VERIFIER_LOGS
            tools, suspect = harbor_layout.touched_tools(session.changed_paths())
            if tools or suspect:
                self.timeline.add(
                    EventKind.ERROR,
                    actor="agent",
                    message=f"the agent changed {len(tools) + len(suspect)} file(s) the "
                    f"verifier runs with: {', '.join([*tools, *suspect][:5])}",
                    verifier_tools=[*tools, *suspect][:200],
                )
        else:
            tools = suspect = []
            made = [folders.reports, folders.witness]
            if mode == "in_place":
                made.append(folders.home)
            self._reset_protected(session, entries, made)
            reports = folders.reports
        session.put_archive(folders.plugin_tar())
        image_env = session.image_environment()
        env = {
            **stage_env.resolve(task.stage_env, "verifier"),
            "BOLTZ_CHECK_DIR": reports,
            "BOLTZ_WITNESS_DIR": folders.witness,
            "PYTEST_ADDOPTS": " ".join(
                filter(None, [f"-p {folders.module}", image_env.get("PYTEST_ADDOPTS")])
            ),
            "PYTHONPATH": ":".join(filter(None, [folders.plugin, image_env.get("PYTHONPATH")])),
            "PYTHONNOUSERSITE": "1",
            # A check that runs git in /workspace runs none of the agent's hooks or monitors.
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "core.fsmonitor",
            "GIT_CONFIG_VALUE_0": "false",
            "GIT_CONFIG_KEY_1": "core.hooksPath",
            "GIT_CONFIG_VALUE_1": "/dev/null",
        }
        if mode == "in_place" and not harbor:
            env.update(
                HOME=folders.home,
                PYTHONUSERBASE=f"{folders.home}/.no-user-site",
                XDG_CONFIG_HOME=f"{folders.home}/.config",
            )
        ooms = session.oom_kills()
        run = session.exec(
            "check",
            task.check_command,
            timeout=task.check_timeout,
            environment=env,
            user=check_user,
            user_name=task.check_user,
        )
        after = session.oom_kills()
        files = session.read_files(reports, max_bytes=MAX_CHECK_FILE)
        witness, notes = [], []
        for name, data in sorted(
            session.read_files(folders.witness, max_bytes=MAX_CHECK_FILE).items()
        ):
            if name.endswith(".json") and "/" not in name:
                try:
                    witness.append(scoring.parse_witness(data))
                except scoring.ScoringError as exc:
                    notes.append(str(exc))
        score = scoring.score_check(
            exit_code=run.result.exit_code,
            timed_out=run.result.timed_out,
            files=files,
            required=task.required_tests,
            reward_file=task.reward_file,
            witness=witness,
            rules=task.reward_rules,
        )
        score.notes.extend(notes)
        if tools:  # the verifier ran with tools the agent changed: its reward says nothing
            score.problem = (
                f"the agent changed what the verifier runs with ({', '.join(tools[:3])}), so "
                "its reward cannot be trusted"
            )
            score.passed, score.error, score.summary = False, "", score.problem
            score.score, score.reward = 0.0, None
        score.verifier_tools = [*tools, *suspect]
        if ooms is not None and after is not None and after > ooms and not score.passed:
            limit = memory_text(task.memory_bytes)
            score.summary = f"the check was killed: out of memory ({limit} limit); {score.summary}"
        return self._save_check(mode=mode, run=run, score=score, files=files)

    def _save_check(
        self, *, mode: str, run: CommandRun, score: scoring.Score, files=None
    ) -> CheckResult:
        requested_by = self.requested_by
        junit = next((data for _, data in scoring.junit_files(files or {})), b"")
        with transaction.atomic():
            result = CheckResult.objects.create(
                attempt=self.attempt,
                passed=score.passed,
                score=score.score,
                source=score.source,
                mode=mode,
                summary=score.summary,
                problem=score.problem,
                verifier_error=bool(score.error),
                ignored_reward_files=score.ignored_reward_files,
                exit_code=run.result.exit_code,
                timed_out=run.result.timed_out,
                duration=run.result.duration,
                output=run.text(),
                output_truncated=run.truncated,
                junit_xml=junit.decode("utf-8", errors="replace"),
                reward=score.reward,
                tests_total=score.tests_counted,
                tests_passed=score.tests_passed,
                requested_by=requested_by,
            )
            TestOutcome.objects.bulk_create(
                TestOutcome(
                    check_result=result,
                    name=t.name,
                    outcome=t.outcome,
                    duration=t.duration,
                    message=t.message,
                )
                for t in score.tests
            )
            flipped = mark_flaky(result) if requested_by else []
            if score.ignored_reward_files or score.verifier_tools:
                tamper = dict(
                    Attempt.objects.filter(pk=self.attempt.pk)
                    .values_list("tamper", flat=True)
                    .first()
                    or {}
                )
                seen = tamper.get("reward_files", [])
                tamper["reward_files"] = sorted({*seen, *score.ignored_reward_files})
                if score.verifier_tools:
                    tamper["verifier_tools"] = score.verifier_tools[:200]
                update_attempt(self.attempt, tamper=tamper)
        self.timeline.add(
            EventKind.CHECK,
            flipped=flipped[:100],
            passed=score.passed,
            score=score.score,
            source=score.source,
            mode=mode,
            summary=score.summary,
            problem=score.problem,
            verifier_error=bool(score.error),
            tests_passed=score.tests_passed,
            tests_total=score.tests_counted,
            notes=score.notes,
            ignored_reward_files=score.ignored_reward_files,
            timed_out=run.result.timed_out,
            check=result.pk,
        )
        return result


def mark_flaky(result: CheckResult) -> list[str]:
    """Compare a re-check with the checks before it on the same files: flag the tests whose
    outcome differs (on both sides) and the check whose result differs. Returns the names."""
    earlier = CheckResult.objects.filter(attempt_id=result.attempt_id, pk__lt=result.pk)
    if not earlier.exists():
        return []
    seen: dict[str, set[str]] = {}
    for name, outcome in TestOutcome.objects.filter(
        check_result__attempt_id=result.attempt_id
    ).values_list("name", "outcome"):
        seen.setdefault(name, set()).add(outcome)
    flipped = sorted(name for name, outcomes in seen.items() if len(outcomes) > 1)
    if flipped:
        TestOutcome.objects.filter(
            check_result__attempt_id=result.attempt_id, name__in=flipped
        ).update(flaky=True)
    changed = bool(flipped) or earlier.exclude(passed=result.passed).exists()
    if changed:
        CheckResult.objects.filter(pk=result.pk).update(outcome_changed=True)
        result.outcome_changed = True
    return flipped
