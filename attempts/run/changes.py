"""An agent's changes, computed where nothing in its sandbox can steer them.

After every process of the agent has ended, its /workspace is read out of the stopped sandbox
as a tar stream and written to a scratch folder on the worker, without any `.git` folder. The
diff against the base is computed there by git with no configuration but Boltz's own, an index
of its own and only the base's objects: the agent's git configuration, excludes, hooks, index,
replace refs and attributes play no part. Ignore rules come only from the .gitignore files in
the tree, so a change to them shows in the diff.

Secrets (core/redaction.py) are redacted from the files the agent changed before the diff is
taken: their contents, link targets and names (`redact_tree`). Files the agent left as the base
has them are not touched.

The check's tree is then built from that patch alone (`checked_tree`): the base with exactly the
recorded changes applied. What a reviewer reads is, by construction, what was checked.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attempts.core.protected import Protection, changes_to
from attempts.core.redaction import REDACTED, Redactor
from attempts.exports.workspace import ChunkReader, sandbox_owned
from attempts.taskio import repos

PREFIX = "workspace/"
# Attributes in the tree could convert line endings or hide content as it is recorded: every
# attribute that changes what `git add` or `git diff` do is unset for every path.
_NEUTRAL_ATTRIBUTES = (
    "* !text !eol !crlf !diff !merge !filter !ident !working-tree-encoding !whitespace\n"
)
_GIT_TIMEOUT = 600
# Compiled bytecode, left out of an in-place record: running Python makes it, and the check
# removes it before it runs (protected.QUIET_PROTECTED).
_BYTECODE = re.compile(r"(^|/)__pycache__/|\.py[co]\Z")
# Git on the worker reads what the agent made: its memory is capped, so no object can inflate
# into the worker's memory. The agent's own .git is read for its commit list only, within a
# smaller cap.
_GIT_MEMORY = 4 * 1024**3
_AGENT_GIT_MEMORY = 128 * 1024**2
MAX_AGENT_GIT_BYTES = 256 * 1024**2
MAX_COMMITS = 200


class ChangesUnavailable(Exception):
    """The agent's changes could not be computed: the attempt ends with this reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class AgentTree:
    """The agent's /workspace as it left it, on the worker."""

    root: Path  # its files, without any .git folder
    paths: set[str] = field(default_factory=set)  # every file and link in it
    bytes: int = 0
    git_dir: Path | None = None  # objects and refs of its .git: for its commit list only


def _agent_git_member(parts: list[str]) -> bool:
    """Of the agent's own .git, keep only what names commits: objects (not objects/info, whose
    alternates could point anywhere on the worker), refs, HEAD and packed-refs."""
    if len(parts) < 2 or parts[0] != ".git":
        return False
    if parts[1] in ("HEAD", "packed-refs"):
        return len(parts) == 2
    if parts[1] == "objects":
        return len(parts) == 2 or parts[2] != "info"
    return parts[1] == "refs"


def archive_prefix(folder: str) -> str:
    """The names Docker's archive of a folder starts with: its last part ("/app" -> "app/")."""
    return folder.rstrip("/").rsplit("/", 1)[-1] + "/"


def read_tree(
    chunks: Iterable[bytes],
    scratch: Path,
    *,
    max_bytes: int,
    max_files: int,
    prefix: str = PREFIX,
) -> AgentTree:
    """Write the tar stream of /workspace (Docker's archive of it) under `scratch`. Files,
    folders and links only; names that would leave the folder, and any path through a link,
    are refused. Over `max_bytes` of files or `max_files` entries: ChangesUnavailable."""
    tree = AgentTree(root=scratch / "tree")
    tree.root.mkdir(parents=True)
    agent_git = scratch / "agent-git"
    git_bytes, git_ok = 0, True
    links: set[str] = set()
    count = 0
    source = io.BufferedReader(ChunkReader(chunks), buffer_size=1024 * 1024)
    try:
        with tarfile.open(fileobj=source, mode="r|*") as tar:
            for member in tar:
                if not member.name.startswith(prefix):
                    continue
                rel = member.name[len(prefix) :].rstrip("/")
                if not rel:
                    continue
                parts = rel.split("/")
                if rel.startswith("/") or "\0" in rel or {"", ".", ".."} & set(parts):
                    raise ChangesUnavailable(f"the workspace holds an unsafe path: {rel[:200]!r}")
                if ".git" in parts:
                    if git_ok and _agent_git_member(parts):
                        git_bytes += member.size
                        git_ok = git_bytes <= min(max_bytes, MAX_AGENT_GIT_BYTES)
                        if git_ok:
                            _extract(tar, member, agent_git / "/".join(parts[1:]))
                    continue
                count += 1
                if count > max_files:
                    raise ChangesUnavailable(f"the workspace holds more than {max_files} files")
                if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
                    raise ChangesUnavailable(
                        f"the workspace archive has a path through a link: {rel[:200]!r}"
                    )
                target = tree.root / rel
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if member.isfile():
                    tree.bytes += member.size
                    if tree.bytes > max_bytes:
                        raise ChangesUnavailable(
                            f"the workspace holds more than {max_bytes} bytes of files"
                        )
                    _extract(tar, member, target)
                elif member.issym():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(member.linkname, target)
                    links.add(rel)
                elif member.islnk():
                    linked = (
                        member.linkname[len(prefix) :] if member.linkname.startswith(prefix) else ""
                    )
                    if linked in tree.paths and linked not in links:
                        # A link costs git (and the patch) a whole copy: count it as one.
                        tree.bytes += (tree.root / linked).stat().st_size
                        if tree.bytes > max_bytes:
                            raise ChangesUnavailable(
                                f"the workspace holds more than {max_bytes} bytes of files"
                            )
                        target.parent.mkdir(parents=True, exist_ok=True)
                        os.link(tree.root / linked, target)
                    elif linked:
                        continue  # a hard link into .git or to something left out
                else:
                    continue  # devices, pipes and sockets: git cannot hold them
                tree.paths.add(rel)
    except (tarfile.TarError, OSError) as exc:
        raise ChangesUnavailable(f"the workspace could not be read: {exc}") from exc
    if git_ok and (agent_git / "HEAD").is_file():
        (agent_git / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
        tree.git_dir = agent_git
    return tree


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    if not member.isfile():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o755 if member.mode & stat.S_IXUSR else 0o644
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        handle = tar.extractfile(member)
        if handle is not None:
            while chunk := handle.read(1024 * 1024):
                out.write(chunk)
    os.chmod(target, mode)


def _scratch_repository(base_git: Path, where: Path, work_tree: Path | None) -> dict[str, str]:
    """A repository of Boltz's own in `where` that reads the base's objects and writes its
    own; returns the environment that points git at it (and at `work_tree`)."""
    git_dir = where / "git"
    repos.clean_git("init", "--quiet", "--bare", "--template=", str(git_dir))
    (git_dir / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (git_dir / "objects" / "info" / "alternates").write_text(str(base_git / "objects") + "\n")
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(_NEUTRAL_ATTRIBUTES)
    env = {"GIT_DIR": str(git_dir), "GIT_INDEX_FILE": str(where / "index")}
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def _run(*args: str, env: dict[str, str], cwd: Path, output: Path | None = None, raw=False):
    return repos.clean_git(
        "-c",
        "core.bare=false",
        *args,
        memory_limit=_GIT_MEMORY,
        env=env,
        cwd=cwd,
        timeout=_GIT_TIMEOUT,
        output=output,
        raw=raw,
    )


def listing(env: dict[str, str], cwd: Path, *, tree_ish: str | None = None) -> dict[str, str]:
    """path -> 'mode object-id' of a commit (tree_ish) or of the index."""
    if tree_ish:  # "mode type id\tpath"
        out = _run("ls-tree", "-r", "-z", "--full-tree", tree_ish, env=env, cwd=cwd, raw=True)
        oid_at = 2
    else:  # "mode id stage\tpath"
        out = _run("ls-files", "-s", "-z", env=env, cwd=cwd, raw=True)
        oid_at = 1
    entries: dict[str, str] = {}
    for record in out.split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            fields = meta.decode().split(" ")
            entries[os.fsdecode(path)] = f"{fields[0]} {fields[oid_at]}"
    return entries


@dataclass
class Changes:
    """What the agent changed, as recorded."""

    patch: Path  # the complete binary patch against the base
    patch_bytes: int
    files: int  # files the patch touches
    protected: list[dict]  # protected paths the agent changed: [{path, change}]
    commits: list[dict]  # commits the agent made on top of the base: [{id, author, subject}]
    redacted: int = 0  # changed files whose content, link target or name held a secret


def record(
    tree: AgentTree,
    *,
    base_git: Path,
    base_commit: str,
    scratch: Path,
    protection: Protection,
    max_patch_bytes: int,
    every_file: bool = False,
    redactor: Redactor | None = None,
) -> Changes:
    """Diff the agent's tree against the base, in a repository of Boltz's own. `every_file`
    (a check that runs in place, on the tree itself): no .gitignore hides anything, so the
    record holds every file the check sees (compiled bytecode aside, which the check removes).
    `redactor`: the attempt's secrets, redacted from the files the agent changed first."""
    where = scratch / "record"
    where.mkdir()
    env = _scratch_repository(base_git, where, tree.root)
    patch = scratch / "changes.patch"

    def stage() -> None:
        if every_file:
            _run("add", "--all", "--force", ".", env=env, cwd=tree.root)
            bytecode = [p for p in listing(env, tree.root) if _BYTECODE.search(p)]
            if bytecode:
                names = where / "bytecode"
                names.write_bytes(b"".join(os.fsencode(p) + b"\0" for p in bytecode))
                _run(
                    *("rm", "-q", "--cached", f"--pathspec-from-file={names}"),
                    "--pathspec-file-nul",
                    env=env,
                    cwd=tree.root,
                )
        else:
            _run("add", "--all", ".", env=env, cwd=tree.root)

    redacted = 0
    try:
        _run("read-tree", base_commit, env=env, cwd=tree.root)
        stage()
        if redactor:  # only what the agent changed: the base's own files stay as they are
            changed = _run(
                *("diff", "--cached", "--name-only", "-z", "--no-renames", base_commit),
                env=env,
                cwd=tree.root,
                raw=True,
            )
            paths = [os.fsdecode(n) for n in changed.split(b"\0") if n]
            redacted = redact_tree(tree, paths, redactor)
            if redacted:
                stage()
        _run(
            "diff",
            "--cached",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "-M",
            base_commit,
            env=env,
            cwd=tree.root,
            output=patch,
        )
        names = _run(
            "diff",
            "--cached",
            "--name-only",
            "-z",
            "-M",
            base_commit,
            env=env,
            cwd=tree.root,
            raw=True,
        )
        final = listing(env, tree.root)
        base = listing(env, tree.root, tree_ish=base_commit)
    except repos.GitError as exc:
        raise ChangesUnavailable(f"git could not record the workspace: {exc}") from exc
    if patch.stat().st_size > max_patch_bytes:
        raise ChangesUnavailable(f"the changes make a patch of more than {max_patch_bytes} bytes")
    ignored = tree.paths - set(final)
    return Changes(
        patch=patch,
        patch_bytes=patch.stat().st_size,
        files=sum(1 for n in names.split(b"\0") if n),
        protected=changes_to(protection, base=base, final=final, ignored=ignored),
        commits=(redactor or Redactor(())).data(agent_commits(tree.git_dir, base_commit, scratch)),
        redacted=redacted,
    )


# How many other names a redacted path may try when its name is taken.
_MAX_RENAMES = 1000


def redact_tree(tree: AgentTree, paths: Iterable[str], redactor: Redactor) -> int:
    """Redact the secrets from `paths` of the agent's tree (the files and links it changed):
    each file's content (streamed: any size, any bytes), each link's target, and each name
    that holds one (the file moves to its redacted name, made unique when it is taken).
    Returns how many paths held a secret."""
    touched = 0
    for rel in sorted(paths):
        path = tree.root / rel
        if not os.path.lexists(path):
            continue  # deleted: the base's
        found = False
        if path.is_symlink():
            target = os.readlink(path)
            clean = redactor.text(target)
            if clean != target:
                path.unlink()
                os.symlink(clean, path)
                found = True
        elif path.is_file():
            found = _redact_file(path, redactor)
        name = redactor.text(rel)
        if name != rel:
            new = _free_name(tree.root, name)
            try:
                (tree.root / new).parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, tree.root / new)
            except OSError as exc:  # a name too long once redacted, ...: nothing of it shown
                raise ChangesUnavailable(
                    f"a file whose name holds a secret could not be renamed ({exc.strerror})"
                ) from None
            tree.paths.discard(rel)
            tree.paths.add(new)
            found = True
        touched += found
    return touched


def _redact_file(path: Path, redactor: Redactor) -> bool:
    """Redact one regular file of the tree in place; True if it held a secret. Read once to
    look (most files hold none), and again to write it redacted when one does."""
    scan = Redactor(redactor.secrets)
    with path.open("rb") as source:
        while (chunk := source.read(1 << 20)) and not scan.replaced:
            scan.feed(chunk)
    scan.flush()
    if not scan.replaced:
        return False
    stream = Redactor(redactor.secrets)
    mode = stat.S_IMODE(path.lstat().st_mode)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".boltz-redact-")
    with path.open("rb") as source, os.fdopen(fd, "wb") as out:
        while chunk := source.read(1 << 20):
            out.write(stream.feed(chunk))
        out.write(stream.flush())
    os.chmod(temporary, mode)
    os.replace(temporary, path)
    redactor.replaced += stream.replaced
    return True


def _free_name(root: Path, name: str) -> str:
    """`name` (a redacted path) or, when it is taken, or a folder on its way is a file or a
    link, the same with `[redacted-2]`, `[redacted-3]`, ...: never a path through a link."""
    for n in range(1, _MAX_RENAMES + 1):
        candidate = name if n == 1 else name.replace(REDACTED, f"[redacted-{n}]")
        parts = candidate.split("/")
        if {"", ".", ".."} & set(parts):
            raise ChangesUnavailable("a redacted file name is not a path")
        folders = (root.joinpath(*parts[:i]) for i in range(1, len(parts)))
        blocked = os.path.lexists(root / candidate) or any(
            f.is_symlink() or (f.exists() and not f.is_dir()) for f in folders
        )
        if not blocked:
            return candidate
    raise ChangesUnavailable(f"more than {_MAX_RENAMES} files hold a secret in the same name")


def agent_commits(git_dir: Path | None, base_commit: str, scratch: Path) -> list[dict]:
    """The commits the agent made on top of the base, read from a copy of its objects and refs
    only (none of its configuration). Display only: an unreadable history gives none."""
    if git_dir is None:
        return []
    env = {"GIT_DIR": str(git_dir)}
    try:
        out = repos.clean_git(
            "-c",
            "core.packedGitWindowSize=8m",
            "-c",
            "core.packedGitLimit=32m",
            "-c",
            "core.deltaBaseCacheLimit=8m",
            "log",
            "-z",
            f"--max-count={MAX_COMMITS}",
            "--format=%H%x09%<(200,trunc)%an%x09%<(500,trunc)%s",
            f"{base_commit}..HEAD",
            env=env,
            cwd=scratch,
            timeout=60,
            raw=True,
            memory_limit=_AGENT_GIT_MEMORY,
        )
    except repos.GitError:
        return []
    commits = []
    for raw in out[: 1 << 20].split(b"\0"):
        parts = raw.decode("utf-8", errors="replace").strip("\n").split("\t", 2)
        if len(parts) == 3:
            commits.append(
                {
                    "id": parts[0],
                    "author": parts[1].rstrip()[:200],
                    "subject": parts[2].rstrip()[:500],
                }
            )
    return commits


def checked_tree(
    *, base_git: Path, base_commit: str, patch: Path | None, scratch: Path
) -> tuple[Path, list[str]]:
    """The base with exactly `patch` applied, written to a folder: (folder, its file paths).
    Raises ChangesUnavailable if the patch does not apply to the base."""
    where = scratch / "checked-repo"
    out = scratch / "checked"
    where.mkdir()
    out.mkdir()
    env = _scratch_repository(base_git, where, out)
    try:
        _run("read-tree", base_commit, env=env, cwd=out)
        if patch is not None and patch.stat().st_size:
            _run(
                "apply", "--cached", "--binary", "--whitespace=nowarn", str(patch), env=env, cwd=out
            )
        _run("checkout-index", "--all", "--force", env=env, cwd=out)
        paths = listing(env, out)
    except repos.GitError as exc:
        raise ChangesUnavailable(f"the recorded changes do not apply to the base: {exc}") from exc
    return out, paths


def check_archive(*, workspace_archive: Path, checked: Path, dest: Path) -> Path:
    """A tar of `workspace/` for a fresh container: the base's `.git` (from the workspace
    archive every sandbox starts from) and the checked tree's files."""
    with tarfile.open(dest, "w") as out:
        with tarfile.open(workspace_archive, "r") as base:
            for member in base:
                if (
                    member.name == "workspace"
                    or member.name.startswith("workspace/.git/")
                    or member.name == "workspace/.git"
                ):
                    out.addfile(member, base.extractfile(member) if member.isfile() else None)
        for entry in sorted(checked.iterdir()):
            out.add(entry, arcname=f"workspace/{entry.name}", filter=sandbox_owned)
    return dest


def files_archive(checked: Path, paths: list[str], *, prefix: str) -> bytes:
    """A tar (under `prefix`, owned by the sandbox user, with their folders) of `paths` of the
    checked tree: the files the recorded changes write."""
    buffer = io.BytesIO()
    folders: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        for path in paths:
            parts = path.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(f"{prefix}/{folder}")
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    out.addfile(sandbox_owned(info))
            out.add(
                checked / path, arcname=f"{prefix}/{path}", recursive=False, filter=sandbox_owned
            )
    return buffer.getvalue()


def base_files(
    base_git: Path,
    base_commit: str,
    paths: list[str],
    scratch: Path,
    *,
    prefix: str = PREFIX,
    owner: tuple[int, int] | None = None,
) -> bytes:
    """A tar (under `prefix`, owned by the sandbox user or `owner`) of `paths` as they are at
    the base."""
    if not paths:
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        for start in range(0, len(paths), 500):
            archive = repos.clean_git(
                "archive",
                "--format=tar",
                f"--prefix={prefix}",
                base_commit,
                "--",
                *paths[start : start + 500],
                env={"GIT_DIR": str(base_git)},
                cwd=scratch,
                timeout=_GIT_TIMEOUT,
                raw=True,
            )
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as part:
                for member in part:
                    if member.type == tarfile.XGLTYPE or member.isdir():
                        continue
                    member = sandbox_owned(member)
                    if owner is not None:
                        member.uid, member.gid = owner
                        member.uname = member.gname = ""
                    out.addfile(member, part.extractfile(member) if member.isfile() else None)
    return buffer.getvalue()


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "dir"
    if member.issym():
        return "link"
    return "file" if member.isfile() or member.islnk() else "other"


def tree_entries(chunks: Iterable[bytes], *, prefix: str = PREFIX) -> dict[str, str]:
    """path -> file, dir, link or other, for the tar stream of the working folder (no .git)."""
    entries: dict[str, str] = {}
    source = io.BufferedReader(ChunkReader(chunks), buffer_size=1024 * 1024)
    with tarfile.open(fileobj=source, mode="r|*") as tar:
        for member in tar:
            rel = member.name[len(prefix) :].rstrip("/") if member.name.startswith(prefix) else ""
            if rel and ".git" not in rel.split("/"):
                entries[rel] = _kind(member)
    return entries


def index_entries(paths_modes: dict[str, str]) -> dict[str, str]:
    """The same for a tree known from git ('mode object-id' per path): folders implied."""
    entries: dict[str, str] = {}
    for path, meta in paths_modes.items():
        mode = meta.split(" ", 1)[0]
        entries[path] = {"120000": "link", "160000": "other"}.get(mode, "file")
        parts = path.split("/")
        for i in range(1, len(parts)):
            entries.setdefault("/".join(parts[:i]), "dir")
    return entries
