"""Boltz's pytest plugin: a second witness of a check, beside its exit code and its own reports.

This file is not imported by Boltz. Before a check, Boltz copies it into the check's container,
owned by root and under a module name no agent can guess, and loads it into every pytest run of
the check (`-p` in PYTEST_ADDOPTS, its folder on PYTHONPATH). Each pytest run writes one JSON
file to $BOLTZ_WITNESS_DIR: as it starts (`finished: false`), then with every test's outcome
and pytest's exit status when it ends. A run that started and never finished ended early (an
`os._exit` in the code under test, a crash): Boltz does not trust such a check.
Standard library only; runs under the task's own Python.
"""

import json
import os

_DIR = os.environ.get("BOLTZ_WITNESS_DIR", "")
_RUN = {"path": "", "tests": {}}
_WORSE = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _write(finished, exitstatus=None):
    if not _RUN["path"]:
        return
    data = {"finished": finished, "exitstatus": exitstatus, "tests": _RUN["tests"]}
    partial = _RUN["path"] + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(partial, _RUN["path"])


def pytest_configure(config):
    if not _DIR or not os.path.isdir(_DIR) or hasattr(config, "workerinput"):
        return  # no folder, or an xdist worker: its controller reports every test
    _RUN["path"] = os.path.join(_DIR, f"run-{os.getpid()}-{len(os.listdir(_DIR))}.json")
    _write(False)


def pytest_runtest_logreport(report):
    if report.outcome not in ("passed", "failed", "skipped"):
        return  # "rerun" and other interim outcomes of plugins
    if report.when != "call" and report.outcome == "passed":
        return
    outcome = report.outcome
    if report.when != "call" and outcome == "failed":
        outcome = "error"
    seen = _RUN["tests"].get(report.nodeid)
    if seen is None or _WORSE[outcome] > _WORSE[seen]:
        _RUN["tests"][report.nodeid] = outcome


def pytest_sessionfinish(session, exitstatus):
    _write(True, int(exitstatus))
