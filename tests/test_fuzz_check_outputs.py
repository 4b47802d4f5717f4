"""Fuzzed readers of what a check writes (the code under test can write any of it): reward.txt
and reward.json under Boltz's and Harbor's rules, JUnit XML reports, the pytest witness stream,
and score_check over a whole output folder. Each gives a result or the project's own error
(ScoringError, HarborVerifierError); a score is always a finite number or none. See
tests/fuzz_inputs.py.
"""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from attempts.run import scoring
from attempts.run.scoring import (
    REWARD_JSON,
    REWARD_TXT,
    HarborVerifierError,
    ScoringError,
    WitnessRun,
    parse_junit,
    parse_reward_json,
    parse_reward_txt,
    parse_witness_stream,
    score_check,
)
from tests.fuzz_inputs import (
    BILLION_LAUGHS,
    DEEP_JSON,
    DEEP_OBJECT,
    EXTERNAL_ENTITY,
    LONG_INTEGER,
    bytes_like,
    examples,
    json_bytes,
    json_values,
    scalars,
)

EXAMPLES = examples(60)

reward_json = bytes_like(
    json_values.map(json_bytes),
    st.fixed_dictionaries(
        {}, optional={"reward": json_values, "score": json_values, "passed": json_values}
    ).map(json_bytes),
)


def _finite_score(score: scoring.Score) -> None:
    assert score.score is None or math.isfinite(score.score), score
    assert isinstance(score.passed, bool)
    for case in score.tests:
        assert math.isfinite(case.duration) and case.outcome in scoring._WORSE


@settings(max_examples=EXAMPLES, deadline=None)
@given(reward_json)
@example(DEEP_JSON)  # was RecursionError
@example(DEEP_OBJECT)  # was RecursionError
@example(LONG_INTEGER)  # was ValueError from int(), not a JSONDecodeError
def test_reward_json_is_a_score_or_a_scoring_error(data):
    try:
        score = parse_reward_json(data)
    except ScoringError as exc:
        assert str(exc).startswith(REWARD_JSON)
        return
    _finite_score(score)


@settings(max_examples=EXAMPLES, deadline=None)
@given(bytes_like(st.floats().map(lambda f: repr(f).encode())))
def test_reward_txt_is_a_score_or_a_scoring_error(data):
    try:
        score = parse_reward_txt(data)
    except ScoringError as exc:
        assert str(exc).startswith(REWARD_TXT)
        return
    _finite_score(score)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.dictionaries(st.sampled_from([REWARD_JSON, REWARD_TXT]), reward_json), st.booleans())
@example({REWARD_JSON: DEEP_JSON}, False)  # was RecursionError out of score_harbor
@example({REWARD_JSON: b'{"reward": ' + LONG_INTEGER + b"}"}, False)
def test_harbor_rewards_are_a_score_or_a_verifier_error(files, timed_out):
    score = score_check(
        exit_code=0, timed_out=timed_out, files=files, reward_file=True, rules="harbor"
    )
    _finite_score(score)
    if not score.passed:
        assert score.summary  # why, in words
    try:
        rewards = scoring._harbor_reward_json(files.get(REWARD_JSON, b"{}"), [])
    except HarborVerifierError as exc:
        assert str(exc).startswith(scoring.HARBOR_VERIFIER_DIR)
    else:
        assert all(math.isfinite(v) for v in rewards.values())


_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_case = st.builds(
    lambda name, classname, time, child: (
        f'<testcase name="{name}" classname="{classname}" time="{time}">{child}</testcase>'
    ),
    _names.map(lambda s: s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")),
    _names.map(lambda s: s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")),
    st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "", "1e999", "x"]), st.floats()),
    st.sampled_from(["", "<failure/>", '<error message="m"/>', "<skipped>s</skipped>", "<x/>"]),
)
junit_reports = st.lists(_case, max_size=5).map(
    lambda cases: (
        '<?xml version="1.0"?><testsuites><testsuite>{}</testsuite></testsuites>'.format(
            "".join(cases)
        )
    ).encode("utf-8", "surrogatepass")
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(bytes_like(junit_reports))
@example(BILLION_LAUGHS)  # refused, never expanded, whatever expat's own limits
@example(EXTERNAL_ENTITY)  # refused, never read
@example(b'<?xml version="1.0" encoding="no-such"?><testsuite/>')  # was LookupError
@example(b'<testsuite><testcase name="t" time="nan"/></testsuite>')  # was a NaN duration
@example(b"<a>" * 3000 + b"</a>" * 3000)
def test_junit_is_test_cases_or_a_scoring_error(data):
    try:
        cases = parse_junit(data)
    except ScoringError as exc:
        assert "JUnit XML" in str(exc)
        return
    for case in cases:
        assert isinstance(case, scoring.TestCase) and case.outcome in scoring._WORSE
        assert math.isfinite(case.duration) and case.duration >= 0
        assert len(case.name) <= 1000 and len(case.message) <= 2000


def test_an_entity_bomb_is_refused_before_any_entity_is_read():
    for bomb in (BILLION_LAUGHS, EXTERNAL_ENTITY):
        try:
            parse_junit(bomb)
        except ScoringError as exc:
            assert "DOCTYPE is refused" in str(exc)
        else:
            raise AssertionError("a DOCTYPE was read")


# The plugin's fields, each of any type (scalars mostly: cheaper to make than nested values).
_witness_record = st.fixed_dictionaries(
    {"run": scalars, "event": st.sampled_from(["start", "test", "collect", "collected", "end"])},
    optional={
        "id": st.one_of(scalars, json_values),
        "outcome": st.one_of(st.sampled_from(["passed", "failed", "error", "skipped"]), scalars),
        "count": scalars,
        "exitstatus": scalars,
        "stack": st.one_of(scalars, st.lists(st.text(max_size=10), max_size=3)),
        "collect_only": scalars,
    },
)
witness_streams = st.lists(
    st.one_of(_witness_record.map(json_bytes), bytes_like()), max_size=8
).map(b"\n".join)


@settings(max_examples=EXAMPLES, deadline=None)
@given(witness_streams, st.booleans())
@example(DEEP_JSON, True)  # was RecursionError: the check ended as an infrastructure error
def test_witness_stream_is_runs_never_an_error(data, complete):
    runs, problem = parse_witness_stream(data, complete=complete, blame=lambda p: "agent" in p)
    assert isinstance(problem, str) and (problem == "") == complete
    for run in runs:
        assert isinstance(run, WitnessRun) and isinstance(run.finished, bool)
        assert run.exitstatus is None or isinstance(run.exitstatus, int)


output_folders = st.dictionaries(
    st.sampled_from([REWARD_JSON, REWARD_TXT, "junit.xml", "other.xml", "sub/x.xml"]),
    bytes_like(junit_reports, json_values.map(json_bytes)),
    max_size=4,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    output_folders,
    st.one_of(st.none(), st.integers(-(2**31), 2**31)),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), st.lists(st.text(max_size=20), max_size=3)),
    st.sampled_from(["boltz", "harbor"]),
    witness_streams,
)
def test_a_whole_output_folder_is_scored_never_an_error(
    files, exit_code, timed_out, reward_file, required, rules, witness
):
    runs, _ = parse_witness_stream(witness)
    score = score_check(
        exit_code=exit_code,
        timed_out=timed_out,
        files=files,
        required=required,
        reward_file=reward_file,
        witness=runs,
        rules=rules,
    )
    _finite_score(score)
    assert score.source in ("reward_file", "junit", "exit_code")
