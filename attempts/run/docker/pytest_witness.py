"""Boltz's pytest plugin: a witness of a check that the code under test cannot take back.

This file is not imported by Boltz. Before a check, Boltz copies it into the check's container,
owned by root and under a module name made for that check, and loads it into every pytest run
of the check (`-p` in PYTEST_ADDOPTS, its folder on PYTHONPATH). Each pytest run writes lines
to the pipe $BOLTZ_WITNESS_PIPE: one as it starts, one for each collector that fails or is
skipped, one with the number of tests it collected, one as each test ends (its outcome) and one
with pytest's exit status as it ends. The pipe is read by a collector of Boltz's that runs as a
user of its own, and every line leaves the sandbox as it is written: whatever the code under
test writes afterwards, it cannot change what was already seen.

Every skip comes with the files it passed through (`stack`): the frames between the test and
the raise, and the module of the exception's class, library files left out. Boltz, which knows
what the agent wrote, counts a skip that went through the agent's code (or through code outside
the working folder and the libraries) as an error: skipping is the test's or the task's to
decide, not the code's it tests. Expected failures (xfail) stay skips.
Standard library and pytest only; runs under the task's own Python.
"""

import contextlib
import json
import os
import sys

import pytest

_PIPE = os.environ.get("BOLTZ_WITNESS_PIPE", "")
_RUN = {"fd": None, "id": "", "root": ""}
_LINE_MAX = 3800  # one write of less than PIPE_BUF bytes is never split or interleaved


def _send(event, **fields):
    fd = _RUN["fd"]
    if fd is None:
        return
    record = {"run": _RUN["id"], "event": event, **fields}
    # Each line starts with a newline too: a line someone else left unfinished on the pipe
    # cannot swallow this one.
    line = "\n" + json.dumps(record, separators=(",", ":")) + "\n"
    if len(line.encode()) > _LINE_MAX and "id" in fields:
        record["id"] = fields["id"][:1000]
        line = "\n" + json.dumps(record, separators=(",", ":")) + "\n"
    try:
        os.write(fd, line.encode()[:_LINE_MAX])
    except OSError:
        _RUN["fd"] = None  # the collector is gone: the check will say so


def _library_dirs():
    """Where the interpreter's own and installed libraries live: frames there are not the
    code under test (pytest's own frames among them)."""
    import site
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/lib", "/usr/local/lib"}
    dirs.update(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib"))
    with contextlib.suppress(AttributeError):  # a virtualenv's old site module lacks it
        dirs.update(site.getsitepackages())
    dirs.add(os.path.dirname(os.path.abspath(__file__)))  # this plugin's own folder
    return tuple(d.rstrip("/") + "/" for d in dirs if d and d.startswith("/"))


_LIBRARIES = ()


def _stack(error):
    """The files a skip passed through that may be the code under test: every frame's file
    (the code's, and its module's: code compiled under another name still has its module's
    globals), and the module of the exception's class; library files left out. Paths in the
    working folder are relative; Boltz decides which of them the agent wrote."""
    global _LIBRARIES
    if not _LIBRARIES:
        _LIBRARIES = _library_dirs()
    root = _RUN["root"].rstrip("/") + "/"
    names = []
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        names.append(frame.f_code.co_filename)
        names.append(frame.f_globals.get("__file__"))
        tb = tb.tb_next
    module = sys.modules.get(getattr(type(error), "__module__", ""), None)
    names.append(getattr(module, "__file__", None))
    found = []
    for name in names:
        if not isinstance(name, str) or not name:
            continue
        path = os.path.abspath(name) if name.startswith("/") else name
        if path.startswith(root):
            path = path[len(root) :]
        elif not path.startswith("/") or path.startswith(_LIBRARIES):
            continue
        if path not in found:
            found.append(path[:500])
    return found[:30]


def _is_skip(error):
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"Skipped", "SkipTest"}) and "XFailed" not in names


_SKIPS = {}  # nodeid -> the files a skip raised in it passed through


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # First of all (before pytest turns a unittest.SkipTest into its own skip, raised from
    # its own code): what did this skip pass through?
    excinfo = call.excinfo
    if _RUN["fd"] is not None and excinfo is not None and _is_skip(excinfo.value):
        _SKIPS.setdefault(item.nodeid, [])
        _SKIPS[item.nodeid] += [p for p in _stack(excinfo.value) if p not in _SKIPS[item.nodeid]]
    yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    # A module skipped while it is imported: see what the skip passed through, as it leaves.
    if _RUN["fd"] is None:
        yield
        return
    original = collector.collect

    def collect():
        try:
            return original()
        except BaseException as error:
            if _is_skip(error):
                _SKIPS[collector.nodeid] = _stack(error)
            raise

    collector.collect = collect
    try:
        yield
    finally:
        collector.__dict__.pop("collect", None)


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
        _send("collect", id=report.nodeid, outcome="skipped", stack=_SKIPS.get(report.nodeid, []))


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
    if outcome == "skipped" and getattr(report, "wasxfail", None) is None:
        _send("test", id=report.nodeid, outcome=outcome, stack=_SKIPS.get(report.nodeid, []))
        return
    _send("test", id=report.nodeid, outcome=outcome)


def pytest_sessionfinish(session, exitstatus):
    _send("end", exitstatus=int(exitstatus))
