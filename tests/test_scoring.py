"""Scoring precedence: reward file, then JUnit XML, then exit code."""

import pytest

from attempts.scoring import parse_junit, score_check

JUNIT = b"""<?xml version="1.0"?>
<testsuites><testsuite name="pytest" tests="4">
  <testcase classname="tests.test_a" name="test_ok" time="0.01"/>
  <testcase classname="tests.test_a" name="test_bad" time="0.02"><failure message="assert 1 == 2">trace</failure></testcase>
  <testcase classname="tests.test_a" name="test_err"><error message="boom"/></testcase>
  <testcase classname="tests.test_a" name="test_skip"><skipped message="later"/></testcase>
</testsuite></testsuites>"""


def test_exit_code_decides_when_nothing_else_is_written():
    assert score_check(exit_code=0, timed_out=False, files={}).passed is True
    failed = score_check(exit_code=1, timed_out=False, files={})
    assert (failed.passed, failed.score, failed.source) == (False, 0.0, "exit_code")


def test_junit_scores_the_share_of_tests_that_ran_and_passed():
    result = score_check(exit_code=1, timed_out=False, files={"junit.xml": JUNIT})
    assert result.source == "junit"
    assert result.score == pytest.approx(1 / 3)
    assert result.passed is False
    assert [t.outcome for t in result.tests] == ["passed", "failed", "error", "skipped"]
    assert result.tests[1].name == "tests.test_a::test_bad"
    assert result.tests[1].message == "assert 1 == 2"


def test_reward_file_beats_junit_and_exit_code():
    files = {"reward.txt": b"0.75\n", "junit.xml": JUNIT}
    result = score_check(exit_code=0, timed_out=False, files=files)
    assert (result.source, result.score, result.passed) == ("reward_file", 0.75, False)
    assert len(result.tests) == 4  # per-test outcomes are still kept


def test_reward_json_may_say_passed():
    files = {"reward.json": b'{"reward": 0.5, "passed": true}'}
    result = score_check(exit_code=1, timed_out=False, files=files)
    assert (result.score, result.passed) == (0.5, True)


@pytest.mark.parametrize("content", [b"nan", b"lots", b""])
def test_an_unreadable_reward_file_is_noted_and_the_next_rule_applies(content):
    result = score_check(exit_code=0, timed_out=False, files={"reward.txt": content})
    assert result.source == "exit_code" and result.passed
    assert result.notes and "reward.txt" in result.notes[0]


def test_broken_junit_falls_back_to_the_exit_code():
    result = score_check(exit_code=0, timed_out=False, files={"junit.xml": b"<testsuite"})
    assert result.source == "exit_code" and result.passed
    assert "could not be parsed" in result.notes[0]


def test_a_timed_out_check_fails_whatever_it_wrote():
    result = score_check(exit_code=0, timed_out=True, files={"reward.txt": b"1"})
    assert result.passed is False and result.notes == ["the check timed out"]


def test_parse_junit_reads_pytest_reports():
    assert len(parse_junit(JUNIT)) == 4


def test_node_ids_map_to_junit_names():
    from attempts.scoring import junit_name

    assert junit_name("tests/test_a.py::test_ok") == "tests.test_a::test_ok"
    assert junit_name("tests/test_a.py::TestX::test_y[1-2]") == "tests.test_a.TestX::test_y[1-2]"


def test_required_tests_must_all_pass_and_missing_ones_count_as_failed():
    files = {"junit.xml": JUNIT}
    ok = score_check(
        exit_code=1, timed_out=False, files=files, required=["tests/test_a.py::test_ok"]
    )
    assert (ok.passed, ok.score) == (True, 1.0)
    broken = score_check(
        exit_code=1,
        timed_out=False,
        files=files,
        required=["tests/test_a.py::test_ok", "tests/test_a.py::test_bad"],
    )
    assert (broken.passed, broken.score) == (False, 0.5)
    missing = score_check(
        exit_code=0,
        timed_out=False,
        files=files,
        required=["tests/test_a.py::test_ok", "tests/test_a.py::test_gone"],
    )
    assert missing.passed is False and "did not run" in missing.notes[0]
