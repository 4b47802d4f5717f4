"""Task repositories on a worker host: a mirror cache, ref resolution, workspace archives.

A repository is a git URL or a path on the worker host. Each is mirrored once under
BOLTZ_DATA_DIR/repos and fetched again only when a commit is missing, so the sandbox never
needs network: its /workspace arrives as a tar archive made here.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage

from attempts.core.errors import TaskInvalid
from attempts.exports.workspace import sandbox_owned
from boltz_web.file_storage import is_shared

# A full commit id (SHA-1 or SHA-256): it names one commit forever.
FULL_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Fixed identity and dates, so a folder committed twice gives the same commit id.
_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "Boltz",
    "GIT_AUTHOR_EMAIL": "boltz@localhost",
    "GIT_COMMITTER_NAME": "Boltz",
    "GIT_COMMITTER_EMAIL": "boltz@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


class GitError(RuntimeError):
    pass


def git(
    *args: str,
    cwd: Path | str | None = None,
    env: dict | None = None,
    timeout: float = 600,
    output: Path | None = None,
    raw: bool = False,
    memory_limit: int | None = None,
):
    """Run git; its output as text (bytes with `raw`), or written to the file `output`.
    `memory_limit` caps git's address space (bytes): for git run on what an agent made."""
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    what = next((a for a in args if not a.startswith("-") and "=" not in a), args[0])
    argv = ["git", *args]
    if memory_limit:
        # The limit is set by a shell, not a preexec_fn: safe in the threaded operations
        # worker, and the child never starts as a copy of the worker's own memory.
        limit_kb = str(max(1, memory_limit // 1024))
        argv = ["/bin/sh", "-c", 'ulimit -v "$0" && exec git "$@"', limit_kb, *args]
    try:
        with open(output, "wb") if output else contextlib.nullcontext() as sink:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=sink if output else subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout,
            )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {what} took longer than {timeout:.0f}s") from None
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", errors="replace").strip()
        raise GitError(message.splitlines()[-1] if message else f"git {what} failed")
    if output:
        return ""
    return proc.stdout if raw else proc.stdout.decode("utf-8", errors="replace")


# A repository kept in the file storage as a git bundle (uploaded, or made from a folder, where
# the storage is shared: BOLTZ_STORAGE=s3): every host makes its mirror from the bundle.
STORED = "stored:"


def is_local(url: str) -> bool:
    return (
        "://" not in url and not url.startswith(STORED) and not re.match(r"^[\w.-]+@[\w.-]+:", url)
    )


def mirror_path(url: str) -> Path:
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    name = re.sub(r"[^\w.-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40] or "repo"
    return settings.BOLTZ_REPO_CACHE / f"{name}-{key}.git"


def ensure_mirror(url: str, *, refresh: bool = False) -> Path:
    """A bare mirror of `url` in the cache; raises TaskInvalid('repository') if unreachable."""
    if "\0" in url:
        raise TaskInvalid("repository", f"{url!r} holds a NUL byte")
    if is_local(url):
        path = Path(url)
        if not path.exists():
            raise TaskInvalid("repository", f"{url} does not exist on this host")
        try:
            git("rev-parse", "--git-dir", cwd=path)
        except GitError:
            raise TaskInvalid("repository", f"{url} is not a git repository") from None
    mirror = mirror_path(url)
    if url.startswith(STORED):
        if not mirror.exists():  # a bundle never changes: there is nothing to refresh
            _mirror_from_bundle(url.removeprefix(STORED), mirror)
        return mirror
    try:
        if not mirror.exists():
            mirror.parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix="clone-", dir=mirror.parent))
            try:
                git("clone", "--mirror", "--quiet", "--", url, str(scratch / "m.git"))
                try:
                    os.replace(scratch / "m.git", mirror)
                except OSError:
                    if not mirror.exists():  # else another process made the same mirror first
                        raise
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        elif refresh:
            git("remote", "update", "--prune", cwd=mirror)
    except GitError as exc:
        raise TaskInvalid("repository", f"could not clone {url}: {exc}") from None
    return mirror


def _mirror_from_bundle(name: str, mirror: Path) -> None:
    if not default_storage.exists(name):
        raise TaskInvalid("repository", f"{name} is not in the file storage")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="clone-", dir=mirror.parent))
    try:
        bundle = scratch / "repo.bundle"
        with default_storage.open(name, "rb") as source, bundle.open("wb") as out:
            shutil.copyfileobj(source, out)
        git("clone", "--mirror", "--quiet", "--", str(bundle), str(scratch / "m.git"))
        os.replace(scratch / "m.git", mirror)
    except GitError as exc:
        raise TaskInvalid("repository", f"could not clone {name}: {exc}") from None
    except OSError:
        if not mirror.exists():  # else another process made the same mirror first
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stored_bundle(repo: Path, slug: str) -> str:
    """`repo` (every ref) as a git bundle in the file storage; its repo_url (`stored:NAME`).
    The name holds the bundle's hash: an upload made again under the slug is a new bundle."""
    with tempfile.TemporaryDirectory(prefix="bundle-", dir=settings.DATA_DIR) as scratch:
        bundle = Path(scratch) / "repo.bundle"
        git("bundle", "create", "--quiet", str(bundle), "--all", cwd=repo)
        digest = hashlib.sha256(bundle.read_bytes()).hexdigest()[:16]
        name = f"task-repos/{slug}-{digest}.bundle"
        if not default_storage.exists(name):
            with bundle.open("rb") as handle:
                name = default_storage.save(name, File(handle))
    return STORED + name


def resolve_ref(url: str, ref: str) -> str:
    """The commit id `ref` names in `url`; raises TaskInvalid('ref') if there is none."""
    ref = ref or "HEAD"
    if ref.startswith("-") or "\0" in ref:
        raise TaskInvalid("ref", f"{ref!r} is not a ref name")
    # A full commit id never moves: when the cached mirror has it, there is nothing to fetch
    # (importing a SWE-bench file of many rows from one repository fetches once, not per row).
    # Branches and tags are fetched fresh.
    if FULL_COMMIT.fullmatch(ref) and mirror_path(url).exists():
        with contextlib.suppress(GitError):
            return _rev_parse(ensure_mirror(url), ref)
    mirror = ensure_mirror(url, refresh=True)
    try:
        return _rev_parse(mirror, ref)
    except GitError:
        raise TaskInvalid("ref", f"{ref!r} does not exist in {url}") from None


def _rev_parse(mirror: Path, ref: str) -> str:
    return git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=mirror).strip()


def commit_folder(folder: Path, repo: Path) -> str:
    """Make `repo` a git repository holding exactly `folder`'s files as one commit."""
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(folder, repo, symlinks=True)
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    git("add", "--all", "--force", cwd=repo)
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "--allow-empty",
        "-m",
        "Task repository",
        cwd=repo,
        env=_COMMIT_ENV,
    )
    return git("rev-parse", "HEAD", cwd=repo).strip()


def _put_in_place(made: Path, target: Path) -> None:
    """`made` becomes `target` (whatever was there goes), by renames: a reader finds the old
    repository or the new one, never half of either."""
    for _ in range(20):
        old = target.parent / f".{target.name}.old.{uuid.uuid4().hex}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, old)
        try:
            os.rename(made, target)
        except OSError:  # another one was put there meanwhile: set it aside too, and again
            continue
        finally:
            shutil.rmtree(old, ignore_errors=True)
        return
    raise OSError(f"could not put the repository in place at {target}")


def repository_from_folder(folder: Path, slug: str, *, keep: bool = False) -> str:
    """A task's repository from a folder of files: kept as it is when it is a git repository
    (history and all), else committed as one commit. Returns the path to use as repo_url.
    With `keep`, one made before under the slug is used as it is (the same files each time)."""
    target = settings.DATA_DIR / "task-repos" / slug
    target.parent.mkdir(parents=True, exist_ok=True)
    if keep and target.exists():  # only ever put in place whole
        return _stored_bundle(target, slug) if is_shared(settings.STORAGES) else str(target)
    # Made aside, then put in place whole: two processes making the same task's repository at
    # once (the first sandboxes from one image, asked for together) each get a whole one.
    made = target.parent / f".{slug}.{uuid.uuid4().hex}"
    try:
        if (folder / ".git").exists():
            shutil.copytree(folder, made, symlinks=True)
        else:
            commit_folder(folder, made)
        if keep:
            with contextlib.suppress(OSError):  # else another process put its own first
                os.rename(made, target)
        else:
            _put_in_place(made, target)
    finally:
        shutil.rmtree(made, ignore_errors=True)
    if is_shared(settings.STORAGES):  # other hosts cannot see this folder: they get a bundle
        return _stored_bundle(target, slug)
    return str(target)


# Git run on the worker against repositories Boltz made must not read anyone's configuration:
# not the system's, not the worker user's, not an agent's. `clean_git` runs it that way.
CLEAN_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_LITERAL_PATHSPECS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}
CLEAN_GIT_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.excludesFile=/dev/null",
    "core.attributesFile=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.fileMode=true",
    "core.protectNTFS=false",
    "core.protectHFS=false",
    "core.quotePath=true",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.algorithm=myers",
    "gc.auto=0",
    "advice.detachedHead=false",
)


def clean_git(*args: str, env: dict | None = None, **kwargs) -> str:
    """`git` with no configuration but Boltz's own (see CLEAN_GIT_ENV)."""
    options = [part for item in CLEAN_GIT_CONFIG for part in ("-c", item)]
    home = {"HOME": str(settings.DATA_DIR), "XDG_CONFIG_HOME": str(settings.DATA_DIR / ".none")}
    return git(*options, *args, env={**home, **CLEAN_GIT_ENV, **(env or {})}, **kwargs)


def _cache_key(url: str, commit: str) -> str:
    return hashlib.sha256(f"{url}\0{commit}".encode()).hexdigest()[:24]


def base_repository(url: str, commit: str) -> Path:
    """A bare repository in the cache holding `commit` and its ancestors and nothing else: no
    branch, tag, remote, reflog or object that the base cannot reach, HEAD detached at it.
    Built once per worker host and base; immutable once in place (written, then renamed)."""
    target = settings.BOLTZ_REPO_CACHE / "bases" / f"{_cache_key(url, commit)}.git"
    if target.exists():
        return target
    mirror = ensure_mirror(url)
    try:
        git("cat-file", "-e", f"{commit}^{{commit}}", cwd=mirror)
    except GitError:
        mirror = ensure_mirror(url, refresh=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="base-", dir=target.parent))
    try:
        repo = scratch / "base.git"
        # No template: no hooks, no info/exclude, no description.
        clean_git("init", "--quiet", "--bare", "--template=", str(repo))
        # A fetch of one commit id sends exactly the objects it reaches, nothing else.
        clean_git(
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            str(mirror),
            commit,
            cwd=repo,
        )
        clean_git("update-ref", "--no-deref", "HEAD", commit, cwd=repo)
        clean_git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo)
        try:
            os.replace(repo, target)
        except OSError:
            if not target.exists():  # else another worker process built the same one first
                raise
    except GitError as exc:
        raise TaskInvalid("ref", f"commit {commit} could not be fetched: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def cached_workspace_archive(url: str, commit: str) -> Path:
    """The workspace tar of (url, commit), built once per worker host and reused by every
    attempt at that commit. The file is immutable once in place (written, then renamed)."""
    target = settings.BOLTZ_REPO_CACHE / "workspaces" / f"{_cache_key(url, commit)}.v2.tar"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_suffix(f".{os.getpid()}.partial")
        workspace_archive(url, commit, scratch)
        os.replace(scratch, target)
    return target


@contextlib.contextmanager
def checked_out(url: str, commit: str) -> Iterator[Path]:
    """A scratch clone of `url` (all history, origin pointing at `url`) checked out at
    `commit`, removed on exit. Fetches the mirror first if it lacks the commit."""
    mirror = ensure_mirror(url)
    try:
        git("cat-file", "-e", f"{commit}^{{commit}}", cwd=mirror)
    except GitError:
        mirror = ensure_mirror(url, refresh=True)
    with tempfile.TemporaryDirectory(prefix="checkout-", dir=settings.DATA_DIR) as scratch:
        tree = Path(scratch) / "workspace"
        try:
            git("clone", "--quiet", "--no-checkout", "--no-hardlinks", str(mirror), str(tree))
            git("checkout", "--quiet", "--detach", commit, cwd=tree)
            git("remote", "set-url", "origin", url, cwd=tree)
        except GitError as exc:
            raise TaskInvalid("ref", f"commit {commit} could not be checked out: {exc}") from None
        yield tree


def workspace_archive(url: str, commit: str, dest: Path) -> Path:
    """A tar at `dest` holding `workspace/`: the base commit checked out (HEAD detached at it)
    with a `.git` that holds the base and its ancestors only (see `base_repository`)."""
    base = base_repository(url, commit)
    with tempfile.TemporaryDirectory(prefix="workspace-", dir=settings.DATA_DIR) as scratch:
        tree = Path(scratch) / "workspace"
        tree.mkdir()
        shutil.copytree(base, tree / ".git", symlinks=True)
        try:
            clean_git("config", "core.bare", "false", cwd=tree / ".git")
            clean_git("config", "core.logAllRefUpdates", "true", cwd=tree / ".git")
            clean_git("reset", "--quiet", "--hard", commit, cwd=tree)
        except GitError as exc:
            raise TaskInvalid("ref", f"commit {commit} could not be checked out: {exc}") from None
        # `reset` leaves a reflog entry and ORIG_HEAD: the sandbox starts with no history of
        # Boltz's own.
        shutil.rmtree(tree / ".git" / "logs", ignore_errors=True)
        (tree / ".git" / "ORIG_HEAD").unlink(missing_ok=True)
        with tarfile.open(dest, "w") as tar:
            tar.add(tree, arcname="workspace", filter=sandbox_owned)
    return dest


def tar_folder(folder: Path, *, prefix: str = "") -> tuple[bytes, list[str]]:
    """An uncompressed tar of a folder's files (owned by the sandbox user) and their paths."""
    buffer = io.BytesIO()
    paths: list[str] = []
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise TaskInvalid("check_files", f"{rel} is not a regular file or folder")
            tar.add(path, arcname=prefix + rel, recursive=False, filter=sandbox_owned)
            if path.is_file():
                paths.append(rel)
    return buffer.getvalue(), paths
