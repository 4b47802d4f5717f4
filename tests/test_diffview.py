"""The side-by-side diff: file statuses, paired lines, intra-line marks, escaping."""

import io
import os
import random
from types import SimpleNamespace

import pytest
import unidiff

from attempts.core.diffview import (
    binary_sizes,
    index_patch,
    plan_page,
    render_line,
    side_by_side,
    split_files,
)
from attempts.core.protected import Protection
from attempts.run.changes import AgentTree, checked_tree, record
from attempts.taskio.repos import git
from attempts.web import compare
from tests.test_tamper import commit

DIFF = """diff --git a/calc.py b/calc.py
index 8e0d4ff..6119934 100644
--- a/calc.py
+++ b/calc.py
@@ -1,3 +1,4 @@
 def add(a, b):
-    return a - b
+    return a + b
+    # done
 x = 1
diff --git a/new.txt b/new.txt
new file mode 100644
index 0000000..3b18e51
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 3b18e51..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-hello
diff --git a/old.py b/new.py
similarity index 100%
rename from old.py
rename to new.py
diff --git a/blob.bin b/blob.bin
new file mode 100644
index 0000000..1234567
GIT binary patch
literal 3
KcmZQzWMT#Y01f~L

literal 0
HcmV?d00001

"""


def test_files_have_status_and_counts():
    files = split_files(DIFF)
    assert [(f.path, f.status, f.added, f.removed) for f in files] == [
        ("calc.py", "modified", 2, 1),
        ("new.txt", "added", 1, 0),
        ("gone.txt", "deleted", 0, 1),
        ("new.py", "renamed", 0, 0),
        ("blob.bin", "added", 0, 0),
    ]
    assert files[3].old_path == "old.py"
    assert files[4].binary and files[4].notes == ["Binary file not shown (3 bytes)"]


def test_rows_pair_old_and_new_with_line_numbers_and_marks():
    rows = side_by_side(split_files(DIFF)[0])
    assert rows[0].kind == "hunk" and rows[0].header.startswith("@@ -1,3 +1,4 @@")
    changed = [r for r in rows if r.kind == "change"]
    assert (changed[0].old_no, changed[0].new_no) == (2, 2)
    assert "<mark>" in changed[0].old_html and "<mark>" in changed[0].new_html
    assert changed[1].old_html is None and changed[1].new_no == 3  # an added line alone
    context = [r for r in rows if r.kind == "context"]
    assert [(r.old_no, r.new_no) for r in context] == [(1, 1), (3, 4)]


def test_lines_are_escaped_and_coloured():
    html = render_line('x = "<script>alert(1)</script>"', "a.py")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<span class="s2">' in html  # a Python string, coloured
    marked = render_line("<b>", "a.txt", [(0, 3)])
    assert marked == "<mark>&lt;b&gt;</mark>"


def test_text_that_is_not_a_diff_is_refused_for_a_plain_view():
    with pytest.raises(unidiff.UnidiffParseError):
        split_files("+<script>alert(1)</script>\n")
    assert split_files("") == []


def test_large_files_and_the_page_budget_load_on_request():
    big = "diff --git a/big.txt b/big.txt\n--- a/big.txt\n+++ b/big.txt\n@@ -0,0 +1,2000 @@\n"
    big += "".join(f"+line {i}\n" for i in range(2000))
    small = "".join(
        f"diff --git a/f{i}.txt b/f{i}.txt\n--- a/f{i}.txt\n+++ b/f{i}.txt\n@@ -1 +1 @@\n-a\n+b\n"
        for i in range(3)
    )
    plan = plan_page(split_files(big + small), budget=16)
    assert [inline for _, inline in plan] == [False, True, True, False]


def test_quoted_paths_are_unquoted():
    diff = (
        'diff --git "a/caf\\303\\251 \\"x\\".txt" "b/caf\\303\\251 \\"x\\".txt"\n'
        "new file mode 100644\nindex 0000000..1\n--- /dev/null\n"
        '+++ "b/caf\\303\\251 \\"x\\".txt"\n@@ -0,0 +1 @@\n+hi\n'
    )
    (f,) = split_files(diff)
    assert f.path == 'café "x".txt' and f.status == "added"


# --- what git records: modes, renames, links, binary files ----------------------------------
def _lines(tag: str) -> str:
    return "".join(f"{tag} line {i}: some words of the file\n" for i in range(10))


@pytest.fixture
def recorded(tmp_path):
    """The patch Boltz records (changes.record, real git) for an agent that changes a mode with
    and without its content, renames with and without a change, makes, retargets and replaces
    links, and adds, changes and deletes binary files. (patch text, base repo, base commit)."""
    blobs = random.Random(24)
    repo = tmp_path / "base"
    repo.mkdir()
    (repo / "run.sh").write_text("echo hi\n")
    (repo / "tool.sh").write_text("echo 1\n")
    (repo / "old.py").write_text(_lines("old"))
    (repo / "util.py").write_text(_lines("util"))
    os.symlink("run.sh", repo / "link")
    os.symlink("old.py", repo / "tofile")
    (repo / "blob.bin").write_bytes(blobs.randbytes(3000))
    (repo / "gone.bin").write_bytes(blobs.randbytes(500))
    git("init", "-q", "-b", "main", cwd=repo)
    base_commit = commit(repo, "base")

    root = tmp_path / "agent" / "tree"
    root.mkdir(parents=True)
    (root / "run.sh").write_text("echo hi\n")
    (root / "tool.sh").write_text("echo 2\n")
    os.chmod(root / "run.sh", 0o755)
    os.chmod(root / "tool.sh", 0o755)
    (root / "moved.py").write_text(_lines("old"))  # git mv old.py moved.py
    (root / "helpers.py").write_text(_lines("util").replace("line 4", "line four"))
    os.symlink("tool.sh", root / "link")  # retargeted
    (root / "tofile").write_text("a file now\n")  # the link replaced by a file
    os.symlink("target/nowhere", root / "newlink")  # a new, dangling link
    (root / "blob.bin").write_bytes((repo / "blob.bin").read_bytes() + blobs.randbytes(200))
    (root / "add.bin").write_bytes(b"\0" + blobs.randbytes(999))
    paths = {str(p.relative_to(root)) for p in root.iterdir()}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    changes = record(
        AgentTree(root=root, paths=paths),
        base_git=repo / ".git",
        base_commit=base_commit,
        scratch=scratch,
        protection=Protection(patterns=()),
        max_patch_bytes=1 << 20,
    )
    return changes.patch.read_text(), repo, base_commit, scratch


def test_the_recorded_patch_says_every_mode_rename_link_and_binary_file(recorded):
    patch, repo, base_commit, scratch = recorded
    files = split_files(patch)
    seen = {(f.path, f.status): f for f in files}
    assert {(f.path, f.status): f.notes for f in files} == {
        ("add.bin", "added"): ["Binary file not shown (1000 bytes)"],
        ("blob.bin", "modified"): ["Binary file not shown (2.9 KB → 3.1 KB)"],
        ("gone.bin", "deleted"): ["Binary file not shown (500 bytes)"],
        ("helpers.py", "renamed"): [
            f"renamed from util.py, {seen['helpers.py', 'renamed'].similarity}% similar"
        ],
        ("link", "modified"): ["symlink → tool.sh (was → run.sh)"],
        ("moved.py", "renamed"): ["renamed from old.py, content unchanged"],
        ("newlink", "added"): ["symlink → target/nowhere"],
        ("run.sh", "mode"): ["mode 100644 → 100755"],
        ("tofile", "deleted"): ["symlink → old.py"],
        ("tofile", "added"): [],
        ("tool.sh", "modified"): ["mode 100644 → 100755"],
    }
    assert 50 <= seen["helpers.py", "renamed"].similarity < 100
    # The list says what changed, not only "modified +1 -1".
    assert 'class="badge file-mode">mode<' in seen["tool.sh", "modified"].marks
    assert "+1" in seen["tool.sh", "modified"].marks
    assert "binary" in seen["add.bin", "added"].marks and "+0" not in seen["add.bin", "added"].marks
    assert "symlink" in seen["link", "modified"].marks
    # Files without lines say why instead of an empty table, and are not rendered as rows.
    assert seen["moved.py", "renamed"].no_lines_note == "File renamed without changes."
    assert seen["run.sh", "mode"].no_lines_note.startswith("File mode changed")
    assert seen["blob.bin", "modified"].no_lines_note.startswith("Binary file not shown")
    assert seen["tool.sh", "modified"].no_lines_note == ""
    assert [f.path for f, inline in plan_page(files) if inline] == [
        "helpers.py",
        "link",
        "newlink",
        "tofile",
        "tofile",
        "tool.sh",
    ]
    # A patch read from storage (indexed line by line) says the same.
    indexed = index_patch(io.BytesIO(patch.encode()))
    assert [(f.path, f.status, f.notes, f.marks) for f in indexed] == [
        (f.path, f.status, f.notes, f.marks) for f in files
    ]
    # The patch still applies to the base and gives the agent's files, modes and links.
    folder, listing = checked_tree(
        base_git=repo / ".git",
        base_commit=base_commit,
        patch=_written(scratch / "again.patch", patch),
        scratch=scratch,
    )
    assert listing["run.sh"].startswith("100755 ") and listing["tool.sh"].startswith("100755 ")
    assert os.readlink(folder / "link") == "tool.sh" and os.readlink(folder / "newlink")
    assert (
        not (folder / "tofile").is_symlink() and (folder / "tofile").read_text() == "a file now\n"
    )
    assert (folder / "add.bin").stat().st_size == 1000 and not (folder / "gone.bin").exists()
    assert (folder / "blob.bin").stat().st_size == 3200
    assert not (folder / "old.py").exists() and (folder / "moved.py").read_text() == _lines("old")


def _written(path, text: str):
    path.write_text(text)
    return path


def test_the_compare_view_sets_each_kind_against_an_untouched_side(recorded):
    patch, *_ = recorded

    def side(number: int, text: str) -> compare.Side:
        attempt = SimpleNamespace(number=number, diff_bytes=len(text), diff_truncated=False)
        made = compare.Side(attempt)
        for f in split_files(text):
            if f.path in made.files:
                made.retyped.add(f.path)
            made.files[f.path] = f
        return made

    a, b = side(1, patch), side(2, "")
    said = {path: compare.final_files(a, b, path) for path in a.files}
    assert said["blob.bin"] == {"note": "binary: the final files differ"}
    assert said["tofile"]["note"].endswith("in #1")
    assert "renamed from old.py in #1" in said["moved.py"]["note"]
    # Its content (echo 1 -> echo 2) and its mode both differ; a mode alone is no "same".
    assert said["tool.sh"]["diff"].added == 1
    assert said["tool.sh"]["note"] == "mode 100755 in #1; mode as the base in #2"
    assert said["run.sh"] == {"note": "mode 100755 in #1; mode as the base in #2"}
    assert said["link"]["diff"].added == 1  # a link's target, as a line
    assert compare.final_files(a, side(2, patch), "run.sh") == {"same": True}


def test_binary_sizes_come_from_literal_blocks_and_delta_headers():
    # From real `git diff --binary`: a 3000-byte file grown by 200 bytes (a delta each way),
    # then a deleted 500-byte file (literal 0, then the old file).
    delta = (
        "GIT binary patch\ndelta 209\n"
        "zcmV;?051Qy7l0YCxC?({>K5m?qW$Qh-hj!{z|h!xLSpjgxk&)<7I6_}I0M$2t->@^\n\n"
        "delta 7\nOcmZpW+#$YU2R8r<oC4ec\n\n"
    )
    assert binary_sizes(delta) == (3000, 3200)
    assert binary_sizes("GIT binary patch\nliteral 0\nHcmV?d00001\n\nliteral 500\nzcm\n") == (
        500,
        0,
    )
    assert binary_sizes("GIT binary patch\ndelta 5\nnot base85 at all\n") == (None, None)
    assert binary_sizes("") == (None, None)


def test_a_link_target_and_a_binary_note_are_escaped_on_the_page():
    diff = (
        "diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
        "+++ b/l\n@@ -0,0 +1 @@\n+<img src=x onerror=alert(1)>\n\\ No newline at end of file\n"
    )
    (f,) = split_files(diff)
    assert f.notes == ["symlink → <img src=x onerror=alert(1)>"]  # plain text, for templates
    from django.template.loader import render_to_string

    html = render_to_string("attempts/_file_notes.html", {"file": f})
    assert "<img" not in html and "&lt;img src=x" in html
