"""The environment of a test run, loaded as a pytest plugin (`-p boltz_web.testing`) so it is in
place before pytest-django reads the settings. It isolates a test run from a demo on the same
host: its own data folder, Redis database, queue, and container instance label.
Values already in the environment win.
"""

import os
import tempfile

_DEFAULTS = {
    "BOLTZ_INSTANCE": f"boltz-test-{os.getpid()}",
    "BOLTZ_HOST": "test-host",
    "BOLTZ_QUEUE": f"boltz-test-{os.getpid()}",
    "BOLTZ_REDIS_URL": "redis://127.0.0.1:6379/15",
    "BOLTZ_MAX_SANDBOXES": "2",
    # Tests receive callbacks on listeners of this host: only 127.0.0.1 is let through (the
    # refusals are tested on a web process started without it, tests/test_callbacks.py).
    "BOLTZ_CALLBACK_ALLOW": "127.0.0.1",
}

for _name, _value in _DEFAULTS.items():
    os.environ.setdefault(_name, _value)
if "BOLTZ_DATA_DIR" not in os.environ:
    os.environ["BOLTZ_DATA_DIR"] = tempfile.mkdtemp(prefix="boltz-test-")
    os.environ["BOLTZ_TEST_OWNS_DATA_DIR"] = "1"
