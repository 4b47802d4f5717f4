"""The environment of a test run, loaded as a pytest plugin (`-p boltz_web.testing`) so it is in
place before pytest-django reads the settings. It isolates a test run from a demo on the same
host: its own data folder, Redis database, queue, and container instance label.
Values already in the environment win.

Under pytest-xdist (`make test` runs `-n`), each worker process is a test run of its own: the
values this plugin chose in the controlling process (which the workers inherit) are chosen again
in each worker, with its own Redis database (15, 14, ... for gw0, gw1, ...), so that no worker
flushes, reads or reaps what another made. Values set by the user still win.
"""

import os
import tempfile

_CHOSEN = "BOLTZ_TEST_CHOSEN"  # the names this plugin set, for the workers to set again
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a worker


def process_tag(pid: int) -> str:
    """`pid-starttime` of a running process, "" if there is none: a process id alone is
    used again (pid_max is 32768 on some machines), with its start time it names one run."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return ""
    return f"{pid}-{fields[19]}"  # field 22 of stat: the start time, in clock ticks


def _redis_url() -> str:
    """The run's Redis database: BOLTZ_TEST_REDIS_DB (15 unless set; `make test-runsc` takes 9
    so both can run at once), counting down for each xdist worker, never 0 (the demo's)."""
    first = int(os.environ.get("BOLTZ_TEST_REDIS_DB", "15"))
    index = int(_worker[2:]) if _worker.startswith("gw") else 0
    if first - index < 1:
        raise RuntimeError(
            f"BOLTZ_TEST_REDIS_DB={first} leaves no Redis database for test worker {_worker}: "
            "run fewer workers (-n) or start from a higher database"
        )
    return f"redis://127.0.0.1:6379/{first - index}"


_DEFAULTS = {
    "BOLTZ_INSTANCE": f"boltz-test-{process_tag(os.getpid())}",
    "BOLTZ_HOST": "test-host",
    "BOLTZ_QUEUE": f"boltz-test-{os.getpid()}",
    "BOLTZ_REDIS_URL": _redis_url(),
    "BOLTZ_MAX_SANDBOXES": "2",
    # Tests receive callbacks on listeners of this host: only 127.0.0.1 is let through (the
    # refusals are tested on a web process started without it, tests/test_callbacks.py).
    "BOLTZ_CALLBACK_ALLOW": "127.0.0.1",
}

_chosen_before = set(filter(None, os.environ.get(_CHOSEN, "").split(",")))
if _worker:  # chosen again here: the controller's choices are not this worker's
    for _name in _chosen_before:
        os.environ.pop(_name, None)
_chosen = set()
for _name, _value in _DEFAULTS.items():
    if _name not in os.environ:
        os.environ[_name] = _value
        _chosen.add(_name)
if "BOLTZ_DATA_DIR" not in os.environ:
    os.environ["BOLTZ_DATA_DIR"] = tempfile.mkdtemp(prefix="boltz-test-")
    os.environ["BOLTZ_TEST_OWNS_DATA_DIR"] = "1"
    _chosen.add("BOLTZ_DATA_DIR")
os.environ[_CHOSEN] = ",".join(sorted(_chosen))
