"""Boltz's pytest plugin: a witness of a check that the code under test cannot take back.

This file is not imported by Boltz. Before a check, Boltz copies it into the check's container,
owned by root and under a module name made for that check, and loads it into every pytest run
of the check (`-p` in PYTEST_ADDOPTS, its folder on PYTHONPATH). Each pytest run writes one line
to the pipe $BOLTZ_WITNESS_PIPE as it starts, one as each test ends (its outcome) and one with
pytest's exit status as it ends. The pipe is read by a collector of Boltz's that runs as a user
of its own, and every line leaves the sandbox as it is written: whatever the code under test
writes afterwards, it cannot change what was already seen. A run whose end never came ended
early (an `os._exit`, a crash): Boltz does not trust such a check.
Standard library only; runs under the task's own Python.
"""

import json
import os

_PIPE = os.environ.get("BOLTZ_WITNESS_PIPE", "")
_RUN = {"fd": None, "id": ""}
_LINE_MAX = 3800  # one write of less than PIPE_BUF bytes is never split or interleaved


def _send(event, **fields):
    fd = _RUN["fd"]
    if fd is None:
        return
    record = {"run": _RUN["id"], "event": event, **fields}
    line = json.dumps(record, separators=(",", ":")) + "\n"
    if len(line.encode()) > _LINE_MAX and "id" in fields:
        record["id"] = fields["id"][:1000]
        line = json.dumps(record, separators=(",", ":")) + "\n"
    try:
        os.write(fd, line.encode()[:_LINE_MAX])
    except OSError:
        _RUN["fd"] = None  # the collector is gone: the check will say so


def pytest_configure(config):
    if not _PIPE or hasattr(config, "workerinput"):
        return  # no pipe, or an xdist worker: its controller reports every test
    try:
        _RUN["fd"] = os.open(_PIPE, os.O_WRONLY)
    except OSError:
        return  # no witness of this run: the check's other sources stand alone
    _RUN["id"] = f"{os.getpid()}-{os.urandom(4).hex()}"
    _send("start")


def pytest_runtest_logreport(report):
    if report.outcome not in ("passed", "failed", "skipped"):
        return  # "rerun" and other interim outcomes of plugins
    if report.when != "call" and report.outcome == "passed":
        return
    outcome = report.outcome
    if report.when != "call" and outcome == "failed":
        outcome = "error"
    _send("test", id=report.nodeid, outcome=outcome)


def pytest_sessionfinish(session, exitstatus):
    _send("end", exitstatus=int(exitstatus))
