"""Scoring a check, by precedence: reward file -> JUnit XML -> exit code. Pure logic."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

REWARD_TXT = "reward.txt"
REWARD_JSON = "reward.json"


@dataclass
class TestCase:
    name: str
    outcome: str  # passed | failed | error | skipped
    duration: float = 0.0
    message: str = ""


@dataclass
class Score:
    passed: bool
    score: float
    source: str  # reward_file | junit | exit_code
    reward: dict | None = None
    tests: list[TestCase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def tests_passed(self) -> int:
        return sum(1 for t in self.tests if t.outcome == "passed")

    @property
    def tests_counted(self) -> int:
        return sum(1 for t in self.tests if t.outcome != "skipped")


class ScoringError(ValueError):
    """A reward file or JUnit report that cannot be read."""


def _finite(value, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ScoringError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ScoringError(f"{where}: {value!r} is not a finite number")
    return number


def parse_reward_txt(data: bytes) -> Score:
    text = data.decode("utf-8", errors="replace").strip()
    score = _finite(text.split()[0] if text else "", REWARD_TXT)
    return Score(passed=score >= 1.0, score=score, source="reward_file", reward={"reward": score})


def parse_reward_json(data: bytes) -> Score:
    """`{"reward": 0.5}` or `{"score": ..., "passed": ...}` or a bare number."""
    try:
        payload = json.loads(data.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        raise ScoringError(f"{REWARD_JSON}: not JSON ({exc})") from None
    if isinstance(payload, int | float) and not isinstance(payload, bool):
        payload = {"reward": payload}
    if not isinstance(payload, dict):
        raise ScoringError(f"{REWARD_JSON}: expected an object or a number")
    key = next((k for k in ("reward", "score") if k in payload), None)
    if key is None:
        raise ScoringError(f"{REWARD_JSON}: needs a 'reward' (or 'score') number")
    score = _finite(payload[key], f"{REWARD_JSON} {key}")
    passed = payload.get("passed")
    return Score(
        passed=bool(passed) if isinstance(passed, bool) else score >= 1.0,
        score=score,
        source="reward_file",
        reward=payload,
    )


def parse_junit(data: bytes) -> list[TestCase]:
    """Test cases of a JUnit XML report (pytest, JUnit, most runners)."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ScoringError(f"JUnit XML could not be parsed: {exc}") from None
    cases = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        full = f"{classname}::{name}" if classname else name
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or child.text or "")[:2000]
                break
        try:
            duration = float(case.get("time") or 0)
        except ValueError:
            duration = 0.0
        cases.append(TestCase(full[:1000], outcome, duration, message))
    return cases


def junit_name(test_id: str) -> str:
    """A pytest node id as the name Boltz gives the JUnit test case:
    'tests/test_x.py::TestA::test_b[1]' -> 'tests.test_x.TestA::test_b[1]'."""
    if "::" not in test_id:
        return test_id
    path, *rest = test_id.split("::")
    module = path[:-3] if path.endswith(".py") else path
    module = module.replace("/", ".")
    *classes, name = rest
    return "::".join([".".join([module, *classes]), name])


def score_required(tests: list[TestCase], required: list[str], notes: list[str]) -> Score:
    """Passed exactly when every required test passed (SWE-bench: FAIL_TO_PASS and
    PASS_TO_PASS); a required test that did not run counts as not passed."""
    outcomes = {t.name: t.outcome for t in tests}
    wanted = [junit_name(t) for t in required]
    missing = [t for t in wanted if t not in outcomes]
    if missing:
        notes.append(f"{len(missing)} required test(s) did not run: {', '.join(missing[:5])}")
    passed = sum(1 for t in wanted if outcomes.get(t) == "passed")
    return Score(passed == len(wanted), passed / len(wanted), "junit", tests=tests, notes=notes)


def score_check(
    *,
    exit_code: int | None,
    timed_out: bool,
    files: dict[str, bytes],
    required: list[str] | None = None,
) -> Score:
    """Score a finished check from its exit code and the files it wrote to its output folder.
    With `required` test ids, the JUnit report decides: all of them must pass."""
    notes: list[str] = []
    if timed_out:
        return Score(False, 0.0, "exit_code", notes=["the check timed out"])
    junit = junit_files(files)
    if required:
        if not junit:
            notes.append("the check wrote no JUnit report, so no required test passed")
        return score_required(_collect_tests(junit, notes), required, notes)
    for name, parse in ((REWARD_JSON, parse_reward_json), (REWARD_TXT, parse_reward_txt)):
        if name in files:
            try:
                result = parse(files[name])
            except ScoringError as exc:
                notes.append(f"ignored {exc}")
                continue
            result.notes = notes
            if junit:
                result.tests = _collect_tests(junit, notes)
            return result
    if junit:
        junit_score = Score(False, 0.0, "junit", tests=_collect_tests(junit, notes), notes=notes)
        if junit_score.tests_counted:
            junit_score.score = junit_score.tests_passed / junit_score.tests_counted
            junit_score.passed = junit_score.tests_passed == junit_score.tests_counted
            return junit_score
        notes.append("the JUnit report holds no test that ran; scored by exit code")
    passed = exit_code == 0
    return Score(passed, 1.0 if passed else 0.0, "exit_code", notes=notes)


def junit_files(files: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """The check's JUnit reports (*.xml in its output folder), in name order."""
    return sorted((n, d) for n, d in files.items() if n.endswith(".xml"))


def _collect_tests(junit: list[tuple[str, bytes]], notes: list[str]) -> list[TestCase]:
    tests: list[TestCase] = []
    for name, data in junit:
        try:
            tests.extend(parse_junit(data))
        except ScoringError as exc:
            notes.append(f"{name}: {exc}")
    return tests
