"""Environment causes of a failed command, read from its output: a missing tool, a withheld
permission, no network; and no blame for ordinary test failures."""

import pytest

from attempts.run.diagnosis import QUOTE, TAIL, environment_cause, explain

APT_AS_USER = """\
+ apt-get update
Reading package lists...
E: Could not open lock file /var/lib/apt/lists/lock - open (13: Permission denied)
E: Unable to lock directory /var/lib/apt/lists/
+ apt-get install -y jq
E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)
E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?
"""

PIP_AS_USER = """\
Defaulting to user installation because normal site-packages is not writeable
Collecting requests
  Using cached requests-2.32.3-py3-none-any.whl (64 kB)
Installing collected packages: requests
ERROR: Could not install packages due to an OSError: [Errno 13] Permission denied: \
'/usr/local/lib/python3.11/site-packages/requests'
Consider using the `--user` option or check the permissions.

"""

PIP_OFFLINE = """\
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after \
connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection \
object at 0x7f3b2c1d0e50>: Failed to establish a new connection: [Errno -3] Temporary failure \
in name resolution')': /simple/requests/
WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after \
connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection \
object at 0x7f3b2c1d1a10>: Failed to establish a new connection: [Errno -3] Temporary failure \
in name resolution')': /simple/requests/
ERROR: Could not find a version that satisfies the requirement requests (from versions: none)
ERROR: No matching distribution found for requests
"""

PYTEST_FAILURE = """\
============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0
rootdir: /app
collected 4 items

tests/test_files.py::test_file_not_found PASSED                          [ 25%]
tests/test_files.py::test_permission_denied_is_reported PASSED           [ 50%]
tests/test_files.py::test_command_not_found PASSED                       [ 75%]
tests/test_files.py::test_totals FAILED                                  [100%]

=================================== FAILURES ===================================
_________________________________ test_totals __________________________________

    def test_totals():
        out = run(["report", "--total"])
>       assert out == "total: 3"
E       AssertionError: assert 'error: report.csv: not found' == 'total: 3'
E         - total: 3
E         + error: report.csv: not found

tests/test_files.py:31: AssertionError
=========================== short test summary info ============================
FAILED tests/test_files.py::test_totals - AssertionError: assert 'error: report.csv: not ...
========================= 1 failed, 3 passed in 0.12s ==========================
"""


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            "+ apt-get update\nbash: line 1: apt-get: command not found\n",
            "the sandbox image lacks a tool: `bash: line 1: apt-get: command not found`",
        ),
        (
            "/tests/test.sh: line 7: uv: command not found\n",
            "the sandbox image lacks a tool: `/tests/test.sh: line 7: uv: command not found`",
        ),
        ("sh: 1: curl: not found\n", "the sandbox image lacks a tool: `sh: 1: curl: not found`"),
        (
            "/tests/test.sh: 12: pytest: not found\n",
            "the sandbox image lacks a tool: `/tests/test.sh: 12: pytest: not found`",
        ),
        ("/bin/sh: git: not found\n", "the sandbox image lacks a tool: `/bin/sh: git: not found`"),
        (
            "/usr/bin/env: 'python': No such file or directory\n",
            "the sandbox image lacks a tool: `/usr/bin/env: 'python': No such file or directory`",
        ),
        (
            "/usr/bin/env: ‘node’: No such file or directory\n",
            "the sandbox image lacks a tool: `/usr/bin/env: ‘node’: No such file or directory`",
        ),
        (
            "bash: /tests/run.py: /usr/bin/python3: bad interpreter: No such file or directory\n",
            "the sandbox image lacks a tool: "
            "`bash: /tests/run.py: /usr/bin/python3: bad interpreter: No such file or directory`",
        ),
        (
            "timeout: failed to run command 'uv': No such file or directory\n",
            "the sandbox image lacks a tool: "
            "`timeout: failed to run command 'uv': No such file or directory`",
        ),
    ],
)
def test_a_missing_tool(output, expected):
    assert environment_cause(output) == expected


def test_a_missing_python_module():
    output = """\
Traceback (most recent call last):
  File "/tests/check.py", line 3, in <module>
    import numpy as np
ModuleNotFoundError: No module named 'numpy'
"""
    assert environment_cause(output) == (
        "the sandbox image lacks a Python module: `ModuleNotFoundError: No module named 'numpy'`"
    )
    assert "lacks a Python module" in environment_cause(
        "/usr/bin/python3: No module named pytest\n"
    )
    collection = """\
==================================== ERRORS ====================================
_____________________ ERROR collecting tests/test_outputs.py ___________________
ImportError while importing test module '/tests/test_outputs.py'.
tests/test_outputs.py:1: in <module>
    import requests
E   ModuleNotFoundError: No module named 'requests'
=========================== short test summary info ============================
ERROR tests/test_outputs.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
"""
    assert "No module named 'requests'" in environment_cause(collection)


def test_a_module_that_is_not_a_package_is_the_code_not_the_image():
    output = "ModuleNotFoundError: No module named 'app.models'; 'app' is not a package\n"
    assert environment_cause(output) == ""


def test_apt_as_a_user_quotes_the_last_line_that_shows_it():
    assert environment_cause(APT_AS_USER) == (
        "the sandbox withheld a permission: `E: Unable to acquire the dpkg frontend lock "
        "(/var/lib/dpkg/lock-frontend), are you root?`"
    )
    first_lines = APT_AS_USER.splitlines()[:6]
    assert environment_cause("\n".join(first_lines)) == (
        "the sandbox withheld a permission: `E: Could not open lock file "
        "/var/lib/dpkg/lock-frontend - open (13: Permission denied)`"
    )


@pytest.mark.parametrize(
    "output",
    [
        PIP_AS_USER,
        "chown: changing ownership of '/etc/hosts': Operation not permitted\n",
        "mkdir: cannot create directory '/opt/tool': Permission denied\n",
        "E: This command can only be used by root.\n",
        "Error: this script must be run as root\n",
        "You must be root to run this command.\n",
        "sudo: a terminal is required to read the password; either use the -S option\n",
        "agent is not in the sudoers file.  This incident will be reported.\n",
        "OSError: [Errno 30] Read-only file system: '/usr/lib/x'\n",
    ],
)
def test_a_withheld_permission(output):
    assert environment_cause(output).startswith("the sandbox withheld a permission: `")


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (
            "curl: (6) Could not resolve host: example.com\n",
            "curl: (6) Could not resolve host: example.com",
        ),
        (
            "Cloning into 'repo'...\nfatal: unable to access 'https://github.com/o/r.git/': "
            "Could not resolve host: github.com\n",
            "fatal: unable to access 'https://github.com/o/r.git/': "
            "Could not resolve host: github.com",
        ),
        (
            "ssh: Could not resolve hostname github.com: Temporary failure in name resolution\n"
            "fatal: Could not read from remote repository.\n",
            "ssh: Could not resolve hostname github.com: Temporary failure in name resolution",
        ),
        (
            "Ign:1 http://deb.debian.org/debian bookworm InRelease\n"
            "Err:1 http://deb.debian.org/debian bookworm InRelease\n"
            "  Temporary failure resolving 'deb.debian.org'\n"
            "Reading package lists...\n",
            "Temporary failure resolving 'deb.debian.org'",
        ),
        (
            "--2024-05-01 10:00:00--  https://example.com/data.tar.gz\n"
            "Resolving example.com (example.com)... failed: Name or service not known.\n"
            "wget: unable to resolve host address 'example.com'\n",
            "wget: unable to resolve host address 'example.com'",
        ),
        (
            "urllib.error.URLError: <urlopen error [Errno 101] Network is unreachable>\n",
            "urllib.error.URLError: <urlopen error [Errno 101] Network is unreachable>",
        ),
        (
            "npm error code ENOTFOUND\nnpm error syscall getaddrinfo\n"
            "npm error errno ENOTFOUND\nnpm error network request to "
            "https://registry.npmjs.org/left-pad failed, reason: getaddrinfo ENOTFOUND "
            "registry.npmjs.org\n",
            "npm error network request to https://registry.npmjs.org/left-pad failed, "
            "reason: getaddrinfo ENOTFOUND registry.npmjs.org",
        ),
        (
            PIP_OFFLINE,
            "ERROR: No matching distribution found for requests",
        ),
    ],
)
def test_no_network(output, line):
    assert environment_cause(output) == f"the sandbox has no network: `{line}`"


def test_pip_not_finding_a_package_is_no_network_only_after_a_connection_error():
    output = """\
ERROR: Could not find a version that satisfies the requirement reqeusts (from versions: none)
ERROR: No matching distribution found for reqeusts
"""
    assert environment_cause(output) == ""


@pytest.mark.parametrize(
    "output",
    [
        PYTEST_FAILURE,
        "",
        'Traceback (most recent call last):\n  File "main.py", line 4, in <module>\n'
        "    open('data.csv')\nFileNotFoundError: [Errno 2] No such file or directory: "
        "'data.csv'\n",
        # a server of the task's own that is not up is not the sandbox's network
        "curl: (7) Failed to connect to localhost port 8000 after 0 ms: Couldn't connect to "
        "server\n",
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=5000): "
        "Max retries exceeded with url: /health (Caused by NewConnectionError('<urllib3."
        "connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: "
        "[Errno 111] Connection refused'))\n",
        "E       AssertionError: expected 'bash: foo: command not found' in stderr\n",
        "E       assert 'Permission denied' in result.stderr\n",
        "tests/test_net.py::test_could_not_resolve_host_is_reported PASSED    [100%]\n",
        "grep: config.yaml: No such file or directory\n",
        "make: *** [Makefile:12: build] Error 1\n",
        "Error: key 'user' not found\n",
    ],
)
def test_ordinary_failures_are_not_blamed_on_the_environment(output):
    assert environment_cause(output) == ""


def test_the_last_cause_in_the_output_wins_but_a_download_that_failed_explains_a_missing_tool():
    output = (
        "mkdir: cannot create directory '/opt/x': Permission denied\nbash: jq: command not found\n"
    )
    assert environment_cause(output).startswith("the sandbox image lacks a tool: ")
    output = "curl: (6) Could not resolve host: example.com\nbash: line 4: jq: command not found\n"
    assert environment_cause(output).startswith("the sandbox has no network: ")
    output = "bash: line 4: jq: command not found\ncurl: (6) Could not resolve host: example.com\n"
    assert environment_cause(output).startswith("the sandbox has no network: ")


def test_only_the_tail_of_a_long_output_is_read():
    early = "bash: line 1: jq: command not found\n"
    assert environment_cause(early + "x" * 10 + "\n" + "ok\n" * (TAIL // 3)) == ""
    late = "ok\n" * (TAIL // 3) + early
    assert "jq: command not found" in environment_cause(late)


def test_a_cut_first_line_is_not_read():
    line = "bash: line 1: jq: command not found"
    output = line + "\n" + "y" * (TAIL - 5)
    assert environment_cause(output) == ""


def test_colours_and_carriage_returns_do_not_hide_a_cause():
    output = "Progress 10%\rProgress 90%\r\x1b[31mcurl: (6) Could not resolve host: x.org\x1b[0m"
    assert (
        environment_cause(output)
        == "the sandbox has no network: `curl: (6) Could not resolve host: x.org`"
    )


def test_a_long_line_is_quoted_in_part_around_the_cause():
    output = "E: " + "a" * 400 + " are you root? " + "b" * 400
    cause = environment_cause(output)
    quoted = cause.split("`")[1]
    assert "are you root?" in quoted
    assert len(quoted) <= QUOTE + 2
    assert quoted.startswith("…") and quoted.endswith("…")


def test_explain_names_the_stage_and_whose_failure_missing_network_is():
    output = "curl: (6) Could not resolve host: example.com\n"
    assert explain("solution", output) == (
        "the reference solution needs network, which the task's sandbox does not have: the "
        "task's failure, not an agent's: `curl: (6) Could not resolve host: example.com`"
    )
    # A check's output holds the agent's code's too: whose need it is shows only where the
    # task is known to pass its check without network.
    assert explain("the check", output).startswith(
        "the check needs network, which its sandbox does not have (the task's verifier, or the "
        "agent's code it ran)"
    )
    assert explain("the check of a valid task", output).startswith(
        "the agent's code needs network, which this task's sandbox does not have"
    )
    assert explain("the agent", output).startswith(
        "the agent's command needs network, which this task's sandbox does not have: `curl"
    )
    assert explain("the setup script", output).startswith(
        "the setup script failed on the environment: "
    )
    assert explain("agent", "bash: line 1: jq: command not found\n") == (
        "the agent's command failed on the environment: the sandbox image lacks a tool: "
        "`bash: line 1: jq: command not found`"
    )


def test_a_tool_missing_after_a_download_failed_on_the_network_is_the_network():
    output = (
        "curl: (6) Could not resolve host: astral.sh\n"
        "/tests/test.sh: line 4: uvx: command not found\n"
    )
    assert environment_cause(output) == (
        "the sandbox has no network: `curl: (6) Could not resolve host: astral.sh`"
    )
    assert "jq" in environment_cause("bash: jq: command not found\n")  # no network seen
    assert explain("verifier", PYTEST_FAILURE) == ""
