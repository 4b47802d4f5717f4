"""The side-by-side diff: file statuses, paired lines, intra-line marks, escaping."""

import pytest
import unidiff

from attempts.core.diffview import plan_page, render_line, side_by_side, split_files

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
        ("blob.bin", "binary", 0, 0),
    ]
    assert files[3].old_path == "old.py"


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
