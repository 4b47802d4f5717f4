"""Fuzzed readers of patches and predictions from outside: a recorded diff as the pages split,
index, clip and render it, two attempts' parts set against each other, a pool step's action (its
patch parsed), and a SWE-bench predictions file with its dataset. A diff that cannot be read
raises unidiff.UnidiffParseError (the pages show the raw text then), an action InvalidRequest
naming its field, a prediction is refused with its line: nothing else. See tests/fuzz_inputs.py.
"""

from __future__ import annotations

import contextlib
import io

import unidiff
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attempts.core import diffview
from attempts.dispatch.errors import InvalidRequest, TooLarge
from attempts.services import predictions
from attempts.services.pools import parse_action
from attempts.web import interdiff
from tests.fuzz_inputs import DEEP_JSON, LONG_INTEGER, examples, json_bytes, json_values

EXAMPLES = examples(75)

# Lines a git diff is made of, and some that only look like them, put together in any order.
_DIFF_LINES = [
    "diff --git a/x.py b/x.py",
    "diff --git a/x b/y",
    "diff --git ",
    "--- a/x.py",
    "+++ b/x.py",
    "--- /dev/null",
    "+++ /dev/null",
    '--- "a/caf\\303\\251 \\"q\\".txt"',
    '+++ "b/\\777\\x"',
    "@@ -1,2 +1,2 @@",
    "@@ -1 +1 @@ def f():",
    "@@ -0,0 +1,3 @@",
    "@@ -5,1 +0,0 @@",
    "@@ -99999999999999999999 +1,99999999999999999999 @@",
    " context",
    "-old line",
    "+new line",
    "+",
    "-",
    "\\ No newline at end of file",
    "new file mode 100644",
    "deleted file mode 100644",
    "old mode 100644",
    "new mode 100755",
    "rename from a",
    "rename to b",
    "similarity index 90%",
    "index 0000000..1111111 100644",
    "Binary files a/x and b/x differ",
    "GIT binary patch",
    "literal 0",
    # modes, renames, links and binary blocks as git writes them, and ones it never would
    "new file mode 120000",
    "deleted file mode 120000",
    "new file mode 100755",
    "old mode 120000",
    "new mode 160000",
    "index 0000000..1111111 120000",
    "similarity index 100%",
    "similarity index 999%",
    "literal 99999999999999999999",
    "delta 209",
    "delta 7",
    "zcmV;?051Qy7l0YCxC?({>K5m?qW$Qh-hj!{z|h!xLSpjgxk&)<7I6_}I0M$2t->@^",
    "OcmZpW+#$YU2R8r<oC4ec",
    "HcmV?d00001",
    "zzzzzzzzzzzzz",
    "+" + "t" * 400,
    "",
]
diff_texts = st.one_of(
    st.lists(st.one_of(st.sampled_from(_DIFF_LINES), st.text(max_size=20)), max_size=30).map(
        "\n".join
    ),
    st.text(max_size=200),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(diff_texts)
def test_a_diff_is_files_or_a_parse_error(text):
    try:
        files = diffview.split_files(text)
    except unidiff.UnidiffParseError:
        files = None
    try:
        indexed = diffview.index_patch(io.BytesIO(text.encode("utf-8", "surrogatepass")))
    except unidiff.UnidiffParseError:
        indexed = None
    if files is not None and indexed is not None:
        assert [f.path for f in files] == [f.path for f in indexed]
    if files is not None and indexed is not None:
        # What a header says (modes, rename, link target, binary sizes) is the same both ways.
        assert [(f.status, f.notes) for f in files] == [(f.status, f.notes) for f in indexed]
    for f in files or []:
        assert f.added >= 0 and f.removed >= 0 and f.status in diffview._STATUS_LABELS
        assert all(isinstance(note, str) for note in f.notes)
        assert isinstance(f.marks, str) and isinstance(f.no_lines_note, str)
        assert len(f.old_target) <= diffview.MAX_TARGET_CHARS + 1
        with contextlib.suppress(unidiff.UnidiffParseError):
            diffview.rows_html(diffview.side_by_side(f))


@settings(max_examples=EXAMPLES, deadline=None)
@given(diff_texts)
def test_a_binary_patchs_sizes_are_numbers_or_unknown(text):
    for size in diffview.binary_sizes(text):
        assert size is None or size >= 0


@settings(max_examples=EXAMPLES, deadline=None)
@given(diff_texts, st.integers(1, 6), st.integers(1, 12))
@example("", 5000, 10_000)  # was IndexError: a text with no file in it
@example("¢", 3, 5)
def test_one_files_view_is_rows_or_a_parse_error(text, max_lines, max_chars):
    shown, _clipped = diffview.clip_file_text(text, max_lines, max_chars)
    for candidate in (text, shown):
        f = diffview.DiffFile(0, "x.py", "x.py", "modified", 0, 0, 0, candidate)
        with contextlib.suppress(unidiff.UnidiffParseError):
            diffview.rows_html(diffview.side_by_side(f))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.one_of(st.none(), diff_texts), st.one_of(st.none(), diff_texts), st.sampled_from("ab "))
@example("¢", "", " ")  # was IndexError out of final_diff
def test_two_attempts_parts_are_a_diff_or_a_parse_error(a_text, b_text, absent):
    try:
        text = interdiff.final_diff("x.py", a_text, b_text, absent=absent.strip())
    except unidiff.UnidiffParseError:
        return
    assert isinstance(text, str)


actions = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "patch": st.one_of(diff_texts, json_values),
            "write": st.one_of(
                json_values, st.dictionaries(st.text(max_size=12), st.text(max_size=12))
            ),
            "run": st.one_of(json_values, st.lists(st.text(max_size=5), max_size=3)),
            "timeout": st.one_of(json_values, st.floats(allow_nan=True, allow_infinity=True)),
            "submit": json_values,
            "other": json_values,
        },
    ),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(actions)
def test_a_pool_action_is_a_step_or_invalid_request(action):
    try:
        parse_action(action, where="actions[0]")
    except (InvalidRequest, TooLarge) as exc:
        assert exc.detail and str(exc.detail).startswith("actions[0]")


prediction_entries = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            predictions.KEY_ID: st.one_of(st.text(max_size=10), json_values),
            predictions.KEY_MODEL: st.one_of(st.text(max_size=10), json_values),
            predictions.KEY_PATCH: st.one_of(diff_texts, json_values),
        },
    ),
)
prediction_files = st.one_of(
    st.lists(prediction_entries, max_size=4),
    st.lists(st.one_of(prediction_entries.map(json_bytes), st.binary(max_size=40)), max_size=4).map(
        lambda lines: b"\n".join(lines).decode("utf-8", "replace")
    ),
    prediction_entries.map(lambda entry: json_bytes(entry).decode()),
    st.dictionaries(st.text(max_size=8), prediction_entries, max_size=3).map(
        lambda keyed: json_bytes(keyed).decode()
    ),
    st.text(max_size=100),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(prediction_files)
@example(LONG_INTEGER.decode())  # was ValueError out of the reading of the file
@example("{" + LONG_INTEGER.decode())
@example("[" + LONG_INTEGER.decode() + "]\n" + DEEP_JSON.decode())
@example('[{"instance_id": "a\\u0000", "model_name_or_path": "m", "model_patch": ""}]')
def test_predictions_are_read_or_refused_by_line(value):
    accepted, refused = predictions.parse_predictions(value)
    for p in accepted:
        assert p.instance_id.strip() and "\0" not in p.instance_id and "\0" not in p.model
        assert p.patch is None or isinstance(p.patch, str)
    for r in refused:
        assert r.reason and r.line >= 1
    rows, unreadable = predictions.parse_dataset(value)
    assert all("\0" not in key for key in rows) and all(n >= 1 for n in unreadable)
    for row in rows.values():
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            assert all(isinstance(t, str) for t in predictions._tests(row, key))


def test_a_dataset_rows_test_list_too_long_or_deep_is_no_test():
    for bad in (LONG_INTEGER.decode(), DEEP_JSON.decode()):  # were ValueError, RecursionError
        assert predictions._tests({"FAIL_TO_PASS": bad}, "FAIL_TO_PASS") == []
