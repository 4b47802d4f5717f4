"""Secrets written to files are redacted where the worker records them: the agent's changed files
(contents, names, link targets) before they are diffed, a live sandbox's archives, and any
JSON-like record. Pure logic and git on the worker: no Docker."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from attempts.core.protected import Protection
from attempts.core.redaction import REDACTED, Redactor, redact_tar
from attempts.run.changes import AgentTree, checked_tree, record
from attempts.taskio.repos import git
from tests.test_tamper import commit

SECRET = "tok-5ec12e7-0123456789"
TASK_SECRET = "stage-worker-key-42"


# --- whole values --------------------------------------------------------------------------------
def test_every_string_of_a_json_value_is_redacted_keys_included_and_replacements_counted():
    r = Redactor([SECRET])
    value = {
        "path": f"dir-{SECRET}/x",
        SECRET: [1, 2.5, None, True, f"a {SECRET} b {SECRET}", (SECRET,)],
        "nested": {"list": [{"k": SECRET}]},
    }
    assert r.data(value) == {
        "path": "dir-[redacted]/x",
        REDACTED: [1, 2.5, None, True, "a [redacted] b [redacted]", (REDACTED,)],
        "nested": {"list": [{"k": REDACTED}]},
    }
    assert r.replaced == 6
    assert Redactor([]).data(value) is value  # nothing to redact: the value as it is


def test_bytes_redacted_whole_are_what_streaming_them_gives():
    data = b"\x00\xff" + SECRET.encode() + b"\x80" * 5 + SECRET.encode()[:6]
    r = Redactor([SECRET])
    streamed = r.feed(data[:5]) + r.feed(data[5:]) + r.flush()
    assert (
        Redactor([SECRET]).whole(data)
        == streamed
        == b"\x00\xff[redacted]" + b"\x80" * 5 + b"tok-5e"
    )


# --- a live sandbox's archive ---------------------------------------------------------------------
def _tar(members) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            else:
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def test_an_archive_is_written_again_with_names_link_targets_and_contents_redacted():
    long_folder = "deep/" + "d" * 120 + f"/{SECRET}/" + "e" * 120  # a long name: GNU/PAX headers
    binary = b"\x00\x01" * 700_000 + SECRET.encode() + b"\xfe" * 10
    data = _tar(
        [
            ("ws", "dir", None),
            (f"ws/name-{SECRET}.txt", "file", b"plain"),
            ("ws/leak.py", "file", f'KEY = "{SECRET}"\nTASK = "{TASK_SECRET}"\n'.encode()),
            ("ws/blob.bin", "file", binary),
            (f"ws/{long_folder}/f.txt", "file", SECRET.encode() * 3),
            ("ws/link", "link", f"../target-{SECRET}"),
        ]
    )
    out = redact_tar(data, Redactor([SECRET, TASK_SECRET]))
    assert SECRET.encode() not in out and TASK_SECRET.encode() not in out
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        members = {m.name: m for m in tar}
        read = {n: tar.extractfile(m).read() for n, m in members.items() if m.isfile()}
    assert set(members) == {
        "ws",
        "ws/name-[redacted].txt",
        "ws/leak.py",
        "ws/blob.bin",
        f"ws/{long_folder.replace(SECRET, REDACTED)}/f.txt",
        "ws/link",
    }
    assert read["ws/leak.py"] == b'KEY = "[redacted]"\nTASK = "[redacted]"\n'
    assert read["ws/blob.bin"] == b"\x00\x01" * 700_000 + b"[redacted]" + b"\xfe" * 10
    assert members["ws/link"].linkname == "../target-[redacted]"
    assert Redactor([]).whole(data) == data and redact_tar(data, Redactor([])) == data
    # what is not a whole tar is redacted all the same, never passed on as it is
    for cut in (700, 1100, 2000):  # in the second member's name, after it, in a file
        assert SECRET.encode() in data[:cut]
        assert SECRET.encode() not in redact_tar(data[:cut], Redactor([SECRET]))
    assert (
        redact_tar(b"not a tar " + SECRET.encode(), Redactor([SECRET])) == b"not a tar [redacted]"
    )


# --- the agent's changes, recorded ------------------------------------------------------------------
@pytest.fixture
def base(tmp_path):
    """A repository at its base: its config.txt holds the secret itself (the task's own)."""
    repo = tmp_path / "base"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "README.md").write_text("calc\n")
    (repo / "config.txt").write_text(f"endpoint = {SECRET}\n")
    git("init", "-q", "-b", "main", cwd=repo)
    return repo, commit(repo, "base")


def _agent_tree(tmp_path, repo) -> AgentTree:
    """The agent's tree: the base's files, changed as a leaking agent changes them."""
    root = tmp_path / "agent" / "tree"
    root.mkdir(parents=True)
    for name in ("calc.py", "README.md", "config.txt"):
        (root / name).write_bytes((repo / name).read_bytes())
    (root / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "README.md").write_text(f"calc\n# {SECRET}\n")
    (root / "leak.py").write_text(f'API_KEY = "{SECRET}"\nTASK_KEY = "{TASK_SECRET}"\n')
    (root / f"name-{SECRET}.txt").write_text("x\n")
    (root / f"dir-{SECRET}").mkdir()
    (root / f"dir-{SECRET}" / "inner.txt").write_text("y\n")
    (root / f"run-{SECRET}.sh").write_text("#!/bin/sh\n")
    os.chmod(root / f"run-{SECRET}.sh", 0o755)
    os.symlink(f"target-{SECRET}", root / "link")
    # A binary file of 3 MiB: the secret across the 1 MiB read boundary, and near its end.
    blob = bytearray(os.urandom(3 << 20))
    for at in ((1 << 20) - 7, (3 << 20) - 100):
        blob[at : at + len(SECRET)] = SECRET.encode()
    (root / "blob.bin").write_bytes(bytes(blob))
    # A trap: a link named as a redacted folder would be, to somewhere outside the tree, and a
    # file whose redacted path would go through it.
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / REDACTED)
    (root / SECRET).mkdir()
    (root / SECRET / "x.txt").write_text("through the link?\n")
    paths = {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir() or p.is_symlink()}
    return AgentTree(root=root, paths=paths)


def _files_of(folder) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): (os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
        for p in folder.rglob("*")
        if p.is_symlink() or p.is_file()
    }


def test_the_changed_files_are_recorded_with_their_secrets_redacted_and_the_base_left_alone(
    tmp_path, base
):
    repo, base_commit = base
    tree = _agent_tree(tmp_path, repo)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    recorded = record(
        tree,
        base_git=repo / ".git",
        base_commit=base_commit,
        scratch=scratch,
        protection=Protection(patterns=()),
        max_patch_bytes=64 << 20,
        redactor=Redactor([SECRET, TASK_SECRET]),
    )
    patch = recorded.patch.read_bytes()
    assert SECRET.encode() not in patch and TASK_SECRET.encode() not in patch
    assert b"config.txt" not in patch  # unchanged: the base's own file is not touched
    # name, folder, content, link target, mode, binary, and the trap: 8 paths held a secret
    assert recorded.redacted == 8
    assert not any((tmp_path / "outside").iterdir())  # nothing went through the link

    # The patch applied to the base gives the agent's files, redacted (binary ones too).
    folder, listing = checked_tree(
        base_git=repo / ".git", base_commit=base_commit, patch=recorded.patch, scratch=scratch
    )
    files = _files_of(folder)
    leaks = [name for name, data in files.items() if SECRET.encode() in data or SECRET in name]
    assert leaks == ["config.txt"]  # the base's, as it was
    assert files["leak.py"] == b'API_KEY = "[redacted]"\nTASK_KEY = "[redacted]"\n'
    assert files["README.md"] == b"calc\n# [redacted]\n"
    assert files["calc.py"] == b"def add(a, b):\n    return a + b\n"
    assert files["name-[redacted].txt"] == b"x\n"
    assert files["dir-[redacted]/inner.txt"] == b"y\n"
    assert files["link"] == b"target-[redacted]"
    assert files["[redacted-2]/x.txt"] == b"through the link?\n"
    assert listing["run-[redacted].sh"].startswith("100755 ")
    blob = files["blob.bin"]
    assert len(blob) == (3 << 20) + 2 * (len(REDACTED) - len(SECRET))
    assert blob.count(REDACTED.encode()) == 2
    assert {f"name-{SECRET}.txt", "name-[redacted].txt"} & tree.paths == {"name-[redacted].txt"}


def test_without_secrets_the_tree_is_recorded_as_it_is(tmp_path, base):
    repo, base_commit = base
    tree = _agent_tree(tmp_path, repo)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    recorded = record(
        tree,
        base_git=repo / ".git",
        base_commit=base_commit,
        scratch=scratch,
        protection=Protection(patterns=()),
        max_patch_bytes=64 << 20,
        redactor=Redactor([]),
    )
    assert recorded.redacted == 0
    assert f"name-{SECRET}.txt".encode() in recorded.patch.read_bytes()
