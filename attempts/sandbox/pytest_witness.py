"""Boltz's pytest plugin: a witness of a check that the code under test cannot take back.

This file is not imported by Boltz. Before a check, Boltz copies it into the check's container,
owned by root and under a module name made for that check, and loads it into every pytest run
of the check (`-p` in PYTEST_ADDOPTS, its folder on PYTHONPATH). Each pytest run writes lines
to the pipe $BOLTZ_WITNESS_PIPE: one as it starts, one for each collector that fails or is
skipped, one with the number of tests it collected, one as each test ends (its outcome) and one
with pytest's exit status as it ends. The pipe is read by a collector of Boltz's that runs as a
user of its own, and every line leaves the sandbox as it is written: whatever the code under
test writes afterwards, it cannot change what was already seen.

A skip that comes from the code under test (a `unittest.SkipTest` or `pytest.skip` raised in a
module of the working folder that is not a test file) is reported as an error: skipping is the
test's or the task's to decide, not the code's it tests. Expected failures (xfail) stay skips.
Standard library and pytest only; runs under the task's own Python.
"""

import json
import os

import pytest

_PIPE = os.environ.get("BOLTZ_WITNESS_PIPE", "")
_RUN = {"fd": None, "id": "", "root": ""}
_LINE_MAX = 3800  # one write of less than PIPE_BUF bytes is never split or interleaved
_TEST_FOLDERS = ("test", "tests", "testing")


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


def _is_test_file(path):
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return (
        name == "conftest.py"
        or name.startswith("test_")
        or name.endswith("_test.py")
        or any(part in _TEST_FOLDERS for part in parts[:-1])
    )


def _under_test(path, line):
    """`path:line` when `path` is code of the working folder that is not a test file (the code
    under test); else "" (a test file, pytest's own code, a library's)."""
    path = os.path.abspath(str(path))
    root = _RUN["root"].rstrip("/")
    if not root or not path.startswith(root + "/"):
        return ""
    relative = path[len(root) + 1 :]
    return "" if _is_test_file(relative) else f"{relative}:{line}"


def _skipped_by_code_under_test(report):
    """Where a skip came from, when that is the code under test (see _under_test)."""
    if getattr(report, "wasxfail", None) is not None:
        return ""
    if report.nodeid in _SKIPS:
        return _SKIPS[report.nodeid]
    longrepr = report.longrepr
    if not isinstance(longrepr, tuple) or len(longrepr) != 3:
        return ""
    return _under_test(longrepr[0], longrepr[1])


def _raised_in(excinfo):
    """The deepest frame of the working folder a skip passed through: where the code that
    raised it lives (frames the code marks hidden from tracebacks included)."""
    found, tb = "", excinfo.tb
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if _RUN["root"] and path.startswith(_RUN["root"].rstrip("/") + "/"):
            found = _under_test(path, tb.tb_lineno)
        tb = tb.tb_next
    return found


def _is_skip(error):
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"Skipped", "SkipTest"}) and "XFailed" not in names


_SKIPS = {}  # nodeid -> where the code under test raised a skip in it


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # First of all (before pytest turns a unittest.SkipTest into its own skip, raised from
    # its own code): where was this skip raised?
    excinfo = call.excinfo
    if _RUN["fd"] is not None and excinfo is not None and _is_skip(excinfo.value):
        where = _raised_in(excinfo)
        if where:
            _SKIPS[item.nodeid] = where
    yield


def pytest_configure(config):
    if not _PIPE or hasattr(config, "workerinput"):
        return  # no pipe, or an xdist worker: its controller reports every test
    try:
        _RUN["fd"] = os.open(_PIPE, os.O_WRONLY)
    except OSError:
        return  # no witness of this run: the check's other sources stand alone
    _RUN["id"] = f"{os.getpid()}-{os.urandom(4).hex()}"
    _RUN["root"] = os.environ.get("BOLTZ_WITNESS_ROOT") or os.getcwd()  # the working folder
    # A run that only collects (--collect-only) reports no test, and says so.
    _send("start", collect_only=bool(getattr(config.option, "collectonly", False)))


def pytest_collectreport(report):
    if report.outcome == "failed":
        _send("collect", id=report.nodeid, outcome="error")
    elif report.outcome == "skipped":
        where = _skipped_by_code_under_test(report)
        if where:
            _send("collect", id=report.nodeid, outcome="error", skipped_by=where)


def pytest_collection_finish(session):
    _send("collected", count=len(session.items))


def pytest_runtest_logreport(report):
    if report.outcome not in ("passed", "failed", "skipped"):
        return  # "rerun" and other interim outcomes of plugins
    if report.when != "call" and report.outcome == "passed":
        return
    outcome = report.outcome
    if report.when != "call" and outcome == "failed":
        outcome = "error"
    if outcome == "skipped":
        where = _skipped_by_code_under_test(report)
        if where:
            _send("test", id=report.nodeid, outcome="error", skipped_by=where)
            return
    _send("test", id=report.nodeid, outcome=outcome)


def pytest_sessionfinish(session, exitstatus):
    _send("end", exitstatus=int(exitstatus))
