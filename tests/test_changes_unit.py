"""Reading an agent's tree out of its sandbox and the protected-path rules: pure logic."""

from __future__ import annotations

import io
import tarfile

import pytest

from attempts.core.protected import (
    DEFAULT_PROTECTED,
    PatternError,
    Protection,
    changes_to,
    check_pattern,
    glob_literal,
    protection_for,
    reset_plan,
)
from attempts.run.changes import ChangesUnavailable, read_tree, tree_entries


def tar_of(*members: tuple) -> list[bytes]:
    """A Docker-like archive of /workspace: (name, kind, data-or-target) entries."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo("workspace/" + name if name else "workspace")
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, "workspace/" + payload
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                info.size, info.mode = len(payload), 0o755 if kind == "exec" else 0o644
                tar.addfile(info, io.BytesIO(payload))
    data = buffer.getvalue()
    return [data[i : i + 1000] for i in range(0, len(data), 1000)]


def test_the_tree_is_written_without_any_git_folder_but_with_links_and_modes(tmp_path):
    tree = read_tree(
        tar_of(
            ("", "dir", None),
            ("a.py", "file", b"x"),
            ("run.sh", "exec", b"#!/bin/sh\n"),
            ("link", "link", "/etc/passwd"),
            ("same", "hard", "a.py"),
            ("pipe", "fifo", None),
            (".git/HEAD", "file", b"abc\n"),
            (".git/config", "file", b"[core]\n\tfsmonitor = evil\n"),
            (".git/objects/info/alternates", "file", b"/root\n"),
            (".git/hooks/pre-commit", "exec", b"evil"),
            ("vendor/.git/config", "file", b"nested"),
            ("vendor/lib.py", "file", b"y"),
        ),
        tmp_path,
        max_bytes=1000,
        max_files=100,
    )
    assert tree.paths == {"a.py", "run.sh", "link", "same", "vendor/lib.py"}
    assert (tree.root / "run.sh").stat().st_mode & 0o100
    assert (tree.root / "link").is_symlink() and not (tree.root / ".git").exists()
    assert not (tree.root / "vendor" / ".git").exists()
    kept = {p.relative_to(tree.git_dir).as_posix() for p in tree.git_dir.rglob("*") if p.is_file()}
    assert kept == {"HEAD", "config"}  # Boltz's own config, not the agent's
    assert "fsmonitor" not in (tree.git_dir / "config").read_text()


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ((("big", "file", b"x" * 2000),), "more than 1000 bytes"),
        (tuple((f"f{i}", "file", b"") for i in range(101)), "more than 100 files"),
        ((("../escape", "file", b"x"),), "unsafe path"),
        ((("d", "link", "/tmp"), ("d/x", "file", b"x")), "through a link"),
    ],
)
def test_a_tree_that_cannot_be_recorded_is_unavailable_with_the_reason(tmp_path, members, why):
    with pytest.raises(ChangesUnavailable, match=why):
        read_tree(tar_of(*members), tmp_path, max_bytes=1000, max_files=100)


def test_tree_entries_name_each_kind():
    entries = tree_entries(
        tar_of(
            ("t", "dir", None), ("t/a", "file", b""), ("l", "link", "t"), (".git/x", "file", b"")
        )
    )
    assert entries == {"t": "dir", "t/a": "file", "l": "link"}


def test_defaults_protect_what_pytest_reads_before_a_test():
    protection = protection_for([])
    for path in (
        "conftest.py",
        "a/b/conftest.py",
        "pytest.ini",
        "pyproject.toml",
        "pytest.py",
        "_pytest/x.py",
        "sitecustomize.py",
        "pkg/__pycache__/m.cpython-311.pyc",
        "tests/pytest.ini",  # the first one above the tests wins
        "sub/pyproject.toml",
        "evil-1.0.dist-info/entry_points.txt",
        "src/evil.egg-info/entry_points.txt",
        "evil.pth",
        "argparse.py",  # would shadow the standard library for `python -m pytest`
        "iniconfig/__init__.py",
    ):
        assert protection.covers(path), path
    for path in (
        "calc.py",
        "tests/test_calc.py",
        "test/test_calc.py",  # a common folder name, though the standard library has one
        "src/json/decoder.py",
        "lib/evil.pth",
        "conftest.py.bak",
        "src/_pytest/main.py",  # pytest's own repository can still be fixed
        "lib/pytest.py",
    ):
        assert not protection.covers(path), path
    assert len(DEFAULT_PROTECTED) == len(set(DEFAULT_PROTECTED))


def test_patterns_match_folders_stars_and_literal_names():
    protection = Protection(
        ("tests", "src/*.cfg", "data/**/fixture?.json", glob_literal("a[1].txt"))
    )
    assert protection.covers("tests/unit/test_x.py") and protection.covers("tests")
    assert protection.covers("src/a.cfg") and not protection.covers("src/b/a.cfg")
    assert protection.covers("data/fixture1.json") and protection.covers("data/x/y/fixture2.json")
    assert protection.covers("a[1].txt") and not protection.covers("a1.txt")


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("*", "whole tree"),
        ("**/*", "whole tree"),
        ("/etc", "absolute"),
        ("a/../b", "'..'"),
        ("a**", "whole folder name"),
        ("[ab", "unclosed"),
        ("", "non-empty"),
    ],
)
def test_bad_patterns_are_refused_with_the_reason(pattern, why):
    with pytest.raises(PatternError, match=why):
        check_pattern(pattern)


def test_changes_to_protected_paths_are_reported_by_kind():
    protection = protection_for(["tests"], ["tests/test_a.py"])
    report = changes_to(
        protection,
        base={"tests/test_a.py": "1", "tests/test_b.py": "2", "calc.py": "3"},
        final={"tests/test_a.py": "9", "tests/new.py": "4", "calc.py": "5"},
        ignored={"conftest.py", "tests/.cache", "tests/__pycache__/t.pyc"},
    )
    assert report == [
        {"path": "conftest.py", "change": "added (ignored by .gitignore)"},
        {"path": "tests/.cache", "change": "added (ignored by .gitignore)"},
        {"path": "tests/new.py", "change": "added"},
        {"path": "tests/test_a.py", "change": "modified"},
        {"path": "tests/test_b.py", "change": "deleted"},
    ]


def test_the_reset_clears_whatever_stands_in_the_way_of_a_protected_path():
    protection = protection_for([], ["tests/test_a.py"])
    plan = reset_plan(
        protection,
        entries={
            "tests": "link",  # the folder swapped for a link
            "conftest.py": "file",
            "pkg": "dir",
            "pkg/conftest.py": "dir",  # a folder where a file goes
            "pkg/conftest.py/x": "file",
            "calc.py": "file",
        },
        base=["tests/test_a.py", "pkg/conftest.py", "calc.py"],
        targets=["tests/test_a.py"],
    )
    assert plan.remove == ["conftest.py", "pkg/conftest.py", "tests"]
    assert plan.restore == ["pkg/conftest.py", "tests/test_a.py"]
    assert plan.folders == ["pkg/conftest.py"] and plan.parents == ["pkg"]
