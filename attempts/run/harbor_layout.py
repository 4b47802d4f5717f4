"""Harbor's layout in a sandbox: the image's working folder, `/logs/agent`, `/logs/artifacts`
and `/logs/verifier`, `/solution` for the reference solution only, and `/tests`, put there only
when the check runs. Nothing of the task's files is rewritten.

Folders are made by Docker (a tar put into the container) with the owner each stage runs as;
what the agent may have left in the verifier's way is cleared by the user who could have made
it (with Boltz's own scripts and busybox, `SandboxSession.run_tool`), and anything that cannot
be cleared blocks the check, never passes it.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import tempfile

from attempts.core.errors import PathUnreadable
from attempts.core.protected import DEFAULT_PROTECTED, SHADOWED_MODULES, Protection
from attempts.run.scoring import HARBOR_VERIFIER_DIR
from attempts.run.session import CommandRun, SandboxSession

LOGS = "/logs"
TESTS = "/tests"  # where the task's tests are, for the check only
VERIFIER_LOGS = HARBOR_VERIFIER_DIR

# Run as the agent's user: /tests can only be there if the agent made it (Harbor's images
# have none); a replaced /logs or /logs/verifier is the agent's doing too.
_CLEAR_AGENT = r"""
[ -L /logs ] && { echo "/logs was replaced by a link"; exit 3; }
if [ -e /tests ] || [ -L /tests ]; then rm -rf /tests 2>/dev/null; fi
if [ -e /tests ] || [ -L /tests ]; then
  echo "/tests is in the way and cannot be removed"; exit 3
fi
exit 0
"""
# Run as the verifier's user, who owns /logs/verifier: empty it.
_CLEAR_VERIFIER = r"""
if [ -L /logs/verifier ] || [ ! -d /logs/verifier ]; then
  echo "/logs/verifier was replaced"; exit 3
fi
find /logs/verifier -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null
if [ -n "$(ls -A /logs/verifier 2>/dev/null)" ]; then
  echo "/logs/verifier holds files that cannot be removed"; exit 3
fi
exit 0
"""


def ids(user: str | None) -> tuple[int, int]:
    """(uid, gid) of `uid:gid` (None: the sandbox user)."""
    from attempts.exports.workspace import SANDBOX_UID

    if not user:
        return SANDBOX_UID, SANDBOX_UID
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def folders_tar(folders: dict[str, tuple[int, int]], *, mode: int = 0o755) -> bytes:
    """A tar of empty folders (absolute path -> owner uid and gid)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, (uid, gid) in folders.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, uid, gid
            tar.addfile(info)
    return buffer.getvalue()


def prepare(session: SandboxSession) -> None:
    """The log folders, before the sandbox starts: /logs/agent and /logs/artifacts the
    agent's, /logs/verifier the verifier's."""
    task = session.task
    agent = ids(session.run_as(task.agent_user))
    # A separate verifier's user is its image's: here its folder is only the agent's to see.
    verifier = agent if task.verifier_image else ids(session.run_as(task.check_user))
    session.put_archive(
        folders_tar(
            {
                LOGS: (0, 0),
                f"{LOGS}/agent": agent,
                f"{LOGS}/artifacts": agent,
                VERIFIER_LOGS: verifier,
            }
        )
    )


class LayoutBlocked(Exception):
    def __init__(self, summary: str, run: CommandRun):
        super().__init__(summary)
        self.summary = summary
        self.run = run


def clear_for_check(session: SandboxSession) -> None:
    """Clear what the agent may have left where the verifier looks (/tests, /logs/verifier),
    then put the task's tests at /tests. LayoutBlocked says what is in the way."""
    task = session.task
    for script, user, what in (
        (_CLEAR_AGENT, task.agent_user, "clear /tests"),
        (_CLEAR_VERIFIER, task.check_user, "empty /logs/verifier"),
    ):
        run = session.run_tool("reset", script, display=what, user=session.run_as(user))
        if run.result.timed_out or run.result.exit_code != 0:
            raise LayoutBlocked(
                f"the verifier's folders could not be prepared: {run.text().strip()[:300]}", run
            )
    if task.check_files:
        session.put_archive(bytes(task.check_files))


def clear_after_check(session: SandboxSession) -> None:
    """The task's tests never outlive their check: /tests goes (as root, with Boltz's own
    tools: Docker put it there as root)."""
    run = session.run_tool(
        "reset",
        'rm -rf /tests; [ ! -e /tests ] || { echo "/tests could not be removed"; exit 3; }',
        [],
        user="0:0",
        display="remove /tests after the check",
        workdir="/",
    )
    if run.result.timed_out or run.result.exit_code != 0:
        raise LayoutBlocked(f"/tests could not be removed: {run.text().strip()[:300]}", run)


# --- a separate verifier's container -----------------------------------------------------------
ARTIFACTS = f"{LOGS}/artifacts"


# What is never handed over, as an in-place check resets it in the working folder: what
# pytest or Python reads before any test runs (conftest files, pytest's configuration, package
# metadata, start-up hooks, compiled files, bytecode), and a module at the top of a handed
# folder named like pytest, one of its dependencies or the standard library (a verifier that
# runs pytest from there would import it instead).
HANDOVER_PROTECTION = Protection(DEFAULT_PROTECTED, top_level_modules=SHADOWED_MODULES)


def artifacts_tar(
    agent: SandboxSession,
    paths: list[str],
    *,
    owner: tuple[int, int],
    out,
    max_bytes: int,
    max_files: int,
    read=None,
) -> tuple[list[str], list[str]]:
    """What a separate verifier is handed, as Harbor hands it: /logs/artifacts and the task's
    artifact paths, read out of the agent's container, each at its own absolute path, owned by
    `owner`, written as one tar to `out`. Only files and folders cross (a link the agent made
    could otherwise point the verifier's own files elsewhere), within `max_bytes` in all, and
    `max_files` files, and none that HANDOVER_PROTECTION covers. `read(path, file)` is given
    each file handed over (a seekable binary file, read whole: the runner-reach scan). Returns
    (what was handed over, what was left out and why)."""
    handed, left = [], []
    total = 0
    counted = [0]  # files handed over so far
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in [ARTIFACTS, *paths]:
            try:
                stream = agent.get_archive(path)
            except PathUnreadable as exc:  # what the agent made there
                left.append(f"{path}: {exc.reason.removeprefix(path + ' ')}")
                continue
            if stream is None:
                left.append(f"{path}: not in the agent's container")
                continue
            with tempfile.TemporaryFile() as spool:
                for chunk in stream:
                    spool.write(chunk)
                    if spool.tell() > max_bytes - total + (1 << 20):  # tar headers aside
                        break
                else:
                    spool.seek(0)
                    total = _rebase(
                        tar,
                        spool,
                        path,
                        owner,
                        (total, max_bytes),
                        (counted, max_files),
                        left,
                        read,
                    )
                    handed.append(path)
                    continue
            left.append(f"{path}: past {max_bytes} bytes in all")
    return handed, left


def _rebase(tar, spool, path: str, owner, size, files, left: list[str], read) -> int:
    """The files and folders of one path's tar (`spool`) added to `tar` at their absolute
    paths, within `size` (bytes so far, at most) and `files` ([files so far], at most); the
    bytes handed over so far."""
    total, max_bytes = size
    counted, max_files = files
    parent = posixpath.dirname(path.rstrip("/")).lstrip("/")
    with tarfile.open(fileobj=spool) as source:
        for member in source:
            name = posixpath.normpath(member.name)
            if name.startswith("..") or name.startswith("/"):
                left.append(f"{member.name}: outside {path}")
                continue
            if not (member.isfile() or member.isdir()):
                left.append(f"{posixpath.join('/', parent, name)}: not a file or folder")
                continue
            total += member.size
            counted[0] += 1
            if total > max_bytes or counted[0] > max_files:
                left.append(f"{path}: past {max_bytes} bytes or {max_files} files in all")
                break
            target = posixpath.join(parent, name)
            if _verifiers_own(target):
                left.append(f"/{target}: where the verifier's own files are")
                continue
            # Within the handed folder (Docker's tar names it first), or the file itself.
            inside = name.split("/", 1)[1] if "/" in name else name
            if HANDOVER_PROTECTION.covers(inside) or HANDOVER_PROTECTION.covers(name):
                left.append(f"/{target}: read by pytest or Python before any test")
                continue
            data = source.extractfile(member) if member.isfile() else None
            if data is not None and read is not None:
                read(f"/{target}", data)
                data.seek(0)
            member.name = target
            member.pax_headers = {}  # else a long or non-ASCII name's old path is written back
            member.uid, member.gid = owner
            member.uname = member.gname = ""
            member.mode &= 0o777  # no setuid bits cross
            tar.addfile(member, data)
    return total


def _verifiers_own(target: str) -> bool:
    """A path (relative to /) where a separate verifier's own files are: its tests and the
    folder its reward is read from. Nothing handed over may land there."""
    return any(
        target == own or target.startswith(own + "/")
        for own in (VERIFIER_LOGS.lstrip("/"), TESTS.lstrip("/"))
    )
