"""docs/RELIABILITY.md, regenerated: runs every hostile agent, fault, access case and fuzz target
listed below on the real services, once, and writes each with the command that runs it, what
its tests found (passed of run, time) and the figures they recorded.

    .venv/bin/python scripts/reliability.py [--write docs/RELIABILITY.md]   (make reliability)
    .venv/bin/python scripts/reliability.py --from test-results --write docs/RELIABILITY.md

`--from`: read the reports `make test` (junit.xml) and `make test-runsc` (junit-runsc.xml)
wrote in that folder instead of running the tests again.

A test records a figure with the `figure` fixture (tests/conftest.py): "54 hostile URLs refused,
0 delivered". Nothing here is written by hand but the case list: a figure is what a test
measured in this run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    section: str
    what: str
    file: str
    names: tuple[str, ...] = ()  # substrings of test names; none: every test of the file

    @property
    def command(self) -> str:
        selection = f" -k '{' or '.join(self.names)}'" if self.names else ""
        return f"pytest {self.file}{selection}"

    def holds(self, testcase: ET.Element) -> bool:
        module = self.file.removesuffix(".py").replace("/", ".")
        return testcase.get("classname", "").startswith(module) and (
            not self.names or any(n in testcase.get("name", "") for n in self.names)
        )


CASES = [
    # Bounded resources
    Case(
        "Bounded resources",
        "disk: a sandbox writing 200 MB into /tmp, /workspace and /var/tmp "
        "under a 64 MB limit; an honest agent under the same limit; an in-place check on a "
        "disk the agent left full",
        "tests/test_disk_limits.py",
        ("disk",),
    ),
    Case(
        "Bounded resources",
        "raw output kept within the attempt's budget across its commands",
        "tests/test_disk_limits.py",
        ("raw_output",),
    ),
    Case(
        "Bounded resources",
        "archive bombs and oversized uploads and bodies",
        "tests/test_archive_limits.py",
    ),
    Case(
        "Bounded resources",
        "request bodies, ids past 64 bits, huge commands, 401s, raw links, 429s",
        "tests/test_request_limits.py",
    ),
    # Ways in
    Case(
        "No way in through Boltz",
        "callback URLs to internal addresses, rebinding, redirects, port scanning",
        "tests/test_callbacks.py",
    ),
    Case(
        "No way in through Boltz",
        "a planted secret grepped in every page and export",
        "tests/test_secrets_nowhere.py",
    ),
    Case(
        "No way in through Boltz",
        "every page, admin page and API route against five users",
        "tests/test_access.py",
    ),
    Case(
        "No way in through Boltz",
        "production settings pass `manage.py check --deploy`",
        "tests/test_deploy.py",
    ),
    Case("No way in through Boltz", "sign-in rate limit", "tests/test_signin_limit.py"),
    # Faults
    Case(
        "Faults survived, nothing lost",
        "Redis refusing and Redis hanging",
        "tests/test_redis_faults.py",
    ),
    Case(
        "Faults survived, nothing lost",
        "containers killed or removed while live or kept; dockerd restarted mid-attempt",
        "tests/test_container_faults.py",
    ),
    Case(
        "Faults survived, nothing lost",
        "a worker SIGKILLed with and without a replacement; the database locked for the worker",
        "tests/test_lost_hosts.py",
    ),
    Case(
        "Faults survived, nothing lost",
        "two Docker hosts: work spread by free room; one host's dockerd stopped, its worker killed",
        "tests/test_two_hosts.py",
    ),
    Case(
        "Faults survived, nothing lost", "worker lost mid-attempt, reaper", "tests/test_reaper.py"
    ),
    Case(
        "Faults survived, nothing lost",
        "Docker down, capacity full",
        "tests/test_capacity_and_docker_faults.py",
    ),
    # Hostile agents
    Case(
        "Hostile agents",
        "red team, round 1: forging, steering or hiding a result",
        "tests/test_redteam.py",
    ),
    Case("Hostile agents", "red team, round 2", "tests/test_redteam_round2.py"),
    Case("Hostile agents", "red team, round 3", "tests/test_redteam_round3.py"),
    Case("Hostile agents", "tampering with the check's inputs", "tests/test_tamper.py"),
    Case("Hostile agents", "check integrity rules", "tests/test_check_integrity.py"),
    # Fuzzing
    Case("Fuzzed parsers", "every reader of outside data, with Hypothesis", "tests/test_fuzz_"),
]


def run(files: list[str], env: dict[str, str]) -> ET.Element:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-n",
                os.environ.get("TEST_WORKERS", "4"),
                "--dist",
                "loadfile",
                f"--junitxml={report}",
                "-o",
                "junit_family=xunit1",
                *files,
            ],
            cwd=ROOT,
            env=env,
            check=False,
        )
        return ET.parse(report).getroot()


def files_of(cases: list[Case]) -> list[str]:
    found: list[str] = []
    for case in cases:
        matches = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(case.file + "*")) or []
        found += [m for m in matches if m.endswith(".py") and m not in found]
    return found


def tally(mine: list[ET.Element]) -> str:
    if not mine:
        return "—"
    bad = [t for t in mine if t.findall("failure") + t.findall("error")]
    skipped = [t for t in mine if t.findall("skipped")]
    passed = len(mine) - len(bad) - len(skipped)
    return f"{passed} of {len(mine)} passed" + (f", {len(skipped)} skipped" if skipped else "")


def row(case: Case, testcases: list[ET.Element], runsc: list[ET.Element] | None) -> str:
    mine = [t for t in testcases if case.holds(t)]
    passed = [
        t for t in mine if not t.findall("failure") + t.findall("error") + t.findall("skipped")
    ]
    skipped = [t for t in mine if t.findall("skipped")]
    seconds = sum(float(t.get("time", 0)) for t in mine)
    figures = [
        p.get("value", "") for t in mine for p in t.iter("property") if p.get("name") == "figure"
    ]
    result = f"{len(passed)} of {len(mine)} passed" + (
        f", {len(skipped)} skipped" if skipped else ""
    )
    if not mine:
        result = "no tests found"
    under_gvisor = ""
    if runsc is not None:
        under_gvisor = f" {tally([t for t in runsc if case.holds(t)])} |"
    return (
        f"| {case.what} | `{case.command}` | {result} ({seconds:.0f} s) |{under_gvisor} "
        f"{'; '.join(figures).replace('|', '/') or '—'} |"
    )


def document(testcases: list[ET.Element], runsc: list[ET.Element] | None = None) -> str:
    lines = [
        "# Reliability",
        "",
        "Every hostile agent, fault, access case and fuzz target Boltz is tried against, on the",
        "real services (Docker, Redis, a Celery worker, a served web process, Chromium), with",
        "the command that runs it and what this run found. Regenerated by `make reliability`",
        "(`scripts/reliability.py`): the figures are what the tests measured and recorded, not",
        "written by hand.",
        "",
        f"Run on {datetime.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} "
        f"cores, Python {platform.python_version()}"
        + (
            f", BOLTZ_RUNTIME={os.environ['BOLTZ_RUNTIME']}"
            if os.environ.get("BOLTZ_RUNTIME")
            else ""
        )
        + ".",
    ]
    if runsc is not None:
        lines += [
            "",
            "Under gVisor: the same tests run by `make test-runsc` with BOLTZ_RUNTIME=runsc "
            "(the hostile agents and the disk limits; the others do not depend on the runtime).",
        ]
    gvisor = (" under gVisor |", " --- |") if runsc is not None else ("", "")
    for section in dict.fromkeys(c.section for c in CASES):
        lines += [
            "",
            f"## {section}",
            "",
            f"| case | command | result |{gvisor[0]} figures |",
            f"| --- | --- | --- |{gvisor[1]} --- |",
        ]
        lines += [row(c, testcases, runsc) for c in CASES if c.section == section]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", help="the file to write (else printed)")
    parser.add_argument("--from", dest="reports", help="a folder of junit.xml reports")
    args = parser.parse_args()
    runsc = None
    if args.reports:
        root = ET.parse(Path(args.reports) / "junit.xml").getroot()
        if (Path(args.reports) / "junit-runsc.xml").is_file():
            runsc = list(
                ET.parse(Path(args.reports) / "junit-runsc.xml").getroot().iter("testcase")
            )
    else:
        root = run(files_of(CASES), {**os.environ})
    text = document(list(root.iter("testcase")), runsc)
    if args.write:
        Path(args.write).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
